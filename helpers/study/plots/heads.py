"""Figures and tables of notebook 07 (paper B: in-context heads).

``plot_*`` build a figure; ``*_table`` / ``*_frame`` build a table; each ``show_*`` function draws one result of
the notebook, its name saying what is plotted against what, and saves each figure under the notebook's name for
it (:func:`~helpers.study.plots.figures.show_figure`). The lines the notebook prints, its overall verdict and its
saved metrics are :mod:`helpers.study.heads_report`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .figures import show_figure
from .setting import offline_view, plot_interval_bars, view_token_strings

__all__ = ["plot_head_map", "head_score_panels", "plot_ablation", "plot_value_outputs", "plot_two_towers", "plot_biases",
           "head_attention_view", "plot_regime", "by_hand_drop_table", "unrelated_accuracy_table",
           "mapping_control_table", "incontext_ablation_frame", "incontext_ablation_table", "two_towers_table",
           "head_bias_table", "head_bias_frame", "regime_table", "regime_ablation_table",
           "show_gain_and_drop_by_layer_and_head", "show_accuracy_by_task_and_condition",
           "show_vo_logit_minus_by_head_and_label", "show_logit_minus_against_attention_and_vo",
           "show_bias_before_and_after_reduction", "show_swap_averaged_by_demos_per_class"]


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
        plot_interval_bars(ax, list(dict.fromkeys(df["bias"])), list(dict.fromkeys(df["stage"])), intervals)
    ax.axhline(0, c="k", lw=0.8)
    ax.set_ylabel("bias (P(favoured label) - 0.5)")
    ax.set_title("this project's bias measures, before and after the reductions")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def head_attention_view(model, prompt, attn_rows, head_names: Sequence[str]):
    """circuitsvis: the tokens of ``prompt`` coloured by each in-context head's attention from q."""
    import circuitsvis as cv  # lazy: only when a view is drawn
    import torch

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


# ------------------------------------------------------------------ notebook 07's tables and figures
# Values come computed from the notebook. ``titles`` maps a task to the title of its figure (notebook 07: the task's
# display name); ``names`` maps a task to its short name.


def by_hand_drop_table(drops, heads: Sequence[tuple[int, int]], words: Sequence[str]) -> pd.DataFrame:
    """One row per head ``L{l}H{h}``: the drop of each label word's log-probability (``drops`` [head, label]),
    rounded to 3 digits."""
    return pd.DataFrame(np.asarray(drops), index=[f"L{l}H{h}" for l, h in heads],
                        columns=[f"drop of log p({w})" for w in words]).round(3)


def unrelated_accuracy_table(acc_iv: dict) -> pd.DataFrame:
    """Accuracy [95% CI] per mapping (``acc_iv[mapping]``: an Interval)."""
    return pd.DataFrame({"accuracy [95% CI]": {m: f"{iv:.3f}" for m, iv in acc_iv.items()}})


def mapping_control_table(map_iv: dict, reading) -> pd.DataFrame:
    """One column per (mapping, swap) pair: swap-averaged accuracy, same-word rate and ``reading(swap_averaged)``
    (notebook 07 passes ``incontext_heads.mapping_interval_part``)."""
    return pd.DataFrame({f"{a} with {b}": {"swap-averaged accuracy": f"{iv['swap_averaged']:.3f}",
                                           "same-word rate": f"{iv['same_word']:.3f}",
                                           "reading": reading(iv["swap_averaged"])}
                         for (a, b), iv in map_iv.items()})


