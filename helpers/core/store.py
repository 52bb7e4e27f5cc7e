"""A content-addressed store for expensive results, on disk.

:func:`cached` keeps ``compute()``'s result under a key built from (kind, model, task, seed, profile,
parameters), a digest of the source of ``helpers/`` (:func:`code_digest`), of the data
(:func:`data_digest`) and, when given the model, of its weights (:func:`model_fingerprint`). A task
loaded from a spec file adds its digest (:func:`task_identity`: template, label words, separator, data
checksums). So any change to the code that computed a result, e.g. a protocol fix, recomputes it instead
of serving the old one. Writes are atomic, so an interrupted run resumes; ``ICL_RECOMPUTE=1`` forces
recomputation. The store is ``$ICL_RESULTS_CACHE`` or ``cache_dir()/results`` (``make test`` points it
at a fresh folder so tests never pass on old results).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["cached", "CACHE_VERSION", "model_fingerprint", "prompts_digest", "code_digest", "data_digest",
           "task_identity"]

# bump to invalidate every stored result (the code digest already covers changes to helpers/)
CACHE_VERSION = 2
HELPERS = Path(__file__).resolve().parent.parent

@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of every ``helpers/**/*.py`` file (paths and contents): part of every :func:`cached` key."""
    h = hashlib.sha256()
    for f in sorted(HELPERS.rglob("*.py")):
        h.update(str(f.relative_to(HELPERS)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _jsonable(obj: Any):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def data_digest() -> str:
    """Digest of the data root's ``checksums.json`` (every data file is verified against it when loaded, so it
    identifies the data); "none" when there is none."""
    from helpers.core.tasks import data_dir

    path = data_dir() / "checksums.json"
    if not path.exists():
        return "none"
    return _file_digest(str(path), path.stat().st_mtime_ns, path.stat().st_size)


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def task_identity(task) -> str | None:
    """The digest of a task loaded from a spec file (its template, label words, separator and data checksums);
    None for a shipped task (the code and data digests already identify those) or a name that is no task."""
    from helpers.core.tasks import Task, UnknownTaskError, get_task

    if not isinstance(task, (str, Task)):
        return None
    try:
        return get_task(task).digest or None
    except (UnknownTaskError, ValueError, OSError):
        return None


def _key(kind: str, params: dict) -> str:
    params = dict(params)
    tid = task_identity(params.get("task"))
    if tid is not None:  # a user's task: its spec and data, not only its name
        params["task_digest"] = tid
    blob = json.dumps({"kind": kind, "v": CACHE_VERSION, "code": code_digest(), "data": data_digest(),
                       **_jsonable(params)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def model_fingerprint(model: HookedTransformer) -> str:
    """Digest of a model's name, config and weights, for content-keyed caches.

    Every parameter contributes its name, shape, dtype and first and last 64
    values, so a cached result never outlives the weights it came from (another
    checkpoint, a fine-tune, a different dtype) even under the same name.
    """
    h = hashlib.sha256()
    h.update(str(getattr(model.cfg, "icl_model_name", model.cfg.model_name)).encode())
    h.update(repr(sorted((k, str(v)) for k, v in model.cfg.to_dict().items())).encode())
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
            h.update(torch.cat([flat[:64], flat[-64:]]).float().cpu().numpy().tobytes())
    return h.hexdigest()[:24]


def prompts_digest(prompts, label_ids=()) -> str:
    """Digest of every prompt's tokens, query position and gold label (and ``label_ids``)."""
    h = hashlib.sha256(repr([int(i) for i in label_ids]).encode())
    for p in prompts:
        h.update(p.tokens.to(torch.int64).cpu().numpy().tobytes())
        h.update(f"|{int(p.q)}|{p.gold}|".encode())
    return h.hexdigest()[:24]


def cached(kind: str, params: dict, compute: Callable[[], Any], cache: bool = True, model=None) -> Any:
    """``compute()``'s result, cached on disk under (kind, params).

    ``params`` must name everything the result depends on (model, task, seed,
    profile, sizes...). The key also holds a digest of the code in ``helpers/``
    (:func:`code_digest`), of the data (:func:`data_digest`: the checksums every data file is verified
    against) and, with ``model``, of the model's weights (:func:`model_fingerprint`), so a changed
    protocol, data file or checkpoint under the same name is recomputed, never served. Results are
    saved with ``torch.save`` (tensors, dicts, lists, dataclasses of those). ``ICL_RECOMPUTE=1`` or
    ``cache=False`` recomputes (and refreshes the stored copy).
    """
    from helpers.core.models import cache_dir

    if model is not None:
        params = {**params, "weights": model_fingerprint(model)}
    root = Path(os.environ["ICL_RESULTS_CACHE"]) if os.environ.get("ICL_RESULTS_CACHE") else cache_dir() / "results"
    path = root / kind / f"{_key(kind, params)}.pt"
    force = os.environ.get("ICL_RECOMPUTE", "") not in ("", "0")
    if cache and not force and path.exists():
        try:
            return torch.load(path, weights_only=False)
        except Exception:
            pass  # unreadable: recompute
    out = compute()
    if cache:
        import io

        buf = io.BytesIO()
        torch.save(out, buf)
        _atomic_write_bytes(path, buf.getvalue())
    return out
