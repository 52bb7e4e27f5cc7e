"""Notebooks 01-03: saliency flow curves and view, loyalty bars and sweep, AUC-ROC / R_l curves."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .setting import integer_ticks

__all__ = ["plot_flow_curves", "saliency_view", "plot_loyalty_bars", "plot_loyalty_sweep", "plot_aucroc_curves", "topk_table"]

_FLOW_COLORS = {"S_wp": "#1f77b4", "S_pq": "#d62728", "S_ww": "#7f7f7f"}


def plot_flow_curves(df: pd.DataFrame, title: str = "", intervals: dict | None = None):
    """Relative S_wp / S_pq / S_ww per layer, one panel per task (paper Fig 3).

    ``df`` columns: task, seed, layer, flow (S_wp/S_pq/S_ww), value (relative size).
    ``intervals[(task, "curve", layer, flow)]``: :class:`helpers.study.stats.Interval` of the seed-averaged curve
    (:func:`helpers.experiments.saliency.flow_intervals`, task named as in ``df``), drawn as the line and a shaded 95%
    band; without it the bands are the sd over seeds.
    """
    tasks = list(dict.fromkeys(df["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        d = df[df.task == task]
        if intervals is None:
            sns.lineplot(data=d, x="layer", y="value", hue="flow", palette=_FLOW_COLORS,
                         errorbar="sd", ax=ax, marker="o", markersize=3)
        else:
            layers = sorted(d["layer"].unique())
            for flow, color in _FLOW_COLORS.items():
                ivs = [intervals.get((task, "curve", layer, flow)) for layer in layers]
                if all(iv is None for iv in ivs):
                    continue
                est = [np.nan if iv is None else iv.estimate for iv in ivs]
                ax.plot(layers, est, "o-", ms=3, color=color, label=flow)
                ax.fill_between(layers, [np.nan if iv is None else iv.low for iv in ivs],
                                [np.nan if iv is None else iv.high for iv in ivs], color=color, alpha=0.2, lw=0)
            ax.fill_between([], [], [], color="grey", alpha=0.2, lw=0, label="95% CI (seeds and inputs)")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: the curves fill the panel
            ax.set_xlabel("layer")
        ax.set_title(task)
        ax.set_ylim(0, 1)
        ax.set_ylabel("relative size")
        integer_ticks(ax.xaxis)
        if ax is not axes[0][-1]:
            ax.get_legend().remove()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def saliency_view(model, prompt, sal, layers: Sequence[int]):
    """circuitsvis view of one prompt's saliency matrices ``I_l``, one panel per chosen layer, titled by its layer.

    Each layer's ``I_l`` is divided by its maximum so shallow and deep layers are
    comparable; pick a layer, then hover a cell to see how much the source token feeds the destination token.
    """
    import circuitsvis as cv
    import torch

    from .setting import offline_view, view_token_strings

    mats = torch.stack([sal[l] / sal[l].max().clamp(min=1e-12) for l in layers])
    return offline_view(cv.attention.attention_heads(attention=mats, tokens=view_token_strings(model, prompt),
                                                     attention_head_names=[f"layer {l}" for l in layers],
                                                     min_value=0, max_value=1))


def plot_loyalty_bars(df: pd.DataFrame, k: int = 5, title: str = "", intervals: dict | None = None):
    """Label and word loyalty (%) of the four isolation conditions at ``k`` layers (paper Fig 4).

    ``df`` columns: task, seed, condition, where, k, label_loyalty, word_loyalty (fractions).
    ``intervals[((condition, where), metric)]``: intervals in % drawn as the error bars (otherwise
    the std over tasks and seeds).
    """
    d = df[df.k == k].copy()
    d["setting"] = d["condition"] + " words, " + d["where"] + f" {k}"
    long = d.melt(id_vars=["task", "seed", "setting"], value_vars=["label_loyalty", "word_loyalty"],
                  var_name="metric", value_name="loyalty")
    long["loyalty"] *= 100
    order = [f"label words, first {k}", f"label words, last {k}", f"random words, first {k}",
             f"random words, last {k}"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    sns.barplot(data=long, x="setting", y="loyalty", hue="metric", order=order, hue_order=["label_loyalty", "word_loyalty"],
                errorbar=None if intervals else "sd", ax=ax)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, order, ["label_loyalty", "word_loyalty"],
                      {(f"{c} words, {w} {k}", m): iv for ((c, w), m), iv in intervals.items()})
        ax.legend(fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("loyalty (%)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", labelsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_loyalty_sweep(df: pd.DataFrame, title: str = ""):
    """Loyalty against the number of isolated layers, per condition (paper appendix)."""
    d = df.copy()
    d["setting"] = d["condition"] + " / " + d["where"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, metric in zip(axes, ["label_loyalty", "word_loyalty"]):
        dd = d.assign(v=100 * d[metric])
        sns.lineplot(data=dd, x="k", y="v", hue="setting", marker="o", errorbar="sd", ax=ax)
        ax.set_title(metric.replace("_", " "))
        ax.set_xlabel("isolated layers")
        integer_ticks(ax.xaxis)
        ax.set_ylabel("loyalty (%)")
        ax.set_ylim(0, 105)
    axes[0].get_legend().remove()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_aucroc_curves(per_model: dict[str, pd.DataFrame], threshold: float = 0.5):
    """AUCROC_l and R_l per layer, one panel per model, the layer where R_l passes ``threshold`` marked (Fig 5).

    Each frame has columns layer, auc, r (already averaged over tasks and seeds).
    """
    fig, axes = plt.subplots(1, len(per_model), figsize=(4.6 * len(per_model), 3.2), squeeze=False)
    for ax, (name, d) in zip(axes[0], per_model.items()):
        ax.plot(d["layer"], d["auc"], "o-", ms=3, label="AUCROC$_l$")
        ax.plot(d["layer"], d["r"], "s-", ms=3, label="$R_l$")
        ax.axhline(0.5, color="grey", lw=0.6, ls=":")
        hit = np.flatnonzero(d["r"].to_numpy() > threshold)
        if len(hit):
            layer = int(d["layer"].to_numpy()[hit[0]])
            ax.axvline(layer, color="k", lw=0.8, ls="--")
            ax.annotate(f"R > {threshold} at layer {layer}", (layer, 0.05), xytext=(4, 0),
                        textcoords="offset points", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(name)
        ax.set_xlabel("layer")
        integer_ticks(ax.xaxis)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def topk_table(model, base, iso, n: int = 5) -> pd.DataFrame:
    """Top-k tokens at q for the first ``n`` inputs, without and with isolation (paper Table 5).

    One row per input and condition, one column per rank, one token per cell with its whitespace made visible
    (``␣`` a space, ``↵`` a newline, ``⇥`` a tab): every cell stays short, so pandas shows it whole (a list of
    five tokens in one cell ran past ``display.max_colwidth``, 50 characters, and was cut with "...").
    """
    rows = []
    for i in range(min(n, len(base))):
        for cond, pred in (("without isolation", base), ("with isolation", iso)):
            ids = [int(t) for t in pred.topk[i]]
            rows.append({"input": i, "condition": cond,
                         **{f"top {r}": _token_shown(model.tokenizer.decode([t])) for r, t in enumerate(ids, 1)}})
    return pd.DataFrame(rows)


_WHITESPACE_SHOWN = str.maketrans({" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"})


def _token_shown(s: str) -> str:
    return s.translate(_WHITESPACE_SHOWN) if s else "(empty)"
