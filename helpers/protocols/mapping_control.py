"""The protocol of paper B's premise: does the model read a foo/bar mapping from its context (notebook 07): its run
sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run, and
its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.mapping_control`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from helpers.core import unrelated as ur  # notebook 07's unrelated-label tasks and their evaluation runs
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.seeds import stream_seed
from helpers.core.sizing import FORWARD_BATCH
from helpers.core.store import pins_weights
from helpers.experiments.mapping_control import (
    MAPPING_VERDICT,
    MAPPINGS,
    REGIME_KS,
    REGIME_PAIRS,
    mapping_control,
    regime_name,
    swapped_mapping,
)
from helpers.study.claims import Claim, claim
from helpers.study.profile_table import run_sizes
from helpers.study.results import studies_tasks
from helpers.study.stats import Interval, bootstrap_means

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["mapping_tasks", "accuracy_runs", "mapping_intervals", "mapping_interval_part", "mapping_claims",
           "RegimeSizes", "regime_sizes", "regime_context", "regime_runs", "regime_intervals", "regime_confirmation",
           "regime_claims"]


def mapping_tasks(tasks: Sequence[str]) -> dict[str, dict[str, ur.UnrelatedTask]]:
    """``{mapping: {task: UnrelatedTask}}`` for every mapping of :data:`MAPPINGS`, on the selected tasks that can be
    made binary (:data:`helpers.core.unrelated.BINARY_SOURCES`), else SST-2; when that is not among the selected
    tasks the notebook says so and files its results under the tasks it ran
    (:func:`helpers.study.results.studies_tasks`)."""
    names = studies_tasks([t for t in tasks if t in ur.BINARY_SOURCES] or ["sst2"],
                          "paper B's foo/bar setting needs a binary task: SST-2, or AGNews made binary")
    return {m: {t: ur.unrelated_task(t, ur.BINARY_SOURCES[t], words) for t in names} for m, words in MAPPINGS.items()}


def accuracy_runs(model: HookedTransformer, uts: dict[str, ur.UnrelatedTask], sizes: ur.EvalSizes,
                  seeds: Sequence[int] | None = None,
                  model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """ICL accuracy on the evaluation prompts, per (task, seed) (cache kind ``"heads_acc"``).

    Returns ``{(task, seed): {"acc", "foo_share" (share predicted as label 0), "n" (prompts scored), "pred"
    and "correct" (per input)}}``. The label words are read from the tasks (key ``"words"``), so foo/bar, the
    swapped mapping, " A"/" B" and the real words are separate runs.
    """
    def run(ps, _heads, _seed):
        pr = predict_with_cache(model, ps.prompts, ps.label_ids, sizes.batch_size, cache=shared_cache(model, ps.prompts))
        return {"acc": pr.accuracy, "foo_share": float((pr.pred == 0).float().mean()), "n": len(ps.prompts),
                "pred": pr.pred.tolist(), "correct": (pr.pred == pr.gold).int().tolist()}

    return ur.cached_eval_runs("heads_acc", model, uts, sizes, seeds, model_name, run,
                            extra=lambda ut: {"words": list(ut.task.label_words)})


def mapping_intervals(runs: dict[tuple[str, int], dict], swapped: dict[tuple[str, int], dict]) -> dict[str, Interval]:
    """95% intervals of :func:`mapping_control`'s two per-input cells: ``swap_averaged`` and ``same_word``."""
    return {k: bootstrap_means(cells) for k, cells in mapping_control(runs, swapped).items()}


def mapping_interval_part(swap_averaged: Interval) -> str:
    """What the swap-averaged accuracy's 95% interval says: "follows the mapping" (above 0.5), "at chance"
    (contains 0.5) or "against the mapping" (below 0.5)."""
    if swap_averaged.low > 0.5:
        return "follows the mapping"
    if swap_averaged.high < 0.5:
        return "against the mapping"
    return "at chance"


def mapping_claims(mapping: dict[str, Interval], context: str = "") -> list[Claim]:
    """Notebook 07's claim that the model learns the foo/bar mapping in context (``07.foobar_icl``), from
    :func:`mapping_intervals` of foo/bar with bar/foo, graded with :func:`mapping_interval_part`."""
    reading = mapping_interval_part(mapping["swap_averaged"])
    return [claim("07.foobar_icl", mapping["swap_averaged"], MAPPING_VERDICT[reading],
                  "swap-averaged accuracy (foo/bar with bar/foo, per input) above 0.5; a fixed word preference "
                  "scores exactly 0.5", context=context,
                  note=f"Reading: {reading}; same-word rate {mapping['same_word']:.2f} (1 = a word prior only).")]


