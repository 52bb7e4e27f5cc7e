"""Plots and shown results for notebooks 04-06 (anchor re-weighting, compression, error diagnosis).

``plot_*`` build a figure and return it; ``show_*`` show one result of a notebook (its tables, printed lines and
figures, in the notebook's order) and save every figure under the name the results folder and the README use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import display

from helpers.study import paper as PA

from .figures import show_figure
from .setting import integer_ticks

__all__ = ["plot_beta", "plot_loss_curves", "plot_confusion_pair", "plot_layer_sweep", "plot_compression_bars",
           "plot_speedup",
           # notebook 04
           "reweighting_probs_table", "show_reweighting_by_hand", "reweighting_runs_table", "beta_heatmaps",
           "loss_curves",
           # notebook 05
           "hidden_anchor_kept_line", "show_hidden_anchor_by_hand", "compression_table2", "compression_bars",
           "compression_table3", "speedup_bars",
           # notebook 06
           "diagnosis_setting_lines", "show_diagnosis_setting", "query_projections_line", "show_query_projections",
           "seed_accuracy_lines", "show_seed_accuracies", "confused_pairs_table", "confusion_pair", "layer_sweep"]


def plot_beta(beta, demo_classes: Sequence[int], class_names: Sequence[str], title: str = "", x: str = "head",
              y: str = "layer"):
    """Learned beta as layer x head heatmaps, one panel per demonstration (titled by its class); ``x`` and ``y``
    label the axes."""
    beta = np.asarray(beta)
    n = beta.shape[-1]
    lim = float(np.abs(beta).max()) or 1.0
    fig, axes = plt.subplots(1, n, figsize=(2.2 * n + 1, 4), sharey=True, squeeze=False)
    for i, ax in enumerate(axes[0]):
        sns.heatmap(beta[:, :, i], ax=ax, cmap="RdBu_r", vmin=-lim, vmax=lim, cbar=i == n - 1)
        ax.set_title(class_names[demo_classes[i]], fontsize=9)
        ax.set_xlabel(x)
    axes[0, 0].set_ylabel(y)
    fig.suptitle(title or "learned beta (layer x head, per demonstration)")
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: Mapping[str, Sequence[float]], ylabel: str = "training loss (mean per epoch)",
                     xlabel: str = "epoch"):
    """One curve per entry of ``curves`` (name -> a value per epoch, the first epoch 1)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker="o", label=name)
    ax.set_xlabel(xlabel)
    integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_confusion_pair(predicted, actual, class_names: Sequence[str], title: str = "",
                        panels: Sequence[str] = ("predicted: normalised key distance", "actual: AUC-ROC")):
    """Predicted (normalised key distance) and actual (AUC) confusion side by side, titled ``panels``; low =
    confused."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, mat, name in zip(axes, (predicted, actual), panels, strict=True):
        sns.heatmap(np.asarray(mat), ax=ax, annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1,
                    xticklabels=class_names, yticklabels=class_names, annot_kws={"fontsize": 7})
        ax.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_layer_sweep(sweep: Mapping[int, float], chosen: int | None = None, title: str = "", x: str = "layer",
                     y: str = "Spearman(predicted, actual)"):
    """``sweep`` (layer -> value) as a curve, the ``chosen`` layer marked; ``x`` and ``y`` label the axes."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = sorted(sweep)
    ax.plot(xs, [sweep[x] for x in xs], marker="o")
    if chosen is not None:
        ax.axvline(chosen, ls="--", c="grey", label=f"chosen layer {chosen}")
        ax.legend(fontsize=8)
    ax.axhline(0, c="k", lw=0.5)
    ax.set_xlabel(x)
    integer_ticks(ax.xaxis)
    ax.set_ylabel(y)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_compression_bars(df, title: str = "", intervals: dict | None = None, x: str = "metric", y: str = "value",
                          hue: str = "method"):
    """``df``: long table with columns ``x`` (the groups), ``hue`` (a bar per group), ``y`` (fractions);
    ``intervals[(x value, hue value)]`` (fractions) drawn as error bars."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    sns.barplot(data=df, x=x, y=y, hue=hue, ax=ax, errorbar=None)
    if intervals:
        from .setting import plot_interval_bars

        plot_interval_bars(ax, list(dict.fromkeys(df[x])), list(dict.fromkeys(df[hue])), intervals)
    ax.set_title(title)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_speedup(df, title: str = "", x: str = "task",
                 bars: Mapping[str, str] = {"speedup": "measured speed-up", "bound": "token-ratio bound"}):  # noqa: B006
    """Bars side by side per value of column ``x`` of ``df``: the columns named by ``bars`` (column -> legend
    label), two or three (measured, FLOP-count and token-ratio speed-ups); a ``speedup`` bar carries its 95%
    interval (``speedup_low``, ``speedup_high``) where ``df`` has it."""
    if len(bars) not in (2, 3):
        raise ValueError(f"bars names {len(bars)} columns; the figure sets two or three side by side "
                         "(measured speed-up, FLOP speed-up, bound)")
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    at = np.arange(len(df))
    width = 0.8 / len(bars)
    for i, (column, label) in enumerate(bars.items()):
        offset = (i - (len(bars) - 1) / 2) * width
        err = None
        if column == "speedup" and {"speedup_low", "speedup_high"} <= set(df.columns):
            err = np.vstack([df[column] - df["speedup_low"], df["speedup_high"] - df[column]])
        ax.bar(at + offset, df[column], width, label=label, yerr=err, capsize=3 if err is not None else 0)
    ax.set_xticks(at, df[x])
    ax.axhline(1, c="k", lw=0.5)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------- notebook 04: anchor re-weighting

def reweighting_probs_table(plain, mine, label_words: Sequence[str], target: int,
                            layers: tuple[int, int]) -> pd.DataFrame:
    """One prompt's label-word probabilities (softmax over the label words' logits ``plain`` and ``mine``) with
    beta = 0 and with beta = 1 on the anchors of class ``target`` in the layers ``layers`` = (first, last): one
    row per setting, one column per label word, rounded to 3 decimals."""
    return pd.DataFrame({"beta = 0": plain.softmax(-1).numpy(),
                         f"beta = 1 on {label_words[target]!r}'s anchor, layers {layers[0]}-{layers[1]}":
                             mine.softmax(-1).numpy()}, index=list(label_words)).T.round(3)


def show_reweighting_by_hand(task, target: int, plain, mine, layers: tuple[int, int]) -> None:
    """Notebook 04's by-hand check: the line confirming that the label logits by hand equal the helper's, and
    :func:`reweighting_probs_table` (``task``: the prompt's task, its ``display`` name and ``label_words``)."""
    print(f"✓ {task.display}, one prompt: re-weighted label logits by hand = the helper's")
    display(reweighting_probs_table(plain, mine, task.label_words, target, layers))


def reweighting_runs_table(rows: Mapping) -> pd.DataFrame:
    """Table 1 per (task, seed): 1-shot, 5-shot and re-weighting accuracy, the test inputs and those dropped (the
    5-shot prompt too long), one row ``"<task> seed <seed>"`` per entry of ``rows`` (``{(task, seed):
    Table1Row}``), rounded to 3 decimals."""
    return pd.DataFrame({f"{t} seed {s}": {"1-shot": r.acc_1shot, "5-shot": r.acc_5shot, "re-weighting": r.acc_reweight,
                                           "n": r.n_test, "dropped (5-shot too long)": r.n_dropped}
                         for (t, s), r in rows.items()}).T.round(3)


def beta_heatmaps(result, *, x: str, y: str, panels: Sequence[str], title: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) the beta a re-weighting run learned (``result``:
    :class:`helpers.experiments.reweighting.ReweightResult`) as ``y`` x ``x`` heatmaps, one panel per demonstration
    titled by its class's name in ``panels`` (the task's label words) (:func:`plot_beta`)."""
    show_figure(plot_beta(result.beta, result.demo_classes, panels, title=title, x=x, y=y), save_as)


def loss_curves(curves: Mapping[str, Sequence[float]], *, x: str, y: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) one curve per entry of ``curves`` (name -> value per epoch), ``x``
    and ``y`` labelling the axes (:func:`plot_loss_curves`)."""
    show_figure(plot_loss_curves(curves, ylabel=y, xlabel=x), save_as)


