"""The protocol of the anchors' specific checks (notebook 10 and the controls' power): the runs over tasks x seeds
(each stored by content), the intervals, the criterion written before any run, and the claims. The method
(:mod:`helpers.experiments.compression_specific`): Hidden_anchor's label loyalty against the same with the anchors'
cache built from relabelled demonstrations (``10.anchors_carry_mapping``) and with the demonstrations' text hidden
while they run, every position kept (``10.anchors_carry_text``).

**Criterion (fixed before any run).** Per input, Hidden_anchor's label loyalty (1 where its prediction is the full
prompt's) minus the loyalty under the other condition; a claim replicates when the 95% interval of its mean
(two-level bootstrap over seeds and inputs) lies above 0, does not replicate when it lies below 0, and is
inconclusive otherwise. The relabelling moves every label one place (:func:`helpers.core.relabelled.shift`), so an
answer read from the anchors cannot stay by chance.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from helpers.core.controls.model import ControlPrompts, relabel
from helpers.core.grid import run_grid
from helpers.core.predict import predict
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.relabelled import relabelled_prompts, shift
from helpers.core.sizing import CONTROL_BATCH
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.compression_specific import anchor_specificity
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.stats import Interval, bootstrap_means, paired_differences

__all__ = ["AGAINST", "specificity_runs", "specificity_intervals", "specificity_claims", "control_specificity",
           "control_specificity_claims"]

# {claim key (after "10."): the condition Hidden_anchor is compared with}
AGAINST = {"anchors_carry_mapping": "relabelled", "anchors_carry_text": "in_place"}
_CRITERIA = {
    "relabelled": "95% interval of Hidden_anchor's label loyalty minus the same with the anchors' cache built from "
                  "the demonstrations relabelled (every label moved one class), above 0",
    "in_place": "95% interval of Hidden_anchor's label loyalty minus the same with the demonstrations' text hidden "
                "from every later position while they run (every position kept), above 0",
}


def specificity_runs(model, tasks: Sequence[str], sizes, progress: bool = True) -> dict:
    """``{(task, seed): anchor_specificity(...)}`` on ``sizes.n`` inputs of one demonstration set per (task, seed)
    (the sizes of notebook 10's class isolation), the donors relabelled by :func:`~helpers.core.relabelled.shift`,
    the reference the full prompt's predictions (notebook 00's, stored); stored on disk."""
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: every token is an anchor
            s = make_icl_set(model, task, seed, sizes.n)
            donors = relabelled_prompts(model, s, shift(len(s.label_ids)))
        full = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size, top_k=0).pred
        return anchor_specificity(model, s.prompts, donors, s.label_ids, full, batch_size=sizes.batch_size)

    return run_grid("anchor_specificity", model, tasks, seeds, run, {"n": sizes.n},
                    progress=progress and "anchors' specific checks")


def specificity_intervals(runs: dict) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs; mean over tasks) of each condition's label loyalty and, per compared
    condition, Hidden_anchor's minus it (``"anchor - <condition>"``), paired per input."""
    loyal = {c: {cell: r[c].numpy() for cell, r in runs.items() if len(r[c])}
             for c in ("anchor", *AGAINST.values())}
    out = {c: bootstrap_means(v) for c, v in loyal.items()}
    for c in AGAINST.values():
        out[f"anchor - {c}"] = bootstrap_means(paired_differences(loyal["anchor"], loyal[c]))
    return out


def specificity_claims(ivs: dict[str, Interval], prefix: str = "10.", context: str = "") -> list[Claim]:
    """``10.anchors_carry_mapping`` and ``10.anchors_carry_text`` (``prefix`` + :data:`AGAINST`'s keys) from
    :func:`specificity_intervals` (module docstring)."""
    out = []
    for name, c in AGAINST.items():
        iv = ivs[f"anchor - {c}"]
        out.append(claim(f"{prefix}{name}", iv, above_zero(iv), _CRITERIA[c], context=context,
                         note=f"label loyalty: Hidden_anchor {ivs['anchor']:.3f}, {c.replace('_', ' ')} {ivs[c]:.3f}"))
    return out


def control_specificity(model, cp: ControlPrompts, seed: int, batch_size: int = CONTROL_BATCH) -> dict:
    """:func:`~helpers.experiments.compression_specific.anchor_specificity` on a control's sequences (each its own
    context, so each runs whole), the donors :func:`helpers.core.controls.model.relabel` by ``shift``."""
    full = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
    donors = relabel(cp, shift(len(cp.label_ids))).prompts
    return anchor_specificity(model, cp.prompts, donors, cp.label_ids, full, batch_size=batch_size, shared=False)


def control_specificity_claims(runs: dict, context: str = "") -> list[Claim]:
    """``10.control_anchors_carry_mapping`` and ``10.control_anchors_carry_text`` on a control's replicate
    (``{("control", seed): control_specificity(...)}``)."""
    return specificity_claims(specificity_intervals(runs), "10.control_", context)