@dataclass(frozen=True)
class RegimeSizes:
    """Sizes of the regime measurement (:func:`regime_runs`): ``ks`` (demonstrations per class), ``n_eval``
    queries per (task, seed), ``seeds``, ``tasks`` (of notebook 07's foo/bar tasks) and ``confirm_seeds`` (fresh
    seeds for the regime that clears, never among ``seeds``: :func:`regime_confirmation`)."""

    ks: tuple[int, ...]
    n_eval: int
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    confirm_seeds: tuple[int, ...]
    batch_size: int = FORWARD_BATCH  # prompts per forward pass

    def at(self, k: int) -> ur.EvalSizes:
        """The evaluation sizes of one regime size: ``k`` demonstrations per class, this measurement's queries and
        seeds (what :func:`accuracy_runs` takes)."""
        return ur.EvalSizes(n_eval=self.n_eval, seeds=tuple(self.seeds), k_per_class=int(k), batch_size=self.batch_size)


def regime_sizes(profile) -> RegimeSizes:
    """Sizes of the regime measurement from the run profile (:class:`RegimeSizes`).

    ``smoke``: 1 and 2 per class, 4 queries, one seed, SST-2 only (the code runs; not evidence). ``default``:
    every size of :data:`REGIME_KS`, 32 queries x the first 2 seeds, both tasks (64 inputs per task and size):
    each (task, seed, size, mapping) runs its demonstrations once (the shared-prefix path), so the cost is set by
    the 16-per-class AGNews prompts (about 2,000 tokens; on one free CPU core about 20 s per demonstration set and
    its 32 queries for Gemma 3 270M, 50 s for SmolLM2-135M, whose 30 layers attend over them): about 9 minutes
    for Gemma and 18 for SmolLM2 on one free core, several times that on a shared one.
    ``paper``: every size, the profile's inputs and seeds.
    """
    s = run_sizes("regime", profile)
    ks = REGIME_KS if s["ks"] == "all" else s["ks"]
    confirm = _fresh_seeds(s["seeds"]) if s["confirm_seeds"] == "fresh" else s["confirm_seeds"]
    return RegimeSizes(ks=ks, n_eval=s["n_eval"], seeds=s["seeds"], tasks=s["tasks"], confirm_seeds=confirm,
                       batch_size=s["batch_size"])


def _fresh_seeds(seeds) -> tuple[int, ...]:
    """As many seeds as ``seeds``, none of them among ``seeds`` (each plus 1000)."""
    return tuple(stream_seed("fresh", s) for s in seeds)


def regime_context(task_names: Sequence[str], pairs: Sequence[str], sizes: RegimeSizes) -> str:
    """What the regime claim rests on: tasks, label pairs, seeds x queries per size."""
    return (f"{', '.join(task_names)} with {' and '.join(pairs)}, {len(sizes.seeds)} seed(s) x "
            f"{sizes.n_eval} queries per size")


@pins_weights
def regime_runs(model: HookedTransformer, uts: dict[str, dict[str, ur.UnrelatedTask]], sizes: RegimeSizes,
                pairs: Sequence[str] = REGIME_PAIRS, model_name: str | None = None,
                progress: bool | str = False) -> dict[tuple[str, int], dict]:
    """:func:`accuracy_runs` for every label pair of ``pairs`` and its swap, at every size of ``sizes.ks``.

    ``uts``: ``{mapping name: {task: UnrelatedTask}}`` holding every pair and its swap (:func:`swapped_mapping`),
    as notebook 07's ``UTS``; the swap must name the same classes with the two words exchanged (checked).
    Each (task, seed, size) has one fixed, shuffled demonstration set, the same under a mapping and its swap, and
    the same ``sizes.n_eval`` queries; each runs its demonstrations once (shared-prefix path) and is cached as
    notebook 07's accuracy runs are (kind ``"heads_acc"``; size 2 is section 2.1's run when the sizes agree).
    Prompts longer than the model's context are dropped and counted (a (task, seed, size) whose prompts are all
    too long raises :class:`helpers.core.prompts.PromptError`, as every prediction does).

    Returns ``{(pair, k): {"runs": {(task, seed): accuracy run}, "swapped": {...}, "asked": queries asked,
    "dropped": queries dropped for length}}`` (over all tasks and seeds).
    """
    ur.check_sizes(sizes, RegimeSizes, "regime_sizes(profile)")
    out = {}
    jobs = [(p, k) for p in pairs for k in sizes.ks]
    for pair, k in tqdm(jobs, desc="regime" if progress is True else (progress or "regime"), disable=not progress):
        sw = swapped_mapping(pair)
        if pair not in uts or sw not in uts:
            raise KeyError(f"uts needs the mapping {pair!r} and its swap {sw!r}; it has {sorted(uts)}")
        if uts[pair].keys() != uts[sw].keys():
            raise ValueError(f"{pair!r} and {sw!r} must cover the same tasks")
        for t, ut in uts[pair].items():
            other = uts[sw][t]
            if tuple(other.task.label_words) != tuple(reversed(ut.task.label_words)) or other.classes != ut.classes:
                raise ValueError(f"{t}: {sw!r} does not swap the label words of {pair!r} on the same classes "
                                 f"({list(ut.task.label_words)} vs {list(other.task.label_words)})")
        s = sizes.at(k)
        runs = accuracy_runs(model, uts[pair], s, model_name=model_name)
        swapped = accuracy_runs(model, uts[sw], s, model_name=model_name)
        asked = sum(min(s.n_eval, len(uts[pair][t].test)) for t, _ in runs)
        scored = sum(r["n"] for r in runs.values())
        out[(pair, int(k))] = {"runs": runs, "swapped": swapped, "asked": asked, "dropped": asked - scored}
    return out


