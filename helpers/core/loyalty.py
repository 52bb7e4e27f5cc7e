"""Loyalty of a modified run to the unmodified one (§2.2, reused by §3.2).

- Label loyalty: the fraction of inputs whose predicted label is unchanged.
- Word loyalty: the mean Jaccard similarity of the top-k full-vocabulary tokens
  at q (the paper uses k=5; the authors' notebook used 10).

Both return fractions in [0, 1] (multiply by 100 for the paper's %). Both
accept :class:`helpers.core.predict.Predictions` or plain tensors/arrays:
``label_loyalty`` takes predicted labels ``[n]`` or label logits ``[n, C]``
(argmax taken); ``word_loyalty`` takes top-token ids ``[n, k']`` (ordered,
best first; the first ``k`` columns are used).
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float, Int

from helpers.core.predict import Predictions

__all__ = ["label_loyalty", "word_loyalty", "label_loyalty_rows", "word_loyalty_rows", "jaccard_rows", "as_pred",
           "as_topk"]


def as_pred(x) -> Int[torch.Tensor, "n"]:
    """Predicted labels (on the CPU) from Predictions, labels ``[n]`` or logits ``[n, C]``."""
    if isinstance(x, Predictions):
        return x.pred.cpu()
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).cpu()
    if t.ndim == 2:
        return t.argmax(-1)
    if t.ndim == 1:
        return t.long()
    raise ValueError(f"expected predicted labels [n] or logits [n, C], got shape {tuple(t.shape)}")


def as_topk(x, k: int | None = None) -> Int[torch.Tensor, "n k"]:
    """Top-token ids ``[n, k]`` (on the CPU) from Predictions or an id tensor (first k columns)."""
    t = x.topk if isinstance(x, Predictions) else torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    t = t.cpu()
    if t.ndim != 2:
        raise ValueError(f"expected top-k token ids [n, k], got shape {tuple(t.shape)}")
    if k is not None:
        if k > t.shape[1]:
            raise ValueError(f"asked for top-{k} but only {t.shape[1]} ids per row are stored; "
                             f"re-run predict(..., top_k={k})")
        t = t[:, :k]
    return t


def label_loyalty(a, b) -> float:
    """Fraction of inputs whose predicted label is the same in ``a`` and ``b``."""
    pa, pb = as_pred(a), as_pred(b)
    if pa.shape != pb.shape:
        raise ValueError(f"label_loyalty: {tuple(pa.shape)} vs {tuple(pb.shape)} predictions")
    if pa.numel() == 0:
        raise ValueError("label_loyalty: no inputs")
    return float((pa == pb).float().mean())


def jaccard_rows(a: Int[torch.Tensor, "n k"], b: Int[torch.Tensor, "n k"]) -> Float[torch.Tensor, "n"]:
    """Per-row Jaccard similarity |a ∩ b| / |a ∪ b| of two id sets (ids within a row are distinct)."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"jaccard_rows: {a.shape[0]} vs {b.shape[0]} rows")
    inter = (a[:, :, None] == b[:, None, :]).any(-1).sum(-1).float()
    return inter / (a.shape[1] + b.shape[1] - inter)


def word_loyalty(a, b, k: int | None = 5) -> float:
    """Mean Jaccard similarity of the top-``k`` tokens at q (``k=None``: all stored columns)."""
    return float(jaccard_rows(as_topk(a, k), as_topk(b, k)).mean())


def label_loyalty_rows(a, b) -> np.ndarray:
    """Per input, 1.0 if the predicted label is the same in ``a`` and ``b`` (the mean is :func:`label_loyalty`)."""
    pa, pb = as_pred(a), as_pred(b)
    if pa.shape != pb.shape:
        raise ValueError(f"label_loyalty_rows: {tuple(pa.shape)} vs {tuple(pb.shape)} predictions")
    return (pa == pb).float().numpy()


def word_loyalty_rows(a, b, k: int | None = 5) -> np.ndarray:
    """Per input, the Jaccard similarity of the top-``k`` tokens (the mean is :func:`word_loyalty`)."""
    return jaccard_rows(as_topk(a, k), as_topk(b, k)).numpy()
