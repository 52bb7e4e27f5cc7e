"""Batched label-restricted prediction.

Prompts are grouped by length, right-padded (no attention mask is needed under
causal attention: a real position never sees the pads that follow it) and run
in batches. The vocabulary projection is computed only at each prompt's query
position q, because with Gemma's 262k-token vocabulary full logits would be
the dominant cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core import accounting
from helpers.core.checks import positive_int
from helpers.core.prompts import Prompt, check_prompts, pad_batch
from helpers.core.sizing import CPU_PASS_TOKENS, FORWARD_BATCH, cpu_batch_tokens, sizing
from helpers.core.store import result_types

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["Predictions", "predict", "logits_at", "unembed_at", "resid_at", "unembed_rows", "predictions_from_resid", "length_batches", "batch_token_budget", "HookFactory",
           "shots_for"]

# given the prompts of a batch, the padded tokens that run and (keyword ``offset``) the prompt position of
# their first column, the (hook name, fn) pairs to run. A full-prompt run has offset 0; a suffix run after a
# shared prefix (helpers.core.prefix) has offset P0, so query rows in hooked tensors are ``position - offset`` while
# key columns stay prompt positions.
HookFactory = Callable[..., list]


def unembed_at(model: HookedTransformer, resid: Float[torch.Tensor, "batch seq d_model"], q: Int[torch.Tensor, "batch"],
               vocab: torch.Tensor | None = None) -> Float[torch.Tensor, "batch vocab"]:
    """Logits of ``resid`` (the final residual stream) at ``q[b]`` of each row; ``vocab``: only these columns."""
    at_q = model.ln_final(resid[torch.arange(resid.shape[0], device=resid.device), q.to(resid.device)][:, None, :])
    accounting.count_unembed(model, at_q.shape[0], model.cfg.d_vocab if vocab is None else len(vocab))
    if vocab is None:
        logits = model.unembed(at_q)[:, 0, :]
    else:
        vocab = vocab.to(at_q.device)
        logits = at_q[:, 0, :] @ model.unembed.W_U[:, vocab] + model.unembed.b_U[vocab]
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0)
    if cap and cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def resid_at(model: HookedTransformer, tokens: Int[torch.Tensor, "batch seq"], q: Int[torch.Tensor, "batch"], fwd_hooks: Sequence = (),
             **forward_kwargs) -> Float[torch.Tensor, "batch d_model"]:
    """The final residual stream (before ln_final) at ``q[b]`` of each row."""
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        resid = model(tokens, stop_at_layer=model.cfg.n_layers, **forward_kwargs)
    return resid[torch.arange(resid.shape[0], device=resid.device), q.to(resid.device)]


def logits_at(model: HookedTransformer, tokens: Int[torch.Tensor, "batch seq"], q: Int[torch.Tensor, "batch"],
              fwd_hooks: Sequence = (), vocab: torch.Tensor | None = None,
              **forward_kwargs) -> Float[torch.Tensor, "batch vocab"]:
    """Logits at position ``q[b]`` of each row, unembedding only there.

    ``vocab``: token ids whose columns to compute (all when ``None``).
    ``forward_kwargs`` go to the model's forward. Differentiable (no
    inference mode inside): gradient-based experiments call it directly.
    """
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        resid = model(tokens, stop_at_layer=model.cfg.n_layers, **forward_kwargs)  # [batch, seq, d_model]
        return unembed_at(model, resid, q, vocab)


def batch_token_budget(model=None) -> int:
    """Padded tokens per batch at most: ``$ICL_BATCH_TOKENS``, else what fits ``model``'s device
    (:func:`helpers.core.sizing.sizing`): 1024 on a CPU, the GPU's free memory on CUDA. Without a model, the
    CPU's budget.

    On a CPU, throughput peaks at a few hundred to a thousand tokens per forward and then falls:
    measured on Gemma 3 270M (2 cores, 16 prompts), AGNews 1-shot (290-424 tokens) takes 6.2 s one
    by one and 9.3 s in one batch of 16; 5-shot (802-936 tokens) 17.9 s vs 35.3 s; SST-2 (39-58
    tokens) 2.0 s vs 1.0 s. A GPU wants the largest batch that fits.
    """
    return cpu_batch_tokens() if model is None else sizing(model, 1, 1).max_tokens


def length_batches(prompts: Sequence, batch_size: int, max_tokens: int | None = None,
                   fixed_tokens: int = CPU_PASS_TOKENS) -> list[list[int]]:
    """Indices of ``prompts`` (or token tensors) grouped into batches of similar length (longest first).

    A batch holds at most ``batch_size`` items and at most ``max_tokens``
    padded tokens (its longest item times its size; an item longer than that
    is a batch of its own). ``max_tokens=None`` uses :func:`batch_token_budget`;
    0 means no token cap. Within those caps the split of the length-sorted
    items minimises padded tokens plus ``fixed_tokens`` per batch (the cost of
    one more forward pass, in tokens: :attr:`helpers.core.sizing.Sizing.pass_tokens`, measured on a GPU), by
    dynamic programming: short inputs of very different lengths are not padded to the longest of sixteen.
    """
    batch_size = positive_int("batch_size", batch_size)
    budget = batch_token_budget() if max_tokens is None else int(max_tokens)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    lens = [len(prompts[i]) for i in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[i]: cost of batching the first i sorted items
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i - 1, max(i - batch_size, 0) - 1, -1):  # last batch = sorted items j..i-1
            rows = i - j
            if rows > 1 and budget > 0 and lens[j] * rows > budget:
                break
            cost = best[j] + fixed_tokens + lens[j] * rows
            if cost < best[i]:
                best[i], cut[i] = cost, j
    batches: list[list[int]] = []
    i = n
    while i > 0:
        batches.append(order[cut[i]:i])
        i = cut[i]
    return batches[::-1]


def unembed_rows(model: HookedTransformer, resid: Float[torch.Tensor, "n d_model"], vocab: torch.Tensor | None = None,
                 chunk: int = 256) -> Float[torch.Tensor, "n vocab"]:
    """Logits of final residual vectors (ln_final, unembedding, soft cap), ``chunk`` rows at a time.

    Collecting every input's residual at q and unembedding them together reads
    the unembedding matrix (Gemma 3: 640 x 262k) once per ``chunk`` rows rather
    than once per batch. ``vocab``: only these columns.
    """
    q = torch.zeros(1, dtype=torch.long)
    parts = [unembed_at(model, resid[s:s + chunk, None, :], q.expand(min(chunk, resid.shape[0] - s)), vocab)
             for s in range(0, resid.shape[0], chunk)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def predictions_from_resid(model: HookedTransformer, resid: Float[torch.Tensor, "n d_model"], prompts: Sequence[Prompt],
                           label_ids: Sequence[int], top_k: int = 5) -> Predictions:
    """:class:`Predictions` from each prompt's final residual at q.

    ``top_k=0`` computes the label words' logits only (prediction and accuracy
    need nothing else; full-vocabulary logits cost Gemma 3 about 10 ms per input
    on a CPU core) and leaves ``topk`` empty.
    """
    ids = torch.tensor(list(label_ids))
    gold = torch.tensor([p.gold if p.gold is not None else -1 for p in prompts])
    resid = resid.to(model.cfg.device)
    if top_k == 0:
        label_logits = unembed_rows(model, resid, vocab=ids).float().cpu()
        return Predictions(label_logits, torch.empty(len(prompts), 0, dtype=torch.long), gold)
    logits = unembed_rows(model, resid).float().cpu()
    return Predictions(logits[:, ids], logits.topk(top_k, dim=-1).indices, gold)


@result_types
@dataclass
class Predictions:
    label_logits: Float[torch.Tensor, "n classes"]  # logits of the label words' first tokens
    topk: Int[torch.Tensor, "n k"]  # top-k full-vocabulary token ids at q
    gold: Int[torch.Tensor, "n"]  # -1 where unknown

    @property
    def label_probs(self) -> Float[torch.Tensor, "n classes"]:
        return self.label_logits.softmax(-1)

    @property
    def pred(self) -> Int[torch.Tensor, "n"]:
        return self.label_logits.argmax(-1)

    @property
    def accuracy(self) -> float:
        known = self.gold >= 0
        if not known.any():
            raise ValueError("no gold labels: build prompts from Demo queries to score accuracy")
        return float((self.pred[known] == self.gold[known]).float().mean())

    def __len__(self) -> int:
        return int(self.gold.shape[0])


def predict(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH,
            top_k: int = 5, hooks: HookFactory | None = None, progress: bool | str = False) -> Predictions:
    """Label-restricted prediction at q for every prompt (input order kept).

    ``hooks``, if given, is called per batch with ``(batch_prompts, tokens)``
    and returns TransformerLens ``(hook_name, fn)`` pairs for that batch, so
    per-prompt positions (label positions, q) can be used inside hooks.
    """
    check_prompts(model, prompts, "predict", label_ids)
    if len(set(label_ids)) != len(label_ids):
        raise ValueError("label_ids must be distinct (see tasks.label_token_ids)")
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    resid = torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
    sized = sizing(model, max((len(p) for p in prompts), default=1), batch_size)
    batches = length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens)
    it = tqdm(batches, desc=progress if isinstance(progress, str) else "predict", leave=False,
              disable=not progress)
    with torch.inference_mode():
        for idx in it:
            batch = [prompts[i] for i in idx]
            tokens, q = pad_batch(batch, pad)
            tokens = tokens.to(model.cfg.device)
            fwd = hooks(batch, tokens, offset=0) if hooks else []
            resid[idx] = resid_at(model, tokens, q, fwd)
        return predictions_from_resid(model, resid, prompts, label_ids, top_k)


def shots_for(task: str, k_per_class: int) -> int:
    """The paper's per-class shots: its '5-shot' setting uses 3 per class on AGNews (length)."""
    return min(k_per_class, 3) if task == "agnews" and k_per_class == 5 else k_per_class
