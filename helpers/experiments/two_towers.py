"""Paper B (Yu & Ananiadou 2024), idea 2: value-output vectors carry the labels, query and key are two towers.

In the in-context heads (:mod:`helpers.experiments.incontext_heads`), the value-output vector at each
demonstration's label position carries that label, and a prediction moves from foo to bar because the
*attention* at q moves between the foo and bar positions (query and key compute a similarity, like two towers),
not because the value-output vectors change. Read at the last position ``q`` (:mod:`helpers.core.heads`).

Definitions (fixed before any result was looked at):

- **Value-output vector** of source position j for head (l, h) at q: ``A[q, j] * (v_j @ W_O[l, h])`` (GQA:
  query head h reads KV head ``h // (n_heads // n_kv_heads)``) (:func:`value_output_vectors`). Summed over j
  it is the head's output at q (b_O excluded).
- Its **logit minus** is ``log p(foo) - log p(bar)`` of the vector projected through the (frozen)
  post-attention norm, the final norm with its scale frozen at that of the actual final residual at q, and
  ``W_U`` - i.e. a logit difference, since the log-softmax normaliser cancels. :func:`value_outputs` reports
  it per unit attention (``vo_lm``, from ``v_j @ W_O``) and attention-weighted (``wvo_lm``).
- **Label-carrying rate**: the share of (input, head, label position) whose ``vo_lm`` has the sign of the
  position's label (foo > 0, bar < 0) (:func:`label_carrying_rate`).
- **Two towers** (:func:`two_towers`): per input, ``d_attn`` = attention on foo positions minus on bar
  positions (summed over the heads) and ``d_vo`` = mean ``vo_lm`` at foo positions minus at bar positions;
  their correlations with the model's logit minus. With one fixed demonstration set the value-output
  vectors are identical for every query (causal attention), so the analysis uses prompts that each have
  their own demonstrations (:func:`helpers.core.unrelated.fresh_demo_prompts`).

Cached steps of notebook 07: :func:`~helpers.protocols.two_towers.value_output_runs`, :func:`~helpers.protocols.two_towers.towers_runs`; their intervals
(:func:`~helpers.protocols.two_towers.label_carrying_interval`, :func:`~helpers.protocols.two_towers.two_towers_intervals`) become notebook 07's claims in
:func:`~helpers.protocols.two_towers.two_towers_claims`. By hand: :func:`helpers.exercises.two_towers.check_value_output_logit_minus` compares a
reader's projection of one head's value-output vectors with :func:`value_outputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from einops import einsum
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core.heads import Head, collect_at_q, frozen_norm, full_log_probs, has_post_norm, kv_head_index
from helpers.core.prefix import PrefixCache
from helpers.core.prefix_runs import prompt_batches, shared_cache
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.seeds import stream_seed
from helpers.core.sizing import HEAVY_BATCH
from helpers.core.store import result_types
from helpers.core.unrelated import (
    EvalSizes,
)

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["value_output_vectors", "ValueOutputs", "value_outputs", "label_carrying_rows", "label_carrying_rate", "two_towers", "towers_seed", "pearson"]


# ------------------------------------------------------------------ value-output vectors


def value_output_vectors(model: HookedTransformer, pattern_q: Float[torch.Tensor, "batch head seq"],
                         v: Float[torch.Tensor, "batch seq kv d_head"], layer: int,
                         heads: Sequence[int] | None = None) -> Float[torch.Tensor, "batch head seq d_model"]:
    """``A[q, j] * (v_j @ W_O[layer, h])`` for every source j (b_O excluded); summed over j = the head's output."""
    hs = torch.arange(model.cfg.n_heads) if heads is None else torch.as_tensor(list(heads))
    vh = v[:, :, kv_head_index(model)[hs]]  # [batch, seq, head, d_head]: each query head's KV head
    W_O = model.blocks[layer].attn.W_O[hs]
    vo = einsum(vh, W_O, "batch seq head d_head, head d_head d_model -> batch head seq d_model")
    return pattern_q[:, hs, :, None] * vo


@result_types
@dataclass
class ValueOutputs:
    heads: list[Head]
    attn: Float[torch.Tensor, "n head demo"]  # A[q, p_k]
    vo_lm: Float[torch.Tensor, "n head demo"]  # logit minus of v_{p_k} W_O (per unit attention)
    wvo_lm: Float[torch.Tensor, "n head demo"]  # attention-weighted
    label_class: Int[torch.Tensor, "n demo"]
    label_pos: Int[torch.Tensor, "n demo"]
    out_lm: Float[torch.Tensor, "n"]  # the model's log p(foo) - log p(bar) at q
    pred: Int[torch.Tensor, "n"]


