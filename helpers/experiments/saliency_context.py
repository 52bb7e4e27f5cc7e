"""§2.1's saliency flows into a label word from the demonstrations before its own (Bakalova et al., arXiv
2504.00132: label words are first contextualised by the earlier demonstrations, then aggregated at q).

Paper A's S_wp averages ``I_l(p_k, j)`` over every earlier token ``j`` of label word ``p_k``, its own
demonstration and the earlier ones alike. The two flows here split out what comes from the earlier
demonstrations, per layer:

- ``from_label``: the mean of ``I_l(p_k, j)`` over ``k >= 1`` and the tokens ``j`` of the label words of the
  demonstrations before ``k`` (label <- earlier label);
- ``from_text``: the same over the tokens of their input texts (label <- earlier input).

Rows and keys are the pairs the knockout of :mod:`helpers.experiments.isolation_context` blocks (``links``
``"label"`` and ``"text"``). Both are means per pair, comparable with S_wp; a prompt with one demonstration has
no such pair and gives NaN, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float

from helpers.core.positions import earlier_demo_pairs
from helpers.core.prompts import Prompt
from helpers.core.sizing import HEAVY_BATCH
from helpers.experiments.saliency import pair_means, saliency_matrices

__all__ = ["CONTEXT_FLOWS", "context_flow_masks", "context_flow_scores", "context_flows"]

CONTEXT_FLOWS = {"from_label": "label", "from_text": "text"}  # flow -> the knockout's links over the same pairs


def context_flow_masks(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "flow seq seq"]:
    """The (row = to, column = from) pairs of each flow of :data:`CONTEXT_FLOWS`, padded to ``seq``."""
    return torch.stack([earlier_demo_pairs(prompt, seq, links) for links in CONTEXT_FLOWS.values()])


def context_flow_scores(sal: Float[torch.Tensor, "batch layer seq seq"], prompts: Sequence[Prompt]
                        ) -> Float[torch.Tensor, "batch layer flow"]:
    """Each flow of :data:`CONTEXT_FLOWS` per prompt and layer from (padded) saliency matrices; NaN where a prompt
    has no pair (one demonstration)."""
    if sal.ndim != 4 or sal.shape[0] != len(prompts):
        raise ValueError(f"sal must be [batch, layer, seq, seq] with one row per prompt ({len(prompts)}), got "
                         f"{tuple(sal.shape)}")
    return pair_means(sal, torch.stack([context_flow_masks(p, sal.shape[-1]) for p in prompts]))


def context_flows(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = HEAVY_BATCH,
                  max_pattern_mb: float = 256) -> Float[torch.Tensor, "n layer flow"]:
    """:func:`context_flow_scores` of every prompt (input order), from
    :func:`helpers.experiments.saliency.saliency_matrices` (each prompt with its own demonstrations, as §2.1)."""
    mats = saliency_matrices(model, prompts, label_ids, batch_size=batch_size, max_pattern_mb=max_pattern_mb)
    return torch.cat([context_flow_scores(m[None], [p]) for m, p in zip(mats, prompts)])
