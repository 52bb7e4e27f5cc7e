"""Batched label-restricted prediction."""

from __future__ import annotations

import pytest
import torch

from helpers.core import tasks
from helpers.core.predict import logits_at, predict
from helpers.core.prompts import Demo, build_prompt, pad_batch

REVIEWS = ["good", "a truly awful film that never ends", "fine", "bad bad bad", "what a delight to watch, really", "meh"]


def _prompts(model):
    demos = [Demo("great acting", 1), Demo("boring plot", 0)]
    return [build_prompt(model, "sst2", demos, Demo(r, i % 2)) for i, r in enumerate(REVIEWS)]


def test_logits_at_equals_full_forward(tiny_model):
    ps = _prompts(tiny_model)
    tokens, q = pad_batch(ps)
    with torch.inference_mode():
        full = tiny_model(tokens)
        at = logits_at(tiny_model, tokens, q)
    assert torch.allclose(at, full[torch.arange(len(ps)), q], atol=1e-5)


def test_batched_equals_one_by_one(tiny_model):
    ps = _prompts(tiny_model)
    lids = tasks.label_token_ids(tiny_model.tokenizer, "sst2")
    batched = predict(tiny_model, ps, lids, batch_size=4, top_k=5)
    for i, p in enumerate(ps):
        one = predict(tiny_model, [p], lids, batch_size=1, top_k=5)
        assert torch.allclose(one.label_logits[0], batched.label_logits[i], atol=1e-5)
        assert one.topk[0].tolist() == batched.topk[i].tolist()
    with torch.inference_mode():
        direct = tiny_model(ps[1].tokens[None])[0, -1]
    assert torch.allclose(batched.label_logits[1], direct[lids], atol=1e-5)
    assert batched.gold.tolist() == [i % 2 for i in range(len(ps))]


def test_accuracy_hand_case():
    from helpers.core.predict import Predictions

    p = Predictions(torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]), torch.zeros(3, 5, dtype=torch.long),
                    torch.tensor([0, 0, 0]))
    assert p.pred.tolist() == [0, 1, 0] and p.accuracy == pytest.approx(2 / 3)
    assert torch.allclose(p.label_probs.sum(-1), torch.ones(3))


def test_hooks_are_per_batch_and_removed(tiny_model):
    ps = _prompts(tiny_model)
    lids = tasks.label_token_ids(tiny_model.tokenizer, "sst2")
    plain = predict(tiny_model, ps, lids, batch_size=3)
    seen = []

    def factory(batch, tokens, offset=0):
        seen.append([p.q for p in batch])
        assert tokens.shape[0] == len(batch)
        return [("blocks.0.hook_resid_post", lambda x, hook: x * 0.0)]

    hooked = predict(tiny_model, ps, lids, batch_size=3, hooks=factory)
    assert len(seen) == 2 and sorted(sum(seen, [])) == sorted(p.q for p in ps)
    assert not torch.allclose(hooked.label_logits, plain.label_logits)
    again = predict(tiny_model, ps, lids, batch_size=3)
    assert torch.equal(again.label_logits, plain.label_logits)  # no hook outlived its call


def test_bad_input():
    with pytest.raises(ValueError, match="no prompts"):
        predict(None, [], [1, 2])


@pytest.mark.slow
def test_gemma_batched_equals_one_by_one(gemma):
    from helpers.core.prompts import make_icl_set

    s = make_icl_set(gemma, "trec", seed=42, n_test=6)
    batched = predict(gemma, s.prompts, s.label_ids, batch_size=6)
    for i, p in enumerate(s.prompts[:3]):
        one = predict(gemma, [p], s.label_ids, batch_size=1)
        assert torch.allclose(one.label_logits[0], batched.label_logits[i], atol=1e-3)


def test_length_batches_respect_size_and_token_budget():
    from helpers.core.predict import length_batches

    lens = [50, 400, 60, 900, 420, 55, 1500, 58]
    prompts = [type("P", (), {"__len__": (lambda self, n=n: n)})() for n in lens]
    batches = length_batches(prompts, batch_size=3, max_tokens=1024)
    assert sorted(i for b in batches for i in b) == list(range(len(lens)))  # every prompt once
    for b in batches:
        assert len(b) <= 3
        longest = max(lens[i] for i in b)
        assert len(b) == 1 or longest * len(b) <= 1024  # over-long prompts go alone
        assert lens[b[0]] == longest  # longest first
    assert [lens[b[0]] for b in batches] == sorted((lens[b[0]] for b in batches), reverse=True)
    assert [[lens[i] for i in b] for b in batches] == [[1500], [900], [420, 400], [60, 58, 55], [50]]
    # no token cap: padding is still not worth a batch of [1500, 900, 420]
    assert [[lens[i] for i in b] for b in length_batches(prompts, batch_size=3, max_tokens=0)] == \
        [[1500], [900], [420, 400], [60, 58, 55], [50]]
    # when a forward pass costs more than any padding, the fewest batches win
    assert len(length_batches(prompts, batch_size=3, max_tokens=0, fixed_tokens=10**6)) == 3
    with pytest.raises(ValueError):
        length_batches(prompts, batch_size=0)


def test_length_batches_minimise_padding_plus_forward_cost():
    """Brute force over every split of a sorted list: the dynamic programme finds the cheapest one."""
    import itertools

    from helpers.core.predict import length_batches

    lens = [49, 40, 33, 27, 21, 20, 15, 11, 10, 8]
    prompts = [type("P", (), {"__len__": (lambda self, n=n: n)})() for n in lens]
    F = 32

    def cost(groups):
        return sum(F + g[0] * len(g) for g in groups)

    best = min(cost([lens[a:b] for a, b in zip((0,) + cuts, cuts + (len(lens),))])
               for r in range(len(lens)) for cuts in itertools.combinations(range(1, len(lens)), r)
               if all(b - a <= 4 for a, b in zip((0,) + cuts, cuts + (len(lens),))))
    got = [[lens[i] for i in b] for b in length_batches(prompts, batch_size=4, max_tokens=0, fixed_tokens=F)]
    assert cost(got) == best and max(len(g) for g in got) <= 4


def test_batch_token_budget_reads_the_environment(monkeypatch):
    from helpers.core.predict import batch_token_budget

    monkeypatch.setenv("ICL_BATCH_TOKENS", "256")
    assert batch_token_budget() == 256
    monkeypatch.delenv("ICL_BATCH_TOKENS")
    assert batch_token_budget() == 1024  # without a model: the CPU's (a model's device: tests/test_sizing.py)
