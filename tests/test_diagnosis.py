"""Error diagnosis: distances, AUC confusion, rank correlation, q/k collection with GQA."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from helpers.core.predict import predict
from helpers.core.prompts import Demo, build_prompt
from helpers.core.tasks import label_token_ids
from helpers.experiments.diagnosis import (
    actual_confusion,
    collect_qk,
    diagnose,
    layer_sweep,
    predicted_confusion,
    rank_correlation,
)


def test_predicted_confusion_symmetric_normalised():
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(30, 12))
    K = rng.normal(size=(4, 12))
    D = predicted_confusion(Q, K, n_components=10)
    assert D.shape == (4, 4)
    np.testing.assert_allclose(D, D.T)
    np.testing.assert_allclose(np.diag(D), 1.0)
    off = D[~np.eye(4, dtype=bool)]
    assert off.max() == pytest.approx(1.0) and off.min() > 0
    # fewer samples than components: still works
    assert predicted_confusion(Q[:3], K).shape == (4, 4)


def test_predicted_confusion_hand_case():
    """Queries vary only along axis 0: keys differing only along axis 1 are indistinguishable."""
    Q = np.zeros((20, 3))
    Q[:, 0] = np.linspace(-1, 1, 20)
    K = np.array([[0.0, 0, 0], [0.0, 5, 0], [1.0, 0, 0]])
    D = predicted_confusion(Q, K, n_components=1)
    assert D[0, 1] == pytest.approx(0.0, abs=1e-9)
    assert D[0, 2] == pytest.approx(1.0) and D[1, 2] == pytest.approx(1.0)


def test_actual_confusion_matches_sklearn():
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 3, size=60)
    P = rng.dirichlet(np.ones(3), size=60)
    A = actual_confusion(P, gold)
    for a in range(3):
        for b in range(3):
            if a == b:
                assert A[a, b] == 1.0
                continue
            m = (gold == a) | (gold == b)
            assert A[a, b] == pytest.approx(roc_auc_score(gold[m] == a, P[m, a] / P[m, b]))
    # a perfectly separating classifier: AUC 1; a class absent: NaN
    P2 = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0]]) + 1e-3
    A2 = actual_confusion(P2, np.array([0, 1]))
    assert A2[0, 1] == 1.0 and np.isnan(A2[0, 2])


def test_rank_correlation():
    a = np.array([[1, 0.1, 0.5, 0.9], [0.1, 1, 0.3, 0.2], [0.5, 0.3, 1, 0.7], [0.9, 0.2, 0.7, 1]])
    assert rank_correlation(a, a) == pytest.approx(1.0)
    assert rank_correlation(a, -a) == pytest.approx(-1.0)


def test_collect_qk_shapes_and_gqa(tiny_model):
    demos = [Demo("a truly great film", 1), Demo("dull and far too long", 0)]
    qs = [Demo("wonderful", 1), Demo("awful, simply awful", 0), Demo("I smiled", 1), Demo("boring, long", 0)]
    ps = [build_prompt(tiny_model, "sst2", demos, d) for d in qs]
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    cfg = tiny_model.cfg
    v = collect_qk(tiny_model, ps, lid, batch_size=3)
    assert v.queries.shape == (4, cfg.n_layers, cfg.n_heads * cfg.d_head)
    assert v.keys.shape == (cfg.n_layers, 2, cfg.n_heads * cfg.d_head)
    torch.testing.assert_close(v.label_probs, predict(tiny_model, ps, lid).label_probs, atol=1e-5, rtol=1e-5)
    # hand check: layer 1, query of prompt 0 and key of class 1 (demo 0's label)
    p = ps[0]
    with torch.inference_mode():
        _, c = tiny_model.run_with_cache(p.tokens[None], names_filter=lambda n: n.startswith("blocks.1.attn.hook_"))
    torch.testing.assert_close(v.queries[0, 1], c["blocks.1.attn.hook_q"][0, p.q].reshape(-1), atol=1e-5, rtol=1e-5)
    k = c["blocks.1.attn.hook_k"][0, p.label_pos[0]]  # [kvH, d]
    rep = cfg.n_heads // (cfg.n_key_value_heads or cfg.n_heads)
    torch.testing.assert_close(v.keys[1, 1], k.repeat_interleave(rep, dim=0).reshape(-1), atol=1e-5, rtol=1e-5)
    if rep > 1:  # shared KV head: consecutive query heads see the same key block
        d = cfg.d_head
        torch.testing.assert_close(v.keys[1, 1, :d], v.keys[1, 1, d:2 * d])
    out = diagnose(v, 1, n_components=10)
    assert out["predicted"].shape == (2, 2) and out["actual"].shape == (2, 2)
    assert set(layer_sweep(v)) == set(range(cfg.n_layers))

@pytest.mark.parametrize("layers", [None, [1, 0]])
def test_collect_qk_shared_equals_full(tiny_sst2_set, prefix_runs, layers):
    """Keys from one prefix pass, queries and label probs from suffix runs == the full-prompt collection."""
    model, prompts, lids = tiny_sst2_set
    calls = prefix_runs()
    sh = collect_qk(model, prompts, lids, layers=layers, batch_size=3)
    assert len(calls) == 1  # the shared path ran, with one prefix pass
    full = collect_qk(model, prompts, lids, layers=layers, batch_size=3, shared=False)
    assert len(calls) == 1
    assert sh.layers == full.layers
    assert sh.queries.shape == full.queries.shape and sh.keys.shape == full.keys.shape
    torch.testing.assert_close(sh.queries, full.queries, atol=1e-4, rtol=0)
    torch.testing.assert_close(sh.keys, full.keys, atol=1e-4, rtol=0)
    torch.testing.assert_close(sh.label_probs, full.label_probs, atol=1e-4, rtol=0)
    assert torch.equal(sh.gold, full.gold)


def test_collect_qk_falls_back_without_shared_demos(tiny_model, prefix_runs, mixed_demo_prompts):
    """Different demonstrations per prompt: the full-prompt path runs and keys average over prompts."""
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    ps = mixed_demo_prompts
    calls = prefix_runs()
    v = collect_qk(tiny_model, ps, lid, batch_size=2)
    assert not calls
    full = collect_qk(tiny_model, ps, lid, batch_size=2, shared=False)
    torch.testing.assert_close(v.keys, full.keys, atol=0, rtol=0)
    torch.testing.assert_close(v.queries, full.queries, atol=0, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False])
def test_gemma_vectors_are_the_ones_attention_uses(gemma, shared):
    """Gemma 3 normalises q and k per head before rotary: the collected vectors, rotated to their positions,
    are exactly the attention's rotated q and k (the raw hook_q / hook_k are not)."""
    from helpers.core.prefix import _rotate
    from helpers.core.prompts import make_icl_set

    s = make_icl_set(gemma, "sst2", seed=42, n_test=3)
    p, l = s.prompts[0], gemma.cfg.n_layers - 3
    attn = gemma.blocks[l].attn
    H, d = gemma.cfg.n_heads, gemma.cfg.d_head
    rep = H // gemma.cfg.n_key_value_heads
    v = collect_qk(gemma, s.prompts, s.label_ids, layers=[l], shared=shared)
    names = {f"blocks.{l}.attn.{h}" for h in ("hook_rot_q", "hook_rot_k", "hook_q")}
    _, cache = gemma.run_with_cache(p.tokens[None], names_filter=lambda n: n in names)
    q_used = v.queries[0, 0].reshape(1, H, d)
    torch.testing.assert_close(_rotate(attn, q_used, p.q)[0], cache[f"blocks.{l}.attn.hook_rot_q"][0, p.q],
                               atol=1e-4, rtol=1e-4)
    assert not torch.allclose(q_used[0], cache[f"blocks.{l}.attn.hook_q"][0, p.q], atol=1e-2)
    for pos, c in zip(p.label_pos, p.label_class):  # one demonstration per class
        k_used = v.keys[0, c].reshape(H, d)[::rep][None]
        torch.testing.assert_close(_rotate(attn, k_used, pos)[0], cache[f"blocks.{l}.attn.hook_rot_k"][0, pos],
                                   atol=1e-4, rtol=1e-4)


