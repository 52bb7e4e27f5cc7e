"""Notebooks 01-03: saliency flow curves and view, loyalty bars and sweep, AUC-ROC / R_l curves.

``plot_*`` build a figure and return it; ``show_*`` show one result of a notebook (its printed lines, tables and
figures, in the notebook's order) and save every figure under the name the results folder and the README use. The
``*_line(s)`` and ``*_table`` functions build what a ``show_*`` prints or displays, so it can be read and tested.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import display

from .figures import show_figure
from .setting import integer_ticks, offline_view, view_token_strings

__all__ = ["FLOW_COLORS", "plot_flow_curves", "saliency_view", "plot_loyalty_bars", "plot_loyalty_sweep", "plot_aucroc_curves", "topk_table",
           # notebook 01
           "saliency_by_hand_lines", "show_saliency_by_hand", "flows_by_layer",
           # notebook 02
           "isolation_by_hand_line", "isolation_probs_table", "show_isolation_by_hand", "isolation_inputs_table",
           "label_loyalty_table", "loyalty_bars", "loyalty_sweep", "label_word_share_line", "show_top_tokens",
           # notebook 03
           "label_attention_by_hand_line", "label_attention_table", "show_label_attention_by_hand", "aucroc_by_layer"]

FLOW_COLORS = {"S_wp": "#1f77b4", "S_pq": "#d62728", "S_ww": "#7f7f7f"}


def plot_flow_curves(df: pd.DataFrame, title: str = "", intervals: dict | None = None, labels: dict | None = None,
                     x: str = "layer", y: str = "relative size", curves: Sequence[str] = ("S_wp", "S_pq", "S_ww")):
    """Relative S_wp / S_pq / S_ww per layer, one panel per task (paper Fig 3).

    ``curves``: the flows drawn, in legend order; ``x`` and ``y`` label the axes.

    ``df`` columns: task, seed, layer, flow (S_wp/S_pq/S_ww), value (relative size).
    ``intervals[(task, "curve", layer, flow)]``: :class:`helpers.study.stats.Interval` of the seed-averaged curve
    (:func:`helpers.protocols.saliency.flow_intervals`, task named as in ``df``), drawn as the line and a shaded 95%
    band; without it the bands are the sd over seeds. ``labels`` (task -> panel name) renames the tasks of both
    (a task not in it keeps its name).
    """
    if labels:
        df = df.assign(task=df["task"].map(lambda t: labels.get(t, t)))
        intervals = intervals and {(labels.get(k[0], k[0]), *k[1:]): iv for k, iv in intervals.items()}
    unknown = set(curves) - set(FLOW_COLORS)
    if unknown:
        raise ValueError(f"curves {sorted(unknown)} are not saliency flows: pick from {list(FLOW_COLORS)}")
    colors = {flow: FLOW_COLORS[flow] for flow in curves}
    df = df[df["flow"].isin(colors)]
    tasks = list(dict.fromkeys(df["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        d = df[df.task == task]
        if intervals is None:
            sns.lineplot(data=d, x="layer", y="value", hue="flow", palette=colors,
                         errorbar="sd", ax=ax, marker="o", markersize=3)
            ax.set_xlabel(x)
        else:
            layers = sorted(d["layer"].unique())
            for flow, color in colors.items():
                ivs = [intervals.get((task, "curve", layer, flow)) for layer in layers]
                if all(iv is None for iv in ivs):
                    continue
                est = [np.nan if iv is None else iv.estimate for iv in ivs]
                ax.plot(layers, est, "o-", ms=3, color=color, label=flow)
                ax.fill_between(layers, [np.nan if iv is None else iv.low for iv in ivs],
                                [np.nan if iv is None else iv.high for iv in ivs], color=color, alpha=0.2, lw=0)
            ax.fill_between([], [], [], color="grey", alpha=0.2, lw=0, label="95% CI (seeds and inputs)")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: the curves fill the panel
            ax.set_xlabel(x)
        ax.set_title(task)
        ax.set_ylim(0, 1)
        ax.set_ylabel(y)
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
    import circuitsvis as cv  # lazy: only when a view is drawn
    import torch

    mats = torch.stack([sal[l] / sal[l].max().clamp(min=1e-12) for l in layers])
    return offline_view(cv.attention.attention_heads(attention=mats, tokens=view_token_strings(model, prompt),
                                                     attention_head_names=[f"layer {l}" for l in layers],
                                                     min_value=0, max_value=1))


_CONDITIONS = (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last"))


def plot_loyalty_bars(df: pd.DataFrame, k: int = 5, title: str = "", intervals: dict | None = None,
                      conditions: Sequence[tuple[str, str]] = _CONDITIONS,
                      bars: Sequence[str] = ("label_loyalty", "word_loyalty"), y: str = "loyalty (%)"):
    """Label and word loyalty (%) of the four isolation conditions at ``k`` layers (paper Fig 4).

    A group of bars per ``(condition, where)`` of ``conditions``, a bar per column of ``bars``; ``y`` labels the
    axis.

    ``df`` columns: task, seed, condition, where, k, label_loyalty, word_loyalty (fractions).
    ``intervals[(condition, where, "label_loyal" | "word_loyal")]``: the loyalties' intervals as fractions
    (:func:`helpers.protocols.isolation.isolation_intervals`), drawn in % as the error bars (otherwise the std
    over tasks and seeds).
    """
    d = df[df.k == k].copy()
    d["setting"] = d["condition"] + " words, " + d["where"] + f" {k}"
    long = d.melt(id_vars=["task", "seed", "setting"], value_vars=list(bars), var_name="metric", value_name="loyalty")
    long["loyalty"] *= 100
    order = [f"{c} words, {w} {k}" for c, w in conditions]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    sns.barplot(data=long, x="setting", y="loyalty", hue="metric", order=order, hue_order=list(bars),
                errorbar=None if intervals else "sd", ax=ax)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, order, list(bars),
                      {(f"{c} words, {w} {k}", f"{m}ty"): iv.scaled(100) for (c, w, m), iv in intervals.items()})
        ax.legend(fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel(y)
    ax.set_xlabel("")
    ax.tick_params(axis="x", labelsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_loyalty_sweep(df: pd.DataFrame, title: str = "", x: str = "isolated layers", y: str = "loyalty (%)",
                       panels: Sequence[str] = ("label_loyalty", "word_loyalty")):
    """Loyalty against the number of isolated layers, per condition (paper appendix): a panel per column of
    ``panels``, ``x`` and ``y`` labelling the axes."""
    d = df.copy()
    d["setting"] = d["condition"] + " / " + d["where"]
    fig, axes = plt.subplots(1, len(panels), figsize=(9, 3.2), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, metric in zip(axes, panels):
        dd = d.assign(v=100 * d[metric])
        sns.lineplot(data=dd, x="k", y="v", hue="setting", marker="o", errorbar="sd", ax=ax)
        ax.set_title(metric.replace("_", " "))
        ax.set_xlabel(x)
        integer_ticks(ax.xaxis)
        ax.set_ylabel(y)
        ax.set_ylim(0, 105)
    axes[0].get_legend().remove()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


_AUCROC_CURVES = {"auc": "AUCROC$_l$", "r": "$R_l$"}


def plot_aucroc_curves(per_model: dict[str, pd.DataFrame], threshold: float = 0.5, x: str = "layer",
                       curves: dict[str, str] = _AUCROC_CURVES):
    """AUCROC_l and R_l per layer, one panel per model, the layer where R_l passes ``threshold`` marked (Fig 5).

    Each frame has columns layer, auc, r (already averaged over tasks and seeds). ``curves``: the columns drawn
    (column -> legend label; markers o, s, ... in that order); ``x`` labels the axis.
    """
    fig, axes = plt.subplots(1, len(per_model), figsize=(4.6 * len(per_model), 3.2), squeeze=False)
    for ax, (name, d) in zip(axes[0], per_model.items()):
        for (column, label), marker in zip(curves.items(), "osd^v"):
            ax.plot(d["layer"], d[column], f"{marker}-", ms=3, label=label)
        ax.axhline(0.5, color="grey", lw=0.6, ls=":")
        hit = np.flatnonzero(d["r"].to_numpy() > threshold)
        if len(hit):
            layer = int(d["layer"].to_numpy()[hit[0]])
            ax.axvline(layer, color="k", lw=0.8, ls="--")
            ax.annotate(f"R > {threshold} at layer {layer}", (layer, 0.05), xytext=(4, 0),
                        textcoords="offset points", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(name)
        ax.set_xlabel(x)
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


# ------------------------------------------------------------------------------------------------ notebook 01

def saliency_by_hand_lines(task: str, prompt, rel) -> list[str]:
    """What notebook 01 prints after its by-hand saliency matches the helpers on one prompt.

    ``task``: the task's display name; ``prompt``: the :class:`~helpers.core.prompts.Prompt`; ``rel``: its
    ``[layer, 3]`` flows S_wp, S_pq, S_ww, each row divided by its sum. A first line names the prompt (tokens,
    label positions, q), then one line per sixth of the layers (layer 0 first) with the three relative flows.
    """
    n_layers = int(rel.shape[0])
    lines = [f"✓ by hand = helpers on one {task} prompt ({len(prompt)} tokens, "
             f"label positions {prompt.label_pos}, q = {prompt.q})"]
    for l in range(0, n_layers, max(1, n_layers // 6)):
        lines.append(f"layer {l:2d}: relative S_wp {rel[l, 0]:.2f}  S_pq {rel[l, 1]:.2f}  S_ww {rel[l, 2]:.2f}")
    return lines


def show_saliency_by_hand(task: str, prompt, rel) -> None:
    """Print :func:`saliency_by_hand_lines`."""
    print("\n".join(saliency_by_hand_lines(task, prompt, rel)))


def flows_by_layer(flows: pd.DataFrame, *, intervals: dict, x: str, y: str, curves: Sequence[str], title: str = "",
                   panels: dict | None = None, save_as: str | None = None, model_name: str | None = None):
    """Show (and save as figure ``save_as``) the relative saliency flows ``curves`` against the layer, one panel per
    task, each curve with its 95% band (paper Fig 3; :func:`plot_flow_curves`).

    ``flows``: :func:`helpers.protocols.saliency.flow_frame`; ``intervals``:
    :func:`helpers.protocols.saliency.flow_intervals`; both keyed by task id, the panels titled by ``panels``
    (task -> display name; a key not in it, e.g. the mean over tasks, keeps its name). ``x`` and ``y`` label the
    axes. Returns the figure (closed).
    """
    fig = plot_flow_curves(flows, title=title, intervals=intervals, labels=panels, x=x, y=y, curves=curves)
    show_figure(fig, save_as, model_name=model_name)
    return fig


# ------------------------------------------------------------------------------------------------ notebook 02

def isolation_by_hand_line(task, prompt) -> str:
    """The line notebook 02 prints when its by-hand isolation matches the helper on one prompt of ``task`` (a
    :class:`~helpers.core.tasks.Task`): the prompt's length, label positions, q and gold label word."""
    return (f"✓ by hand = helper on one {task.display} prompt ({len(prompt)} tokens, label "
            f"positions {prompt.label_pos}, q = {prompt.q}, gold: {task.label_words[prompt.gold]})")


