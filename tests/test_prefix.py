"""The shared-prefix engine: a demonstration set run once gives exactly what the full prompts give."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from helpers.core.predict import logits_at, predict
from helpers.core.prefix import PrefixError, extend_prefix, run_prefix, shared_prefix_len, suffix_logits
from helpers.core.prefix_runs import predict_shared, token_bound, vanilla_predictions
from helpers.core.prompts import PromptError, make_icl_set


@pytest.fixture(scope="module")
def icl(tiny_model):
    """(model, PromptSet): 6 SST-2 prompts of seed 42 that share one demonstration set."""
    return tiny_model, make_icl_set(tiny_model, "sst2", seed=42, n_test=6)


def _close(a, b):
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(a.pred, b.pred) and torch.equal(a.topk, b.topk)


def test_shared_prefix_equals_full_prompt(icl):
    model, s = icl
    full = predict(model, s.prompts, s.label_ids, batch_size=4)
    _close(predict_shared(model, s.prompts, s.label_ids, batch_size=4), full)


def test_batched_equals_one_by_one(icl):
    model, s = icl
    a = predict_shared(model, s.prompts, s.label_ids, batch_size=6)
    b = predict_shared(model, s.prompts, s.label_ids, batch_size=1)
    _close(a, b)


def test_label_only_logits_equal_full_vocabulary(icl):
    model, s = icl
    a = predict_shared(model, s.prompts, s.label_ids, top_k=0)
    b = predict_shared(model, s.prompts, s.label_ids, top_k=5)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-5)
    assert a.topk.shape == (len(s.prompts), 0)


def test_cache_holds_the_keys_the_full_run_uses(icl):
    """Hand check of the position mechanics: the cache stores, for every layer, exactly the (rotated) keys and
    the values a full run of the prompt computes at the prefix positions."""
    model, s = icl
    p = s.prompts[0]
    p0 = shared_prefix_len(s.prompts)
    cache = run_prefix(model, p.tokens[:p0])
    rotary = model.cfg.positional_embedding_type == "rotary"
    kname = "attn.hook_rot_k" if rotary else "attn.hook_k"
    _, act = model.run_with_cache(p.tokens[None], names_filter=lambda n: n.endswith((kname, "attn.hook_v")))
    for l in range(model.cfg.n_layers):
        torch.testing.assert_close(cache.keys[l], act[f"blocks.{l}.{kname}"][0, :p0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache.values[l], act[f"blocks.{l}.attn.hook_v"][0, :p0], atol=1e-5, rtol=1e-5)


def test_identity_hooks_change_nothing(icl):
    model, s = icl
    ident = [(f"blocks.{l}.attn.hook_attn_scores", lambda x, hook: x) for l in range(model.cfg.n_layers)]
    a = predict_shared(model, s.prompts, s.label_ids, prefix_hooks=ident,
                       hooks=lambda batch, toks, offset=0: list(ident))
    _close(a, predict_shared(model, s.prompts, s.label_ids))


def test_prefix_hooks_equal_the_same_hooks_on_full_prompts(icl):
    """Isolating the label words (prefix rows) in the first layer: prefix pass once == every full prompt."""
    from helpers.experiments.isolation import run_isolation

    model, s = icl
    for cond in ("label", "random"):
        for where in ("first", "last"):
            a = run_isolation(model, s.prompts, s.label_ids, cond, where, 2, seed=3, shared=True)
            b = run_isolation(model, s.prompts, s.label_ids, cond, where, 2, seed=3, shared=False)
            _close(a, b)
            # isolation in the last layer cannot reach q (keys/values there come from the layer's input);
            # in the first layers it must change something, or this test could not fail
            if where == "first":
                assert not torch.allclose(a.label_logits, predict(model, s.prompts, s.label_ids).label_logits)


def test_random_set_draw_is_per_layer_and_avoids_labels(icl):
    from helpers.experiments.isolation import random_set_positions

    model, s = icl
    p, p0 = s.prompts[0], shared_prefix_len(s.prompts)
    d = random_set_positions(p, p0, [0, 1, 2], seed=5)
    label_tokens = {i for a, b in p.label_spans for i in range(a, b)}
    for pos in d.values():
        assert len(pos) == p.n_demos and all(0 < i < p0 and i not in label_tokens for i in pos)
    assert len({tuple(v) for v in d.values()}) > 1  # a fresh draw per layer
    assert d == random_set_positions(p, p0, [0, 1, 2], seed=5)


def test_suffix_hooks_see_query_rows_and_prompt_key_columns(icl):
    """Re-weighting with non-zero beta acts on q's row in the suffix run exactly as in the full prompt."""
    from helpers.experiments.reweighting import reweight_factory

    model, s = icl
    g = torch.Generator().manual_seed(0)
    beta = torch.randn(model.cfg.n_layers, model.cfg.n_heads, s.prompts[0].n_demos, generator=g)
    a = predict_shared(model, s.prompts, s.label_ids, hooks=reweight_factory(beta))
    b = predict(model, s.prompts, s.label_ids, hooks=reweight_factory(beta))
    _close(a, b)
    assert not torch.allclose(a.label_logits, predict(model, s.prompts, s.label_ids).label_logits)


