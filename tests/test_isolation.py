"""Isolation (§2.2): identity, one-hot label rows, unchanged other rows, the random control."""

from __future__ import annotations

import pytest
import torch

from helpers.isolation import (block_rows, isolation_experiment, label_isolation, layer_range, loyalty_rows,
                               random_positions, run_isolation)
from helpers.predict import predict
from helpers.prompts import pad_batch


def test_no_layers_is_identity(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    plain = predict(model, prompts, lids, batch_size=4)
    none = predict(model, prompts, lids, batch_size=4, hooks=label_isolation([]))
    torch.testing.assert_close(none.label_logits, plain.label_logits, atol=0, rtol=0)
    iso = run_isolation(model, prompts, lids, "label", "first", 0)
    torch.testing.assert_close(iso.label_logits, plain.label_logits, atol=1e-6, rtol=1e-5)
    changed = run_isolation(model, prompts, lids, "label", "first", 1)
    assert not torch.allclose(changed.label_logits, plain.label_logits)


def _patterns(model, tokens, layer, hooks=()):
    store = {}

    def grab(pattern, hook):
        store["p"] = pattern.detach().clone()

    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks) + [(f"blocks.{layer}.attn.hook_pattern", grab)]):
        model(tokens, stop_at_layer=layer + 1)
    return store["p"]


@pytest.mark.parametrize("layer", [0, 1])
def test_label_rows_one_hot_other_rows_unchanged(tiny_sst2_set, layer):
    model, prompts, lids = tiny_sst2_set
    tokens, _ = pad_batch(prompts, model.tokenizer.pad_token_id)
    hooks = label_isolation([layer])(prompts, tokens)
    before = _patterns(model, tokens, layer)
    after = _patterns(model, tokens, layer, hooks)
    for b, p in enumerate(prompts):
        rows = torch.zeros(tokens.shape[1], dtype=torch.bool)
        rows[p.label_pos] = True
        for r in p.label_pos:
            want = torch.zeros(model.cfg.n_heads, tokens.shape[1])
            want[:, r] = 1.0
            torch.testing.assert_close(after[b, :, r], want)
        torch.testing.assert_close(after[b][:, ~rows], before[b][:, ~rows], atol=0, rtol=0)


def test_block_rows_hand_case():
    scores = torch.zeros(1, 2, 4, 4).masked_fill(torch.triu(torch.ones(4, 4, dtype=torch.bool), 1), float("-inf"))
    rows = torch.tensor([[False, False, True, False]])
    out = block_rows(scores, rows).softmax(-1)
    torch.testing.assert_close(out[0, :, 2], torch.tensor([[0.0, 0, 1, 0]] * 2))
    torch.testing.assert_close(out[0, :, 3], torch.full((2, 4), 0.25))
    torch.testing.assert_close(out[0, :, 1], torch.tensor([[0.5, 0.5, 0, 0]] * 2))


def test_random_control(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    for i, p in enumerate(prompts):
        label_tokens = {j for a, b in p.label_spans for j in range(a, b)}
        for seed in range(20):
            pos = random_positions(p, p.n_demos, [seed, i])
            assert len(pos) == len(set(pos)) == p.n_demos
            assert not set(pos) & label_tokens and p.q not in pos and 0 not in pos
        assert random_positions(p, 2, [7, i]) == random_positions(p, 2, [7, i])
    assert len({tuple(random_positions(prompts[0], 2, s)) for s in range(10)}) > 1
    # reproducible and independent of batching
    a = run_isolation(model, prompts, lids, "random", "first", 2, seed=3, batch_size=4)
    b = run_isolation(model, prompts, lids, "random", "first", 2, seed=3, batch_size=1)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError):
        random_positions(prompts[0], 10_000, 0)


def test_batched_equals_one_by_one(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    a = run_isolation(model, prompts, lids, "label", "last", 2, batch_size=4)
    b = run_isolation(model, prompts, lids, "label", "last", 2, batch_size=1)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-4)
    assert torch.equal(a.topk, b.topk)


def test_experiment_rows(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    runs = isolation_experiment(model, prompts, lids, ks=(1,), seed=0, batch_size=4)
    rows = loyalty_rows(runs)
    assert {(r["condition"], r["where"], r["k"]) for r in rows} == {
        ("label", "first", 1), ("label", "last", 1), ("random", "first", 1), ("random", "last", 1)}
    assert all(0 <= r["label_loyalty"] <= 1 and 0 <= r["word_loyalty"] <= 1 for r in rows)
    assert layer_range(model, "last", 2) == [model.cfg.n_layers - 2, model.cfg.n_layers - 1]
    with pytest.raises(ValueError):
        layer_range(model, "middle", 1)
