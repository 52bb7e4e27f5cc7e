"""The protocol of paper B's ablation of the in-context heads (notebooks 07 and 10): its run sizes, its runs over tasks
x seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.head_ablation`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from helpers.core.grid import run_grid
from helpers.core.heads import Head
from helpers.core.prompts import make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.core.unrelated import (
    BINARY_SOURCES,
    EvalSizes,
    UnrelatedTask,
    cached_eval_runs,
    check_sizes,
    unrelated_task,
)
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer
from helpers.experiments.head_ablation import (
    ABLATION_CONDITIONS,
    ALL_POSITIONS,
    FOOBAR_MAPPINGS,
    SET_CONDITIONS,
    ablation_conditions,
    sets_ablation_conditions,
)

__all__ = ["ablation_runs", "ablation_cells", "ablation_intervals", "ablation_interval_part", "ablation_claims",
           "regime_ablation_claim", "head_sets_runs", "task_intervals", "foobar_tasks", "foobar_measured_on",
           "head_sets_foobar_runs", "sets_cells"]


def ablation_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                  sizes: EvalSizes, seeds: Sequence[int] | None = None,
                  model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """Accuracy on the evaluation prompts plain, with ``heads[task]`` zero-ablated, and with as many random
    heads (drawn with the seed, disjoint from ``heads[task]``) zero-ablated, each at q only and at every position
    (cache kind ``"heads_ablation"``).

    Returns ``{(task, seed): {"plain", "in-context heads ablated", "random heads ablated", "in-context heads
    ablated (all positions)", "random heads ablated (all positions)", "random_heads", "correct"}}``;
    ``correct`` maps each condition to its per-input 0/1 (same inputs in every condition).
    """
    def run(ps, hs, seed):
        return ablation_conditions(model, ps.prompts, ps.label_ids, hs, seed, sizes.batch_size)

    return cached_eval_runs("heads_ablation", model, uts, sizes, seeds, model_name, run, heads=heads)


def _sets_key(sets: Mapping[str, Sequence[Head]]) -> dict:
    return {name: [list(map(int, h)) for h in heads] for name, heads in sets.items()}


@pins_weights
def head_sets_runs(model: HookedTransformer, tasks: Sequence[str], sets: Mapping[str, Sequence[Head]],
                   sizes: EvalSizes) -> dict[tuple[str, int], dict]:
    """:func:`sets_ablation_conditions` on ``sizes.n_eval`` inputs of one demonstration set (``sizes.k_per_class``
    per class) per (task, seed of ``sizes.seeds``), with the tasks' ordinary label words
    (:func:`helpers.core.prompts.make_icl_set`), stored on disk by model, task, seed, sizes and the sets."""
    check_sizes(sizes)
    n, k = sizes.n_eval, sizes.k_per_class
    tasks, seeds = run_args(tasks, sizes.seeds, n=n, k_per_class=k)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token label words: notebook 00 lists them
            s = make_icl_set(model, task, seed, n, k_per_class=k)
        return sets_ablation_conditions(model, s.prompts, s.label_ids, sets, seed, sizes.batch_size)

    return run_grid("head_sets_ablation", model, tasks, seeds, run, {"n": n, "k": k, "sets": _sets_key(sets)})


def foobar_tasks(tasks: Sequence[str]) -> list[str]:
    """The tasks the foo/bar runs use: the binary tasks among ``tasks`` (:data:`helpers.core.unrelated.BINARY_SOURCES`),
    or SST-2 when none is (an own task with three classes, say)."""
    return [t for t in tasks if t in BINARY_SOURCES] or ["sst2"]


def foobar_measured_on(claims: Sequence[Claim], tasks: Sequence[str]) -> list[Claim]:
    """``claims`` with each foo/bar claim (``*_foobar``) naming the tasks it ran on (:func:`foobar_tasks`) where
    those are not ``tasks``, so a report under an own task's header says which task its foo/bar rows measured."""
    used = tuple(foobar_tasks(tasks))
    if used == tuple(tasks):
        return list(claims)
    return [replace(c, tasks=used) if c.key.endswith("_foobar") else c for c in claims]


def head_sets_foobar_runs(model: HookedTransformer, tasks: Sequence[str], sets: Mapping[str, Sequence[Head]],
                          sizes: EvalSizes) -> dict[str, dict[tuple[str, int], dict]]:
    """``{mapping: {(task, seed): result}}``: :func:`sets_ablation_conditions` on notebook 07's evaluation prompts
    (:func:`helpers.core.unrelated.eval_set`) of the binary tasks among ``tasks``
    (:data:`helpers.core.unrelated.BINARY_SOURCES`; SST-2 when none is), under the foo/bar mapping and its swap
    (:data:`FOOBAR_MAPPINGS`): the same demonstrations and queries, the label words exchanged. Stored on disk."""
    binary = foobar_tasks(tasks)

    def run(ps, _heads, seed):
        return sets_ablation_conditions(model, ps.prompts, ps.label_ids, sets, seed, sizes.batch_size)

    return {m: cached_eval_runs("head_sets_ablation", model, {t: unrelated_task(t, BINARY_SOURCES[t], words)
                                                              for t in binary}, sizes, None, None, run,
                                extra=lambda ut: {"sets": _sets_key(sets)})
            for m, words in FOOBAR_MAPPINGS.items()}


def sets_cells(runs: dict[tuple[str, int], dict]) -> dict[str, dict[str, dict[tuple[str, int], list]]]:
    """``{set name: {condition: {(task, seed): per-input values}}}`` from :func:`head_sets_runs` (or
    :func:`swap_averaged`) results, conditions ``plain`` and :data:`SET_CONDITIONS`."""
    first = next(iter(runs.values()))["correct"]
    names = list(dict.fromkeys(k[0] for k in first if isinstance(k, tuple)))
    return {name: {cond: {key: r["correct"][cond if cond == "plain" else (name, cond)] for key, r in runs.items()}
                   for cond in ("plain", *SET_CONDITIONS)} for name in names}


# criteria fixed before the runs (see notebook 07)
def ablation_interval_part(drop: Interval, excess: Interval, big: float = 0.20) -> str:
    """The ablation claim from 95% intervals (criteria fixed before the run).

    ``drop``: plain minus in-context-heads-ablated accuracy; ``excess``: random-heads-ablated minus
    in-context-heads-ablated accuracy (the paper's contrast), both paired per input
    (:class:`helpers.study.stats.Interval`). "replicates": the excess lies above zero and the drop at or above
    ``big``; "partly": the excess lies above zero; "does not replicate": it lies below zero;
    "inconclusive": it contains zero.
    """
    if excess.low > 0:
        return "replicates" if drop.low >= big else "partly"
    if excess.high < 0:
        return "does not replicate"
    return "inconclusive"


def ablation_cells(runs: dict[tuple[str, int], dict]) -> dict[str, dict[tuple[str, int], list[int]]]:
    """Per-input correctness (0/1) of :func:`ablation_runs` results: ``{condition: {(task, seed): [...]}}``."""
    return {c: {key: r["correct"][c] for key, r in runs.items()} for c in ABLATION_CONDITIONS}


def task_intervals(runs: dict[tuple[str, int], dict], names: dict[str, str]) -> dict[tuple[str, str], Interval]:
    """``{(names[task], condition): Interval}``: each task's accuracy per condition (:data:`ABLATION_CONDITIONS`),
    95% over its seeds, then inputs, from :func:`ablation_runs` results; ``names`` maps a task to its shown name."""
    cells = ablation_cells(runs)
    return {(shown, c): bootstrap_means({s: v for (task, s), v in cells[c].items() if task == t})
            for t, shown in names.items() for c in ABLATION_CONDITIONS}


def ablation_intervals(runs: dict[tuple[str, int], dict]) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs, per task; mean over tasks) of :func:`ablation_runs` results: the
    accuracy of every condition (:data:`ABLATION_CONDITIONS`), ``drop`` = plain minus in-context heads ablated
    and ``excess`` = random minus in-context heads ablated, both paired per input, at q and (suffix
    :data:`ALL_POSITIONS`) at every position."""
    cells = ablation_cells(runs)
    out = {c: bootstrap_means(cells[c]) for c in ABLATION_CONDITIONS}
    for at in ("", ALL_POSITIONS):
        heads, rnd = cells["in-context heads ablated" + at], cells["random heads ablated" + at]
        out["drop" + at] = bootstrap_means(paired_differences(cells["plain"], heads))
        out["excess" + at] = bootstrap_means(paired_differences(rnd, heads))
    return out


def ablation_claims(ablation: dict[str, Interval], context: str = "") -> list[Claim]:
    """Notebook 07's two ablation claims (``07.ablation_at_q``, ``07.ablation_all``), from
    :func:`ablation_intervals`, graded with :func:`ablation_interval_part`."""
    out = []
    for at, key, where in (("", "07.ablation_at_q", "at q"), (ALL_POSITIONS, "07.ablation_all", "at every position")):
        acc = {c: ablation[c + at] for c in ("in-context heads ablated", "random heads ablated")}
        out.append(claim(key, ablation["excess" + at], ablation_interval_part(ablation["drop" + at],
                                                                              ablation["excess" + at]),
                         "accuracy with as many random heads ablated minus with the in-context heads ablated above 0 "
                         "(partly); and the drop from the plain accuracy at or above 0.20 (replicates); below 0: "
                         "does not replicate", context=context,
                         note=f"Accuracy {where}: plain {ablation['plain']:.3f}, in-context heads ablated "
                              f"{acc['in-context heads ablated']:.3f}, random heads ablated "
                              f"{acc['random heads ablated']:.3f}; drop {ablation['drop' + at]:.3f}."))
    return out


def regime_ablation_claim(ablation: dict[str, Interval], context: str) -> Claim:
    """``07.regime_ablation``: the ablation at q in the regime that follows the mapping (``context`` names the
    regime), graded as ``07.ablation_at_q`` (:func:`ablation_interval_part`)."""
    return claim("07.regime_ablation", ablation["excess"], ablation_interval_part(ablation["drop"], ablation["excess"]),
                 "accuracy with as many random heads ablated at q minus with the in-context heads ablated "
                 "above 0 (partly); and the drop from the plain accuracy at or above 0.20 (replicates)",
                 context=context,
                 note=f"Accuracy at q: plain {ablation['plain']:.3f}, in-context heads ablated "
                      f"{ablation['in-context heads ablated']:.3f}, random heads ablated "
                      f"{ablation['random heads ablated']:.3f}; drop {ablation['drop']:.3f}.")