def isolation_probs_table(moves: dict, label_words) -> pd.DataFrame:
    """One row per condition of ``moves`` (name -> label-word logits at q), one column ``P(<word>)`` per label
    word: the probabilities over the label words (softmax of the logits), rounded to 3 digits."""
    return pd.DataFrame({name: logits.softmax(-1).tolist() for name, logits in moves.items()},
                        index=[f"P({w})" for w in label_words]).T.round(3)


def show_isolation_by_hand(task, prompt, moves: dict) -> None:
    """Print :func:`isolation_by_hand_line` and display :func:`isolation_probs_table` of ``moves``."""
    print(isolation_by_hand_line(task, prompt))
    display(isolation_probs_table(moves, task.label_words))


def isolation_inputs_table(df: pd.DataFrame, k: int) -> pd.DataFrame:
    """Inputs per (task, seed) of every condition at ``k`` isolated layers: one row per condition, one column
    per task (``df``: :func:`helpers.protocols.isolation.loyalty_frame`, column ``n``)."""
    return df[df.k == k].groupby(["condition", "task"])["n"].first().unstack()


def label_loyalty_table(df: pd.DataFrame, k: int) -> pd.DataFrame:
    """Label loyalty (%) at ``k`` isolated layers, one row per (condition, where), one column per task (mean
    over seeds), rounded to 1 digit."""
    return (100 * df[df.k == k].pivot_table(index=["condition", "where"], columns="task",
                                            values="label_loyalty")).round(1)