# ------------------------------------------------------------------------------ notebook 05: context compression

def hidden_anchor_kept_line(tokenizer, prompt, keep: Sequence[int], n_demo_tokens: int) -> str:
    """``"kept <k> of <n> demonstration tokens: '<tok>' '<tok>' ..."``: the tokens of ``prompt`` at the kept
    positions, decoded and quoted."""
    return (f"kept {len(keep)} of {n_demo_tokens} demonstration tokens: "
            + " ".join(repr(tokenizer.decode(prompt.tokens[i])) for i in keep))


def show_hidden_anchor_by_hand(tokenizer, icl, keep: Sequence[int], n_demo_tokens: int, full, mine) -> None:
    """Notebook 05's by-hand Hidden_anchor on the first prompt of the prompt set ``icl``: the kept tokens
    (:func:`hidden_anchor_kept_line`) and the label logits at q of full ICL (``full``) beside those through the
    pruned cache (``mine``), one row per label word of ``icl.task``, rounded to 2 decimals."""
    print(hidden_anchor_kept_line(tokenizer, icl.prompts[0], keep, n_demo_tokens))
    logits = pd.DataFrame({"full ICL": full, "Hidden_anchor (by hand)": mine}, index=list(icl.task.label_words))
    display(logits.round(2))


def compression_table2(avg: pd.DataFrame, model_name: str) -> pd.DataFrame:
    """Table 2 beside the paper's: ``avg`` (one row per method, columns LL, WL, Acc in %) prefixed
    ``"<model> (ours) "`` and rounded to 2 decimals, after the paper's GPT2-XL and GPT-J columns
    (:data:`helpers.study.paper.TABLE2`) for the same methods."""
    methods = list(avg.index)
    paper2 = pd.DataFrame({f"{m} {col}": [PA.TABLE2[m][meth][i] for meth in methods]
                           for m in ("GPT2-XL", "GPT-J") for i, col in enumerate(("LL", "WL", "Acc"))}, index=methods)
    return pd.concat([paper2, avg.add_prefix(f"{model_name.split('/')[-1]} (ours) ").round(2)], axis=1)


