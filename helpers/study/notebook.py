"""What a notebook asks of its kernel, in one call: :func:`start`.

Nothing in ``helpers`` changes a setting when it is imported (tests/test_layers.py imports every module and
checks): no warning filter, no environment variable, no display formatter. A notebook's setup cell asks for the
three it wants by starting with ``profile = notebook.start()`` instead of ``get_profile()``:

- TransformerLens 3.x's announcements of its successor (a DeprecationWarning, a FutureWarning and a UserWarning
  on import) are not shown; the collection says which TransformerLens it runs on where it matters
  (docs/transformerlens4.md);
- ``TOKENIZERS_PARALLELISM`` is ``false`` unless set: the tokenizers' threads and a forked worker do not mix;
- every DataFrame the notebook displays goes through :func:`helpers.study.plots.frame_html` (no cell cut short).
"""

from __future__ import annotations

import os
import warnings

from helpers.study.profiles import Profile, get_profile

__all__ = ["start", "quiet"]


def quiet() -> None:
    """TransformerLens 3.x's import-time announcements hidden, tokenizers kept single-threaded (module docstring)."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"transformer_lens.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformer_lens.*")
    warnings.filterwarnings("ignore", message=r".*TransformerLens.*", category=UserWarning)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def start(name: str | None = None) -> Profile:
    """:func:`quiet`, DataFrames shown whole (:func:`helpers.study.plots.show_frames`), and the run's profile
    (:func:`helpers.study.profiles.get_profile`, which refuses settings that cannot be honoured)."""
    from helpers.study.plots import show_frames  # lazy: matplotlib and seaborn load with the figures

    quiet()
    show_frames()
    return get_profile(name)
