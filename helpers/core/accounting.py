"""Where a run's work goes: positions, FLOPs and wall time per experiment step, against this CPU's matmul peak.

Off unless asked for: ``ICL_ACCOUNT`` names a JSON file (``make run ACCOUNT=1`` sets one per notebook), or a
block runs inside :func:`recording` (``make bench``). While on, every forward of a ``HookedTransformer`` is
counted and charged to the innermost stored step that runs it (the ``kind`` of
:func:`helpers.core.store.cached`: ``isolation``, ``saliency``, ...; work outside any step is charged to
``(outside stored steps)``), and so is the wall time between one step's start and end. A step read back from
the store costs nothing and is counted as a hit.

How FLOPs are counted: the matmuls TransformerLens runs, from the shapes of each forward (a multiply-add is 2
FLOPs). Per position and layer: the query, key, value and output projections (key and value with the
model's key-value heads, so grouped-query attention counts fewer), the MLP (three matrices when gated, two
otherwise, none for attention-only models); per layer the attention scores and the pattern times values over
every key (the past key-value cache plus this forward's positions: TransformerLens computes the full square
and masks it, so masked entries count as work done); the unembedding where the forward computes logits
(:func:`count_unembed` adds the label-only and top-k unembeddings done outside a forward). Padding positions
count: they are computed. LayerNorm, softmax, activation functions and the residual adds are not counted.
The count equals ``torch.utils.flop_counter.FlopCounterMode``'s for a forward (tested on three
architectures); it is computed from shapes because the counter mode itself slows every op (about 20% on
Gemma 3 270M). A forward whose output needs a gradient is charged one backward pass: twice its FLOPs when
the model's weights take gradients, once when only activations do (saliency, re-weighting's β).

:func:`matmul_peak` measures this machine's fp32 matmul rate on the model's own weight shapes, in the same
process and at the same thread count, so a step's achieved GFLOP/s reads as a share of what the CPU can do.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from helpers.core.backend import backend

__all__ = ["ENV", "Ledger", "recording", "active", "step", "hit", "count_unembed", "forward_flops", "matmul_peak",
           "write", "read_ledgers", "summarise", "OUTSIDE"]

ENV = "ICL_ACCOUNT"
OUTSIDE = "(outside stored steps)"


@dataclass
class Entry:
    """One label's totals."""

    seconds: float = 0.0
    forwards: int = 0
    positions: int = 0  # forward positions (batch x sequence, padding included)
    backward_positions: int = 0
    flops: float = 0.0  # forward
    backward_flops: float = 0.0
    hits: int = 0  # steps read back from the store
    computed: int = 0  # steps computed


@dataclass
class Ledger:
    """Totals per label for one process (one notebook), and the peak measured beside them."""

    entries: dict = field(default_factory=dict)
    peak: dict | None = None
    threads: int = field(default_factory=torch.get_num_threads)
    path: str | None = None
    _stack: list = field(default_factory=list)
    _since: float = field(default_factory=time.perf_counter)
    _shapes: tuple | None = None  # the last model's weight shapes, for the peak

    def entry(self, label: str) -> Entry:
        return self.entries.setdefault(label, Entry())

    @property
    def label(self) -> str:
        return self._stack[-1] if self._stack else OUTSIDE

    def _charge_time(self) -> None:
        now = time.perf_counter()
        self.entry(self.label).seconds += now - self._since
        self._since = now

    def as_dict(self) -> dict:
        return {"threads": self.threads, "peak": self.peak,
                "entries": {k: asdict(v) for k, v in sorted(self.entries.items())}}


_LEDGER: Ledger | None = None


def active() -> Ledger | None:
    """The ledger being filled, or None (accounting off: every function here then returns at once)."""
    return _LEDGER


def _from_env() -> None:
    global _LEDGER
    path = os.environ.get(ENV)
    if path and _LEDGER is None:
        _LEDGER = Ledger(path=path)
        _install()
        atexit.register(_final_write)  # the time after the last step (figures, intervals) too


@contextlib.contextmanager
def recording(ledger: Ledger | None = None):
    """Fill ``ledger`` (a fresh one by default) with everything run inside the block; yields it."""
    global _LEDGER
    saved = _LEDGER
    _LEDGER = ledger or Ledger()
    _LEDGER._since = time.perf_counter()
    _install()
    try:
        yield _LEDGER
    finally:
        _LEDGER._charge_time()
        _LEDGER = saved


