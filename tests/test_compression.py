"""Anchor-only compression: the cache machinery reproduces full ICL and keeps original positions."""

from __future__ import annotations

import contextlib

import pytest
import torch

from helpers.core.predict import logits_at
from helpers.core.prefix import suffix_logits as cached_logits
from helpers.core.prompts import Demo, build_prompt
from helpers.exercises.tiny import TINY_KINDS
from helpers.experiments.compression import (
    anchor_keep,
    build_cache,
    predict_cached,
    prefix_len,
    random_keep,
    text_anchor_prompts,
    token_counts,
)

DEMOS = [Demo("a truly great film", 1), Demo("dull and far too long", 0), Demo("I loved every minute", 1)]
QUERIES = [Demo("what a waste of time", 0), Demo("a joy", 1), Demo("not bad at all, really quite charming", 1)]


def prompts_for(model):
    return [build_prompt(model, "sst2", DEMOS, qd) for qd in QUERIES]


def blocked_full_logits(model, prompt, keep):
    """Full prompt, but query rows (>= P0) may not attend to dropped demonstration positions."""
    p0 = prefix_len(prompt)
    drop = torch.ones(len(prompt), dtype=torch.bool)
    drop[keep] = False
    drop[p0:] = False

    def hook(scores, hook):
        s = scores.clone()
        s[:, :, p0:, :][..., drop] = float("-inf")
        return s

    hooks = [(f"blocks.{l}.attn.hook_attn_scores", hook) for l in range(model.cfg.n_layers)]
    with torch.inference_mode():
        return logits_at(model, prompt.tokens[None], torch.tensor([prompt.q]), hooks)[0]


