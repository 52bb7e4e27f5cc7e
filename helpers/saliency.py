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
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from .predict import length_batches, logits_at
from .prompts import Prompt, build_prompt, check_prompts, sample_demos, sample_test
from .tasks import get_task, label_token_ids, load_split

__all__ = [
    "FLOWS",
    "frozen_params",
    "saliency_batch",
    "saliency_matrices",
    "flow_masks",
    "flow_scores",
    "saliency_flow",
    "relative_flow",
    "first_layer_pq_exceeds_wp",
    "saliency_prompts",
    "saliency_budget",
    "saliency_runs",
    "flow_frame",
    "saliency_verdict",
]

FLOWS = ("S_wp", "S_pq", "S_ww")


@contextlib.contextmanager
def frozen_params(model):
    """Temporarily set ``requires_grad=False`` on every parameter (restored on exit)."""
    old = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in old:
            p.requires_grad_(False)
        yield model
    finally:
        for p, flag in old:
            p.requires_grad_(flag)


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
    from .prompts import pad_batch

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
        del patterns, grads
        lens = torch.tensor([len(p) for p in prompts], device=sal.device)
        pos = torch.arange(tokens.shape[1], device=sal.device)
        valid = pos[None, :] < lens[:, None]  # [batch, seq]
        sal = sal * (valid[:, None, :, None] & valid[:, None, None, :])
    return sal.cpu()


def _batches(model, prompts: Sequence[Prompt], batch_size: int, max_pattern_mb: float) -> list[list[int]]:
    """Length-grouped batches, split further so one batch's attention patterns stay under ``max_pattern_mb``."""
    per_pos = model.cfg.n_layers * model.cfg.n_heads * 4 / 2**20  # MB per (query, key) pair, float32
    out = []
    for idx in length_batches(prompts, batch_size):
        T = max(len(prompts[i]) for i in idx)
        cap = max(1, int(max_pattern_mb // (per_pos * T * T)))
        out += [idx[i:i + cap] for i in range(0, len(idx), cap)]
    return out


def saliency_matrices(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                      progress: bool | str = False, max_pattern_mb: float = 256
                      ) -> list[Float[torch.Tensor, "layer seq seq"]]:
    """Per-prompt ``I`` (``[layer, len, len]``, unpadded), in input order. Memory grows with len^2: use for few prompts."""
    check_prompts(model, prompts, "compute saliency for")
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
    masks = torch.stack([flow_masks(p, sal.shape[-1]) for p in prompts]).to(sal.dtype)  # [batch, 3, seq, seq]
    sums = torch.einsum("blij,bfij->blf", sal, masks)
    counts = masks.sum(dim=(-1, -2))  # [batch, 3]
    counts = counts[:, None, :].expand_as(sums)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, torch.nan))


def saliency_flow(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                  progress: bool | str = False, max_pattern_mb: float = 256) -> Float[torch.Tensor, "n layer 3"]:
    """``(S_wp, S_pq, S_ww)`` for every prompt (input order) and layer, batched by length.

    Batches hold at most ``batch_size`` prompts and are split further so that one
    batch's attention patterns (all layers and heads, float32) stay under
    ``max_pattern_mb`` (the backward pass keeps a few times that alive).
    """
    check_prompts(model, prompts, "compute saliency flows for")
    out = torch.empty(len(prompts), model.cfg.n_layers, 3)
    for idx in tqdm(_batches(model, prompts, batch_size, max_pattern_mb), disable=not progress, leave=False,
                    desc=progress if isinstance(progress, str) else "saliency"):
        batch = [prompts[i] for i in idx]
        out[idx] = flow_scores(saliency_batch(model, batch, label_ids), batch)
    return out


def relative_flow(scores: Float[torch.Tensor, "n layer 3"]) -> Float[torch.Tensor, "layer 3"]:
    """The paper's plotted quantity: mean over inputs, then each layer's three values divided by their sum."""
    if scores.shape[0] == 0:
        raise ValueError("no saliency scores to average: run saliency_flow on at least one prompt")
    mean = torch.nanmean(scores, dim=0)
    return mean / mean.sum(-1, keepdim=True)


def first_layer_pq_exceeds_wp(rel: Float[torch.Tensor, "layer 3"]) -> int | None:
    """First layer index (0-based) where relative S_pq > S_wp, or None if it never does."""
    hit = torch.nonzero(rel[:, 1] > rel[:, 0]).flatten()
    return int(hit[0]) if len(hit) else None


