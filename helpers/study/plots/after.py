"""Notebook 11's figures: the accounts after the anchors (flipped labels, the label words' context, the query's two
stages). The frames come from the protocols (:mod:`helpers.protocols.flipped_labels`,
:mod:`helpers.protocols.query_stages`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .figures import show_figure
from .setting import plot_interval_bars

__all__ = ["interval_bars", "saliency_by_layer", "stage_curves_figure"]


def _bars_ylim(ivs) -> tuple[tuple[float, float], bool]:
    """A share's axis (0 to 1.05) when every interval lies in [0, 1]; else one that holds every interval and 0 (an
    effect, a difference: it can be negative), and True to draw the zero line."""
    ends = [x for iv in ivs for x in (iv.low, iv.high, iv.estimate) if math.isfinite(x)]
    lo, hi = min([0.0, *ends]), max([0.0, *ends])
    if lo >= 0 and hi <= 1:
        return (0, 1.05), False
    pad = 0.08 * (hi - lo or 1.0)
    return (lo - pad, hi + pad), True


def interval_bars(groups: Mapping[str, Mapping[str, object]], title: str, ylabel: str, save_as: str | None = None,
                  ylim: tuple[float, float] | None = None) -> None:
    """Bars of ``groups[x][bar]`` (:class:`helpers.study.stats.Interval`: the estimate, its 95% interval as an error
    bar): a group of bars per ``x``; shown and saved. ``ylim``: default 0 to 1.05 for shares, or, where an interval
    leaves [0, 1] (an effect below 0), an axis that holds them all, with the zero line drawn."""
    rows = [{"x": x, "bar": b, "value": iv.estimate} for x, bars in groups.items() for b, iv in bars.items()]
    frame = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(frame)), 3.4))
    sns.barplot(frame, x="x", y="value", hue="bar", ax=ax)
    plot_interval_bars(ax, list(frame["x"].unique()), list(frame["bar"].unique()),
                       {(x, b): iv for x, bars in groups.items() for b, iv in bars.items()})
    auto, zero = _bars_ylim([iv for bars in groups.values() for iv in bars.values()])
    if ylim is None and zero:
        ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="", ylabel=ylabel, ylim=ylim or auto, title=title)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    show_figure(fig, save_as)


def saliency_by_layer(frame: pd.DataFrame, flows: Sequence[str], title: str, col: str | None = None,
                   save_as: str | None = None) -> None:
    """The mean saliency per pair (y, log scale) against the layer (x), a line per flow of ``flows`` (column
    ``flow``), a panel per value of ``col`` if given, with seaborn's 95% bootstrap band over the (task, seed)
    means; shown and saved."""
    grid = sns.relplot(frame[frame["flow"].isin(flows)], x="layer", y="value", hue="flow", hue_order=list(flows),
                       col=col, kind="line", errorbar=("ci", 95), height=3, aspect=1.4)
    grid.set(yscale="log").set_axis_labels("layer", "mean saliency per pair")
    grid.figure.suptitle(title, y=1.04)
    show_figure(grid.figure, save_as)


def stage_curves_figure(frame: pd.DataFrame, n_layers: int, title: str, hue: str = "measure", col: str | None = None,
                        save_as: str | None = None) -> None:
    """The share of inputs whose gold class is found (y) at each stage (x: the residual stream before layer x; the
    last is after the final layer), a line per ``hue``, a panel per ``col``, with seaborn's 95% bootstrap band over
    the (task, seed) curves, and §2.1's split marked: the shallow layers end at the dotted line, the deep ones
    start at the dashed one; shown and saved."""
    grid = sns.relplot(frame, x="stage", y="share", hue=hue, col=col, kind="line", errorbar=("ci", 95), height=3,
                       aspect=1.4)
    for ax in grid.axes.flat:
        ax.axvline(max(1, n_layers // 3), color="grey", ls=":", lw=1)
        ax.axvline(n_layers // 2, color="grey", ls="--", lw=1)
    grid.set(ylim=(0, 1.05)).set_axis_labels("stage (residual stream before layer)", "share of inputs")
    grid.figure.suptitle(title, y=1.04)
    show_figure(grid.figure, save_as)
