"""Notebook 11's study in one object: :class:`AfterStudy` holds each step of the three accounts after the anchors as
a named result, computed on first use and stored on disk by its own protocol, and gives the notebook's claims from
one call.

TransformerLens' ``ActivationCache`` is the model: one object, results read by name. ``study.isolated.flipped.label``
is what ``flipped_isolation_intervals(runs)[("flipped", "label")]`` holds, ``study.layered.aggregation.upper`` what
``layered_intervals(...)[("aggregation", "upper")]`` holds. The protocols underneath keep their functions, criteria
and stored steps (:mod:`helpers.protocols.flipped_labels`, :mod:`~helpers.protocols.flipped_specific`,
:mod:`~helpers.protocols.isolation_context`, :mod:`~helpers.protocols.saliency_context`,
:mod:`~helpers.protocols.query_stages`, :mod:`~helpers.protocols.power`), so the study computes exactly what
calling them one by one computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from helpers.protocols import flipped_labels as fl
from helpers.protocols import flipped_specific as fsp
from helpers.protocols import isolation_context as ik
from helpers.protocols import query_stages as qs
from helpers.protocols import saliency_context as sx
from helpers.study.claims import Claim, measured_on
from helpers.study.profile_table import Profile
from helpers.study.profiles import AfterSizes, after_sizes, after_tasks, current_model_name

__all__ = ["Named", "AfterStudy"]


class Named(Mapping):
    """Results read by name as attributes (``named.flipped.label``) or as keys (``named["flipped"]["label"]``); a
    nested mapping keyed by names is a :class:`Named` too (one keyed by tasks or tuples stays a mapping). An unknown
    name says which names there are."""

    def __init__(self, values: Mapping[str, Any]):
        bad = [k for k in values if not (isinstance(k, str) and k.isidentifier())]
        if bad:
            raise ValueError(f"result names must be identifiers, got {bad}")
        self._values = {k: Named(v) if _named_keys(v) else v for k, v in values.items()}

    def __getattr__(self, name: str):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"no result named {name!r}: the names here are {sorted(values)}")

    def __getitem__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"no result named {name!r}: the names here are {sorted(self._values)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Named({', '.join(self._values)})"


def _named_keys(v) -> bool:
    """Whether ``v`` is a plain mapping whose keys are all names (a mapping keyed by tasks, mappings or tuples
    stays a mapping)."""
    return (isinstance(v, Mapping) and not isinstance(v, Named) and bool(v)
            and all(isinstance(k, str) and k.isidentifier() for k in v))


def _snake(key: str) -> str:
    """``"natural accuracy"`` -> ``natural_accuracy``, ``"truth - prompt"`` -> ``truth_minus_prompt``."""
    return key.replace(" - ", " minus ").replace(",", "").replace("-", "_").replace(" ", "_")


@dataclass(eq=False)
class AfterStudy:
    """Notebook 11 on ``model``: ``tasks`` and ``sizes`` (:func:`after_sizes`, its head sets the share arXiv
    2505.18752 ablates), ``profile`` the profile notebook 02 ran with (its stored isolation is read where it holds
    the same prompts). :meth:`of` builds it from a profile as the notebook does."""

    model: Any
    tasks: tuple[str, ...]
    sizes: AfterSizes
    profile: Profile | None = None

    @classmethod
    def of(cls, model, profile: Profile) -> AfterStudy:
        """The study at ``profile``'s sizes: :func:`after_tasks`, :func:`after_sizes` with the head share of
        :data:`helpers.protocols.query_stages.HEAD_SHARE`."""
        return cls(model, tuple(after_tasks(profile)), replace(after_sizes(profile), frac=qs.HEAD_SHARE), profile)

    # ------------------------------------------------------------------ 1 · flipped labels

    @cached_property
    def flipped_runs(self) -> dict:
        """:func:`~helpers.protocols.flipped_labels.flipped_runs`: per (task, seed) the predictions, flows and
        isolation of one demonstration set and its flipped twin."""
        return fl.flipped_runs(self.model, self.tasks, self.sizes, profile=self.profile)

    @cached_property
    def _override(self) -> dict:
        return fl.override_intervals(self.flipped_runs)

    @cached_property
    def override(self) -> Named:
        """What the flipped prompts' predictions follow: ``truth``, ``prompt`` (prompt alignment), ``prior``,
        ``natural_accuracy``, ``zero_shot_accuracy``, ``reads_context``, ``same`` and the semantic ``override``
        rate (None without an input right both ways), with ``override_inputs`` and ``override_tasks_left_out``."""
        return Named({_snake(k): v for k, v in self._override.items()})

    @cached_property
    def flows(self):
        """§2.1's flows and the context flows per (task, seed, prompts, layer, flow): a ``pandas.DataFrame``."""
        return fl.after_flow_frame(self.flipped_runs)

    @cached_property
    def _isolated(self) -> dict:
        return fl.flipped_isolation_intervals(self.flipped_runs)

    @cached_property
    def isolated(self) -> Named:
        """Label loyalty with the label words (``label``) or as many random words (``random``) isolated in the
        first ``k`` layers, and ``difference`` (random minus label), on the ``natural`` and the ``flipped``
        prompts."""
        return Named({kind: {"label": self._isolated[(kind, "label")], "random": self._isolated[(kind, "random")],
                             "difference": self._isolated[kind]} for kind in fl.PROMPTS})

    @cached_property
    def _specific(self) -> dict:
        return fsp.flipped_specific_intervals(fsp.flipped_specific_runs(self.model, self.tasks, self.sizes))

    @cached_property
    def specific(self) -> Named:
        """The flows' specific forms on the flipped prompts: ``reading`` with its shares ``moved_label_positions``
        and ``moved_content_positions``; ``gathering`` with ``aligned_label_links_blocked`` and
        ``aligned_content_links_blocked``."""
        return Named({_snake(k): v for k, v in self._specific.items()})

    # ------------------------------------------------------------------ 2 · contextualise, then aggregate

    @cached_property
    def knockout(self) -> Named:
        """Label loyalty with each label word's links to the earlier demonstrations blocked (``label``), with a
        text token's (``control``), and ``drop`` (control minus label), first ``k`` layers."""
        return Named(ik.context_knockout_intervals(ik.context_knockout_runs(self.model, self.tasks, self.sizes)))

    @cached_property
    def _layered(self) -> dict:
        return ik.layered_intervals(ik.layered_knockout_runs(self.model, self.tasks, self.sizes))

    @cached_property
    def layered(self) -> Named:
        """Each step's effect (``labels``, ``text``, ``aggregation``, and ``context`` = labels + text) in the
        ``lower`` and ``upper`` half of the layers, and the two orderings ``context_lower_first`` and
        ``aggregation_upper_later``."""
        steps = (*ik.STEPS, "context")
        return Named({**{s: {w: self._layered[(s, w)] for w in ("lower", "upper")} for s in steps},
                      "context_lower_first": self._layered["context_lower_first"],
                      "aggregation_upper_later": self._layered["aggregation_upper_later"]})

    # ------------------------------------------------------------------ 3 · two stages of the query

    @cached_property
    def head_sets(self) -> dict[str, list]:
        """The top previous-token and induction heads, as many as the head share asks."""
        return qs.stage_head_sets(self.model, qs.n_top_heads(self.model, self.sizes))

    @cached_property
    def stage_runs(self) -> dict:
        """:func:`~helpers.protocols.query_stages.query_stage_runs` with :attr:`head_sets`."""
        return qs.query_stage_runs(self.model, self.tasks, self.sizes, self.head_sets)

    def curves(self, ablated: str = "none"):
        """The probe's, the read-out's (and with nothing ablated the label-word probe's) accuracy per stage, with
        set ``ablated`` ablated (:data:`~helpers.protocols.query_stages.SETS`): a ``pandas.DataFrame``."""
        return qs.stage_curves(self.stage_runs, ablated)

    def ablation_curves(self):
        """The probe's and the read-out's curves with each set ablated in turn (and with none), an ``ablated``
        column naming the set: one ``pandas.DataFrame``."""
        import pandas as pd  # lazy: only for the figures

        every = pd.concat([self.curves(name).assign(ablated=name) for name in qs.SETS])
        return every[every["measure"] != "alignment (probe)"]  # the label-word probe runs with nothing ablated only

    # ------------------------------------------------------------------ the verdicts

    def claims(self, context: str | None = None) -> list[Claim]:
        """Every claim of notebook 11, graded by its protocol's criterion, each naming the tasks it ran on where
        they are not the profile's."""
        context = context if context is not None else f"{current_model_name()}, {len(self.sizes.seeds)} seed(s)"
        runs, k, L = self.flipped_runs, self.sizes.k, self.model.cfg.n_layers
        natural = {"flows": {c: r["flows"]["natural"] for c, r in runs.items()},
                   "context": {c: r["context"]["natural"] for c, r in runs.items()}}
        out = ([fl.semantic_anchor_claim(self._override, context)] + fl.flipped_flow_claims(runs, self.tasks, context)
               + [fl.flipped_isolation_claim(self._isolated["flipped"], k, context,
                                             note=f"natural labels, same inputs: {self._isolated['natural']:.3f}")]
               + fsp.flipped_specific_claims(self._specific, k, context)
               + sx.context_flow_claims(sx.context_flow_intervals(natural["flows"], natural["context"]), context)
               + [ik.context_knockout_claim(dict(self.knockout), k, context,
                                            isolation=self._isolated[("natural", "label")])]
               + ik.layered_claims(self._layered, L, context)
               + qs.query_stage_claims(qs.two_stages_interval(self.stage_runs),
                                       qs.stage_ablation_intervals(self.stage_runs, L),
                                       len(self.head_sets["induction"]), L, context))
        return measured_on(out, self.tasks, self.profile.tasks) if self.profile is not None else out
