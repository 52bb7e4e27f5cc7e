"""The protocol of the label words' flows from the earlier demonstrations (notebook 11, arXiv 2504.00132): one
saliency pass gives §2.1's three flows and the two context flows of :mod:`helpers.experiments.saliency_context`
on the same prompts, and the claims, with criteria written before any run. The runs themselves belong to
:func:`helpers.protocols.flipped_labels.flipped_runs`, which computes the flows of the natural and the flipped
prompts together."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from helpers.core.prompts import Prompt
from helpers.core.sizing import HEAVY_BATCH
from helpers.experiments.saliency import FLOWS, flow_scores, layer_ranges, saliency_matrices
from helpers.experiments.saliency_context import CONTEXT_FLOWS, context_flow_scores
from helpers.study.claims import above_zero, claim
from helpers.study.stats import Interval, bootstrap_means

__all__ = ["flows_and_context", "context_flow_intervals", "context_flow_claims"]

CONTEXT_KEYS = {"from_label": "11.label_reads_earlier_labels", "from_text": "11.label_reads_earlier_text"}


def flows_and_context(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = HEAVY_BATCH
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(flows [n, layer, 3], context [n, layer, 2])``: §2.1's ``(S_wp, S_pq, S_ww)`` and the flows of
    :data:`~helpers.experiments.saliency_context.CONTEXT_FLOWS`, per prompt, from one saliency pass."""
    mats = saliency_matrices(model, prompts, label_ids, batch_size=batch_size)
    flows = torch.cat([flow_scores(m[None], [p]) for m, p in zip(mats, prompts)])
    context = torch.cat([context_flow_scores(m[None], [p]) for m, p in zip(mats, prompts)])
    return flows, context


def context_flow_intervals(flows: dict, context: dict) -> dict[str, Interval]:
    """Per context flow, the 95% interval of its excess over S_ww: per input, its mean over the shallow layers (the
    first third) divided by S_ww's over the same layers, minus 1 (both are means per pair; a ratio, since raw
    saliency has no scale of its own). ``flows``, ``context``: ``{(task, seed): [n, layer, 3]}`` and ``{(task,
    seed): [n, layer, 2]}`` on the same inputs. ``S_wp``: the same for §2.1's S_wp (every earlier token into the
    label words), for scale."""
    out = {}
    for j, name in enumerate((*CONTEXT_FLOWS, "S_wp")):
        diffs = {}
        for cell, f in flows.items():
            shallow = layer_ranges(f.shape[1])["shallow"]
            ww = f[:, shallow, FLOWS.index("S_ww")].double().mean(1)
            into = f[:, shallow, FLOWS.index("S_wp")] if name == "S_wp" else context[cell][:, shallow, j]
            diffs[cell] = (into.double().mean(1) / ww - 1).numpy()
            if np.isnan(diffs[cell]).any():
                raise ValueError(f"cell {cell}: a prompt without an earlier demonstration has no context flow")
        out[name] = bootstrap_means(diffs)
    return out


def context_flow_claims(intervals: dict[str, Interval], context: str = "") -> list:
    """``11.label_reads_earlier_labels`` and ``11.label_reads_earlier_text``: the flow per pair into the label
    words from the earlier demonstrations' label words (their texts) over S_ww, minus 1, in the shallow layers
    (the first third): above 0 "replicates", below 0 "does not replicate", containing 0 "inconclusive"."""
    what = {"from_label": "label words", "from_text": "input texts"}
    scale = intervals.get("S_wp")
    note = "" if scale is None else f"for scale, S_wp (every earlier token into the label words) the same way: {scale:.3f}"
    return [claim(CONTEXT_KEYS[name], intervals[name], above_zero(intervals[name]),
                  f"95% interval of the saliency per pair from the earlier demonstrations' {what[name]} into each "
                  "label word over S_ww, minus 1 (means over the shallow layers, the first third), above 0",
                  context=context, note=note)
            for name in CONTEXT_FLOWS]