def saliency_prompts(model, task, seed: int, n: int, k_per_class: int = 1, max_len: int | None = None
                     ) -> tuple[list[Prompt], list[int]]:
    """``n`` test queries, each with its own freshly drawn demonstrations (the paper's saliency setting).

    Queries: the test split shuffled with ``seed`` (first ``n``, over-long ones skipped).
    Demonstrations of the i-th query: :func:`sample_demos` with seed ``seed * 100_003 + i``,
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
        demos = sample_demos(train, task, k_per_class, seed * 100_003 + i)
        p = build_prompt(model, task, demos, qd, label_ids=lids)
        if len(p) <= max_len:
            prompts.append(p)
    return prompts, lids


def saliency_budget(profile) -> dict:
    """Run size of notebook 01 (inputs per task and seed, all of the profile's seeds).

    ``profile.n_saliency`` inputs per task and seed, except AGNews outside the
    ``paper`` profile, which gets half of it: its prompts are ~6x longer than
    SST-2's and a backward pass on Gemma costs ~3.5 s per AGNews input against
    ~1 s per SST-2 input on one CPU thread, so the notebook stays within its
    time budget (default ~6 min, smoke ~1-2 min on an idle 2-core CPU).
    """
    n = int(profile.n_saliency)
    per_task = {t: (max(2, n // 2) if (t == "agnews" and profile.name != "paper") else n) for t in profile.tasks}
    return {"seeds": tuple(profile.seeds), "n": per_task, "batch_size": 4}


def saliency_runs(model, tasks: Sequence[str], seeds: Sequence[int], n: dict | int, batch_size: int = 4,
                  profile: str = "", progress: bool = True):
    """Per-input ``(S_wp, S_pq, S_ww)`` for every (task, seed), cached on disk.

    Returns ``{(task, seed): Float[Tensor, "n layer 3"]}`` (raw, not relative).
    ``n``: inputs per task and seed (an int or a per-task dict, e.g. :func:`saliency_budget`).
    """
    import warnings

    from .results import cached
    from .tasks import LabelWordWarning

    name = getattr(model.cfg, "icl_model_name", model.cfg.model_name)
    out = {}
    combos = [(t, s) for t in tasks for s in seeds]
    for task, seed in tqdm(combos, desc="saliency", disable=not progress):
        k = n[task] if isinstance(n, dict) else int(n)

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LabelWordWarning)
                prompts, lids = saliency_prompts(model, task, seed, k)
            return saliency_flow(model, prompts, lids, batch_size=batch_size)

        out[(task, seed)] = cached("saliency_flow", {"model": name, "task": task, "seed": seed, "n": k,
                                                     "profile": profile}, run)
    return out


def flow_frame(runs: dict):
    """Long ``pandas.DataFrame`` (task, seed, layer, flow, value) of the relative sizes per (task, seed)."""
    import pandas as pd

    rows = []
    for (task, seed), scores in runs.items():
        rel = relative_flow(scores)
        for layer in range(rel.shape[0]):
            for f, name in enumerate(FLOWS):
                rows.append({"task": task, "seed": seed, "layer": layer, "flow": name, "value": float(rel[layer, f])})
    return pd.DataFrame(rows)


def saliency_verdict(rel_by_task: dict[str, torch.Tensor]) -> tuple[str, dict]:
    """Verdict on the §2.1 claim from each task's seed-averaged relative flows ``[layer, 3]``.

    Criteria, fixed before any run, per task (layers split by depth):
      1. shallow: over the first third of the layers, mean S_wp > mean S_pq and > mean S_ww;
      2. deep: over the last half of the layers, mean S_pq > mean S_wp and > mean S_ww;
      3. over all layers, mean S_wp > mean S_ww and mean S_pq > mean S_ww.
    "replicates" if every criterion holds on every task; "partly" if at least half of the
    (task, criterion) checks hold; "does not replicate" otherwise.
    """
    checks = {}
    for task, rel in rel_by_task.items():
        L = rel.shape[0]
        sh = rel[: max(1, L // 3)].mean(0)
        dp = rel[L // 2:].mean(0)
        al = rel.mean(0)
        checks[(task, "shallow: S_wp dominant")] = bool(sh[0] > sh[1] and sh[0] > sh[2])
        checks[(task, "deep: S_pq dominant")] = bool(dp[1] > dp[0] and dp[1] > dp[2])
        checks[(task, "S_wp and S_pq above S_ww")] = bool(al[0] > al[2] and al[1] > al[2])
    ok = sum(checks.values())
    verdict = "replicates" if ok == len(checks) else "partly" if ok >= len(checks) / 2 else "does not replicate"
    return verdict, checks