def regime_intervals(runs: dict[tuple[str, int], dict]) -> dict[tuple[str, int], dict]:
    """Per regime (pair, k) of :func:`regime_runs`: 95% intervals (seeds, then inputs; mean over tasks) of the
    ``swap_averaged`` accuracy and the ``same_word`` rate (:func:`mapping_control`), of the plain ``accuracy``
    under the pair and ``accuracy_swapped`` under its swap, the ``reading`` (:func:`mapping_interval_part`), and
    ``asked``/``dropped``."""
    out = {}
    for key, r in runs.items():
        row = {"asked": r["asked"], "dropped": r["dropped"], **mapping_intervals(r["runs"], r["swapped"])}
        row["accuracy"] = bootstrap_means({c: v["correct"] for c, v in r["runs"].items()})
        row["accuracy_swapped"] = bootstrap_means({c: v["correct"] for c, v in r["swapped"].items()})
        row["reading"] = mapping_interval_part(row["swap_averaged"])
        out[key] = row
    return out


@pins_weights
def regime_confirmation(model: HookedTransformer, uts: dict[str, dict[str, ur.UnrelatedTask]], regime: tuple[str, int],
                        sizes: RegimeSizes, model_name: str | None = None,
                        progress: bool | str = False) -> dict:
    """The regime ``(pair, k)`` that cleared (:func:`clear_regimes`), run again on fresh seeds
    (``sizes.confirm_seeds``, none of the first pass's): its :func:`regime_intervals` row.

    The best of several intervals is biased upwards (with ten 95% intervals one may clear 0.5 by chance alone),
    so a regime chosen after the fact counts only if it clears again on inputs and demonstrations it was not
    chosen on: :func:`regime_claims` grades ``07.unrelated_regime`` with this row."""
    pair, k = regime
    seeds = tuple(sizes.confirm_seeds)
    if set(seeds) & set(sizes.seeds):
        raise ValueError(f"confirm_seeds {seeds} overlap the first pass's seeds {tuple(sizes.seeds)}: "
                         "a confirmation needs fresh seeds")
    runs = regime_runs(model, uts, replace(sizes, ks=(int(k),), seeds=seeds), pairs=(pair,),
                       model_name=model_name, progress=progress)
    return regime_intervals(runs)[(pair, int(k))]


def regime_claims(intervals: dict[tuple[str, int], dict], context: str = "", confirmation: dict | None = None) -> list[Claim]:
    """Notebook 07's claim about the regime, ``07.unrelated_regime``, from :func:`regime_intervals` (criterion
    fixed before the run: :func:`mapping_interval_part`, i.e. the 95% interval's lower bound above 0.5).

    The regime with the highest lower bound, its verdict as ``07.foobar_icl``'s, except that a regime that clears
    0.5 counts ("replicates") only when its run on fresh seeds (``confirmation``, the :func:`regime_confirmation`
    row of that regime) clears 0.5 again; otherwise the verdict is "inconclusive". Its note lists every regime and
    the confirmation. The ablation in that regime is graded by
    :func:`helpers.protocols.head_ablation.regime_ablation_claim`.
    """
    if not intervals:
        raise ValueError("no regime to report")
    best = max(intervals, key=lambda k: intervals[k]["swap_averaged"].low)
    reading = intervals[best]["reading"]
    verdict = MAPPING_VERDICT[reading]
    confirmed = ""
    if reading == "follows the mapping":
        if confirmation is None:
            verdict, confirmed = "inconclusive", " Not yet run on fresh seeds, so it does not count."
        else:
            again = confirmation["reading"] == "follows the mapping"
            verdict = "replicates" if again else "inconclusive"
            confirmed = (f" On fresh seeds: {confirmation['swap_averaged']:.2f} ({confirmation['reading']}), so it "
                         + ("counts." if again else "does not count: chosen as the best of several, it did not "
                                                    "clear 0.5 again."))
    listing = "; ".join(f"{regime_name(k)} {r['swap_averaged']:.2f}" for k, r in intervals.items())
    dropped = sum(r["dropped"] for r in intervals.values())
    return [claim("07.unrelated_regime", intervals[best]["swap_averaged"], verdict,
                  f"in at least one of the {len(intervals)} regimes (label pair x demonstrations per class) the "
                  "swap-averaged accuracy's 95% interval lies above 0.5, and again on fresh seeds; shown: the "
                  "regime with the highest lower bound", context=context,
                  note=f"Shown: {regime_name(best)} ({reading}).{confirmed} Every regime: {listing}. Prompts "
                       f"dropped for length: {dropped}. With {len(intervals)} intervals at 95% each, one may clear "
                       "0.5 by chance alone.", regime=list(best))]
