"""Figures (seaborn/matplotlib) and interactive views (circuitsvis; the flow view of :mod:`.flow`).

One submodule per part of the collection; everything is re-exported here so
notebooks write ``from helpers.study import plots`` and call ``plots.<name>``.
"""

import pandas as _pd

from .after import *  # noqa: F401,F403  notebook 11
from .analysis import *  # noqa: F401,F403  notebooks 01-03
from .applications import *  # noqa: F401,F403  notebooks 04-06
from .challengers import *  # noqa: F401,F403  notebook 10
from .control import *  # noqa: F401,F403  notebook 09
from .figures import *  # noqa: F401,F403  show_figure, for every notebook
from .flow import *  # noqa: F401,F403  notebooks 01, 08, 09: one prompt's flows as a graph (paper A's Fig. 1)
from .heads import *  # noqa: F401,F403  notebook 07
from .own_task import *  # noqa: F401,F403  notebook 08
from .setting import *  # noqa: F401,F403  notebook 00

MISSING = "no value"  # what a table shows for a value that is undefined (e.g. a spread of one seed), not NaN


def frame_html(df: _pd.DataFrame) -> str:
    """A table as a notebook shows it: read whole, with an undefined value shown as :data:`MISSING` instead of NaN.

    pandas cuts a cell past 50 characters and the columns of a wide table with "..." by default, which cut the
    claims tables' paper, ours and criterion cells; here neither is cut (the rendered site wraps long cells and
    gives a wide table its own scroll box, docs/_static/site.css). The options hold for this table only: pandas'
    global settings stay as the reader has them."""
    with _pd.option_context("display.max_colwidth", None, "display.max_columns", None):
        return df.to_html(notebook=True, na_rep=MISSING, border=1, max_cols=None)


def show_frames() -> None:
    """In Jupyter, every DataFrame the notebook displays goes through :func:`frame_html` from now on
    (:func:`helpers.study.notebook.start` asks for it); outside a notebook nothing changes, and no pandas or
    matplotlib setting is touched. Importing ``plots`` changes nothing."""
    from IPython import get_ipython  # lazy: only inside a notebook

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(_pd.DataFrame, frame_html)