def test_keep_everything_reproduces_full_icl(tiny_model):
    ps = prompts_for(tiny_model)
    cache = build_cache(tiny_model, ps[0], keep=range(prefix_len(ps[0])))
    with torch.inference_mode():
        for p in ps:
            full = logits_at(tiny_model, p.tokens[None], torch.tensor([p.q]))[0]
            qt = p.tokens[cache.prefix_len:][None]
            got = cached_logits(tiny_model, cache, qt, torch.tensor([qt.shape[1] - 1]))[0]
            torch.testing.assert_close(got, full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("which", ["anchor", "random"])
def test_pruned_cache_keeps_original_positions(tiny_model, which):
    """Pruned cache == full prompt with the dropped positions masked: only true if the anchors keep
    their original positions and the query continues at P0 (not at the cache length)."""
    ps = prompts_for(tiny_model)
    keep = anchor_keep(ps[0]) if which == "anchor" else random_keep(ps[0], seed=3)
    cache = build_cache(tiny_model, ps[0], keep=keep)
    assert len(cache) < cache.prefix_len  # really pruned
    assert cache.kept == keep
    for p in ps:
        ref = blocked_full_logits(tiny_model, p, keep)
        qt = p.tokens[cache.prefix_len:][None]
        with torch.inference_mode():
            got = cached_logits(tiny_model, cache, qt, torch.tensor([qt.shape[1] - 1]))[0]
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
        # and positions matter: the same rows at contiguous positions 0..K-1, with the query at K, differ
        import dataclasses
        naive_cache = dataclasses.replace(cache, kept=list(range(len(keep))), length=len(keep))
        if tiny_model.cfg.positional_embedding_type == "rotary":  # keys re-rotated at 0..K-1
            from helpers.core.prefix import _rotate
            naive_cache.keys = [_rotate(tiny_model.blocks[l].attn, _rotate_back(tiny_model, l, k, keep), torch.arange(len(keep)))
                                for l, k in enumerate(cache.keys)]
        with torch.inference_mode():
            naive = cached_logits(tiny_model, naive_cache, qt, torch.tensor([qt.shape[1] - 1]))[0]
        assert (naive - ref).abs().max() > 1e-3


def _rotate_back(model, layer, k, positions):
    """Undo the rotation of cached keys stored at ``positions`` (rotate by -position)."""
    attn = model.blocks[layer].attn
    pos = torch.as_tensor(list(positions))
    rd = attn.cfg.rotary_dim
    cos, sin = attn.rotary_cos[pos][:, None, :], attn.rotary_sin[pos][:, None, :]
    xr = k[..., :rd]
    # the rotation is x*cos + rot(x)*sin with rot(rot(x)) = -x; its inverse is x*cos - rot(x)*sin
    return torch.cat([xr * cos - attn.rotate_every_two(xr) * sin, k[..., rd:]], dim=-1)


def test_query_positions_seen_by_hooks(tiny_model):
    """The query's first token gets position P0: learned W_pos[P0] or rotary angle P0."""
    ps = prompts_for(tiny_model)
    cache = build_cache(tiny_model, ps[0])
    p = ps[0]
    qt = p.tokens[cache.prefix_len:][None]
    seen = {}
    if tiny_model.cfg.positional_embedding_type == "standard":
        name = "hook_pos_embed"
    else:
        name = "blocks.0.attn.hook_rot_q"
    with torch.inference_mode():
        cached_logits(tiny_model, cache, qt, torch.tensor([qt.shape[1] - 1]),
                      hooks=[(name, lambda x, hook: seen.setdefault("c", x.clone()))])
        _, full = tiny_model.run_with_cache(p.tokens[None], names_filter=name)
    torch.testing.assert_close(seen["c"][0], full[name][0, cache.prefix_len:], atol=1e-4, rtol=1e-4)


def test_batched_equals_one_by_one(tiny_model):
    ps = prompts_for(tiny_model)
    from helpers.core.tasks import label_token_ids

    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    cache = build_cache(tiny_model, ps[0])
    a = predict_cached(tiny_model, cache, ps, lid, batch_size=3)
    b = predict_cached(tiny_model, cache, ps, lid, batch_size=1)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(a.topk, b.topk)


def test_anchor_and_random_positions(tiny_model):
    p = prompts_for(tiny_model)[0]
    keep = anchor_keep(p)
    p0 = prefix_len(p)
    assert set(p.label_pos) <= set(keep) and max(keep) == p0 - 1
    assert tiny_model.tokenizer.decode([int(p.tokens[p0 - 1])]) == "\n"
    assert tiny_model.tokenizer.decode(p.tokens[p0:p0 + 1]).strip() == "Review"
    for s, e in p.text_spans:
        assert not set(range(s, e)) & set(keep)
    r = random_keep(p, seed=0)
    assert not set(p.label_pos) & set(r)
    assert r == random_keep(p, seed=0)
    extra = sorted(set(r) - set(keep))
    assert len(extra) == p.n_demos
    assert all(any(s <= i < e for s, e in p.text_spans) for i in extra)
    cache = build_cache(tiny_model, p)
    c = token_counts(prompts_for(tiny_model), cache)
    assert c["L_anchor"] == len(keep) and c["bound"] > 1


def test_hidden_random_keeps_the_rest_of_a_multi_token_label(tiny_models):
    """Hidden_random drops only the label words' first tokens: a multi-token label's continuation tokens and
    the newline after the last demonstration stay, as in Hidden_anchor."""
    from helpers.core.prompts import build_prompt

    m = tiny_models["gpt2"]
    p = build_prompt(m, "trec", [Demo("who?", 3), Demo("what is NASA?", 0)], Demo("why?", 2))
    a, b = p.label_spans[-1]
    assert b - a == 3  # " Abbreviation"
    r = random_keep(p, seed=0)
    assert set(range(a + 1, b)) <= set(r) and b in r  # continuation tokens and the newline
    assert not set(p.label_pos) & set(r)
    assert set(anchor_keep(p)) - set(p.label_pos) <= set(r)
    assert len(set(r) - set(anchor_keep(p))) == p.n_demos


def test_text_anchor_strings(tiny_models):
    m = tiny_models["gpt2"]
    ps = text_anchor_prompts(m, "sst2", DEMOS[:2], QUERIES[:1])
    assert ps[0].text == ("Review:\nSentiment: Positive\nReview:\nSentiment: Negative\n"
                          "Review: what a waste of time\nSentiment:")
    assert m.tokenizer.decode(ps[0].tokens) == ps[0].text
    assert " \n" not in "".join(m.tokenizer.decode([t]) for t in ps[0].tokens[: ps[0].label_spans[-1][1]])
    ps = text_anchor_prompts(m, "trec", [Demo("Who was it?", 3)], [Demo("Where is Rome?", 4)])
    assert ps[0].text == "Question:\nAnswer Type: Person\nQuestion: Where is Rome?\nAnswer Type:"


@pytest.mark.slow
def test_gemma_cache_matches_full_and_masked(gemma):
    """On the real model (rotary, GQA, sliding-window layers, BOS): keep-all == full ICL, pruned == masked full."""
    from helpers.core.prompts import make_icl_set

    s = make_icl_set(gemma, "sst2", 42, 2)
    p = s.prompts[0]
    qt = p.tokens[prefix_len(p):][None]
    qi = torch.tensor([qt.shape[1] - 1])
    with torch.inference_mode():
        full = logits_at(gemma, p.tokens[None], torch.tensor([p.q]))[0]
        allc = cached_logits(gemma, build_cache(gemma, p, keep=range(prefix_len(p))), qt, qi)[0]
        cache = build_cache(gemma, p)
        pruned = cached_logits(gemma, cache, qt, qi)[0]
    torch.testing.assert_close(allc, full, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(pruned, blocked_full_logits(gemma, p, cache.kept), atol=1e-3, rtol=1e-3)


def test_timing_helper_runs(tiny_models):
    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids
    from helpers.protocols.compression import time_icl_vs_anchor

    m = tiny_models["rotary"]
    ps = prompts_for(m)
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, ps, 0, label_token_ids(m.tokenizer, "sst2"))
    for lo in (False, True):
        r = time_icl_vs_anchor(m, s, n_inputs=3, repeats=2, warmup=1, label_only=lo)
        assert r["t_full"] > 0 and r["t_anchor"] > 0 and r["n_inputs"] == 3
        assert r["speedup_over_bound"] == pytest.approx(r["speedup"] / r["bound"])
        assert r["speedup_low"] <= r["speedup"] + 1e-12 and r["speedup"] <= r["speedup_high"] + 1e-12
        assert r["flop_speedup"] > 1  # the anchor path runs only the query's tokens, after the kept positions


@pytest.mark.parametrize("cuda", [False, True])
def test_timing_waits_for_cuda_before_reading_the_clock(tiny_models, monkeypatch, cuda):
    """On CUDA every clock reading of time_icl_vs_anchor follows torch.cuda.synchronize; on the CPU none does."""
    import time

    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids
    from helpers.protocols import compression

    m = tiny_models["rotary"]
    ps = prompts_for(m)
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, ps, 0, label_token_ids(m.tokenizer, "sst2"))
    events = []
    monkeypatch.setattr(compression, "_on_cuda", lambda model: cuda)  # the model itself stays on the CPU
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: events.append("clock") or real())
    r = compression.time_icl_vs_anchor(m, s, n_inputs=2, repeats=2, warmup=1)
    assert r["t_full"] > 0 and r["t_anchor"] > 0
    clocks = [i for i, e in enumerate(events) if e == "clock"]
    assert len(clocks) >= 2 + 2 * 2 * 2  # the cache build, then two readings per path, input and repeat
    if cuda:
        assert all(i > 0 and events[i - 1] == "sync" for i in clocks)
    else:
        assert "sync" not in events


