"""The protocol of §2.2's isolation of the label words in the shallow layers, with its random control (notebook 02): its
run sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run,
and its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.isolation`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from helpers.core.grid import model_label, run_grid
from helpers.core.prompts import PromptSet, make_icl_set
from helpers.core.store import pins_weights, stored
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.isolation import MAIN_CONDITIONS, isolation_experiment, loyalty_rows
from helpers.study.claims import claim
from helpers.study.paper import CLAIMS
from helpers.study.profile_table import per_task, run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_means, paired_differences

__all__ = ["IsolationSizes", "isolation_sizes", "isolation_runs", "stored_isolation", "notebook02_cell", "loyalty_frame",
           "isolation_verdict", "isolation_intervals", "isolation_claims", "condition_cells", "condition_ids"]


def condition_cells(df, condition: str, where: str, k: int, metric: str = "label_loyal") -> dict:
    """``{(task, seed): per-input values}`` of one condition of :func:`loyalty_frame` (``metric``:
    ``label_loyal`` or ``word_loyal``), the input of :func:`helpers.study.stats.bootstrap_means`."""
    sub = df[(df.condition == condition) & (df["where"] == where) & (df.k == k)]
    if sub.empty:
        raise ValueError(f"no isolation runs for ({condition}, {where}, k={k})")
    return {(r.task, r.seed): getattr(r, metric) for r in sub.itertuples()}


def condition_ids(df, condition: str, where: str, k: int) -> dict:
    """``{(task, seed): input indices}`` matching :func:`condition_cells`: pass two of them to
    :func:`helpers.study.stats.paired_differences` to pair a condition run on the first inputs only (the
    random control, a sweep) with one run on all of them."""
    return condition_cells(df, condition, where, k, metric="input")


@dataclass(frozen=True)
class IsolationSizes(RunSizes):
    """Run sizes of :func:`isolation_runs` (notebook 02's: :func:`isolation_sizes`)."""

    seeds: tuple[int, ...]  # every seed gets the four conditions at k_main layers
    n: Mapping[str, int] | int  # test inputs per (task, seed): per task, or one number for every task
    sweep_seeds: tuple[int, ...]  # these seeds also get the sweep over k_sweep
    k_main: int  # the isolated layers (first / last k) of the four conditions
    k_sweep: tuple[int, ...]
    sweep_n: int | None  # the sweep's k != k_main run on the first sweep_n inputs (None: all)
    random_n: int | None  # the random control runs on the first random_n inputs (None: all)
    random_draw: str  # "authors": a draw of random positions per input and per layer
    batch_size: int


def isolation_sizes(profile) -> IsolationSizes:
    """Run size of notebook 02.

    With a shared prefix the label conditions cost about one vanilla pass each
    (the isolated demonstrations run once, the inputs as suffixes). The random
    control with the authors' draw runs every input's full prompt (a draw per
    input and layer), so it runs on the first ``random_n`` inputs
    (``profile.n_random_control``) of each task and seed. ``default`` and
    ``paper``: the four k=5 conditions on ``n_test`` inputs per task and every
    seed; the k in {1, 3, 7} sweep (12 more conditions, a curve) on the first
    ``sweep_n`` inputs (16 by default) of the first seed (``paper``: all inputs,
    every seed). ``smoke``: 4 inputs per task (2 on AGNews), k in {1} only.
    """
    s = run_sizes("isolation", profile)
    n = {t: min(v, profile.n_test) for t, v in per_task(s["n"], profile.tasks).items()}
    random_n = min(profile.n_random_control, max(n.values()))
    return IsolationSizes(seeds=s["seeds"], n=n, sweep_seeds=s["sweep_seeds"], k_main=5, k_sweep=s["k_sweep"],
                          sweep_n=s["sweep_n"], random_n=random_n, random_draw="authors", batch_size=profile.batch_size)


@pins_weights
def isolation_runs(model, tasks: Sequence[str], sizes: IsolationSizes, top_k: int = 5, profile: str = "",
                   progress: bool = True) -> dict:
    """All isolation runs of notebook 02, cached per (task, seed), at the run sizes ``sizes``
    (:func:`isolation_sizes`, or an :class:`IsolationSizes` of your own).

    Every seed of ``sizes.seeds`` gets the four conditions at ``sizes.k_main`` layers; seeds in
    ``sizes.sweep_seeds`` also get ``sizes.k_sweep``. The random control uses the run's seed
    and, with ``sizes.random_n``, only the first that many inputs (:func:`isolation_experiment`).
    Returns ``{(task, seed): {"base": Predictions, (condition, where, k): Predictions, ...}}``.
    """
    if not isinstance(sizes, IsolationSizes):
        from helpers.core.checks import ArgumentError

        raise ArgumentError(f"sizes must be an IsolationSizes (isolation_sizes(profile), or IsolationSizes(seeds=..., "
                            f"n=..., ...)), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n, k_main=sizes.k_main)

    def run(task, seed):
        ks, s = _layer_counts(sizes, seed), _prompt_set(model, task, seed, sizes)
        sub = {k: sizes.sweep_n for k in ks if k != sizes.k_main} if sizes.sweep_n else None
        return isolation_experiment(model, s.prompts, s.label_ids, ks=ks, seed=seed, batch_size=sizes.batch_size,
                                    top_k=top_k, random_draw=sizes.random_draw, sub_n=sub, random_n=sizes.random_n)

    return run_grid("isolation", model, tasks, seeds, run,
                    lambda task, seed: _cell_params(sizes, task, seed, top_k, profile), progress=progress and "isolation")


def _count(sizes: IsolationSizes, task: str) -> int:
    return sizes.n[task] if isinstance(sizes.n, Mapping) else int(sizes.n)


def _layer_counts(sizes: IsolationSizes, seed: int) -> list[int]:
    return sorted({sizes.k_main, *(sizes.k_sweep if seed in sizes.sweep_seeds else ())})


def _prompt_set(model, task: str, seed: int, sizes: IsolationSizes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)  # multi-token label words: read at their first token
        return make_icl_set(model, task, seed, _count(sizes, task))


def _cell_params(sizes: IsolationSizes, task: str, seed: int, top_k: int, profile: str) -> dict:
    """What identifies one stored cell of :func:`isolation_runs`, beside the model, the task and the seed."""
    return {"n": _count(sizes, task), "ks": _layer_counts(sizes, seed), "top_k": top_k, "profile": profile,
            "sweep_n": sizes.sweep_n, "random_draw": sizes.random_draw, "random_n": sizes.random_n}


def stored_isolation(model, task: str, seed: int, sizes: IsolationSizes, top_k: int = 5,
                     profile: str = "") -> tuple[PromptSet, dict] | None:
    """Notebook 02's run of one (task, seed) (:func:`isolation_runs` at ``sizes``, ``top_k``, ``profile``) and the
    prompt set it ran on, read from the store; None when the store does not hold it: nothing is computed. For a
    protocol that runs §2.2's isolation on the same prompts (notebook 11's natural prompts) and need not run it
    again where notebook 02 already has."""
    run_args([task], sizes.seeds, n=sizes.n, k_main=sizes.k_main)  # the same checks as a run
    params = {"model": model_label(model), "task": task, "seed": seed, **_cell_params(sizes, task, seed, top_k,
                                                                                       profile)}
    if not stored("isolation", params, model=model):
        return None
    one = replace(sizes, seeds=(seed,))
    return _prompt_set(model, task, seed, one), isolation_runs(model, [task], one, top_k, profile, progress=False)[
        (task, seed)]


def notebook02_cell(model, task: str, seed: int, profile) -> tuple[PromptSet, dict] | None:
    """Notebook 02's run of ``(task, seed)`` under ``profile`` (its sizes, top-5 words and store key, as notebook 02
    runs them: :func:`isolation_runs`) and the prompt set it ran on, when notebook 02 has run it (the store holds
    it); None when it has not, or when the profile's run has no such task or seed. Nothing is computed. The named
    query by which another notebook reads notebook 02's result (notebook 11's natural prompts) without knowing how
    notebook 02 sizes or keys its runs."""
    sizes = isolation_sizes(profile)
    if seed not in sizes.seeds or task not in profile.tasks:
        return None
    return stored_isolation(model, task, seed, sizes, profile=profile.name)


def loyalty_frame(runs: dict, k_words: int = 5):
    """``pandas.DataFrame`` of :func:`loyalty_rows` for every (task, seed) of :func:`isolation_runs`."""
    import pandas as pd  # lazy: pandas takes a second to import

    rows = []
    for (task, seed), r in runs.items():
        for row in loyalty_rows(r, k_words):
            rows.append({"task": task, "seed": seed, **row})
    return pd.DataFrame(rows)


def isolation_verdict(loyalty: dict, drop: dict, barely: float = 0.80) -> tuple[str, dict]:
    """Verdict on the §2.2 claim from 95% intervals (criteria fixed before the run).

    ``loyalty[(condition, where)]``: the interval of mean label loyalty (fraction) at k=5;
    ``drop[(condition, where)]``: the interval of that condition's loyalty minus
    label-first's, paired per input, for the three other conditions.

      1. label words isolated in the first layers hurt most: every ``drop`` interval lies above zero;
      2. label words isolated in the last layers barely matter: the loyalty interval lies at or above ``barely``;
      3. random words barely matter: both loyalty intervals lie at or above ``barely``.

    "replicates" if all hold; "partly" if check 1 holds but not all; "does not replicate"
    if some ``drop`` interval lies below zero; otherwise "inconclusive".
    """
    checks = {
        "label-first lowest (every paired drop above 0)": all(iv.low > 0 for iv in drop.values()),
        f"label-last >= {barely:.0%}": loyalty[("label", "last")].low >= barely,
        f"random first and last >= {barely:.0%}": all(loyalty[("random", w)].low >= barely for w in ("first", "last")),
    }
    c1 = next(iter(checks.values()))
    if c1:
        return ("replicates" if all(checks.values()) else "partly"), checks
    if any(iv.high < 0 for iv in drop.values()):
        return "does not replicate", checks
    return "inconclusive", checks


def isolation_intervals(df, k: int) -> tuple[dict, dict]:
    """95% intervals of notebook 02 at ``k`` layers, from :func:`loyalty_frame`.

    Returns ``(loyalty, drop)``: ``loyalty[(condition, where, metric)]`` for ``metric`` in ``label_loyal`` and
    ``word_loyal`` (fractions), and ``drop[(condition, where)]``: that condition's label loyalty minus
    label-first's, paired per input (for the random control, on its first inputs), for the three other
    conditions. Seeds, then the inputs within each (task, seed), resampled (:mod:`helpers.study.stats`).
    """
    loyalty = {(c, w, m): bootstrap_means(condition_cells(df, c, w, k, m))
               for c, w in MAIN_CONDITIONS for m in ("label_loyal", "word_loyal")}
    first = condition_cells(df, "label", "first", k), condition_ids(df, "label", "first", k)
    drop = {(c, w): bootstrap_means(paired_differences(condition_cells(df, c, w, k), first[0],
                                                       condition_ids(df, c, w, k), first[1]))
            for c, w in MAIN_CONDITIONS[1:]}
    return loyalty, drop


def isolation_claims(loyalty: dict, drop: dict, k: int = 5, barely: float = 0.80, context: str = "") -> list:
    """The §2.2 claims (:data:`helpers.study.paper.CLAIMS_02`), one per condition, from :func:`isolation_intervals`.

    The checks are :func:`isolation_verdict`'s, one claim each: label words isolated in the first ``k`` layers
    hurt most (every paired drop above 0: replicates; one below 0: does not replicate; otherwise inconclusive);
    label words in the last ``k`` layers, and random words in the first and in the last ``k``, barely matter
    (label loyalty interval at or above ``barely``: replicates; entirely below it: does not replicate;
    otherwise inconclusive). ``ours``: the condition's label loyalty in percent.
    """
    pct = {cw: loyalty[(*cw, "label_loyal")].scaled(100) for cw in MAIN_CONDITIONS}
    drops = "; ".join(f"{c} words {w} {k} minus label words first {k}: {drop[(c, w)].scaled(100):+.1f} points"
                      for c, w in MAIN_CONDITIONS[1:])
    if all(iv.low > 0 for iv in drop.values()):
        v1 = "replicates"
    elif any(iv.high < 0 for iv in drop.values()):
        v1 = "does not replicate"
    else:
        v1 = "inconclusive"
    def said(key: str) -> str:  # the paper's statement, with this run's k (the control isolates its 1 of 2 layers)
        text = CLAIMS[key]["statement"]
        return text if k == 5 else text.replace("5 layers", "layer" if k == 1 else f"{k} layers")

    out = [claim("02.label_first_hurts_most", pct[("label", "first")], v1,
                 "each other condition's label loyalty minus this one's, paired per input, has its 95% interval "
                 "above 0", unit="%", context=context, note=f"Paired drops: {drops}.",
                 statement=said("02.label_first_hurts_most"))]
    names = {("label", "last"): "02.label_last_barely_matters", ("random", "first"): "02.random_first_barely_matters",
             ("random", "last"): "02.random_last_barely_matters"}
    for cw, key in names.items():
        iv = pct[cw]
        verdict = ("replicates" if iv.low >= 100 * barely else
                   "does not replicate" if iv.high < 100 * barely else "inconclusive")
        out.append(claim(key, iv, verdict, f"label loyalty interval at or above {barely:.0%}", unit="%",
                         context=context, statement=said(key)))
    return out
