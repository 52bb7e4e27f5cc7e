"""The protocol of anchor re-weighting (paper A §3.1, Table 1; notebook 04): its run sizes, its runs over tasks x seeds
(each stored by content), its intervals, the criteria written before any run, and its claims. The method it runs (a
model and prompts in, tensors out) is :mod:`helpers.experiments.reweighting`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from helpers.core import accounting
from helpers.core.checks import sizes_arg
from helpers.core.grid import model_label
from helpers.core.store import cached, pins_weights, stored
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, run_args
from helpers.experiments.reweighting import (
    SETTINGS,
    run_table1,
    table1_train_prompts,
    train_reweighting_many,
)
from helpers.study.claims import claim
from helpers.study.paper import OURS_FOR, TABLE1_GPT2XL, TASK_ORDER
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_means, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["table1_verdict", "table1_claims", "ReweightingSizes",
           "reweighting_sizes", "table1_runs", "table1_intervals", "table1_frame"]


@dataclass(frozen=True)
class ReweightingSizes(RunSizes):
    """Run sizes of notebook 04 (:func:`reweighting_sizes`)."""

    seeds: tuple[int, ...]
    n_test: int  # test inputs per (task, seed)
    epochs: int  # training epochs of beta (the paper's 10)
    per_class: int  # training examples per class (the paper's 4)
    batch_size: int  # evaluation batches


def reweighting_sizes(profile) -> ReweightingSizes:
    """Run size of notebook 04: every seed of the profile, ``profile.n_test`` test inputs per (task, seed), beta
    trained ``profile.reweight_epochs`` epochs on ``profile.reweight_train_per_class`` examples per class."""
    return ReweightingSizes(**run_sizes("reweighting", profile))


@pins_weights
def table1_runs(model: HookedTransformer, tasks: Sequence[str], sizes: ReweightingSizes, lr: float = 0.01) -> dict:
    """:func:`run_table1` for every (task, seed) of ``tasks`` and ``sizes.seeds`` (:func:`reweighting_sizes`: test
    inputs, epochs, training examples per class, the evaluation's batch size), each cached on disk:
    ``{(task, seed): Table1Row}``."""
    sizes_arg(sizes, ReweightingSizes, "reweighting_sizes(profile)")
    n_test, epochs, per_class, eval_batch_size = sizes.n_test, sizes.epochs, sizes.per_class, sizes.batch_size
    tasks, seeds = run_args(tasks, sizes.seeds, n_test=n_test, per_class=per_class)
    name = model_label(model)
    rows = {}
    for task in tasks:
        params = {seed: dict(model=name, task=task, seed=seed, n_test=n_test, epochs=epochs, per_class=per_class,
                             lr=lr, batch=1) for seed in seeds}
        # the seeds still to compute train together (train_reweighting_many: the same betas as one by one)
        missing = [seed for seed in seeds if not stored("reweight_table1", params[seed], model=model)]
        trained = {}
        if len(missing) > 1:
            sets = [table1_train_prompts(model, task, seed, per_class) for seed in missing]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LabelWordWarning)
                lids = label_token_ids(model.tokenizer, get_task(task))
            with accounting.step("reweight_train"):  # its own row in the accounting table
                trained = dict(zip(missing, train_reweighting_many(model, sets, lids, missing, epochs=epochs, lr=lr)))
        for seed in seeds:
            rows[task, seed] = cached("reweight_table1", params[seed], lambda: run_table1(
                model, task, seed, n_test, epochs=epochs, lr=lr, batch_size=1, per_class=per_class,
                eval_batch_size=eval_batch_size, trained=trained.get(seed)), model=model)
    return rows


def table1_intervals(rows: dict) -> tuple[dict, dict]:
    """95% intervals of Table 1 from :func:`table1_runs`' rows (seeds, then test inputs, resampled).

    Returns ``(accuracy, gains)``: ``accuracy[setting][task display name or "Average"]`` (%) for the three
    settings of :data:`SETTINGS`, and ``gains["vanilla 1-shot" | "vanilla 5-shot"]``: re-weighting minus that
    baseline on the task-averaged accuracy, paired per input (points). All three settings score the same inputs.
    """
    cells = {c: {(t, s): getattr(r, f) for (t, s), r in rows.items()} for c, f in SETTINGS.items()}
    tasks = list(dict.fromkeys(t for t, _ in rows))
    accuracy = {c: {get_task(t).display: bootstrap_means({s: v for (tt, s), v in cells[c].items() if tt == t}
                                                         ).scaled(100) for t in tasks}
                | {"Average": bootstrap_means(cells[c]).scaled(100)} for c in SETTINGS}
    gains = {b: bootstrap_means(paired_differences(cells["anchor re-weighting"], cells[b])).scaled(100)
             for b in ("vanilla 1-shot", "vanilla 5-shot")}
    return accuracy, gains


def table1_frame(accuracy: dict, model_name: str) -> pd.DataFrame:
    """Table 1 as the paper prints it (GPT2-XL, its EmoC column beside our TweetEval-emotion) above ours
    (estimate [95% interval], % accuracy), one row per (source, setting)."""
    tasks = [k for k in next(iter(accuracy.values())) if k != "Average"]
    cols = {get_task(OURS_FOR[k]).display: k for k in TASK_ORDER}
    paper_rows = {("GPT2-XL (paper)", c): {t: f"{100 * TABLE1_GPT2XL[c][cols[t]]:.2f}" if t in cols else ""
                                          for t in tasks} | {"Average": f"{100 * TABLE1_GPT2XL[c]['average']:.2f}"}
                  for c in SETTINGS}
    ours = {(f"{model_name.split('/')[-1]} (ours)", c): {k: f"{iv:.1f}" for k, iv in accuracy[c].items()}
            for c in SETTINGS}
    return pd.DataFrame({**paper_rows, **ours}).T


def table1_verdict(gain_1shot, gain_5shot) -> str:
    """Verdict on §3.1 from the 95% intervals of two paired contrasts (criteria fixed before the run).

    ``gain_1shot``: re-weighting minus vanilla 1-shot; ``gain_5shot``: re-weighting
    minus vanilla 5-shot (:class:`helpers.study.stats.Interval`, task-averaged accuracy).
    "replicates": both intervals lie above zero; "partly": only the gain over
    1-shot does; "does not replicate": the gain over 1-shot lies below zero;
    "inconclusive": its interval contains zero.
    """
    if gain_1shot.low > 0:
        return "replicates" if gain_5shot.low > 0 else "partly"
    if gain_1shot.high < 0:
        return "does not replicate"
    return "inconclusive"


def _gain_verdict(iv) -> str:
    """A paired gain judged on its 95% interval: above zero replicates, below does not, across is inconclusive."""
    if iv.low > 0:
        return "replicates"
    return "does not replicate" if iv.high < 0 else "inconclusive"


def table1_claims(accuracy: dict, gains: dict, context: str = "") -> list:
    """Notebook 04's claims (:class:`helpers.study.claims.Claim`).

    ``accuracy``, ``gains``: :func:`table1_intervals` (the ``"Average"`` accuracy of each setting, %; the gains of
    re-weighting over each baseline, paired per input, points).
    The two gains carry the verdicts (criteria of :func:`table1_verdict`, fixed before the run; the first claim's
    note gives its overall verdict); the accuracies are another model's and are shown beside the paper's as
    context ("not comparable").
    """
    gain_1shot, gain_5shot = gains["vanilla 1-shot"], gains["vanilla 5-shot"]
    overall = table1_verdict(gain_1shot, gain_5shot)
    keys = {"vanilla 1-shot": "1shot", "vanilla 5-shot": "5shot", "anchor re-weighting": "reweighting"}
    return [
        claim("04.gain_over_1shot", gain_1shot, _gain_verdict(gain_1shot),
              "95% interval of re-weighting minus vanilla 1-shot (paired per input) above 0", unit="points",
              context=context, note=f"Both gains together: {overall} (table1_verdict)."),
        claim("04.gain_over_5shot", gain_5shot, _gain_verdict(gain_5shot),
              "95% interval of re-weighting minus vanilla 5-shot (paired per input) above 0", unit="points",
              context=context),
        *[claim(f"04.accuracy_{keys[k]}", accuracy[k]["Average"], "not comparable",
                "none: a different model's accuracy, context for the gains", unit="%", context=context)
          for k in keys],
    ]