def test_run_compression_end_to_end(tiny_models):
    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids
    from helpers.experiments.compression import METHODS, run_compression

    m = tiny_models["gqa"]
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, prompts_for(m), 0, label_token_ids(m.tokenizer, "sst2"))
    r = run_compression(m, s, random_top_draws=3, batch_size=2)
    assert list(r.metrics) == list(METHODS)
    assert r.metrics["ICL"]["label_loyalty"] == 1.0 and r.metrics["ICL"]["word_loyalty"] == 1.0
    assert r.metrics["Hidden_random-top"]["label_loyalty"] >= r.metrics["Hidden_random"]["label_loyalty"]
    assert all(0 <= v <= 1 for d in r.metrics.values() for v in d.values())
    # per-input values average to the reported metrics, for every method
    assert list(r.per_input) == list(METHODS)
    for meth, d in r.per_input.items():
        for col, met in [("label_loyal", "label_loyalty"), ("word_loyal", "word_loyalty"), ("correct", "accuracy")]:
            assert len(d[col]) == r.n_test
            assert sum(d[col]) / r.n_test == pytest.approx(r.metrics[meth][met])


def test_table2_interval_verdict():
    from helpers.protocols.compression import table2_verdict
    from helpers.study.stats import Interval

    up, zero, down = Interval(5, 1, 9, 5, 320), Interval(0, -3, 3, 5, 320), Interval(-5, -9, -1, 5, 320)
    others = ["Text_anchor", "Hidden_random", "Hidden_random-top"]
    metrics = ["label_loyalty", "word_loyalty"]
    assert table2_verdict({(o, m): up for o in others for m in metrics})[0] == "replicates"
    one_metric = {(o, m): (up if m == "label_loyalty" else zero) for o in others for m in metrics}
    assert table2_verdict(one_metric)[0] == "partly"
    hidden_only = {(o, m): (down if o == "Text_anchor" else up) for o in others for m in metrics}
    assert table2_verdict(hidden_only)[0] == "partly"
    assert table2_verdict({(o, m): zero for o in others for m in metrics})[0] == "inconclusive"
    worse = {(o, m): (down if o == "Text_anchor" else zero) for o in others for m in metrics}
    assert table2_verdict(worse)[0] == "does not replicate"


