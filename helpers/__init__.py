"""helpers: the tested logic behind the notebooks (see README.md).

Modules: models (loading), tasks (data, templates, label words), prompts
(sampling, rendering, position record), predict (batched label-restricted
prediction), profiles (run sizes).
"""

import os as _os
import warnings as _warnings

# TransformerLens 3.x announces its successor on import; keep notebooks quiet.
_warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"transformer_lens.*")
_warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformer_lens.*")
_warnings.filterwarnings("ignore", message=r".*TransformerLens.*", category=UserWarning)
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