def test_extend_prefix_equals_a_longer_prefix(icl):
    model, s = icl
    p = s.prompts[1]
    p0 = shared_prefix_len(s.prompts)
    ext = extend_prefix(model, run_prefix(model, p.tokens[:p0]), p.tokens[p0:p.q])
    direct = run_prefix(model, p.tokens[:p.q])
    assert ext.length == direct.length == p.q and ext.kept == direct.kept
    for a, b in zip(ext.keys + ext.values, direct.keys + direct.values):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    last = p.tokens[p.q:][None]
    with torch.inference_mode():
        got = suffix_logits(model, ext, last, torch.tensor([0]))[0]
        ref = logits_at(model, p.tokens[None], torch.tensor([p.q]))[0]
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


def test_gradients_flow_through_suffix_hooks(icl):
    """Re-weighting trains through a suffix run against a constant cache: the gradient equals the full run's."""
    from helpers.experiments.reweighting import reweight_hooks

    model, s = icl
    p = s.prompts[2]
    p0 = shared_prefix_len(s.prompts)
    ids = torch.tensor(s.label_ids)
    cache = extend_prefix(model, run_prefix(model, p.tokens[:p0]), p.tokens[p0:p.q])
    grads = []
    for shared in (True, False):
        beta = torch.full((model.cfg.n_layers, model.cfg.n_heads, p.n_demos), 0.3, requires_grad=True)
        if shared:
            logits = suffix_logits(model, cache, p.tokens[p.q:][None], torch.tensor([0]), reweight_hooks(beta, [p]), ids)
        else:
            logits = logits_at(model, p.tokens[None], torch.tensor([p.q]), reweight_hooks(beta, [p]), ids)
        torch.nn.functional.cross_entropy(logits, torch.tensor([p.gold])).backward()
        grads.append(beta.grad)
    model.zero_grad(set_to_none=True)  # the session's model is shared: leave no parameter gradients behind
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)
    assert grads[0].abs().sum() > 0


def test_vanilla_predictions_are_stored_by_content(icl, prefix_runs, tmp_path, monkeypatch):
    """Stored unmodified predictions come back only for the same prompts, labels and weights."""
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model, s = icl
    ref = predict_shared(model, s.prompts, s.label_ids, batch_size=4)
    calls = prefix_runs()
    first = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=4)
    assert len(calls) == 1
    _close(first, ref)
    again = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=2, top_k=3)
    assert len(calls) == 1  # served from the store, sliced to top-3
    assert torch.equal(again.topk, ref.topk[:, :3]) and torch.equal(again.label_logits, first.label_logits)
    assert vanilla_predictions(model, s.prompts, s.label_ids, top_k=0).topk.shape == (len(s.prompts), 0)
    # other inputs are recomputed: fewer prompts, another query, other label ids
    vanilla_predictions(model, s.prompts[:3], s.label_ids)
    assert len(calls) == 2
    other = s.prompts[:-1] + [dataclasses.replace(s.prompts[-1], gold=1 - s.prompts[-1].gold)]
    assert vanilla_predictions(model, other, s.label_ids).gold[-1] == 1 - s.prompts[-1].gold
    assert len(calls) == 3
    with pytest.raises(PromptError, match="not the first tokens"):  # label ids of other words: refused, not stored
        vanilla_predictions(model, s.prompts, list(reversed(s.label_ids)))
    assert len(calls) == 3
    # other weights are recomputed
    w = model.blocks[0].attn.W_Q
    old = w.detach().clone()
    try:
        with torch.no_grad():
            w.mul_(3.0)
        changed = vanilla_predictions(model, s.prompts, s.label_ids)
        assert len(calls) == 4
        _close(changed, predict_shared(model, s.prompts, s.label_ids))
        assert not torch.allclose(changed.label_logits, first.label_logits)
    finally:
        with torch.no_grad():
            w.copy_(old)
    # a model with hooks attached is never served from, or written to, the store
    model.blocks[0].hook_resid_post.add_hook(lambda x, hook: x * 0.5)
    try:
        hooked = vanilla_predictions(model, s.prompts, s.label_ids)
        assert len(calls) == 6  # the call above, and this one
        assert not torch.allclose(hooked.label_logits, first.label_logits)
    finally:
        model.reset_hooks()
    assert torch.equal(vanilla_predictions(model, s.prompts, s.label_ids).label_logits, first.label_logits)
    assert len(calls) == 6


