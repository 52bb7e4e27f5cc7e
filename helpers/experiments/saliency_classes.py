"""§2.1's saliency flows, generalised from the label words to every class of position.

Paper A (arXiv 2305.14160, §2.1) averages the saliency ``I_l(i, j)`` (:mod:`helpers.experiments.saliency`) over
three sets of pairs: text -> label words (S_wp), label words -> q (S_pq) and the rest. The accounts that name
another carrier (the forerunner token before each label, arXiv 2410.04468; the template tokens, arXiv 2401.11323)
make the same two predictions for their own class. For each class ``C`` of :data:`helpers.core.positions.CLASSES`
other than ``content``, per layer:

- ``into``: the mean of ``I_l(c, j)`` over ``c`` in ``C`` and the content tokens ``j < c`` (the demonstrations'
  own text flowing into the class: S_wp with the label words replaced by ``C`` and the sources restricted to
  content, so that no class counts another class's flow);
- ``to_q``: the mean of ``I_l(q, c)`` over ``c`` in ``C`` (the class flowing into the position that predicts: S_pq
  with ``C``).

Both are means over pairs, so classes of different sizes compare per pair. A class with no position in a prompt
(a template without a token before its label words has no forerunner) gives NaN there, never 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool, Float

from helpers.core.grid import run_grid
from helpers.core.positions import CLASSES, position_classes
from helpers.core.prompts import Prompt
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.saliency import layer_ranges, saliency_matrices, saliency_prompts
from helpers.study.claims import claim
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval, bootstrap_means

__all__ = ["FLOW_CLASSES", "DIRECTIONS", "CHALLENGERS", "class_flow_masks", "class_flow_scores", "class_flows",
           "layer_mean", "ClassSaliencySizes", "class_saliency_sizes", "class_saliency_runs", "class_flow_frame",
           "class_flow_intervals", "above_zero_verdict", "class_saliency_claims", "CONTROL_CLASSES",
           "control_flow_runs", "control_flow_intervals", "control_flow_claims"]

FLOW_CLASSES = tuple(c for c in CLASSES if c != "content") + ("label_first",)  # the candidate carriers
DIRECTIONS = ("into", "to_q")
CHALLENGERS = ("forerunner", "template")  # the carriers other work names instead of the label words


def class_flow_masks(prompt: Prompt, seq: int | None = None, classes: Sequence[str] = FLOW_CLASSES
                     ) -> Bool[torch.Tensor, "2 classes seq seq"]:
    """Boolean masks of the (row = to, column = from) pairs averaged into ``into`` and ``to_q`` for every class of
    ``classes`` (default :data:`FLOW_CLASSES`; module docstring); ``seq`` pads them (with False) to a longer batch
    length. ``content``'s ``into`` is the flow from earlier content tokens into the content tokens."""
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    pos = position_classes(prompt)
    content = torch.zeros(seq, dtype=torch.bool)
    content[pos["content"]] = True
    ar = torch.arange(seq)
    earlier = ar[None, :] < ar[:, None]  # column j before row i
    out = torch.zeros(2, len(classes), seq, seq, dtype=torch.bool)
    for c, cls in enumerate(classes):
        rows = torch.zeros(seq, dtype=torch.bool)
        rows[pos[cls]] = True
        out[0, c] = rows[:, None] & content[None, :] & earlier
        out[1, c, prompt.q] = rows
    return out


def class_flow_scores(sal: Float[torch.Tensor, "batch layer seq seq"], prompts: Sequence[Prompt],
                      classes: Sequence[str] = FLOW_CLASSES) -> Float[torch.Tensor, "batch layer 2 classes"]:
    """``into`` and ``to_q`` per prompt, layer and class of ``classes`` (default :data:`FLOW_CLASSES`) from
    (padded) saliency matrices; NaN where a class has no pair in a prompt."""
    if sal.ndim != 4 or sal.shape[0] != len(prompts):
        raise ValueError(f"sal must be [batch, layer, seq, seq] with one row per prompt ({len(prompts)}), got "
                         f"{tuple(sal.shape)}")
    masks = torch.stack([class_flow_masks(p, sal.shape[-1], classes) for p in prompts]).to(sal.dtype)  # [b, 2, c, s, s]
    sums = torch.einsum("blij,bdcij->bldc", sal, masks)
    counts = masks.sum(dim=(-1, -2))[:, None].expand_as(sums)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, torch.nan))


def class_flows(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                max_pattern_mb: float = 256, classes: Sequence[str] = FLOW_CLASSES
                ) -> Float[torch.Tensor, "n layer 2 classes"]:
    """:func:`class_flow_scores` of every prompt (input order) for ``classes``, from
    :func:`helpers.experiments.saliency.saliency_matrices` run ``batch_size`` prompts at a time."""
    out = torch.empty(len(prompts), model.cfg.n_layers, 2, len(classes))
    for lo in range(0, len(prompts), batch_size):
        chunk = list(prompts[lo:lo + batch_size])
        mats = saliency_matrices(model, chunk, label_ids, batch_size=batch_size, max_pattern_mb=max_pattern_mb)
        seq = max(len(p) for p in chunk)
        padded = torch.zeros(len(chunk), model.cfg.n_layers, seq, seq)
        for b, m in enumerate(mats):
            padded[b, :, : m.shape[1], : m.shape[2]] = m
        out[lo:lo + len(chunk)] = class_flow_scores(padded, chunk, classes)
    return out


def layer_mean(flows: Float[torch.Tensor, "n layer 2 classes"], layers: slice, direction: str, cls: str,
               classes: Sequence[str] = FLOW_CLASSES) -> np.ndarray:
    """Per input, the mean over ``layers`` of one direction (``"into"``/``"to_q"``) of one class (``classes``: the
    classes ``flows`` holds, as :func:`class_flows` was given them): the per-input values a 95% interval is drawn
    from (NaN where the class has no position)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if cls not in classes:
        raise ValueError(f"cls must be one of {tuple(classes)}, got {cls!r}")
    x = flows[:, layers, DIRECTIONS.index(direction), list(classes).index(cls)]
    return x.mean(dim=1).numpy()


# ------------------------------------------------------------------------------------------- at scale


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
    if profile.name == "paper":
        return ClassSaliencySizes(seeds=tuple(profile.seeds), n=profile.n_saliency, batch_size=8)
    if profile.name == "default":
        return ClassSaliencySizes(seeds=tuple(profile.seeds[:2]), n=16, batch_size=8)
    return ClassSaliencySizes(seeds=tuple(profile.seeds[:1]), n=2, batch_size=2)


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


# ------------------------------------------------------------------------------------------- the positive control

CONTROL_CLASSES = ("label", "content")  # the control's prompts have no template tokens (helpers.core.control)


def control_flow_runs(model, sets: dict, batch_size: int = 64) -> dict:
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
