"""helpers: the tested logic behind the notebooks, in four layers.

- ``helpers.core``: models (loading), tasks (data, templates, label words), prompts (sampling, rendering,
  positions), predict (batched label-restricted prediction, hooks), prefix (the demonstrations run once,
  inputs as suffixes), loyalty, store (results stored by content), unrelated (paper B's foo/bar tasks and
  prompt sets), heads (reading attention heads at the query position). Imports nothing from the other layers.
- ``helpers.study``: profiles (run sizes), results (folders), stats (intervals), paper (the papers' numbers),
  claims (and the readings rendered from them), record (the run records behind the README's tables), report,
  plots. Imports only ``core``.
- ``helpers.experiments``: one module per paper idea (setting, saliency, isolation, aucroc, reweighting,
  compression, diagnosis, and paper B's incontext_heads, two_towers, head_biases, and notebook 09's
  positive_control): the method only. Each imports ``core`` and ``study``, never another experiment.
- ``helpers.exercises``: the notebooks' exercises, one module per method, named as in ``experiments``, each with
  the checks of its exercises (``check_*``) and the typical mistakes they name; grading (``CheckFailed``,
  ``grader``, ...) and tiny (the tiny random models the checks and tests run on). Imports any lower layer; nothing
  imports it (tests/test_layers.py).
"""

import os as _os
import warnings as _warnings

# TransformerLens 3.x announces its successor on import; keep notebooks quiet.
_warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"transformer_lens.*")
_warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformer_lens.*")
_warnings.filterwarnings("ignore", message=r".*TransformerLens.*", category=UserWarning)
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
