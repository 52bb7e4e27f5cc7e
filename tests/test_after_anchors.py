"""The methods of the accounts after the anchors: flipped labels (arXiv 2511.21038) and the two stages of the query
(arXiv 2505.18752), on tiny random models of the three architectures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import predict
from helpers.experiments.flipped_labels import (
    agreements,
    flip_permutation,
    flipped_demos,
    flipped_icl_set,
    zero_shot_prompts,
)
from helpers.experiments.query_stages import label_readout, previous_token_scores, probe_correct, query_states

# ------------------------------------------------------------------ flipped labels


def test_flip_permutation_moves_every_class():
    assert flip_permutation(2) == (1, 0)
    assert flip_permutation(4) == (1, 2, 3, 0)
    for n in range(2, 8):
        p = flip_permutation(n)
        assert sorted(p) == list(range(n)) and all(p[c] != c for c in range(n))
    for bad in (1, 0, -2, 2.5):
        with pytest.raises((ValueError, TypeError)):
            flip_permutation(bad)


def test_flipped_demos_refuse_what_is_not_a_permutation():
    from helpers.core.prompts import Demo

    demos = [Demo("a", 0), Demo("b", 1)]
    assert [d.label for d in flipped_demos(demos, (1, 0))] == [1, 0]
    assert [d.text for d in flipped_demos(demos, (1, 0))] == ["a", "b"]
    with pytest.raises(ValueError, match="permutation"):
        flipped_demos(demos, (0, 0))
    with pytest.raises(ValueError, match="outside"):
        flipped_demos([Demo("c", 2)], (1, 0))


@pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")  # TREC's words are several tokens
@pytest.mark.parametrize("task", ["sst2", "trec"])
def test_flipped_prompts_keep_their_positions(tiny_model, task):
    """Same queries and texts in the same places; each demonstration's label span holds its flipped word; with
    one-token label words every position is the natural prompt's and only the label tokens differ."""
    from helpers.core.tasks import get_task, label_token_ids

    natural, flipped = flipped_icl_set(tiny_model, task, seed=42, n_test=4)
    t = get_task(task)
    perm = flip_permutation(t.n_classes)
    tok = tiny_model.tokenizer
    assert [p.query for p in natural.prompts] == [p.query for p in flipped.prompts] == natural.test == flipped.test
    assert flipped.label_ids == natural.label_ids == label_token_ids(tok, t)
    assert [d.text for d in flipped.demos] == [d.text for d in natural.demos]
    assert [d.label for d in flipped.demos] == [perm[d.label] for d in natural.demos]
    one_token = all(len(tok(" " + w)["input_ids"]) == 1 for w in t.label_words)
    for a, b in zip(natural.prompts, flipped.prompts):
        assert a.gold == b.gold
        for k, d in enumerate(flipped.demos):
            assert int(b.tokens[b.label_pos[k]]) == flipped.label_ids[d.label]
            assert tok.decode(b.tokens[slice(*b.label_spans[k])].tolist()).strip() == t.label_words[d.label]
            assert tok.decode(b.tokens[slice(*b.text_spans[k])].tolist()).strip() == d.text
        assert tok.decode(b.tokens[slice(*b.query_span)].tolist()).strip() == b.query.text
        if one_token:
            for f in ("label_pos", "label_spans", "format_pos", "text_spans", "query_span", "q", "anchor_pos"):
                assert getattr(a, f) == getattr(b, f), f
            differ = (a.tokens != b.tokens).nonzero().flatten().tolist()
            assert set(differ) <= set(a.label_pos)


def test_zero_shot_prompts_are_the_queries_alone(tiny_model):
    natural, _ = flipped_icl_set(tiny_model, "sst2", seed=42, n_test=3)
    zs = zero_shot_prompts(tiny_model, natural)
    assert [p.query for p in zs] == natural.test and all(p.n_demos == 0 for p in zs)
    assert all(a.text.endswith(b.text.lstrip(tiny_model.tokenizer.bos_token or "")) for a, b in zip(natural.prompts, zs))


def test_agreements_by_hand():
    # gold 0 1 2 0, perm c -> c + 1: the context's mapping says 1 2 0 1
    out = agreements(torch.tensor([0, 2, 0, 2]), [0, 1, 2, 0], (1, 2, 0), prior=[0, 1, 0, 2])
    assert out["truth"].tolist() == [1, 0, 0, 0]
    assert out["prompt"].tolist() == [0, 1, 1, 0]
    assert out["prior"].tolist() == [1, 0, 1, 1]
    assert set(agreements([1], [0], (1, 0))) == {"truth", "prompt"}
    with pytest.raises(ValueError, match="one length"):
        agreements([0, 1], [0], (1, 0))


