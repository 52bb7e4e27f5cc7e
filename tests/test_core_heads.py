"""Tests of helpers.core.heads: reading heads at q (one pass, head contributions, frozen norms), on tiny models."""

from __future__ import annotations

import pytest
import torch
from heads_common import ATOL, SHARED_ATOL, _set

from helpers.core import heads as CH
from helpers.core.prompts import pad_batch
from helpers.experiments import two_towers as TT


@pytest.fixture(scope="module")
def post_norm_model():
    """A tiny Gemma-like model: GQA, rotary, and an RMSNorm after attention (ln1_post), with a non-zero b_O."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=2, d_model=32, d_head=8, n_heads=4, n_ctx=64, d_vocab=100, act_fn="gelu",
                                  normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=8,
                                  gated_mlp=True, final_rms=True, use_normalization_before_and_after=True,
                                  n_key_value_heads=2, init_weights=True, initializer_range=0.2, d_mlp=64, seed=0)
    m = HookedTransformer(cfg)
    with torch.no_grad():
        for b in m.blocks:
            b.attn.b_O.normal_()
            b.ln1_post.w.uniform_(0.5, 2.0)
    return m


def test_post_norm_head_contributions_sum_to_attn_out(post_norm_model):
    m = post_norm_model
    tokens = torch.randint(0, 100, (2, 9))
    q = torch.tensor([8, 8])
    with torch.inference_mode():
        st = CH.collect_at_q(m, tokens, q, want_pattern_layers=[0, 1])
        _, cache = m.run_with_cache(tokens)
        for l in range(2):
            contrib = CH.head_contributions(m, st, l).sum(1)
            bias = CH.frozen_norm(m.blocks[l].ln1_post, m.b_O[l], st["post_scale"][l])
            assert torch.allclose(contrib + bias, cache[f"blocks.{l}.hook_attn_out"][:, 8], atol=ATOL)
            vo = TT.value_output_vectors(m, st["pattern"][l], st["v"][l], l).sum(2)
            assert torch.allclose(vo, torch.einsum("bhe,hed->bhd", st["z"][l], m.W_O[l]), atol=ATOL)


def test_shared_collect_at_q_covers_prompt_positions(tiny_model, ut):
    """The suffix store's attention row at q and values span every prompt position, like a full run's."""
    from helpers.core.prefix import suffix_batches

    ps = _set(tiny_model, ut, n=3, k=2)
    L = tiny_model.cfg.n_layers
    cache = CH.shared_cache(tiny_model, ps.prompts)
    tokens, q = pad_batch(ps.prompts, 0)
    with torch.inference_mode():
        full = CH.collect_at_q(tiny_model, tokens, q, want_pattern_layers=range(L))
        for idx, toks, qs in suffix_batches(cache, ps.prompts, 3):
            st = CH.collect_at_q(tiny_model, toks, qs, want_pattern_layers=range(L), cache=cache)
            assert torch.equal(qs + cache.length, q[idx])
            for l in range(L):
                for j, i in enumerate(idx):
                    n = len(ps.prompts[i])
                    assert torch.allclose(st["pattern"][l][j, :, :n], full["pattern"][l][i, :, :n], atol=1e-5)
                    assert torch.allclose(st["v"][l][j, :n], full["v"][l][i, :n], atol=1e-5)
                for key in ("z", "resid_pre"):
                    assert torch.allclose(st[key][l], full[key][l][idx], atol=SHARED_ATOL)
                vo = TT.value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l).sum(2)
                assert torch.allclose(vo, torch.einsum("bhe,hed->bhd", st["z"][l], tiny_model.W_O[l]), atol=ATOL)
            assert torch.allclose(st["resid_final"], full["resid_final"][idx], atol=SHARED_ATOL)


@pytest.mark.parametrize("shared", [True, False])
def test_label_attention_at_q_is_the_value_outputs_attention(tiny_model, ut, shared):
    """The attention the recency reduction profiles is the one the value-output analysis reads."""
    ps = _set(tiny_model, ut, n=4, k=2)
    heads = [(1, 2), (0, 3), (tiny_model.cfg.n_layers - 1, 1)]
    attn = CH.label_attention_at_q(tiny_model, ps.prompts, heads, batch_size=3, shared=shared)
    vo = TT.value_outputs(tiny_model, ps.prompts, ps.label_ids, heads, batch_size=3, shared=shared)
    assert attn.shape == (4, 3, 4)
    assert torch.equal(attn, vo.attn)
    row = CH.attention_rows_at_q(tiny_model, ps.prompts[2], heads)
    assert torch.allclose(attn[2], row[:, ps.prompts[2].label_pos], atol=SHARED_ATOL)


def test_label_attention_at_q_predictions_equal_a_plain_run(tiny_model, ut):
    """label_attention_at_q(..., label_ids=...) returns the same pass's predictions: those of a plain run."""
    from helpers.core.prefix_runs import predict_with_cache
    from helpers.core.unrelated import make_set

    ps = make_set(tiny_model, ut, 42, 6, 2)
    cache = CH.shared_cache(tiny_model, ps.prompts)
    attn, pred = CH.label_attention_at_q(tiny_model, ps.prompts, [(0, 1), (1, 0)], 4, cache=cache,
                                         label_ids=ps.label_ids)
    assert torch.equal(attn, CH.label_attention_at_q(tiny_model, ps.prompts, [(0, 1), (1, 0)], 4, cache=cache))
    plain = predict_with_cache(tiny_model, ps.prompts, ps.label_ids, 4, cache=cache)
    torch.testing.assert_close(pred.label_logits, plain.label_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(pred.pred, plain.pred) and torch.equal(pred.gold, plain.gold)
