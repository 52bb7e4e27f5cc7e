"""The protocol of notebook 10's induction and function-vector rankings of the heads: its run sizes, its runs over tasks
x seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.head_scores`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from helpers.core.grid import run_grid
from helpers.core.prompts import PromptSet, make_icl_set
from helpers.core.seeds import stream_seed
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning
from helpers.core.unrelated import EvalSizes
from helpers.study.claims import above_zero, claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_means, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer
from helpers.experiments.head_scores import SETS, fv_scores, shuffled_label_set

__all__ = ["HeadScoreSizes", "head_score_sizes", "scoring_seed", "scoring_set", "fv_runs", "head_set_intervals",
           "head_set_claims"]


@dataclass(frozen=True)
class HeadScoreSizes(RunSizes):
    """Run sizes of notebook 10's head rankings and ablations (:func:`head_score_sizes`)."""

    seeds: tuple[int, ...]  # the ablations' demonstration sets
    n_eval: int  # test inputs per (task, seed) for the ablations
    n_attr: int  # prompts per task that score the heads (their own seed, apart from the ablations')
    frac: float  # the share of all heads each ranking's top set holds (at least 4 heads)
    batch_size: int

    def ablation_sizes(self) -> EvalSizes:
        """The ablations' sizes on the tasks' own label words: ``n_eval`` inputs of every seed, one demonstration per
        class (:func:`helpers.core.prompts.make_icl_set`)."""
        return EvalSizes(n_eval=self.n_eval, seeds=self.seeds, k_per_class=1, batch_size=self.batch_size)

    def foobar_sizes(self) -> EvalSizes:
        """The foo/bar ablations' sizes: ``n_eval`` queries of every seed, 2 demonstrations per class (notebook
        07's evaluation prompts, :func:`helpers.core.unrelated.eval_set`)."""
        return EvalSizes(n_eval=self.n_eval, seeds=self.seeds, k_per_class=2, batch_size=self.batch_size)


def head_score_sizes(profile) -> HeadScoreSizes:
    """``paper``: every seed, ``n_test`` inputs, 64 scoring prompts per task; ``default``: the first two seeds, 32
    inputs, 16 scoring prompts per task (notebook 10 at default is sized to stay within 20 minutes per model on 2
    cores; its recorded run times are in docs/results.md); ``smoke``: one seed, 4 inputs, 4 scoring prompts. The top
    2% of heads (Crosbie & Shutova ablate 1-3%; at least 4 heads)."""
    return HeadScoreSizes(**run_sizes("head_scores", profile))


def scoring_seed(sizes: HeadScoreSizes) -> int:
    """The seed of the scoring prompts: apart from every ablation seed, so no head is ranked on the inputs it is
    then ablated on."""
    return stream_seed("ranking", max(sizes.seeds))


def scoring_set(model: HookedTransformer, task: str, sizes: HeadScoreSizes) -> PromptSet:
    """The prompts that score the heads for ``task`` (:func:`scoring_seed`, ``sizes.n_attr`` inputs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, task, scoring_seed(sizes), sizes.n_attr)


@pins_weights
def fv_runs(model: HookedTransformer, tasks: Sequence[str], sizes: HeadScoreSizes) -> dict[str, torch.Tensor]:
    """``{task: [layer, head]}``: the mean function-vector score (:func:`fv_scores`) over the task's scoring prompts,
    clean against their labels shuffled (:func:`shuffled_label_set`), stored on disk."""
    def run(task, seed):
        clean = scoring_set(model, task, sizes)
        bad = shuffled_label_set(model, clean, seed)
        return fv_scores(model, clean.prompts, bad.prompts, clean.label_ids, sizes.batch_size).mean(0)

    seed = scoring_seed(sizes)
    runs = run_grid("fv_scores", model, list(tasks), [seed], run, {"n": sizes.n_attr})
    return {task: runs[(task, seed)] for task in tasks}


def head_set_intervals(cells: dict[str, dict[str, dict]]) -> dict:
    """95% intervals (seeds, then inputs; mean over tasks) from per-input values ``cells[set][condition]``
    (``{(task, seed): [value per input]}``, :func:`helpers.protocols.head_ablation.sets_cells`; conditions
    ``plain``, ``set`` (the set ablated at every position), ``random`` (as many random heads ablated), and
    ``set@q``, ``random@q`` at q only, on the same inputs): each condition's accuracy per set, ``(set, "excess")``
    = random minus set and ``(set, "excess@q")`` the same at q (paired per input), and ``("fv - induction",
    "excess")`` = accuracy with the induction set ablated minus with the function-vector set ablated (paired),
    when both sets are there."""
    out = {}
    for name, c in cells.items():
        for cond, values in c.items():
            out[(name, cond)] = bootstrap_means(values)
        for at in ("", "@q"):
            if f"set{at}" in c and f"random{at}" in c:
                out[(name, "excess" + at)] = bootstrap_means(paired_differences(c["random" + at], c["set" + at]))
    if {"fv", "induction"} <= set(cells):
        out[("fv - induction", "excess")] = bootstrap_means(paired_differences(cells["induction"]["set"],
                                                                               cells["fv"]["set"]))
    return out


def head_set_claims(intervals: dict, n_top: int, context: str = "", foobar: dict | None = None) -> list:
    """Per ranking: ablating its top ``n_top`` heads at every position costs more accuracy than ablating as many
    random heads (the 95% interval of random minus set above 0: "replicates"; below 0: "does not replicate";
    containing 0: "inconclusive"); and the function-vector set costs more than the induction set (Yin &
    Steinhardt's claim; the same criterion on induction-ablated minus FV-ablated accuracy). With ``foobar`` (the
    intervals of the swap-averaged foo/bar accuracy, :func:`head_set_intervals` of
    :func:`helpers.experiments.head_ablation.swap_averaged` runs), per ranking the same criterion there:
    ``10.<set>_heads_foobar``."""
    out = []
    for name in SETS:
        if (name, "excess") not in intervals:
            continue
        iv = intervals[(name, "excess")]
        note = (f"accuracy: plain {intervals[(name, 'plain')]:.3f}, top {n_top} ablated {intervals[(name, 'set')]:.3f}, "
                f"{n_top} random heads ablated {intervals[(name, 'random')]:.3f}")
        out.append(claim(f"10.{name}_heads_ablation", iv, above_zero(iv), f"95% interval of the accuracy with {n_top} "
                         "random heads ablated minus with the set ablated (every position) above 0", context=context,
                         note=note))
    for name in SETS:
        if foobar is None or (name, "excess") not in foobar:
            continue
        iv = foobar[(name, "excess")]
        note = (f"swap-averaged foo/bar accuracy (0.5: a fixed word preference): plain {foobar[(name, 'plain')]:.3f}, "
                f"top {n_top} ablated {foobar[(name, 'set')]:.3f}, {n_top} random heads ablated "
                f"{foobar[(name, 'random')]:.3f}")
        out.append(claim(f"10.{name}_heads_foobar", iv, above_zero(iv), f"95% interval of the swap-averaged foo/bar "
                         f"accuracy with {n_top} random heads ablated minus with the set ablated (every position) "
                         "above 0", context=context, note=note))
    if ("fv - induction", "excess") in intervals:
        iv = intervals[("fv - induction", "excess")]
        out.append(claim("10.fv_over_induction", iv, above_zero(iv), "95% interval of the accuracy with the induction "
                         "set ablated minus with the function-vector set ablated above 0", context=context))
    return out
