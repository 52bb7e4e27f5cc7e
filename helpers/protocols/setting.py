"""The protocol of the in-context-learning setting: vanilla ICL accuracy for every task and seed (notebook 00): its run
sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run, and
its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.setting`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from helpers.core.checks import positive_int, sizes_arg
from helpers.core.grid import run_grid
from helpers.core.predict import shots_for
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, Task, get_task, run_args
from helpers.study.claims import Claim, claim
from helpers.study.paper import FIG5_PEAK_AUCROC
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval, bootstrap_means, cells_from_frame, interval_verdict, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["SettingSizes", "setting_sizes", "vanilla_accuracy", "vanilla_interval_metrics",
           "setting_claims", "own_task_claims"]


@dataclass(frozen=True)
class SettingSizes(RunSizes):
    """Run sizes of notebook 00 (:func:`setting_sizes`)."""

    seeds: tuple[int, ...]
    n_test: int  # test inputs per (task, seed)
    batch_size: int


def setting_sizes(profile) -> SettingSizes:
    """Run size of notebook 00: every seed of the profile and ``profile.n_test`` test inputs per (task, seed)."""
    return SettingSizes(**run_sizes("setting", profile))


@pins_weights
def vanilla_accuracy(model: HookedTransformer, tasks: Sequence[str], sizes: SettingSizes, k_per_class: int = 1,
                     profile: str = "", progress: bool = True):
    """Vanilla ICL accuracy for every (task, seed) of ``tasks`` and ``sizes.seeds`` (:func:`setting_sizes`:
    ``n_test`` test inputs per (task, seed), the batch size), ``k_per_class`` demonstrations per class: a
    ``pandas.DataFrame`` row per run.

    Columns: task, seed, shots (per class), n (inputs scored), dropped (over-long), accuracy, and per
    input ``idx`` (test row) and ``correct`` (0/1), for intervals (:mod:`helpers.study.stats`).
    Results are cached on disk (helpers.core.store.cached).
    """
    sizes_arg(sizes, SettingSizes, "setting_sizes(profile)")
    n_test = sizes.n_test
    tasks, seeds = run_args(tasks, sizes.seeds, n_test=n_test, k_per_class=k_per_class)
    batch_size = positive_int("batch_size", sizes.batch_size)  # refused before the store is read, not only on a miss
    import pandas as pd  # lazy: pandas takes a second to import

    def run(task, seed):
        s = make_icl_set(model, task, seed, n_test, shots_for(task, k_per_class))
        # the 1-shot run is the one notebooks 02, 03 and 05 read too (top-5 words, attention at q): it runs in
        # full once; nothing reads more than the label logits of the 5-shot runs
        r = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=batch_size,
                                top_k=5 if k_per_class == 1 else 0)
        return {"n": len(r), "dropped": s.n_dropped, "accuracy": r.accuracy, "pred": r.pred.tolist(),
                "gold": r.gold.tolist(), "idx": [p.query.idx for p in s.prompts]}

    with warnings.catch_warnings():  # a multi-token label word is shown by notebook 00's task table, not per run
        warnings.simplefilter("ignore", LabelWordWarning)
        runs = run_grid("vanilla_accuracy", model, tasks, seeds, run,
                        lambda task, _: {"n_test": n_test, "k": shots_for(task, k_per_class), "profile": profile},
                        progress=progress and f"{k_per_class}-shot")
    rows = [{"task": task, "seed": seed, "shots": shots_for(task, k_per_class), "n": out["n"],
             "dropped": out["dropped"], "accuracy": out["accuracy"], "idx": out["idx"],
             "correct": [int(a == b) for a, b in zip(out["pred"], out["gold"])]} for (task, seed), out in runs.items()]
    return pd.DataFrame(rows)


def _verdict(iv: Interval, direction: int, value: float = 0.0) -> str:
    v = interval_verdict(iv, direction=direction, value=value)
    return "does not replicate" if v == "opposite" else v


def vanilla_interval_metrics(intervals: dict) -> dict:
    """``intervals`` (``{(task, setting): Interval}``) as saved metrics: ``{"setting|task": [estimate, low, high]}``."""
    return {f"{st}|{t}": [iv.estimate, iv.low, iv.high] for (t, st), iv in intervals.items()}


def setting_claims(one, five, context: str = "") -> list[Claim]:
    """Notebook 00's claims from the vanilla 1-shot and 5-shot frames (:func:`vanilla_accuracy`): the two
    accuracies (mean over tasks; a baseline of another, much larger model, so "not comparable") and the
    paper's finding that more demonstrations do not help (5-shot minus 1-shot, paired on the test inputs
    both settings score: below zero replicates, above zero does not, containing zero is inconclusive).
    """
    c1, id1 = cells_from_frame(one, "correct", ids="idx")
    c5, id5 = cells_from_frame(five, "correct", ids="idx")
    diff = bootstrap_means(paired_differences(c5, c1, id5, id1)).scaled(100)
    base = "a baseline: another, much larger model (GPT2-XL) on the original test sets, no claim to check"
    over = _mean_over(one["task"])
    k = int(five["shots"].max()) if len(five) else 5
    shots = five.groupby("task", sort=False)["shots"].max()
    fewer = [f"{int(n)} on {get_task(t).display}" for t, n in shots.items() if n < k]
    return [
        claim("00.vanilla_1shot", bootstrap_means(c1).scaled(100), "not comparable", base, unit="%", context=context,
              statement=f"Vanilla ICL accuracy, 1 demonstration per class, {over}"),
        claim("00.vanilla_5shot", bootstrap_means(c5).scaled(100), "not comparable", base, unit="%", context=context,
              statement=f"Vanilla ICL accuracy, {k} demonstrations per class"
                        f"{' (' + ', '.join(fewer) + ')' if fewer else ''}, {_mean_over(five['task'])}"),
        claim("00.more_demos_no_help", diff, _verdict(diff, -1), "95% interval of 5-shot minus 1-shot below 0: "
              "replicates; above 0: does not replicate; contains 0: inconclusive", unit="points", context=context,
              statement=f"More demonstrations do not help: {k}-shot minus 1-shot accuracy, {over}"),
    ]


def _mean_over(tasks) -> str:
    """``"mean over 4 tasks (SST-2, TREC, ...)"``, or ``"on <task>"`` for one: the tasks a frame's rows cover."""
    names = [get_task(t).display for t in dict.fromkeys(tasks)]
    return f"on {names[0]}" if len(names) == 1 else f"mean over {len(names)} tasks ({', '.join(names)})"


