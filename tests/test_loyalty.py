"""Loyalty: hand-computed label and word loyalty on tensors and Predictions."""

from __future__ import annotations

import pytest
import torch

from helpers.core.loyalty import jaccard_rows, label_loyalty, word_loyalty
from helpers.core.predict import Predictions


def test_label_loyalty_hand():
    assert label_loyalty(torch.tensor([0, 1, 2, 1]), torch.tensor([0, 2, 2, 1])) == 0.75
    logits_a = torch.tensor([[2.0, 1.0], [0.0, 3.0]])
    logits_b = torch.tensor([[0.0, 1.0], [0.0, 3.0]])
    assert label_loyalty(logits_a, logits_b) == 0.5
    assert label_loyalty([1, 1], [1, 1]) == 1.0
    with pytest.raises(ValueError):
        label_loyalty(torch.tensor([0, 1]), torch.tensor([0, 1, 1]))


def test_word_loyalty_hand():
    a = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]])
    b = torch.tensor([[1, 2, 3, 4, 5], [5, 6, 7, 8, 9]])
    torch.testing.assert_close(jaccard_rows(a, b), torch.tensor([1.0, 1 / 9]))
    assert word_loyalty(a, b, k=5) == pytest.approx((1 + 1 / 9) / 2)
    # k=2 uses the first two columns: {1,2} vs {1,2} and {1,2} vs {5,6}
    assert word_loyalty(a, b, k=2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="top_k"):
        word_loyalty(a, b, k=10)


def test_on_predictions():
    pa = Predictions(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[3, 4], [5, 6]]), torch.tensor([0, 1]))
    pb = Predictions(torch.tensor([[1.0, 0.0], [2.0, 1.0]]), torch.tensor([[4, 3], [5, 7]]), torch.tensor([0, 1]))
    assert label_loyalty(pa, pb) == 0.5
    assert word_loyalty(pa, pb, k=2) == pytest.approx((1 + 1 / 3) / 2)
    assert label_loyalty(pa, pa) == 1.0 and word_loyalty(pa, pa, k=None) == 1.0
