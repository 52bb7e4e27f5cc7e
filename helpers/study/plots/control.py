"""Plots for notebook 09 (the positive control)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

__all__ = ["plot_training_curve"]


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
