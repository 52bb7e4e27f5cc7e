"""The ROC AUC of many score columns at once, from ranks: the metric two of the papers' methods share (notebook 03's
AUCROC_l of the attention to the label words, notebook 06's confusion of two classes), and the statistic their
bootstraps recompute thousands of times."""

from __future__ import annotations

import numpy as np

__all__ = ["rank_auc"]


def rank_auc(positive: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Binary ROC AUC of every column of ``s`` [n, ...] against the boolean ``positive`` [n]: the Mann-Whitney
    statistic with average ranks for ties (what ``sklearn.metrics.roc_auc_score``'s trapezoids compute; tested
    equal), all columns at once and without sklearn's per-call checks (bootstraps call it thousands of times)."""
    from scipy.stats import rankdata  # lazy: scipy takes a second to import

    positive = np.asarray(positive, dtype=bool)
    n1 = int(positive.sum())
    n0 = len(positive) - n1
    r = rankdata(s, axis=0)
    return (r[positive].sum(0) - n1 * (n1 + 1) / 2) / (n1 * n0)
