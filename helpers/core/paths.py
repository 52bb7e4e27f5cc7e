"""Where this project keeps what it builds once and reuses: the cache folder.

``cache_dir()`` is ``$ICL_ANCHORS_CACHE`` or the user cache folder (``~/.cache/icl-anchors`` on Linux). It holds
the offline models' dequantised weights and SmolLM2's GGUF file (:mod:`helpers.core.offline_models`), the GPT-2
and control tokenizers, and the result store (:mod:`helpers.core.store`, unless ``$ICL_RESULTS_CACHE`` is set).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Where dequantised weights are cached (``$ICL_ANCHORS_CACHE`` overrides)."""
    env = os.environ.get("ICL_ANCHORS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("icl-anchors"))

