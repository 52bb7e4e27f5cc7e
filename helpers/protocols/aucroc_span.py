"""§2.3's AUCROC_l with a label word's first token or every token of it as the anchor (notebook 10).

Paper A's code reads a multi-token label word at its first token (lancopku/label-words-are-anchors, issue #18),
and so do notebooks 01-05. If the later tokens of the word also hold what q reads, the attention from q to the
whole word should predict the output better than the attention to its first token. On a task whose label words
all span several tokens (:data:`helpers.study.profiles.SPAN_TASK`), :func:`span_aucroc_runs` reads, on the same
prompts and in the same kind of pass, the attention from q to each class's first tokens and to all of its tokens
(:func:`helpers.experiments.aucroc.label_attention` with ``span``); :func:`span_aucroc_interval` is the 95%
interval of the mean over the deep layers (the last half) of ``AUCROC_l(all) - AUCROC_l(first)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from helpers.core.store import pins_weights
from helpers.experiments.aucroc import aucroc_per_layer, label_attention
from helpers.study.claims import claim
from helpers.study.profiles import SPAN_TASK, LabelSpanSizes, label_span_runs
from helpers.study.stats import Interval, bootstrap_statistic

__all__ = ["span_aucroc_curves", "span_aucroc_runs", "span_aucroc_interval", "span_aucroc_claim"]


def span_aucroc_curves(runs: dict[int, dict]) -> pd.DataFrame:
    """Columns layer, span, seed, AUCROC: ``AUCROC_l`` per layer for each anchor and seed (NaN where a seed's
    inputs are all predicted as one class)."""
    rows = []
    for seed, r in runs.items():
        for span in ("first", "all"):
            for layer, auc in enumerate(aucroc_per_layer(r[span], r["pred"])):
                rows.append({"layer": layer, "span": span, "seed": seed, "AUCROC": float(auc)})
    return pd.DataFrame(rows)


@pins_weights
def span_aucroc_runs(model, sizes: LabelSpanSizes) -> dict[int, dict]:
    """``{seed: {"first": [n, layer, class], "all": [n, layer, class], "pred": [n]}}``: the attention from q to
    each class's label positions (first tokens; all tokens) and the predicted class, on ``sizes.n`` inputs of one
    demonstration set per seed of ``sizes.task``, stored on disk."""
    def run(s):
        first, pred = label_attention(model, s.prompts, s.label_ids, sizes.batch_size, span="first")
        every, _ = label_attention(model, s.prompts, s.label_ids, sizes.batch_size, top_k=0, span="all")  # label columns only
        return {"first": first, "all": every, "pred": pred.pred}

    return label_span_runs("span_aucroc", model, sizes, run)


def span_aucroc_interval(runs: dict[int, dict], n_boot: int = 1000) -> Interval | None:
    """95% interval (seeds, then inputs) of the mean over the deep layers (the last half) of ``AUCROC_l`` with all
    of a label word's tokens minus with its first token; None when the inputs' predictions leave AUCROC undefined
    too often (one predicted class)."""
    def stat(sample):
        idx = [(s, torch.as_tensor(np.asarray(i))) for s, i in sample]
        pred = torch.cat([runs[s]["pred"][i] for s, i in idx])
        auc = {span: aucroc_per_layer(torch.cat([runs[s][span][i] for s, i in idx]), pred) for span in ("first", "all")}
        deep = len(auc["all"]) // 2
        return float(np.mean((auc["all"] - auc["first"])[deep:]))

    try:
        return bootstrap_statistic({s: len(r["pred"]) for s, r in runs.items()}, stat, n_boot=n_boot)
    except ValueError:
        return None


def span_aucroc_claim(iv: Interval | None, context: str = ""):
    """``10.span_aucroc``: the interval above 0 "replicates" (the whole word predicts the output better), below 0
    "does not replicate", containing 0 "inconclusive"; no interval: "inconclusive", with the reason."""
    criterion = ("95% interval of the mean over the deep layers (last half) of AUCROC_l with all of the label word's "
                 "tokens minus with its first token, above 0")
    if iv is None:
        return claim("10.span_aucroc", None, "inconclusive", criterion, context=context, tasks=(SPAN_TASK,),
                     missing="no AUCROC on these inputs: the model predicted one class for all of them")
    verdict = "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"
    return claim("10.span_aucroc", iv, verdict, criterion, context=context, tasks=(SPAN_TASK,))
