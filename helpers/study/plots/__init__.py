"""Figures (seaborn/matplotlib) and interactive views (circuitsvis; the flow view of :mod:`.flow`).

One submodule per part of the collection; everything is re-exported here so
notebooks write ``from helpers.study import plots`` and call ``plots.<name>``.
"""

import pandas as _pd

from .analysis import *  # noqa: F401,F403  notebooks 01-03
from .applications import *  # noqa: F401,F403  notebooks 04-06
from .control import *  # noqa: F401,F403  notebook 09
from .figures import *  # noqa: F401,F403  show_figure, for every notebook
from .flow import *  # noqa: F401,F403  notebooks 01, 08, 09: one prompt's flows as a graph (paper A's Fig. 1)
from .heads import *  # noqa: F401,F403  notebook 07
from .own_task import *  # noqa: F401,F403  notebook 08
from .setting import *  # noqa: F401,F403  notebook 00

# A table a notebook shows is read whole: pandas cuts a cell past 50 characters with "..." by default, which cut
# the claims tables' paper, ours and criterion cells. The rendered site wraps long cells and gives a wide table
# its own scroll box (docs/_static/site.css).
_pd.set_option("display.max_colwidth", None)
_pd.set_option("display.max_columns", None)  # a wide table scrolls in its box; columns are never cut with "..."
MISSING = "no value"  # what a table shows for a value that is undefined (e.g. a spread of one seed), not NaN


def frame_html(df: _pd.DataFrame) -> str:
    """A table as a notebook shows it, with an undefined value shown as :data:`MISSING` instead of NaN."""
    return df.to_html(notebook=True, na_rep=MISSING, border=1)


def _register() -> None:
    """In Jupyter, every DataFrame a notebook displays goes through :func:`frame_html`."""
    from IPython import get_ipython  # lazy: only inside a notebook

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(_pd.DataFrame, frame_html)


_register()
