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

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float

from helpers.core.positions import CLASSES, position_classes
from helpers.core.prompts import Prompt
from helpers.core.sizing import HEAVY_BATCH
from helpers.experiments.saliency import pair_means, saliency_matrices

__all__ = ["FLOW_CLASSES", "DIRECTIONS", "CHALLENGERS", "class_flow_masks", "class_flow_scores", "class_flows", "layer_mean", "CONTROL_CLASSES"]

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
    masks = torch.stack([class_flow_masks(p, sal.shape[-1], classes) for p in prompts])  # [b, 2, c, s, s]
    b, d, c, s, _ = masks.shape
    return pair_means(sal, masks.reshape(b, d * c, s, s)).reshape(b, -1, d, c)


def class_flows(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = HEAVY_BATCH,
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


# ------------------------------------------------------------------------------------------- the positive control

CONTROL_CLASSES = ("label", "content")  # the control's prompts have no template tokens (helpers.core.controls.model)
