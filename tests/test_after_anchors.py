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
    _, same = flipped_icl_set(tiny_model, "sst2", seed=42, n_test=4, perm=(0, 1))
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
