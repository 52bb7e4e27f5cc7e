"""The protocol of the causal gathering check (notebook 10 and the controls' power): the runs over tasks x seeds
(each stored by content), the interval, the criterion written before any run, and the claims. The method
(:mod:`helpers.experiments.label_gathering`): each label word's links to its own demonstration's text blocked in the
first ``k`` layers, against as many content-to-content links.

**Criterion (fixed before any run).** Per input, correct with the content links blocked minus correct with the label
words' own-text links blocked (the accuracy the label words' gathering is worth beyond as many ordinary links); the
claim "the label words gather their demonstrations in the shallow layers" replicates when the 95% interval of its
mean (two-level bootstrap over seeds and inputs) lies above 0, does not replicate when it lies below 0, and is
inconclusive otherwise. ``k`` is §2.2's (notebook 10's class isolation: 5 layers; 1 on the controls).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from helpers.core.controls.model import ControlPrompts
from helpers.core.grid import run_grid
from helpers.core.prompts import make_icl_set
from helpers.core.sizing import CONTROL_BATCH
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.label_gathering import gathering
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.stats import Interval, bootstrap_means, paired_differences

__all__ = ["gathering_runs", "gathering_intervals", "gathering_claim", "control_gathering_claim"]


def gathering_runs(model, tasks: Sequence[str], sizes, progress: bool = True) -> dict:
    """``{(task, seed): gathering(...)}`` on ``sizes.n`` inputs of one demonstration set per (task, seed), the
    first ``sizes.k`` layers (the sizes of notebook 10's class isolation), the baseline drawn with the seed; stored
    on disk."""
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: every token is a row
            s = make_icl_set(model, task, seed, sizes.n)
        return gathering(model, s.prompts, s.label_ids, range(sizes.k), seed, batch_size=sizes.batch_size)

    return run_grid("label_gathering", model, tasks, seeds, run, {"n": sizes.n, "k": sizes.k},
                    progress=progress and "label gathering")


def gathering_intervals(runs: dict) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs; mean over tasks) of the accuracy with each set blocked and of ``drop``:
    the baseline's minus the label words', paired per input."""
    acc = {name: {c: r[name].numpy().astype(float) for c, r in runs.items()} for name in ("label", "control")}
    return {**{name: bootstrap_means(v) for name, v in acc.items()},
            "drop": bootstrap_means(paired_differences(acc["control"], acc["label"]))}


def gathering_claim(ivs: dict[str, Interval], k: int, key: str = "10.label_gathers_causal",
                    context: str = "") -> Claim:
    """``key``'s claim from :func:`gathering_intervals` (module docstring)."""
    iv = ivs["drop"]
    return claim(key, iv, above_zero(iv), "95% interval of the accuracy with as many content-to-content links "
                 "blocked minus with the label words' links to their own text blocked, first "
                 f"{k} layer(s), above 0", context=context,
                 note=f"accuracy: label words' own-text links blocked {ivs['label']:.3f}, content links "
                      f"{ivs['control']:.3f}")


def control_gathering_claim(model, cp: ControlPrompts, seed: int, batch_size: int = CONTROL_BATCH,
                            context: str = "") -> Claim:
    """``10.control_label_gathers_causal``: the check on a control's sequences (every one run whole), first layer."""
    cell = gathering(model, cp.prompts, cp.label_ids, [0], seed, batch_size=batch_size, shared=False)
    return gathering_claim(gathering_intervals({("control", seed): cell}), 1, "10.control_label_gathers_causal",
                           context)