def incontext_ablation_frame(runs: dict, names: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Long table of ablation results (``runs[(task, seed)][condition]``: accuracy): columns task (its short
    name), condition, accuracy; one row per task, seed and condition."""
    return pd.DataFrame([{"task": names[t], "condition": c, "accuracy": r[c]} for (t, _), r in runs.items()
                         for c in conditions])


def incontext_ablation_table(runs: dict, names: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Mean accuracy over seeds, task x condition, rounded to 3 digits (:func:`incontext_ablation_frame`)."""
    frame = incontext_ablation_frame(runs, names, conditions)
    return frame.pivot_table(index="task", columns="condition", values="accuracy", aggfunc="mean").round(3)


def two_towers_table(stats: dict, titles: dict) -> pd.DataFrame:
    """One row per task (``titles[task]``): the two-towers statistics of ``stats[task]`` (the per-input ``d_*``
    columns left out), rounded to 3 digits."""
    return pd.DataFrame({titles[t]: {k: v for k, v in r.items() if not k.startswith("d_")}
                         for t, r in stats.items()}).T.round(3)


def head_bias_table(intervals: dict, reading) -> pd.DataFrame:
    """One row per bias: before, after, reduction % (or "none: no bias measured") and ``reading(before,
    reduction)`` (notebook 07 passes ``head_biases.bias_interval_part``)."""
    return pd.DataFrame({k: {"bias before": f"{iv['before']:.3f}", "bias after": f"{iv['after']:.3f}",
                             "reduction %": "none: no bias measured" if iv["reduction"] is None
                             else f"{iv['reduction']:.1f}",
                             "reading": reading(iv["before"], iv["reduction"])} for k, iv in intervals.items()}).T


def head_bias_frame(runs: dict, names: dict) -> pd.DataFrame:
    """Long table of bias sizes (``runs[(task, seed, kind)]`` with ``bias_before``/``bias_after``): columns task,
    bias, stage ("before", "after reduction"), size, seed."""
    return pd.DataFrame([{"task": names[t], "bias": kind, "stage": st, "size": size, "seed": seed}
                         for (t, seed, kind), r in runs.items()
                         for st, size in (("before", r.bias_before), ("after reduction", r.bias_after))])


def regime_table(intervals: dict) -> pd.DataFrame:
    """One row per regime (pair, demonstrations per class): swap-averaged accuracy, same-word rate, plain
    accuracy under the pair and under its swap, prompts dropped for length, reading."""
    return pd.DataFrame([{"pair": p, "per class": k, "swap-averaged accuracy": f"{r['swap_averaged']:.3f}",
                          "same-word rate": f"{r['same_word']:.3f}", "accuracy (pair)": f"{r['accuracy']:.3f}",
                          "accuracy (swap)": f"{r['accuracy_swapped']:.3f}", "dropped": f"{r['dropped']}/{r['asked']}",
                          "reading": r["reading"]} for (p, k), r in intervals.items()]).set_index(["pair", "per class"])


def regime_ablation_table(ablation: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Accuracy [95% CI] of each ablation condition in the regime."""
    return pd.DataFrame({"accuracy [95% CI]": {c: f"{ablation[c]:.3f}" for c in conditions}})


# ------------------------------------------------------------------ notebook 07's figures, one per result


def show_gain_and_drop_by_layer_and_head(scores: dict, boxed: dict, titles: dict) -> None:
    """Section 2.2, per task ``t``: heatmaps of ``scores[t]``'s mean gain and mean drop (nats), layer (rows) by
    head (columns), with the heads of ``boxed[t]`` boxed (:func:`plot_head_map`), saved as ``07_head_map_{t}``."""
    for t in boxed:
        show_figure(plot_head_map(scores[t].mean_gain, scores[t].mean_drop, boxed[t], titles[t]), f"07_head_map_{t}")


def show_accuracy_by_task_and_condition(runs: dict, intervals: dict, names: dict, conditions: Sequence[str]) -> None:
    """Section 2.3: bars of accuracy per task (x, ``names[task]``) and ablation condition (colour), one value per
    seed (``runs[(task, seed)][condition]``) averaged, ``intervals[(task name, condition)]`` as error bars
    (:func:`plot_ablation`), saved as ``07_ablation``."""
    show_figure(plot_ablation(incontext_ablation_frame(runs, names, conditions), intervals=intervals), "07_ablation")


def show_vo_logit_minus_by_head_and_label(vo: dict, carrying_rates: dict, titles: dict) -> None:
    """Section 2.4, per task ``t``: boxes of the value-output logit minus (y) per in-context head (x), at foo and
    at bar label positions (colour) (:func:`plot_value_outputs` of ``vo[t]``, its label-carrying rate
    ``carrying_rates[t]`` in the title), saved as ``07_value_outputs_{t}``."""
    for t in vo:
        title = f"{titles[t]}: VO logit minus per in-context head (label-carrying rate {carrying_rates[t]:.2f})"
        show_figure(plot_value_outputs(vo[t], title), f"07_value_outputs_{t}")


def show_logit_minus_against_attention_and_vo(stats: dict, towers: dict, titles: dict) -> None:
    """Section 2.5, per task ``t``: the model's logit minus (``towers[t].out_lm``, y) against the attention
    difference and against the VO difference (``stats[t]``'s ``d_attn`` and ``d_vo``, x; :func:`plot_two_towers`),
    saved as ``07_two_towers_{t}``."""
    for t in stats:
        show_figure(plot_two_towers(stats[t], towers[t].out_lm, f"{titles[t]}: two towers"), f"07_two_towers_{t}")


def show_bias_before_and_after_reduction(runs: dict, intervals: dict, names: dict) -> None:
    """Section 2.6: bars of each bias's size (y) per bias (x), before and after its reduction (colour), with
    ``intervals[bias]["before"]`` / ``["after"]`` as error bars (:func:`plot_biases` of :func:`head_bias_frame`),
    saved as ``07_biases``."""
    bars = {(k, st): intervals[k][key] for k in intervals
            for st, key in (("before", "before"), ("after reduction", "after"))}
    show_figure(plot_biases(head_bias_frame(runs, names), intervals=bars), "07_biases")


def show_swap_averaged_by_demos_per_class(intervals: dict, title: str) -> None:
    """Section 2.7: the swap-averaged accuracy (y) against demonstrations per class (x), one line per label pair
    with its 95% interval (:func:`plot_regime`), saved as ``07_regime``."""
    show_figure(plot_regime(intervals, title), "07_regime")


def head_score_panels(panels: dict, *, signed: Sequence[str] = (), title: str = "", annotate: bool = False,
                      save_as: str | None = None) -> None:
    """One heatmap per score (``{panel title: [layer, head] tensor or array}``), head on x and layer on y, shown and
    saved as ``save_as``: the scores named in ``signed`` (effects of either sign) on a diverging map centred at 0,
    the others on viridis; ``annotate`` writes each head's value in its cell."""
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 0.8, 3.2), layout="constrained",
                             squeeze=False)
    for ax, (name, score) in zip(axes[0], panels.items()):
        values = score.numpy() if hasattr(score, "numpy") else np.asarray(score)
        sign = name in signed
        sns.heatmap(values, ax=ax, cmap="RdBu_r" if sign else "viridis", center=0 if sign else None,
                    annot=annotate, fmt=".2f", cbar=not annotate, cbar_kws=None if annotate else {"shrink": 0.7})
        ax.set(xlabel="head", ylabel="layer", title=name)
    if title:
        fig.suptitle(title)
    show_figure(fig, save_as)
