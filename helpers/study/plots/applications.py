"""Plots for notebooks 04-06 (anchor re-weighting, compression, error diagnosis)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from .setting import integer_ticks

__all__ = ["plot_beta", "plot_loss_curves", "plot_confusion_pair", "plot_layer_sweep", "plot_compression_bars",
           "plot_speedup"]


def plot_beta(beta, demo_classes: Sequence[int], class_names: Sequence[str], title: str = ""):
    """Learned beta as layer x head heatmaps, one panel per demonstration (titled by its class)."""
    beta = np.asarray(beta)
    n = beta.shape[-1]
    lim = float(np.abs(beta).max()) or 1.0
    fig, axes = plt.subplots(1, n, figsize=(2.2 * n + 1, 4), sharey=True, squeeze=False)
    for i, ax in enumerate(axes[0]):
        sns.heatmap(beta[:, :, i], ax=ax, cmap="RdBu_r", vmin=-lim, vmax=lim, cbar=i == n - 1)
        ax.set_title(class_names[demo_classes[i]], fontsize=9)
        ax.set_xlabel("head")
    axes[0, 0].set_ylabel("layer")
    fig.suptitle(title or "learned beta (layer x head, per demonstration)")
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: Mapping[str, Sequence[float]], ylabel: str = "training loss (mean per epoch)"):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker="o", label=name)
    ax.set_xlabel("epoch")
    integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_confusion_pair(predicted, actual, class_names: Sequence[str], title: str = ""):
    """Predicted (normalised key distance) and actual (AUC) confusion side by side; low = confused."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, mat, name in zip(axes, (predicted, actual), ("predicted: normalised key distance", "actual: AUC-ROC")):
        sns.heatmap(np.asarray(mat), ax=ax, annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1,
                    xticklabels=class_names, yticklabels=class_names, annot_kws={"fontsize": 7})
        ax.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_layer_sweep(sweep: Mapping[int, float], chosen: int | None = None, title: str = ""):
    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = sorted(sweep)
    ax.plot(xs, [sweep[x] for x in xs], marker="o")
    if chosen is not None:
        ax.axvline(chosen, ls="--", c="grey", label=f"chosen layer {chosen}")
        ax.legend(fontsize=8)
    ax.axhline(0, c="k", lw=0.5)
    ax.set_xlabel("layer")
    integer_ticks(ax.xaxis)
    ax.set_ylabel("Spearman(predicted, actual)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_compression_bars(df, title: str = "", intervals: dict | None = None):
    """``df``: long table with columns method, metric, value (fractions); ``intervals[(metric, method)]``
    (fractions) drawn as error bars."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    sns.barplot(data=df, x="metric", y="value", hue="method", ax=ax, errorbar=None)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, list(dict.fromkeys(df["metric"])), list(dict.fromkeys(df["method"])), intervals)
    ax.set_title(title)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_speedup(df, title: str = ""):
    """``df`` with columns task, speedup, bound."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    x = np.arange(len(df))
    ax.bar(x - 0.2, df["speedup"], 0.4, label="measured speed-up")
    ax.bar(x + 0.2, df["bound"], 0.4, label="token-ratio bound")
    ax.set_xticks(x, df["task"])
    ax.axhline(1, c="k", lw=0.5)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig
