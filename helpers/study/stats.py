"""95% intervals for reported numbers: a two-level bootstrap over seeds and test inputs.

Every headline number of the project is a mean over tasks of a mean over seeds
of a mean over test inputs (accuracy, label loyalty, ...), or a difference of
two such numbers measured on the same inputs (re-weighting minus 1-shot,
label-first minus random-first loyalty). Both sources of variation matter: the
seed picks the demonstration set, which moves accuracy by several points, and
64 test inputs leave a sampling error of their own. :func:`bootstrap_means`
therefore resamples both levels, as in a hierarchical (cluster) bootstrap:

1. draw the seeds with replacement (the same draw for every task, since a seed
   is one demonstration draw per task);
2. within every drawn (task, seed) cell, draw its inputs with replacement;
3. recompute the statistic: mean over tasks of mean over drawn seeds of the
   cell means.

The interval is the percentile interval of that statistic over ``n_boot``
draws. It is conservative when the seeds agree (the input noise enters at
both levels: 5 seeds x 64 Bernoulli inputs with no seed effect cover the true
mean 99.7% of the time) and close to nominal when they differ (96% with a
seed-to-seed spread of 10 points); it never claims more than the data hold. With one seed, step 1 is skipped and the interval covers the input
sampling only (the report says how many seeds it rests on). A paired contrast
is the same computation on per-input differences, which keeps the pairing.

:func:`interval_verdict` turns an interval into a verdict with criteria fixed
before any run: "replicates" when the interval of the paper's contrast
excludes zero in the paper's direction, "opposite" when it excludes zero the
other way, otherwise "inconclusive".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap_means", "bootstrap_statistic", "bootstrap_of_means", "paired_differences", "interval_verdict",
           "cells_from_frame", "N_BOOT", "LEVEL"]

N_BOOT = 4000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; ``n_seeds``/``n_inputs`` say what it rests on."""

    estimate: float
    low: float
    high: float
    n_seeds: int
    n_inputs: int  # test inputs over all cells
    level: float = LEVEL

    def excludes(self, value: float = 0.0) -> bool:
        return self.low > value or self.high < value

    def scaled(self, factor: float) -> Interval:
        """The same interval in other units (e.g. ``100`` for percent)."""
        lo, hi = sorted((self.low * factor, self.high * factor))
        return Interval(self.estimate * factor, lo, hi, self.n_seeds, self.n_inputs, self.level)

    def __format__(self, spec: str) -> str:
        spec = spec or ".3f"
        return f"{self.estimate:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"

    def __str__(self) -> str:
        return format(self, "")


def _cells(values) -> dict[tuple, np.ndarray]:
    """``{(task, seed): per-input values}`` from a mapping keyed by (task, seed) or by seed (one task)."""
    if not isinstance(values, Mapping) or not values:
        raise ValueError("pass per-input values as {(task, seed): values} or {seed: values}, with at least one cell")
    out = {}
    for key, v in values.items():
        key = key if isinstance(key, tuple) else ("", key)
        if len(key) != 2:
            raise ValueError(f"cell keys must be (task, seed) or seed, got {key!r}")
        arr = np.asarray(v, dtype=float).reshape(-1)
        if arr.size == 0:
            raise ValueError(f"cell {key} has no inputs: an interval needs at least one scored input per cell")
        if not np.isfinite(arr).all():
            raise ValueError(f"cell {key} has non-finite values; drop or fix them before computing an interval")
        out[key] = arr
    return out


