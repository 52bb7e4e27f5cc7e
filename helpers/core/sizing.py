"""Batch sizes and memory caps sized for the device the model is on.

Every batched experiment asks :func:`sizing` how to cut its inputs into batches: how many prompts per batch
(``batch_size``), how many padded tokens per batch (``max_tokens``, 0: no cap) and how many MB of attention
patterns one batch may keep for a backward pass (``max_pattern_mb``, saliency). The answer follows the device
of the model's parameters, never ``torch.cuda.is_available()``: a model kept on the CPU on a machine with a
GPU (notebook 09's control) is sized as on any CPU.

* **On a CPU** the answer is what the collection has always used, so results and CPU speed do not change:
  the caller's ``batch_size``, ``$ICL_BATCH_TOKENS`` or :data:`CPU_BATCH_TOKENS` padded tokens (a CPU's
  throughput peaks at a few hundred to a thousand tokens per forward, then falls), and the caller's
  ``max_pattern_mb``.
* **On CUDA** the caps come from the free memory of the model's GPU (``torch.cuda.mem_get_info``): a batch
  may take :data:`SAFETY` of it, less :data:`RESERVE_BYTES` (cuBLAS workspaces, the allocator's
  fragmentation, the unembedding at q), by the activation estimate of :func:`bytes_per_token`. The batch
  holds the caller's ``batch_size`` prompts, fewer where they do not fit; the token budget is what fits
  (``$ICL_BATCH_TOKENS`` still overrides it), and the pattern cap is lifted to what fits, so the saliency
  backward no longer runs one prompt at a time on a GPU sized for it.

**The cost of one more pass** (``pass_tokens``, :func:`pass_tokens`): batching trades padded tokens against
passes (:func:`helpers.core.predict.length_batches` minimises padded tokens plus ``pass_tokens`` per batch). On a
CPU a pass costs about :data:`CPU_PASS_TOKENS` tokens' work, so short inputs of very different lengths are split.
On CUDA a pass costs what the host spends launching it, which on a large model is worth thousands of tokens
(measured on one H100 at GPT2-XL's shape: 8 prompts split into 5 batches by the CPU's charge took 2.34 s, as one
batch 1.43 s). There it is measured once per model and process: a forward of 1 row and of 8 rows of
:data:`PROBE_TOKENS` tokens, timed after a warm-up, fit ``time = a + b * tokens``, and ``pass_tokens = a / b`` (the
fixed time of a pass in tokens' worth of throughput), kept within [:data:`CPU_PASS_TOKENS`, :data:`MAX_PASS_TOKENS`].

The estimate counts the activations a transformer block keeps, in the model's dtype (attention scores and
patterns in float32, as TransformerLens computes them): one block's working set for a forward without
gradients; every block's saved activations plus one block's working set for a forward and backward; and the
attention patterns' gradients of every block when the patterns themselves are differentiated (saliency).
It is an estimate from the shape, not a measurement: :data:`SAFETY` and :data:`RESERVE_BYTES` keep room for
its error, and ``ICL_BATCH_TOKENS`` caps the padded tokens per batch where it is too generous.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import torch

from helpers.core.checks import positive_int

__all__ = ["Sizing", "sizing", "suffix_sizing", "cache_rows", "model_device", "on_cuda", "free_bytes", "bytes_per_token",
           "cpu_batch_tokens", "pass_tokens", "CPU_BATCH_TOKENS", "CPU_CACHE_MB", "CPU_PATTERN_MB", "CPU_PASS_TOKENS",
           "MAX_PASS_TOKENS", "PROBE_TOKENS", "SAFETY", "RESERVE_BYTES", "FORWARD_BATCH", "HEAVY_BATCH", "CONTROL_BATCH",
           "CONTROL_HEAVY_BATCH"]

# The engine's batch caps, where a caller names none (a study's protocols take theirs from the run-sizes table,
# helpers.study.profile_table.RUN_SIZES; nothing else in helpers has a batch size of its own, tests/test_run_sizes.py).
# On CUDA, sizing() lowers each to what fits the free memory.
FORWARD_BATCH = 16  # prompts per forward pass that keeps only what it returns (predictions, one hook's values)
HEAVY_BATCH = 8  # prompts per pass that keeps more: a backward pass, or every layer's or every head's values
CONTROL_BATCH = 256  # sequences per forward pass of a control (a 2- or 4-layer attention-only model, short prompts)
CONTROL_HEAVY_BATCH = 64  # sequences per backward pass of a control (its saliency flows)

CPU_BATCH_TOKENS = 1024  # padded tokens per forward batch on a CPU (helpers.core.predict.batch_token_budget)
CPU_CACHE_MB = 2048  # prompts' key/value caches one q-row chunk holds on a CPU (helpers.core.prefix_runs.predict_q_row)
CPU_PATTERN_MB = 256  # attention patterns one saliency batch keeps on a CPU (helpers.experiments.saliency)
CPU_PASS_TOKENS = 32  # one more forward pass, in tokens' work, on a CPU (helpers.core.predict.length_batches)
MAX_PASS_TOKENS = 1 << 16  # a measured pass cost is kept below this (a timing hiccup must not merge everything)
PROBE_TOKENS = 64  # tokens per row of the passes that measure a GPU's pass cost
SAFETY = 0.8  # share of the GPU's free memory a batch may take
RESERVE_BYTES = 2**30  # kept free besides: cuBLAS workspaces, allocator fragmentation, the unembedding at q


@dataclass(frozen=True)
class Sizing:
    """How to batch one piece of work on one model's device."""

    batch_size: int  # prompts per batch at most
    max_tokens: int  # padded tokens per batch at most (0: no cap)
    max_pattern_mb: float  # MB of attention patterns (all layers and heads, float32) one batch keeps at most
    device: str  # the device it was sized for
    usable_bytes: int = 0  # the memory a batch may take (CUDA only; 0 on a CPU, where it is not measured)
    pass_tokens: int = CPU_PASS_TOKENS  # the cost of one more pass, in tokens (module docstring)