# ---- query_positions: "original" (default) vs "restart" (the GPT-2 code of arXiv 2305.14160, §3.2) ----

class _RotaryAngles:
    """Context: every attention layer's rotary tables re-indexed so that row ``dst + i`` holds angle ``src + i``
    (TL's own tables and rotation, only looked up elsewhere)."""

    def __init__(self, model, dst: int, src: int, m: int):
        self.model, self.dst, self.src, self.m = model, dst, src, m

    def __enter__(self):
        self.saved = []
        need = max(self.dst, self.src) + self.m
        for block in self.model.blocks:
            attn = block.attn
            if attn.rotary_cos.shape[0] < need:
                attn._extend_rotary_embeddings(need)
            cos, sin = attn.rotary_cos, attn.rotary_sin
            self.saved.append((cos, sin))
            new_cos, new_sin = cos.clone(), sin.clone()
            new_cos[self.dst:self.dst + self.m] = cos[self.src:self.src + self.m]
            new_sin[self.dst:self.dst + self.m] = sin[self.src:self.src + self.m]
            attn.rotary_cos, attn.rotary_sin = new_cos, new_sin
        return self

    def __exit__(self, *exc):
        for block, (cos, sin) in zip(self.model.blocks, self.saved):
            block.attn.rotary_cos, block.attn.rotary_sin = cos, sin
        return False


def hand_built_logits(model, prompt, keep, start):
    """The query after the kept rows, built without helpers.core.prefix: one plain forward (no cache) over
    [kept tokens] + [query tokens] in which, at every layer, the kept rows' keys and values are replaced by
    those of the demonstrations' own run at the kept positions (rotary: keys as rotated there), and the
    query's tokens get positions ``start..start+m-1`` (learned: ``hook_pos_embed``; rotary: angle tables)."""
    p0 = prefix_len(prompt)
    K, qt = len(keep), prompt.tokens[p0:]
    m = len(qt)
    rotary = model.cfg.positional_embedding_type == "rotary"
    k_hook = "hook_rot_k" if rotary else "hook_k"
    with torch.inference_mode():
        _, ctx = model.run_with_cache(prompt.tokens[None, :p0],
                                      names_filter=lambda n: n.endswith(k_hook) or n.endswith("hook_v"))
    idx = torch.tensor(keep)

    def put(name):
        def hook(x, hook):
            x = x.clone()
            x[:, :K] = ctx[name][:, idx]
            return x
        return hook

    hooks = [(f"blocks.{l}.attn.{h}", put(f"blocks.{l}.attn.{h}"))
             for l in range(model.cfg.n_layers) for h in (k_hook, "hook_v")]
    if not rotary:
        W = model.pos_embed.W_pos

        def pos(x, hook):
            x = x.clone()
            x[:, K:] = W[start:start + m]
            return x
        hooks.append(("hook_pos_embed", pos))
    seq = torch.cat([prompt.tokens[idx], qt])[None]
    with torch.inference_mode(), _RotaryAngles(model, K, start, m) if rotary else contextlib.nullcontext():
        return logits_at(model, seq, torch.tensor([K + prompt.q - p0]), hooks)[0]


