"""Tables and figures of notebook 10 (the anchors against their challengers).

Each function builds one table or figure from values the notebook computed; none computes anything a claim rests
on. The intervals come keyed as their experiment modules return them (``(set, condition)`` for the head sets,
:func:`helpers.protocols.head_scores.head_set_intervals`; ``(measure, ...)`` for the label spans), so the
notebook reads named rows and columns instead of those keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pandas as pd
import seaborn as sns

from .figures import show_figure
from .setting import plot_interval_bars

__all__ = ["class_flows_figure", "class_isolation_figure", "ranking_overlap_table", "head_set_table",
           "span_aucroc_figure", "label_span_table"]


def ranking_overlap_table(top: Mapping[str, Sequence], overlap, n_heads: int) -> pd.DataFrame:
    """One row per pair of rankings ("a & b"): ``overlap(top[a], top[b], n_heads)``'s columns (shared heads, the
    share expected by chance, ...)."""
    return pd.DataFrame([{"rankings": f"{a} & {b}", **overlap(top[a], top[b], n_heads)}
                         for a, b in itertools.combinations(top, 2)]).set_index("rankings")


def head_set_table(intervals_by_labels: Mapping[str, Mapping], rankings: Sequence[str], n_top: int) -> pd.DataFrame:
    """Rows: labels (e.g. "ordinary"), ranking, and where the heads are ablated (every position, at q); columns:
    accuracy with nothing ablated, with the ranking's top ``n_top`` heads ablated, with as many random heads
    ablated, and random minus top, each a 95% interval. ``intervals_by_labels[labels]`` is
    :func:`helpers.protocols.head_scores.head_set_intervals`' dict."""
    rows = []
    for labels, ivs in intervals_by_labels.items():
        for name in rankings:
            for at, where in (("", "every position"), ("@q", "at q")):
                rows.append({"labels": labels, "ranking": name, "ablated": where, "plain": f"{ivs[(name, 'plain')]:.3f}",
                             f"top {n_top}": f"{ivs[(name, 'set' + at)]:.3f}",
                             f"{n_top} random": f"{ivs[(name, 'random' + at)]:.3f}",
                             "random minus top": f"{ivs[(name, 'excess' + at)]:.3f}"})
    return pd.DataFrame(rows).set_index(["labels", "ranking", "ablated"])


def span_aucroc_figure(curves: pd.DataFrame, title: str, save_as: str | None = None) -> None:
    """AUCROC_l (y) against the layer (x), one line per anchor (column ``span``: the label word's first token or
    all of it), with seaborn's 95% bootstrap band over seeds and chance (0.5) dotted; shown and saved as
    ``save_as``."""
    ax = sns.lineplot(curves, x="layer", y="AUCROC", hue="span", errorbar=("ci", 95))
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(ylabel="AUCROC$_l$ (attention at q vs the prediction)", title=title)
    show_figure(ax.figure, save_as)


def label_span_table(loyalty: Mapping, anchor: Mapping, k: int) -> pd.DataFrame:
    """Rows: isolation in the first ``k`` layers (loyalty drop against as many content tokens), Hidden_anchor's
    accuracy and its label loyalty to full ICL; columns: with the label word's first token, with all of it, and
    all minus first, each a 95% interval. ``loyalty`` is
    :func:`helpers.protocols.isolation_classes.class_loyalty_intervals`' dict, ``anchor``
    :func:`helpers.protocols.compression_span.span_anchor_intervals`'."""
    return pd.DataFrame({
        f"isolation, first {k} layers: loyalty drop vs content tokens": {
            "first token": f"{loyalty[('drop', 'label_first', 'first')]:.3f}",
            "all tokens": f"{loyalty[('drop', 'label', 'first')]:.3f}",
            "all minus first": f"{loyalty[('span drop', 'first')]:.3f}"},
        "Hidden_anchor: accuracy": {"first token": f"{anchor[('accuracy', 'first')]:.3f}",
                                    "all tokens": f"{anchor[('accuracy', 'all')]:.3f}",
                                    "all minus first": f"{anchor['all - first']:.3f}"},
        "Hidden_anchor: label loyalty to full ICL": {"first token": f"{anchor[('label loyalty', 'first')]:.3f}",
                                                     "all tokens": f"{anchor[('label loyalty', 'all')]:.3f}",
                                                     "all minus first": ""}}).T


def class_flows_figure(frame: pd.DataFrame, title: str, save_as: str | None = None) -> None:
    """Per direction (panels: ``into`` a class from content, ``to_q`` from a class into q), the mean flow per pair
    (y, log scale) against the layer (x), one line per class (``label_first`` left out: it is ``label`` for
    one-token label words), with seaborn's 95% bootstrap band over the (task, seed) means; shown and saved."""
    grid = sns.relplot(frame[frame["class"] != "label_first"], x="layer", y="value", hue="class", col="direction",
                       kind="line", errorbar=("ci", 95), facet_kws={"sharey": False}, height=3, aspect=1.4)
    grid.set(yscale="log").set_axis_labels("layer", "mean saliency per pair")
    grid.figure.suptitle(title, y=1.04)
    show_figure(grid.figure, save_as)


def class_isolation_figure(loyalty: Mapping[tuple[str, str], object], k: int, title: str,
                           save_as: str | None = None) -> None:
    """Label loyalty (y) with each class and its control isolated (bars, ``loyalty[(condition, "first" or
    "last")]``, 95% intervals as error bars), in the first or the last ``k`` layers (x); shown and saved."""
    bars = pd.DataFrame([{"where": f"{w} {k}", "isolated": c, "label loyalty": iv.estimate}
                         for (c, w), iv in loyalty.items()])
    ax = sns.barplot(bars, x="where", y="label loyalty", hue="isolated")
    plot_interval_bars(ax, list(bars["where"].unique()), list(bars["isolated"].unique()),
                       {(f"{w} {k}", c): iv for (c, w), iv in loyalty.items()})
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax.set_title(title)
    show_figure(ax.figure, save_as)
