"""The causal gathering check (helpers.experiments.label_gathering): its two edge sets by hand, the knockout equal to
a hand-written masked forward on the three tiny architectures, shared prefix == whole prompts, and on a control."""

from __future__ import annotations

import pytest
import torch
from masked_forward import knockout_set, masked_label_logits

from helpers.core.positions import position_classes
from helpers.experiments.label_gathering import content_pairs, gathering, own_text_pairs


def test_own_text_pairs_mark_each_label_against_its_own_text_only(tiny_model):
    p = knockout_set(tiny_model).prompts[0]
    mask = own_text_pairs(p, len(p) + 2)
    assert mask.shape == (len(p) + 2,) * 2
    want = torch.zeros_like(mask)
    for (la, lb), (ta, tb) in zip(p.label_spans, p.text_spans):
        for r in range(la, lb):
            for c in range(ta, tb):
                want[r, c] = True
    assert torch.equal(mask, want) and all(c < r for r, c in mask.nonzero().tolist())


def test_content_pairs_match_the_count_with_earlier_content_edges(tiny_model):
    s = knockout_set(tiny_model)
    p = s.prompts[0]
    base = content_pairs(p, 5)
    content = set(position_classes(p)["content"]) - set(range(*p.query_span))
    assert base.sum() == own_text_pairs(p).sum()
    assert all(c < r and r in content and c in content for r, c in base.nonzero().tolist())
    edges = base.nonzero().tolist()
    assert all(content_pairs(q, 5).nonzero().tolist() == edges for q in s.prompts[1:])  # same demonstrations
    assert not torch.equal(content_pairs(p, 6), base)


def test_gathering_equals_a_hand_written_masked_forward_and_shares_its_prefix(tiny_model):
    s = knockout_set(tiny_model)
    layers = [0, 1]
    gold = torch.tensor([p.gold for p in s.prompts])
    for name, pairs in (("label", own_text_pairs), ("control", lambda p, seq=None: content_pairs(p, 9, seq))):
        want = [int(masked_label_logits(tiny_model, p, pairs(p), layers, s.label_ids).argmax() == p.gold)
                for p in s.prompts]
        for shared in (True, False):
            got = gathering(tiny_model, s.prompts, s.label_ids, layers, 9, batch_size=2, shared=shared)
            assert got[name].tolist() == want, (name, shared)
    assert len(gold) == 3


def test_gathering_on_a_control_and_its_claim():
    from helpers.core.controls.model import control_prompts, control_spec, load_control
    from helpers.protocols.label_gathering import control_gathering_claim

    model = load_control("control-wide")
    cp = control_prompts(control_spec("control-negative").task, 16, 3)
    p = cp.prompts[0]
    assert own_text_pairs(p).sum() == len(p.label_spans)  # one item, one label token per demonstration
    c = control_gathering_claim(model, cp, 3, batch_size=16)
    assert c.key == "10.control_label_gathers_causal" and c.verdict in ("replicates", "inconclusive",
                                                                         "does not replicate")


def test_gathering_refuses_prompts_without_gold(tiny_model):
    from dataclasses import replace

    s = knockout_set(tiny_model)
    with pytest.raises(ValueError, match="gold"):
        gathering(tiny_model, [replace(s.prompts[0], gold=-1)], s.label_ids, [0], 0)