@pytest.mark.parametrize("which", ["anchor", "random"])
@pytest.mark.parametrize("mode", ["original", "restart"])
def test_query_positions_equal_hand_built_run(tiny_model, mode, which):
    """``restart``: the query attends to the kept keys/values (positions fixed by the demonstrations' run)
    at positions 0..m-1; ``original``: at P0.. (the default, unchanged)."""
    ps = prompts_for(tiny_model)
    keep = anchor_keep(ps[0]) if which == "anchor" else random_keep(ps[0], seed=3)
    cache = build_cache(tiny_model, ps[0], keep=keep, query_positions=mode)
    assert cache.start == (0 if mode == "restart" else cache.prefix_len)
    for p in ps:
        ref = hand_built_logits(tiny_model, p, keep, 0 if mode == "restart" else cache.prefix_len)
        qt = p.tokens[cache.prefix_len:][None]
        with torch.inference_mode():
            got = cached_logits(tiny_model, cache, qt, torch.tensor([p.q - cache.prefix_len]))[0]
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
        if mode == "original":  # the reference agrees with the masked full prompt (the method's definition)
            torch.testing.assert_close(ref, blocked_full_logits(tiny_model, p, keep), atol=1e-4, rtol=1e-4)


def test_restart_starts_the_query_at_zero_and_changes_the_result(tiny_model):
    """Under ``restart`` the query's first layer sees the positions of the query run alone (W_pos[0:m] or
    rotary angles 0..m-1), and its predictions differ from ``original``."""
    from helpers.core.tasks import label_token_ids

    ps = prompts_for(tiny_model)
    p = ps[0]
    cache = build_cache(tiny_model, p, query_positions="restart")
    qt = p.tokens[cache.prefix_len:][None]
    name = "hook_pos_embed" if tiny_model.cfg.positional_embedding_type == "standard" else "blocks.0.attn.hook_rot_q"
    seen = {}
    with torch.inference_mode():
        cached_logits(tiny_model, cache, qt, torch.tensor([qt.shape[1] - 1]),
                      hooks=[(name, lambda x, hook: seen.setdefault("c", x.clone()))])
        _, alone = tiny_model.run_with_cache(qt, names_filter=name)
    torch.testing.assert_close(seen["c"][0], alone[name][0], atol=1e-5, rtol=1e-5)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    orig = predict_cached(tiny_model, build_cache(tiny_model, p), ps, lid)
    rest = predict_cached(tiny_model, cache, ps, lid)
    assert (orig.label_logits - rest.label_logits).abs().max() > 1e-3


def test_run_compression_restart_changes_only_the_cached_methods(tiny_models):
    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids
    from helpers.experiments.compression import run_compression

    m = tiny_models["gpt2"]
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, prompts_for(m), 0, label_token_ids(m.tokenizer, "sst2"))
    a = run_compression(m, s, random_top_draws=2, batch_size=2)
    b = run_compression(m, s, random_top_draws=2, batch_size=2, query_positions="restart")
    assert (a.query_positions, b.query_positions) == ("original", "restart")
    for meth in ("ICL", "Text_anchor"):  # no cache: the option does not apply
        assert a.per_input[meth] == b.per_input[meth]
    assert a.counts == b.counts and a.n_test == b.n_test