def test_token_bound(icl):
    model, s = icl
    b = token_bound(s.prompts, conditions=2)
    p0 = shared_prefix_len(s.prompts)
    lens = [len(p) for p in s.prompts]
    assert b["full_tokens"] == 2 * sum(lens)
    assert b["unique_tokens"] == 2 * (p0 + sum(n - p0 for n in lens))
    assert b["bound"] == pytest.approx(b["full_tokens"] / b["unique_tokens"]) and b["bound"] > 1


def test_refuses_prompts_with_other_demonstrations(tiny_models):
    m = tiny_models["rotary"]
    sa = make_icl_set(m, "sst2", seed=42, n_test=2)
    a, b, lids = sa.prompts, make_icl_set(m, "sst2", seed=43, n_test=2).prompts, sa.label_ids
    with pytest.raises(PrefixError, match="demonstrations"):
        predict_shared(m, a + b, lids)
    cache = run_prefix(m, a[0].tokens[:shared_prefix_len(a)])
    with pytest.raises(PrefixError, match="prefix tokens"):
        predict_shared(m, b, lids, cache=cache)


def test_refuses_another_model_and_overlong_input(tiny_models):
    a, b = tiny_models["rotary"], tiny_models["gqa"]
    s = make_icl_set(a, "sst2", seed=42, n_test=2)
    cache = run_prefix(a, s.prompts[0].tokens[:shared_prefix_len(s.prompts)])
    with pytest.raises(PrefixError, match="another model"):
        predict_shared(b, s.prompts, s.label_ids, cache=cache)
    with pytest.raises(PrefixError, match="n_ctx"):
        suffix_logits(a, cache, torch.zeros(1, a.cfg.n_ctx, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(PrefixError, match="n_ctx"):
        run_prefix(a, torch.zeros(a.cfg.n_ctx + 1, dtype=torch.long))


def _windowed_model(window: int = 24):
    """A tiny Gemma-3-like model: rotary, grouped-query, local (sliding-window) layers between global ones."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from helpers.core.offline_models import gpt2_tokenizer
    from helpers.core.tl_patches import fast_attention, matmul_layout

    cfg = HookedTransformerConfig(
        n_layers=3, d_model=32, d_head=8, n_heads=4, n_key_value_heads=2, n_ctx=512, d_vocab=50257, act_fn="gelu",
        d_mlp=64, normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=8, gated_mlp=True,
        final_rms=True, default_prepend_bos=True, seed=1, init_weights=True, initializer_range=0.2,
        use_local_attn=True, attn_types=["local", "global", "local"], window_size=window, dtype=torch.float32, device="cpu")
    model = HookedTransformer(cfg, tokenizer=gpt2_tokenizer(), default_padding_side="right")
    model.cfg.icl_model_name = "tiny-window"
    model.eval()
    return fast_attention(matmul_layout(model))


def test_sliding_window_layers_keep_all_and_pruned():
    """Prompts longer than the window: keep-all == full prompt; a pruned cache == the full prompt with the
    dropped positions blocked (the window is measured in original positions, not cache rows)."""
    from helpers.experiments.compression import anchor_keep, build_cache
    from tests.test_compression import blocked_full_logits

    model = _windowed_model(16)
    s = make_icl_set(model, "sst2", seed=42, n_test=3)
    assert min(len(p) for p in s.prompts) > 2 * 16
    _close(predict_shared(model, s.prompts, s.label_ids), predict(model, s.prompts, s.label_ids))
    p = s.prompts[0]
    keep = anchor_keep(p)
    cache = build_cache(model, p, keep)
    qt = p.tokens[cache.length:][None]
    with torch.inference_mode():
        got = suffix_logits(model, cache, qt, torch.tensor([qt.shape[1] - 1]))[0]
    ref = blocked_full_logits(model, p, keep)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    # without the original-position window the result differs: the test can fail
    no_window = dataclasses.replace(cache)
    model.cfg.window_size, saved = 10**6, model.cfg.window_size
    try:
        with torch.inference_mode():
            wrong = suffix_logits(model, no_window, qt, torch.tensor([qt.shape[1] - 1]))[0]
    finally:
        model.cfg.window_size = saved
    assert (wrong - ref).abs().max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_real_models_shared_equals_full(which, request):
    """Gemma 3 (sliding-window layers, GQA, BOS) and SmolLM2 (Llama): vanilla (and q run alone after its cache),
    isolation and re-weighting."""
    from helpers.core.prefix_runs import predict_q_row
    from helpers.experiments.isolation import run_isolation
    from helpers.experiments.reweighting import reweight_factory

    model = request.getfixturevalue(which)
    for task in ("sst2", "trec"):
        s = make_icl_set(model, task, seed=42, n_test=4)
        full = predict(model, s.prompts, s.label_ids, batch_size=4)
        _close(predict_shared(model, s.prompts, s.label_ids, batch_size=4), full)
        q_row = predict_q_row(model, s.prompts, s.label_ids, {"plain": []}, 4,
                              cache=run_prefix(model, s.prompts[0].tokens[:shared_prefix_len(s.prompts)]))["plain"]
        torch.testing.assert_close(q_row.label_logits, full.label_logits, atol=1e-4, rtol=1e-4)
        _close(run_isolation(model, s.prompts, s.label_ids, "label", "first", 5, shared=True),
               run_isolation(model, s.prompts, s.label_ids, "label", "first", 5, shared=False))
        beta = torch.full((model.cfg.n_layers, model.cfg.n_heads, s.prompts[0].n_demos), 0.5)
        _close(predict_shared(model, s.prompts, s.label_ids, hooks=reweight_factory(beta)),
               predict(model, s.prompts, s.label_ids, hooks=reweight_factory(beta)))


def test_ragged_token_forward_equals_each_cache_alone(tiny_model):
    """One token after each of several caches of different lengths and contents, in one forward: each row equals
    its cache run alone and the full prompt; hooks see each row's own key columns."""
    from helpers.core.prefix import run_prefix, suffix_forward
    from helpers.core.prefix_ragged import ragged_token_forward

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(100, 5000, (n,), generator=g) for n in (6, 13, 9, 13)]
    caches = [run_prefix(tiny_model, p[:-1]) for p in prompts]
    last = torch.stack([p[-1] for p in prompts])
    seen = []
    with torch.no_grad():
        alone = torch.cat([suffix_forward(tiny_model, c, p[-1:][None])[:, 0] for c, p in zip(caches, prompts)])
        full = torch.cat([tiny_model(p[None], stop_at_layer=tiny_model.cfg.n_layers)[:, -1] for p in prompts])
        rag = ragged_token_forward(tiny_model, caches, last,
                                   [("blocks.0.attn.hook_pattern", lambda x, hook: seen.append(x.clone()))])
    torch.testing.assert_close(rag, alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(rag, full, atol=1e-5, rtol=1e-4)
    pattern = seen[0]  # [batch, head, 1, 13]: padded columns get no attention, rows sum to 1
    assert pattern.shape[-1] == 13 and torch.all(pattern[0, :, 0, 6:-1] == 0)
    torch.testing.assert_close(pattern.sum(-1), torch.ones_like(pattern.sum(-1)))


def test_ragged_token_forward_refuses_a_cut_window():
    from helpers.core.prefix import PrefixError, run_prefix
    from helpers.core.prefix_ragged import ragged_fits, ragged_token_forward
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("rotary")
    model.cfg.window_size = 8
    for b in model.blocks[:1]:
        b.attn.attn_type = "local"
    try:
        caches = [run_prefix(model, torch.arange(100, 110)), run_prefix(model, torch.arange(100, 104))]
        assert not ragged_fits(model, caches) and ragged_fits(model, caches[1:])
        with pytest.raises(PrefixError, match="sliding window"):
            ragged_token_forward(model, caches, torch.tensor([5, 6]))
    finally:
        model.blocks[0].attn.attn_type = "global"
        model.cfg.window_size = None


def test_keep_rows_equals_a_pruned_prefix_pass(tiny_model):
    """Pruning a keep-everything cache gives exactly the cache run_prefix keeps for the same positions."""
    from helpers.core.prefix import keep_rows

    toks = torch.arange(200, 215)
    full = run_prefix(tiny_model, toks)
    for keep in ([0, 3, 4, 9, 14], [2], list(range(15))):
        a, b = keep_rows(full, keep), run_prefix(tiny_model, toks, keep)
        assert a.kept == b.kept and a.length == b.length and torch.equal(a.tokens, b.tokens)
        assert all(torch.equal(x, y) for x, y in zip(a.keys + a.values, b.keys + b.values))
    with pytest.raises(PrefixError, match="keep-everything"):
        keep_rows(keep_rows(full, [1, 2]), [1])
    with pytest.raises(PrefixError, match="must lie in"):
        keep_rows(full, [15])


def test_vanilla_run_computes_the_top_words_only_where_read(tiny_model, tmp_path, monkeypatch):
    """A label-only request runs without the full-vocabulary unembedding and is stored apart; a request for the
    top words runs the full pass; once that is stored, label-only requests read it (same logits)."""
    from helpers.core import accounting

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    s = make_icl_set(tiny_model, "sst2", 42, 5)
    with accounting.recording() as led:
        labels = vanilla_predictions(tiny_model, s.prompts, s.label_ids, top_k=0)
    assert labels.topk.shape == (5, 0) and "vanilla_run_labels" in led.entries
    with accounting.recording() as led:
        full = vanilla_predictions(tiny_model, s.prompts, s.label_ids, top_k=5)
    assert full.topk.shape == (5, 5) and led.entries["vanilla_run"].computed == 1
    torch.testing.assert_close(full.label_logits, labels.label_logits, atol=1e-5, rtol=1e-5)
    other = make_icl_set(tiny_model, "sst2", 43, 5)
    vanilla_predictions(tiny_model, other.prompts, other.label_ids, top_k=5)
    with accounting.recording() as led:
        again = vanilla_predictions(tiny_model, other.prompts, other.label_ids, top_k=0)
    assert led.entries["vanilla_run"].hits == 1 and "vanilla_run_labels" not in led.entries
    assert again.topk.shape == (5, 0)


def test_query_caches_equal_extend_prefix_per_prompt(icl):
    """Each prompt's cache up to q, from batched suffix passes, holds exactly what extend_prefix builds for that
    prompt alone (the suffix's q and padding cut off), batched or one by one."""
    from helpers.core.prefix_ragged import query_caches

    model, s = icl
    cache = run_prefix(model, s.prompts[0].tokens[:shared_prefix_len(s.prompts)])
    for batch_size in (4, 1):
        for p, got in zip(s.prompts, query_caches(model, cache, s.prompts, batch_size)):
            want = extend_prefix(model, cache, p.tokens[cache.length:p.q])
            assert got.length == want.length == p.q and torch.equal(got.tokens, p.tokens[:p.q])
            for a, b in zip(got.keys + got.values, want.keys + want.values):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_predict_q_row_equals_full_prompts_with_the_change_at_q(icl):
    """A change of q's row alone (heads' z zeroed at q), run as one token per prompt after its cache up to q,
    gives the full prompts' predictions under the same change; plain gives plain; with or without the shared
    prefix, batched or one by one."""
    from helpers.core.prefix_runs import predict_q_row
    from helpers.experiments.head_ablation import ablation_hook_pair

    model, s = icl
    heads = [(0, 1), (model.cfg.n_layers - 1, 0)]
    full = {"plain": predict(model, s.prompts, s.label_ids, 4, top_k=0),
            "ablated": predict(model, s.prompts, s.label_ids, 4, top_k=0, hooks=ablation_hook_pair(heads, at="q")[1])}
    assert not torch.allclose(full["plain"].label_logits, full["ablated"].label_logits)  # the change is visible
    conditions = {"plain": [], "ablated": ablation_hook_pair(heads, at="all")[0]}  # every row it sees: q
    cache = run_prefix(model, s.prompts[0].tokens[:shared_prefix_len(s.prompts)])
    for c, batch_size in ((cache, 4), (cache, 1), (None, 3)):
        got = predict_q_row(model, s.prompts, s.label_ids, conditions, batch_size, cache=c)
        for name in conditions:
            torch.testing.assert_close(got[name].label_logits, full[name].label_logits, atol=1e-4, rtol=1e-4)
            assert torch.equal(got[name].pred, full[name].pred)


def test_predict_q_row_refuses_prompts_past_a_sliding_window():
    from helpers.core.prefix_runs import predict_q_row, q_row_fits
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("rotary")
    s = make_icl_set(model, "sst2", seed=42, n_test=2)
    model.cfg.window_size = 4
    model.blocks[0].attn.attn_type = "local"
    try:
        assert not q_row_fits(model, s.prompts)
        with pytest.raises(PrefixError, match="sliding-window"):
            predict_q_row(model, s.prompts, s.label_ids, {"plain": []})
    finally:
        model.blocks[0].attn.attn_type = "global"
        model.cfg.window_size = None
    assert q_row_fits(model, s.prompts)
