"""The anchors' specific checks (helpers.experiments.compression_specific): the edge sets by hand, Hidden_anchor as
edges equal to the pruned cache, the text hidden in place equal to a hand-written masked forward, shared prefix ==
whole prompts, identity and relabelled donors, on the three tiny architectures and on the controls."""

from __future__ import annotations

import pytest
import torch
from masked_forward import knockout_set, masked_label_logits

from helpers.core.relabelled import relabelled_prompts, shift
from helpers.experiments.compression import anchor_keep, build_cache, predict_cached, prefix_len
from helpers.experiments.compression_specific import anchor_specificity, dropped, hidden_pairs, in_place_pairs


def test_the_edge_sets_by_hand(tiny_model):
    p = knockout_set(tiny_model).prompts[0]
    p0, drop = prefix_len(p), dropped(p)
    assert drop and set(drop) | set(anchor_keep(p)) == set(range(p0)) and not set(drop) & set(anchor_keep(p))
    assert set(drop) == {i for a, b in p.text_spans for i in range(a, b)}  # the demonstrations' text
    hidden, in_place = hidden_pairs(p, len(p) + 2), in_place_pairs(p)
    want = torch.zeros(len(p) + 2, len(p) + 2, dtype=torch.bool)
    want[p0:, drop] = True
    assert torch.equal(hidden, want)
    assert all(c < r for r, c in in_place.nonzero().tolist())
    assert in_place[p0:].equal(hidden[p0:len(p), :len(p)])  # the input is blocked from the text in both
    assert all(in_place[r, c] == (c in drop and r > c) for r in range(len(p)) for c in range(len(p)))


def test_hidden_anchor_as_edges_equals_the_pruned_cache_and_in_place_a_masked_forward(tiny_model):
    s = knockout_set(tiny_model)
    every = range(tiny_model.cfg.n_layers)
    cache = build_cache(tiny_model, s.prompts[0])
    hidden = predict_cached(tiny_model, cache, s.prompts, s.label_ids, batch_size=2).pred
    in_place = torch.stack([masked_label_logits(tiny_model, p, in_place_pairs(p), every, s.label_ids).argmax()
                            for p in s.prompts])
    # reference = Hidden_anchor's own predictions: the anchor condition is loyal everywhere, in_place where equal
    for shared in (True, False):
        got = anchor_specificity(tiny_model, s.prompts, s.prompts, s.label_ids, hidden, batch_size=2, shared=shared)
        assert got["anchor"].tolist() == [1.0] * 3 and got["relabelled"].tolist() == [1.0] * 3, shared
        assert got["in_place"].tolist() == (in_place == hidden).float().tolist(), shared
        assert got["kept"].tolist() == [0, 1, 2] and got["n"] == 3


def test_relabelled_donors_ask_the_same_input_after_moved_labels(tiny_model):
    s = knockout_set(tiny_model, "sst2", 4)
    perm = shift(len(s.label_ids))
    donors = relabelled_prompts(tiny_model, s, perm)
    assert len(donors) == 4
    for p, d in zip(s.prompts, donors):
        assert d.gold == p.gold and torch.equal(d.tokens[prefix_len(d):], p.tokens[prefix_len(p):])
        assert d.label_class == [perm[c] for c in p.label_class]
    full = torch.zeros(4, dtype=torch.long)
    got = anchor_specificity(tiny_model, s.prompts, donors, s.label_ids, full, batch_size=4)
    every = range(tiny_model.cfg.n_layers)
    want = [float(masked_label_logits(tiny_model, d, hidden_pairs(d), every, s.label_ids).argmax() == 0)
            for d in donors]
    assert got["relabelled"].tolist() == want


def test_inputs_without_a_donor_are_left_out_and_bad_donors_refused(tiny_model):
    s = knockout_set(tiny_model, "sst2", 3)
    full = torch.zeros(3, dtype=torch.long)
    got = anchor_specificity(tiny_model, s.prompts, [None, s.prompts[1], None], s.label_ids, full)
    assert got["kept"].tolist() == [1] and len(got["anchor"]) == 1 and got["n"] == 3
    none = anchor_specificity(tiny_model, s.prompts, [None] * 3, s.label_ids, full)
    assert len(none["anchor"]) == 0 and none["n"] == 3
    with pytest.raises(ValueError, match="another query"):
        anchor_specificity(tiny_model, s.prompts, list(reversed(s.prompts)), s.label_ids, full)
    with pytest.raises(ValueError, match="one entry per input"):
        anchor_specificity(tiny_model, s.prompts, s.prompts[:2], s.label_ids, full)
    with pytest.raises(ValueError, match="permutation"):
        relabelled_prompts(tiny_model, s, [0, 0])


def test_the_controls_read_both_ways_and_the_claims():
    from helpers.core.controls.model import control_prompts, control_spec, load_control
    from helpers.protocols.compression_specific import control_specificity, control_specificity_claims

    cp = control_prompts(control_spec("control-negative").task, 64, 3)
    seen = {}
    for name in ("control-wide", "control-negative"):
        runs = {("control", 3): control_specificity(load_control(name), cp, 3, batch_size=64)}
        claims = control_specificity_claims(runs)
        assert [c.key for c in claims] == ["10.control_anchors_carry_mapping", "10.control_anchors_carry_text"]
        seen[name] = runs[("control", 3)]
    wide, neg = seen["control-wide"], seen["control-negative"]
    # the positive control follows relabelled anchors; the negative one keeps its answer
    assert wide["relabelled"].mean() < 0.2 and neg["relabelled"].mean() > 0.9
    assert wide["in_place"].mean() < wide["anchor"].mean() - 0.3 and neg["in_place"].mean() > 0.9
