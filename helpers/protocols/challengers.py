"""Notebook 10's study in one object: :class:`ChallengersStudy` holds each step of the anchors against their
challengers as a named result, computed on first use and stored on disk by its own protocol, and gives the
notebook's claims from one call (as :class:`helpers.protocols.after.AfterStudy` does for notebook 11).

``study.gathering.label`` is what ``gathering_intervals(gathering_runs(...))["label"]`` holds, ``study.anchors.
relabelled`` what ``specificity_intervals(...)["relabelled"]`` holds. The protocols underneath keep their
functions, criteria and stored steps (:mod:`helpers.protocols.saliency_classes`,
:mod:`~helpers.protocols.isolation_classes`, :mod:`~helpers.protocols.label_reading`,
:mod:`~helpers.protocols.label_gathering`, :mod:`~helpers.protocols.compression_specific`,
:mod:`~helpers.protocols.rankings`, :mod:`~helpers.protocols.head_ablation`, :mod:`~helpers.protocols.head_scores`,
:mod:`~helpers.protocols.aucroc_span`, :mod:`~helpers.protocols.compression_span`), so the study computes exactly
what calling them one by one computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from helpers.experiments.head_ablation import swap_averaged
from helpers.experiments.isolation_classes import class_conditions
from helpers.experiments.saliency_classes import CHALLENGERS
from helpers.protocols import aucroc_span as asp
from helpers.protocols import compression_span as csp
from helpers.protocols import compression_specific as cs
from helpers.protocols import head_ablation as ha
from helpers.protocols import head_scores as hs
from helpers.protocols import isolation_classes as ic
from helpers.protocols import label_gathering as lg
from helpers.protocols import label_reading as lr
from helpers.protocols import saliency_classes as sc
from helpers.protocols.after import Named
from helpers.protocols.rankings import HeadRankings, head_rankings
from helpers.study.claims import Claim, measured_on
from helpers.study.profile_table import Profile
from helpers.study.profiles import current_model_name, label_span_sizes, study_tasks

__all__ = ["ChallengersStudy"]


@dataclass(eq=False)
class ChallengersStudy:
    """Notebook 10 on ``model``: ``tasks`` and the sizes of each part (the flows, the isolation and the checks
    sized like it, the head rankings and ablations, the label spans); :meth:`of` builds it from a profile as the
    notebook does."""

    model: Any
    tasks: tuple[str, ...]
    flow_sizes: Any
    isolation_sizes: Any
    head_sizes: Any
    span_sizes: Any
    profile: Profile | None = None

    @classmethod
    def of(cls, model, profile: Profile) -> ChallengersStudy:
        """The study at ``profile``'s sizes (:func:`study_tasks`; each protocol's sizes function)."""
        return cls(model, tuple(study_tasks(profile)), sc.class_saliency_sizes(profile),
                   ic.class_isolation_sizes(profile), hs.head_score_sizes(profile), label_span_sizes(profile),
                   profile)

    # ------------------------------------------------------------------ the positions: flows and isolation

    @cached_property
    def flow_runs(self) -> dict:
        """:func:`~helpers.protocols.saliency_classes.class_saliency_runs`: each class's flows per (task, seed)."""
        return sc.class_saliency_runs(self.model, self.tasks, self.flow_sizes)

    @cached_property
    def flow_frame(self):
        """The flows into each class and from each class into q, per layer: a ``pandas.DataFrame``."""
        return sc.class_flow_frame(self.flow_runs)

    @cached_property
    def loyalty(self) -> dict:
        """:func:`~helpers.protocols.isolation_classes.class_loyalty_intervals` of the class isolation runs, keyed
        as that function keys them (the figures and tables read them so)."""
        return ic.class_loyalty_intervals(ic.class_isolation_runs(self.model, self.tasks, self.isolation_sizes))

    @cached_property
    def isolation_shown(self) -> dict:
        """The loyalty of the label words, each challenger's class and their controls, by (condition, where): what
        the isolation figure shows."""
        shown = class_conditions(("label", *CHALLENGERS))
        return {key: iv for key, iv in self.loyalty.items() if len(key) == 2 and key[0] in shown}

    # ------------------------------------------------------------------ the specific checks

    @cached_property
    def reading_runs(self) -> dict:
        """:func:`~helpers.protocols.label_reading.reading_runs`: the causal label reading per (task, seed)."""
        return lr.reading_runs(self.model, self.tasks, self.isolation_sizes)

    @cached_property
    def reading(self) -> Named:
        """The causal label reading: ``difference`` (answers moved with the label positions patched minus with as
        many content positions), the two shares ``label_positions`` and ``content_positions``, and ``aligned``,
        the share of inputs whose donor had their positions."""
        shares = lr.reading_shares(self.reading_runs)
        return Named({"difference": lr.reading_interval(self.reading_runs),
                      "label_positions": shares["label positions"],
                      "content_positions": shares["as many content positions"],
                      "aligned": lr.kept_share(self.reading_runs)})

    @cached_property
    def gathering(self) -> Named:
        """Accuracy with the label words' own-text links blocked (``label``), with as many content links
        (``control``), and ``drop`` (control minus label), first ``k`` layers."""
        return Named(lg.gathering_intervals(lg.gathering_runs(self.model, self.tasks, self.isolation_sizes)))

    @cached_property
    def _anchors(self) -> dict:
        return cs.specificity_intervals(cs.specificity_runs(self.model, self.tasks, self.isolation_sizes))

    @cached_property
    def anchors(self) -> Named:
        """Label loyalty of Hidden_anchor (``anchor``), of the anchors built from relabelled demonstrations
        (``relabelled``) and with the text hidden in place (``in_place``), and Hidden_anchor's minus each
        (``anchor_minus_relabelled``, ``anchor_minus_in_place``)."""
        return Named({k.replace(" - ", "_minus_"): v for k, v in self._anchors.items()})

    # ------------------------------------------------------------------ the heads

    @cached_property
    def rankings(self) -> HeadRankings:
        """The three rankings' scores per head and each one's top heads (:func:`head_rankings`)."""
        return head_rankings(self.model, self.tasks, self.head_sizes)

    @cached_property
    def heads(self) -> dict:
        """Each ranking's top heads against random heads: the 95% intervals of
        :func:`~helpers.protocols.head_scores.head_set_intervals`, keyed as it keys them."""
        s = self.head_sizes
        ablated = ha.head_sets_runs(self.model, self.tasks, self.rankings.top, s.ablation_sizes())
        return hs.head_set_intervals(ha.sets_cells(ablated))

    @cached_property
    def heads_foobar(self) -> dict:
        """The same on the foo/bar prompts, swap-averaged over both assignments of the two words."""
        foobar = ha.head_sets_foobar_runs(self.model, self.tasks, self.rankings.top, self.head_sizes.foobar_sizes())
        return hs.head_set_intervals(ha.sets_cells(swap_averaged(foobar["foo/bar"], foobar["bar/foo"])))

    # ------------------------------------------------------------------ the label word's span

    @cached_property
    def span_loyalty(self) -> dict:
        """The isolation of the label word's first token against all its tokens, keyed as
        :func:`~helpers.protocols.isolation_classes.class_loyalty_intervals` keys it."""
        return ic.class_loyalty_intervals(ic.span_isolation_runs(self.model, self.span_sizes))

    @cached_property
    def span_auc_runs(self) -> dict:
        """:func:`~helpers.protocols.aucroc_span.span_aucroc_runs`."""
        return asp.span_aucroc_runs(self.model, self.span_sizes)

    @cached_property
    def span_auc_curves(self):
        """AUCROC_l per layer with the first token or the whole label word (a ``pandas.DataFrame``)."""
        return asp.span_aucroc_curves(self.span_auc_runs)

    @cached_property
    def span_anchor(self) -> dict:
        """Hidden_anchor keeping the first token or the whole label word
        (:func:`~helpers.protocols.compression_span.span_anchor_intervals`)."""
        return csp.span_anchor_intervals(csp.span_anchor_runs(self.model, self.span_sizes))

    # ------------------------------------------------------------------ the verdicts

    def claims(self, context: str | None = None) -> list[Claim]:
        """Every claim of notebook 10, graded by its protocol's criterion, each naming the tasks it ran on where
        they are not the profile's (and the foo/bar rows the task they ran on)."""
        context = context if context is not None else f"{current_model_name()}, {len(self.flow_sizes.seeds)} seed(s)"
        k = self.isolation_sizes.k
        out = (sc.class_saliency_claims(sc.class_flow_intervals(self.flow_runs, self.model.cfg.n_layers), context)
               + ic.class_isolation_claims(self.loyalty, k, context)
               + hs.head_set_claims(self.heads, self.rankings.n_top, context, foobar=self.heads_foobar)
               + [lr.reading_claim(self.reading.difference, context=context),
                  lg.gathering_claim(dict(self.gathering), k, context=context),
                  *cs.specificity_claims(self._anchors, context=context),
                  ic.span_isolation_claim(self.span_loyalty, self.span_sizes.k, context),
                  asp.span_aucroc_claim(asp.span_aucroc_interval(self.span_auc_runs), context),
                  csp.span_anchor_claim(self.span_anchor, context)])
        if self.profile is not None:
            out = measured_on(out, self.tasks, self.profile.tasks)
        return ha.foobar_measured_on(out, self.tasks)

    def sizes(self) -> dict:
        """Every part's sizes and the top heads, as the notebook's record keeps them."""
        return {"flow_sizes": self.flow_sizes.as_dict(), "isolation_sizes": self.isolation_sizes.as_dict(),
                "head_sizes": self.head_sizes.as_dict(), "span_sizes": self.span_sizes.as_dict(),
                "top_heads": self.rankings.top}