def test_spearman_interval_and_verdict(tiny_model):
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.diagnosis import seed_averaged_spearman
    from helpers.protocols.diagnosis import diagnosis_verdict, spearman_interval
    from helpers.study.stats import Interval

    vecs = {}
    for seed in (42, 43):
        s = make_icl_set(tiny_model, "trec", seed=seed, n_test=24)
        vecs[seed] = collect_qk(tiny_model, s.prompts, s.label_ids, layers=[1])
    rho = seed_averaged_spearman(vecs, 1, n_components=4)
    iv = spearman_interval(vecs, 1, n_components=4, n_boot=40)
    assert iv.estimate == pytest.approx(rho) and iv.n_seeds == 2 and iv.n_inputs == 48
    assert -1 <= iv.low <= iv.high <= 1
    assert diagnosis_verdict(Interval(0.6, 0.2, 0.8, 1, 120)) == "replicates"
    assert diagnosis_verdict(Interval(0.3, 0.1, 0.5, 1, 120)) == "partly"
    assert diagnosis_verdict(Interval(0.3, -0.1, 0.6, 1, 120)) == "inconclusive"
    assert diagnosis_verdict(Interval(-0.4, -0.6, -0.1, 1, 120)) == "does not replicate"


# ---- notebook 06's by-hand cell: its check passes on the reference and fails on wrong functions ----

