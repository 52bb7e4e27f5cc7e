"""A content-addressed store for expensive results, on disk.

:func:`cached` keeps ``compute()``'s result under a key built from (kind, model, task, seed, profile,
parameters), a digest of the code the result depends on (:func:`code_digest` of :func:`step_modules`), of
the data (:func:`data_digest`) and, when given the model, of its weights (:func:`model_fingerprint`). A task
loaded from a spec file adds its digest (:func:`task_identity`: template, label words, separator, data
checksums). So any change to the code that computed a result, e.g. a protocol fix, recomputes it instead
of serving the old one; a change to code that cannot touch it (a figure, a claim's wording, a report), or to a
comment or docstring anywhere (:func:`code_text`), keeps it.

**The code a stored step depends on** (:func:`step_modules`): the ``helpers`` module that asks for the step (and
those defining the function that computes it) and every ``helpers`` module those import, at the top or inside a
function, transitively (:func:`dependencies`), plus the modules that change how a loaded model computes
(:data:`ENGINE`: the patched attention, the matmul precision, the TransformerLens in use), and nothing else. A
step's key holds the code it really runs: editing a controls' training keeps every language-model step, editing
:mod:`helpers.core.predict` misses every step that predicts. Left out, with their own imports:
the modules that keep results (:data:`KEEPING`) and those that only present them (:data:`PRESENTATION`: figures,
claims and the papers' statements,
reports, records), which no computation reads. Stored results therefore hold no claims: a step that grades
keeps the verdicts, whose criteria live in its protocol's module (helpers.protocols). Writes are atomic, so an interrupted run resumes; ``ICL_RECOMPUTE=1`` forces
recomputation. The store is ``$ICL_RESULTS_CACHE`` or ``cache_dir()/results`` (``make test`` points it
at a fresh folder so tests never pass on old results).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from helpers.core import accounting
from helpers.core.checks import model_arg
from helpers.core.paths import cache_dir
from helpers.core.task_data import data_dir
from helpers.core.tasks import Task, UnknownTaskError, get_task

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["cached", "stored", "CACHE_VERSION", "model_fingerprint", "same_weights", "pins_weights", "prompts_digest",
           "code_digest", "code_text", "data_digest", "task_identity", "result_types", "StoreError", "StoreMismatch",
           "PRESENTATION", "KEEPING", "ENGINE", "module_file", "module_imports", "file_imports", "dependencies", "step_modules",
           "atomic_write_bytes", "jsonable"]

class StoreError(TypeError):
    """A result that the store could not read back safely (a type that is not a registered result type)."""


_RESULT_TYPES: list = []


def result_types(*classes):
    """Allow ``classes`` (dataclasses a helper returns) in stored results; usable as a class decorator.

    The store reads its files with ``torch.load(weights_only=True)``: only tensors, containers, numbers,
    strings, numpy arrays and these registered classes are rebuilt, so a file placed in the cache folder
    cannot run code when read.
    """
    for c in classes:
        if c not in _RESULT_TYPES:
            _RESULT_TYPES.append(c)
    return classes[0] if len(classes) == 1 else classes


def _safe_globals() -> list:
    try:  # where numpy keeps multiarray depends on its version
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    return [*_RESULT_TYPES, np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar,
            *{type(np.dtype(c)) for c in "?bhilqBHILQefdgFDG"}]


def _load(data: bytes):
    with torch.serialization.safe_globals(_safe_globals()):
        return torch.load(io.BytesIO(data), weights_only=True)


def _dump(out, kind: str) -> bytes:
    """``torch.save`` bytes of ``out``, checked to load back under ``weights_only=True``."""
    buf = io.BytesIO()
    torch.save(out, buf)
    data = buf.getvalue()
    try:
        _load(data)
    except Exception as e:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
        raise StoreError(f"the result of {kind!r} holds types the store does not read back ({unsafe or e}): "
                         "register them with helpers.core.store.result_types, or return plain tensors, "
                         "lists and dicts") from e
    return data


# bump to invalidate every stored result (the code digest already covers changes to the code a step depends on)
CACHE_VERSION = 3
HELPERS = Path(__file__).resolve().parent.parent
# modules that only present results: no stored step reads them, so editing them keeps every stored step
PRESENTATION = ("helpers.study.plots", "helpers.study.claims", "helpers.study.paper", "helpers.study.report",
                "helpers.study.record", "helpers.study.record_code", "helpers.study.record_file",
                "helpers.study.challengers_report", "helpers.study.heads_report",
                "helpers.study.power_report", "helpers.study.readings", "helpers.exercises")
# modules that keep results and time them but compute none: this module (a change to how keys or files are made
# bumps CACHE_VERSION) and the accounting of where time goes
KEEPING = ("helpers.core.store", "helpers.core.accounting")
# modules that change how a loaded model computes, applied when it loads rather than imported by the step that runs
# it (TransformerLens' patched attention, the matmul precision, which TransformerLens runs the model): every step's
# key holds them, as the weights fingerprint holds the weights
ENGINE = ("helpers.core.tl_patches", "helpers.core.precision", "helpers.core.backend")


def module_file(name: str) -> Path | None:
    """The file of a ``helpers`` module (``helpers.a.b`` -> ``helpers/a/b.py`` or ``helpers/a/b/__init__.py``)."""
    rel = Path(*name.split(".")[1:])
    for f in (HELPERS / rel.with_suffix(".py"), HELPERS / rel / "__init__.py"):
        if f.is_file():
            return f
    return None


@functools.cache
def module_imports(name: str) -> frozenset[str]:
    """The ``helpers`` modules that module ``name`` imports, at its top or inside functions (relative imports
    resolved; ``from helpers.a import b`` counts ``helpers.a.b`` when that is a module)."""
    path = module_file(name)
    if path is None:
        return frozenset()
    return file_imports(path, name if path.name == "__init__.py" else name.rpartition(".")[0])


def file_imports(path: Path, pkg: str = "") -> frozenset[str]:
    """The ``helpers`` modules a Python file imports (a module of package ``pkg``, or a notebook's source)."""
    import ast  # lazy: only when a digest is first made

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out.update(m for m in found if m.startswith("helpers.") and module_file(m) is not None)
    return frozenset(out)


def _presentation(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PRESENTATION)


def _skipped(name: str) -> bool:
    return _presentation(name) or name in KEEPING


def _core() -> set[str]:
    return {".".join(("helpers", *f.relative_to(HELPERS).with_suffix("").parts)) for f in (HELPERS / "core").rglob("*.py")
            if f.stem != "__init__"}


@functools.cache
def dependencies(modules: frozenset[str]) -> tuple[str, ...]:
    """``modules`` and every ``helpers`` module they import, transitively, without :data:`PRESENTATION`'s and
    :data:`KEEPING`'s (whose own imports are not followed either), plus :data:`ENGINE` and what it imports; sorted.
    Nothing else: editing a module that none of them imports (a control's training, a figure) keeps the step. With
    no ``modules`` (no ``helpers`` module asked: a notebook or a test calling the store itself), every module of
    ``helpers/core`` stands in for them."""
    roots = set(modules) if modules else _core()
    seen, todo = set(), [m for m in roots | set(ENGINE) if not _skipped(m)]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(d for d in module_imports(m) if d not in seen and not _skipped(d))
    return tuple(sorted(seen))


def step_modules(compute: Callable | None = None) -> frozenset[str]:
    """The roots of a stored step's :func:`dependencies`: the ``helpers`` module whose code asks the store (the
    nearest caller outside this module), and the ``helpers`` modules that define ``compute`` and the functions its
    closure holds, and theirs, to any depth (a step computed by a function passed in from another module, e.g.
    :func:`helpers.study.profiles.label_span_runs`, or a method's cell of :func:`helpers.core.grid.run_grid`). Empty when no ``helpers`` module asks (a notebook, a test):
    then every module of helpers/core keys the step. A step that several notebooks share (vanilla predictions) is asked for
    by the same module whoever calls it, so it keeps one key."""
    import sys  # lazy: only to read the stack

    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    out = {name} if name.startswith("helpers.") else set()
    stack, seen = ([compute] if compute is not None else []), set()
    while stack:  # compute, the functions its closure holds, theirs in turn (a run grid's cell calls the method)
        f = stack.pop()
        f = f.func if isinstance(f, functools.partial) else f
        if not callable(f) or id(f) in seen:
            continue
        seen.add(id(f))
        mod = getattr(f, "__module__", None)
        if isinstance(mod, str) and mod.startswith("helpers.") and mod != __name__:
            out.add(mod)
        for cell in getattr(f, "__closure__", None) or ():
            try:
                stack.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    return frozenset(out)


def _names_all(node) -> bool:
    """Whether ``node`` is a module-level assignment to ``__all__`` (``=``, ``+=`` or annotated)."""
    import ast  # lazy: only when a digest is first made

    targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
               if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def code_text(source: str) -> str:
    """What of a module's source can change a result: its syntax tree without comments and docstrings (the string
    that opens a module, class or function) and without its ``__all__`` (which names may be imported from it, read
    only by a star import, and no module that computes star-imports: tests/test_layers.py), so that rewording either,
    or naming one more public function, keeps every stored step."""
    import ast  # lazy: only when a digest is first made

    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not _names_all(n)]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


