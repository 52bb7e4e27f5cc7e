"""Figures (seaborn/matplotlib) and interactive views (circuitsvis).

One submodule per part of the collection; everything is re-exported here so
notebooks write ``from helpers.study import plots`` and call ``plots.<name>``.
"""

from .analysis import *  # noqa: F401,F403  notebooks 01-03
from .applications import *  # noqa: F401,F403  notebooks 04-06
from .control import *  # noqa: F401,F403  notebook 09
from .heads import *  # noqa: F401,F403  notebook 07
from .own_task import *  # noqa: F401,F403  notebook 08
from .setting import *  # noqa: F401,F403  notebook 00