@contextlib.contextmanager
def step(label: str):
    """Charge the block's work and time to ``label`` (nested steps: the innermost one)."""
    led = _LEDGER
    if led is None:
        yield
        return
    led._charge_time()
    led._stack.append(label)
    led.entry(label).computed += 1
    try:
        yield
    finally:
        led._charge_time()
        led._stack.pop()
        if led.path and not led._stack:
            write(led)


def hit(label: str) -> None:
    """A step of ``label`` read back from the store."""
    if _LEDGER is not None:
        _LEDGER.entry(label).hits += 1


def count_unembed(model, rows: int, columns: int) -> None:
    """An unembedding of ``rows`` final residuals onto ``columns`` vocabulary entries, outside a forward."""
    led = _LEDGER
    if led is not None:
        led.entry(led.label).flops += 2.0 * rows * model.cfg.d_model * columns


def _layer_weights(cfg) -> int:
    """Weights one position multiplies in one layer (projections and MLP)."""
    kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    attn = cfg.d_model * cfg.d_head * (2 * cfg.n_heads + 2 * kv)
    if getattr(cfg, "attn_only", False):
        return attn
    gated = bool(getattr(cfg, "gated_mlp", False))
    return attn + (3 if gated else 2) * cfg.d_model * cfg.d_mlp


def forward_flops(cfg, batch: int, positions: int, past: int = 0, layers: int | None = None,
                  unembed: bool = True) -> float:
    """FLOPs of one forward of ``batch`` x ``positions`` after ``past`` cached positions, through ``layers``
    layers (default all), with or without the unembedding (module docstring: what is counted)."""
    layers = cfg.n_layers if layers is None else layers
    rows = batch * positions
    per_layer = 2.0 * rows * _layer_weights(cfg) + 4.0 * batch * cfg.n_heads * cfg.d_head * positions * (past + positions)
    out = layers * per_layer
    if unembed:
        out += 2.0 * rows * cfg.d_model * cfg.d_vocab
    return out


@functools.lru_cache(maxsize=1)
def _forward_signature():
    from transformer_lens import HookedTransformer  # lazy: TransformerLens takes seconds to import

    return inspect.signature(HookedTransformer.forward)


def _past_len(kv, layer: int) -> int:
    if kv is None:
        return 0
    try:
        keys = kv.entries[layer].past_keys
        return int(keys.shape[1])
    except (AttributeError, IndexError):
        return 0


def _count_forward(model, a: dict, out, past: int) -> None:
    led = _LEDGER
    if led is None:
        return
    x = a.get("input")
    shape = tuple(x.shape[:2]) if isinstance(x, torch.Tensor) else (
        tuple(out.shape[:2]) if isinstance(out, torch.Tensor) and out.dim() >= 2 else None)
    if shape is None:
        return
    if len(shape) == 1:  # one unbatched sequence
        shape = (1, shape[0])
    cfg = model.cfg
    start = a.get("start_at_layer") or 0
    stop = a.get("stop_at_layer")
    layers = (cfg.n_layers if stop is None else (stop if stop >= 0 else cfg.n_layers + stop)) - start
    unembed = stop is None and a.get("return_type", "logits") is not None
    flops = forward_flops(cfg, shape[0], shape[1], past, layers, unembed)
    e = led.entry(led.label)
    e.forwards += 1
    e.positions += shape[0] * shape[1]
    e.flops += flops
    if isinstance(out, torch.Tensor) and out.requires_grad:
        weights = any(p.requires_grad for p in model.parameters())
        e.backward_positions += shape[0] * shape[1]
        e.backward_flops += (2.0 if weights else 1.0) * flops
    if led._shapes is None or led._shapes[0] != id(model):
        led._shapes = (id(model), _weight_shapes(cfg))


def _weight_shapes(cfg) -> tuple:
    kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    shapes = {(cfg.d_model, cfg.n_heads * cfg.d_head), (cfg.n_heads * cfg.d_head, cfg.d_model),
              (cfg.d_model, kv * cfg.d_head)}
    if not getattr(cfg, "attn_only", False):
        shapes |= {(cfg.d_model, cfg.d_mlp), (cfg.d_mlp, cfg.d_model)}
    return tuple(sorted(shapes))


_INSTALLED: dict = {}


