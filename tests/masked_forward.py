"""The hand-written reference of every attention knockout test: one whole-prompt forward with the marked (query, key)
pairs set to -inf in the attention scores of the given layers, read at q through the label words; and the prompt
set those tests run on."""

from __future__ import annotations

import warnings

import torch

from helpers.core.prompts import make_icl_set
from helpers.core.tasks import LabelWordWarning


def knockout_set(model, task: str = "trec", n: int = 3):
    """``n`` prompts of one demonstration set (seed 42), multi-token label words allowed (TREC's are)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, task, seed=42, n_test=n)


def masked_label_logits(model, prompt, mask: torch.Tensor, layers, label_ids) -> torch.Tensor:
    """The label words' logits at ``prompt.q`` with ``mask`` (``[seq, seq]``, True = blocked) applied in ``layers``."""
    def blank(scores, hook):
        return scores.masked_fill(mask[None, None], float("-inf"))

    with torch.inference_mode():
        logits = model.run_with_hooks(prompt.tokens[None], fwd_hooks=[
            (f"blocks.{l}.attn.hook_attn_scores", blank) for l in layers])
    return logits[0, prompt.q, list(label_ids)].float()