def loyalty_bars(loyalty: pd.DataFrame, *, k: int, conditions: Sequence[tuple[str, str]], bars: Sequence[str], y: str,
                 intervals: dict, title: str, save_as: str, model_name: str | None = None) -> None:
    """Show (and save as figure ``save_as``) the loyalties ``bars`` (columns of ``loyalty``, in %) of each isolation
    ``(condition, where)`` of ``conditions`` at ``k`` layers, with their 95% intervals (paper Fig 4;
    :func:`plot_loyalty_bars`, ``y`` labelling the axis).

    ``loyalty``: :func:`helpers.protocols.isolation.loyalty_frame`; ``intervals[(condition, where, metric)]``:
    the loyalties' intervals as fractions (``metric`` ``label_loyal`` or ``word_loyal``,
    :func:`helpers.protocols.isolation.isolation_intervals`).
    """
    fig = plot_loyalty_bars(loyalty, k=k, title=title, intervals=intervals, conditions=conditions, bars=bars, y=y)
    show_figure(fig, save_as, model_name=model_name)


def loyalty_sweep(loyalty: pd.DataFrame, *, x: str, y: str, panels: Sequence[str], title: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) the loyalties ``panels`` (columns of ``loyalty``, one panel each, in %)
    against the number of isolated layers, a curve per condition / where, mean and sd over tasks and seeds
    (:func:`plot_loyalty_sweep`; ``x`` and ``y`` label the axes)."""
    show_figure(plot_loyalty_sweep(loyalty, title=title, x=x, y=y, panels=panels), save_as)


def label_word_share_line(task: str, share: dict) -> str:
    """``"<task>, share of top-5 tokens that are label words: <condition> <share>%, ..."`` (``share``: condition
    -> fraction)."""
    return f"{task}, share of top-5 tokens that are label words: " + ", ".join(f"{c} {v:.0%}" for c, v in share.items())


def show_top_tokens(model, run: dict, k: int, share: dict, task: str, n: int = 4) -> None:
    """Paper Table 5: display :func:`topk_table` for the first ``n`` inputs of ``run`` (one (task, seed) of
    :func:`helpers.protocols.isolation.isolation_runs`: ``"base"`` without isolation, ``("label", "first", k)``
    with the label words isolated in the first ``k`` layers), then print :func:`label_word_share_line`."""
    display(topk_table(model, run["base"], run[("label", "first", k)], n=n))
    print(label_word_share_line(task, share))


# ------------------------------------------------------------------------------------------------ notebook 03

def label_attention_by_hand_line(task, prompt, n_layers: int) -> str:
    """The line notebook 03 prints when its by-hand label attention matches the helper on one prompt of ``task``
    (a :class:`~helpers.core.tasks.Task`) on all ``n_layers`` layers."""
    return (f"✓ {task.display}, one prompt of {len(prompt)} tokens: by hand = label_attention on all "
            f"{n_layers} layers")


def label_attention_table(attn, label_words) -> pd.DataFrame:
    """``attn`` (``[layer, class]``: attention from q to each class's label words, summed over heads) as a table
    with one row per class (``A_l(q, '<word>')``) and one column per layer, rounded to 3 digits."""
    by_hand = pd.DataFrame(np.asarray(attn), columns=[f"A_l(q, {w!r})" for w in label_words]).rename_axis("layer")
    return by_hand.T.round(3)


def show_label_attention_by_hand(task, prompt, attn) -> None:
    """Print :func:`label_attention_by_hand_line` and display :func:`label_attention_table` of ``attn``."""
    print(label_attention_by_hand_line(task, prompt, len(attn)))
    display(label_attention_table(attn, task.label_words))


def aucroc_by_layer(panels: dict[str, pd.DataFrame], *, x: str, curves: dict[str, str], threshold: float,
                    save_as: str, model_name: str | None = None):
    """Show (and save as figure ``save_as``) the ``curves`` (column -> legend label: AUCROC_l and R_l) against the
    layer, one panel per entry of ``panels`` (panel title -> curve frame, columns layer, auc, r:
    :func:`helpers.experiments.aucroc.mean_curves`), the layer where R_l first passes ``threshold`` marked (paper
    Fig 5; :func:`plot_aucroc_curves`, ``x`` labelling the axis). Returns the figure (closed)."""
    fig = plot_aucroc_curves(panels, threshold=threshold, x=x, curves=curves)
    show_figure(fig, save_as, model_name=model_name)
    return fig
