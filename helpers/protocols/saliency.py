"""The protocol of §2.1's saliency flows (notebook 01): its run sizes, its runs over tasks x seeds (each stored by
content), its intervals, the criteria written before any run, and its claims. The method it runs (a model and prompts
in, tensors out) is :mod:`helpers.experiments.saliency`."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from helpers.core.checks import positive_int, sizes_arg
from helpers.core.grid import run_grid
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.saliency import (
    FLOWS,
    contrast_name,
    layer_ranges,
    relative_flow,
    saliency_flow,
    saliency_prompts,
)
from helpers.study.claims import claim
from helpers.study.profile_table import per_task, run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_statistic

__all__ = ["SaliencySizes", "saliency_sizes", "saliency_runs", "flow_frame", "saliency_verdict", "FLOW_CHECKS",
           "MEAN_OVER_TASKS", "CROSSING", "flow_statistics", "flow_intervals", "flow_interval_table",
           "saliency_claims"]


@dataclass(frozen=True)
class SaliencySizes(RunSizes):
    """Run sizes of notebook 01 (:func:`saliency_sizes`)."""

    seeds: tuple[int, ...]
    n: Mapping[str, int] | int  # inputs per (task, seed): per task, or one number for every task
    batch_size: int


def saliency_sizes(profile) -> SaliencySizes:
    """Run size of notebook 01: ``profile.n_saliency`` inputs per task and seed (every task, AGNews too: its
    prompts are ~6x longer than SST-2's and its backward passes the costliest), all of the profile's seeds,
    batches of 16 inputs split further by the attention patterns' memory (:func:`saliency_flow`)."""
    s = run_sizes("saliency", profile)
    return SaliencySizes(seeds=s["seeds"], n=per_task(int(s["n"]), profile.tasks), batch_size=s["batch_size"])


@pins_weights
def saliency_runs(model, tasks: Sequence[str], sizes: SaliencySizes, profile: str = "", progress: bool = True):
    """Per-input ``(S_wp, S_pq, S_ww)`` for every (task, seed) of ``tasks`` and ``sizes.seeds``, cached on disk.

    Returns ``{(task, seed): Float[Tensor, "n layer 3"]}`` (raw, not relative). ``sizes``
    (:func:`saliency_sizes`): ``n`` inputs per task and seed (an int or a per-task dict), the seeds, the batch size.
    """
    sizes_arg(sizes, SaliencySizes, "saliency_sizes(profile)")
    n = sizes.n
    tasks, seeds = run_args(tasks, sizes.seeds, n=n)
    batch_size = positive_int("batch_size", sizes.batch_size)  # refused before the store is read, not only on a miss
    def count(task):
        return n[task] if isinstance(n, dict) else int(n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            prompts, lids = saliency_prompts(model, task, seed, count(task))
        return saliency_flow(model, prompts, lids, batch_size=batch_size)

    return run_grid("saliency_flow", model, tasks, seeds, run, lambda task, _: {"n": count(task), "profile": profile},
                    progress=progress and "saliency")


def flow_frame(runs: dict):
    """Long ``pandas.DataFrame`` (task, seed, layer, flow, value) of the relative sizes per (task, seed)."""
    import pandas as pd  # lazy: pandas takes a second to import

    rows = []
    for (task, seed), scores in runs.items():
        rel = relative_flow(scores)
        for layer in range(rel.shape[0]):
            for f, name in enumerate(FLOWS):
                rows.append({"task": task, "seed": seed, "layer": layer, "flow": name, "value": float(rel[layer, f])})
    return pd.DataFrame(rows)


# the checks of the §2.1 claim: each names the contrasts (layer range, larger flow, smaller flow) that the paper
# expects above zero
FLOW_CHECKS = {
    "shallow: S_wp dominant": (("shallow", "S_wp", "S_pq"), ("shallow", "S_wp", "S_ww")),
    "deep: S_pq dominant": (("deep", "S_pq", "S_wp"), ("deep", "S_pq", "S_ww")),
    "S_wp and S_pq above S_ww": (("all", "S_wp", "S_ww"), ("all", "S_pq", "S_ww")),
}


MEAN_OVER_TASKS = "mean over tasks"


CROSSING = "first layer S_pq > S_wp"


def flow_statistics(rel) -> dict[tuple, float]:
    """Point summaries of one relative-flow curve ``[layer, 3]`` (e.g. a task's seed-averaged curve).

    Keys: ``("curve", layer, flow)``; ``(range, flow)``: the flow's mean over a :func:`layer_ranges`
    range; ``(range, "S_a - S_b")`` for every contrast of :data:`FLOW_CHECKS`; ``(CROSSING,)``: the
    first layer where S_pq exceeds S_wp (NaN when it never does).
    """
    rel = np.asarray(rel, dtype=np.float64)
    if rel.ndim != 2 or rel.shape[1] != len(FLOWS) or rel.shape[0] < 1:
        raise ValueError(f"a relative-flow curve is [layer, {len(FLOWS)}], got shape {rel.shape}")
    out: dict[tuple, float] = {}
    for layer in range(rel.shape[0]):
        for f, name in enumerate(FLOWS):
            out[("curve", layer, name)] = float(rel[layer, f])
    means = {r: rel[sl].mean(0) for r, sl in layer_ranges(rel.shape[0]).items()}
    for r, m in means.items():
        for f, name in enumerate(FLOWS):
            out[(r, name)] = float(m[f])
    for contrasts in FLOW_CHECKS.values():
        for r, a, b in contrasts:
            out[(r, contrast_name(a, b))] = float(means[r][FLOWS.index(a)] - means[r][FLOWS.index(b)])
    hit = np.flatnonzero(rel[:, 1] > rel[:, 0])
    out[(CROSSING,)] = float(hit[0]) if len(hit) else float("nan")
    return out


def _relative(scores: np.ndarray) -> np.ndarray:
    """:func:`relative_flow` in numpy: mean over inputs, then each layer divided by its three flows' sum."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column stays NaN, as in relative_flow
        mean = np.nanmean(scores, axis=0)
    return mean / mean.sum(-1, keepdims=True)


def flow_intervals(runs: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """95% intervals of every :func:`flow_statistics` of each task's seed-averaged relative curve, and of the
    curve averaged over tasks (task :data:`MEAN_OVER_TASKS`).

    ``runs``: ``{(task, seed): per-input raw flows [n, layer, 3]}`` (:func:`saliency_runs`); every task needs
    every seed. Returns ``{(task, *key): Interval}`` (None where a statistic, e.g. the crossing layer, is
    undefined in more than 10% of the resamples). Two-level bootstrap
    (:func:`helpers.study.stats.bootstrap_statistic`): the seeds (the same draw for every task), then the inputs
    within each (task, seed). The estimates are those of the full data: a task's curve is the mean over
    seeds of :func:`relative_flow`.
    """
    if not isinstance(runs, dict) or not runs:
        raise ValueError("pass the per-input flows as {(task, seed): [n, layer, 3]}, with at least one cell")
    cells = {}
    for key, v in runs.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"cell keys must be (task, seed), got {key!r}")
        arr = np.asarray(v.float() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
        if arr.ndim != 3 or arr.shape[2] != len(FLOWS) or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(f"cell {key}: per-input flows must be [n >= 1, layer, {len(FLOWS)}], got {arr.shape}")
        cells[key] = arr
    layers = {a.shape[1] for a in cells.values()}
    if len(layers) > 1:
        raise ValueError(f"all cells must come from one model (same number of layers), got {sorted(layers)}")
    tasks = list(dict.fromkeys(t for t, _ in cells))
    seeds = sorted({s for _, s in cells}, key=str)
    missing = [(t, s) for t in tasks for s in seeds if (t, s) not in cells]
    if missing:
        raise ValueError(f"every task needs every seed; missing cells {missing[:4]}")
    sizes = {s: {t: cells[t, s].shape[0] for t in tasks} for s in seeds}

    def stat(sample):
        curves = {t: np.mean([_relative(cells[t, s][idx[t]]) for s, idx in sample], axis=0) for t in tasks}
        out = {}
        for t, rel in curves.items():
            out.update({(t, *k): v for k, v in flow_statistics(rel).items()})
        mean = np.mean(list(curves.values()), axis=0)
        out.update({(MEAN_OVER_TASKS, *k): v for k, v in flow_statistics(mean).items()})
        return out

    out = bootstrap_statistic(sizes, stat, n_boot, seed=seed)
    per_task = {t: sum(cells[t, s].shape[0] for s in seeds) for t in tasks}  # a task's interval rests on its inputs
    return {k: iv if iv is None or k[0] not in per_task else dataclasses.replace(iv, n_inputs=per_task[k[0]])
            for k, iv in out.items()}


def saliency_verdict(intervals: dict, tasks: Sequence[str]) -> tuple[str, dict]:
    """Verdict on the §2.1 claim from the 95% intervals of the paired contrasts (criteria fixed before the run).

    ``intervals[(task, range, "S_a - S_b")]``: :class:`helpers.study.stats.Interval` of each contrast of
    :data:`FLOW_CHECKS` (e.g. :func:`flow_intervals`' output; None counts as straddling zero). The checks of
    :func:`saliency_verdict`, per task:
      1. shallow (first third of the layers): S_wp - S_pq > 0 and S_wp - S_ww > 0;
      2. deep (last half): S_pq - S_wp > 0 and S_pq - S_ww > 0;
      3. all layers: S_wp - S_ww > 0 and S_pq - S_ww > 0.
    A (task, check) "holds" when both intervals lie above zero, "fails" when one lies below zero, and is
    "inconclusive" otherwise. Verdict: "replicates" if every check holds; "partly" if at least half hold;
    "does not replicate" if more than half fail; otherwise "inconclusive".
    """
    if not tasks:
        raise ValueError("no tasks to judge")
    checks = {}
    for task in tasks:
        for check, contrasts in FLOW_CHECKS.items():
            ivs = []
            for r, a, b in contrasts:
                key = (task, r, contrast_name(a, b))
                if key not in intervals:
                    raise ValueError(f"no interval for {key}: pass flow_intervals' output")
                ivs.append(intervals[key])
            if all(iv is not None and iv.low > 0 for iv in ivs):
                checks[(task, check)] = "holds"
            elif any(iv is not None and iv.high < 0 for iv in ivs):
                checks[(task, check)] = "fails"
            else:
                checks[(task, check)] = "inconclusive"
    n = len(checks)
    held = sum(v == "holds" for v in checks.values())
    failed = sum(v == "fails" for v in checks.values())
    if held == n:
        return "replicates", checks
    if held >= n / 2:
        return "partly", checks
    if n - failed < n / 2:
        return "does not replicate", checks
    return "inconclusive", checks


def flow_interval_table(intervals: dict, tasks: Sequence[str], labels: dict | None = None, digits: int = 3):
    """One row per task (and the mean over tasks): the flows over the check ranges, the contrasts and the
    first layer where S_pq > S_wp, each as "estimate [low, high]" (95% interval; "n/a" when undefined).

    ``labels``: display names of the tasks.
    """
    import pandas as pd  # lazy: pandas takes a second to import

    def fmt(iv, spec):
        return "n/a" if iv is None else format(iv, spec)

    cols = [("shallow", "S_wp"), ("shallow", "S_pq"), ("shallow", "S_ww"), ("deep", "S_pq"), ("deep", "S_wp"),
            ("deep", "S_ww"), ("all", "S_ww")]
    names = {"shallow": "shallow third", "deep": "deep half", "all": "all layers"}
    rows = []
    for task in [*tasks, MEAN_OVER_TASKS]:
        row = {"task": (labels or {}).get(task, task)}
        for r, f in cols:
            row[f"{f} {names[r]}"] = fmt(intervals.get((task, r, f)), f".{digits}f")
        for contrasts in FLOW_CHECKS.values():
            for r, a, b in contrasts:
                row[f"{names[r]}: {a} - {b}"] = fmt(intervals.get((task, r, contrast_name(a, b))), f"+.{digits}f")
        row[CROSSING] = fmt(intervals.get((task, CROSSING)), ".1f")
        rows.append(row)
    return pd.DataFrame(rows)


CLAIM_KEYS = {"shallow: S_wp dominant": "01.shallow_wp_dominant", "deep: S_pq dominant": "01.deep_pq_dominant",
              "S_wp and S_pq above S_ww": "01.label_flows_above_ww"}


_RANGE_TEXT = {"shallow": "the first third of the layers", "deep": "the last half", "all": "all layers"}


def _tally_verdict(results: Sequence[str]) -> str:
    """A claim's verdict from its per-task check results, with :func:`saliency_verdict`'s thresholds."""
    n, held, failed = len(results), results.count("holds"), results.count("fails")
    if held == n:
        return "replicates"
    if held >= n / 2:
        return "partly"
    if n - failed < n / 2:
        return "does not replicate"
    return "inconclusive"


def saliency_claims(intervals: dict, tasks: Sequence[str], context: str = "") -> list:
    """The §2.1 claims (:data:`helpers.study.paper.CLAIMS_01`), one per check of :data:`FLOW_CHECKS`.

    ``ours``: the first contrast of the check on the curve averaged over tasks (relative flows); the note gives
    the second contrast and how many tasks the check holds on. Verdict: from the per-task results of
    :func:`saliency_verdict` (every task holds: replicates; at least half: partly; more than half fail: does
    not replicate; otherwise inconclusive).
    """
    _, checks = saliency_verdict(intervals, tasks)
    out = []
    for check, contrasts in FLOW_CHECKS.items():
        (r1, a1, b1), (r2, a2, b2) = contrasts
        results = [checks[(t, check)] for t in tasks]
        second = intervals.get((MEAN_OVER_TASKS, r2, contrast_name(a2, b2)))
        tally = ", ".join(f"{results.count(v)} {v}" for v in ("holds", "fails", "inconclusive") if results.count(v))
        pair = (f"{a1} - {b1} and of {a2} - {b2} over {_RANGE_TEXT[r1]}" if r1 == r2 else
                f"{a1} - {b1} over {_RANGE_TEXT[r1]} and of {a2} - {b2} over {_RANGE_TEXT[r2]}")
        criterion = f"on every task the 95% intervals of {pair} lie above 0 (relative flows)"
        note = (f"{a2} - {b2} over {_RANGE_TEXT[r2]}: {'n/a' if second is None else format(second, '+.3f')}; "
                f"per task ({len(tasks)}): {tally}.")
        out.append(claim(CLAIM_KEYS[check], intervals.get((MEAN_OVER_TASKS, r1, contrast_name(a1, b1))),
                         _tally_verdict(results), criterion, context=context, note=note))
    return out