def bootstrap_means(values, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> Interval:
    """Mean over tasks of the mean over seeds of per-input ``values``, with its two-level bootstrap interval.

    ``values``: ``{(task, seed): per-input values}`` (or ``{seed: values}`` for
    one task). Every task must have the same seeds. Deterministic for a given
    ``seed``.
    """
    cells = _cells(values)
    tasks = sorted({t for t, _ in cells}, key=str)
    seeds = sorted({s for _, s in cells}, key=str)
    missing = [(t, s) for t in tasks for s in seeds if (t, s) not in cells]
    if missing:
        raise ValueError(f"every task needs every seed; missing cells {missing[:4]}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    estimate = float(np.mean([np.mean([cells[t, s].mean() for s in seeds]) for t in tasks]))
    # boot[t, s, b]: cell (t, s)'s mean over a resample of its inputs
    boot = np.empty((len(tasks), len(seeds), n_boot))
    for i, t in enumerate(tasks):
        for j, s in enumerate(seeds):
            v = cells[t, s]
            boot[i, j] = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    if len(seeds) > 1:
        pick = rng.integers(0, len(seeds), size=(n_boot, len(seeds)))  # same seed draw for every task
        per_task = np.take_along_axis(boot, pick.T[None, :, :], axis=1).mean(axis=1)  # [task, b]
    else:
        per_task = boot[:, 0, :]
    stat = per_task.mean(axis=0)
    a = (1 - level) / 2
    lo, hi = np.quantile(stat, [a, 1 - a])
    return Interval(estimate, float(lo), float(hi), len(seeds), int(sum(v.size for v in cells.values())), level)


def bootstrap_statistic(sizes: Mapping, statistic, n_boot: int = 1000, level: float = LEVEL, seed: int = 0,
                        max_undefined: float = 0.1):
    """Two-level bootstrap of a statistic that is not a mean of per-input values (a rank correlation, an AUC).

    ``sizes``: ``{seed: number of inputs}``, or ``{seed: {task: number of inputs}}``.
    ``statistic(sample)`` gets a list of ``(seed, input indices)`` (or ``(seed,
    {task: input indices})``), one entry per drawn seed (a seed may be drawn
    twice), and returns a float, or a dict of floats (several statistics from the same resamples: the result
    is then a dict of Intervals, None where a statistic is undefined too often); the full data is
    ``arange(n)`` everywhere.
    Resampling as in :func:`bootstrap_means`: seeds with replacement (skipped with
    one seed), then inputs within each. Replicates where the statistic is NaN are
    dropped; if more than ``max_undefined`` of them are, a ValueError says so
    instead of reporting an interval of the rest.
    """
    def counts(v):
        return list(v.values()) if isinstance(v, Mapping) else [v]

    if not sizes or any(int(n) < 1 for v in sizes.values() for n in counts(v)):
        raise ValueError("bootstrap_statistic needs at least one seed with at least one input")
    keys = list(sizes)
    rng = np.random.default_rng(seed)

    def full(v):
        return {t: np.arange(int(n)) for t, n in v.items()} if isinstance(v, Mapping) else np.arange(int(v))

    def draw(v):
        if isinstance(v, Mapping):
            return {t: rng.integers(0, int(n), int(n)) for t, n in v.items()}
        return rng.integers(0, int(v), int(v))

    first = statistic([(k, full(sizes[k])) for k in keys])
    several = isinstance(first, Mapping)
    names = list(first) if several else [None]
    estimate = {n: float(first[n]) for n in names} if several else {None: float(first)}
    stats = np.empty((n_boot, len(names)))
    for b in range(n_boot):
        drawn = [keys[i] for i in rng.integers(0, len(keys), len(keys))] if len(keys) > 1 else keys
        out = statistic([(k, draw(sizes[k])) for k in drawn])
        stats[b] = [out[n] for n in names] if several else [out]
    n_in = int(sum(int(n) for v in sizes.values() for n in counts(v)))
    a = (1 - level) / 2
    result = {}
    for j, name in enumerate(names):
        ok = np.isfinite(stats[:, j])
        if (~ok).mean() > max_undefined:
            msg = (f"the statistic{'' if name is None else ' ' + repr(name)} is undefined in {(~ok).mean():.0%} "
                   "of the bootstrap samples; too few inputs for an interval")
            if not several:
                raise ValueError(msg)
            result[name] = None  # several statistics: the others still get their intervals
            continue
        lo, hi = np.quantile(stats[ok, j], [a, 1 - a])
        result[name] = Interval(estimate[name], float(lo), float(hi), len(keys), n_in, level)
    return result if several else result[None]


def bootstrap_of_means(groups: Mapping, fn, n_boot: int = 1000, level: float = LEVEL, seed: int = 0,
                       max_undefined: float = 0.1) -> Interval:
    """A function of several paired means (a ratio, a % reduction), with its two-level bootstrap interval.

    ``groups``: ``{name: {(task, seed): per-input values}}``, every group with the same cells and, within a
    cell, the same inputs in the same order (paired: one resample of input indices serves every group).
    Each group's mean is taken as :func:`bootstrap_means` takes it (over tasks of the mean over seeds of
    the cell means); ``fn({name: mean})`` returns the statistic. Resampling and NaN handling:
    :func:`bootstrap_statistic`.
    """
    if not isinstance(groups, Mapping) or not groups:
        raise ValueError("pass {name: {(task, seed): per-input values}} with at least one group")
    cells = {name: _cells(v) for name, v in groups.items()}
    first = next(iter(cells.values()))
    for name, c in cells.items():
        if c.keys() != first.keys() or any(c[k].size != first[k].size for k in first):
            raise ValueError(f"group {name!r} does not have the same cells and inputs as the others: the groups "
                             "must be paired")
    tasks = sorted({t for t, _ in first}, key=str)
    seeds = sorted({s for _, s in first}, key=str)
    missing = [(t, s) for t in tasks for s in seeds if (t, s) not in first]
    if missing:
        raise ValueError(f"every task needs every seed; missing cells {missing[:4]}")

    def statistic(sample):
        means = {name: float(np.mean([np.mean([c[t, s][idx[t]].mean() for s, idx in sample]) for t in tasks]))
                 for name, c in cells.items()}
        return fn(means)

    sizes = {s: {t: first[t, s].size for t in tasks} for s in seeds}
    return bootstrap_statistic(sizes, statistic, n_boot, level, seed, max_undefined)


def paired_differences(a, b, a_ids=None, b_ids=None) -> dict[tuple, np.ndarray]:
    """Per-input ``a - b`` in every cell.

    Without ids both sides must score the same inputs in the same order. With
    ``a_ids``/``b_ids`` (``{cell: input ids}``, e.g. test-row indices) the
    inputs are matched by id and only those scored on both sides are kept (a
    5-shot run drops prompts that exceed the context; its 1-shot partner keeps them).
    """
    ca, cb = _cells(a), _cells(b)
    if set(ca) != set(cb):
        raise ValueError("a paired contrast needs the same (task, seed) cells on both sides")
    ia = {k if isinstance(k, tuple) else ("", k): v for k, v in (a_ids or {}).items()}
    ib = {k if isinstance(k, tuple) else ("", k): v for k, v in (b_ids or {}).items()}
    out = {}
    for key in ca:
        if key in ia and key in ib:
            pos_b = {int(i): j for j, i in enumerate(ib[key])}
            pairs = [(j, pos_b[int(i)]) for j, i in enumerate(ia[key]) if int(i) in pos_b]
            if not pairs:
                raise ValueError(f"cell {key}: no input is scored on both sides")
            ja, jb = map(list, zip(*pairs))
            out[key] = ca[key][ja] - cb[key][jb]
            continue
        if ca[key].shape != cb[key].shape:
            raise ValueError(f"cell {key}: {ca[key].size} vs {cb[key].size} inputs; a paired contrast needs the "
                             "same inputs on both sides (or pass their ids)")
        out[key] = ca[key] - cb[key]
    return out


def cells_from_frame(df, value: str = "correct", ids: str | None = None):
    """``{(task, seed): per-input values}`` (and ``{(task, seed): ids}`` when ``ids`` names a column)
    from a frame with one row per (task, seed) holding per-input lists."""
    vals = {(r.task, r.seed): np.asarray(getattr(r, value), dtype=float) for r in df.itertuples()}
    if ids is None:
        return vals
    return vals, {(r.task, r.seed): list(getattr(r, ids)) for r in df.itertuples()}


def interval_verdict(interval: Interval, direction: int = 1, value: float = 0.0) -> str:
    """Verdict on a contrast whose paper sign is ``direction`` (+1: the paper's contrast is above ``value``).

    "replicates": the interval lies entirely on the paper's side of ``value``;
    "opposite": entirely on the other side; "inconclusive": it contains ``value``.
    """
    if direction not in (1, -1):
        raise ValueError("direction must be +1 or -1")
    if direction * (interval.low - value) > 0 and direction * (interval.high - value) > 0:
        return "replicates"
    if direction * (interval.low - value) < 0 and direction * (interval.high - value) < 0:
        return "opposite"
    return "inconclusive"
