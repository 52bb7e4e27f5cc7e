"""The protocol of the causal label-reading check (notebook 10 and the controls' power): run sizes, the runs over
tasks x seeds (each stored by content), the interval, the criterion written before any run, and the claims. The
method (:mod:`helpers.experiments.label_reading`): the deep layers' keys and values at the label positions taken from
the same prompt with its labels permuted, against as many content positions.

**Criterion (fixed before any run).** The score per input is 1 where the answer moved to ``perm[answer]`` with the
label positions patched, minus the same with as many content positions patched; the claim "q reads the mapping from
the label words in the deep layers" replicates when the 95% interval of its mean (two-level bootstrap over seeds and
inputs) lies above 0, does not replicate when it lies below 0, and is inconclusive otherwise. ``perm`` moves every
label one place (label ``c`` becomes ``c + 1`` modulo the number of labels), so no answer can stay by chance.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from helpers.core.controls.model import ControlPrompts, relabel
from helpers.core.grid import run_grid
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.relabelled import relabelled_prompts, shift
from helpers.core.sizing import CONTROL_BATCH
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.label_reading import label_reading
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means

__all__ = ["shift", "reading_runs", "reading_interval", "reading_verdict", "reading_claim", "control_reading",
           "control_reading_claim", "kept_share", "reading_shares"]


def reading_runs(model, tasks: Sequence[str], sizes, progress: bool = True) -> dict:
    """``{(task, seed): label_reading(...)}`` on ``sizes.n`` inputs of one demonstration set per (task, seed) (the
    sizes of notebook 10's class isolation: :func:`helpers.protocols.isolation_classes.class_isolation_sizes`), the
    donor built from the same demonstrations with every label moved by :func:`shift`; stored on disk."""
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: every token is patched
            s = make_icl_set(model, task, seed, sizes.n)
            perm = shift(len(s.label_ids))
            # a donor over the context length: the prompt itself, which moves nothing (aligned, scored 0 - 0)
            donors = [d if d is not None else p for d, p in zip(relabelled_prompts(model, s, perm), s.prompts)]
        base = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size, top_k=0).pred
        return label_reading(model, s.prompts, donors, perm, s.label_ids, seed, batch_size=sizes.batch_size, pred=base)

    return run_grid("label_reading", model, tasks, seeds, run, {"n": sizes.n}, progress=progress and "label reading")


def reading_interval(runs: dict) -> Interval:
    """The 95% interval of (moved with the label positions patched) minus (moved with content positions patched)."""
    return bootstrap_means({cell: (r["label"] - r["content"]).numpy() for cell, r in runs.items() if len(r["label"])})


def reading_shares(runs: dict) -> dict[str, Interval]:
    """The 95% intervals of the share of answers that move with the labels, with the label positions patched and
    with as many content positions patched (a figure's two bars)."""
    return {name: bootstrap_means({cell: r[field].numpy() for cell, r in runs.items() if len(r[field])})
            for name, field in (("label positions", "label"), ("as many content positions", "content"))}


def reading_verdict(iv: Interval) -> str:
    if iv.low > 0:
        return "replicates"
    return "does not replicate" if iv.high < 0 else "inconclusive"


def reading_claim(iv: Interval, key: str = "10.label_read_causal", context: str = "",
                  note: str = "") -> Claim:
    return claim(key, iv, reading_verdict(iv),
                 "interval of (answers that move with the labels when the label positions' deep keys and values come "
                 "from the relabelled prompt) minus (the same for as many content positions) above 0",
                 context=context, note=note)


def control_reading(model, cp: ControlPrompts, seed: int, batch_size: int = CONTROL_BATCH) -> dict:
    """:func:`label_reading` on a control's sequences, the donor :func:`helpers.core.controls.model.relabel` by
    :func:`shift`."""
    perm = shift(len(cp.label_ids))
    return label_reading(model, cp.prompts, relabel(cp, perm).prompts, perm, cp.label_ids, seed,
                         batch_size=batch_size)


def control_reading_claim(runs: dict, context: str = "") -> Claim:
    """``10.control_label_read_causal``: the check on a control's replicate (``{("control", seed): runs}``)."""
    return reading_claim(reading_interval(runs), "10.control_label_read_causal", context)


def kept_share(runs: dict) -> float:
    """The share of inputs whose donor had their positions (the others cannot be patched position by position)."""
    kept = sum(len(r["kept"]) for r in runs.values())
    total = sum(int(r["n"]) for r in runs.values())
    return float(kept / total) if total else float("nan")