def value_outputs(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], heads: Sequence[Head],
                  batch_size: int = HEAVY_BATCH, progress: bool | str = False, shared: bool = True,
                  cache: PrefixCache | None = None) -> ValueOutputs:
    """Attention and value-output logit minus at every demonstration label position, for ``heads``.

    Prompts sharing their demonstrations run them once (values at the label positions from the prefix
    cache, attention rows from the suffix runs; ``cache``: that prefix already built, keep-everything);
    otherwise (e.g. :func:`helpers.core.unrelated.fresh_demo_prompts`, or ``shared=False``) full prompts run."""
    check_prompts(model, prompts, "read value outputs of", label_ids)
    if len(label_ids) != 2:
        raise ValueError("logit minus needs a binary task (label_ids = [foo, bar])")
    K = {p.n_demos for p in prompts}
    if len(K) != 1:
        raise ValueError("all prompts must have the same number of demonstrations")
    K = K.pop()
    n, S = len(prompts), len(heads)
    layers = sorted({l for l, _ in heads})
    W_U = model.W_U
    u = (W_U[:, label_ids[0]] - W_U[:, label_ids[1]]).float()
    attn = torch.empty(n, S, K)
    vo_lm = torch.empty(n, S, K)
    out_lm = torch.empty(n)
    pred = torch.empty(n, dtype=torch.long)
    if cache is None:
        cache = shared_cache(model, prompts, shared)
    batches = prompt_batches(model, prompts, batch_size, cache)
    with torch.inference_mode():
        for idx, tokens, q in tqdm(batches, desc="value-output", leave=False, disable=not progress):
            batch = [prompts[i] for i in idx]
            st = collect_at_q(model, tokens.to(model.cfg.device), q, want_pattern_layers=layers, cache=cache)
            lp = full_log_probs(model, st["resid_final"])[:, list(label_ids)]
            out_lm[idx] = (lp[:, 0] - lp[:, 1]).cpu()
            pred[idx] = lp.argmax(-1).cpu()
            pos = torch.tensor([p.label_pos for p in batch])  # [b, K] prompt positions
            ar = torch.arange(len(batch))[:, None]
            fs = st["final_scale"][:, None, :] if st["final_scale"] is not None else 1.0
            for s, (l, h) in enumerate(heads):
                v_pos = st["v"][l][ar, pos]  # [b, K, kv, dh]
                ones = torch.ones(len(batch), model.cfg.n_heads, K, dtype=v_pos.dtype, device=v_pos.device)
                vo = value_output_vectors(model, ones, v_pos, l, [h])[:, 0]  # [b, K, d] unweighted
                if has_post_norm(model):
                    vo = frozen_norm(model.blocks[l].ln1_post, vo, st["post_scale"][l][:, None, :])
                vo_lm[idx, s] = (frozen_norm(model.ln_final, vo, fs).float() @ u).cpu()
                attn[idx, s] = st["pattern"][l][ar, h, pos].float().cpu()
    lc = torch.tensor([p.label_class for p in prompts])
    lpos = torch.tensor([p.label_pos for p in prompts])
    return ValueOutputs(list(heads), attn, vo_lm, attn * vo_lm, lc, lpos, out_lm, pred)


def label_carrying_rows(vo: ValueOutputs) -> np.ndarray:
    """Per input, the share of (head, label position) whose value-output logit minus has the sign of the
    position's label (foo > 0, bar < 0)."""
    want = 1 - 2 * vo.label_class[:, None, :].float()  # foo(0) -> +1, bar(1) -> -1
    return ((vo.vo_lm * want) > 0).float().flatten(1).mean(1).numpy()


def label_carrying_rate(vo: ValueOutputs) -> float:
    """Share of (input, head, label position) whose value-output logit minus has the sign of the position's
    label (every input has the same number of heads and label positions: the mean of :func:`label_carrying_rows`)."""
    return float(label_carrying_rows(vo).mean())


# ------------------------------------------------------------------ two towers


def pearson(a, b) -> float:
    """Pearson's r of two sequences; NaN when either is constant (no correlation to speak of)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def two_towers(vo: ValueOutputs) -> dict:
    """Per input: attention difference d_attn = sum over heads of (attention on foo positions - on bar
    positions) and value-output difference d_vo = mean over heads of (mean vo_lm at foo positions - at bar
    positions, per unit attention). Pearson correlation of each with the model's logit minus, and with the
    predicted label (point-biserial, foo = 1); coefficient of variation (std / |mean|) of each."""
    foo = (vo.label_class == 0).float()[:, None, :]
    bar = 1 - foo
    d_attn = ((vo.attn * foo).sum(-1) - (vo.attn * bar).sum(-1)).sum(1)
    d_vo = ((vo.vo_lm * foo).sum(-1) / foo.sum(-1).clamp(min=1) - (vo.vo_lm * bar).sum(-1) / bar.sum(-1).clamp(min=1)).mean(1)
    is_foo = (vo.pred == 0).float()
    cv = lambda x: float(x.std() / x.mean().abs().clamp(min=1e-8))
    return {
        "d_attn": d_attn, "d_vo": d_vo,
        "corr_attn_logit_minus": pearson(d_attn, vo.out_lm), "corr_vo_logit_minus": pearson(d_vo, vo.out_lm),
        "corr_attn_pred": pearson(d_attn, is_foo), "corr_vo_pred": pearson(d_vo, is_foo),
        "cv_attn": cv(d_attn), "cv_vo": cv(d_vo),
        "frac_pred_foo": float(is_foo.mean()),
    }


# ------------------------------------------------------------------ notebook 07's claims


# ------------------------------------------------------------------ sizes and cached runs (notebook 07)


def towers_seed(sizes: EvalSizes) -> int:
    """Seed of the two-towers prompts: the first seed + 2000."""
    return stream_seed("two_way", sizes.seeds[0])