def _reference(model, prompt, layer, n_classes):
    from helpers.experiments.diagnosis import key_projections

    lids = label_token_ids(model.tokenizer, "sst2")[:n_classes]
    return key_projections(collect_qk(model, [prompt], lids, layers=[layer]), layer, model.cfg.n_heads)[0]


def _by_hand(model, prompt, layer, n_classes, key_shift=0, q_shift=0, k_hook="hook_k", reduce="mean", tile=False,
             scale=False):
    from einops import einsum

    names = [f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.{k_hook}"]
    _, cache = model.run_with_cache(prompt.tokens[None], names_filter=names)
    q, k = cache[names[0]][0, prompt.q + q_shift], cache[names[1]][0]
    g = model.cfg.n_heads // k.shape[1]
    k = k.repeat(1, g, 1) if tile else k.repeat_interleave(g, dim=1)
    pos, cls = torch.tensor(prompt.label_pos) + key_shift, torch.tensor(prompt.label_class)
    keys = torch.stack([getattr(k[pos[cls == c]], reduce)(0) for c in range(n_classes)])
    out = einsum(q, keys, "head d, classes head d -> head classes")
    return out / model.cfg.d_head ** 0.5 if scale else out


def test_check_anchor_key_projections_passes(capsys):
    from helpers.exercises.diagnosis import check_anchor_key_projections

    check_anchor_key_projections(_reference)
    check_anchor_key_projections(_by_hand)  # the tiny models have no q/k norm
    assert capsys.readouterr().out.count("✓") == 2


@pytest.mark.parametrize("wrong, says", [
    (dict(key_shift=1), "tokens after the label words"),
    (dict(q_shift=-1), "one position early"),
    (dict(reduce="sum"), "summed over their demonstrations"),
    (dict(scale=True), "scaled by 1/sqrt"),
])
def test_check_anchor_key_projections_names_each_mistake(wrong, says):
    from helpers.exercises.diagnosis import check_anchor_key_projections
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match=says):
        check_anchor_key_projections(lambda m, p, l, n: _by_hand(m, p, l, n, **wrong))


def test_check_anchor_key_projections_names_tiled_heads():
    """Only the grouped-query model has key heads to repeat: tiling them instead is named there."""
    from helpers.exercises.diagnosis import check_anchor_key_projections
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match="tiny gqa model.*tiled"):
        check_anchor_key_projections(lambda m, p, l, n: _by_hand(m, p, l, n, tile=True))


def test_check_query_and_keys_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.diagnosis import check_query_and_keys
    from helpers.exercises.grading import CheckFailed

    def qk(model, prompt, layer, q_hook="hook_q", k_hook="hook_k", q_shift=0, tile=False, repeat=True):
        names = [f"blocks.{layer}.attn.{q_hook}", f"blocks.{layer}.attn.{k_hook}"]
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=names)
        q, k = cache[names[0]][0, prompt.q + q_shift], cache[names[1]][0]
        g = model.cfg.n_heads // k.shape[1]
        if repeat:
            k = k.repeat(1, g, 1) if tile else k.repeat_interleave(g, dim=1)
        return q, k

    check_query_and_keys(qk)
    assert "✓ qk matches" in capsys.readouterr().out
    for kw, says in ((dict(q_shift=-1), "one position early"), (dict(tile=True), "tiled"),
                     (dict(repeat=False), "Repeat each of the")):
        with pytest.raises(CheckFailed, match=says):
            check_query_and_keys(lambda m, p, l, kw=kw: qk(m, p, l, **kw))


