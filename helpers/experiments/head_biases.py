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
acts on the query's attention row only). Cached step of notebook 07: :func:`bias_runs`; its intervals
(:func:`bias_intervals`) become notebook 07's claims in :func:`head_biases_claims`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.grid import model_label, run_grid
from helpers.core.heads import Head, label_attention_at_q
from helpers.core.predict import HookFactory
from helpers.core.prefix import PrefixError
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.prompts import PoolSizeWarning, Prompt, build_prompts, class_draws, demos_from_indices, sample_test
from helpers.core.store import pins_weights, result_types
from helpers.core.tasks import label_token_ids
from helpers.core.unrelated import EvalSizes, UnrelatedTask, check_sizes, eval_sizes, unrelated_args
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means, bootstrap_of_means

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "BiasResult",
    "reduction_pct",
    "reweight_hooks",
    "majority_bias",
    "recency_bias",
    "bias_cells",
    "bias_intervals",
    "bias_interval_part",
    "head_biases_claims",
    "BiasSizes",
    "head_biases_sizes",
    "bias_runs",
]


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
                  n_major: int = 3, n_minor: int = 1, batch_size: int = 16, progress: bool = False,
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
                 k_per_class: int = 2, batch_size: int = 16, progress: bool = False,
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


def bias_cells(runs: dict[tuple[str, int, str], BiasResult], kind: str, stage: str) -> dict[tuple[str, int], np.ndarray]:
    """Per-input bias of :func:`bias_runs` results: for each query, the mean over the two directions of
    1[pred = that direction's favoured label], minus 0.5 (its mean over inputs is the bias size).
    ``stage``: "before" or "after" the reduction."""
    if stage not in ("before", "after"):
        raise ValueError("stage must be 'before' or 'after'")
    out = {}
    for (t, seed, k), r in runs.items():
        if k != kind:
            continue
        preds = r.per_direction[f"pred_{stage}"]
        lens = {len(p) for p in preds.values()}
        if len(lens) != 1:
            raise ValueError(f"({t}, {seed}, {kind}): the two directions scored different numbers of queries {lens}")
        out[(t, seed)] = np.mean([(np.asarray(p) == c).astype(float) for c, p in preds.items()], axis=0) - 0.5
    if not out:
        raise ValueError(f"no {kind!r} bias runs")
    return out


def bias_intervals(runs: dict[tuple[str, int, str], BiasResult], kind: str) -> dict[str, Interval | None]:
    """95% intervals of one bias: its size before and after the reduction, and the % reduction
    (:func:`reduction_pct` of the two means, paired per input; None when the bias before is too often 0 for the
    ratio to be defined)."""
    before, after = bias_cells(runs, kind, "before"), bias_cells(runs, kind, "after")
    try:
        red = bootstrap_of_means({"before": before, "after": after},
                                 lambda m: reduction_pct(m["before"], m["after"]))
    except ValueError:
        red = None
    return {"before": bootstrap_means(before), "after": bootstrap_means(after), "reduction": red}


def bias_interval_part(before: Interval, reduction: Interval | None) -> str:
    """One bias reduction from 95% intervals (criteria fixed before the run): "no measurable bias" unless the
    interval of the bias before the reduction lies above 0; then "replicates" if the reduction's interval lies
    at or above 10%, "partly" if above 0, "does not replicate" if at or below 0, else "inconclusive"."""
    if not before.low > 0 or reduction is None:
        return "no measurable bias"
    if reduction.low >= 10:
        return "replicates"
    if reduction.low > 0:
        return "partly"
    if reduction.high <= 0:
        return "does not replicate"
    return "inconclusive"


# ------------------------------------------------------------------ notebook 07's claims


def head_biases_claims(intervals: dict[str, dict[str, Interval | None]], context: str = "") -> list[Claim]:
    """Notebook 07's claims about the two bias reductions, from :func:`bias_intervals` per kind, graded with
    :func:`bias_interval_part`. With no measurable bias before the reduction there is nothing to reduce: the
    verdict is "inconclusive" and the note says why."""
    out = []
    for kind, iv in intervals.items():
        part = bias_interval_part(iv["before"], iv["reduction"])
        fmt = lambda x: "not measured" if x is None else f"{x:.3f}"
        note = f"Bias (P(favoured label) - 0.5) before {fmt(iv['before'])}, after {fmt(iv['after'])}."
        if part == "no measurable bias":
            note += " No measurable bias before the reduction (its interval does not lie above 0): nothing to reduce."
        out.append(claim(f"07.{kind}_reduction", iv["reduction"],
                         "inconclusive" if part == "no measurable bias" else part,
                         "bias before the reduction above 0; then the % reduction at or above 10 (replicates), "
                         "above 0 (partly), at or below 0 (does not replicate)", unit="%", context=context,
                         note=note, part=part,
                         missing="no bias measured before the reduction, so there is none to reduce"))
    return out


# ------------------------------------------------------------------ sizes and cached runs (notebook 07)


@dataclass(frozen=True)
class BiasSizes(EvalSizes):
    """The evaluation sizes (:class:`helpers.core.unrelated.EvalSizes`; ``n_eval`` queries per direction) and
    ``bias_tasks``, the tasks the biases run on."""

    bias_tasks: tuple[str, ...]


def head_biases_sizes(profile) -> BiasSizes:
    """Run sizes of the bias step of notebook 07: the shared evaluation sizes
    (:func:`helpers.core.unrelated.eval_sizes`) and ``bias_tasks`` (AGNews prompts are ~5x longer than SST-2's,
    so the CPU profiles run SST-2 only)."""
    bias_tasks = ("sst2",) if profile.name in ("smoke", "default") else ("sst2", "agnews")
    return BiasSizes(**asdict(eval_sizes(profile)), bias_tasks=bias_tasks)


@pins_weights
def bias_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: EvalSizes,
              seeds: Sequence[int] | None = None, kinds: Sequence[str] = ("majority", "recency"),
              batch_size: int = 16, model_name: str | None = None) -> dict[tuple[str, int, str], BiasResult]:
    """:func:`majority_bias` / :func:`recency_bias` (default demonstration counts) with ``sizes.n_eval``
    queries, before/after the reduction in ``heads[task]``, per (task, seed, kind) (cache kind
    ``"heads_bias"``). Runs every task of ``uts``: notebook 07 passes only those in ``sizes.bias_tasks``.
    Returns ``{(task, seed, kind): BiasResult}``."""
    fns = {"majority": majority_bias, "recency": recency_bias}
    if not set(kinds) <= set(fns):
        raise ValueError(f"kinds must be among {sorted(fns)}")
    check_sizes(sizes)
    name, seeds = model_label(model, model_name), sizes.seeds if seeds is None else seeds
    seeds = unrelated_args(uts, seeds)
    out = {}
    for kind in kinds:  # one grid per kind of bias
        def compute(t, seed, fn=fns[kind]):
            with warnings.catch_warnings():
                # PoolSizeWarning: as in helpers.core.unrelated.eval_set, n_eval may exceed the test pool (paper
                # profile, SST-2); the whole pool is used by design
                warnings.simplefilter("ignore", PoolSizeWarning)
                return fn(model, uts[t], heads[t], seed=seed, n_test=sizes.n_eval, batch_size=batch_size)

        runs = run_grid("heads_bias", model, list(uts), seeds, compute,
                        lambda t, _, kind=kind: {"kind": kind, "n": sizes.n_eval, "heads": heads[t]}, model_name=name)
        out |= {(t, seed, kind): r for (t, seed), r in runs.items()}
    return {(t, seed, kind): out[(t, seed, kind)] for t in uts for seed in seeds for kind in kinds}
