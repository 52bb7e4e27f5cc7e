"""The protocol of §2.1's flows between every class of position (notebook 10): its run sizes, its runs over tasks x
seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.saliency_classes`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from helpers.core.grid import run_grid
from helpers.core.sizing import CONTROL_HEAVY_BATCH
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.saliency import layer_ranges, saliency_prompts
from helpers.experiments.saliency_classes import (
    CHALLENGERS,
    CONTROL_CLASSES,
    DIRECTIONS,
    FLOW_CLASSES,
    class_flows,
    layer_mean,
)
from helpers.study.claims import claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval, bootstrap_means

__all__ = ["ClassSaliencySizes", "class_saliency_sizes", "class_saliency_runs", "class_flow_frame",
           "class_flow_intervals", "above_zero_verdict", "class_saliency_claims", "control_flow_runs",
           "control_flow_intervals", "control_flow_claims"]


@dataclass(frozen=True)
class ClassSaliencySizes(RunSizes):
    """Run sizes of the class flows of notebook 10 (:func:`class_saliency_sizes`)."""

    seeds: tuple[int, ...]
    n: int  # inputs per (task, seed), each with its own demonstrations (§2.1's setting)
    batch_size: int


def class_saliency_sizes(profile) -> ClassSaliencySizes:
    """``paper``: every seed, ``n_saliency`` inputs; ``default``: the first two seeds, 16 inputs per task and seed
    (one backward pass each; notebook 01 runs the label words' flows at the full default sizes); ``smoke``: one
    seed, 2 inputs."""
    return ClassSaliencySizes(**run_sizes("class_saliency", profile))


@pins_weights
def class_saliency_runs(model, tasks: Sequence[str], sizes: ClassSaliencySizes, progress: bool = True) -> dict:
    """``{(task, seed): Float[Tensor, "n layer 2 classes"]}``: :func:`class_flows` of ``sizes.n`` inputs of every
    (task, seed), each input with its own demonstrations (:func:`helpers.experiments.saliency.saliency_prompts`),
    stored on disk by model, task, seed and n."""
    if not isinstance(sizes, ClassSaliencySizes):
        raise TypeError(f"sizes must be the ClassSaliencySizes of class_saliency_sizes(profile), got "
                        f"{type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: the classes hold every token
            prompts, lids = saliency_prompts(model, task, seed, sizes.n)
        return class_flows(model, prompts, lids, batch_size=sizes.batch_size)

    return run_grid("class_flows", model, tasks, seeds, run, {"n": sizes.n}, progress=progress and "class flows")


def class_flow_frame(runs: dict):
    """Long ``pandas.DataFrame`` (task, seed, layer, direction, class, value): each (task, seed)'s mean over its
    inputs (NaN inputs left out)."""
    import pandas as pd  # lazy: pandas takes a second to import

    rows = []
    for (task, seed), x in runs.items():
        mean = torch.nanmean(x, dim=0)  # [layer, 2, classes]
        for l in range(mean.shape[0]):
            for d, direction in enumerate(DIRECTIONS):
                for c, cls in enumerate(FLOW_CLASSES):
                    rows.append({"task": task, "seed": seed, "layer": l, "direction": direction, "class": cls,
                                 "value": float(mean[l, d, c])})
    return pd.DataFrame(rows)


def _cells(runs: dict, layers: slice, direction: str, cls: str, minus: str | None = None,
           classes: Sequence[str] = FLOW_CLASSES) -> dict:
    out = {}
    for key, x in runs.items():
        v = layer_mean(x, layers, direction, cls, classes)
        if minus is not None:
            v = v - layer_mean(x, layers, direction, minus, classes)  # paired per input
        out[key] = v[~np.isnan(v)]
    return out


def class_flow_intervals(runs: dict, n_layers: int) -> dict:
    """95% intervals (seeds, then inputs; mean over tasks) of every class's ``into`` over the shallow layers and
    ``to_q`` over the deep layers (:func:`helpers.experiments.saliency.layer_ranges`), and of each challenger's
    paired difference from the label words: ``{(direction, class or "<class> - label"): Interval}``."""
    r = layer_ranges(n_layers)
    where = {"into": r["shallow"], "to_q": r["deep"]}
    out = {}
    for direction, layers in where.items():
        for cls in ("label", *CHALLENGERS):
            out[(direction, cls)] = bootstrap_means(_cells(runs, layers, direction, cls))
        for cls in CHALLENGERS:
            out[(direction, f"{cls} - label")] = bootstrap_means(_cells(runs, layers, direction, cls, minus="label"))
    return out


# criteria fixed before the runs (notebook 10): a challenger's flow per pair against the label words'
_SALIENCY_CLAIMS = {("into", "forerunner"): "10.forerunner_gathers", ("to_q", "forerunner"): "10.forerunner_is_read",
                    ("into", "template"): "10.template_gathers", ("to_q", "template"): "10.template_is_read"}


def above_zero_verdict(iv: Interval) -> str:
    """"replicates" if the 95% interval lies above 0, "does not replicate" if below, else "inconclusive"."""
    return "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"


def class_saliency_claims(intervals: dict, context: str = "") -> list:
    """One claim per challenger and direction: its flow per pair minus the label words' (shallow layers for
    ``into``, deep for ``to_q``). "replicates" (the challenger's account holds here): the 95% interval lies above
    0; "does not replicate": below 0 (the label words carry more per token); "inconclusive": it contains 0
    (:func:`above_zero_verdict`)."""
    out = []
    for (direction, cls), key in _SALIENCY_CLAIMS.items():
        iv = intervals[(direction, f"{cls} - label")]
        out.append(claim(key, iv, above_zero_verdict(iv), "95% interval of the per-pair flow minus the label "
                         "words' above 0; below 0: does not replicate", context=context,
                         note=f"label words {intervals[(direction, 'label')]:.3g}, {cls} "
                              f"{intervals[(direction, cls)]:.3g}"))
    return out


def control_flow_runs(model, sets: dict, batch_size: int = CONTROL_HEAVY_BATCH) -> dict:
    """``{("control", seed): Float[Tensor, "n layer 2 2"]}``: :func:`class_flows` of the label words and the content
    tokens (:data:`CONTROL_CLASSES`) on every sequence of ``sets`` (``{seed: ControlPrompts}``)."""
    return {("control", seed): class_flows(model, cp.prompts, cp.label_ids, batch_size=batch_size,
                                           classes=CONTROL_CLASSES) for seed, cp in sets.items()}


def control_flow_intervals(runs: dict, n_layers: int) -> dict:
    """95% intervals (seeds, then inputs) of the label words' flow per pair minus the content tokens', paired per
    input: ``into`` over the shallow layers and ``to_q`` over the deep ones, ``{direction: Interval}``."""
    r = layer_ranges(n_layers)
    return {direction: bootstrap_means(_cells(runs, layers, direction, "label", minus="content",
                                              classes=CONTROL_CLASSES))
            for direction, layers in (("into", r["shallow"]), ("to_q", r["deep"]))}


def control_flow_claims(intervals: dict, context: str = "") -> list:
    """The power of the flows check, on the positive control, where the label positions certainly gather each item
    (layer 0's previous-token head) and q certainly reads them (the last layer's matching head; notebook 09):
    ``10.control_label_gathers`` (``into``, shallow layers) and ``10.control_label_is_read`` (``to_q``, deep layers),
    each the label words' flow per pair minus the content tokens'. Above 0 "replicates" (the check sees the known
    route), below 0 "does not replicate", containing 0 "inconclusive" (:func:`above_zero_verdict`)."""
    words = {"into": ("10.control_label_gathers", "into the label words from earlier content, shallow layers"),
             "to_q": ("10.control_label_is_read", "from the label words into q, deep layers")}
    return [claim(key, intervals[d], above_zero_verdict(intervals[d]), f"95% interval of the flow per pair {what}, "
                  "minus the content tokens' (paired per input), above 0", context=context)
            for d, (key, what) in words.items()]