def _rot_when_possible(m, p, l):
    rot = m.cfg.positional_embedding_type == "rotary"
    names = [f"blocks.{l}.attn.hook_{'rot_' if rot else ''}q", f"blocks.{l}.attn.hook_{'rot_' if rot else ''}k"]
    _, cache = m.run_with_cache(p.tokens[None], names_filter=names)
    k = cache[names[1]][0]
    return cache[names[0]][0, p.q], k.repeat_interleave(m.cfg.n_heads // k.shape[1], dim=1)


def test_check_query_and_keys_names_rotated_vectors():
    from helpers.exercises.diagnosis import check_query_and_keys
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match="tiny rotary model.*after rotary"):
        check_query_and_keys(_rot_when_possible)


def test_check_fails_on_a_missing_head_split():
    """Wrong: one number per class (heads summed) instead of one per head and class: the shape is refused."""
    from helpers.exercises.diagnosis import check_anchor_key_projections

    with pytest.raises(AssertionError, match=r"expected shape"):
        check_anchor_key_projections(lambda m, p, l, n: _by_hand(m, p, l, n).sum(0))


def test_rotary_keys_make_the_check_fail(tiny_models):
    from helpers.exercises.diagnosis import check_anchor_key_projections

    calls = []

    def rotated_when_possible(m, p, l, n):
        calls.append(m.cfg.positional_embedding_type)
        return _by_hand(m, p, l, n, k_hook="hook_rot_k" if m.cfg.positional_embedding_type == "rotary" else "hook_k")

    with pytest.raises(AssertionError, match="tiny rotary model.*after rotary"):
        check_anchor_key_projections(rotated_when_possible)


def test_full_pca_distance_is_the_per_input_gap_summed_in_squares():
    """predicted_confusion with every component == normalised sqrt(sum_i ((q_i - mean q) . (k_a - k_b))^2)."""
    from helpers.experiments.diagnosis import key_distances

    rng = np.random.default_rng(0)
    Q, K = rng.normal(size=(40, 12)), rng.normal(size=(4, 12))
    D = predicted_confusion(Q, K, n_components=12)
    proj = torch.tensor((Q - Q.mean(0)) @ K.T)[:, None, :]  # [n, 1 head, classes]
    gaps = key_distances(proj).numpy()  # [n, classes, classes]
    R = np.sqrt((gaps ** 2).sum(0))
    R = R / R[~np.eye(4, dtype=bool)].max()
    np.fill_diagonal(R, 1.0)
    np.testing.assert_allclose(D, R, atol=1e-9)


def test_diagnosis_claims():
    from helpers.experiments.diagnosis import most_confused
    from helpers.protocols.diagnosis import diagnosis_claims
    from helpers.study.stats import Interval

    names = ["a", "b", "c"]
    pred = np.array([[1, 0.2, 0.9], [0.2, 1, 0.5], [0.9, 0.5, 1]])
    act = np.array([[1, 0.7, 0.6], [0.7, 1, np.nan], [0.6, np.nan, 1]])
    assert most_confused(pred, names) == "a–b" and most_confused(act, names) == "a–c"
    (c,) = diagnosis_claims(Interval(0.46, 0.22, 0.69, 1, 120), pred, act, names, 12, 18, context="x")
    assert c.verdict == "partly" and "actual: a–c; predicted: a–b" in c.note and "Description–Entity" in c.paper


def test_predicted_confusion_is_the_exact_pca_and_deterministic():
    """The queries' PCA is exact (LAPACK), not sklearn's randomized solver that "auto" picks for ~100 x 1000
    matrices: on queries with a flat spectrum the randomized top components differ from the true ones."""
    from helpers.experiments.diagnosis import predicted_confusion

    rng = np.random.default_rng(3)
    X, K = rng.normal(size=(120, 1024)), rng.normal(size=(6, 1024))
    mean = X.mean(0)
    _, S, Vt = np.linalg.svd(X - mean, full_matrices=False)
    Z = (K - mean) @ Vt[:10].T * S[:10]
    D = np.linalg.norm(Z[:, None] - Z[None], axis=-1)
    D = D / D[~np.eye(6, dtype=bool)].max()
    np.fill_diagonal(D, 1.0)
    got = predicted_confusion(torch.tensor(X), torch.tensor(K), 10)
    np.testing.assert_allclose(got, D, rtol=1e-9, atol=1e-12)
    assert np.array_equal(got, predicted_confusion(torch.tensor(X), torch.tensor(K), 10))