def model_device(model) -> torch.device:
    """The device of ``model``'s parameters (``model.cfg.device`` for a model without any)."""
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError, TypeError):
        return torch.device(str(model.cfg.device))


def on_cuda(model) -> bool:
    return model_device(model).type == "cuda"


def free_bytes(device: torch.device) -> int:
    """Free memory of a CUDA ``device`` now (bytes), as the driver reports it."""
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def cpu_batch_tokens() -> int:
    """``$ICL_BATCH_TOKENS``, else :data:`CPU_BATCH_TOKENS`."""
    env = os.environ.get("ICL_BATCH_TOKENS")
    return int(env) if env is not None else CPU_BATCH_TOKENS


def _element_bytes(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 4


def bytes_per_token(cfg, keys: int, grad: bool = False, patterns: bool = False) -> float:
    """Estimated activation bytes one token of a batch holds at the peak, attending to ``keys`` positions.

    ``cfg``: a TransformerLens config (layers, heads, widths, dtype). ``grad``: a backward pass follows (every
    block's activations are kept); ``patterns``: the attention patterns of every block are differentiated too.
    """
    e = _element_bytes(getattr(cfg, "dtype", torch.float32))
    heads, width = cfg.n_heads, cfg.n_heads * cfg.d_head
    d_mlp = cfg.d_mlp or 0
    mlp = (3 if getattr(cfg, "gated_mlp", False) else 2) * d_mlp
    attention = 2 * heads * keys * 4  # scores and pattern, float32
    # residual stream copies and layer-norm outputs, q/k/v/z, the MLP's hidden layer(s), attention
    working = e * (6 * cfg.d_model + 4 * width + mlp) + attention
    if not grad:
        return float(working)
    saved = cfg.n_layers * (e * (8 * cfg.d_model + 4 * width + mlp) + attention)
    pattern_grads = cfg.n_layers * heads * keys * 4 if patterns else 0
    return float(saved + working + pattern_grads)


def sizing(model, tokens: int, batch_size: int, *, keys: int | None = None, grad: bool = False,
           patterns: bool = False, max_pattern_mb: float = CPU_PATTERN_MB) -> Sizing:
    """Batch size and memory caps for work on ``model``'s device.

    ``tokens``: the longest input a batch runs (positions per row); ``keys``: the positions it attends to
    (default ``tokens``; more after a shared prefix); ``grad`` / ``patterns``: see :func:`bytes_per_token`;
    ``batch_size`` and ``max_pattern_mb``: the caller's (a CPU's) choice. On a CPU these come back unchanged,
    with today's token budget; on CUDA they are sized from the GPU's free memory (module docstring).
    """
    batch_size = positive_int("batch_size", batch_size)
    device = model_device(model)
    if device.type != "cuda":
        return Sizing(batch_size, cpu_batch_tokens(), max_pattern_mb, str(device), 0, CPU_PASS_TOKENS)
    tokens = max(1, int(tokens))
    keys = max(tokens, int(keys or tokens))
    usable = max(0, int(SAFETY * free_bytes(device)) - RESERVE_BYTES)
    per_token = bytes_per_token(model.cfg, keys, grad=grad, patterns=patterns)
    fit_tokens = int(usable // per_token)
    env = os.environ.get("ICL_BATCH_TOKENS")
    max_tokens = int(env) if env is not None else max(fit_tokens, tokens)
    rows = max(1, fit_tokens // tokens)
    pattern_row_mb = model.cfg.n_layers * model.cfg.n_heads * 4 * tokens * keys / 2**20
    pattern_mb = rows * pattern_row_mb if patterns else max_pattern_mb
    return Sizing(min(batch_size, rows), max_tokens, pattern_mb, str(device), usable, pass_tokens(model))


_PASS_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its measured pass cost


def pass_tokens(model) -> int:
    """The cost of one more forward pass on ``model``'s device, in tokens' work: :data:`CPU_PASS_TOKENS` on a CPU,
    measured once per model and process on CUDA (module docstring)."""
    if model is None or not on_cuda(model):
        return CPU_PASS_TOKENS
    if model not in _PASS_TOKENS:
        _PASS_TOKENS[model] = _measured_pass_tokens(model)
    return _PASS_TOKENS[model]


def _timed(model, rows: int) -> float:
    import time

    tokens = torch.randint(0, model.cfg.d_vocab, (rows, PROBE_TOKENS), device=model_device(model))
    times = []
    with torch.inference_mode():
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(tokens, return_type=None)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return sorted(times)[1]


def _measured_pass_tokens(model) -> int:
    """``a / b`` of ``time = a + b * tokens`` from a 1-row and an 8-row pass (after a warm-up), clamped."""
    _timed(model, 1)  # warm-up: kernels chosen, memory allocated
    one, eight = _timed(model, 1), _timed(model, 8)
    per_token = (eight - one) / (7 * PROBE_TOKENS)
    fixed = one - PROBE_TOKENS * per_token
    if per_token <= 0:  # the 8 rows cost no more than 1: launches dominate entirely
        return MAX_PASS_TOKENS
    return int(min(MAX_PASS_TOKENS, max(CPU_PASS_TOKENS, round(fixed / per_token))))


def suffix_sizing(cache, suffixes, batch_size: int, max_tokens: int | None = None) -> tuple[int, int]:
    """``(batch_size, max_tokens)`` for suffix runs after a shared prefix ``cache`` (helpers.core.prefix).

    ``suffixes``: the token tensors that run; every row attends to the cache's positions as well. A
    ``max_tokens`` the caller gives is kept; None sizes it for the cache's model's device (a cache whose model
    is gone is sized as on a CPU).
    """
    model = cache.model_ref()
    longest = max((len(s) for s in suffixes), default=1)
    if model is None:
        return batch_size, cpu_batch_tokens() if max_tokens is None else int(max_tokens)
    sized = sizing(model, longest, batch_size, keys=len(cache) + longest)
    return sized.batch_size, sized.max_tokens if max_tokens is None else int(max_tokens)


def cache_rows(model, keys: int, batch_size: int, max_mb: float = CPU_CACHE_MB) -> int:
    """How many prompts' keep-everything caches of up to ``keys`` positions one chunk of
    :func:`helpers.core.prefix_runs.predict_q_row` holds: the caller's ``batch_size``, fewer where their keys and
    values (three copies at the peak: appended by the suffix pass, kept per prompt, stacked for the forward) pass
    ``max_mb`` on a CPU, or the usable free memory on CUDA (module docstring). At least one."""
    batch_size = positive_int("batch_size", batch_size)
    cfg = model.cfg
    kv_heads = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    per_prompt = 3 * 2 * cfg.n_layers * max(1, int(keys)) * kv_heads * cfg.d_head * _element_bytes(cfg.dtype)
    device = model_device(model)
    budget = (max(0, int(SAFETY * free_bytes(device)) - RESERVE_BYTES) if device.type == "cuda"
              else max_mb * 2**20)
    return max(1, min(batch_size, int(budget // per_prompt)))
