"""Tests of paper B's in-context heads on the tiny models, plus one slow check on Gemma:
helpers.experiments.incontext_heads (attribution, ranking), helpers.experiments.head_ablation (ablation against
random heads), helpers.experiments.mapping_control (the mapping control) and helpers.study.heads_report (the
verdict)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from heads_common import ATOL, SHARED_ATOL, _assert_same_predictions, _final_logprobs, _set, _shared_vs_full

from helpers.core import heads as CH
from helpers.core.predict import predict
from helpers.core.tasks import label_token_ids
from helpers.experiments import incontext_heads as IH
from helpers.experiments.head_ablation import (
    ABLATION_CONDITIONS,
    ALL_POSITIONS,
    ablation_accuracy,
    ablation_hook_pair,
    ablation_hooks,
    random_heads,
)
from helpers.experiments.mapping_control import mapping_control
from helpers.protocols import head_ablation as HA
from helpers.protocols import mapping_control as MC
from helpers.study import heads_report as HR

# ------------------------------------------------------------------ attribution


def test_head_attribution_equals_direct_recomputation(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3)
    sc = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2)
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
    a = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=3)
    b = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=1)
    assert torch.allclose(a.gain, b.gain, atol=ATOL) and torch.allclose(a.drop, b.drop, atol=ATOL)
    assert torch.allclose(a.label_gain, b.label_gain, atol=ATOL) and torch.allclose(a.label_drop, b.label_drop, atol=ATOL)
    assert torch.equal(a.pred, b.pred)


def test_mean_ablation_with_own_mean_is_identity(tiny_model, ut):
    ps = _set(tiny_model, ut, n=1)
    sc = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, ablation="mean")
    # one prompt: its mean z at q is its own z at q, so replacing it changes nothing
    assert sc.drop.abs().max() < ATOL


def test_rank_heads_and_count():
    g = torch.zeros(2, 2, 3)
    d = torch.zeros(2, 2, 3)
    g[:, 1, 2], d[:, 1, 2] = 5, 5
    g[:, 0, 0], d[:, 0, 1] = 3, 4
    sc = IH.HeadScores(g, d, torch.zeros(2, dtype=torch.long), "zero")
    assert IH.rank_heads(sc)[0] == (1, 2)
    assert IH.rank_heads(sc, "gain")[:2] == [(1, 2), (0, 0)]
    assert IH.rank_heads(sc, "drop")[:2] == [(1, 2), (0, 1)]
    assert sorted(IH.rank_heads(sc)) == [(l, h) for l in range(2) for h in range(3)]


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
    return IH.HeadScores(lg[:, 0], ld[:, 0], pred, "zero", lg, ld, gold)


def test_per_label_ranking_finds_both_labels_heads():
    sc = _label_scores()
    assert IH.rank_heads_for_label(sc, 0)[:2] == [(0, 0), (0, 1)]
    assert IH.rank_heads_for_label(sc, 1)[0] == (1, 2)
    # the pooled ranking on the predicted label (always foo) never puts the bar head first
    assert IH.incontext_heads(sc, 2, per_label=False) == [(0, 0), (0, 1)]
    assert IH.incontext_heads(sc, 2) == [(0, 0), (1, 2)]
    assert IH.incontext_heads(sc, 3) == [(0, 0), (1, 2), (0, 1)]
    # only prompts whose gold label is bar rank the bar heads: a foo prompt's bar gain is ignored
    sc.label_gain[0, 1, 0, 2] = 100.0
    sc.label_drop[0, 1, 0, 2] = 100.0
    assert IH.rank_heads_for_label(sc, 1)[0] == (1, 2)


def test_per_label_ranking_refuses_what_it_cannot_rank():
    sc = _label_scores()
    with pytest.raises(ValueError, match="label must be"):
        IH.rank_heads_for_label(sc, 2)
    with pytest.raises(ValueError, match="at least 1"):
        IH.incontext_heads(sc, 0)
    old = IH.HeadScores(sc.gain, sc.drop, sc.pred, "zero")
    with pytest.raises(ValueError, match="per-label"):
        IH.rank_heads_for_label(old, 0)
    sc.gold[:] = 0
    with pytest.raises(ValueError, match="no attribution prompt has gold label 1"):
        IH.incontext_heads(sc, 2)


def test_n_incontext_heads(tiny_model):
    assert IH.n_incontext_heads(tiny_model, 0.01, 4) == 4
    assert IH.n_incontext_heads(tiny_model, 0.5, 1) == 6


# ------------------------------------------------------------------ ablation


def test_ablating_no_heads_equals_plain_run(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    none = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=ablation_hooks([]))
    assert torch.equal(plain.label_logits, none.label_logits)
    assert ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, []) == plain.accuracy


def test_ablation_hooks_match_cached_ablation(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3)
    heads = [(0, 1), (tiny_model.cfg.n_layers - 1, 3)]
    out = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=ablation_hooks(heads))
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    assert not torch.allclose(out.label_logits, plain.label_logits)
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    mask = torch.zeros(1, L, Hn)
    for l, h in heads:
        mask[0, l, h] = 1
    for i, p in enumerate(ps.prompts):
        lp = CH.ablated_last_logprobs(tiny_model, p.tokens, mask, None)[0]
        a = lp[ps.label_ids[0]] - lp[ps.label_ids[1]]
        b = out.label_logits[i, 0] - out.label_logits[i, 1]
        assert torch.allclose(a, b, atol=ATOL)


def test_ablation_all_positions_differs_from_q_only(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2)
    heads = [(0, 0), (0, 1), (0, 2), (0, 3)]
    q_only = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=ablation_hooks(heads, at="q"))
    every = predict(tiny_model, ps.prompts, ps.label_ids, 2, hooks=ablation_hooks(heads, at="all"))
    assert not torch.allclose(q_only.label_logits, every.label_logits)
    with pytest.raises(ValueError, match="means"):
        ablation_hooks(heads, ablation="mean")


def test_random_heads_seeded_and_disjoint(tiny_model):
    chosen = [(0, 0), (1, 2), (2, 3)]
    a = random_heads(tiny_model, 4, seed=7, exclude=chosen)
    assert a == random_heads(tiny_model, 4, seed=7, exclude=chosen)
    assert len(set(a)) == 4 and not set(a) & set(chosen)
    total = tiny_model.cfg.n_layers * tiny_model.cfg.n_heads
    assert set(random_heads(tiny_model, total, seed=0, exclude=chosen, allow_overlap=True)) >= set(chosen)
    with pytest.raises(ValueError, match="available"):
        random_heads(tiny_model, total - 2, seed=0, exclude=chosen)
    draws = {tuple(random_heads(tiny_model, 3, seed=s, exclude=chosen)) for s in range(10)}
    assert len(draws) > 1


# ------------------------------------------------------------------ verdict


def test_verdict_criteria():
    ok = HR.heads_verdict(0.9, 0.4, 0.88, 0.9, 0.8, 0.1, 30, 0.2, 20, 0.2)
    assert ok[0] == "replicates" and set(ok[1].values()) == {"replicates"}
    none = HR.heads_verdict(0.6, 0.6, 0.55, 0.4, 0.1, 0.5, -5, 0.2, -3, 0.2)
    assert none[0] == "does not replicate"
    mixed = HR.heads_verdict(0.9, 0.8, 0.89, 0.9, 0.8, 0.1, 30, 0.01, 5, 0.2)
    assert mixed[1]["majority"] == "no measurable bias" and mixed[1]["recency"] == "partly" and mixed[0] == "partly"


def test_ablation_interval_part_and_overall_verdict():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    assert HA.ablation_interval_part(iv(0.3, 0.5), iv(0.2, 0.4)) == "replicates"
    assert HA.ablation_interval_part(iv(0.1, 0.3), iv(0.05, 0.2)) == "partly"
    assert HA.ablation_interval_part(iv(-0.05, 0.05), iv(-0.03, 0.04)) == "inconclusive"
    assert HA.ablation_interval_part(iv(-0.2, -0.1), iv(-0.2, -0.05)) == "does not replicate"
    overall, parts = HR.heads_verdict(0.5, 0.5, 0.5, 0.5, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, ablation="inconclusive")
    assert parts["ablation"] == "inconclusive" and overall == "inconclusive"
    overall, _ = HR.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 0.0, 0.0, 0.0, 0.0, ablation="inconclusive")
    assert overall == "partly"  # the value-output part replicates


# ------------------------------------------------------------------ mapping control


def test_mapping_control_hand_cases():
    key = ("sst2", 1)
    gold = np.array([0, 1, 0, 1])
    prior = {key: {"pred": [0, 0, 0, 0], "correct": (gold == 0).astype(int).tolist()}}  # always the first word
    prior_swapped = {key: {"pred": [1, 1, 1, 1], "correct": (gold == 1).astype(int).tolist()}}  # the same word
    mc = mapping_control(prior, prior_swapped)
    assert mc["swap_averaged"][key].tolist() == [0.5] * 4 and mc["same_word"][key].tolist() == [1.0] * 4
    icl = {key: {"pred": gold.tolist(), "correct": [1, 1, 1, 1]}}
    mc = mapping_control(icl, icl)  # the gold class index is the same under both mappings
    assert mc["swap_averaged"][key].tolist() == [1.0] * 4 and mc["same_word"][key].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="same inputs"):
        mapping_control(icl, {key: {"pred": [0], "correct": [1]}})
    with pytest.raises(ValueError, match="same"):
        mapping_control(icl, {("sst2", 2): icl[key]})
    from helpers.study.stats import Interval
    assert MC.mapping_interval_part(Interval(0.6, 0.55, 0.65, 5, 320)) == "follows the mapping"
    assert MC.mapping_interval_part(Interval(0.5, 0.45, 0.55, 5, 320)) == "at chance"
    assert MC.mapping_interval_part(Interval(0.4, 0.35, 0.45, 5, 320)) == "against the mapping"


# ------------------------------------------------------------------ shared demonstrations == full prompts


@pytest.mark.parametrize("at", ["q", "all"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_shared_ablation_equals_full_prompts(tiny_model, ut, at, ablation):
    from helpers.core.prefix_runs import predict_shared

    ps = _set(tiny_model, ut, n=4, k=2)
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    heads = [(0, 1), (0, 2), (L - 2, 0), (L - 1, 3)]
    means = torch.randn(L, Hn, tiny_model.cfg.d_head, generator=torch.Generator().manual_seed(0)) if ablation == "mean" else None
    prefix_hooks, factory = ablation_hook_pair(heads, ablation, means, at)
    assert (len(prefix_hooks) > 0) == (at == "all")
    full, shared = _shared_vs_full(tiny_model, ps, factory, prefix_hooks)
    _assert_same_predictions(full, shared)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    assert not torch.allclose(full.label_logits, plain.label_logits, atol=1e-3)  # the ablation does something
    if at == "all":  # the prefix positions are ablated too: without the prefix hooks the result differs
        partial = predict_shared(tiny_model, ps.prompts, ps.label_ids, 2, hooks=factory)
        assert not torch.allclose(partial.label_logits, full.label_logits, atol=1e-3)
    kw = {"ablation": ablation, "means": means, "at": at}
    assert CH.shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    assert ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, heads, 2, **kw) == \
        ablation_accuracy(tiny_model, ps.prompts, ps.label_ids, heads, 2, shared=False, **kw) == full.accuracy


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_shared_head_attribution_equals_full_prompts(tiny_model, ut, ablation):
    ps = _set(tiny_model, ut, n=3, k=2)
    assert CH.shared_cache(tiny_model, ps.prompts) is not None  # the shared path is the one taken
    a = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2, ablation=ablation)
    b = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2, ablation=ablation, shared=False)
    assert torch.equal(a.pred, b.pred)
    assert torch.allclose(a.gain, b.gain, atol=SHARED_ATOL), (a.gain - b.gain).abs().max()
    assert torch.allclose(a.drop, b.drop, atol=SHARED_ATOL), (a.drop - b.drop).abs().max()
    assert a.drop.abs().max() > 1e-3  # not trivially equal
    # the cached drop alone: the shared demonstrations extended by the query == the prompt from scratch
    L, Hn = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    masks = torch.cat([torch.zeros(1, L * Hn), torch.eye(L * Hn)[:5]]).reshape(-1, L, Hn)
    cache = CH.shared_cache(tiny_model, ps.prompts)
    with torch.inference_mode():
        x = CH.ablated_last_logprobs(tiny_model, ps.prompts[1].tokens, masks, None, cache=cache)
        y = CH.ablated_last_logprobs(tiny_model, ps.prompts[1].tokens, masks, None)
    assert torch.allclose(x, y, atol=SHARED_ATOL)


# ------------------------------------------------------------------ real model


@pytest.mark.slow
def test_gemma_foobar_tokens_and_attribution(gemma, ut):
    lids = label_token_ids(gemma.tokenizer, ut.task)
    assert len(set(lids)) == 2
    ps = _set(gemma, ut, n=1, k=1)
    sc = IH.head_attribution(gemma, ps.prompts, ps.label_ids)
    assert sc.gain.shape == (1, 18, 4) and torch.isfinite(sc.drop).all()


# ------------------------------------------------------------------ the by-hand check and the claims


def test_head_label_drops_are_the_attribution_drops(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2, k=1)
    sc = IH.head_attribution(tiny_model, ps.prompts, ps.label_ids, batch_size=2, shared=False)
    heads = [(0, 1), (tiny_model.cfg.n_layers - 1, 3)]
    for i, p in enumerate(ps.prompts):
        d = IH.head_label_drops(tiny_model, p.tokens, heads, ps.label_ids)
        for row, (l, h) in enumerate(heads):
            assert torch.allclose(d[row], sc.label_drop[i, :, l, h], atol=ATOL)


def test_check_head_ablation_passes_the_solution_and_fails_wrong_ones(capsys):
    from heads_common import head_ablation_drop

    from helpers.exercises.incontext_heads import check_head_ablation

    check_head_ablation(head_ablation_drop)
    assert "✓ head_ablation_drop matches the reference on 3 tiny models" in capsys.readouterr().out

    def off_by_one(model, tokens, layer, head, label_ids):  # ablates the position before q
        return head_ablation_drop(model, tokens[:-1], layer, head, label_ids)

    def every_position(model, tokens, layer, head, label_ids):
        def zero(z, hook):
            z[:, :, head] = 0.0
            return z
        plain = model(tokens[None])[0, -1].log_softmax(-1)
        abl = model.run_with_hooks(tokens[None], fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])[0, -1]
        return plain[label_ids] - abl.log_softmax(-1)[label_ids]

    def logits_not_log_probs(model, tokens, layer, head, label_ids):
        def zero(z, hook):
            z[:, -1, head] = 0.0
            return z
        abl = model.run_with_hooks(tokens[None], fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])[0, -1]
        return model(tokens[None])[0, -1][label_ids] - abl[label_ids]

    def reversed_sign(model, tokens, layer, head, label_ids):
        return -head_ablation_drop(model, tokens, layer, head, label_ids)

    for wrong, says in ((off_by_one, "one position before the last"), (every_position, "at every position"),
                        (logits_not_log_probs, "These are logits"), (reversed_sign, "reversed")):
        with pytest.raises(AssertionError, match=f"{wrong.__name__} on the tiny .* model.*{says}"):
            check_head_ablation(wrong)
    with pytest.raises(AssertionError, match="returned None"):
        check_head_ablation(lambda *a: None)


def test_mapping_and_ablation_claims():
    from helpers.study.claims import VERDICTS
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    mapping = {"swap_averaged": iv(0.49, 0.51), "same_word": iv(0.9, 1.0)}
    ablation = {c: iv(0.45, 0.55) for c in ABLATION_CONDITIONS}
    ablation.update({"drop": iv(0.3, 0.5), "excess": iv(0.2, 0.4), "drop" + ALL_POSITIONS: iv(-0.02, 0.04),
                     "excess" + ALL_POSITIONS: iv(-0.03, 0.05)})
    claims = MC.mapping_claims(mapping, context="probe") + HA.ablation_claims(ablation, context="probe")
    assert [c.key for c in claims] == ["07.foobar_icl", "07.ablation_at_q", "07.ablation_all"]
    assert [c.verdict for c in claims] == ["inconclusive", "replicates", "inconclusive"]
    assert all(c.verdict in VERDICTS and c.context == "probe" for c in claims)
    assert "at chance" in claims[0].note and "87.6%" in claims[1].paper
    follows = MC.mapping_claims({**mapping, "swap_averaged": iv(0.6, 0.7)})[0]
    assert follows.verdict == "replicates"
    assert HR.heads_overall({"a": "partly", "b": "no measurable bias"}) == "partly"
    assert HR.heads_overall({"a": "inconclusive", "b": "does not replicate"}) == "inconclusive"
    assert HR.heads_overall({"a": "no measurable bias"}) == "does not replicate"


def test_cached_runs_hash_the_weights_once_per_call(tiny_models, ut, tmp_path, monkeypatch):
    """Every stored step is keyed by the weights' sha256 (2-3 s on Gemma 3 270M); a helper that stores one step
    per (task, seed), or per size as regime_runs does, hashes them once per call, not once per step."""
    from helpers.core import accounting
    from helpers.core.store import FINGERPRINT_STEP
    from helpers.protocols.mapping_control import RegimeSizes, accuracy_runs, regime_runs

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model = tiny_models["gpt2"]
    from helpers.core.unrelated import UnrelatedTask, unrelated_task

    full = unrelated_task("sst2", (0, 1), ("bar", "foo"))
    swapped = UnrelatedTask(full.task, full.train.select(range(300)), full.test.select(range(60)), "sst2", (0, 1))
    sizes = RegimeSizes(ks=(1, 2), n_eval=4, seeds=(42, 43), tasks=("sst2",), confirm_seeds=(1042, 1043))
    with accounting.recording() as led:
        accuracy_runs(model, {"sst2": ut}, sizes.at(1))
    assert led.entries[FINGERPRINT_STEP].computed == 1 and led.entries["heads_acc"].computed == 2
    with accounting.recording() as led:
        regime_runs(model, {"foo/bar": {"sst2": ut}, "bar/foo": {"sst2": swapped}}, sizes, pairs=("foo/bar",))
    assert led.entries[FINGERPRINT_STEP].computed == 1 and led.entries["heads_acc"].computed == 6  # k=1 of foo/bar is read back
