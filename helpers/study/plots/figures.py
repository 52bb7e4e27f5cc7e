"""Showing a figure in a notebook: every ``show_*`` function of the plots modules shows its figures through
:func:`show_figure`, which saves each under the name the results folder and the README use."""

from __future__ import annotations

import matplotlib.pyplot as plt
from IPython.display import display

__all__ = ["show_figure"]


def show_figure(fig, name: str | None = None, model_name: str | None = None) -> None:
    """Save ``fig`` as ``figures/<name>.png`` in the results folder (:func:`helpers.study.results.save_figure`;
    not saved when ``name`` is None), show it where it stands in the output, and close it (so the notebook does
    not show it a second time at the end of the cell). Every ``show_*`` function of these modules shows its
    figures through this."""
    from helpers.study.results import save_figure

    if name is not None:
        save_figure(fig, name, model_name=model_name)
    display(fig)
    plt.close(fig)
