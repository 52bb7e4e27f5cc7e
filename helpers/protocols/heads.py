"""Notebook 07's study in one object: :class:`HeadsStudy` holds each step of paper B's in-context heads (arXiv
2402.02872) as a named result, computed on first use and stored on disk by its own protocol, the regime step
inside it, and gives the notebook's claims from one call (as :class:`helpers.protocols.after.AfterStudy` does for
notebook 11).

``study.accuracy["foo/bar"]`` is the interval of the accuracy under that mapping, ``study.regime.clear`` the regimes
that follow their mapping, ``study.regime.ablation`` the ablation inside the best of them. The protocols underneath
keep their functions, criteria and stored steps (:mod:`helpers.protocols.mapping_control`,
:mod:`~helpers.protocols.incontext_heads`, :mod:`~helpers.protocols.head_ablation`,
:mod:`~helpers.protocols.two_towers`, :mod:`~helpers.protocols.head_biases`), so the study computes exactly what
calling them one by one computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from helpers.experiments.incontext_heads import incontext_heads, n_incontext_heads, rank_heads_for_label
from helpers.experiments.mapping_control import REGIME_PAIRS, clear_regimes, regime_name, swapped_mapping
from helpers.experiments.two_towers import label_carrying_rate, two_towers
from helpers.protocols import head_ablation as ha
from helpers.protocols import head_biases as hb
from helpers.protocols import incontext_heads as ih
from helpers.protocols import mapping_control as mc
from helpers.protocols import two_towers as tt
from helpers.protocols.after import Named
from helpers.study import heads_report as hr
from helpers.study.claims import Claim
from helpers.study.profile_table import Profile
from helpers.study.profiles import study_tasks
from helpers.study.stats import bootstrap_means

__all__ = ["HeadsStudy"]

SWAPS = (("foo/bar", "bar/foo"), ("A/B", "B/A"))  # the mappings each swap control compares


@dataclass(eq=False)
class HeadsStudy:
    """Notebook 07 on ``model`` (named ``model_name``, the stored steps' key) for ``profile``: the tasks under every
    mapping (:func:`~helpers.protocols.mapping_control.mapping_tasks`), the sizes of each part, ``n_ic`` in-context
    heads (max(4, 1% of the heads)); each part's batch size comes with its sizes (the run-sizes table's ``eval`` row:
    16 prompts per forward on every profile, since one forward costs about the same for 1 or 16 short prompts on a
    CPU)."""

    model: Any
    model_name: str
    profile: Profile

    def __post_init__(self):
        p = self.profile
        self.heads_sizes = ih.incontext_heads_sizes(p)  # the evaluation sizes (n_eval, seeds, k_per_class) + n_attr
        self.towers_sizes = tt.two_towers_sizes(p)  # + n_towers: prompts with their own demonstrations
        self.bias_sizes = hb.head_biases_sizes(p)  # + bias_tasks
        self.regime_sizes = mc.regime_sizes(p)
        self.n_ic = n_incontext_heads(self.model, frac=0.01, min_heads=4)
        self.tasks_by_mapping = mc.mapping_tasks(study_tasks(p))  # {mapping: {task: UnrelatedTask}}
        self.foobar = self.tasks_by_mapping["foo/bar"]  # the paper's setting
        self.task_names = list(self.foobar)
        self.title = {t: ut.task.display for t, ut in self.foobar.items()}
        self.short_name = {t: shown.split(" (")[0] for t, shown in self.title.items()}

    def _kw(self) -> dict:
        return {"model_name": self.model_name}

    # ------------------------------------------------------------------ the premise: does it read the mapping?

    @cached_property
    def accuracy_runs(self) -> dict:
        """Per mapping, :func:`~helpers.protocols.mapping_control.accuracy_runs` (correct per input, per cell)."""
        return {m: mc.accuracy_runs(self.model, uts, self.heads_sizes, **self._kw())
                for m, uts in self.tasks_by_mapping.items()}

    @cached_property
    def accuracy(self) -> dict:
        """``{mapping: Interval}`` of the accuracy under each mapping."""
        return {m: bootstrap_means({k: r["correct"] for k, r in runs.items()}) for m, runs in self.accuracy_runs.items()}

    @cached_property
    def swap_control(self) -> dict:
        """``{(mapping, its swap): intervals}`` of :func:`~helpers.protocols.mapping_control.mapping_intervals`."""
        return {(a, b): mc.mapping_intervals(self.accuracy_runs[a], self.accuracy_runs[b]) for a, b in SWAPS}

    # ------------------------------------------------------------------ the in-context heads

    @cached_property
    def scores(self) -> dict:
        """Per task, the attribution scores (gain and drop) of every head."""
        return ih.attribution_runs(self.model, self.foobar, self.heads_sizes, progress="attribution", **self._kw())

    @cached_property
    def ic_heads(self) -> dict:
        """Per task, the ``n_ic`` in-context heads (the top of each label's ranking, merged)."""
        return {t: incontext_heads(self.scores[t], self.n_ic) for t in self.task_names}

    @cached_property
    def per_word(self) -> dict:
        """Per task and label word, its own ranking's top ``n_ic`` heads."""
        return {t: {self.foobar[t].task.label_words[c]: rank_heads_for_label(self.scores[t], c)[:self.n_ic]
                    for c in (0, 1)} for t in self.task_names}

    @cached_property
    def pooled(self) -> dict:
        """Per task, the top ``n_ic`` heads of one ranking pooled over both labels."""
        return {t: incontext_heads(self.scores[t], self.n_ic, per_label=False) for t in self.task_names}

    @cached_property
    def ablation(self) -> dict:
        """:func:`~helpers.protocols.head_ablation.ablation_runs` of the in-context heads."""
        return ha.ablation_runs(self.model, self.foobar, self.ic_heads, self.heads_sizes, **self._kw())

    @cached_property
    def ablation_intervals(self) -> dict:
        return ha.ablation_intervals(self.ablation)

    # ------------------------------------------------------------------ two towers, biases

    @cached_property
    def value_outputs(self) -> dict:
        """Per (task, seed), the in-context heads' value outputs at every label position."""
        return tt.value_output_runs(self.model, self.foobar, self.ic_heads, self.towers_sizes, **self._kw())

    @cached_property
    def carrying(self) -> Named:
        """``interval``: the label-carrying rate over every cell; ``by_task``: each task's rate on its first seed."""
        seed0 = self.heads_sizes.seeds[0]
        return Named({"interval": tt.label_carrying_interval(self.value_outputs),
                      "by_task": {t: label_carrying_rate(self.value_outputs[(t, seed0)]) for t in self.task_names}})

    @cached_property
    def towers_runs(self) -> dict:
        return tt.towers_runs(self.model, self.foobar, self.ic_heads, self.towers_sizes, **self._kw())

    @cached_property
    def towers(self) -> Named:
        """``stats``: per task the correlations of query and key with the logit difference; ``intervals``: their
        95% intervals (bootstrap over each task's inputs, means over tasks)."""
        return Named({"stats": {t: two_towers(self.towers_runs[t]) for t in self.task_names},
                      "intervals": tt.two_towers_intervals(self.towers_runs)})

    @cached_property
    def bias_tasks(self) -> list[str]:
        return [t for t in self.task_names if t in self.bias_sizes.bias_tasks]

    @cached_property
    def bias_runs(self) -> dict:
        return hb.bias_runs(self.model, {t: self.foobar[t] for t in self.bias_tasks}, self.ic_heads, self.bias_sizes,
                            **self._kw())

    @cached_property
    def bias(self) -> dict:
        """``{bias kind: intervals}`` of each bias before and after the ablation, and its reduction."""
        return {k: hb.bias_intervals(self.bias_runs, k) for k in dict.fromkeys(kind for _, _, kind in self.bias_runs)}

    # ------------------------------------------------------------------ the regime step

    @cached_property
    def regime(self) -> Named:
        """Which (label pair, demonstrations per class) regimes follow their mapping, and in the best of them,
        confirmed on fresh seeds, the in-context heads and their ablation again on its own prompts: ``tasks``,
        ``uts`` (every mapping of each pair and its swap), ``intervals``, ``clear`` (the regimes that follow the
        mapping, highest lower bound first), and ``confirmation``, ``heads``, ``ablation`` (None without a clear
        regime)."""
        sizes = self.regime_sizes
        tasks = [t for t in self.task_names if t in sizes.tasks] or self.task_names[:1]
        uts = {m: {t: self.tasks_by_mapping[m][t] for t in tasks} for pair in REGIME_PAIRS
               for m in (pair, swapped_mapping(pair))}
        runs = mc.regime_runs(self.model, uts, sizes, progress="regime", **self._kw())
        intervals = mc.regime_intervals(runs)
        clear = clear_regimes(intervals)
        confirmation = heads = ablation = None
        if clear:  # confirm the best regime on fresh seeds, then sections 2.2-2.3 again in it, on its own prompts
            pair, k = clear[0]
            confirmation = mc.regime_confirmation(self.model, uts, clear[0], sizes, progress="confirmation",
                                                  **self._kw())
            in_regime = ih.heads_sizes_at(self.heads_sizes, sizes.at(k))
            scores = ih.attribution_runs(self.model, uts[pair], in_regime, progress="attribution", **self._kw())
            heads = {t: incontext_heads(scores[t], self.n_ic) for t in tasks}
            ablation = ha.ablation_intervals(ha.ablation_runs(self.model, uts[pair], heads, in_regime, **self._kw()))
        return Named({"tasks": tasks, "uts": uts, "intervals": intervals, "clear": clear,
                      "confirmation": confirmation, "heads": heads, "ablation": ablation})

    # ------------------------------------------------------------------ the verdicts

    def context(self, tasks) -> str:
        return f"{', '.join(self.short_name[t] for t in tasks)} with foo/bar, {len(self.heads_sizes.seeds)} seed(s)"

    def claims(self) -> tuple[list[Claim], dict, dict]:
        """``(claims, overall, metrics)``: every claim of notebook 07 graded by its protocol's criterion, the
        overall reading of paper B's claims (:func:`~helpers.study.heads_report.overall_of_claims`) and the
        record's metrics."""
        ctx, bias_ctx = self.context(self.task_names), self.context(self.bias_tasks)
        reg = self.regime
        regime_ctx = mc.regime_context([self.short_name[t] for t in reg.tasks], REGIME_PAIRS, self.regime_sizes)
        foobar_claim = mc.mapping_claims(self.swap_control[SWAPS[0]], ctx)
        regime_claim = mc.regime_claims(reg.intervals, regime_ctx, confirmation=reg.confirmation)
        ablation_claims = ha.ablation_claims(self.ablation_intervals, ctx)
        regime_ablation = ([ha.regime_ablation_claim(reg.ablation, f"{regime_ctx}; {regime_name(reg.clear[0])}")]
                           if reg.clear else [])
        towers_claims = tt.two_towers_claims(self.carrying.interval, self.towers.intervals, ctx)
        bias_claims = hb.head_biases_claims(self.bias, bias_ctx)
        overall = hr.overall_of_claims(ablation_claims + towers_claims + bias_claims + regime_ablation)
        metrics = hr.heads_report_metrics(overall, self.ic_heads, self.accuracy, self.swap_control[SWAPS[1]],
                                          reg.intervals, hr.notebook_sizes(self.heads_sizes, self.towers_sizes,
                                                                           self.bias_sizes))
        claims = foobar_claim + ablation_claims + towers_claims + bias_claims + regime_claim + regime_ablation
        return claims, overall, metrics
