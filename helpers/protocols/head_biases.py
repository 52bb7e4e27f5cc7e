"""The protocol of paper B's majority-label and recency biases, reduced by re-weighting heads (notebook 07): its run
sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run, and
its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.head_biases`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from helpers.core.grid import model_label, run_grid
from helpers.core.heads import Head
from helpers.core.prompts import PoolSizeWarning
from helpers.core.store import pins_weights
from helpers.core.unrelated import EvalSizes, UnrelatedTask, check_sizes, unrelated_args
from helpers.protocols.evaluation import eval_sizes
from helpers.study.claims import Claim, claim
from helpers.study.profile_table import run_sizes
from helpers.study.stats import Interval, bootstrap_means, bootstrap_of_means

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer
from helpers.experiments.head_biases import BiasResult, majority_bias, recency_bias, reduction_pct

__all__ = ["bias_cells", "bias_intervals", "bias_interval_part", "head_biases_claims", "BiasSizes",
           "head_biases_sizes", "bias_runs"]


def bias_cells(runs: dict[tuple[str, int, str], BiasResult], kind: str, stage: str) -> dict[tuple[str, int], np.ndarray]:
    """Per-input bias of :func:`bias_runs` results: for each query, the mean over the two directions of
    1[pred = that direction's favoured label], minus 0.5 (its mean over inputs is the bias size).
    ``stage``: "before" or "after" the reduction."""
    if stage not in ("before", "after"):
        raise ValueError("stage must be 'before' or 'after'")
    out = {}
    for (t, seed, k), r in runs.items():
        if k != kind:
            continue
        preds = r.per_direction[f"pred_{stage}"]
        lens = {len(p) for p in preds.values()}
        if len(lens) != 1:
            raise ValueError(f"({t}, {seed}, {kind}): the two directions scored different numbers of queries {lens}")
        out[(t, seed)] = np.mean([(np.asarray(p) == c).astype(float) for c, p in preds.items()], axis=0) - 0.5
    if not out:
        raise ValueError(f"no {kind!r} bias runs")
    return out


def bias_intervals(runs: dict[tuple[str, int, str], BiasResult], kind: str) -> dict[str, Interval | None]:
    """95% intervals of one bias: its size before and after the reduction, and the % reduction
    (:func:`reduction_pct` of the two means, paired per input; None when the bias before is too often 0 for the
    ratio to be defined)."""
    before, after = bias_cells(runs, kind, "before"), bias_cells(runs, kind, "after")
    try:
        red = bootstrap_of_means({"before": before, "after": after},
                                 lambda m: reduction_pct(m["before"], m["after"]))
    except ValueError:
        red = None
    return {"before": bootstrap_means(before), "after": bootstrap_means(after), "reduction": red}


def bias_interval_part(before: Interval, reduction: Interval | None) -> str:
    """One bias reduction from 95% intervals (criteria fixed before the run): "no measurable bias" unless the
    interval of the bias before the reduction lies above 0; then "replicates" if the reduction's interval lies
    at or above 10%, "partly" if above 0, "does not replicate" if at or below 0, else "inconclusive"."""
    if not before.low > 0 or reduction is None:
        return "no measurable bias"
    if reduction.low >= 10:
        return "replicates"
    if reduction.low > 0:
        return "partly"
    if reduction.high <= 0:
        return "does not replicate"
    return "inconclusive"


def head_biases_claims(intervals: dict[str, dict[str, Interval | None]], context: str = "") -> list[Claim]:
    """Notebook 07's claims about the two bias reductions, from :func:`bias_intervals` per kind, graded with
    :func:`bias_interval_part`. With no measurable bias before the reduction there is nothing to reduce: the
    verdict is "inconclusive" and the note says why."""
    out = []
    for kind, iv in intervals.items():
        part = bias_interval_part(iv["before"], iv["reduction"])
        fmt = lambda x: "not measured" if x is None else f"{x:.3f}"
        note = f"Bias (P(favoured label) - 0.5) before {fmt(iv['before'])}, after {fmt(iv['after'])}."
        if part == "no measurable bias":
            note += " No measurable bias before the reduction (its interval does not lie above 0): nothing to reduce."
        out.append(claim(f"07.{kind}_reduction", iv["reduction"],
                         "inconclusive" if part == "no measurable bias" else part,
                         "bias before the reduction above 0; then the % reduction at or above 10 (replicates), "
                         "above 0 (partly), at or below 0 (does not replicate)", unit="%", context=context,
                         note=note, part=part,
                         missing="no bias measured before the reduction, so there is none to reduce"))
    return out


@dataclass(frozen=True)
class BiasSizes(EvalSizes):
    """The evaluation sizes (:class:`helpers.core.unrelated.EvalSizes`; ``n_eval`` queries per direction) and
    ``bias_tasks``, the tasks the biases run on."""

    bias_tasks: tuple[str, ...]


def head_biases_sizes(profile) -> BiasSizes:
    """Run sizes of the bias step of notebook 07: the shared evaluation sizes
    (:func:`helpers.protocols.evaluation.eval_sizes`) and ``bias_tasks`` (AGNews prompts are ~5x longer than SST-2's,
    so the CPU profiles run SST-2 only)."""
    return BiasSizes(**asdict(eval_sizes(profile)), **run_sizes("head_biases", profile))


@pins_weights
def bias_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: EvalSizes,
              seeds: Sequence[int] | None = None, kinds: Sequence[str] = ("majority", "recency"),
              model_name: str | None = None) -> dict[tuple[str, int, str], BiasResult]:
    """:func:`majority_bias` / :func:`recency_bias` (default demonstration counts) with ``sizes.n_eval``
    queries, before/after the reduction in ``heads[task]``, per (task, seed, kind) (cache kind
    ``"heads_bias"``). Runs every task of ``uts``: notebook 07 passes only those in ``sizes.bias_tasks``.
    Returns ``{(task, seed, kind): BiasResult}``."""
    fns = {"majority": majority_bias, "recency": recency_bias}
    if not set(kinds) <= set(fns):
        raise ValueError(f"kinds must be among {sorted(fns)}")
    check_sizes(sizes)
    name, seeds = model_label(model, model_name), sizes.seeds if seeds is None else seeds
    seeds = unrelated_args(uts, seeds)
    out = {}
    for kind in kinds:  # one grid per kind of bias
        def compute(t, seed, fn=fns[kind]):
            with warnings.catch_warnings():
                # PoolSizeWarning: as in helpers.core.unrelated.eval_set, n_eval may exceed the test pool (paper
                # profile, SST-2); the whole pool is used by design
                warnings.simplefilter("ignore", PoolSizeWarning)
                return fn(model, uts[t], heads[t], seed=seed, n_test=sizes.n_eval, batch_size=sizes.batch_size)

        runs = run_grid("heads_bias", model, list(uts), seeds, compute,
                        lambda t, _, kind=kind: {"kind": kind, "n": sizes.n_eval, "heads": heads[t]}, model_name=name)
        out |= {(t, seed, kind): r for (t, seed), r in runs.items()}
    return {(t, seed, kind): out[(t, seed, kind)] for t in uts for seed in seeds for kind in kinds}
