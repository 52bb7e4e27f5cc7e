"""The protocol of the knockout of arXiv 2504.00132 (notebook 11): each label word's links to the earlier
demonstrations blocked in the first ``k`` layers, against the same links blocked for a text token of each
demonstration; its runs over tasks x seeds (stored by content), intervals, criterion and claim. The method is
:mod:`helpers.experiments.isolation_context`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from helpers.core.grid import run_grid
from helpers.core.loyalty import label_loyalty_rows
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.stats import Interval, bootstrap_means, paired_differences
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.isolation_context import run_context_knockout
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profiles import AfterSizes

__all__ = ["context_knockout_runs", "context_knockout_intervals", "context_knockout_claim", "knockout_cell"]

ROWS = ("label", "control")  # whose links to the earlier demonstrations are blocked: the label words, text tokens


def knockout_cell(model, prompts, label_ids, base_pred, layers, batch_size: int, seed: int) -> dict:
    """``{"label": loyalty, "control": loyalty}`` of one set of prompts: per input, 1 where the prediction with the
    label words' (a text token's, drawn with ``seed``) links to the earlier demonstrations blocked in ``layers`` is
    ``base_pred``."""
    out = {}
    for rows, control in zip(ROWS, (None, seed)):
        pred = run_context_knockout(model, prompts, label_ids, layers, batch_size=batch_size, top_k=0,
                                    control_seed=control)
        out[rows] = torch.as_tensor(label_loyalty_rows(pred.label_logits.argmax(-1), base_pred))
    return out


@pins_weights
def context_knockout_runs(model, tasks: Sequence[str], sizes: AfterSizes, progress: bool = True) -> dict:
    """``{(task, seed): {"label": loyalty, "control": loyalty}}``: per input, 1 where the prediction with the links
    blocked (every earlier-demonstration position, the first ``sizes.k`` layers) is the unmodified one, on
    ``sizes.n`` inputs of one demonstration set per (task, seed), stored on disk. The control's text tokens are
    drawn with the run's seed."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    layers = list(range(sizes.k))

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, sizes.n)
        base = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size, top_k=0)
        return knockout_cell(model, s.prompts, s.label_ids, base.label_logits.argmax(-1), layers, sizes.batch_size,
                             seed)

    return run_grid("context_knockout", model, tasks, seeds, run, {"n": sizes.n, "k": sizes.k},
                    progress=progress and "context knockout")


def context_knockout_intervals(runs: dict) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs; mean over tasks) of each loyalty (:data:`ROWS`) and of ``drop``: the
    control's loyalty minus the label words', paired per input."""
    loyal = {rows: {c: r[rows].numpy() for c, r in runs.items()} for rows in ROWS}
    return {**{rows: bootstrap_means(v) for rows, v in loyal.items()},
            "drop": bootstrap_means(paired_differences(loyal["control"], loyal["label"]))}


def context_knockout_claim(ivs: dict[str, Interval], k: int, context: str = "",
                           isolation: Interval | None = None) -> Claim:
    """``11.context_knockout``: the loyalty with a text token's links to the earlier demonstrations blocked minus
    with the label word's, first ``k`` layers: above 0 "replicates" (the label words draw on the earlier
    demonstrations more than other tokens do), below 0 "does not replicate", containing 0 "inconclusive".
    ``isolation``: §2.2's loyalty with the label words fully isolated on the same task and seeds, for scale."""
    iv = ivs["drop"]
    note = (f"label loyalty: label words' links blocked {ivs['label']:.3f}, text tokens' {ivs['control']:.3f}"
            + ("" if isolation is None else f"; §2.2's full isolation of the label words {isolation:.3f}"))
    return claim("11.context_knockout", iv, above_zero(iv), "95% interval of the loyalty with a text token's links to "
                 "the earlier demonstrations blocked minus with the label word's, per demonstration, first "
                 f"{k} layer(s), above 0", context=context, note=note)