def test_the_identity_permutation_is_the_natural_set_and_two_swaps_undo_each_other(tiny_model):
    natural, flipped = flipped_icl_set(tiny_model, "sst2", seed=42, n_test=4)
    assert flipped_demos(flipped.demos, (1, 0)) == natural.demos
    with pytest.raises(ValueError, match="not flipped"):  # a 'flipped' set equal to the natural one is refused...
        flipped_icl_set(tiny_model, "sst2", seed=42, n_test=4, perm=(0, 1))
    _, same = flipped_icl_set(tiny_model, "sst2", seed=42, n_test=4, perm=(0, 1), allow_fixed=True)  # ...unless asked
    assert [p.tokens.tolist() for p in same.prompts] == [p.tokens.tolist() for p in natural.prompts]
    base = predict(tiny_model, natural.prompts, natural.label_ids, batch_size=4)
    torch.testing.assert_close(predict(tiny_model, same.prompts, same.label_ids, batch_size=4).label_logits,
                               base.label_logits, atol=0, rtol=0)
    with pytest.raises(ValueError, match="classes"):
        flipped_icl_set(tiny_model, "sst2", seed=42, n_test=4, perm=(1, 2, 0))


# ------------------------------------------------------------------ two stages of the query


def test_query_states_end_with_the_final_residual_and_batching_changes_nothing(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    states = query_states(model, prompts, batch_size=4)
    assert states.shape == (len(prompts), model.cfg.n_layers + 1, model.cfg.d_model)
    one = torch.cat([query_states(model, [p], batch_size=1, shared=False) for p in prompts])
    torch.testing.assert_close(states, one, atol=1e-5, rtol=1e-4)  # shared prefix and batches == one by one
    # the last stage read through the label words is the model's own prediction among them
    pred = predict(model, prompts, lids, batch_size=4).pred
    assert label_readout(model, states, lids)[:, -1].tolist() == pred.tolist()
    # the first stage is the embedding at q (plus its position, for learned positions)
    tok = torch.stack([p.tokens[p.q] for p in prompts])
    emb = model.W_E[tok].float().cpu()
    if model.cfg.positional_embedding_type == "standard":
        emb = emb + model.W_pos[torch.tensor([p.q for p in prompts])].float().cpu()
    torch.testing.assert_close(states[:, 0], emb, atol=1e-5, rtol=1e-4)


def test_probe_finds_what_is_separable_and_not_what_is_not():
    g = torch.Generator().manual_seed(0)
    n, d = 60, 12
    gold = np.repeat([0, 1, 2], n // 3)
    noise = torch.randn(n, 2, d, generator=g)
    means = torch.zeros(3, d)
    means[torch.arange(3), torch.arange(3)] = 6.0
    noise[:, 1] += means[gold]  # stage 1 separable by construction, stage 0 pure noise
    correct = probe_correct(noise, gold, folds=5, seed=0)
    assert correct.shape == (n, 2)
    assert correct[:, 1].mean() == 1.0
    assert correct[:, 0].mean() < 0.6  # chance is 1/3
    with pytest.raises(ValueError, match="at least 5 inputs"):
        probe_correct(noise[:8], gold[:8], folds=5)
    with pytest.raises(ValueError, match="states must be"):
        probe_correct(noise[:, 0], gold)


def test_previous_token_scores_by_hand(tiny_model):
    """Scores lie in [0, 1]; with every query zero (uniform causal attention) position i gives 1 / (i + 1) to the
    token before it, so every head scores the mean of that over the positions."""
    scores = previous_token_scores(tiny_model, length=8, n=4)
    assert scores.shape == (tiny_model.cfg.n_layers, tiny_model.cfg.n_heads)
    assert ((scores >= 0) & (scores <= 1)).all()
    # uniform attention (all queries zero): position i attends 1/(i+1) to i-1
    import copy

    m = copy.deepcopy(tiny_model)
    for b in m.blocks:
        b.attn.W_Q.data.zero_()
        b.attn.b_Q.data.zero_()
    uni = previous_token_scores(m, length=8, n=4)
    toks_len = 16 + (1 if m.cfg.default_prepend_bos else 0)
    want = float(np.mean([1 / (i + 1) for i in range(1, toks_len)]))
    torch.testing.assert_close(uni, torch.full_like(uni, want), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ contextualise, then aggregate


def _trec(model, n=3):
    import warnings

    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, "trec", seed=42, n_test=n)  # six demonstrations, multi-token label words


def _pairs_by_hand(p, links):
    """The knockout's pairs written out by loops, apart from the helper under test."""
    out = set()
    start = 1 if p.bos else 0
    for k in range(1, p.n_demos):
        if links == "all":
            keys = range(start, p.label_spans[k - 1][1])
        else:
            spans = p.label_spans[:k] if links == "label" else p.text_spans[:k]
            keys = [j for a, b in spans for j in range(a, b)]
        out |= {(p.label_pos[k], j) for j in keys}
    return out


def test_earlier_demo_pairs_by_hand(tiny_model):
    from helpers.core.positions import LINKS, earlier_demo_pairs

    p = _trec(tiny_model).prompts[0]
    got = {links: {tuple(ij) for ij in earlier_demo_pairs(p, None, links).nonzero().tolist()} for links in LINKS}
    for links in LINKS:
        assert got[links] == _pairs_by_hand(p, links), links
        assert all(j < i for i, j in got[links])  # only earlier keys: no row loses its diagonal
    assert got["label"] | got["text"] < got["all"]  # the earlier demonstrations' format tokens are in "all" only
    assert not any(i == p.label_pos[0] for i, _ in got["all"])  # the first demonstration has no earlier one
    padded = earlier_demo_pairs(p, len(p) + 5)
    assert padded.shape == (len(p) + 5,) * 2 and not padded[len(p):].any() and not padded[:, len(p):].any()
    with pytest.raises(ValueError, match="links"):
        earlier_demo_pairs(p, None, "labels")


def test_context_knockout_equals_a_masked_forward_by_hand(tiny_model):
    from helpers.experiments.isolation_context import run_context_knockout

    s = _trec(tiny_model)
    layers = [0, 1]
    for links in ("all", "text"):
        want = []
        for p in s.prompts:
            pairs = _pairs_by_hand(p, links)
            rows = torch.tensor([i for i, _ in pairs], dtype=torch.long)
            cols = torch.tensor([j for _, j in pairs], dtype=torch.long)

            def blank(scores, hook, rows=rows, cols=cols):
                scores[:, :, rows, cols] = float("-inf")
                return scores

            with torch.inference_mode():
                logits = tiny_model.run_with_hooks(p.tokens[None], fwd_hooks=[
                    (f"blocks.{l}.attn.hook_attn_scores", blank) for l in layers])
            want.append(logits[0, p.q, s.label_ids].float())
        want = torch.stack(want)
        for shared in (True, False):
            got = run_context_knockout(tiny_model, s.prompts, s.label_ids, layers, links=links, shared=shared)
            torch.testing.assert_close(got.label_logits.float(), want, atol=1e-4, rtol=1e-4)


def test_context_knockout_identity_cases(tiny_sst2_set):
    from helpers.core.edges import run_edge_knockout
    from helpers.core.prompts import Demo, build_prompt
    from helpers.experiments.isolation_context import run_context_knockout

    model, prompts, lids = tiny_sst2_set
    plain = predict(model, prompts, lids, batch_size=4)
    every = list(range(model.cfg.n_layers))
    for shared in (True, False):  # no edge blocked in any layer: the plain prediction
        none = run_edge_knockout(model, prompts, lids, every, lambda p, seq=None: torch.zeros(seq or len(p),
                                 seq or len(p), dtype=torch.bool), shared=shared)
        torch.testing.assert_close(none.label_logits, plain.label_logits, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="empty"):  # no layer would block nothing: refused, not a silent no-op
        run_context_knockout(model, prompts, lids, [])
    one = [build_prompt(model, "sst2", [Demo("a fine film", 1)], Demo(t, 0)) for t in ("dull", "bad")]
    torch.testing.assert_close(run_context_knockout(model, one, lids, [0, 1, 2]).label_logits,
                               predict(model, one, lids, batch_size=2).label_logits, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="layers"):
        run_context_knockout(model, prompts, lids, [model.cfg.n_layers])


def test_context_flows_are_the_saliency_means_over_the_knockout_pairs(tiny_model):
    from helpers.experiments.saliency import saliency_matrices
    from helpers.experiments.saliency_context import CONTEXT_FLOWS, context_flow_scores, context_flows

    s = _trec(tiny_model, n=2)
    flows = context_flows(tiny_model, s.prompts, s.label_ids)
    assert flows.shape == (2, tiny_model.cfg.n_layers, len(CONTEXT_FLOWS))
    mats = saliency_matrices(tiny_model, s.prompts, s.label_ids)
    for b, (p, m) in enumerate(zip(s.prompts, mats)):
        for f, links in enumerate(CONTEXT_FLOWS.values()):
            pairs = sorted(_pairs_by_hand(p, links))
            want = torch.stack([m[:, i, j] for i, j in pairs]).mean(0)
            torch.testing.assert_close(flows[b, :, f], want)
    # a prompt with one demonstration has no earlier one: NaN, never 0
    from helpers.core.prompts import Demo, build_prompt

    one = build_prompt(tiny_model, "sst2", [Demo("a fine film", 1)], Demo("dull", 0))
    sal = torch.ones(1, 2, len(one), len(one))
    assert torch.isnan(context_flow_scores(sal, [one])).all()
