"""Patches to TransformerLens (3.x) that make its forward pass faster without changing what it computes.

:func:`helpers.core.models.load_model` (and the tiny test models) apply two of them to every model:

- :func:`matmul_layout` stores the unembedding, the gated-MLP and the attention weight matrices in the memory
  order TransformerLens' forward reads them, so its ``.contiguous()`` calls stop copying them on every forward;
  shapes and values stay the same (a view with the usual shape).
- :func:`fast_attention` replaces each attention layer's ``calculate_attention_scores`` and
  ``calculate_z_scores`` with :func:`_grouped_scores` and :func:`_grouped_z`: query head ``h`` reads its key and
  value head through strided views instead of TransformerLens' ``repeat_interleave`` copies (grouped-query
  attention) and rearranged key copies.

Why: with a long shared prefix and many short suffixes (:mod:`helpers.core.prefix`), these copies cost more than
the products themselves; ``make bench`` and ``benchmarks/run_benchmarks.py`` measure what they save.

What they equal: the same scores, pattern and ``z`` as TransformerLens' own methods, to float tolerance (the
products are summed in another grouping), and every hook (``hook_attn_scores``, ``hook_pattern``, ``hook_z``...)
sees the same values at the same place. tests/test_models.py compares a patched model's logits and hooks with
the unpatched model's, tests/test_local_models.py a loaded model's logits with transformers' own. The notebooks'
by-hand cells compute the textbook attention, ``softmax(q k^T / sqrt(d_head)) v``, or read those hooks; the
patched methods are a faster computation of the same numbers, so a by-hand result matches the helpers' and
TransformerLens' own.

:func:`frozen_params` is the one context manager here that changes no method: it turns off parameter gradients
while a gradient flows to activations and hook parameters (saliency, re-weighting).
"""

from __future__ import annotations

import contextlib
import types
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["matmul_layout", "fast_attention", "frozen_params"]


def _relayout(param: torch.nn.Parameter, order: tuple[int, ...]) -> None:
    """Store ``param`` so that ``param.permute(order)`` is contiguous; same shape and values."""
    inverse = tuple(order.index(i) for i in range(len(order)))
    param.data = param.data.permute(order).contiguous().permute(inverse)


def _grouped_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """TransformerLens' attention scores without its copies: ``[batch, head, query_pos, key_pos]``.

    TL repeats every key/value head for the query heads that read it
    (``repeat_interleave``) and rearranges keys to ``[batch, head, d_head, key_pos]``
    before a matmul that then copies them again; with a long shared prefix those
    copies cost more than the products. Here query head ``h`` reads key head
    ``h // (n_heads / n_kv_heads)`` (TL's order): the query heads of a key head are stacked as rows, and every
    key head's product is one batched product over ``[batch, key head]`` (one launch per layer, whatever the number
    of heads), reading the keys through a strided view. Same values (tests compare with TL's own method).
    """
    # lazy: TransformerLens takes seconds to import
    from transformer_lens.utilities.activation_functions import apply_softcap

    B, m, H, d = q.shape
    T, G = k.shape[1], k.shape[2]
    r = H // G
    qg = q.reshape(B, m, G, r, d).permute(0, 2, 3, 1, 4).reshape(B, G, r * m, d)
    out = torch.matmul(qg, k.permute(0, 2, 3, 1))  # [B, G, r*m, T]: one product for every key head
    scores = out.reshape(B, H, m, T) / self.attn_scale
    return apply_softcap(scores, self.cfg.attn_scores_soft_cap)


def _grouped_z(self, v: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """TransformerLens' ``z`` (``[batch, pos, head, d_head]``, through ``hook_z``) without repeating values: one
    batched product over ``[batch, key head]`` per layer."""
    B, H, m, T = pattern.shape
    G, d = v.shape[2], v.shape[3]
    r = H // G
    z = torch.matmul(pattern.reshape(B, G, r * m, T), v.permute(0, 2, 1, 3))  # [B, G, r*m, d]
    return self.hook_z(z.reshape(B, H, m, d).transpose(1, 2))


@contextlib.contextmanager
def frozen_params(model):
    """Temporarily set ``requires_grad=False`` on every parameter (restored on exit): gradients then flow to
    activations and hook parameters only (saliency, re-weighting's beta)."""
    old = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in old:
            p.requires_grad_(False)
        yield model
    finally:
        for p, flag in old:
            p.requires_grad_(flag)


def fast_attention(model: HookedTransformer):
    """Give every attention layer :func:`_grouped_scores` and :func:`_grouped_z` (same values, no copies).

    Measured on Gemma 3 270M (one core, 16 suffixes of 35 tokens after a
    598-token prefix): 7.8 s -> see ``make bench``. Idempotent; returns the model.
    """
    for block in model.blocks:
        attn = block.attn
        if type(attn).__name__ not in ("Attention", "GroupedQueryAttention"):
            continue
        attn.calculate_attention_scores = types.MethodType(_grouped_scores, attn)
        attn.calculate_z_scores = types.MethodType(_grouped_z, attn)
    return model


def matmul_layout(model: HookedTransformer) -> None:
    """Store weights in the memory order TransformerLens' forward reads them, so it stops copying them.

    TransformerLens (3.x) calls ``W.T.contiguous()`` on the unembedding and the
    gated-MLP weights, ``rearrange(W_O, ...).contiguous()`` in attention and a
    reshape of ``rearrange(W_Q/W_K/W_V, ...)`` on every forward: a full copy of those matrices per call (Gemma 3's 640 x 262k
    unembedding alone is 670 MB, ~0.8 s on one CPU core, more than a short
    prompt's whole forward). Storing each matrix transposed in memory, behind a
    view with the usual shape, makes those ``.contiguous()`` calls no-ops.
    Shapes, values and every output are unchanged (the matmuls see the same
    contiguous operands as before); ``benchmarks/run_benchmarks.py`` measures
    the time saved. Idempotent.
    """
    _relayout(model.unembed.W_U, (1, 0))
    for block in model.blocks:
        mlp = block.mlp
        for name in ("W_in", "W_gate", "W_out"):
            w = getattr(mlp, name, None)
            if isinstance(w, torch.nn.Parameter) and w.ndim == 2 and getattr(model.cfg, "gated_mlp", False):
                _relayout(w, (1, 0))
        attn = block.attn
        params = attn._parameters  # not getattr: with grouped-query attention W_K/W_V are expanding properties
        w_o = params.get("W_O")
        if isinstance(w_o, torch.nn.Parameter) and w_o.ndim == 3:  # [head, d_head, d_model] read as [d_model, head, d_head]
            _relayout(w_o, (2, 0, 1))
        for name in ("W_Q", "W_K", "W_V", "_W_K", "_W_V"):  # [head, d_model, d_head] read as [(head d_head), d_model]
            w = params.get(name)
            if isinstance(w, torch.nn.Parameter) and w.ndim == 3:
                _relayout(w, (0, 2, 1))
    return model

