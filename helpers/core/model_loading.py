"""What every model loader shares: its errors, a quiet transformers, and the step from converted weights to a
HookedTransformer.

The loaders themselves are :func:`helpers.core.models.load_model` (names, dtypes, local folders),
:mod:`helpers.core.offline_models` (the two GGUF models) and :mod:`helpers.core.hub` (TransformerLens names from
the Hugging Face hub). Each one builds the model with :func:`hooked_from_state`, without weight processing, and
sets ``cfg.default_prepend_bos`` to the model's convention, which :func:`uses_bos` reads.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["tokenizer_kwargs", "ModelLoadError", "UnknownModelError", "MissingWeightsError", "NoNetworkError",
           "LocalModelError", "uses_bos",
           "hooked_from_state", "load_hf", "quiet_loading"]


class ModelLoadError(RuntimeError):
    """Base class: the model could not be loaded; the message says what to do."""


class UnknownModelError(ModelLoadError, ValueError):
    pass


class MissingWeightsError(ModelLoadError):
    pass


class NoNetworkError(ModelLoadError):
    pass


class LocalModelError(ModelLoadError, ValueError):
    """A local model directory that cannot be loaded (missing, not a model, unsupported architecture)."""



def quiet_loading():
    """Silence transformers / TransformerLens chatter (progress bars, deprecations)."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    for name in ("transformers", "transformer_lens", "gguf"):
        lg = logging.getLogger(name)
        old = lg.level
        lg.setLevel(logging.ERROR)
        stack.callback(lg.setLevel, old)
    old_env = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    stack.callback(
        lambda: os.environ.__setitem__("TRANSFORMERS_VERBOSITY", old_env)
        if old_env is not None
        else os.environ.pop("TRANSFORMERS_VERBOSITY", None)
    )
    try:
        from transformers.utils import logging as hf_logging  # lazy: transformers takes seconds to import

        hf_logging.disable_progress_bar()
        stack.callback(hf_logging.enable_progress_bar)
    except Exception:  # pragma: no cover
        pass
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def tokenizer_kwargs(dirpath: Path) -> dict:
    """How to load a saved folder's tokenizer as TransformerLens will use it: ``add_bos_token=True`` when it has a
    BOS token that it does not add by itself. TransformerLens' ``set_tokenizer`` needs such a tokenizer and, given
    another, loads the whole tokenizer from its folder a second time with that flag (``get_tokenizer_with_bos``):
    seconds for Gemma's 262k-token vocabulary, on every model load. Loaded this way it is kept as it is."""
    import json

    path = Path(dirpath) / "tokenizer_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    return {"add_bos_token": True} if config.get("bos_token") and not config.get("add_bos_token") else {}


def load_hf(dirpath: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """The transformers model of a saved folder, loaded in ``dtype`` straight onto ``device`` (no host copy first),
    and its tokenizer as TransformerLens uses it (:func:`tokenizer_kwargs`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers takes seconds to import

    with quiet_loading():
        tok = AutoTokenizer.from_pretrained(dirpath, **tokenizer_kwargs(dirpath))
        hf = AutoModelForCausalLM.from_pretrained(dirpath, dtype=dtype, device_map=str(device))
    hf.eval()
    return hf, tok


def hooked_from_state(cfg, state: dict, tokenizer=None):
    """A HookedTransformer whose parameters *are* the tensors of ``state`` (converted from a transformers model
    without weight processing), on ``cfg.device``.

    TransformerLens' own path builds the model with freshly initialised weights, then copies every converted
    tensor into them (after a float32 round trip for other dtypes): two more copies of the weights while the
    transformers model is still alive. Here the model's parameters are created empty (accelerate's
    ``init_empty_weights``: on the meta device; buffers such as rotary tables stay real) and
    ``load_state_dict(assign=True)`` makes the converted tensors its parameters. Those are mostly views of the
    transformers model's weights, so on the target device the weights exist once. Keys TransformerLens fills
    with defaults (a missing norm weight: 1, a missing bias: 0) are made on the device.
    """
    from accelerate import init_empty_weights  # lazy: only while a model loads
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading

    with init_empty_weights(include_buffers=False):
        model = HookedTransformer(cfg, tokenizer, move_to_device=False, default_padding_side="right")
    state = loading.fill_missing_keys(model, dict(state))  # TransformerLens' checks and warnings
    device = torch.device(cfg.device)
    for key, value in state.items():
        if value.is_meta:  # a default of the empty model
            value = (torch.ones if key.rsplit(".", 1)[-1] == "w" else torch.zeros)(value.shape, dtype=cfg.dtype)
        state[key] = value.to(device=device, dtype=cfg.dtype)
    _, unexpected = model.load_state_dict(state, strict=False, assign=True)
    empty = [name for name, p in model.named_parameters() if p.is_meta]
    if empty or unexpected:
        raise ModelLoadError(f"Converting the weights left parameters without values {empty[:5]} or unknown keys "
                             f"{unexpected[:5]}: this TransformerLens version names them differently.")
    model.move_model_modules_to_device()  # the buffers; the parameters are there already
    return model



def uses_bos(model: HookedTransformer) -> bool:
    """Whether prompts for this model start with BOS (positions are counted after it)."""
    return bool(model.cfg.default_prepend_bos)

