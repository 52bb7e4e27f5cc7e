"""§2.3 Deep layers: does the attention from q to the label words predict the output?

For every layer l, the attention from q to each class's label positions (summed
over heads and over the positions of the same class) is a score per class.
``AUCROC_l`` scores those against the model's *own* predicted label with
scikit-learn's ``roc_auc_score``, as in the authors' code: classes never
predicted are dropped; with two classes left the score is the raw attention to
the second one's label (binary AUC); with more, the scores are normalised to
sum 1 and averaged one-vs-one.
``R_l = sum_{i<=l}(AUCROC_i - 0.5) / sum_{i<=N}(AUCROC_i - 0.5)``, reported
only when that total is positive (otherwise the ratio has no meaning: NaN).

The attention is read at q only (``hook_pattern`` hooks keep row q, nothing
else is stored) under ``torch.inference_mode``, in the same pass as the
label-restricted prediction. With one demonstration set for all inputs (the
paper's setting) the demonstrations run once (:mod:`helpers.core.prefix`) and each
input as a suffix against them; ``shared=False`` runs full prompts (same
outputs, tests).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from sklearn.metrics import roc_auc_score

from helpers.core.predict import Predictions
from helpers.core.prefix import shared_prefix_or_none
from helpers.core.prefix_runs import label_attention_reader, predict_with_cache, shared_cache, vanilla_run
from helpers.core.prompts import Prompt, check_prompts, label_span_arg
from helpers.core.ranks import rank_auc
from helpers.core.sizing import FORWARD_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["label_attention_reference", "label_attention", "auc_roc", "aucroc_per_layer", "cumulative_r", "crossing_layer", "mean_curves", "raw_mean_curves",
           "seed_curve"]


def label_attention(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH,
                    top_k: int = 5, progress: bool | str = False, shared: bool = True, span: str = "first"
                    ) -> tuple[Float[torch.Tensor, "n layer classes"], Predictions]:
    """Per layer and class, the attention from q to that class's label positions, plus the predictions.

    Summed over heads and over same-class positions; input order kept. The label positions are each label
    word's first token (``span="first"``, paper A's code) or every token of it (``"all"``; notebook 10).

    ``shared`` (default): when the prompts share their demonstrations token for
    token, the demonstrations run once (:func:`helpers.core.prefix.run_prefix`) and
    every input as a suffix against them; the attention row at q then has one
    column per prompt position, as in a full run. Otherwise (``shared=False``,
    or prompts without one common demonstration set) full prompts are run.
    Both paths give the same outputs (tests).
    """
    check_prompts(model, prompts, "read attention for", label_ids)
    label_span_arg(span)
    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None and top_k <= 5 and span == "first":
        return _label_attention_shared(model, prompts, label_ids, batch_size, top_k)
    # full prompts (or, for span="all", the shared demonstrations run once), the attention read by the same hook
    # as the shared path's stored run; label columns only unless top words are asked for
    scores = torch.zeros(len(prompts), model.cfg.n_layers, len(label_ids))
    reader = label_attention_reader(prompts, len(label_ids), model.cfg.n_layers, scores, span)
    cache = shared_cache(model, prompts, shared) if p0 is not None else None
    pred = predict_with_cache(model, prompts, label_ids, batch_size, hooks=reader, cache=cache, top_k=top_k,
                              progress=progress)
    return scores, pred


def _label_attention_shared(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int, top_k: int):
    """:func:`label_attention` with the shared demonstrations run once: read from the unmodified run that
    notebook 00's accuracy also reads (:func:`helpers.core.prefix_runs.vanilla_run`, stored by content), so the
    attention costs no forward pass of its own when that run is stored."""
    run = vanilla_run(model, prompts, label_ids, batch_size)
    pred = run["pred"]
    return run["label_attention"].clone(), Predictions(pred.label_logits, pred.topk[:, :top_k], pred.gold)


def _class_ids(pred, n_classes: int) -> np.ndarray:
    """``pred`` as integer class ids, each in ``0..n_classes - 1`` (a ValueError that says which is not)."""
    y = np.asarray(pred.cpu() if isinstance(pred, torch.Tensor) else pred)
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    if y.dtype.kind not in "iu":
        raise ValueError(f"pred must hold integer class ids (the predicted class of each input), got dtype {y.dtype}")
    bad = (y < 0) | (y >= n_classes)
    if bad.any():
        raise ValueError(f"pred holds class id {int(y[bad].flat[0])}, outside 0..{n_classes - 1} (scores has "
                         f"{n_classes} class columns): pass each input's predicted class, e.g. Predictions.pred")
    return y.astype(np.int64)


def _finite(s: np.ndarray) -> None:
    """Refuse scores with NaN or infinite values (a NaN row would otherwise count as uniform, or make the AUC NaN)."""
    if not np.isfinite(s).all():
        raise ValueError(f"scores hold {int((~np.isfinite(s)).sum())} NaN or infinite values: an AUC of them would "
                         f"be a number of nothing; drop those inputs or fix what produced them")


def auc_roc(scores: Float[np.ndarray, "n classes"], pred: Int[np.ndarray, "n"]) -> float:
    """ROC AUC of per-class scores against predicted labels (nan if fewer than 2 classes were predicted).

    Classes never predicted are dropped. Two classes left: binary AUC of the
    second one's raw score (the authors' binary case, e.g. SST-2). More: the
    scores are renormalised to sum 1 per row and averaged one-vs-one (sklearn
    ``multi_class="ovo"``).
    """
    s = np.asarray(scores, dtype=np.float64)
    y = _class_ids(pred, s.shape[-1] if s.ndim else 0)
    if s.ndim != 2 or y.shape != (s.shape[0],):
        raise ValueError(f"scores must be [n, classes] and pred [n]; got {s.shape} and {y.shape}")
    if s.shape[0] == 0:
        raise ValueError("no inputs to score: AUCROC needs at least one prediction per class it compares")
    _finite(s)
    present = np.unique(y)
    if len(present) < 2:
        return float("nan")
    s = s[:, present]
    y_local = np.searchsorted(present, y)
    if len(present) == 2:
        return float(roc_auc_score(y_local, s[:, 1]))
    tot = s.sum(1, keepdims=True)
    s = np.where(tot > 0, s / np.where(tot > 0, tot, 1.0), 1.0 / len(present))
    return float(roc_auc_score(y_local, s, multi_class="ovo", labels=np.arange(len(present))))


def aucroc_per_layer(scores: Float[torch.Tensor, "n layer classes"], pred) -> Float[np.ndarray, "layer"]:
    """``AUCROC_l`` for every layer: :func:`auc_roc` of each layer's scores, computed for all layers at once
    (rank statistics; equal to ``roc_auc_score`` per layer to float rounding, tested)."""
    s = np.asarray(scores, dtype=np.float64)
    y = _class_ids(pred.pred if hasattr(pred, "pred") else pred, s.shape[-1] if s.ndim else 0)
    if s.ndim != 3 or y.shape != (s.shape[0],):
        raise ValueError(f"scores must be [n, layer, classes] and pred [n]; got {s.shape} and {y.shape}")
    if s.shape[0] == 0:
        raise ValueError("no inputs to score: AUCROC needs at least one prediction per class it compares")
    _finite(s)
    present = np.unique(y)
    if len(present) < 2:
        return np.full(s.shape[1], np.nan)
    s = s[:, :, present]
    y_local = np.searchsorted(present, y)
    if len(present) == 2:
        return rank_auc(y_local == 1, s[:, :, 1])
    tot = s.sum(-1, keepdims=True)
    s = np.where(tot > 0, s / np.where(tot > 0, tot, 1.0), 1.0 / len(present))
    pairs = [(a, b) for a in range(len(present)) for b in range(a + 1, len(present))]
    out = np.zeros(s.shape[1])
    for a, b in pairs:  # sklearn's one-vs-one macro average: each pair scored both ways
        m = (y_local == a) | (y_local == b)
        is_a = y_local[m] == a
        out += (rank_auc(is_a, s[m][:, :, a]) + rank_auc(~is_a, s[m][:, :, b])) / 2
    return out / len(pairs)


def cumulative_r(auc: Float[np.ndarray, "layer"]) -> Float[np.ndarray, "layer"]:
    """``R_l``: cumulative share of sum(AUCROC - 0.5) up to layer l (ends at 1).

    NaN everywhere unless the total is positive: with a total at or below zero
    (attention no better than chance overall) the shares are not fractions
    (they can exceed 1 or run backwards), so there is nothing to report.
    """
    d = np.asarray(auc, dtype=np.float64) - 0.5
    tot = d.sum()
    if not np.isfinite(tot) or tot <= 0:
        return np.full_like(d, np.nan)
    return np.cumsum(d) / tot


def crossing_layer(r: Float[np.ndarray, "layer"], threshold: float = 0.5) -> int | None:
    """First layer (0-based) where ``R_l`` exceeds ``threshold``, or None."""
    hit = np.flatnonzero(np.asarray(r) > threshold)
    return int(hit[0]) if len(hit) else None


def seed_curve(raw: dict, seed, idx: dict | None = None) -> np.ndarray:
    """One seed's ``AUCROC_l`` curve, averaged over tasks (``idx``: ``{task: input indices}``, default all)."""
    curves = []
    for (t, s), res in raw.items():
        if s != seed:
            continue
        i = slice(None) if idx is None else torch.as_tensor(np.asarray(idx[t]), dtype=torch.long)
        curves.append(aucroc_per_layer(res["scores"][i], res["pred"][i]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(curves, axis=0)


def mean_curves(df) -> pd.DataFrame:
    """AUCROC_l averaged over tasks and seeds (nan runs skipped), and R_l recomputed from that mean curve."""
    mean = df.groupby("layer", as_index=False)["auc"].mean()
    mean["r"] = cumulative_r(mean["auc"].to_numpy())
    return mean


def raw_mean_curves(raw: dict) -> pd.DataFrame:
    """:func:`mean_curves` of raw runs (``{(task, seed): {"scores", "pred", ...}}``, as :func:`~helpers.protocols.aucroc.aucroc_runs`'
    ``raw`` or any prompts' :func:`label_attention`): AUCROC_l per layer averaged over runs, R_l from that mean."""
    rows = [{"layer": layer, "auc": a} for res in raw.values()
            for layer, a in enumerate(aucroc_per_layer(res["scores"], res["pred"]))]
    return mean_curves(pd.DataFrame(rows))


# ---- the reference on one prompt (notebook 03's exercise is checked against it) and the claims --------------------


def label_attention_reference(model: HookedTransformer, prompt: Prompt, label_ids: Sequence[int]
                              ) -> Float[torch.Tensor, "layer classes"]:
    """:func:`label_attention` on one prompt (full run): ``A_l(q, class c)`` per layer and class."""
    scores, _ = label_attention(model, [prompt], label_ids, batch_size=1, top_k=0, shared=False)
    return scores[0]
