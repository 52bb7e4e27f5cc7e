"""§2.1 Saliency: how information flows between tokens, layer by layer.

For each layer l the saliency matrix is

    I_l = | sum_h A_{h,l} * dL/dA_{h,l} |        (elementwise; heads summed, then abs)

where ``A`` is the post-softmax attention pattern (``hook_pattern``) and ``L``
the cross-entropy of the label-restricted logits at q against the gold label.
One forward and one backward pass give every layer at once. A batch's loss is
the *sum* of the per-input losses, so each row's gradient is exactly the
gradient of its own loss (rows never interact under causal attention with right
padding), and the batched result equals the one-by-one result.

The gradient is taken with :func:`torch.autograd.grad` with respect to the
pattern tensors only; the model's parameters are switched to
``requires_grad=False`` for the duration (restored afterwards), so nothing is
accumulated into ``.grad``.

Three means per layer (the diagonal is always excluded), from the position record:

- ``S_wp``: mean of ``I_l(p_k, j)`` over ``j < p_k`` and all k (text -> label words);
- ``S_pq``: mean of ``I_l(q, p_k)`` over k (label words -> target position);
- ``S_ww``: mean of ``I_l(i, j)``, ``j < i``, over all other pairs.

BOS (when the model uses one) is an ordinary earlier position here, as in the
paper's definition ("every j < p_k").

Intervals. The plotted quantity of one (task, seed) run is :func:`relative_flow`:
each flow's mean over the inputs, divided per layer by the sum of the three;
a task's curve is the mean of its seeds' curves. :func:`~helpers.protocols.saliency.flow_intervals` gives
every point of those curves, their means over the layer ranges of the checks
(:func:`layer_ranges`) and the paired contrasts between flows (e.g. shallow
S_wp minus S_pq) a 95% interval from the two-level bootstrap of
:func:`helpers.study.stats.bootstrap_statistic` (seeds, then the inputs within each
(task, seed)); the three flows of a resampled input stay together, so every
contrast is paired. :func:`~helpers.protocols.saliency.saliency_verdict` restates the checks of
:func:`~helpers.protocols.saliency.saliency_verdict` on the intervals of the contrasts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from helpers.core.checks import ArgumentError
from helpers.core.predict import length_batches, logits_at
from helpers.core.prompts import Prompt, build_prompt, check_prompts, pad_batch, sample_demos, sample_test
from helpers.core.seeds import stream_seed
from helpers.core.sizing import HEAVY_BATCH, sizing
from helpers.core.tasks import get_task, label_token_ids, load_split
from helpers.core.tl_patches import frozen_params

__all__ = ["FLOWS", "frozen_params", "saliency_batch", "saliency_matrices", "flow_masks", "flow_scores", "pair_means", "saliency_flow", "relative_flow", "first_layer_pq_exceeds_wp", "saliency_prompts", "layer_ranges", "contrast_name"]

FLOWS = ("S_wp", "S_pq", "S_ww")


def _pad_id(model) -> int:
    return model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0


def saliency_batch(model, prompts: Sequence[Prompt], label_ids: Sequence[int]
                   ) -> Float[torch.Tensor, "batch layer seq seq"]:
    """``I_l`` for every layer of every prompt, from one forward + backward pass.

    Prompts must carry a gold label (built from a :class:`Demo` query). Rows are
    right-padded to the longest prompt; entries involving padded positions are
    set to 0 (they never influence real positions under causal attention).
    """
    if not prompts:
        raise ValueError("no prompts")
    if any(p.gold is None for p in prompts):
        raise ValueError("saliency needs the gold label: build prompts from Demo queries (prompts.sample_test)")
    tokens, q = pad_batch(prompts, _pad_id(model))
    tokens = tokens.to(model.cfg.device)
    ids = torch.tensor(list(label_ids), device=model.cfg.device)
    gold = torch.tensor([p.gold for p in prompts], device=model.cfg.device)
    patterns: list[torch.Tensor] = []

    def keep(pattern, hook):
        if not pattern.requires_grad:  # layer 0 with frozen parameters: make it a leaf
            pattern = pattern.detach().requires_grad_(True)
        patterns.append(pattern)
        return pattern

    hooks = [(f"blocks.{l}.attn.hook_pattern", keep) for l in range(model.cfg.n_layers)]
    with torch.enable_grad(), frozen_params(model):
        logits = logits_at(model, tokens, q, hooks)[:, ids]
        loss = torch.nn.functional.cross_entropy(logits.float(), gold, reduction="sum")
        grads = torch.autograd.grad(loss, patterns)
    with torch.no_grad():
        # per layer (keeps the peak memory at one layer's [batch, head, seq, seq]): heads summed, then abs
        sal = torch.stack([(a.detach() * g).sum(dim=1).abs().float() for a, g in zip(patterns, grads)], dim=1)
        patterns.clear()  # the patterns and their gradients are freed before the masking below
        del grads
        lens = torch.tensor([len(p) for p in prompts], device=sal.device)
        pos = torch.arange(tokens.shape[1], device=sal.device)
        valid = pos[None, :] < lens[:, None]  # [batch, seq]
        sal = sal * (valid[:, None, :, None] & valid[:, None, None, :])
    return sal.cpu()


def _batches(model, prompts: Sequence[Prompt], batch_size: int, max_pattern_mb: float) -> list[list[int]]:
    """Length-grouped batches, split further so one batch's attention patterns stay under ``max_pattern_mb``.

    Both caps go through :func:`helpers.core.sizing.sizing` (a backward pass through every layer's patterns):
    on a CPU they are the caller's, on CUDA what the GPU's free memory holds.
    """
    per_pos = model.cfg.n_layers * model.cfg.n_heads * 4 / 2**20  # MB per (query, key) pair, float32
    longest = max((len(p) for p in prompts), default=1)
    sized = sizing(model, longest, batch_size, grad=True, patterns=True, max_pattern_mb=max_pattern_mb)
    out = []
    for idx in length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens):
        T = max(len(prompts[i]) for i in idx)
        cap = max(1, int(sized.max_pattern_mb // (per_pos * T * T)))
        out += [idx[i:i + cap] for i in range(0, len(idx), cap)]
    return out


def saliency_matrices(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = HEAVY_BATCH,
                      progress: bool | str = False, max_pattern_mb: float = 256
                      ) -> list[Float[torch.Tensor, "layer seq seq"]]:
    """Per-prompt ``I`` (``[layer, len, len]``, unpadded), in input order. Memory grows with len^2: use for few prompts."""
    check_prompts(model, prompts, "compute saliency for", label_ids)
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for idx in tqdm(_batches(model, prompts, batch_size, max_pattern_mb), disable=not progress, leave=False,
                    desc=progress if isinstance(progress, str) else "saliency"):
        sal = saliency_batch(model, [prompts[i] for i in idx], label_ids)
        for b, i in enumerate(idx):
            n = len(prompts[i])
            out[i] = sal[b, :, :n, :n].clone()
    return out  # type: ignore[return-value]


def flow_masks(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "3 seq seq"]:
    """Boolean masks of the (row=to, column=from) pairs averaged into S_wp, S_pq, S_ww.

    ``seq`` pads the masks (with False) to a longer batch length.
    """
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    pos = torch.arange(seq)
    lower = (pos[None, :] < pos[:, None]) & (pos[:, None] < n)  # j < i, real rows; diagonal excluded
    rows = torch.zeros(seq, dtype=torch.bool)
    rows[prompt.label_pos] = True
    wp = lower & rows[:, None]
    pq = torch.zeros(seq, seq, dtype=torch.bool)
    pq[prompt.q, prompt.label_pos] = True
    ww = lower & ~wp & ~pq
    return torch.stack([wp, pq, ww])


def flow_scores(sal: Float[torch.Tensor, "batch layer seq seq"], prompts: Sequence[Prompt]
                ) -> Float[torch.Tensor, "batch layer 3"]:
    """``(S_wp, S_pq, S_ww)`` per prompt and layer from (padded) saliency matrices."""
    if sal.shape[0] != len(prompts):
        raise ValueError(f"{sal.shape[0]} saliency rows but {len(prompts)} prompts")
    return pair_means(sal, torch.stack([flow_masks(p, sal.shape[-1]) for p in prompts]))  # masks [batch, 3, seq, seq]


def pair_means(sal: Float[torch.Tensor, "batch layer seq seq"], masks: Bool[torch.Tensor, "batch flow seq seq"]
               ) -> Float[torch.Tensor, "batch layer flow"]:
    """The mean of ``sal`` over each mask's (row, column) pairs, per prompt and layer; NaN where a mask holds no
    pair, never 0 (:func:`flow_scores` and the flows of :mod:`helpers.experiments.saliency_classes` and
    :mod:`helpers.experiments.saliency_context`)."""
    masks = masks.to(sal.dtype)
    sums = torch.einsum("blij,bfij->blf", sal, masks)
    counts = masks.sum(dim=(-1, -2))[:, None].expand_as(sums)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, torch.nan))


def saliency_flow(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = HEAVY_BATCH,
                  progress: bool | str = False, max_pattern_mb: float = 256) -> Float[torch.Tensor, "n layer 3"]:
    """``(S_wp, S_pq, S_ww)`` for every prompt (input order) and layer, batched by length.

    Batches hold at most ``batch_size`` prompts and are split further so that one
    batch's attention patterns (all layers and heads, float32) stay under
    ``max_pattern_mb`` (the backward pass keeps a few times that alive). Both are a CPU's values: for a
    model on CUDA, :func:`helpers.core.sizing.sizing` sizes them from the GPU's free memory.
    """
    check_prompts(model, prompts, "compute saliency flows for", label_ids)
    out = torch.empty(len(prompts), model.cfg.n_layers, 3)
    for idx in tqdm(_batches(model, prompts, batch_size, max_pattern_mb), disable=not progress, leave=False,
                    desc=progress if isinstance(progress, str) else "saliency"):
        batch = [prompts[i] for i in idx]
        out[idx] = flow_scores(saliency_batch(model, batch, label_ids), batch)
    return out


def relative_flow(scores: Float[torch.Tensor, "n layer 3"]) -> Float[torch.Tensor, "layer 3"]:
    """The paper's plotted quantity: mean over inputs, then each layer's three values divided by their sum."""
    if not isinstance(scores, torch.Tensor) or scores.ndim != 3 or scores.shape[-1] != 3:
        shape = tuple(scores.shape) if hasattr(scores, "shape") else type(scores).__name__
        raise ArgumentError(f"scores must be a tensor [n, layer, 3] (S_wp, S_pq, S_ww per input and layer, as "
                            f"saliency_flow returns), got {shape}")
    if scores.shape[0] == 0:
        raise ValueError("no saliency scores to average: run saliency_flow on at least one prompt")
    if (scores < 0).any():
        raise ArgumentError("scores must be 0 or more (saliency is a sum of absolute values): these hold negative "
                            "values, so they are not saliency_flow's output")
    mean = torch.nanmean(scores, dim=0)
    total = mean.sum(-1, keepdim=True)
    empty = [int(layer) for layer in (total[:, 0] == 0).nonzero().flatten()]
    if empty:
        raise ValueError(f"layer(s) {empty} carry no flow at all (S_wp, S_pq and S_ww are all 0), so their relative "
                         "sizes are undefined: saliency_flow gives 0 only where the loss has no gradient through "
                         "attention there; check the prompts' label positions and that the model was not run "
                         "without gradients")
    return mean / total


def first_layer_pq_exceeds_wp(rel: Float[torch.Tensor, "layer 3"]) -> int | None:
    """First layer index (0-based) where relative S_pq > S_wp, or None if it never does."""
    hit = torch.nonzero(rel[:, 1] > rel[:, 0]).flatten()
    return int(hit[0]) if len(hit) else None


def saliency_prompts(model, task, seed: int, n: int, k_per_class: int = 1, max_len: int | None = None
                     ) -> tuple[list[Prompt], list[int]]:
    """``n`` test queries, each with its own freshly drawn demonstrations (the paper's saliency setting).

    Queries: the test split shuffled with ``seed`` (first ``n``, over-long ones skipped).
    Demonstrations of the i-th query: :func:`sample_demos` with seed ``stream_seed("query_demos", seed, i)`` (``seed * 100003 + i``),
    so every input is reproducible on its own.
    """
    task = get_task(task)
    train, test = load_split(task, "train"), load_split(task, "test")
    lids = label_token_ids(model.tokenizer, task)
    max_len = max_len or model.cfg.n_ctx
    prompts: list[Prompt] = []
    for i, qd in enumerate(sample_test(test, len(test), seed)):
        if len(prompts) >= n:
            break
        demos = sample_demos(train, task, k_per_class, stream_seed("query_demos", seed, i))
        p = build_prompt(model, task, demos, qd, label_ids=lids)
        if len(p) <= max_len:
            prompts.append(p)
    return prompts, lids


def layer_ranges(n_layers: int) -> dict[str, slice]:
    """The layer ranges of the checks: ``shallow`` (the first third, at least one layer), ``deep`` (the last
    half), ``all``."""
    if int(n_layers) < 1:
        raise ValueError(f"need at least one layer, got {n_layers}")
    L = int(n_layers)
    return {"shallow": slice(0, max(1, L // 3)), "deep": slice(L // 2, L), "all": slice(0, L)}


def contrast_name(a: str, b: str) -> str:
    return f"{a} - {b}"


# --- paper vs ours ---
