"""Plots, tables and printed summaries for notebook 09 (the positive control).

The ``show_control_*`` functions show one result of the notebook each: they build its table from values the
notebook computed, display it (``IPython.display.display``), print its summary line, draw its figure, and save the
figure under the name the notebook gives. They compute nothing the notebook's claims rest on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .figures import show_figure

__all__ = ["plot_training_curve", "control_setup_text", "training_curve", "interval_table", "circuit_table",
           "control_uniform_text", "loyalty_by_condition", "layer_head_table", "head_attribution_map",
           "control_two_way_text"]


def plot_training_curve(curve: pd.DataFrame, chance: float, title: str = "", x: str = "training step",
                        y: str = "accuracy", y_right: str = "loss (nats)"):
    """In-context accuracy on fresh sequences (and the training loss, on a right-hand axis) over training steps
    (columns: step, seconds, loss, accuracy), chance marked; ``x``, ``y`` and ``y_right`` label the axes."""
    fig, ax = plt.subplots(figsize=(6.4, 3))
    ax.plot(curve["step"], curve["accuracy"], "o-", ms=3, label="in-context accuracy (fresh sequences)")
    ax.axhline(chance, ls=":", c="grey", lw=1, label=f"chance ({chance:.2f})")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    loss = ax.twinx()
    loss.plot(curve["step"], curve["loss"], c="tab:orange", lw=1, label="training loss")
    loss.set_ylabel(y_right)
    lines = ax.get_legend_handles_labels()
    more = loss.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="center right")
    ax.set_title(title or "Training the control")
    fig.tight_layout()
    return fig


def control_setup_text(profile_name: str, sizes, training: Mapping, prompt) -> str:
    """Two lines: the profile, the run sizes (``helpers.protocols.positive_control.control_sizes``) and the
    checkpoint's training record; one sequence (``prompt.text``) and its gold label ``L{prompt.gold}``."""
    return (f"{profile_name} {sizes} | training: {training}\n"
            f"one sequence: {prompt.text} -> gold L{prompt.gold}")


def training_curve(curve: pd.DataFrame, *, x: str, y: str, y_right: str, chance: float, title: str, save_as: str,
                   model_name: str | None = None) -> None:
    """Show the training curve of :func:`plot_training_curve` (accuracy ``y`` and loss ``y_right`` against ``x``,
    ``chance`` marked), titled ``title``, and save it as figure ``save_as``
    (:func:`helpers.study.results.save_figure`)."""
    show_figure(plot_training_curve(curve, chance, title, x=x, y=y, y_right=y_right), save_as, model_name=model_name)


def interval_table(rows: Mapping, column: str = "[95% CI]") -> pd.DataFrame:
    """One column ``column``, one row per entry of ``rows`` (row name -> :class:`helpers.study.stats.Interval`),
    each formatted "estimate [low, high]" to 3 decimals."""
    return pd.DataFrame({column: {name: f"{iv:.3f}" for name, iv in rows.items()}})


def circuit_table(mean_scores, *, rows: Sequence[str]) -> pd.DataFrame:
    """Columns ``L{layer}H{head}``, one row per name in ``rows`` (the two circuit attentions
    ``mean_scores[layer, head, 0|1]`` of a [layer, head, 2] array or tensor, averaged over sequences), to 2
    decimals."""
    m = mean_scores
    n_layers, n_heads = m.shape[:2]
    if len(rows) != m.shape[2]:
        raise ValueError(f"rows names {len(rows)} measures but mean_scores holds {m.shape[2]}: name each one")
    return pd.DataFrame({f"L{l}H{h}": {row: f"{m[l, h, i]:.2f}" for i, row in enumerate(rows)}
                         for l in range(n_layers) for h in range(n_heads)})


def control_uniform_text(prompt) -> str:
    """What uniform causal attention would give for (a) (mean over label positions p of 1 / (p + 1)) and (b)
    (2 matching labels of 8: 2 / (q + 1)) on ``prompt``."""
    a = np.mean([1 / (p + 1) for p in prompt.label_pos])
    return f"Uniform attention would give (a) {a:.2f} and (b) {2 / (prompt.q + 1):.2f} (2 of the 8 labels match)."


def loyalty_by_condition(loyalty: Mapping, frame: pd.DataFrame, *, conditions: Sequence[tuple[str, str]]
                         ) -> pd.DataFrame:
    """Columns ``{condition} words, {where} layer`` for each ``(condition, where)`` of ``conditions``; rows: label
    loyalty (``loyalty[(condition, where, "label_loyal")]``, an interval) and the mean accuracy of the rows of
    ``frame`` (columns condition, where, accuracy; ``helpers.protocols.isolation.loyalty_frame``) of that
    condition, to 3 decimals."""
    return pd.DataFrame({f"{c} words, {w} layer": {
        "label loyalty": f"{loyalty[(c, w, 'label_loyal')]:.3f}",
        "accuracy": f"{frame[(frame.condition == c) & (frame['where'] == w)].accuracy.mean():.3f}"}
        for c, w in conditions})


def layer_head_table(values, *, cells: str) -> pd.DataFrame:
    """``values[layer][head]`` as a table: rows ``layer l``, columns ``head h``, rounded to 3 decimals, the axis
    named ``cells`` (what the cells are)."""
    a = np.asarray(values, dtype=float)
    return pd.DataFrame(a, index=[f"layer {l}" for l in range(a.shape[0])], columns=[f"head {h}" for h in range(a.shape[1])]
                        ).round(3).rename_axis(cells)


def head_attribution_map(scores, *, boxed: Sequence, x: str, y: str, panels: Sequence[str], title: str) -> None:
    """Show the layer x head maps of ``scores.mean_gain`` and ``scores.mean_drop`` (``plots.plot_head_map``),
    ``boxed`` heads boxed: one panel per name of ``panels`` (gain, then drop), ``x`` and ``y`` labelling their
    axes."""
    from .heads import plot_head_map

    fig = plot_head_map(scores.mean_gain, scores.mean_drop, boxed, title)
    maps = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    for ax, name in zip(maps, panels, strict=True):
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
    show_figure(fig)


def control_two_way_text(mapping: Mapping, carrying, two_towers: Mapping) -> str:
    """One line: the 2-way mapping control (``mapping["swap_averaged"]``, ``mapping["same_word"]``), the
    label-carrying rate and the two towers' intervals (``None``: no estimate), to 3 decimals."""
    towers = {k: (f"{v:.3f}" if v is not None else "no estimate") for k, v in two_towers.items()}
    return (f"2-way: swap-averaged accuracy {mapping['swap_averaged']:.3f}, same answer after the swap "
            f"{mapping['same_word']:.3f}; label-carrying rate {carrying:.3f}; two towers {towers}")