def _install() -> None:
    """Wrap ``HookedTransformer.forward`` once per process (a no-op while no ledger is active)."""
    if _INSTALLED:
        return
    if backend() == "bridge":  # TransformerLens 4: its forwards are not counted (docs/transformerlens4.md)
        return
    from transformer_lens import HookedTransformer  # lazy: TransformerLens takes seconds to import

    original = HookedTransformer.forward

    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        if _LEDGER is None:
            return original(self, *args, **kwargs)
        try:
            a = _forward_signature().bind(self, *args, **kwargs).arguments
            past = _past_len(a.get("past_kv_cache"), a.get("start_at_layer") or 0)
        except Exception:  # accounting never breaks a run: a call it cannot read runs uncounted
            return original(self, *args, **kwargs)
        out = original(self, *args, **kwargs)
        try:
            _count_forward(self, a, out, past)
        except Exception:
            pass
        return out

    HookedTransformer.forward = forward
    _INSTALLED["forward"] = original


def matmul_peak(shapes, rows: int = 1024, seconds: float = 0.3, device: str = "cpu") -> dict:
    """This machine's fp32 matmul rate on ``shapes`` ((in, out) pairs: a model's weights), ``rows`` rows each.

    Each shape runs for about ``seconds`` after a warm-up; the peak is the fastest shape's GFLOP/s, at the
    process's torch thread count.
    """
    per = {}
    g = torch.Generator().manual_seed(0)
    for k, n in shapes:
        a = torch.randn(rows, k, generator=g).to(device)
        b = torch.randn(k, n, generator=g).to(device)
        for _ in range(2):
            a @ b
        reps, t0 = 0, time.perf_counter()
        while True:
            a @ b
            reps += 1
            if device != "cpu":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if dt >= seconds:
                break
        per[f"{rows}x{k} @ {k}x{n}"] = 2.0 * rows * k * n * reps / dt / 1e9
    return {"gflops": max(per.values()) if per else None, "shapes": per, "rows": rows,
            "threads": torch.get_num_threads()}


def write(led: Ledger | None = None) -> None:
    """Write the ledger to its file (atomically); the first write measures the peak (not charged to a step)."""
    led = led or _LEDGER
    if led is None or not led.path:
        return
    if led.peak is None and led._shapes is not None:
        led._charge_time()
        led.peak = matmul_peak(led._shapes[1])
        led._since = time.perf_counter()
    path = Path(led.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(led.as_dict(), f, indent=1)
    os.replace(tmp, path)


def _final_write() -> None:
    if _LEDGER is not None and _LEDGER.path:
        _LEDGER._charge_time()
        write(_LEDGER)


def read_ledgers(folder: Path) -> dict[str, dict]:
    """``{notebook stem: ledger dict}`` of the ``*.json`` ledgers in ``folder``."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))}


def summarise(ledgers: dict[str, dict], walls: dict[str, float] | None = None) -> list[dict]:
    """Rows of the accounting table: one per (notebook, step) with work, then one total per notebook.

    ``walls``: each notebook's wall time as the run measured it (kernel start, imports and model load
    included); the ledger's own seconds cover the kernel from its first step's module import on.
    """
    rows = []
    for nb, led in ledgers.items():
        peak = (led.get("peak") or {}).get("gflops")
        tot = {"seconds": 0.0, "positions": 0, "backward_positions": 0, "flops": 0.0, "backward_flops": 0.0}
        for label, e in led["entries"].items():
            for k in tot:
                tot[k] += e[k]
            if e["flops"] or e["computed"]:
                rows.append(_row(nb, label, e, peak))
        total = _row(nb, "total", {**tot, "hits": sum(e["hits"] for e in led["entries"].values()),
                                   "computed": sum(e["computed"] for e in led["entries"].values())}, peak)
        if walls and nb in walls:
            total["wall_s"] = walls[nb]
        rows.append(total)
    return rows


def _row(nb: str, label: str, e: dict, peak: float | None) -> dict:
    flops = e["flops"] + e["backward_flops"]
    rate = flops / e["seconds"] / 1e9 if e["seconds"] > 0 else 0.0
    return {"notebook": nb, "step": label, "seconds": e["seconds"], "positions": e["positions"],
            "backward_positions": e["backward_positions"], "tflop": flops / 1e12, "gflop_s": rate,
            "peak_gflop_s": peak, "pct_peak": 100 * rate / peak if peak else None,
            "computed": e.get("computed", 0), "hits": e.get("hits", 0)}


_from_env()
