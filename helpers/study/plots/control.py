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
from IPython.display import display

from .analysis import plot_flow_curves
from .heads import plot_head_map
from .setting import show_figure

__all__ = ["plot_training_curve", "control_setup_text", "show_control_setup", "show_control_training",
           "control_premise_table", "show_control_premise", "control_circuit_table", "control_uniform_text",
           "show_control_circuit", "show_control_saliency", "control_isolation_table", "show_control_isolation",
           "control_ablation_table", "control_one_head_table", "show_control_heads", "control_two_way_text",
           "show_control_two_way", "control_hidden_anchor_table", "show_control_hidden_anchor"]


def plot_training_curve(curve: pd.DataFrame, chance: float, title: str = ""):
    """In-context accuracy on fresh sequences (and the training loss) over training steps (columns: step, seconds,
    loss, accuracy), chance marked."""
    fig, ax = plt.subplots(figsize=(6.4, 3))
    ax.plot(curve["step"], curve["accuracy"], "o-", ms=3, label="in-context accuracy (fresh sequences)")
    ax.axhline(chance, ls=":", c="grey", lw=1, label=f"chance ({chance:.2f})")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy")
    loss = ax.twinx()
    loss.plot(curve["step"], curve["loss"], c="tab:orange", lw=1, label="training loss")
    loss.set_ylabel("loss (nats)")
    lines = ax.get_legend_handles_labels()
    more = loss.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="center right")
    ax.set_title(title or "Training the control")
    fig.tight_layout()
    return fig


def control_setup_text(profile_name: str, sizes: Mapping, training: Mapping, prompt) -> str:
    """Two lines: the profile, the run sizes and the checkpoint's training record; one sequence (``prompt.text``)
    and its gold label ``L{prompt.gold}``."""
    return (f"{profile_name} {sizes} | training: {training}\n"
            f"one sequence: {prompt.text} -> gold L{prompt.gold}")


def show_control_setup(profile_name: str, sizes: Mapping, training: Mapping, prompt) -> None:
    """Print :func:`control_setup_text`."""
    print(control_setup_text(profile_name, sizes, training, prompt))


def show_control_training(curve: pd.DataFrame, n_labels: int, info: Mapping, name: str,
                          model_name: str | None = None) -> None:
    """The shipped checkpoint's training curve (:func:`plot_training_curve`, chance ``1 / n_labels``), titled with
    the recipe's seed and the training time from ``info`` (:func:`helpers.core.control.checkpoint_info`), saved as
    figure ``name`` (:func:`helpers.study.results.save_figure`) and shown."""
    title = f"Training the control (seed {info['recipe']['seed']}, {info['training']['seconds']:.0f} s on the CPU)"
    fig = plot_training_curve(curve, 1 / n_labels, title)
    show_figure(fig, name, model_name=model_name)


def control_premise_table(acc, held, swap: Mapping) -> pd.DataFrame:
    """One column ``[95% CI]``: accuracy on training classes (``acc``) and on held-out classes (``held``), and the
    label swap's ``swap_averaged``, ``follows`` and ``same`` intervals, each formatted to 3 decimals."""
    return pd.DataFrame({"[95% CI]": {
        "accuracy, training classes": f"{acc:.3f}", "accuracy, classes never seen in training": f"{held:.3f}",
        "label swap: swap-averaged accuracy": f"{swap['swap_averaged']:.3f}",
        "label swap: answer moves with the labels": f"{swap['follows']:.3f}",
        "label swap: same answer (a label prior)": f"{swap['same']:.3f}"}})


def show_control_premise(acc, held, swap: Mapping) -> None:
    """Display :func:`control_premise_table`."""
    display(control_premise_table(acc, held, swap))


def control_circuit_table(mean_scores) -> pd.DataFrame:
    """Columns ``L{layer}H{head}``, rows (a) and (b): the two circuit attentions ``mean_scores[layer, head, 0|1]``
    (a [layer, head, 2] array or tensor, averaged over sequences), to 2 decimals."""
    m = mean_scores
    n_layers, n_heads = m.shape[:2]
    return pd.DataFrame({f"L{l}H{h}": {"(a) label -> its item": f"{m[l, h, 0]:.2f}",
                                       "(b) q -> labels of the query's class": f"{m[l, h, 1]:.2f}"}
                         for l in range(n_layers) for h in range(n_heads)})


def control_uniform_text(prompt) -> str:
    """What uniform causal attention would give for (a) (mean over label positions p of 1 / (p + 1)) and (b)
    (2 matching labels of 8: 2 / (q + 1)) on ``prompt``."""
    a = np.mean([1 / (p + 1) for p in prompt.label_pos])
    return f"Uniform attention would give (a) {a:.2f} and (b) {2 / (prompt.q + 1):.2f} (2 of the 8 labels match)."


