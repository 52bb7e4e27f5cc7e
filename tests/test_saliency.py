"""Saliency (§2.1): batched == one-by-one, finite-difference check, hand-computed S_* means."""

from __future__ import annotations

import pytest
import torch

from helpers.predict import logits_at
from helpers.prompts import Prompt
from helpers.saliency import (flow_masks, flow_scores, first_layer_pq_exceeds_wp, relative_flow, saliency_batch,
                              saliency_flow, saliency_matrices, saliency_prompts)


def test_batched_equals_one_by_one(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    assert len({len(p) for p in prompts}) > 1  # real padding happens
    batched = saliency_matrices(model, prompts, lids, batch_size=4)
    for p, m in zip(prompts, batched):
        one = saliency_batch(model, [p], lids)[0]
        assert m.shape == (model.cfg.n_layers, len(p), len(p))
        torch.testing.assert_close(m, one, atol=1e-5, rtol=1e-4)
    flows_b = saliency_flow(model, prompts, lids, batch_size=4)
    flows_1 = saliency_flow(model, prompts, lids, batch_size=1)
    torch.testing.assert_close(flows_b, flows_1, atol=1e-6, rtol=1e-4)


def test_padding_zero_and_no_param_grads(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    sal = saliency_batch(model, prompts, lids)
    for b, p in enumerate(prompts):
        assert sal[b, :, len(p):, :].abs().sum() == 0 and sal[b, :, :, len(p):].abs().sum() == 0
        # causal: nothing above the diagonal
        assert torch.triu(sal[b], diagonal=1).abs().sum() == 0
    assert all(p.grad is None for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())  # restored


def test_last_layer_only_row_q(tiny_sst2_set):
    """In the last layer only row q reaches the loss: every other row of I is 0, so S_wp is 0 and S_pq is not."""
    model, prompts, lids = tiny_sst2_set
    sal = saliency_batch(model, prompts, lids)
    for b, p in enumerate(prompts):
        assert sal[b, -1, : p.q].abs().sum() == 0 and sal[b, -1, p.q].abs().sum() > 0
    flows = saliency_flow(model, prompts, lids)
    assert torch.all(flows[:, -1, 0] == 0) and torch.all(flows[:, -1, 1] > 0)


def _loss(model, prompt, lids, hooks=()):
    logits = logits_at(model, prompt.tokens[None], torch.tensor([prompt.q]), hooks)[:, lids]
    return torch.nn.functional.cross_entropy(logits.double(), torch.tensor([prompt.gold]))


def test_finite_difference(tiny_sst2_set):
    """|sum_h A*dL/dA| at (i, j) equals |dL/d eps| when A[:, :, i, j] is scaled by (1 + eps) in all heads."""
    model, prompts, lids = tiny_sst2_set
    p = prompts[0]
    sal = saliency_batch(model, [p], lids)[0]
    checked = 0
    for layer in range(model.cfg.n_layers):
        # the largest entry of the layer and the q -> p_0 entry
        flat = int(sal[layer].argmax())
        for i, j in [(flat // len(p), flat % len(p)), (p.q, p.label_pos[0])]:
            eps = 1e-2

            def scaled(e):
                def fn(pattern, hook):
                    pattern = pattern.clone()
                    pattern[:, :, i, j] *= 1 + e
                    return pattern
                return [(f"blocks.{layer}.attn.hook_pattern", fn)]

            with torch.no_grad():
                fd = (_loss(model, p, lids, scaled(eps)) - _loss(model, p, lids, scaled(-eps))) / (2 * eps)
            if sal[layer, i, j] > 1e-4:
                assert abs(abs(float(fd)) - float(sal[layer, i, j])) <= 2e-3 * max(1.0, float(sal[layer, i, j])) + 2e-4
                checked += 1
    assert checked >= model.cfg.n_layers


def _fake_prompt(n=6, label_pos=(2, 4)):
    return Prompt(tokens=torch.arange(n), text="", label_pos=list(label_pos), label_class=[0, 1],
                  label_spans=[(a, a + 1) for a in label_pos], format_pos=[], text_spans=[], query_span=(n - 1, n - 1),
                  q=n - 1, bos=False, gold=0)


def test_flow_scores_hand_computed():
    p = _fake_prompt()
    I = torch.arange(36, dtype=torch.float32).reshape(6, 6)  # I[i, j] = 6 i + j
    sal = torch.stack([I, 2 * I])[None]  # [1, 2 layers, 6, 6]
    wp = [(2, 0), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)]
    pq = [(5, 2), (5, 4)]
    ww = [(i, j) for i in range(6) for j in range(i) if (i, j) not in wp + pq]
    mean = lambda pairs: sum(6 * i + j for i, j in pairs) / len(pairs)  # noqa: E731
    want = torch.tensor([mean(wp), mean(pq), mean(ww)])
    got = flow_scores(sal, [p])[0]
    torch.testing.assert_close(got[0], want)
    torch.testing.assert_close(got[1], 2 * want)
    # padding to a longer batch changes nothing
    pad = torch.zeros(1, 2, 9, 9)
    pad[:, :, :6, :6] = sal
    torch.testing.assert_close(flow_scores(pad, [p])[0], got)
    m = flow_masks(p)
    assert m.sum(dim=(1, 2)).tolist() == [6, 2, 7] and not (m[0] & m[2]).any()
    rel = relative_flow(flow_scores(sal, [p]))
    torch.testing.assert_close(rel.sum(-1), torch.ones(2))


def test_first_layer_pq_exceeds_wp():
    rel = torch.tensor([[0.7, 0.1, 0.2], [0.4, 0.5, 0.1], [0.1, 0.8, 0.1]])
    assert first_layer_pq_exceeds_wp(rel) == 1
    assert first_layer_pq_exceeds_wp(rel[:1]) is None


def test_saliency_prompts_fresh_demos_and_reproducible(tiny_model):
    a, lids = saliency_prompts(tiny_model, "sst2", seed=42, n=3)
    b, _ = saliency_prompts(tiny_model, "sst2", seed=42, n=3)
    assert [p.text for p in a] == [p.text for p in b]
    demo_texts = [p.text.rsplit("Review:", 1)[0] for p in a]
    assert len(set(demo_texts)) == 3  # fresh demonstrations per input
    assert all(p.gold is not None for p in a)


@pytest.mark.slow
def test_gemma_batched_equals_one_by_one(gemma):
    prompts, lids = saliency_prompts(gemma, "sst2", seed=42, n=2)
    both = saliency_flow(gemma, prompts, lids, batch_size=2)
    ones = saliency_flow(gemma, prompts, lids, batch_size=1)
    torch.testing.assert_close(both, ones, atol=1e-6, rtol=2e-3)


def test_memory_cap_splits_batches_without_changing_results(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    capped = saliency_flow(model, prompts, lids, batch_size=4, max_pattern_mb=1e-6)  # forces one prompt per batch
    torch.testing.assert_close(capped, saliency_flow(model, prompts, lids, batch_size=4), atol=1e-6, rtol=1e-4)
