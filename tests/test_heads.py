"""Tests of helpers.experiments.heads (paper B) on the tiny models, plus one slow check on Gemma."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import logits_at, predict
from helpers.core.prompts import pad_batch
from helpers.core.tasks import label_token_ids
from helpers.experiments import heads as H

ATOL = 2e-4


@pytest.fixture(scope="module")
def ut():
    """SST-2 with foo/bar, on small slices of the pools (fast)."""
    full = H.unrelated_task("sst2", (0, 1), ("foo", "bar"))
    return H.UnrelatedTask(full.task, full.train.select(range(300)), full.test.select(range(60)), "sst2", (0, 1))


@pytest.fixture(scope="module")
def ag():
    return H.unrelated_task("trec", (0, 1), ("foo", "bar"))


def _set(model, ut, n=3, k=1, seed=42):
    return H.make_set(model, ut, seed, n, k)


def _final_logprobs(model, toks, q, hooks=()):
    return logits_at(model, toks[None], torch.tensor([q]), hooks)[0].log_softmax(-1)


# ------------------------------------------------------------------ tasks


def test_unrelated_task_relabels_and_filters(ut, ag):
    from helpers.core.tasks import load_split

    assert ut.task.label_words == ("foo", "bar")
    assert ut.task.input_prefix == "" and ut.task.label_prefix == " :"
    assert set(ut.train["label"]) == {0, 1}
    # a multi-class source (TREC Abbreviation/Entity): exactly the rows of classes 0 and 1, relabelled
    src = load_split("trec", "test")
    assert len(ag.test) == sum(1 for lbl in src["label"] if lbl in (0, 1))
    assert set(ag.test["label"]) == {0, 1}
    real = H.unrelated_task("agnews", (1, 3), None, paper_shape=False)
    assert real.task.label_words == ("Sports", "Technology") and real.task.input_prefix == "Article: "
    with pytest.raises(ValueError, match="two distinct"):
        H.unrelated_task("sst2", (0, 0))


def test_prompt_shape_and_positions(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2, k=2)
    p = ps.prompts[0]
    assert " : foo" in p.text or " : bar" in p.text
    assert p.text.endswith(" :")
    assert [p.tokens[i].item() for i in p.label_pos] == [ps.label_ids[c] for c in p.label_class]


# ------------------------------------------------------------------ attribution


def test_head_attribution_equals_direct_recomputation(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3)
    sc = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2)
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    assert sc.gain.shape == sc.drop.shape == (3, L, Hn)
    l, h = L - 2, 1
    for i, p in enumerate(ps.prompts):
        with torch.inference_mode():
            _, cache = tiny_model.run_with_cache(p.tokens[None])
            resid = cache[f"blocks.{L - 1}.hook_resid_post"][0, p.q]
            c = cache[f"blocks.{l}.attn.hook_z"][0, p.q, h] @ tiny_model.W_O[l, h]
            lp = lambda r: tiny_model.unembed(tiny_model.ln_final(r[None, None]))[0, 0].log_softmax(-1)
            y = ps.label_ids[int(lp(resid)[ps.label_ids].argmax())]
            assert sc.pred[i] == ps.label_ids.index(y)
            gain = lp(resid)[y] - lp(resid - c)[y]

            def zero(z, hook):
                z = z.clone()
                z[:, p.q, h] = 0
                return z
            abl = _final_logprobs(tiny_model, p.tokens, p.q, [(f"blocks.{l}.attn.hook_z", zero)])
            drop = lp(resid)[y] - abl[y]
        assert torch.allclose(sc.gain[i, l, h], gain, atol=ATOL)
        assert torch.allclose(sc.drop[i, l, h], drop, atol=ATOL)
        # per label word: the same two quantities for each label's log-probability, whatever is predicted
        for k, tok in enumerate(ps.label_ids):
            assert torch.allclose(sc.label_gain[i, k, l, h], lp(resid)[tok] - lp(resid - c)[tok], atol=ATOL)
            assert torch.allclose(sc.label_drop[i, k, l, h], lp(resid)[tok] - abl[tok], atol=ATOL)
        assert sc.gold[i] == p.gold


def test_attribution_batched_equals_one_by_one(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3)
    a = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=3)
    b = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=1)
    assert torch.allclose(a.gain, b.gain, atol=ATOL) and torch.allclose(a.drop, b.drop, atol=ATOL)
    assert torch.allclose(a.label_gain, b.label_gain, atol=ATOL) and torch.allclose(a.label_drop, b.label_drop, atol=ATOL)
    assert torch.equal(a.pred, b.pred)


def test_mean_ablation_with_own_mean_is_identity(tiny_model, ut):
    ps = _set(tiny_model, ut, n=1)
    sc = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, ablation="mean")
    # one prompt: its mean z at q is its own z at q, so replacing it changes nothing
    assert sc.drop.abs().max() < ATOL


def test_rank_heads_and_count():
    g = torch.zeros(2, 2, 3)
    d = torch.zeros(2, 2, 3)
    g[:, 1, 2], d[:, 1, 2] = 5, 5
    g[:, 0, 0], d[:, 0, 1] = 3, 4
    sc = H.HeadScores(g, d, torch.zeros(2, dtype=torch.long), "zero")
    assert H.rank_heads(sc)[0] == (1, 2)
    assert H.rank_heads(sc, "gain")[:2] == [(1, 2), (0, 0)]
    assert H.rank_heads(sc, "drop")[:2] == [(1, 2), (0, 1)]
    assert sorted(H.rank_heads(sc)) == [(l, h) for l in range(2) for h in range(3)]


def _label_scores(n_per_label=2, L=2, Hn=3):
    """HeadScores where head (0, 0) raises foo (label 0), head (1, 2) raises bar (label 1), and the model
    predicts foo on every prompt; gold labels alternate."""
    n = 2 * n_per_label
    lg = torch.zeros(n, 2, L, Hn)
    lg[:, 0, 0, 0] = 4.0
    lg[:, 1, 1, 2] = 3.0
    lg[:, 0, 0, 1] = 1.0  # a weaker foo head
    ld = lg.clone()
    gold = torch.tensor([0, 1] * n_per_label)
    pred = torch.zeros(n, dtype=torch.long)
    return H.HeadScores(lg[:, 0], ld[:, 0], pred, "zero", lg, ld, gold)


def test_per_label_ranking_finds_both_labels_heads():
    sc = _label_scores()
    assert H.rank_heads_for_label(sc, 0)[:2] == [(0, 0), (0, 1)]
    assert H.rank_heads_for_label(sc, 1)[0] == (1, 2)
    # the pooled ranking on the predicted label (always foo) never puts the bar head first
    assert H.incontext_heads(sc, 2, per_label=False) == [(0, 0), (0, 1)]
    assert H.incontext_heads(sc, 2) == [(0, 0), (1, 2)]
    assert H.incontext_heads(sc, 3) == [(0, 0), (1, 2), (0, 1)]
    # only prompts whose gold label is bar rank the bar heads: a foo prompt's bar gain is ignored
    sc.label_gain[0, 1, 0, 2] = 100.0
    sc.label_drop[0, 1, 0, 2] = 100.0
    assert H.rank_heads_for_label(sc, 1)[0] == (1, 2)


def test_per_label_ranking_refuses_what_it_cannot_rank():
    sc = _label_scores()
    with pytest.raises(ValueError, match="label must be"):
        H.rank_heads_for_label(sc, 2)
    with pytest.raises(ValueError, match="at least 1"):
        H.incontext_heads(sc, 0)
    old = H.HeadScores(sc.gain, sc.drop, sc.pred, "zero")
    with pytest.raises(ValueError, match="per-label"):
        H.rank_heads_for_label(old, 0)
    sc.gold[:] = 0
    with pytest.raises(ValueError, match="no attribution prompt has gold label 1"):
        H.incontext_heads(sc, 2)


def test_n_incontext_heads(tiny_model):
    assert H.n_incontext_heads(tiny_model, 0.01, 4) == 4
    assert H.n_incontext_heads(tiny_model, 0.5, 1) == 6


# ------------------------------------------------------------------ ablation


def test_ablating_no_heads_equals_plain_run(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    none = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=H.ablation_hooks([]))
    assert torch.equal(plain.label_logits, none.label_logits)
    assert H.ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, []) == plain.accuracy


def test_ablation_hooks_match_cached_ablation(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3)
    heads = [(0, 1), (tiny_model.cfg.n_layers - 1, 3)]
    out = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=H.ablation_hooks(heads))
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    assert not torch.allclose(out.label_logits, plain.label_logits)
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    mask = torch.zeros(1, L, Hn)
    for l, h in heads:
        mask[0, l, h] = 1
    for i, p in enumerate(ps.prompts):
        lp = H._ablated_last_logprobs(tiny_model, p.tokens, mask, None)[0]
        a = lp[ps.label_ids[0]] - lp[ps.label_ids[1]]
        b = out.label_logits[i, 0] - out.label_logits[i, 1]
        assert torch.allclose(a, b, atol=ATOL)


def test_ablation_all_positions_differs_from_q_only(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2)
    heads = [(0, 0), (0, 1), (0, 2), (0, 3)]
    q_only = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=H.ablation_hooks(heads, at="q"))
    every = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=H.ablation_hooks(heads, at="all"))
    assert not torch.allclose(q_only.label_logits, every.label_logits)
    with pytest.raises(ValueError, match="means"):
        H.ablation_hooks(heads, ablation="mean")


def test_random_heads_seeded_and_disjoint(tiny_model):
    chosen = [(0, 0), (1, 2), (2, 3)]
    a = H.random_heads(tiny_model, 4, seed=7, exclude=chosen)
    assert a == H.random_heads(tiny_model, 4, seed=7, exclude=chosen)
    assert len(set(a)) == 4 and not set(a) & set(chosen)
    total = tiny_model.cfg.n_layers * tiny_model.cfg.n_heads
    assert set(H.random_heads(tiny_model, total, seed=0, exclude=chosen, allow_overlap=True)) >= set(chosen)
    with pytest.raises(ValueError, match="available"):
        H.random_heads(tiny_model, total - 2, seed=0, exclude=chosen)
    draws = {tuple(H.random_heads(tiny_model, 3, seed=s, exclude=chosen)) for s in range(10)}
    assert len(draws) > 1


# ------------------------------------------------------------------ value-output vectors


def test_value_output_vectors_sum_to_head_output(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3, k=2)
    tokens, q = pad_batch(ps.prompts, 0)
    L = tiny_model.cfg.n_layers
    with torch.inference_mode():
        st = H._collect_at_q(tiny_model, tokens, q, want_pattern_layers=range(L))
        _, cache = tiny_model.run_with_cache(tokens)
        ar = torch.arange(len(q))
        for l in range(L):
            assert st["v"][l].shape[2] == (tiny_model.cfg.n_key_value_heads or tiny_model.cfg.n_heads)
            vo = H.value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l)  # [b, h, seq, d]
            per_head = vo.sum(2)
            want = torch.einsum("bhe,hed->bhd", st["z"][l], tiny_model.W_O[l])
            assert torch.allclose(per_head, want, atol=ATOL)
            assert torch.allclose(H._head_contrib(tiny_model, st, l), want, atol=ATOL)
            total = per_head.sum(1) + tiny_model.b_O[l]
            assert torch.allclose(total, cache[f"blocks.{l}.hook_attn_out"][ar, q], atol=ATOL)
            # a subset of heads gives the same rows
            sub = H.value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l, [3, 1])
            assert torch.allclose(sub, vo[:, [3, 1]], atol=1e-6)


def test_value_outputs_logit_minus_hand_computed(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2, k=2)
    heads = [(1, 2), (0, 3)]
    vo = H.value_outputs(tiny_model, ps.prompts, ps.label_ids, heads)
    assert vo.attn.shape == vo.vo_lm.shape == (2, 2, 4)
    p, (l, h) = ps.prompts[1], heads[0]
    kv = h // (tiny_model.cfg.n_heads // (tiny_model.cfg.n_key_value_heads or tiny_model.cfg.n_heads))
    with torch.inference_mode():
        _, cache = tiny_model.run_with_cache(p.tokens[None])
        v = cache[f"blocks.{l}.attn.hook_v"][0, p.label_pos[2], kv]
        x = v @ tiny_model.W_O[l, h]
        scale = cache["ln_final.hook_scale"][0, p.q]
        normed = H._frozen_norm(tiny_model.ln_final, x, scale)
        u = tiny_model.W_U[:, ps.label_ids[0]] - tiny_model.W_U[:, ps.label_ids[1]]
        att = cache[f"blocks.{l}.attn.hook_pattern"][0, h, p.q, p.label_pos[2]]
        lp = _final_logprobs(tiny_model, p.tokens, p.q)
    assert torch.allclose(vo.vo_lm[1, 0, 2], normed @ u, atol=ATOL)
    assert torch.allclose(vo.attn[1, 0, 2], att, atol=1e-6)
    assert torch.allclose(vo.out_lm[1], lp[ps.label_ids[0]] - lp[ps.label_ids[1]], atol=ATOL)
    assert torch.allclose(vo.wvo_lm, vo.attn * vo.vo_lm)
    r = H.label_carrying_rate(vo)
    assert 0.0 <= r <= 1.0
    t = H.two_towers(vo)
    assert t["d_attn"].shape == (2,) and -1 <= abs(t["corr_attn_logit_minus"]) <= 1


def test_label_carrying_rate_hand_case():
    lc = torch.tensor([[0, 1]])
    vo = H.ValueOutputs([(0, 0)], torch.ones(1, 1, 2), torch.tensor([[[2.0, -1.0]]]), torch.zeros(1, 1, 2), lc,
                        torch.tensor([[3, 7]]), torch.zeros(1), torch.zeros(1, dtype=torch.long))
    assert H.label_carrying_rate(vo) == 1.0
    vo.vo_lm = torch.tensor([[[2.0, 1.0]]])
    assert H.label_carrying_rate(vo) == 0.5
    np.testing.assert_allclose(H.label_carrying_rows(vo), [0.5])


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
        st = H._collect_at_q(m, tokens, q, want_pattern_layers=[0, 1])
        _, cache = m.run_with_cache(tokens)
        for l in range(2):
            contrib = H._head_contrib(m, st, l).sum(1)
            bias = H._frozen_norm(m.blocks[l].ln1_post, m.b_O[l], st["post_scale"][l])
            assert torch.allclose(contrib + bias, cache[f"blocks.{l}.hook_attn_out"][:, 8], atol=ATOL)
            vo = H.value_output_vectors(m, st["pattern"][l], st["v"][l], l).sum(2)
            assert torch.allclose(vo, torch.einsum("bhe,hed->bhd", st["z"][l], m.W_O[l]), atol=ATOL)


# ------------------------------------------------------------------ biases


def test_reweight_with_ones_is_identity(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3, k=2)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    same = predict(tiny_model, ps.prompts, ps.label_ids, 2,
                   hooks=H._reweight_hooks([(0, 1), (1, 2)], lambda p, head, T: torch.ones(T)))
    assert torch.allclose(plain.label_logits, same.label_logits, atol=1e-5)
    double = predict(tiny_model, ps.prompts, ps.label_ids, 2,
                     hooks=H._reweight_hooks([(1, 2)], lambda p, head, T: torch.full((T,), 2.0)))
    assert not torch.allclose(plain.label_logits, double.label_logits)


def test_bias_definition_hand_case():
    preds = {0: torch.tensor([0, 0, 1, 1]), 1: torch.tensor([1, 1, 1, 0])}
    assert H._bias_from(preds) == pytest.approx(0.125)
    r = H.BiasResult("majority", 0.2, 0.15, 0.7, 0.7, {})
    assert r.reduction_pct == pytest.approx(25.0)
    assert H.reduction_pct(0.1, -0.1) == pytest.approx(0.0)  # overshoot is not a reduction
    assert np.isnan(H.BiasResult("recency", 0.0, 0.1, 0, 0, {}).reduction_pct)


def test_bias_runs_on_tiny(ut):
    from helpers.core.models import make_tiny_model

    tiny_model = make_tiny_model("gqa", seed=0)
    heads = [(1, 0), (2, 1)]
    maj = H.majority_bias(tiny_model, ut, heads, seed=1, n_test=3, batch_size=4)
    rec = H.recency_bias(tiny_model, ut, heads, seed=1, n_test=3, batch_size=4)
    for r in (maj, rec):
        assert -0.5 <= r.bias_before <= 0.5 and -0.5 <= r.bias_after <= 0.5
        assert set(r.per_direction["pred_before"]) == {0, 1}
    w = rec.per_direction["slot_weights"]
    assert w.shape == (2, 4)
    # re-weighting divides out the slot profile: profile * weights is flat per head
    flat = rec.per_direction["slot_profile"] * w
    assert torch.allclose(flat, flat.mean(-1, keepdim=True).expand_as(flat), atol=1e-5)


def test_verdict_criteria():
    ok = H.heads_verdict(0.9, 0.4, 0.88, 0.9, 0.8, 0.1, 30, 0.2, 20, 0.2)
    assert ok[0] == "replicates" and set(ok[1].values()) == {"replicates"}
    none = H.heads_verdict(0.6, 0.6, 0.55, 0.4, 0.1, 0.5, -5, 0.2, -3, 0.2)
    assert none[0] == "does not replicate"
    mixed = H.heads_verdict(0.9, 0.8, 0.89, 0.9, 0.8, 0.1, 30, 0.01, 5, 0.2)
    assert mixed[1]["majority"] == "no measurable bias" and mixed[1]["recency"] == "partly" and mixed[0] == "partly"


# ------------------------------------------------------------------ shared demonstrations == full prompts

SHARED_ATOL = 1e-4


def _shared_vs_full(model, ps, factory=None, prefix_hooks=()):
    from helpers.core.prefix import predict_shared

    full = predict(model, ps.prompts, ps.label_ids, 2, hooks=factory)
    shared = predict_shared(model, ps.prompts, ps.label_ids, 2, hooks=factory, prefix_hooks=prefix_hooks)
    return full, shared


def _assert_same_predictions(a, b):
    assert torch.allclose(a.label_logits, b.label_logits, atol=SHARED_ATOL), (a.label_logits - b.label_logits).abs().max()
    assert torch.equal(a.pred, b.pred)


@pytest.mark.parametrize("at", ["q", "all"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_shared_ablation_equals_full_prompts(tiny_model, ut, at, ablation):
    from helpers.core.prefix import predict_shared

    ps = _set(tiny_model, ut, n=4, k=2)
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    heads = [(0, 1), (0, 2), (L - 2, 0), (L - 1, 3)]
    means = torch.randn(L, Hn, tiny_model.cfg.d_head, generator=torch.Generator().manual_seed(0)) if ablation == "mean" else None
    prefix_hooks, factory = H.ablation_hook_pair(heads, ablation, means, at)
    assert (len(prefix_hooks) > 0) == (at == "all")
    full, shared = _shared_vs_full(tiny_model, ps, factory, prefix_hooks)
    _assert_same_predictions(full, shared)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    assert not torch.allclose(full.label_logits, plain.label_logits, atol=1e-3)  # the ablation does something
    if at == "all":  # the prefix positions are ablated too: without the prefix hooks the result differs
        partial = predict_shared(tiny_model, ps.prompts, ps.label_ids, 2, hooks=factory)
        assert not torch.allclose(partial.label_logits, full.label_logits, atol=1e-3)
    kw = {"ablation": ablation, "means": means, "at": at}
    assert H._shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    assert H.ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, heads, 2, **kw) == \
        H.ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, heads, 2, shared=False, **kw) == full.accuracy


def test_shared_reweighting_equals_full_prompts(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4, k=2)
    heads = [(0, 1), (1, 2), (tiny_model.cfg.n_layers - 1, 3)]

    def majority(p, head, T):  # the majority reduction's weights: the class-1 label positions x 3
        w = torch.ones(T)
        w[[pos for pos, c in zip(p.label_pos, p.label_class) if c == 1]] = 3.0
        return w

    slot = torch.tensor([0.5, 1.5, 0.8, 2.0])

    def recency(p, head, T):  # the recency reduction's weights: one factor per label slot
        w = torch.ones(T)
        w[p.label_pos] = slot * (1 + head[1])
        return w

    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    for w_of in (majority, recency):
        full, shared = _shared_vs_full(tiny_model, ps, H._reweight_hooks(heads, w_of))
        _assert_same_predictions(full, shared)
        assert not torch.allclose(full.label_logits, plain.label_logits, atol=1e-3)


def test_shared_bias_functions_equal_full_prompts(tiny_model, ut):
    heads = [(1, 0), (2, 1)]
    for fn in (H.majority_bias, H.recency_bias):
        a = fn(tiny_model, ut, heads, seed=1, n_test=3, batch_size=2)
        b = fn(tiny_model, ut, heads, seed=1, n_test=3, batch_size=2, shared=False)
        assert (a.bias_before, a.bias_after, a.acc_before, a.acc_after) == (b.bias_before, b.bias_after, b.acc_before, b.acc_after)
        for key in ("pred_before", "pred_after"):
            assert all(torch.equal(a.per_direction[key][c], b.per_direction[key][c]) for c in (0, 1))
    for key in ("slot_profile", "slot_weights"):
        assert torch.allclose(a.per_direction[key], b.per_direction[key], rtol=1e-4, atol=1e-5)


def test_shared_value_outputs_equal_full_prompts(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4, k=2)
    heads = [(1, 2), (0, 3), (tiny_model.cfg.n_layers - 1, 1)]
    assert H._shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    a = H.value_outputs(tiny_model, ps.prompts, ps.label_ids, heads, batch_size=3)
    b = H.value_outputs(tiny_model, ps.prompts, ps.label_ids, heads, batch_size=3, shared=False)
    for f in ("attn", "vo_lm", "wvo_lm", "out_lm"):
        x, y = getattr(a, f), getattr(b, f)
        assert torch.allclose(x, y, atol=SHARED_ATOL), (f, (x - y).abs().max())
    for f in ("pred", "label_class", "label_pos"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    # prompts with their own demonstrations (two towers) fall back to the full prompts
    fresh = H.fresh_demo_prompts(tiny_model, ut, 5, 3, 1)
    assert H._shared_cache(tiny_model, fresh) is None
    assert _same(H.value_outputs(tiny_model, fresh, ps.label_ids, heads, 2),
                 H.value_outputs(tiny_model, fresh, ps.label_ids, heads, 2, shared=False))


def test_shared_collect_at_q_covers_prompt_positions(tiny_model, ut):
    """The suffix store's attention row at q and values span every prompt position, like a full run's."""
    from helpers.core.prefix import suffix_batches

    ps = _set(tiny_model, ut, n=3, k=2)
    L = tiny_model.cfg.n_layers
    cache = H._shared_cache(tiny_model, ps.prompts)
    tokens, q = pad_batch(ps.prompts, 0)
    with torch.inference_mode():
        full = H._collect_at_q(tiny_model, tokens, q, want_pattern_layers=range(L))
        for idx, toks, qs in suffix_batches(cache, ps.prompts, 3):
            st = H._collect_at_q(tiny_model, toks, qs, want_pattern_layers=range(L), cache=cache)
            assert torch.equal(qs + cache.length, q[idx])
            for l in range(L):
                for j, i in enumerate(idx):
                    n = len(ps.prompts[i])
                    assert torch.allclose(st["pattern"][l][j, :, :n], full["pattern"][l][i, :, :n], atol=1e-5)
                    assert torch.allclose(st["v"][l][j, :n], full["v"][l][i, :n], atol=1e-5)
                for key in ("z", "resid_pre"):
                    assert torch.allclose(st[key][l], full[key][l][idx], atol=SHARED_ATOL)
                vo = H.value_output_vectors(tiny_model, st["pattern"][l], st["v"][l], l).sum(2)
                assert torch.allclose(vo, torch.einsum("bhe,hed->bhd", st["z"][l], tiny_model.W_O[l]), atol=ATOL)
            assert torch.allclose(st["resid_final"], full["resid_final"][idx], atol=SHARED_ATOL)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_shared_head_attribution_equals_full_prompts(tiny_model, ut, ablation):
    ps = _set(tiny_model, ut, n=3, k=2)
    assert H._shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    a = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2, ablation=ablation)
    b = H.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2, ablation=ablation, shared=False)
    assert torch.equal(a.pred, b.pred)
    assert torch.allclose(a.gain, b.gain, atol=SHARED_ATOL), (a.gain - b.gain).abs().max()
    assert torch.allclose(a.drop, b.drop, atol=SHARED_ATOL), (a.drop - b.drop).abs().max()
    assert a.drop.abs().max() > 1e-3  # not trivially equal
    # the cached drop alone: the shared demonstrations extended by the query == the prompt from scratch
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    masks = torch.cat([torch.zeros(1, L * Hn), torch.eye(L * Hn)[:5]]).reshape(-1, L, Hn)
    cache = H._shared_cache(tiny_model, ps.prompts)
    with torch.inference_mode():
        x = H._ablated_last_logprobs(tiny_model, ps.prompts[1].tokens, masks, None, cache=cache)
        y = H._ablated_last_logprobs(tiny_model, ps.prompts[1].tokens, masks, None)
    assert torch.allclose(x, y, atol=SHARED_ATOL)


# ------------------------------------------------------------------ real model


@pytest.mark.slow
def test_gemma_foobar_tokens_and_attribution(gemma, ut):
    lids = label_token_ids(gemma.tokenizer, ut.task)
    assert len(set(lids)) == 2
    ps = _set(gemma, ut, n=1, k=1)
    sc = H.head_attribution(gemma, ps.prompts, ps.label_ids)
    assert sc.gain.shape == (1, 18, 4) and torch.isfinite(sc.drop).all()


# ------------------------------------------------------------------ cached runs (notebook 07)

RUN_SIZES = {"n_attr": 2, "n_eval": 3, "n_towers": 3, "seeds": [1], "k_per_class": 1, "bias_tasks": ("sst2",)}


@pytest.fixture(scope="module")
def tiny_gpt2():
    from helpers.core.models import make_tiny_model

    return make_tiny_model("gpt2", seed=0)


@pytest.fixture(scope="module")
def ut_real(ut):
    full = H.unrelated_task("sst2", (0, 1), None)
    return H.UnrelatedTask(full.task, full.train.select(range(300)), full.test.select(range(60)), "sst2", (0, 1))


@pytest.fixture
def run_cache(tmp_path, monkeypatch):
    """A fresh results cache, and a log of every (kind, params) passed to helpers.core.store.cached."""
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    calls = []
    real_cached = H.cached

    def logged(kind, params, compute, **kw):
        calls.append((kind, params))
        return real_cached(kind, params, compute, **kw)
    monkeypatch.setattr(H, "cached", logged)
    return tmp_path, calls


def _all_runs(model, ut, ut_real, heads):
    kw = {"sizes": RUN_SIZES, "batch_size": 2}
    return {"acc": H.accuracy_runs(model, {"sst2": ut}, **kw), "acc_real": H.accuracy_runs(model, {"sst2": ut_real}, **kw),
            "attr": H.attribution_runs(model, {"sst2": ut}, **kw),
            "abl": H.ablation_runs(model, {"sst2": ut}, heads, **kw),
            "vo": H.value_output_runs(model, {"sst2": ut}, heads, **kw),
            "towers": H.towers_runs(model, {"sst2": ut}, heads, **kw),
            "bias": H.bias_runs(model, {"sst2": ut}, heads, **kw)}


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


def test_runs_cache_keys_are_the_notebooks(tiny_gpt2, ut, ut_real, run_cache):
    """Kinds and parameter dicts of notebook 07's steps (the label words are part of the accuracy runs' key)."""
    _, calls = run_cache
    heads = {"sst2": [(0, 1), (2, 3)]}
    _all_runs(tiny_gpt2, ut, ut_real, heads)
    m, hs = "tiny-gpt2", heads["sst2"]
    want = [("heads_acc", {"model": m, "task": "sst2", "seed": 1, "words": ["foo", "bar"], "k": 1, "n": 3}),
            ("heads_acc", {"model": m, "task": "sst2", "seed": 1, "words": ["Negative", "Positive"], "k": 1, "n": 3}),
            ("heads_attr", {"model": m, "task": "sst2", "seed": 1001, "k": 1, "n": 2, "def": "final-resid-v2-per-label"}),
            ("heads_ablation", {"model": m, "task": "sst2", "seed": 1, "k": 1, "n": 3, "heads": hs}),
            ("heads_vo", {"model": m, "task": "sst2", "seed": 1, "k": 1, "n": 3, "heads": hs}),
            ("heads_towers", {"model": m, "task": "sst2", "seed": 2001, "k": 1, "n": 3, "heads": hs}),
            ("heads_bias", {"model": m, "task": "sst2", "seed": 1, "kind": "majority", "n": 3, "heads": hs}),
            ("heads_bias", {"model": m, "task": "sst2", "seed": 1, "kind": "recency", "n": 3, "heads": hs})]
    assert calls == want
    calls.clear()
    H.accuracy_runs(tiny_gpt2, {"sst2": ut}, RUN_SIZES, model_name="gemma")  # the notebook's name wins
    assert calls[0][1]["model"] == "gemma"


def test_runs_equal_direct_calls_and_second_call_is_cached(tiny_gpt2, ut, ut_real, run_cache, monkeypatch):
    root, _ = run_cache
    heads = {"sst2": [(0, 1), (2, 3)]}
    first = _all_runs(tiny_gpt2, ut, ut_real, heads)
    kinds = {p.parent.name for p in root.rglob("*.pt")}
    assert kinds == {"heads_acc", "heads_attr", "heads_ablation", "heads_vo", "heads_towers", "heads_bias"}
    assert len(list(root.rglob("*.pt"))) == 8

    # the same numbers as the underlying functions called directly
    ps = H.eval_set(tiny_gpt2, ut, 1, RUN_SIZES)
    pr = predict(tiny_gpt2, ps.prompts, ps.label_ids, 2)
    assert first["acc"][("sst2", 1)] == {"acc": pr.accuracy, "foo_share": float((pr.pred == 0).float().mean()), "n": 3,
                                         "pred": pr.pred.tolist(), "correct": (pr.pred == pr.gold).int().tolist()}
    ps_r = H.eval_set(tiny_gpt2, ut_real, 1, RUN_SIZES)
    assert first["acc_real"][("sst2", 1)]["acc"] == predict(tiny_gpt2, ps_r.prompts, ps_r.label_ids, 2).accuracy
    attr_ps = H.make_set(tiny_gpt2, ut, 1001, 2, 1)
    assert _same(first["attr"]["sst2"], H.head_attribution(tiny_gpt2, attr_ps.prompts, attr_ps.label_ids, batch_size=2))
    abl = first["abl"][("sst2", 1)]
    assert abl["random_heads"] == H.random_heads(tiny_gpt2, 2, seed=1, exclude=heads["sst2"])
    assert abl["plain"] == pr.accuracy
    assert abl["in-context heads ablated"] == H.ablation_accuracy(tiny_gpt2, ps.prompts, ps.label_ids, heads["sst2"], 2)
    assert abl["random heads ablated"] == H.ablation_accuracy(tiny_gpt2, ps.prompts, ps.label_ids, abl["random_heads"], 2)
    for hs, name in ((heads["sst2"], "in-context heads ablated"), (abl["random_heads"], "random heads ablated")):
        everywhere = H.ablation_predictions(tiny_gpt2, ps.prompts, ps.label_ids, hs, 2, at="all")
        assert abl[name + H.ALL_POSITIONS] == everywhere.accuracy
        assert abl["correct"][name + H.ALL_POSITIONS] == (everywhere.pred == everywhere.gold).int().tolist()
    assert _same(first["vo"][("sst2", 1)], H.value_outputs(tiny_gpt2, ps.prompts, ps.label_ids, heads["sst2"], 2))
    fresh = H.fresh_demo_prompts(tiny_gpt2, ut, 2001, 3, 1)
    assert _same(first["towers"]["sst2"], H.value_outputs(tiny_gpt2, fresh, ps.label_ids, heads["sst2"], 2))
    assert _same(first["bias"][("sst2", 1, "majority")], H.majority_bias(tiny_gpt2, ut, heads["sst2"], 1, 3, batch_size=2))
    assert _same(first["bias"][("sst2", 1, "recency")], H.recency_bias(tiny_gpt2, ut, heads["sst2"], 1, 3, batch_size=2))

    # a second call is served from the cache: nothing is recomputed
    def boom(*a, **k):
        raise AssertionError("recomputed instead of read from the cache")
    for fn in ("predict", "head_attribution", "ablation_accuracy", "value_outputs", "majority_bias", "recency_bias",
               "make_set", "fresh_demo_prompts"):
        monkeypatch.setattr(H, fn, boom)
    assert _same(_all_runs(tiny_gpt2, ut, ut_real, heads), first)
    # other in-context heads are another run
    with pytest.raises(AssertionError, match="recomputed"):
        H.ablation_runs(tiny_gpt2, {"sst2": ut}, {"sst2": [(1, 1)]}, RUN_SIZES)


def test_runs_read_label_words_from_the_task(tiny_gpt2, ut, run_cache):
    _, calls = run_cache
    swapped = H.UnrelatedTask(H.unrelated_task("sst2", (0, 1), ("bar", "foo")).task, ut.train, ut.test, "sst2", (0, 1))
    H.accuracy_runs(tiny_gpt2, {"sst2": ut}, RUN_SIZES)
    b = H.accuracy_runs(tiny_gpt2, {"sst2": swapped}, RUN_SIZES)
    assert [c[1]["words"] for c in calls] == [["foo", "bar"], ["bar", "foo"]]  # two runs, never one served for both
    ps, ps_s = H.eval_set(tiny_gpt2, ut, 1, RUN_SIZES), H.eval_set(tiny_gpt2, swapped, 1, RUN_SIZES)
    assert [p.query for p in ps.prompts] == [p.query for p in ps_s.prompts]  # same queries and demonstrations
    assert ps.demos == ps_s.demos and ps.label_ids == ps_s.label_ids[::-1]
    assert b[("sst2", 1)]["pred"] == predict(tiny_gpt2, ps_s.prompts, ps_s.label_ids, 2).pred.tolist()
    with pytest.raises(ValueError, match="kinds"):
        H.bias_runs(tiny_gpt2, {"sst2": ut}, {"sst2": [(0, 0)]}, RUN_SIZES, kinds=("order",))


def test_ablation_interval_part_and_overall_verdict():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    assert H.ablation_interval_part(iv(0.3, 0.5), iv(0.2, 0.4)) == "replicates"
    assert H.ablation_interval_part(iv(0.1, 0.3), iv(0.05, 0.2)) == "partly"
    assert H.ablation_interval_part(iv(-0.05, 0.05), iv(-0.03, 0.04)) == "inconclusive"
    assert H.ablation_interval_part(iv(-0.2, -0.1), iv(-0.2, -0.05)) == "does not replicate"
    overall, parts = H.heads_verdict(0.5, 0.5, 0.5, 0.5, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, ablation="inconclusive")
    assert parts["ablation"] == "inconclusive" and overall == "inconclusive"
    overall, _ = H.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, ablation="inconclusive")
    assert overall == "partly"  # the value-output part replicates


def test_value_output_interval_part():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 1, 64)

    assert H.value_output_interval_part(iv(0.78, 0.9)) == "replicates"
    assert H.value_output_interval_part(iv(0.65, 0.85)) == "partly"
    assert H.value_output_interval_part(iv(0.55, 0.7)) == "inconclusive"
    assert H.value_output_interval_part(iv(0.4, 0.55)) == "does not replicate"
    _, parts = H.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, value_output="inconclusive")
    assert parts["value_output"] == "inconclusive"


# ------------------------------------------------------------------ mapping control, bias and two-towers intervals


def test_mapping_control_hand_cases():
    key = ("sst2", 1)
    gold = np.array([0, 1, 0, 1])
    prior = {key: {"pred": [0, 0, 0, 0], "correct": (gold == 0).astype(int).tolist()}}  # always the first word
    prior_swapped = {key: {"pred": [1, 1, 1, 1], "correct": (gold == 1).astype(int).tolist()}}  # the same word
    mc = H.mapping_control(prior, prior_swapped)
    assert mc["swap_averaged"][key].tolist() == [0.5] * 4 and mc["same_word"][key].tolist() == [1.0] * 4
    icl = {key: {"pred": gold.tolist(), "correct": [1, 1, 1, 1]}}
    mc = H.mapping_control(icl, icl)  # the gold class index is the same under both mappings
    assert mc["swap_averaged"][key].tolist() == [1.0] * 4 and mc["same_word"][key].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="same inputs"):
        H.mapping_control(icl, {key: {"pred": [0], "correct": [1]}})
    with pytest.raises(ValueError, match="same"):
        H.mapping_control(icl, {("sst2", 2): icl[key]})
    from helpers.study.stats import Interval
    assert H.mapping_interval_part(Interval(0.6, 0.55, 0.65, 5, 320)) == "follows the mapping"
    assert H.mapping_interval_part(Interval(0.5, 0.45, 0.55, 5, 320)) == "at chance"
    assert H.mapping_interval_part(Interval(0.4, 0.35, 0.45, 5, 320)) == "against the mapping"


def _bias_result(before, after):
    before = {c: torch.tensor(p) for c, p in before.items()}
    after = {c: torch.tensor(p) for c, p in after.items()}
    return H.BiasResult("majority", H._bias_from(before), H._bias_from(after), 0.5, 0.5,
                        {"pred_before": before, "pred_after": after})


def test_bias_cells_and_intervals_hand_case():
    runs = {("sst2", s, "majority"): _bias_result({0: [0, 0, 0, 1], 1: [1, 1, 1, 0]}, {0: [0, 1, 0, 1], 1: [1, 1, 0, 0]})
            for s in (1, 2)}
    cells = H.bias_cells(runs, "majority", "before")
    assert cells[("sst2", 1)].tolist() == [0.5, 0.5, 0.5, -0.5]
    assert cells[("sst2", 1)].mean() == pytest.approx(runs[("sst2", 1, "majority")].bias_before)
    iv = H.bias_intervals(runs, "majority")
    r = runs[("sst2", 1, "majority")]
    assert iv["before"].estimate == pytest.approx(r.bias_before)
    assert iv["after"].estimate == pytest.approx(r.bias_after)
    assert iv["reduction"].estimate == pytest.approx(r.reduction_pct)
    with pytest.raises(ValueError, match="no 'recency'"):
        H.bias_cells(runs, "recency", "before")
    with pytest.raises(ValueError, match="stage"):
        H.bias_cells(runs, "majority", "during")
    # no bias at all: the reduction is undefined, not a number
    flat = {("sst2", 1, "majority"): _bias_result({0: [0, 1], 1: [1, 0]}, {0: [0, 1], 1: [1, 0]})}
    assert H.bias_intervals(flat, "majority")["reduction"] is None


def test_bias_interval_part():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    assert H.bias_interval_part(iv(-0.02, 0.1), iv(20, 40)) == "no measurable bias"
    assert H.bias_interval_part(iv(0.1, 0.2), None) == "no measurable bias"
    assert H.bias_interval_part(iv(0.1, 0.2), iv(12, 40)) == "replicates"
    assert H.bias_interval_part(iv(0.1, 0.2), iv(2, 40)) == "partly"
    assert H.bias_interval_part(iv(0.1, 0.2), iv(-5, 40)) == "inconclusive"
    assert H.bias_interval_part(iv(0.1, 0.2), iv(-30, -2)) == "does not replicate"
    _, parts = H.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 50, 0.2, 50, 0.2, majority="inconclusive",
                         two_towers="partly", ablation_all="replicates")
    assert parts["majority"] == "inconclusive" and parts["two_towers"] == "partly"
    assert parts["recency"] == "replicates" and parts["ablation_all"] == "replicates"


def test_two_towers_intervals_match_point_values(tiny_model, ut):
    fresh = H.fresh_demo_prompts(tiny_model, ut, 7, 6, 1)
    lids = label_token_ids(tiny_model.tokenizer, ut.task)
    vo = H.value_outputs(tiny_model, fresh, lids, [(0, 0), (1, 1)], 4)
    tt = H.two_towers(vo)
    iv = H.two_towers_intervals({"sst2": vo, "other": vo}, n_boot=200)
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

    assert H.two_towers_interval_part(iv(0.6, 0.9), iv(0.3, 0.6)) == "replicates"
    assert H.two_towers_interval_part(iv(0.3, 0.9), iv(0.3, 0.6)) == "partly"
    assert H.two_towers_interval_part(iv(0.3, 0.9), iv(-0.1, 0.6)) == "inconclusive"
    assert H.two_towers_interval_part(iv(-0.3, 0.1), iv(-0.6, -0.1)) == "does not replicate"
    assert H.two_towers_interval_part(None, iv(0.3, 0.6)) == "inconclusive"