def compression_bars(means: pd.DataFrame, *, x: str, y: str, hue: str, intervals: Mapping, title: str,
                     save_as: str) -> None:
    """Show (and save as figure ``save_as``) bars of ``y`` (fractions) per value of column ``x``, one bar per value
    of column ``hue`` (:func:`plot_compression_bars`), with the 95% intervals ``intervals[(hue value, x value)]``
    (in %, drawn as fractions)."""
    fig = plot_compression_bars(means, title=title, x=x, y=y, hue=hue,
                                intervals={(met, m): iv.scaled(0.01) for (m, met), iv in intervals.items()})
    show_figure(fig, save_as)


def compression_table3(speed: pd.DataFrame) -> pd.DataFrame:
    """Table 3 beside the paper's: the lengths, token-ratio bound, FLOP-count speed-up (where ``speed`` has it) and
    measured speed-up with its interval per task of
    ``speed`` (rounded to 2 decimals), then the paper's speed-ups (GPT2-XL, GPT-J) and its L_demo / L_x (for a task
    the paper did not study, :data:`helpers.study.paper.NOT_IN_PAPER`)."""
    columns = ["task", "L_demo", "L_x", "L_anchor", "bound", *(["flop_speedup"] if "flop_speedup" in speed else []),
               "speedup", "speedup_low", "speedup_high"]
    table3 = speed[columns].round(2)
    cols = [PA.paper_column(t) for t in table3.task]  # None: a task the paper did not study
    for m in ("GPT2-XL", "GPT-J"):
        table3[f"paper {m}"] = [PA.TABLE3_SPEEDUP[m][c] if c else PA.NOT_IN_PAPER for c in cols]
    table3["paper L_demo / L_x"] = [f"{PA.TABLE3_LDEMO[c]} / {PA.TABLE3_LX[c]}" if c else PA.NOT_IN_PAPER
                                   for c in cols]
    return table3


