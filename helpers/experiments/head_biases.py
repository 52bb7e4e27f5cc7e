"""Paper B (Yu & Ananiadou 2024), idea 3: majority-label and recency bias, reduced by re-weighting head attention.

If the in-context heads (:mod:`helpers.experiments.incontext_heads`) move a prediction by moving their attention
at q between label positions, then a bias in that attention biases the prediction, and re-weighting the
attention should reduce the bias. Paper B reports 22% (majority) and 17% (recency) on measures it does not
define in full; the measures and reductions here are this project's own, so they are not the same quantity.

Definitions (fixed before any result was looked at; label 0 = foo, 1 = bar; size in probability points,
0 = none):

- **Majority bias** = mean over the two 3:1 imbalanced demonstration sets of P(pred = majority label) - 0.5
  (:func:`majority_bias`).
- **Recency bias** = mean over the two orders ``[a, a, b, b]`` and ``[b, b, a, a]`` of P(pred = label of the last
  two demonstrations) - 0.5 (:func:`recency_bias`). Averaging the two directions cancels the model's own
  foo/bar preference and the class balance of the test sample.
- **Reductions**: (1) majority: in the in-context heads, the attention at q to the minority label's positions
  is multiplied by ``n_major / n_minor`` (= 3, no renormalisation), which multiplies the minority label's
  value-output contribution by 3. (2) recency: the positional part of an in-context head's attention is its
  mean attention from q to the k-th label slot over the two orders (each slot holds each class once, so class
  content averages out); it is removed by re-weighting ``A[q, p_k] *= mean_k(m) / m_k`` (no
  renormalisation). % reduction = ``100 * (|before| - |after|) / |before|`` (:func:`reduction_pct`).

Each demonstration set runs once for every pass over its queries (:mod:`helpers.core.heads`: the re-weighting
acts on the query's attention row only). Cached step of notebook 07: :func:`~helpers.protocols.head_biases.bias_runs`; its intervals
(:func:`~helpers.protocols.head_biases.bias_intervals`) become notebook 07's claims in :func:`~helpers.protocols.head_biases.head_biases_claims`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.heads import Head, label_attention_at_q
from helpers.core.predict import HookFactory
from helpers.core.prefix import PrefixError
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.prompts import Prompt, build_prompts, class_draws, demos_from_indices, sample_test
from helpers.core.sizing import FORWARD_BATCH
from helpers.core.store import result_types
from helpers.core.tasks import label_token_ids
from helpers.core.unrelated import UnrelatedTask

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["BiasResult", "reduction_pct", "reweight_hooks", "majority_bias", "recency_bias"]


@result_types
@dataclass
class BiasResult:
    kind: str  # "majority" | "recency"
    bias_before: float
    bias_after: float
    acc_before: float
    acc_after: float
    per_direction: dict

    @property
    def reduction_pct(self) -> float:
        return reduction_pct(self.bias_before, self.bias_after)


def reduction_pct(before: float, after: float) -> float:
    """``100 * (|before| - |after|) / |before|``: an overshoot to the opposite bias counts as bias, not as a
    reduction beyond 100%; NaN when there is no bias."""
    return 100.0 * (abs(before) - abs(after)) / abs(before) if abs(before) > 0 else float("nan")


def reweight_hooks(heads: Sequence[Head], weights_of: Callable[[Prompt, Head, int], torch.Tensor]) -> HookFactory:
    """Multiply, in ``heads``, the attention row at q by ``weights_of(prompt, head, len(prompt)) -> [seq]``
    (over prompt positions; after a shared prefix the key columns are prompt positions, the q row is
    ``p.q - offset``)."""
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(int(l), []).append(int(h))

    def factory(batch, tokens, offset: int = 0):
        T = offset + tokens.shape[1]  # key columns: the prefix's positions, then the suffix's
        out = []
        for l, hs in by_layer.items():
            w = torch.ones(len(batch), len(hs), T)
            for b, p in enumerate(batch):
                for j, h in enumerate(hs):
                    w[b, j, : len(p)] = weights_of(p, (l, h), len(p))
            q = torch.tensor([p.q - offset for p in batch])

            hs_t = torch.tensor(hs)

            def fn(pat, hook, hs=hs_t, w=w, q=q):
                if pat.shape[-1] != T:
                    raise PrefixError(f"{hook.name}: {pat.shape[-1]} key columns, expected {T} (re-weighting needs "
                                      "a keep-everything prefix cache)")
                pat = pat.clone()
                ar = torch.arange(pat.shape[0])[:, None]
                pat[ar, hs[None], q[:, None]] = pat[ar, hs[None], q[:, None]] * w.to(pat.dtype).to(pat.device)
                return pat
            out.append((f"blocks.{l}.attn.hook_pattern", fn))
        return out

    return factory


def _bias_from(preds: dict[int, torch.Tensor]) -> float:
    """mean over directions c of P(pred = c) - 0.5 (c = the favoured label of that direction)."""
    return float(np.mean([float((p == c).float().mean()) for c, p in preds.items()]) - 0.5)


def majority_bias(model: HookedTransformer, ut: UnrelatedTask, heads: Sequence[Head], seed: int, n_test: int,
                  n_major: int = 3, n_minor: int = 1, batch_size: int = FORWARD_BATCH, progress: bool = False,
                  shared: bool = True) -> BiasResult:
    """Majority-label bias with ``n_major:n_minor`` demonstrations, before/after amplifying the minority label's
    value-output contribution (attention at q on its label positions x ``n_major / n_minor``) in ``heads``.
    Each demonstration set runs once for both (the re-weighting acts on the query's row only)."""
    draws = class_draws(ut.train, ut.task, n_major, seed)
    queries = sample_test(ut.test, n_test, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    factor = n_major / n_minor
    before, after, acc_b, acc_a = {}, {}, [], []
    for c in (0, 1):
        idx = draws[c][:n_major] + draws[1 - c][:n_minor]
        order = np.random.default_rng([seed, 2, c]).permutation(len(idx))
        demos = demos_from_indices(ut.train, [idx[j] for j in order])
        prompts, _ = build_prompts(model, ut.task, demos, queries)
        cache = shared_cache(model, prompts, shared)
        pb = predict_with_cache(model, prompts, lids, batch_size, cache=cache,
                                progress=progress and f"majority {c} before")

        def w_of(p, head, T, minority=1 - c):
            w = torch.ones(T)
            w[[pos for pos, k in zip(p.label_pos, p.label_class) if k == minority]] = factor
            return w
        pa = predict_with_cache(model, prompts, lids, batch_size, hooks=reweight_hooks(heads, w_of), cache=cache,
                                progress=progress and f"majority {c} after")
        before[c], after[c] = pb.pred, pa.pred
        acc_b.append(pb.accuracy)
        acc_a.append(pa.accuracy)
    return BiasResult("majority", _bias_from(before), _bias_from(after), float(np.mean(acc_b)), float(np.mean(acc_a)),
                      {"pred_before": before, "pred_after": after})


def recency_bias(model: HookedTransformer, ut: UnrelatedTask, heads: Sequence[Head], seed: int, n_test: int,
                 k_per_class: int = 2, batch_size: int = FORWARD_BATCH, progress: bool = False,
                 shared: bool = True) -> BiasResult:
    """Recency bias with class-blocked orders ``[a]*k + [b]*k`` and its reverse, before/after removing the
    positional part of ``heads``' attention at q (re-weight slot k by mean(m) / m_k, m = mean attention per
    slot over both orders and all queries). Each order's demonstrations run once for all three passes."""
    draws = class_draws(ut.train, ut.task, k_per_class, seed)
    queries = sample_test(ut.test, n_test, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    sets, caches = {}, {}
    for last in (0, 1):
        demos = demos_from_indices(ut.train, draws[1 - last] + draws[last])
        sets[last], _ = build_prompts(model, ut.task, demos, queries)
        caches[last] = shared_cache(model, sets[last], shared)
    # positional profile m[head, slot]
    prof = torch.zeros(len(heads), 2 * k_per_class)
    cnt = 0
    plain = {}  # the unmodified predictions come from the same pass as the attention
    for last in (0, 1):
        attn, plain[last] = label_attention_at_q(model, sets[last], heads, batch_size, shared=shared,
                                                 cache=caches[last], label_ids=lids)
        prof += attn.sum(0)
        cnt += attn.shape[0]
    prof /= cnt
    corr = prof.mean(-1, keepdim=True) / prof.clamp(min=1e-8)  # [head, slot]
    head_row = {tuple(h): i for i, h in enumerate(heads)}

    def w_of(p, head, T):
        w = torch.ones(T)
        w[p.label_pos] = corr[head_row[head]]
        return w

    before, after, acc_b, acc_a = {}, {}, [], []
    for last in (0, 1):
        pb = plain[last]
        pa = predict_with_cache(model, sets[last], lids, batch_size, hooks=reweight_hooks(heads, w_of),
                                cache=caches[last])
        before[last], after[last] = pb.pred, pa.pred
        acc_b.append(pb.accuracy)
        acc_a.append(pa.accuracy)
    return BiasResult("recency", _bias_from(before), _bias_from(after), float(np.mean(acc_b)), float(np.mean(acc_a)),
                      {"pred_before": before, "pred_after": after, "slot_profile": prof, "slot_weights": corr})


# ------------------------------------------------------------------ intervals and verdict part


# ------------------------------------------------------------------ notebook 07's claims


# ------------------------------------------------------------------ sizes and cached runs (notebook 07)
