"""Tests of helpers.experiments.two_towers (paper B: value-output vectors, label-carrying rate, two towers) on the
tiny models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from heads_common import ATOL, SHARED_ATOL, _final_logprobs, _same, _set

from helpers.core import heads as CH
from helpers.core import unrelated as U
from helpers.core.prompts import pad_batch
from helpers.core.tasks import label_token_ids
from helpers.experiments.two_towers import (
    ValueOutputs,
    label_carrying_rate,
    label_carrying_rows,
    two_towers,
    value_output_vectors,
    value_outputs,
)
from helpers.protocols import two_towers as TT
from helpers.study import heads_report as HR

# ------------------------------------------------------------------ value-output vectors


def test_value_output_vectors_sum_to_head_output(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3, k=2)
    tokens, q = pad_batch(ps.prompts, 0)
    L = tiny_model.cfg.n_layers
    with torch.inference_mode():
        st = CH.collect_at_q(tiny_model, tokens, q, want_pattern_layers=range(L))
        _, cache = tiny_model.run_with_cache(tokens)
        ar = torch.arange(len(q))
        for l in range(L):
            assert st["v"][l].shape[2] == (tiny_model.cfg.n_key_value_heads or tiny_model.cfg.n_heads)
            vo = value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l)  # [b, h, seq, d]
            per_head = vo.sum(2)
            want = torch.einsum("bhe,hed->bhd", st["z"][l], tiny_model.W_O[l])
            assert torch.allclose(per_head, want, atol=ATOL)
            assert torch.allclose(CH.head_contributions(tiny_model, st, l), want, atol=ATOL)
            total = per_head.sum(1) + tiny_model.b_O[l]
            assert torch.allclose(total, cache[f"blocks.{l}.hook_attn_out"][ar, q], atol=ATOL)
            # a subset of heads gives the same rows
            sub = value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l, [3, 1])
            assert torch.allclose(sub, vo[:, [3, 1]], atol=1e-6)


def test_value_outputs_logit_minus_hand_computed(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2, k=2)
    heads = [(1, 2), (0, 3)]
    vo = value_outputs(tiny_model, ps.prompts, ps.label_ids, heads)
    assert vo.attn.shape == vo.vo_lm.shape == (2, 2, 4)
    p, (l, h) = ps.prompts[1], heads[0]
    kv = h // (tiny_model.cfg.n_heads // (tiny_model.cfg.n_key_value_heads or tiny_model.cfg.n_heads))
    with torch.inference_mode():
        _, cache = tiny_model.run_with_cache(p.tokens[None])
        v = cache[f"blocks.{l}.attn.hook_v"][0, p.label_pos[2], kv]
        x = v @ tiny_model.W_O[l, h]
        scale = cache["ln_final.hook_scale"][0, p.q]
        normed = CH.frozen_norm(tiny_model.ln_final, x, scale)
        u = tiny_model.W_U[:, ps.label_ids[0]] - tiny_model.W_U[:, ps.label_ids[1]]
        att = cache[f"blocks.{l}.attn.hook_pattern"][0, h, p.q, p.label_pos[2]]
        lp = _final_logprobs(tiny_model, p.tokens, p.q)
    assert torch.allclose(vo.vo_lm[1, 0, 2], normed @ u, atol=ATOL)
    assert torch.allclose(vo.attn[1, 0, 2], att, atol=1e-6)
    assert torch.allclose(vo.out_lm[1], lp[ps.label_ids[0]] - lp[ps.label_ids[1]], atol=ATOL)
    assert torch.allclose(vo.wvo_lm, vo.attn * vo.vo_lm)
    r = label_carrying_rate(vo)
    assert 0.0 <= r <= 1.0
    t = two_towers(vo)
    assert t["d_attn"].shape == (2,) and -1 <= abs(t["corr_attn_logit_minus"]) <= 1


def test_label_carrying_rate_hand_case():
    lc = torch.tensor([[0, 1]])
    vo = ValueOutputs([(0, 0)], torch.ones(1, 1, 2), torch.tensor([[[2.0, -1.0]]]), torch.zeros(1, 1, 2), lc,
                        torch.tensor([[3, 7]]), torch.zeros(1), torch.zeros(1, dtype=torch.long))
    assert label_carrying_rate(vo) == 1.0
    vo.vo_lm = torch.tensor([[[2.0, 1.0]]])
    assert label_carrying_rate(vo) == 0.5
    np.testing.assert_allclose(label_carrying_rows(vo), [0.5])


def test_value_output_interval_part():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 1, 64)

    assert TT.value_output_interval_part(iv(0.78, 0.9)) == "replicates"
    assert TT.value_output_interval_part(iv(0.65, 0.85)) == "partly"
    assert TT.value_output_interval_part(iv(0.55, 0.7)) == "inconclusive"
    assert TT.value_output_interval_part(iv(0.4, 0.55)) == "does not replicate"
    _, parts = HR.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, value_output="inconclusive")
    assert parts["value_output"] == "inconclusive"


# ------------------------------------------------------------------ two towers


def test_two_towers_intervals_match_point_values(tiny_model, ut):
    fresh = U.fresh_demo_prompts(tiny_model, ut, 7, 6, 1)
    lids = label_token_ids(tiny_model.tokenizer, ut.task)
    vo = value_outputs(tiny_model, fresh, lids, [(0, 0), (1, 1)], 4)
    tt = two_towers(vo)
    iv = TT.two_towers_intervals({"sst2": vo, "other": vo}, n_boot=200)
    if np.isnan(tt["corr_attn_logit_minus"]) or np.isnan(tt["corr_vo_logit_minus"]):
        pytest.skip("no variation on this tiny model")
    assert iv["corr_attn"].estimate == pytest.approx(tt["corr_attn_logit_minus"])
    assert iv["abs_corr_vo"].estimate == pytest.approx(abs(tt["corr_vo_logit_minus"]))
    assert iv["difference"].estimate == pytest.approx(tt["corr_attn_logit_minus"] - abs(tt["corr_vo_logit_minus"]))
    assert iv["corr_attn"].low <= iv["corr_attn"].estimate <= iv["corr_attn"].high


def test_two_towers_interval_part():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 1, 32)

    assert TT.two_towers_interval_part(iv(0.6, 0.9), iv(0.3, 0.6)) == "replicates"
    assert TT.two_towers_interval_part(iv(0.3, 0.9), iv(0.3, 0.6)) == "partly"
    assert TT.two_towers_interval_part(iv(0.3, 0.9), iv(-0.1, 0.6)) == "inconclusive"
    assert TT.two_towers_interval_part(iv(-0.3, 0.1), iv(-0.6, -0.1)) == "does not replicate"
    assert TT.two_towers_interval_part(None, iv(0.3, 0.6)) == "inconclusive"


# ------------------------------------------------------------------ shared demonstrations == full prompts


def test_shared_value_outputs_equal_full_prompts(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4, k=2)
    heads = [(1, 2), (0, 3), (tiny_model.cfg.n_layers - 1, 1)]
    assert CH.shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    a = value_outputs(tiny_model, ps.prompts, ps.label_ids, heads, batch_size=3)
    b = value_outputs(tiny_model, ps.prompts, ps.label_ids, heads, batch_size=3, shared=False)
    for f in ("attn", "vo_lm", "wvo_lm", "out_lm"):
        x, y = getattr(a, f), getattr(b, f)
        assert torch.allclose(x, y, atol=SHARED_ATOL), (f, (x - y).abs().max())
    for f in ("pred", "label_class", "label_pos"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    # prompts with their own demonstrations (two towers) fall back to the full prompts
    fresh = U.fresh_demo_prompts(tiny_model, ut, 5, 3, 1)
    assert CH.shared_cache(tiny_model, fresh) is None
    assert _same(value_outputs(tiny_model, fresh, ps.label_ids, heads, 2),
                 value_outputs(tiny_model, fresh, ps.label_ids, heads, 2, shared=False))


# ------------------------------------------------------------------ the by-hand check and the claims


def test_check_value_output_logit_minus_passes_the_solution_and_fails_wrong_ones(capsys):
    from heads_common import value_output_logit_minus as solution

    from helpers.exercises.two_towers import check_value_output_logit_minus

    check_value_output_logit_minus(solution)
    assert "matches the reference on 3 tiny models" in capsys.readouterr().out

    def query_head_as_kv_head(model, cache, layer, head, positions, label_ids):  # wrong on grouped-query attention
        n_kv = model.cfg.n_key_value_heads or model.cfg.n_heads
        v = cache[f"blocks.{layer}.attn.hook_v"][0, positions, head % n_kv]
        x = v @ model.W_O[layer, head]
        if type(model.ln_final).__name__.startswith("LayerNorm"):
            x = x - x.mean(-1, keepdim=True)
        x = x / cache["ln_final.hook_scale"][0, -1] * model.ln_final.w
        return x @ (model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]])

    def no_final_norm(model, cache, layer, head, positions, label_ids):
        kv = head // (model.cfg.n_heads // (model.cfg.n_key_value_heads or model.cfg.n_heads))
        x = cache[f"blocks.{layer}.attn.hook_v"][0, positions, kv] @ model.W_O[layer, head]
        return x @ (model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]])

    def attention_weighted(model, cache, layer, head, positions, label_ids):
        a = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, -1, positions]
        return a * solution(model, cache, layer, head, positions, label_ids)

    def last_position_only(model, cache, layer, head, positions, label_ids):
        return solution(model, cache, layer, head, positions[-1:], label_ids)

    def not_centred(model, cache, layer, head, positions, label_ids):
        kv = head // (model.cfg.n_heads // (model.cfg.n_key_value_heads or model.cfg.n_heads))
        x = cache[f"blocks.{layer}.attn.hook_v"][0, positions, kv] @ model.W_O[layer, head]
        x = x / cache["ln_final.hook_scale"][0, -1] * model.ln_final.w
        return x @ (model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]])

    for wrong, kind, says in ((query_head_as_kv_head, "gqa", "key/value head is wrong"),
                              (not_centred, "gpt2", "not centred"),
                              (no_final_norm, "gpt2", "No final norm"),
                              (attention_weighted, "gpt2", "weighted by the attention"),
                              (last_position_only, "gpt2", "shape")):
        with pytest.raises(AssertionError, match=f"{wrong.__name__} on the tiny {kind} model.*{says}"):
            check_value_output_logit_minus(wrong)


def test_two_towers_claims():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 1, 64)

    towers = {"corr_attn": iv(0.6, 0.9), "abs_corr_vo": iv(0.05, 0.3), "difference": iv(0.3, 0.7)}
    vo, tt = TT.two_towers_claims(iv(0.65, 0.8), towers)
    assert (vo.key, vo.verdict, tt.key, tt.verdict) == ("07.value_output", "partly", "07.two_towers", "replicates")
    assert "0.175 [0.050, 0.300]" in tt.note
    undefined = TT.two_towers_claims(iv(0.65, 0.8), {"corr_attn": None, "abs_corr_vo": None, "difference": None})[1]
    assert undefined.verdict == "inconclusive" and undefined.ours is None and "undefined" in undefined.note