def speedup_bars(speed: pd.DataFrame, *, x: str, bars: Mapping[str, str], title: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) bars per value of column ``x`` of ``speed``: the columns of ``bars``
    (column -> legend label: the measured speed-up with its interval, the FLOP-count one, the token-ratio bound)
    (:func:`plot_speedup`)."""
    show_figure(plot_speedup(speed, title=title, x=x, bars=bars), save_as)


# --------------------------------------------------------------------------------- notebook 06: error diagnosis

def diagnosis_setting_lines(profile, cfg, layer: int) -> list[str]:
    """The run's profile, and the diagnosed layer with the model's depth and (key/value) head counts."""
    return [str(profile), f"layer {layer} of {cfg.n_layers}; n_heads {cfg.n_heads}, "
                          f"n_key_value_heads {cfg.n_key_value_heads}"]


def show_diagnosis_setting(profile, cfg, layer: int) -> None:
    """Prints :func:`diagnosis_setting_lines`."""
    print("\n".join(diagnosis_setting_lines(profile, cfg, layer)))


def query_projections_line(score, dist, pair: tuple[int, int], names: Sequence[str], gold: int) -> str:
    """One query against the label words' keys: its gold class, the class whose key matches best (argmax of
    ``score``) and the closest pair ``pair`` with its distance in ``dist``."""
    a, b = pair
    return (f"gold {names[gold]}; best-matching key {names[int(score.argmax())]}; closest pair seen by this "
            f"query: {names[a]}–{names[b]} ({dist[a, b]:.1f})")


def show_query_projections(projections, score, dist, pair: tuple[int, int], names: Sequence[str], gold: int) -> None:
    """Notebook 06's by-hand query: :func:`query_projections_line`, then ``projections`` (``[head, classes]``) as a
    table, one row per head, rounded to 1 decimal."""
    print(query_projections_line(score, dist, pair, names, gold))
    display(pd.DataFrame(np.asarray(projections), columns=list(names),
                         index=[f"head {h}" for h in range(len(projections))]).round(1))


def seed_accuracy_lines(vecs: Mapping) -> list[str]:
    """Per seed of ``vecs`` (``{seed: QKVectors}``): the number of inputs and the accuracy of the model's
    prediction (argmax of its label probabilities) against the gold labels."""
    return [f"seed {seed}: {len(v.gold)} inputs, accuracy {(v.label_probs.argmax(-1) == v.gold).float().mean():.3f}"
            for seed, v in vecs.items()]


def show_seed_accuracies(vecs: Mapping) -> None:
    """Prints :func:`seed_accuracy_lines`."""
    print("\n".join(seed_accuracy_lines(vecs)))


def confused_pairs_table(predicted, actual, names: Sequence[str]) -> pd.DataFrame:
    """The class pairs (upper triangle) with their predicted (key distance) and actual (AUC) confusion and their
    ranks, most confused (lowest AUC) first, rounded to 3 decimals."""
    predicted, actual = np.asarray(predicted), np.asarray(actual)
    iu = np.triu_indices(len(names), 1)
    pairs = pd.DataFrame({"pair": [f"{names[a]}–{names[b]}" for a, b in zip(*iu)],
                          "predicted (distance)": predicted[iu], "actual (AUC)": actual[iu]})
    pairs["rank predicted"], pairs["rank actual"] = pairs["predicted (distance)"].rank(), pairs["actual (AUC)"].rank()
    return pairs.sort_values("actual (AUC)").round(3)


def confusion_pair(predicted, actual, *, classes: Sequence[str], panels: Sequence[str], title: str,
                   save_as: str) -> None:
    """Show (and save as figure ``save_as``) two class x class heatmaps side by side, titled ``panels``: the
    ``predicted`` and the ``actual`` confusion, rows and columns the ``classes`` (:func:`plot_confusion_pair`)."""
    show_figure(plot_confusion_pair(predicted, actual, classes, title=title, panels=panels), save_as)


def layer_sweep(sweep: Mapping[int, float], *, x: str, y: str, chosen: int, title: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) ``sweep`` (layer -> value) against the layer, the ``chosen`` layer
    marked, ``x`` and ``y`` labelling the axes (:func:`plot_layer_sweep`)."""
    show_figure(plot_layer_sweep(sweep, chosen=chosen, title=title, x=x, y=y), save_as)
