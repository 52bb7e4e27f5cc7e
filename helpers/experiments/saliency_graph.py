"""One prompt's saliency flows as a graph (paper A's Fig. 1, arXiv 2305.14160 §2.1).

:func:`flow_graph` runs :func:`helpers.experiments.saliency.saliency_matrices` on one prompt and keeps, per layer,
its largest edges I_l(i, j), each with the flow class :func:`helpers.experiments.saliency.flow_masks` puts it in
(text -> label words, label words -> q, or other). :class:`FlowGraph` selects from them (top k per layer, a minimum
share, a layer range); :mod:`helpers.study.plots.flow` draws the selection. The curves of notebook 01 average
these same matrices over inputs; the graph shows one prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float

from helpers.core.checks import ArgumentError
from helpers.core.prompts import Prompt
from helpers.experiments.saliency import FLOWS, flow_masks, saliency_matrices

__all__ = ["FlowGraph", "flow_edges", "flow_graph"]


@dataclasses.dataclass(frozen=True)
class FlowGraph:
    """One prompt's saliency as a token-by-layer graph, the data of paper A's Fig. 1.

    ``edges``: a ``pandas.DataFrame`` with one row per edge ``(i <- j, layer l)``, ``j < i``, whose saliency
    ``weight = I_l(i, j)`` is above zero; columns ``layer, i, j, weight``, ``share`` (the weight over the sum of
    ``I_l(i, j)`` over every pair ``j < i`` of its layer), ``rank`` (0 for the layer's largest weight; ties in
    (i, j) order) and ``flow``: the flow the pair is averaged into by :func:`flow_masks` (``"S_wp"`` text ->
    label, ``"S_pq"`` label -> q, ``"S_ww"`` every other pair). Only the ``max_edges`` largest of each layer are
    kept (all of them when ``max_edges`` is None). ``layer_total``: the sum per layer over every pair ``j < i``.
    """

    prompt: Prompt
    n_layers: int
    edges: object  # pandas.DataFrame (pandas is imported where it is used)
    layer_total: tuple[float, ...]
    max_edges: int | None

    def select(self, top_k: int | None = None, min_share: float = 0.0, layers: tuple[int, int] | None = None):
        """The edges the view shows: ``rank < top_k`` (every kept edge when None), ``share >= min_share`` and
        ``layers[0] <= layer <= layers[1]`` (every layer when None)."""

        e = self.edges
        if top_k is not None:
            if not isinstance(top_k, (int, np.integer)) or isinstance(top_k, bool) or top_k < 1:
                raise ArgumentError(f"top_k must be a whole number of at least 1 (edges per layer), got {top_k!r}")
            if self.max_edges is not None and top_k > self.max_edges:
                raise ArgumentError(f"top_k={top_k} is more than the {self.max_edges} edges per layer this graph "
                                    f"keeps: build it with flow_graph(..., max_edges={top_k}) or more")
            e = e[e["rank"] < top_k]
        if not isinstance(min_share, (int, float, np.floating)) or not 0 <= min_share <= 1:
            raise ArgumentError(f"min_share is a share of a layer's saliency, between 0 and 1; got {min_share!r}")
        e = e[e["share"] >= min_share]
        lo, hi = self.layer_range(layers)
        return e[(e["layer"] >= lo) & (e["layer"] <= hi)]

    def layer_range(self, layers: tuple[int, int] | None = None) -> tuple[int, int]:
        """``layers`` (first, last; both included) checked against the model's layers; every layer when None."""

        if layers is None:
            return 0, self.n_layers - 1
        try:
            lo, hi = (int(x) for x in layers)
        except (TypeError, ValueError):
            raise ArgumentError(f"layers is (first, last), two layer indices; got {layers!r}") from None
        if not 0 <= lo <= hi < self.n_layers:
            raise ArgumentError(f"layers=({lo}, {hi}) must satisfy 0 <= first <= last <= {self.n_layers - 1} "
                                f"(the model has {self.n_layers} layers)")
        return lo, hi


def flow_edges(sal: Float[torch.Tensor, "layer seq seq"], prompt: Prompt, max_edges: int | None = None):
    """The edges of :class:`FlowGraph` from one prompt's saliency matrices (:func:`saliency_matrices`).

    Every pair ``j < i`` (the pairs the three flows average over; the diagonal excluded) with ``I_l(i, j) > 0``,
    the ``max_edges`` largest of each layer (all when None). Returns ``(edges, layer_total)``.
    """
    import pandas as pd


    if not isinstance(sal, torch.Tensor) or sal.ndim != 3 or sal.shape[1:] != (len(prompt), len(prompt)):
        shape = tuple(sal.shape) if hasattr(sal, "shape") else type(sal).__name__
        raise ArgumentError(f"sal must be one prompt's saliency matrices [layer, {len(prompt)}, {len(prompt)}] (as "
                            f"saliency_matrices returns them for this {len(prompt)}-token prompt), got {shape}")
    if max_edges is not None and (not isinstance(max_edges, (int, np.integer)) or isinstance(max_edges, bool)
                                  or max_edges < 1):
        raise ArgumentError(f"max_edges must be a whole number of at least 1 (edges kept per layer) or None, "
                            f"got {max_edges!r}")
    masks = flow_masks(prompt).numpy()  # [3, seq, seq]: S_wp, S_pq, S_ww; together every pair j < i
    flow_of = np.full(masks.shape[1:], -1)
    for f in range(len(FLOWS)):
        flow_of[masks[f]] = f
    I = sal.detach().double().cpu().numpy()
    ii, jj = np.nonzero(flow_of >= 0)
    rows, totals = [], []
    for layer in range(I.shape[0]):
        w = I[layer, ii, jj]
        totals.append(float(w.sum()))
        keep = np.flatnonzero(w > 0)
        order = keep[np.lexsort((jj[keep], ii[keep], -w[keep]))]  # largest first; ties in (i, j) order
        if max_edges is not None:
            order = order[:max_edges]
        rows.append(pd.DataFrame({
            "layer": layer, "i": ii[order], "j": jj[order], "weight": w[order],
            "share": w[order] / totals[-1] if totals[-1] > 0 else 0.0, "rank": np.arange(len(order)),
            "flow": [FLOWS[f] for f in flow_of[ii[order], jj[order]]]}))
    edges = pd.concat(rows, ignore_index=True).astype({"layer": int, "i": int, "j": int, "rank": int})
    return edges, tuple(totals)


def flow_graph(model, prompt: Prompt, label_ids: Sequence[int], max_edges: int | None = 100,
               sal: Float[torch.Tensor, "layer seq seq"] | None = None) -> FlowGraph:
    """One prompt's saliency flows as a :class:`FlowGraph` (draw it with ``plots.flow_view``).

    ``sal``: the prompt's saliency matrices when they are at hand; otherwise one forward and backward pass
    computes them (:func:`saliency_matrices`). ``max_edges``: the largest edges kept per layer (None: all).
    """
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be one Prompt (e.g. saliency_prompts(...)[0][0]), got {type(prompt).__name__}")
    if sal is None:
        sal = saliency_matrices(model, [prompt], label_ids)[0]
    edges, totals = flow_edges(sal, prompt, max_edges)
    return FlowGraph(prompt, int(sal.shape[0]), edges, totals, max_edges)
