"""Helpers shared by the paper-B tests (test_unrelated, test_core_heads, test_incontext_heads, test_two_towers,
test_head_biases, test_heads_runs)."""

from __future__ import annotations

import torch

from helpers.core.predict import logits_at
from helpers.core.unrelated import make_set

ATOL = 2e-4
SHARED_ATOL = 1e-4


def _set(model, ut, n=3, k=1, seed=42):
    return make_set(model, ut, seed, n, k)


def _final_logprobs(model, toks, q, hooks=()):
    return logits_at(model, toks[None], torch.tensor([q]), hooks)[0].log_softmax(-1)


def _shared_vs_full(model, ps, factory=None, prefix_hooks=()):
    from helpers.core.predict import predict
    from helpers.core.prefix import predict_shared

    full = predict(model, ps.prompts, ps.label_ids, 2, hooks=factory)
    shared = predict_shared(model, ps.prompts, ps.label_ids, 2, hooks=factory, prefix_hooks=prefix_hooks)
    return full, shared


def _assert_same_predictions(a, b):
    assert torch.allclose(a.label_logits, b.label_logits, atol=SHARED_ATOL), (a.label_logits - b.label_logits).abs().max()
    assert torch.equal(a.pred, b.pred)


def _same(a, b):
    """Equality of run results (dataclasses of tensors, dicts, lists, floats)."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)


# ------------------------------------------------------------------ notebook 07's by-hand solutions (as in the notebook)


def head_ablation_drop(model, tokens, layer, head, label_ids):
    """Each label word's log-probability at the last position q, plain minus with the head's z zeroed at q."""
    q = len(tokens) - 1

    def zero_head_at_q(z, hook):
        z[:, q, head] = 0.0
        return z

    plain = model(tokens[None])[0, q].log_softmax(-1)
    ablated = model.run_with_hooks(tokens[None], fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero_head_at_q)])
    return plain[label_ids] - ablated[0, q].log_softmax(-1)[label_ids]


def value_output_logit_minus(model, cache, layer, head, positions, label_ids):
    """The head's v_j @ W_O at ``positions`` through the frozen norms at q, then W_U[:, foo] - W_U[:, bar]."""
    from einops import einsum

    kv_head = head // (model.cfg.n_heads // (model.cfg.n_key_value_heads or model.cfg.n_heads))
    v = cache[f"blocks.{layer}.attn.hook_v"][0, positions, kv_head]
    x = einsum(v, model.W_O[layer, head], "pos d_head, d_head d_model -> pos d_model")

    def frozen_norm(norm, x, scale):
        if type(norm).__name__.startswith("LayerNorm"):
            x = x - x.mean(-1, keepdim=True)
        return x / scale * norm.w

    if model.cfg.use_normalization_before_and_after:
        x = frozen_norm(model.blocks[layer].ln1_post, x, cache[f"blocks.{layer}.ln1_post.hook_scale"][0, -1])
    x = frozen_norm(model.ln_final, x, cache["ln_final.hook_scale"][0, -1])
    return x @ (model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]])