def test_cached_compression_keys_on_query_positions(tiny_models, monkeypatch, tmp_path):
    """A stored "restart" result never serves an "original" request, and each is served from the store."""
    import helpers.experiments.compression as C
    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    calls = []
    real = C.run_compression
    monkeypatch.setattr(C, "run_compression", lambda *a, **k: calls.append(a[-1]) or real(*a, **k))
    m = tiny_models["rotary"]
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, prompts_for(m), 0, label_token_ids(m.tokenizer, "sst2"))
    r = C.cached_compression(m, s, 2, 2, query_positions="restart")
    o = C.cached_compression(m, s, 2, 2)
    assert (r.query_positions, o.query_positions) == ("restart", "original")
    assert calls == ["restart", "original"]
    assert C.cached_compression(m, s, 2, 2, query_positions="original").query_positions == "original"
    assert C.cached_compression(m, s, 2, 2, query_positions="restart").query_positions == "restart"
    assert len(calls) == 2  # both served from the store


@pytest.mark.parametrize("bad", ["Restart", "zero", "", None, 0])
def test_bad_query_positions_are_refused(tiny_models, bad):
    from helpers.core.prompts import PromptSet
    from helpers.core.tasks import get_task, label_token_ids
    from helpers.experiments.compression import cached_compression, run_compression

    m = tiny_models["gpt2"]
    ps = prompts_for(m)
    s = PromptSet(get_task("sst2"), 0, 1, DEMOS, QUERIES, ps, 0, label_token_ids(m.tokenizer, "sst2"))
    msg = r"query_positions must be one of 'original', 'restart'; got "
    for run in (lambda: build_cache(m, ps[0], query_positions=bad),
                lambda: run_compression(m, s, 2, 2, query_positions=bad),
                lambda: cached_compression(m, s, 2, 2, query_positions=bad)):
        with pytest.raises(ValueError, match=msg):
            run()


def test_restarted_cache_is_not_mixed_with_original_positions(tiny_models):
    """Paths that assume the suffix continues at P0 refuse a restarted cache instead of mixing positions."""
    from helpers.core.prefix import PrefixError, extend_prefix, predict_shared_split
    from helpers.core.tasks import label_token_ids

    m = tiny_models["rotary"]
    ps = prompts_for(m)
    lid = label_token_ids(m.tokenizer, "sst2")
    caches = {"original": build_cache(m, ps[0]), "restart": build_cache(m, ps[0], query_positions="restart")}
    with pytest.raises(PrefixError, match="other prefix tokens or positions"):
        predict_shared_split(m, ps, lid, caches, split_layer=1)
    full = build_cache(m, ps[0], keep=range(prefix_len(ps[0])), query_positions="restart")
    with pytest.raises(PrefixError, match="continues at P0"):
        extend_prefix(m, full, ps[0].tokens[prefix_len(ps[0]):-1])


# ---- notebook 05's by-hand cell: its check passes on the reference and fails on wrong functions ----

def test_check_hidden_anchor_passes_on_the_reference(capsys):
    from helpers.exercises.compression import check_hidden_anchor_logits
    from helpers.experiments.compression import hidden_anchor_reference

    check_hidden_anchor_logits(hidden_anchor_reference)
    assert "✓" in capsys.readouterr().out


def _keep_shifted(model, prompt, keep, label_ids):
    """Wrong: the cache keeps the positions one to the left of the anchors (an off-by-one)."""
    from helpers.experiments.compression import hidden_anchor_reference

    return hidden_anchor_reference(model, prompt, sorted({max(k - 1, 0) for k in keep}), label_ids)


def _nothing_pruned(model, prompt, keep, label_ids):
    """Wrong: the input attends to every demonstration position (full ICL)."""
    with torch.inference_mode():
        return logits_at(model, prompt.tokens[None], torch.tensor([prompt.q]))[0, list(label_ids)]


