"""Tests of helpers.experiments.head_biases (paper B: majority and recency bias, reduced by re-weighting head
attention) on the tiny models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from heads_common import _assert_same_predictions, _set, _shared_vs_full

from helpers.core.predict import predict
from helpers.experiments.head_biases import (
    BiasResult,
    _bias_from,
    majority_bias,
    recency_bias,
    reduction_pct,
    reweight_hooks,
)
from helpers.protocols import head_biases as HB
from helpers.study import heads_report as HR


def test_reweight_with_ones_is_identity(tiny_model, ut):
    ps = _set(tiny_model, ut, n=3, k=2)
    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    same = predict(tiny_model, ps.prompts, ps.label_ids, 2,
                   hooks=reweight_hooks([(0, 1), (1, 2)], lambda p, head, T: torch.ones(T)))
    assert torch.allclose(plain.label_logits, same.label_logits, atol=1e-5)
    double = predict(tiny_model, ps.prompts, ps.label_ids, 2,
                     hooks=reweight_hooks([(1, 2)], lambda p, head, T: torch.full((T,), 2.0)))
    assert not torch.allclose(plain.label_logits, double.label_logits)


def test_bias_definition_hand_case():
    preds = {0: torch.tensor([0, 0, 1, 1]), 1: torch.tensor([1, 1, 1, 0])}
    assert _bias_from(preds) == pytest.approx(0.125)
    r = BiasResult("majority", 0.2, 0.15, 0.7, 0.7, {})
    assert r.reduction_pct == pytest.approx(25.0)
    assert reduction_pct(0.1, -0.1) == pytest.approx(0.0)  # overshoot is not a reduction
    assert np.isnan(BiasResult("recency", 0.0, 0.1, 0, 0, {}).reduction_pct)


def test_bias_runs_on_tiny(ut):
    from helpers.exercises.tiny import make_tiny_model

    tiny_model = make_tiny_model("gqa", seed=0)
    heads = [(1, 0), (2, 1)]
    maj = majority_bias(tiny_model, ut, heads, seed=1, n_test=3, batch_size=4)
    rec = recency_bias(tiny_model, ut, heads, seed=1, n_test=3, batch_size=4)
    for r in (maj, rec):
        assert -0.5 <= r.bias_before <= 0.5 and -0.5 <= r.bias_after <= 0.5
        assert set(r.per_direction["pred_before"]) == {0, 1}
    w = rec.per_direction["slot_weights"]
    assert w.shape == (2, 4)
    # re-weighting divides out the slot profile: profile * weights is flat per head
    flat = rec.per_direction["slot_profile"] * w
    assert torch.allclose(flat, flat.mean(-1, keepdim=True).expand_as(flat), atol=1e-5)


# ------------------------------------------------------------------ intervals


def _bias_result(before, after):
    before = {c: torch.tensor(p) for c, p in before.items()}
    after = {c: torch.tensor(p) for c, p in after.items()}
    return BiasResult("majority", _bias_from(before), _bias_from(after), 0.5, 0.5,
                        {"pred_before": before, "pred_after": after})


def test_bias_cells_and_intervals_hand_case():
    runs = {("sst2", s, "majority"): _bias_result({0: [0, 0, 0, 1], 1: [1, 1, 1, 0]}, {0: [0, 1, 0, 1], 1: [1, 1, 0, 0]})
            for s in (1, 2)}
    cells = HB.bias_cells(runs, "majority", "before")
    assert cells[("sst2", 1)].tolist() == [0.5, 0.5, 0.5, -0.5]
    assert cells[("sst2", 1)].mean() == pytest.approx(runs[("sst2", 1, "majority")].bias_before)
    iv = HB.bias_intervals(runs, "majority")
    r = runs[("sst2", 1, "majority")]
    assert iv["before"].estimate == pytest.approx(r.bias_before)
    assert iv["after"].estimate == pytest.approx(r.bias_after)
    assert iv["reduction"].estimate == pytest.approx(r.reduction_pct)
    with pytest.raises(ValueError, match="no 'recency'"):
        HB.bias_cells(runs, "recency", "before")
    with pytest.raises(ValueError, match="stage"):
        HB.bias_cells(runs, "majority", "during")
    # no bias at all: the reduction is undefined, not a number
    flat = {("sst2", 1, "majority"): _bias_result({0: [0, 1], 1: [1, 0]}, {0: [0, 1], 1: [1, 0]})}
    assert HB.bias_intervals(flat, "majority")["reduction"] is None


def test_bias_interval_part():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    assert HB.bias_interval_part(iv(-0.02, 0.1), iv(20, 40)) == "no measurable bias"
    assert HB.bias_interval_part(iv(0.1, 0.2), None) == "no measurable bias"
    assert HB.bias_interval_part(iv(0.1, 0.2), iv(12, 40)) == "replicates"
    assert HB.bias_interval_part(iv(0.1, 0.2), iv(2, 40)) == "partly"
    assert HB.bias_interval_part(iv(0.1, 0.2), iv(-5, 40)) == "inconclusive"
    assert HB.bias_interval_part(iv(0.1, 0.2), iv(-30, -2)) == "does not replicate"
    _, parts = HR.heads_verdict(0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 50, 0.2, 50, 0.2, majority="inconclusive",
                         two_towers="partly", ablation_all="replicates")
    assert parts["majority"] == "inconclusive" and parts["two_towers"] == "partly"
    assert parts["recency"] == "replicates" and parts["ablation_all"] == "replicates"


# ------------------------------------------------------------------ shared demonstrations == full prompts


def test_shared_reweighting_equals_full_prompts(tiny_model, ut):
    ps = _set(tiny_model, ut, n=4, k=2)
    heads = [(0, 1), (1, 2), (tiny_model.cfg.n_layers - 1, 3)]

    def majority(p, head, T):  # the majority reduction's weights: the class-1 label positions x 3
        w = torch.ones(T)
        w[[pos for pos, c in zip(p.label_pos, p.label_class) if c == 1]] = 3.0
        return w

    slot = torch.tensor([0.5, 1.5, 0.8, 2.0])

    def recency(p, head, T):  # the recency reduction's weights: one factor per label slot
        w = torch.ones(T)
        w[p.label_pos] = slot * (1 + head[1])
        return w

    plain = predict(tiny_model, ps.prompts, ps.label_ids, 2)
    for w_of in (majority, recency):
        full, shared = _shared_vs_full(tiny_model, ps, reweight_hooks(heads, w_of))
        _assert_same_predictions(full, shared)
        assert not torch.allclose(full.label_logits, plain.label_logits, atol=1e-3)


def test_shared_bias_functions_equal_full_prompts(tiny_model, ut):
    heads = [(1, 0), (2, 1)]
    for fn in (majority_bias, recency_bias):
        a = fn(tiny_model, ut, heads, seed=1, n_test=3, batch_size=2)
        b = fn(tiny_model, ut, heads, seed=1, n_test=3, batch_size=2, shared=False)
        assert (a.bias_before, a.bias_after, a.acc_before, a.acc_after) == (b.bias_before, b.bias_after, b.acc_before, b.acc_after)
        for key in ("pred_before", "pred_after"):
            assert all(torch.equal(a.per_direction[key][c], b.per_direction[key][c]) for c in (0, 1))
    for key in ("slot_profile", "slot_weights"):
        assert torch.allclose(a.per_direction[key], b.per_direction[key], rtol=1e-4, atol=1e-5)


def test_head_biases_claims():
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    ivs = {"majority": {"before": iv(0.1, 0.3), "after": iv(0.0, 0.1), "reduction": iv(20, 90)},
           "recency": {"before": iv(0.0, 0.05), "after": iv(-0.05, 0.0), "reduction": None}}
    maj, rec = HB.head_biases_claims(ivs)
    assert (maj.key, maj.verdict, maj.unit, maj.extra["part"]) == ("07.majority_reduction", "replicates", "%", "replicates")
    assert (rec.key, rec.verdict, rec.ours) == ("07.recency_reduction", "inconclusive", None)
    assert rec.extra["part"] == "no measurable bias" and "nothing to reduce" in rec.note
    assert "22%" in maj.paper and "17%" in rec.paper
