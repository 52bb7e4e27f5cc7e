"""The hand-written reference of every attention knockout test: one whole-prompt forward with the marked (query, key)
pairs set to -inf in the attention scores of the given layers, read at q through the label words."""

from __future__ import annotations

import torch


def masked_label_logits(model, prompt, mask: torch.Tensor, layers, label_ids) -> torch.Tensor:
    """The label words' logits at ``prompt.q`` with ``mask`` (``[seq, seq]``, True = blocked) applied in ``layers``."""
    def blank(scores, hook):
        return scores.masked_fill(mask[None, None], float("-inf"))

    with torch.inference_mode():
        logits = model.run_with_hooks(prompt.tokens[None], fwd_hooks=[
            (f"blocks.{l}.attn.hook_attn_scores", blank) for l in layers])
    return logits[0, prompt.q, list(label_ids)].float()