@functools.cache
def code_digest(modules: tuple[str, ...] | None = None) -> str:
    """Digest of the files of ``modules`` (paths and :func:`code_text`; :func:`dependencies` gives them), or of every
    ``helpers/**/*.py`` file when None: part of every :func:`cached` key."""
    files = sorted(HELPERS.rglob("*.py")) if modules is None else [module_file(m) for m in modules]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(HELPERS)).encode())
        h.update(code_text(f.read_text()).encode())
    return h.hexdigest()[:16]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def jsonable(obj: Any):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def data_digest() -> str:
    """Digest of the data root's ``checksums.json`` (every data file is verified against it when loaded, so it
    identifies the data); "none" when there is none."""
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
    if not isinstance(task, (str, Task)):
        return None
    try:
        return get_task(task).digest or None
    except (UnknownTaskError, ValueError, OSError):
        return None


def _key(kind: str, params: dict, modules: frozenset[str] = frozenset()) -> str:
    """The key of a stored step: ``kind``, ``params``, the data, and the code of ``modules``' dependencies
    (:func:`dependencies`; every module of helpers/core when no ``helpers`` module asked)."""
    params = dict(params)
    tid = task_identity(params.get("task"))
    if tid is not None:  # a user's task: its spec and data, not only its name
        params["task_digest"] = tid
    blob = json.dumps({"kind": kind, "v": CACHE_VERSION, "code": code_digest(dependencies(modules)),
                       "data": data_digest(), **jsonable(params)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


FINGERPRINT_STEP = "(weights fingerprint)"  # its time in the accounting table (helpers.core.accounting)
_PINNED: dict[int, tuple[tuple, str]] = {}  # id(model) -> (parameter versions, fingerprint) inside same_weights


def _versions(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _param_bytes(p: torch.Tensor):
    t = p.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).cpu().numpy()


def model_fingerprint(model: HookedTransformer) -> str:
    """Digest of a model's name, config and every byte of every parameter, for content-keyed caches.

    The sha256 covers each parameter's name, shape, dtype and all its values, so any edit of any value (one
    head's rows of ``W_O`` zeroed, a fine-tune, another checkpoint or dtype under the same name) gives another
    fingerprint, and a stored result never outlives the weights it came from.

    Cost (sha256 is bound by one CPU core): Gemma 3 270M (436M values as TransformerLens holds them, embedding
    and unembedding apart; 1.7 GB in float32) takes 2-3 s (measured 1.9-3.1 s on a shared 2-core machine); a
    tiny test model well under a millisecond. The run helpers hash once per call (:func:`pins_weights`), not
    once per stored result; within :func:`same_weights` a repeat costs 1.5 ms.
    """
    pinned = _PINNED.get(id(model))
    if pinned is not None and pinned[0] == _versions(model):
        return pinned[1]
    h = hashlib.sha256()
    h.update(str(getattr(model.cfg, "icl_model_name", model.cfg.model_name)).encode())
    # the config in a canonical form: a dict held in it (a control's checkpoint metadata) may come back from each
    # read in another key order, and the same weights must keep one fingerprint
    h.update(json.dumps(model.cfg.to_dict(), sort_keys=True, default=str).encode())
    with torch.no_grad(), accounting.step(FINGERPRINT_STEP):
        for name, p in model.named_parameters():
            h.update(f"|{name}{tuple(p.shape)}{p.dtype}|".encode())
            h.update(_param_bytes(p))
    fp = h.hexdigest()[:24]
    if pinned is not None:
        _PINNED[id(model)] = (_versions(model), fp)
    return fp


@contextlib.contextmanager
def same_weights(model):
    """Within the block, :func:`model_fingerprint` of ``model`` is computed once (again only after an in-place
    edit of a parameter: its version counter moves). For helpers that store many results of one model in one
    call; the weights must not change through ``.data`` inside the block."""
    if model is None or id(model) in _PINNED:  # re-entrant: the outer block owns the memo
        yield
        return
    _PINNED[id(model)] = ((), "")
    try:
        yield
    finally:
        _PINNED.pop(id(model), None)


def pins_weights(fn):
    """Decorator: run ``fn(model, ...)`` inside :func:`same_weights` of its first argument, after checking that it is
    a loaded model (:func:`helpers.core.checks.model_arg`)."""
    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        model_arg(model)  # a name or None gets a message that says how to load a model, not an AttributeError
        with same_weights(model):
            return fn(model, *args, **kwargs)
    return wrapper


def prompts_digest(prompts, label_ids=()) -> str:
    """Digest of every prompt's tokens, query position and gold label (and ``label_ids``)."""
    h = hashlib.sha256(repr([int(i) for i in label_ids]).encode())
    for p in prompts:
        h.update(p.tokens.to(torch.int64).cpu().numpy().tobytes())
        h.update(f"|{int(p.q)}|{p.gold}|".encode())
    return h.hexdigest()[:24]


def _path(kind: str, params: dict, model=None, modules: frozenset[str] = frozenset()) -> Path:
    if model is not None:
        params = {**params, "weights": model_fingerprint(model)}
    root = Path(os.environ["ICL_RESULTS_CACHE"]) if os.environ.get("ICL_RESULTS_CACHE") else cache_dir() / "results"
    return root / kind / f"{_key(kind, params, modules)}.pt"


def _forced() -> bool:
    return os.environ.get("ICL_RECOMPUTE", "") not in ("", "0")


def stored(kind: str, params: dict, model=None) -> bool:
    """Whether :func:`cached` would read ``(kind, params)`` back instead of computing it (a file under the key,
    and no ``ICL_RECOMPUTE``): for helpers that compute several missing steps together (the file is still
    checked when :func:`cached` reads it; an unreadable one is recomputed there)."""
    return not _forced() and _path(kind, params, model, step_modules()).exists()


class StoreMismatch(RuntimeWarning):
    """A stored entry did not match its digest (edited, truncated or swapped on disk): it was recomputed."""


def _proof_path(path: Path) -> Path:
    return path.with_suffix(".proof.json")


def _proof(kind: str, params: dict, key: str, data: bytes, modules: frozenset[str] = frozenset()) -> dict:
    """What an entry carries beside it: the digest of its bytes and of everything that produced it (the key: kind,
    store version, code, data and the call's arguments after validation, shown in full under ``params``; the
    modules whose code the key holds, under ``code``)."""
    return {"kind": kind, "key": key, "sha256": hashlib.sha256(data).hexdigest(), "params": jsonable(params),
            "code": list(dependencies(modules))}


def _verified(path: Path, kind: str, key: str) -> bytes | None:
    """The entry's bytes if they match the proof written beside them (same key, same content digest); else None,
    after a :class:`StoreMismatch` warning that says what differed."""
    data = path.read_bytes()
    try:
        proof = json.loads(_proof_path(path).read_text())
    except (OSError, ValueError):
        proof = None
    if proof is None:
        why = "it has no proof of its content beside it"
    elif proof.get("key") != key:
        why = "its proof was written for other inputs"
    elif proof.get("sha256") != hashlib.sha256(data).hexdigest():
        why = "its content changed after it was written"
    else:
        return data
    warnings.warn(f"store: the {kind!r} entry {path.name} is not served, {why}: recomputing it", StoreMismatch,
                  stacklevel=3)
    return None


def cached(kind: str, params: dict, compute: Callable[[], Any], cache: bool = True, model=None) -> Any:
    """``compute()``'s result, cached on disk under (kind, params).

    ``params`` must name everything the result depends on (model, task, seed,
    profile, sizes...). The key also holds a digest of the code the step depends on (:func:`step_modules` of the
    module asking and of ``compute`` and their :func:`dependencies`: :func:`code_digest`), of the data (:func:`data_digest`: the checksums every data file is verified
    against) and, with ``model``, of the model's weights (:func:`model_fingerprint`), so a changed
    protocol, data file or checkpoint under the same name is recomputed, never served. Each entry carries a proof
    beside it (``<key>.proof.json``: the digest of its bytes, its key and the arguments that produced it), checked
    on every read: an entry edited, truncated or swapped on disk is recomputed, with a :class:`StoreMismatch`
    warning, never served. Results are
    saved with ``torch.save`` and read with ``torch.load(weights_only=True)`` (tensors, dicts, lists, numpy
    arrays, and the dataclasses registered with :func:`result_types`): a stored file cannot run code. ``ICL_RECOMPUTE=1`` or
    ``cache=False`` recomputes (and refreshes the stored copy).
    """
    full = {**params, "weights": model_fingerprint(model)} if model is not None else params
    modules = step_modules(compute)
    path = _path(kind, full, modules=modules)
    key = path.stem
    force = _forced()
    if cache and not force and path.exists():
        try:
            data = _verified(path, kind, key)
            if data is not None:
                out = _load(data)
                accounting.hit(kind)
                return out
        except Exception:  # unreadable, or holds something other than result types: recompute and replace it
            pass
    with accounting.step(kind):  # off unless ICL_ACCOUNT is set (make run ACCOUNT=1) or make bench records
        out = compute()
    if cache:
        data = _dump(out, kind)
        try:
            atomic_write_bytes(path, data)
            atomic_write_bytes(_proof_path(path), json.dumps(_proof(kind, full, key, data, modules), sort_keys=True,
                                                              default=str).encode())
        except OSError as e:
            raise StoreError(f"cannot write the result store at {path.parent.parent} ({e.strerror or e}): point "
                             f"ICL_RESULTS_CACHE at a folder you can write, or unset it (`make preflight` checks "
                             f"this before a run)") from None
    return out
