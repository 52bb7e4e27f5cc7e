"""Plots, tables, printed lines and saved metrics of notebook 07 (paper B: in-context heads)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .setting import offline_view, plot_interval_bars, show_figure, view_token_strings

__all__ = ["plot_head_map", "plot_ablation", "plot_value_outputs", "plot_two_towers", "plot_biases",
           "head_attention_view", "plot_regime", "heads_setup_text", "print_heads_setup", "by_hand_drop_table",
           "by_hand_vo_text", "show_by_hand_heads", "unrelated_accuracy_table", "mapping_control_table",
           "show_mapping_control", "incontext_heads_text", "show_head_maps", "incontext_ablation_frame",
           "incontext_ablation_table", "show_incontext_ablation", "label_carrying_text", "show_value_outputs",
           "two_towers_table", "two_towers_text", "show_two_towers", "head_bias_table", "head_bias_frame",
           "show_head_biases", "regime_table", "regime_context", "regime_outcome_text", "regime_ablation_table",
           "regime_excess_text", "show_regime", "heads_overall_text", "print_heads_overall", "heads_report_metrics"]


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


# ------------------------------------------------------------------ notebook 07's tables, figures and printed lines
# Each ``show_*`` function shows one result of the notebook: its table(s) (``display``), its printed lines and its
# figure(s), each figure saved with :func:`helpers.study.results.save_figure` under the notebook's name for it and
# then shown and closed. Values come computed from the notebook; the ``*_table`` and ``*_text`` builders return
# what is shown, for tests and for other uses. ``uts`` is notebook 07's ``{task: UnrelatedTask}``: titles are its
# ``.task.display``; ``names`` is ``{task: short name}``.


def _head_name(head) -> str:
    l, h = head
    return f"L{l}H{h}"


def heads_setup_text(profile_name: str, model_name: str, sizes: dict, cfg, n_incontext: int) -> str:
    """The run's line: profile, model, sizes, and how many of the model's heads (``cfg.n_layers * cfg.n_heads``)
    count as in-context heads."""
    return f"{profile_name} {model_name} {sizes} {cfg.n_layers * cfg.n_heads} heads -> {n_incontext} in-context heads"


def print_heads_setup(profile_name: str, model_name: str, sizes: dict, cfg, n_incontext: int) -> None:
    """Print :func:`heads_setup_text`."""
    print(heads_setup_text(profile_name, model_name, sizes, cfg, n_incontext))


def by_hand_drop_table(drops, heads: Sequence[tuple[int, int]], words: Sequence[str]) -> pd.DataFrame:
    """One row per head ``L{l}H{h}``: the drop of each label word's log-probability (``drops`` [head, label]),
    rounded to 3 digits."""
    return pd.DataFrame(np.asarray(drops), index=[_head_name(hd) for hd in heads],
                        columns=[f"drop of log p({w})" for w in words]).round(3)


def by_hand_vo_text(head: tuple[int, int], words: Sequence[str], label_class: Sequence[int], vo_lm) -> str:
    """One head's value-output logit minus at each label position, named by the position's label word."""
    vals = ", ".join(f"{words[c]} {float(v):+.2f}" for c, v in zip(label_class, np.asarray(vo_lm, float).tolist()))
    return f"{_head_name(head)}, VO logit minus at each label position: {vals}"


def show_by_hand_heads(prompt_text: str, heads: Sequence[tuple[int, int]], words: Sequence[str], drops,
                       label_class: Sequence[int], vo_lm) -> None:
    """Section 1's result on one prompt: the prompt, the drop of each label word for ``heads``
    (:func:`by_hand_drop_table`) and the first head's value-output logit minus (:func:`by_hand_vo_text`)."""
    from IPython.display import display  # lazy: only inside a notebook

    print(prompt_text, "\n")
    display(by_hand_drop_table(drops, heads, words))
    print(by_hand_vo_text(heads[0], words, label_class, vo_lm))


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


def show_mapping_control(acc_iv: dict, map_iv: dict, reading) -> None:
    """Section 2.1: :func:`unrelated_accuracy_table` and :func:`mapping_control_table`."""
    from IPython.display import display  # lazy: only inside a notebook

    display(unrelated_accuracy_table(acc_iv))
    display(mapping_control_table(map_iv, reading))


def incontext_heads_text(title: str, heads: Sequence, per_word: dict, pooled: Sequence) -> str:
    """One task's in-context heads, the top heads for each label word, and the single ranking on the predicted
    label with how many heads it shares with the in-context heads."""
    return (f"{title}: in-context heads (layer, head) {heads}\n  top heads for each word {per_word}"
            f"\n  single ranking on the predicted label {pooled} ({len(set(pooled) & set(heads))} shared)")