def own_task_claims(task: Task, acc: Interval, saliency: tuple[str, dict], isolation: tuple[str, dict],
                    aucroc: tuple[str, dict], k: int, context: str = "") -> list[Claim]:
    """Notebook 08's claims on a user's task, from what notebooks 01-03's functions computed there.

    Values stay fractions (report with ``digits=2``). ``acc``: vanilla 1-shot accuracy; judged against chance
    (1 / classes): above it replicates, below it does not, otherwise inconclusive. ``saliency``,
    ``isolation``, ``aucroc``: (verdict, intervals) of
    :func:`~helpers.protocols.saliency.saliency_verdict` with :func:`~helpers.protocols.saliency.flow_intervals`
    (ours: S_wp - S_pq over the shallow third), :func:`~helpers.protocols.isolation.isolation_verdict`
    with ``{(condition, where, measure): Interval}`` (ours: label loyalty, label words isolated in the first
    ``k`` layers) and :func:`~helpers.protocols.aucroc.aucroc_verdict` with
    :func:`~helpers.protocols.aucroc.curve_intervals` (ours: the peak AUCROC_l; verdict ``"undefined"`` when
    the model predicted one class for every input). The verdicts are theirs, unchanged.
    """
    chance = 1 / task.n_classes
    ctx = f"{task.display}; {context}" if context else task.display
    sal_v, sal_iv = saliency[0], saliency[1].get((task.name, "shallow", "S_wp - S_pq"))
    iso_v, iso_iv = isolation[0], isolation[1][("label", "first", "label_loyal")]
    auc_v, auc_iv = aucroc[0], aucroc[1].get("peak")
    return [
        claim("08.accuracy_above_chance", acc, _verdict(acc, 1, chance),
              f"95% interval above chance ({chance:.2f}): replicates; below: does not replicate; "
              "contains it: inconclusive", context=ctx),
        claim("08.saliency_two_stages", sal_iv, sal_v, "notebook 01's checks: S_wp above S_pq and S_ww in the first "
              "third of the layers, S_pq above both in the last half, both above S_ww over all layers, each on its "
              "95% interval (all hold: replicates; at least half: partly)", context=ctx,
              note="Ours: S_wp - S_pq over the first third of the layers (shares of the total flow)."),
        claim("08.isolation_first_hurts", iso_iv, iso_v, f"notebook 02's checks at k = {k}: label "
              "loyalty lowest with label words isolated in the first layers (every paired drop above 0), label-last "
              "and random words at or above 0.80 (all hold: replicates; the first alone: partly)", context=ctx,
              note=f"Ours: label loyalty, label words isolated in the first {k} layers."),
        claim("08.aucroc_deep", auc_iv, "inconclusive" if auc_v == "undefined" else auc_v,
              f"notebook 03's checks: peak AUCROC_l >= {FIG5_PEAK_AUCROC - 0.05:.2f}, in the deeper half of the "
              "layers, R_l passing 0.5 after the first third, each on its whole 95% interval (all hold: "
              "replicates; some: partly)", context=ctx,
              note="Ours: peak AUCROC_l." + (" Undefined: the model predicted one class for every input."
                                              if auc_v == "undefined" else "")),
    ]