def show_control_circuit(mean_scores, prompt) -> None:
    """Display :func:`control_circuit_table` and print :func:`control_uniform_text` for ``prompt``."""
    display(control_circuit_table(mean_scores))
    print(control_uniform_text(prompt))


def show_control_saliency(table: pd.DataFrame, frame: pd.DataFrame, intervals: Mapping) -> None:
    """Display the saliency flows' interval table (``helpers.experiments.saliency.flow_interval_table``), then the
    flow curves of ``frame`` (``flow_frame``) with their 95% bands (``plots.plot_flow_curves``)."""
    display(table)
    show_figure(plot_flow_curves(frame, intervals=intervals))


_ISOLATION = (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last"))


def control_isolation_table(loyal: Mapping, frame: pd.DataFrame) -> pd.DataFrame:
    """Columns ``{condition} words, {where} layer``; rows: label loyalty (``loyal[(condition, where,
    "label_loyal")]``, an interval) and the mean accuracy of the rows of ``frame`` (columns condition, where,
    accuracy; ``helpers.experiments.isolation.loyalty_frame``) of that condition, to 3 decimals."""
    return pd.DataFrame({f"{c} words, {w} layer": {
        "label loyalty": f"{loyal[(c, w, 'label_loyal')]:.3f}",
        "accuracy": f"{frame[(frame.condition == c) & (frame['where'] == w)].accuracy.mean():.3f}"}
        for c, w in _ISOLATION})


def show_control_isolation(loyal: Mapping, frame: pd.DataFrame) -> None:
    """Display :func:`control_isolation_table`."""
    display(control_isolation_table(loyal, frame))


def control_ablation_table(intervals: Mapping) -> pd.DataFrame:
    """One column ``accuracy [95% CI]``, a row per ablation condition of ``intervals``, to 3 decimals."""
    return pd.DataFrame({"accuracy [95% CI]": {c: f"{iv:.3f}" for c, iv in intervals.items()}})


def control_one_head_table(accuracy) -> pd.DataFrame:
    """``accuracy[layer][head]`` (one head ablated at every position) as a table: rows ``layer l``, columns
    ``head h``, rounded to 3 decimals, the axis named for what the cells are."""
    a = np.asarray(accuracy, dtype=float)
    return pd.DataFrame(a, index=[f"layer {l}" for l in range(a.shape[0])], columns=[f"head {h}" for h in range(a.shape[1])]
                        ).round(3).rename_axis("accuracy, one head ablated everywhere (first seed)")


def show_control_heads(scores, heads: Sequence, ablation: Mapping, intervals: Mapping, one_head) -> None:
    """Section 3.4's ablation results: the chosen in-context ``heads`` and each seed's random heads (``ablation``:
    ``{(task, seed): {"random_heads": ...}}``), the ablation :func:`control_ablation_table` of ``intervals``, the
    :func:`control_one_head_table` of ``one_head``, and the head map of ``scores.mean_gain`` / ``scores.mean_drop``
    with ``heads`` boxed (``plots.plot_head_map``)."""
    print(f"in-context head {heads}; random heads per seed {[r['random_heads'] for r in ablation.values()]}")
    display(control_ablation_table(intervals))
    display(control_one_head_table(one_head))
    show_figure(plot_head_map(scores.mean_gain, scores.mean_drop, heads, "control: head attribution at q"))


def control_two_way_text(mapping: Mapping, carrying, two_towers: Mapping) -> str:
    """One line: the 2-way mapping control (``mapping["swap_averaged"]``, ``mapping["same_word"]``), the
    label-carrying rate and the two towers' intervals (``None``: no estimate), to 3 decimals."""
    towers = {k: (f"{v:.3f}" if v is not None else "no estimate") for k, v in two_towers.items()}
    return (f"2-way: swap-averaged accuracy {mapping['swap_averaged']:.3f}, same answer after the swap "
            f"{mapping['same_word']:.3f}; label-carrying rate {carrying:.3f}; two towers {towers}")


def show_control_two_way(mapping: Mapping, carrying, two_towers: Mapping) -> None:
    """Print :func:`control_two_way_text`."""
    print(control_two_way_text(mapping, carrying, two_towers))


def control_hidden_anchor_table(intervals: Mapping) -> pd.DataFrame:
    """A row per anchor-only condition of ``intervals`` (accuracy or loyalty), one column ``[95% CI]``, to 3
    decimals."""
    return pd.DataFrame({k: {"[95% CI]": f"{iv:.3f}"} for k, iv in intervals.items()}).T


def show_control_hidden_anchor(intervals: Mapping) -> None:
    """Display :func:`control_hidden_anchor_table`."""
    display(control_hidden_anchor_table(intervals))