def show_head_maps(scores: dict, heads: dict, uts: dict, per_word: dict, pooled: dict) -> None:
    """Section 2.2, per task ``t``: :func:`incontext_heads_text`, then :func:`plot_head_map` of ``scores[t]``'s mean
    gain and drop with ``heads[t]`` boxed, saved as ``07_head_map_{t}``."""
    for t in heads:
        print(incontext_heads_text(uts[t].task.display, heads[t], per_word[t], pooled[t]))
    for t in heads:
        show_figure(plot_head_map(scores[t].mean_gain, scores[t].mean_drop, heads[t], uts[t].task.display),
                     f"07_head_map_{t}")


def incontext_ablation_frame(runs: dict, names: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Long table of ablation results (``runs[(task, seed)][condition]``: accuracy): columns task (its short
    name), condition, accuracy; one row per task, seed and condition."""
    return pd.DataFrame([{"task": names[t], "condition": c, "accuracy": r[c]} for (t, _), r in runs.items()
                         for c in conditions])


def incontext_ablation_table(runs: dict, names: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Mean accuracy over seeds, task x condition, rounded to 3 digits (:func:`incontext_ablation_frame`)."""
    frame = incontext_ablation_frame(runs, names, conditions)
    return frame.pivot_table(index="task", columns="condition", values="accuracy", aggfunc="mean").round(3)


def show_incontext_ablation(runs: dict, intervals: dict, names: dict, conditions: Sequence[str]) -> None:
    """Section 2.3: :func:`incontext_ablation_table`, and :func:`plot_ablation` with ``intervals[(task name,
    condition)]`` as error bars, saved as ``07_ablation``."""
    from IPython.display import display  # lazy: only inside a notebook

    display(incontext_ablation_table(runs, names, conditions))
    show_figure(plot_ablation(incontext_ablation_frame(runs, names, conditions), intervals=intervals), "07_ablation")


def label_carrying_text(carrying, rates: dict) -> str:
    """The label-carrying rate's interval, and each task's rate on the first seed."""
    return f"label-carrying rate {carrying:.3f}; per task (first seed): {({t: round(r, 3) for t, r in rates.items()})}"


def show_value_outputs(vo: dict, rates: dict, carrying, uts: dict) -> None:
    """Section 2.4: :func:`label_carrying_text`, then per task ``t`` :func:`plot_value_outputs` of ``vo[t]`` (its
    rate ``rates[t]`` in the title), saved as ``07_value_outputs_{t}``."""
    print(label_carrying_text(carrying, rates))
    for t in vo:
        title = f"{uts[t].task.display}: VO logit minus per in-context head (label-carrying rate {rates[t]:.2f})"
        show_figure(plot_value_outputs(vo[t], title), f"07_value_outputs_{t}")


def two_towers_table(tt: dict, uts: dict) -> pd.DataFrame:
    """One row per task (its title): the two-towers statistics of ``tt[task]`` (the per-input ``d_*`` columns
    left out), rounded to 3 digits."""
    return pd.DataFrame({uts[t].task.display: {k: v for k, v in r.items() if not k.startswith("d_")}
                         for t, r in tt.items()}).T.round(3)


def two_towers_text(intervals: dict) -> str:
    """The two-towers intervals, 3 digits each ("no estimate" for None)."""
    return str({k: (f"{v:.3f}" if v is not None else "no estimate") for k, v in intervals.items()})


def show_two_towers(tt: dict, towers: dict, intervals: dict, uts: dict) -> None:
    """Section 2.5: :func:`two_towers_table`, :func:`two_towers_text`, then per task ``t`` :func:`plot_two_towers`
    (``towers[t].out_lm`` the model's logit minus), saved as ``07_two_towers_{t}``."""
    from IPython.display import display  # lazy: only inside a notebook

    display(two_towers_table(tt, uts))
    print(two_towers_text(intervals))
    for t in tt:
        show_figure(plot_two_towers(tt[t], towers[t].out_lm, f"{uts[t].task.display}: two towers"),
                     f"07_two_towers_{t}")


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


def show_head_biases(runs: dict, intervals: dict, names: dict, reading) -> None:
    """Section 2.6: :func:`head_bias_table`, and :func:`plot_biases` of :func:`head_bias_frame` with the intervals
    before and after as error bars, saved as ``07_biases``."""
    from IPython.display import display  # lazy: only inside a notebook

    display(head_bias_table(intervals, reading))
    bars = {(k, st): intervals[k][key] for k in intervals
            for st, key in (("before", "before"), ("after reduction", "after"))}
    show_figure(plot_biases(head_bias_frame(runs, names), intervals=bars), "07_biases")


def regime_table(intervals: dict) -> pd.DataFrame:
    """One row per regime (pair, demonstrations per class): swap-averaged accuracy, same-word rate, plain
    accuracy under the pair and under its swap, prompts dropped for length, reading."""
    return pd.DataFrame([{"pair": p, "per class": k, "swap-averaged accuracy": f"{r['swap_averaged']:.3f}",
                          "same-word rate": f"{r['same_word']:.3f}", "accuracy (pair)": f"{r['accuracy']:.3f}",
                          "accuracy (swap)": f"{r['accuracy_swapped']:.3f}", "dropped": f"{r['dropped']}/{r['asked']}",
                          "reading": r["reading"]} for (p, k), r in intervals.items()]).set_index(["pair", "per class"])


def regime_context(task_names: Sequence[str], pairs: Sequence[str], sizes: dict) -> str:
    """What the regime claim rests on: tasks, label pairs, seeds x queries per size (``sizes``: regime sizes)."""
    return (f"{', '.join(task_names)} with {' and '.join(pairs)}, {len(sizes['seeds'])} seed(s) x "
            f"{sizes['n_eval']} queries per size")


def regime_outcome_text(intervals: dict, clear: Sequence, sizes: dict, confirmation: dict | None = None,
                        heads: dict | None = None) -> str:
    """What came of the regimes: with ``clear`` regimes (:func:`~helpers.experiments.incontext_heads.clear_regimes`,
    highest lower bound first), the first one's ``confirmation`` on fresh seeds (``sizes["confirm_seeds"]``), then
    the regimes and the in-context ``heads`` of the ablation in the first (its accuracies:
    :func:`regime_ablation_table`). Without, the regime with the highest lower bound and why the ablation is not
    run."""
    if not clear:
        best = max(intervals, key=lambda k: intervals[k]["swap_averaged"].low)
        return (f"No regime follows the mapping: every interval contains 0.5 or lies below it (highest lower bound: "
                f"{best[0]} at {best[1]} per class, {intervals[best]['swap_averaged']:.3f}). Head ablation is not "
                "run: there is no in-context mapping for it to remove (question 4).")
    return (f"{clear[0]} on fresh seeds {sizes['confirm_seeds']}: swap-averaged accuracy "
            f"{confirmation['swap_averaged']:.3f} ({confirmation['reading']})\n"
            f"Regimes that follow the mapping: {list(clear)}. Ablation in {clear[0]}, in-context heads {heads}:")


def regime_ablation_table(ablation: dict, conditions: Sequence[str]) -> pd.DataFrame:
    """Accuracy [95% CI] of each ablation condition in the regime."""
    return pd.DataFrame({"accuracy [95% CI]": {c: f"{ablation[c]:.3f}" for c in conditions}})


def regime_excess_text(ablation: dict, all_positions: str = " (all positions)") -> str:
    """Random minus in-context heads ablated, at q and at every position."""
    return (f"random minus in-context heads ablated, at q: {ablation['excess']:.3f}; at every position: "
            f"{ablation['excess' + all_positions]:.3f}")


def show_regime(intervals: dict, task_names: Sequence[str], sizes: dict, clear: Sequence = (),
                confirmation: dict | None = None, heads: dict | None = None, ablation: dict | None = None,
                conditions: Sequence[str] = (), all_positions: str = " (all positions)") -> None:
    """Section 2.7: :func:`regime_table`, what came of it (:func:`regime_outcome_text`; where a regime cleared,
    :func:`regime_ablation_table` and :func:`regime_excess_text`), and :func:`plot_regime` saved as
    ``07_regime``."""
    from IPython.display import display  # lazy: only inside a notebook

    display(regime_table(intervals))
    print(regime_outcome_text(intervals, clear, sizes, confirmation, heads))
    if clear:
        display(regime_ablation_table(ablation, conditions))
        print(regime_excess_text(ablation, all_positions))
    title = (f"{', '.join(task_names)}: swap-averaged accuracy, {len(sizes['seeds'])} seed(s) x {sizes['n_eval']} "
             "queries")
    show_figure(plot_regime(intervals, title), "07_regime")


def heads_overall_text(overall: str, n_incontext: int, cfg) -> str:
    """The overall verdict, and the in-context heads' share of the model's heads beside the paper's ~1%."""
    total = cfg.n_layers * cfg.n_heads
    return (f"Overall: {overall}. In-context heads: {n_incontext} of {total} ({100 * n_incontext / total:.1f}%; "
            "paper: ~1%).")


def print_heads_overall(overall: str, n_incontext: int, cfg) -> None:
    """Print :func:`heads_overall_text`."""
    print(heads_overall_text(overall, n_incontext, cfg))


def heads_report_metrics(overall: str, heads: dict, acc_iv: dict, ab_iv: dict, regime_iv: dict, sizes: dict) -> dict:
    """The metrics notebook 07 saves beside its claims (``report_claims(..., metrics=...)``): the overall verdict,
    the in-context heads per task, the accuracy [95% CI] per mapping, the A/B swap-averaged accuracy (``ab_iv``:
    :func:`~helpers.experiments.incontext_heads.mapping_intervals` of A/B with B/A), the run sizes and each
    regime's swap-averaged accuracy, intervals written with 3 digits."""
    return {"overall": overall, "incontext_heads": heads, "accuracy": {m: f"{iv:.3f}" for m, iv in acc_iv.items()},
            "swap_averaged_A/B": f"{ab_iv['swap_averaged']:.3f}", "sizes": sizes,
            "regime": {f"{p} at {k} per class": f"{r['swap_averaged']:.3f}" for (p, k), r in regime_iv.items()}}
