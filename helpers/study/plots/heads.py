"""Plots for notebook 07 (paper B: in-context heads)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

__all__ = ["plot_head_map", "plot_ablation", "plot_value_outputs", "plot_two_towers", "plot_biases", "head_attention_view",
           "plot_regime"]


def plot_head_map(gain, drop, chosen: Sequence[tuple[int, int]] = (), title: str = ""):
    """Layer x head heatmaps of mean gain and mean drop (nats); chosen heads boxed."""
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.45 * gain.shape[1] * 2, 0.28 * gain.shape[0] + 1.5), squeeze=False)
    for ax, mat, name in zip(axes[0], (gain, drop), ("gain: direct log-prob effect at q", "drop when ablated at q")):
        m = np.asarray(mat, float)
        lim = np.abs(m).max() or 1.0
        sns.heatmap(m, ax=ax, cmap="RdBu_r", center=0, vmin=-lim, vmax=lim, cbar_kws={"label": "nats"})
        for l, h in chosen:
            ax.add_patch(plt.Rectangle((h, l), 1, 1, fill=False, ec="black", lw=2))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(name, fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_ablation(df: pd.DataFrame, intervals: dict | None = None):
    """Bars of accuracy per task and condition (columns: task, condition, accuracy); ``intervals[(task,
    condition)]`` drawn as error bars."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    sns.barplot(data=df, x="task", y="accuracy", hue="condition", ax=ax, errorbar=None)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, list(dict.fromkeys(df["task"])), list(dict.fromkeys(df["condition"])), intervals)
    ax.axhline(0.5, ls=":", c="grey", lw=1, label="chance")
    ax.set_ylim(0, 1)
    ax.set_title("ICL accuracy (foo/bar labels): heads zero-ablated at q or at every position")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_value_outputs(vo, title: str = ""):
    """Per in-context head: value-output logit minus (log p(foo) - log p(bar)) at foo vs bar label positions."""
    rows = []
    S = len(vo.heads)
    for s, (l, h) in enumerate(vo.heads):
        lm = vo.vo_lm[:, s, :].numpy()
        lc = vo.label_class.numpy()
        for i in range(lm.shape[0]):
            for k in range(lm.shape[1]):
                rows.append({"head": f"L{l}H{h}", "label at position": "foo" if lc[i, k] == 0 else "bar",
                             "logit minus": lm[i, k]})
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * S, 3.2))
    sns.boxplot(data=df, x="head", y="logit minus", hue="label at position", ax=ax, fliersize=1,
                palette={"foo": "tab:blue", "bar": "tab:orange"})
    ax.axhline(0, c="k", lw=0.8)
    ax.set_title(title or "value-output vectors at label positions (per unit attention)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_two_towers(tt: dict, out_lm, title: str = ""):
    """Model logit minus against the attention difference (foo - bar positions) and the VO difference."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    y = np.asarray(out_lm, float)
    for ax, key, cname, xl in ((axes[0], "d_attn", "corr_attn_logit_minus", "attention on foo - on bar (sum over heads)"),
                               (axes[1], "d_vo", "corr_vo_logit_minus", "VO logit minus: foo pos. - bar pos.")):
        x = np.asarray(tt[key], float)
        ax.scatter(x, y, c=np.where(y > 0, "tab:blue", "tab:orange"), s=14)
        ax.axhline(0, c="grey", lw=0.7)
        ax.set_xlabel(xl, fontsize=8)
        ax.set_ylabel("model: log p(foo) - log p(bar)", fontsize=8)
        ax.set_title(f"r = {tt[cname]:.2f}", fontsize=9)
    fig.suptitle(title or "two towers: attention moves, value-output vectors stay", fontsize=10)
    fig.tight_layout()
    return fig


def plot_biases(df: pd.DataFrame, intervals: dict | None = None):
    """Bias size before/after the reduction (columns: bias, stage, size; one row per seed, or means), with
    ``intervals[(bias, stage)]`` (:class:`helpers.study.stats.Interval`) as error bars."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    sns.barplot(data=df, x="bias", y="size", hue="stage", ax=ax, errorbar=None)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, list(dict.fromkeys(df["bias"])), list(dict.fromkeys(df["stage"])), intervals)
    ax.axhline(0, c="k", lw=0.8)
    ax.set_ylabel("bias (P(favoured label) - 0.5)")
    ax.set_title("this project's bias measures, before and after the reductions")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def head_attention_view(model, prompt, attn_rows, head_names: Sequence[str]):
    """circuitsvis: the tokens of ``prompt`` coloured by each in-context head's attention from q."""
    import circuitsvis as cv
    import torch

    from .setting import offline_view, view_token_strings

    vals = torch.as_tensor(attn_rows).T.float()  # [seq, heads]
    return offline_view(cv.tokens.colored_tokens_multi(tokens=view_token_strings(model, prompt), values=vals,
                                                       labels=list(head_names)))


def plot_regime(intervals: dict, title: str = ""):
    """Swap-averaged accuracy against demonstrations per class (log scale), one line per label pair with its 95%
    interval as a band; chance (a word prior only) at 0.5. ``intervals[(pair, k)]["swap_averaged"]``: an
    :class:`helpers.study.stats.Interval`."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    pairs = list(dict.fromkeys(p for p, _ in intervals))
    ks = sorted({k for _, k in intervals})
    for pair in pairs:
        pts = [(k, intervals[(pair, k)]["swap_averaged"]) for k in ks if (pair, k) in intervals]
        x = [k for k, _ in pts]
        line, = ax.plot(x, [iv.estimate for _, iv in pts], marker="o", label=f"{pair} with its swap")
        ax.fill_between(x, [iv.low for _, iv in pts], [iv.high for _, iv in pts], color=line.get_color(), alpha=0.2)
    ax.axhline(0.5, ls=":", c="grey", lw=1, label="chance (word prior only)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("demonstrations per class")
    ax.set_ylabel("swap-averaged accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(title or "Does the model read an unrelated mapping from its context?", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