def _cache_at_new_positions(model, prompt, keep, label_ids):
    """Wrong: only the kept tokens, run as a short prompt (positions 0..K-1, input at K): the Text_anchor-like
    recomputation instead of the demonstrations' own keys and values."""
    p0 = prefix_len(prompt)
    toks = torch.cat([prompt.tokens[list(keep)], prompt.tokens[p0:]])
    with torch.inference_mode():
        return logits_at(model, toks[None], torch.tensor([len(keep) + prompt.q - p0]))[0, list(label_ids)]


def _not_masked(model, prompt, keep, label_ids):
    """Wrong: the other demonstration rows' keys and values zeroed, but their scores not masked."""
    p0, idx = prefix_len(prompt), torch.tensor(list(keep))

    def zero_others(x, hook):
        x = x.clone()
        kept = x[:, idx].clone()
        x[:, :p0] = 0.0
        x[:, idx] = kept
        return x

    hooks = [(f"blocks.{l}.attn.hook_{x}", zero_others) for l in range(model.cfg.n_layers) for x in "kv"]
    with torch.inference_mode():
        return model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q, list(label_ids)]


def _demos_masked_too(model, prompt, keep, label_ids):
    """Wrong: every row, the demonstrations' own included, masked to the kept positions."""
    p0, n = prefix_len(prompt), len(prompt)
    blocked = torch.zeros(n, n, dtype=torch.bool)
    blocked[:, :p0] = True
    blocked[:, list(keep)] = False
    hooks = [(f"blocks.{l}.attn.hook_attn_scores", lambda s, hook: s.masked_fill(blocked, float("-inf")))
             for l in range(model.cfg.n_layers)]
    with torch.inference_mode():
        return model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q, list(label_ids)]


@pytest.mark.parametrize("wrong, says", [(_keep_shifted, "one before `keep`"), (_nothing_pruned, "nothing was pruned"),
                                         (_cache_at_new_positions, "new, shorter prompt"),
                                         (_not_masked, "zeroed but not masked"),
                                         (_demos_masked_too, "demonstrations' own rows")])
def test_check_hidden_anchor_names_each_mistake(wrong, says):
    from helpers.exercises.compression import check_hidden_anchor_logits
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match=says):
        check_hidden_anchor_logits(wrong)


def test_check_input_mask_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.compression import check_input_mask
    from helpers.exercises.grading import CheckFailed

    def mask(n, p0, keep, rows_from=None, unkeep=True, self_block=False, flip=False):
        m = torch.zeros(n, n, dtype=torch.bool)
        m[p0 if rows_from is None else rows_from:, :p0] = True
        if unkeep:
            m[p0 if rows_from is None else rows_from:, keep] = False
        if self_block:
            m[p0:, p0:] = True
        return ~m if flip else m

    check_input_mask(mask)
    assert "✓ mask marks exactly" in capsys.readouterr().out
    for kw, says in ((dict(rows_from=0), "demonstrations' own rows"), (dict(unkeep=False), "kept columns"),
                     (dict(rows_from="late"), "one off"), (dict(self_block=True), "read itself"),
                     (dict(flip=True), "swapped")):
        def wrong(n, p0, keep, kw=kw):
            k = dict(kw)
            if k.get("rows_from") == "late":
                k["rows_from"] = p0 + 1
            return mask(n, p0, keep, **k)

        with pytest.raises(CheckFailed, match=says):
            check_input_mask(wrong)


def test_compression_claims_verdicts():
    import pandas as pd

    from helpers.experiments.compression import METHODS
    from helpers.protocols.compression import compression_claims
    from helpers.study.stats import Interval

    up, zero = Interval(5, 1, 9, 5, 320), Interval(0, -3, 3, 5, 320)
    ivs = {(m, met): Interval(60, 55, 65, 5, 320) for m in METHODS
           for met in ("label_loyalty", "word_loyalty", "accuracy")}
    others = ["Text_anchor", "Hidden_random", "Hidden_random-top"]
    gaps = {(o, m): (zero if o == "Text_anchor" and m == "word_loyalty" else up)
            for o in others for m in ("label_loyalty", "word_loyalty")}
    speed = pd.DataFrame([dict(task="sst2", speedup=1.8, speedup_low=1.7, speedup_high=1.9, n_inputs=8, bound=1.9),
                          dict(task="trec", speedup=1.2, speedup_low=1.1, speedup_high=1.3, n_inputs=8, bound=2.0),
                          dict(task="agnews", speedup=0.9, speedup_low=0.8, speedup_high=1.0, n_inputs=8, bound=3.0),
                          dict(task="rotten_tomatoes", speedup=1.5, speedup_low=1.4, speedup_high=1.6, n_inputs=8,
                               bound=1.6)])
    cs = {c.key: c for c in compression_claims(ivs, gaps, speed, context="tiny")}
    assert cs["05.hidden_anchor_label_loyalty"].verdict == "partly"  # table2_verdict: label loyalty all above 0
    assert cs["05.hidden_anchor_label_loyalty"].paper.startswith("79.47")
    assert cs["05.anchor_minus_Text_anchor_word_loyalty"].verdict == "inconclusive"
    assert cs["05.anchor_minus_Hidden_random_word_loyalty"].verdict == "replicates"
    assert [cs[f"05.speedup_{t}"].verdict for t in ("sst2", "trec", "agnews")] == [
        "replicates", "replicates", "inconclusive"]  # on the interval: above 1, above 1, reaching 1
    assert cs["05.speedup_trec"].ours.low == 1.1 and cs["05.speedup_trec"].paper.startswith("1.5x")
    # a task the paper did not study (your own): its claim runs and says there is no paper column, not a KeyError
    own = cs["05.speedup_rotten_tomatoes"]
    assert own.verdict == "replicates" and own.paper.startswith("not in the paper") and "Rotten" in own.statement


@pytest.mark.parametrize("kind", TINY_KINDS)
@pytest.mark.parametrize("label_only", [False, True])
def test_path_flops_equal_what_the_two_passes_count(tiny_models, kind, label_only):
    """The FLOP speed-up's counts equal the accounting ledger of the passes time_icl_vs_anchor times: the full
    prompt's forward with q's unembedding, and the query's suffix after the kept positions."""
    from helpers.core import accounting
    from helpers.core.predict import logits_at
    from helpers.core.prefix import suffix_logits, suffix_tokens
    from helpers.core.tasks import label_token_ids
    from helpers.experiments.compression import build_cache, path_flops

    m = tiny_models[kind]
    ps = prompts_for(m)
    cache = build_cache(m, ps[0])
    ids = torch.tensor(label_token_ids(m.tokenizer, "sst2")) if label_only else None
    full, anchor = path_flops(m.cfg, ps, cache, m.cfg.d_vocab if ids is None else len(ids))
    qtok = suffix_tokens(cache, ps)
    for i, p in enumerate(ps):
        with torch.inference_mode(), accounting.recording() as led:
            with accounting.step("full"):
                logits_at(m, p.tokens[None], torch.tensor([p.q]), vocab=ids)
            with accounting.step("anchor"):
                suffix_logits(m, cache, qtok[i][None], torch.tensor([qtok[i].shape[0] - 1]), vocab=ids)
        assert led.entry("full").flops == pytest.approx(full[i])
        assert led.entry("anchor").flops == pytest.approx(anchor[i])
        assert anchor[i] < full[i]


def test_speed_verdict_reads_the_interval_and_the_bound_is_not_in_it():
    from helpers.protocols.compression import engine_goal, speed_verdict
    from helpers.study.stats import Interval

    assert speed_verdict(Interval(1.5, 1.43, 1.69, 1, 8)) == speed_verdict(Interval(1.85, 1.71, 1.98, 1, 8)) == "faster"
    assert speed_verdict(Interval(1.05, 0.98, 1.12, 1, 8)) == "cannot tell"
    assert speed_verdict(Interval(0.8, 0.7, 0.9, 1, 8)) == "slower"
    # make bench's engineering goal still compares with the token-ratio bound
    assert engine_goal({"sst2": 1.8}, {"sst2": 1.9}) == "meets the goal"
    assert engine_goal({"sst2": 1.5}, {"sst2": 1.9}) == "speeds up"
