"""Paper B (Yu & Ananiadou 2024), idea 1: a few *in-context heads* carry in-context learning.

Everything is measured at the last position ``q`` of each prompt of an unrelated-label task
(:mod:`helpers.core.unrelated`: foo/bar). A head's output at q, and how it is read, are defined in
:mod:`helpers.core.heads`.

Definitions (fixed before any result was looked at):

- **Gain** (a log-probability gain read at the final residual): for head (l, h) and prompt b with predicted
  label y (the unmodified model's label-restricted argmax), ``log p(y | r) - log p(y | r - c_lh)``, where
  ``r`` is the final residual stream at q, ``c_lh`` the head's residual contribution at q, and
  ``log p(. | x)`` the full-vocabulary log-softmax of ``unembed(ln_final(x))`` (ln_final recomputed, not
  frozen). It is what the head's own write at q adds to the predicted label's log-probability (its direct
  effect). The paper's variant adds ``c_lh`` to the residual entering layer l instead; on Gemma that
  residual, unembedded, is so far from a distribution in layers 0-1 (gains of ~100-200 nats) that those
  layers dominated every ranking, so the final residual is used.
- **Drop**: ``log p(y) - log p(y | head ablated)``, the head's ``hook_z`` at position q only set to zero
  (``ablation="zero"``) or to its mean at q over the prompts scored (``"mean"``). Ablating at q changes only
  position q's residual stream (causal attention), so it is computed exactly and cheaply: the prefix
  ``tokens[:q]`` runs once with a key/value cache and the last token is re-run once per head, all heads in
  one batch (:func:`ablated_last_logprobs`). With shared demonstrations that cache is the demonstrations'
  (run once for all prompts) extended by the prompt's own query tokens.
- **In-context heads**: heads ranked, for each label word separately, by the mean of their two ranks (gain
  and drop of that label's log-probability, mean over the prompts whose gold label it is: the heads that
  raise "foo" and the heads that raise "bar"); the two rankings are taken in turn (best foo head, best bar
  head, ...) up to ``max(min_heads, ceil(frac * n_heads_total))`` heads (:func:`incontext_heads`). A single
  ranking on the predicted label (:func:`rank_heads`) is the option ``per_label=False``: with a model that
  predicts one word most of the time it finds only that word's heads.
- **Ablation**: the in-context heads' ``hook_z`` set to zero at q (or at every position), against as many
  random heads (:func:`random_heads`), on the evaluation prompts (:func:`ablation_runs`).
- **Mapping control**: the same demonstrations and queries with the label words swapped (class 0 -> bar,
  class 1 -> foo; and " A"/" B" both ways). A model that follows the mapping in context is right under both
  mappings; a model with only a prior for one word predicts the same word under both, and is then right in
  exactly one of the two. *Swap-averaged accuracy* = per input, the mean of its correctness under a mapping
  and under its swap: a fixed word preference gives exactly 0.5, so only in-context use of the mapping lifts
  it above 0.5 (:func:`mapping_control`).
- **Regime**: the mapping control at 1, 2, 4, 8 and 16 demonstrations per class with two label pairs fixed
  before the run (foo/bar and " A"/" B", :data:`REGIME_PAIRS`), each with its swap (:func:`regime_runs`,
  :func:`regime_intervals`). A regime *follows the mapping* when its swap-averaged accuracy's 95% interval lies
  above 0.5 (:func:`mapping_interval_part`); the ablation then runs again in the one with the highest lower
  bound, with in-context heads found on that regime's prompts (:func:`regime_ablation`).

Notebook 07's overall verdict, :func:`heads_verdict`, lives here with the ablation it is mostly about: it takes
numbers and the parts already graded by the other experiments (value outputs and two towers in
:mod:`helpers.experiments.two_towers`, biases in :mod:`helpers.experiments.head_biases`), never their code.

Cached steps of notebook 07: :func:`accuracy_runs`, :func:`attribution_runs`, :func:`ablation_runs`; their
intervals (:func:`mapping_intervals`, :func:`ablation_intervals`) become notebook 07's claims in
:func:`incontext_heads_claims`. By hand: :func:`check_head_ablation` compares a reader's one-head ablation with
:func:`head_label_drops`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from einops import rearrange
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core.checks import grader
from helpers.core.heads import (
    Head,
    collect_at_q,
    full_log_probs,
    head_contributions,
    predict_with_cache,
    prompt_batches,
    shared_cache,
    z_mask_hooks,
)
from helpers.core.predict import HookFactory, Predictions
from helpers.core.prefix import PrefixCache, PrefixError, extend_prefix, suffix_forward
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.store import cached, pins_weights, result_types
from helpers.core.unrelated import (
    UnrelatedTask,
    cached_eval_runs,
    compare_to_reference,
    eval_sizes,
    make_set,
    run_model_name,
    tiny_check_sets,
    unrelated_args,
)
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "ablation_conditions",
    "HeadScores",
    "head_attribution",
    "ablated_last_logprobs",
    "head_label_drops",
    "check_head_ablation",
    "n_incontext_heads",
    "rank_heads",
    "rank_heads_for_label",
    "incontext_heads",
    "random_heads",
    "ablation_hook_pair",
    "ablation_hooks",
    "ablation_predictions",
    "ablation_accuracy",
    "ablation_interval_part",
    "ABLATION_CONDITIONS",
    "ablation_cells",
    "ablation_intervals",
    "mapping_control",
    "mapping_intervals",
    "mapping_interval_part",
    "heads_overall",
    "heads_verdict",
    "incontext_heads_claims",
    "incontext_heads_sizes",
    "attribution_seed",
    "accuracy_runs",
    "attribution_runs",
    "ALL_POSITIONS",
    "ablation_runs",
    "REGIME_PAIRS",
    "REGIME_KS",
    "swapped_mapping",
    "regime_sizes",
    "regime_runs",
    "regime_intervals",
    "clear_regimes",
    "regime_ablation",
    "regime_claims",
]


# ------------------------------------------------------------------ head attribution


@result_types
@dataclass
class HeadScores:
    gain: Float[torch.Tensor, "n layer head"]  # per prompt, for the predicted label
    drop: Float[torch.Tensor, "n layer head"]
    pred: Int[torch.Tensor, "n"]
    ablation: str
    label_gain: Float[torch.Tensor, "n label layer head"] | None = None  # per prompt, for every label word
    label_drop: Float[torch.Tensor, "n label layer head"] | None = None
    gold: Int[torch.Tensor, "n"] | None = None  # -1 where unknown

    @property
    def mean_gain(self) -> Float[torch.Tensor, "layer head"]:
        return self.gain.mean(0)

    @property
    def mean_drop(self) -> Float[torch.Tensor, "layer head"]:
        return self.drop.mean(0)


def ablated_last_logprobs(model: HookedTransformer, tokens: Int[torch.Tensor, "seq"],
                          masks: Float[torch.Tensor, "rows layer head"],
                          fill: Float[torch.Tensor, "layer head d_head"] | None,
                          cache: PrefixCache | None = None) -> Float[torch.Tensor, "rows vocab"]:
    """Log-probs at the last position of one prompt, once per row of ``masks`` (1 = head's z at q replaced
    by ``fill``, zero if None). The prefix runs once into a key/value cache; with ``cache`` (the shared
    demonstrations, keep-everything) only the tokens between it and the last token run, to extend it."""
    R = masks.shape[0]
    dev = model.cfg.device
    masks = masks.to(dev)
    hooks = z_mask_hooks(model, masks, fill)
    last = tokens[-1:].to(dev)[None].expand(R, 1)
    if cache is not None:
        P0 = cache.length
        if len(tokens) <= P0 or not torch.equal(tokens[:P0].cpu(), cache.tokens):
            raise PrefixError("the prompt does not start with the cache's prefix tokens")
        ext = extend_prefix(model, cache, tokens[P0:-1])
        resid = suffix_forward(model, ext, last, hooks)
        return full_log_probs(model, resid[:, 0])

    # lazy: TransformerLens takes seconds to import
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    prefix = tokens[None, :-1].to(dev)
    kv = TransformerLensKeyValueCache.init_cache(model.cfg, dev, batch_size=1)
    model(prefix, past_kv_cache=kv, attention_mask=torch.ones_like(prefix), stop_at_layer=model.cfg.n_layers)
    for e in kv.entries:
        e.past_keys = e.past_keys.expand(R, *e.past_keys.shape[1:])
        e.past_values = e.past_values.expand(R, *e.past_values.shape[1:])
    kv.previous_attention_mask = kv.previous_attention_mask.expand(R, -1)
    kv.freeze()
    with model.hooks(fwd_hooks=hooks):
        resid = model(last, past_kv_cache=kv, attention_mask=torch.ones_like(last), stop_at_layer=model.cfg.n_layers)
    return full_log_probs(model, resid[:, 0])


def head_attribution(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                     batch_size: int = 8, ablation: str = "zero", progress: bool | str = False,
                     shared: bool = True) -> HeadScores:
    """Gain and drop (module docstring) of every head for every prompt, at the prompt's q.

    Prompts sharing their demonstrations run them once (``shared=False``: full prompts throughout)."""
    if ablation not in ("zero", "mean"):
        raise ValueError("ablation must be 'zero' or 'mean'")
    if not prompts:
        raise ValueError("no prompts to score")
    check_prompts(model, prompts, "score heads on", label_ids)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    lids = torch.tensor(list(label_ids))
    n = len(prompts)
    C = len(lids)
    gain = torch.empty(n, L, H)
    label_gain = torch.empty(n, C, L, H)
    pred = torch.empty(n, dtype=torch.long)
    zq = torch.empty(n, L, H, model.cfg.d_head)
    cache = shared_cache(model, prompts, shared)
    batches = prompt_batches(model, prompts, batch_size, cache)
    with torch.inference_mode():
        for idx, tokens, q in tqdm(batches, desc="gain" if progress is True else (progress or "gain"), leave=False,
                                   disable=not progress):
            st = collect_at_q(model, tokens.to(model.cfg.device), q, cache=cache)
            lp_final = full_log_probs(model, st["resid_final"])
            y = lp_final[:, lids.to(lp_final.device)].argmax(-1)
            tok_y = lids.to(y.device)[y]
            r = st["resid_final"]  # [b, d]
            c = torch.stack([head_contributions(model, st, l) for l in range(L)], 1)  # [b, L, H, d]
            without = r[:, None, None, :] - c
            lp = full_log_probs(model, rearrange(without, "b l h d -> b (l h) d"))  # [b, L*H, vocab]
            ly = lp.gather(-1, tok_y[:, None, None].expand(-1, L * H, 1))[..., 0]
            ly0 = lp_final.gather(-1, tok_y[:, None])  # [b, 1]
            gain[idx] = rearrange(ly0 - ly, "b (l h) -> b l h", l=L).float().cpu()
            lab = lids.to(lp.device)
            label_gain[idx] = rearrange(lp_final[:, lab][:, None, :] - lp[..., lab], "b (l h) c -> b c l h",
                                        l=L).float().cpu()
            for l in range(L):
                zq[idx, l] = st["z"][l].float().cpu()
            pred[idx] = y.cpu()
        fill = zq.mean(0) if ablation == "mean" else None
        # one row per head plus an unablated row
        masks = rearrange(torch.cat([torch.zeros(1, L * H), torch.eye(L * H)]), "row (l h) -> row l h", l=L)
        drop = torch.empty(n, L, H)
        label_drop = torch.empty(n, C, L, H)
        for i in tqdm(range(n), desc="drop", leave=False, disable=not progress):
            lp = ablated_last_logprobs(model, prompts[i].tokens, masks, fill, cache=cache)
            lc = lp[:, lids.to(lp.device)].float().cpu()  # [1 + L*H, C]
            drop[i] = rearrange(lc[0, pred[i]] - lc[1:, pred[i]], "(l h) -> l h", l=L)
            label_drop[i] = rearrange(lc[:1] - lc[1:], "(l h) c -> c l h", l=L)
    gold = torch.tensor([-1 if p.gold is None else int(p.gold) for p in prompts])
    return HeadScores(gain, drop, pred, ablation, label_gain, label_drop, gold)


def head_label_drops(model: HookedTransformer, tokens: Int[torch.Tensor, "seq"], heads: Sequence[Head],
                     label_ids: Sequence[int], cache: PrefixCache | None = None) -> Float[torch.Tensor, "head label"]:
    """For each head of ``heads``: every label word's log-probability at the last position of ``tokens`` without
    minus with that head's ``z`` at that position set to zero (the drop of :func:`head_attribution`, one row
    per head; all heads in one batched one-token run, :func:`ablated_last_logprobs`)."""
    masks = torch.zeros(1 + len(heads), model.cfg.n_layers, model.cfg.n_heads)
    for i, (l, h) in enumerate(heads):
        masks[1 + i, l, h] = 1.0
    with torch.inference_mode():
        lp = ablated_last_logprobs(model, tokens, masks, None, cache)[:, list(label_ids)].float().cpu()
    return lp[:1] - lp[1:]


def _ablation_mistakes(model: HookedTransformer, tokens, layer: int, head: int, label_ids):
    """Typical wrong versions of the by-hand head ablation, each with its likely cause."""
    ids, q = list(label_ids), len(tokens) - 1

    def run(at=q, read=q, score="log_softmax", tokens=tokens):
        def zero(z, hook):
            z[:, at, head] = 0.0
            return z

        with torch.inference_mode():
            plain = model(tokens[None])[0, read]
            ablated = model.run_with_hooks(tokens[None], fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])[0, read]
        if score == "log_softmax":
            plain, ablated = plain.log_softmax(-1), ablated.log_softmax(-1)
        elif score == "label_softmax":
            plain, ablated = plain[ids].log_softmax(-1), ablated[ids].log_softmax(-1)
            return plain - ablated
        return plain[ids] - ablated[ids]

    return [
        ("You zeroed the head at every position: only the last position's z (z[:, q, head]) is zeroed.",
         lambda: run(at=slice(None))),
        ("Plain minus ablated is reversed: return plain minus ablated (a head that helps gives a positive drop).",
         lambda: -run()),
        ("These are logits: take log_softmax over the whole vocabulary first.", lambda: run(score="logits")),
        ("The log_softmax is over the label words only: take it over the whole vocabulary, then pick the label "
         "words.", lambda: run(score="label_softmax")),
        ("You ablated and read one position before the last: q is the last position (len(tokens) - 1).",
         lambda: run(tokens=tokens[:-1], at=q - 1, read=q - 1)),
    ]


@grader
def check_head_ablation(fn: Callable) -> None:
    """Check a reader's ``fn(model, tokens, layer, head, label_ids) -> [label]`` (each label word's log-probability
    at the last position, plain minus with that head's ``z`` zeroed there) against :func:`head_label_drops` on
    three heads of two prompts on each tiny architecture (:func:`helpers.core.unrelated.tiny_check_sets`).
    Raises an AssertionError that says what differs; prints one line when everything matches."""
    name = getattr(fn, "__name__", "your function")
    for kind, model, ps in tiny_check_sets():
        L, H = model.cfg.n_layers, model.cfg.n_heads
        heads = [(0, 1), (L // 2, H - 1), (L - 1, 2)]
        for i, p in enumerate(ps.prompts):
            want = head_label_drops(model, p.tokens, heads, ps.label_ids)
            for row, (l, h) in enumerate(heads):
                with torch.inference_mode():
                    got = fn(model, p.tokens, l, h, ps.label_ids)
                compare_to_reference(got, want[row], f"{name} on the tiny {kind} model, prompt {i}, head ({l}, {h})",
                                     "Zero that head's z (hook_z) at the last position only, and return the label "
                                     "words' full-vocabulary log-probabilities there (log_softmax), plain minus "
                                     "ablated.", mistakes=lambda: _ablation_mistakes(model, p.tokens, l, h,
                                                                                     ps.label_ids))
    print(f"✓ {name} matches the reference on 3 tiny models")


# ------------------------------------------------------------------ ranking


def n_incontext_heads(model: HookedTransformer, frac: float = 0.01, min_heads: int = 4) -> int:
    """``max(min_heads, ceil(frac * n_layers * n_heads))``."""
    return max(min_heads, math.ceil(frac * model.cfg.n_layers * model.cfg.n_heads))


def rank_heads(scores: HeadScores, by: str = "both") -> list[Head]:
    """All heads, best first: by mean gain, mean drop, or the mean of the two ranks (ties: gain)."""
    g, d = scores.mean_gain.flatten(), scores.mean_drop.flatten()
    H = scores.gain.shape[2]
    if by == "gain":
        key = -g
    elif by == "drop":
        key = -d
    elif by == "both":
        rg = torch.empty_like(g)
        rg[(-g).argsort()] = torch.arange(len(g), dtype=g.dtype)
        rd = torch.empty_like(d)
        rd[(-d).argsort()] = torch.arange(len(d), dtype=d.dtype)
        key = (rg + rd) / 2 + 1e-3 * rg / len(g)
    else:
        raise ValueError("by must be 'gain', 'drop' or 'both'")
    return [(int(i) // H, int(i) % H) for i in key.argsort()]


def rank_heads_for_label(scores: HeadScores, label: int, by: str = "both") -> list[Head]:
    """All heads, best first, for one label word: gain and drop of that label's log-probability, averaged over
    the prompts whose gold label it is (heads that raise "foo" when the answer is foo), ranked as
    :func:`rank_heads` does."""
    if scores.label_gain is None or scores.gold is None:
        raise ValueError("these HeadScores have no per-label scores: recompute them with head_attribution")
    n_labels = scores.label_gain.shape[1]
    if not 0 <= label < n_labels:
        raise ValueError(f"label must be in 0..{n_labels - 1}, got {label}")
    rows = scores.gold == label
    if not rows.any():
        raise ValueError(f"no attribution prompt has gold label {label}: score more prompts (n_attr) so that "
                         "every label has some")
    g, d = scores.label_gain[rows, label], scores.label_drop[rows, label]
    return rank_heads(HeadScores(g, d, scores.pred[rows], scores.ablation), by)


def incontext_heads(scores: HeadScores, n: int, per_label: bool = True, by: str = "both") -> list[Head]:
    """The ``n`` in-context heads. ``per_label`` (default): the rankings of each label word
    (:func:`rank_heads_for_label`) taken in turn - best foo head, best bar head, second foo head, ... - skipping
    heads already taken, so that heads raising either label are found even when the model favours one label.
    ``per_label=False``: :func:`rank_heads` on the predicted label."""
    if n < 1:
        raise ValueError("n must be at least 1")
    if not per_label:
        return rank_heads(scores, by)[:n]
    ranks = [rank_heads_for_label(scores, c, by) for c in range(scores.label_gain.shape[1])]
    out: list[Head] = []
    for tier in zip(*ranks):
        for h in tier:
            if h not in out and len(out) < n:
                out.append(h)
        if len(out) == n:
            break
    return out


def random_heads(model: HookedTransformer, n: int, seed: int, exclude: Sequence[Head] = (),
                 allow_overlap: bool = False) -> list[Head]:
    """``n`` distinct heads drawn with ``seed``; never in ``exclude`` unless ``allow_overlap``."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    ex = set() if allow_overlap else {tuple(h) for h in exclude}
    pool = [(l, h) for l in range(L) for h in range(H) if (l, h) not in ex]
    if n > len(pool):
        raise ValueError(f"asked for {n} random heads but only {len(pool)} are available")
    pick = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted(pool[i] for i in pick)


# ------------------------------------------------------------------ ablation


def ablation_hook_pair(heads: Sequence[Head], ablation: str = "zero", means: torch.Tensor | None = None,
                       at: str = "q") -> tuple[list, HookFactory]:
    """``(prefix_hooks, factory)``: the listed heads' ``hook_z`` replaced by zero (or ``means[l, h]``) at each
    prompt's q (``at="q"``) or at every position (``at="all"``).

    ``factory`` is a :func:`helpers.core.predict.predict` / :func:`helpers.core.prefix_runs.predict_shared` hook
    factory (q row = ``p.q - offset``; with ``at="all"`` every row it sees). On full prompts it is all that is
    needed. In a shared-prefix run the prefix rows are not in the suffix's tensors: ``prefix_hooks`` (plain TL
    hooks, empty for ``at="q"``) ablate them in the prefix pass (``predict_shared(..., prefix_hooks=...)``).
    """
    if ablation == "mean" and means is None:
        raise ValueError("mean ablation needs means[layer, head, d_head] (e.g. from head_attribution's z at q)")
    if ablation not in ("zero", "mean"):
        raise ValueError("ablation must be 'zero' or 'mean'")
    if at not in ("q", "all"):
        raise ValueError("at must be 'q' or 'all'")
    lists: dict[int, list[int]] = {}
    for l, h in heads:
        lists.setdefault(int(l), []).append(int(h))
    by_layer = {l: torch.tensor(hs) for l, hs in lists.items()}

    def value(l, hs_t, z):
        return 0.0 if ablation == "zero" else means[l, hs_t].to(z.dtype).to(z.device)

    def every_row(l, hs_t):
        def fn(z, hook):
            z = z.clone()
            z[:, :, hs_t] = value(l, hs_t, z)
            return z
        return fn

    def factory(batch, tokens, offset: int = 0):
        q = torch.tensor([p.q - offset for p in batch])
        ar = torch.arange(len(batch))
        out = []
        for l, hs_t in by_layer.items():
            if at == "all":
                out.append((f"blocks.{l}.attn.hook_z", every_row(l, hs_t)))
                continue

            def fn(z, hook, l=l, hs_t=hs_t):
                val = value(l, hs_t, z)
                z = z.clone()
                z[ar[:, None], q[:, None], hs_t[None]] = val if ablation == "zero" else val[None].expand(len(ar), -1, -1)
                return z
            out.append((f"blocks.{l}.attn.hook_z", fn))
        return out

    prefix_hooks = [(f"blocks.{l}.attn.hook_z", every_row(l, hs_t)) for l, hs_t in by_layer.items()] if at == "all" else []
    return prefix_hooks, factory


def ablation_hooks(heads: Sequence[Head], ablation: str = "zero", means: torch.Tensor | None = None,
                   at: str = "q") -> HookFactory:
    """A :func:`helpers.core.predict.predict` hook factory replacing the listed heads' ``hook_z`` by zero (or
    ``means[l, h]``) at each prompt's q (``at="q"``) or at every position (``at="all"``; after a shared prefix
    this covers the suffix rows only: use :func:`ablation_hook_pair`'s prefix hooks too)."""
    return ablation_hook_pair(heads, ablation, means, at)[1]


def ablation_predictions(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                         heads: Sequence[Head], batch_size: int = 16, *, shared: bool = True, **kw) -> Predictions:
    """Predictions with ``heads`` ablated (``**kw`` to :func:`ablation_hook_pair`). Prompts sharing their
    demonstrations run them once (with ``at="all"``, with the heads ablated there too)."""
    prefix_hooks, hooks = ablation_hook_pair(heads, **kw) if heads else ([], None)
    cache = shared_cache(model, prompts, shared, prefix_hooks)
    return predict_with_cache(model, prompts, label_ids, batch_size, hooks=hooks, cache=cache)


def ablation_accuracy(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                      heads: Sequence[Head], batch_size: int = 16, *, shared: bool = True, **kw) -> float:
    """ICL accuracy with ``heads`` ablated (:func:`ablation_predictions`)."""
    return ablation_predictions(model, prompts, label_ids, heads, batch_size, shared=shared, **kw).accuracy


# criteria fixed before the runs (see notebook 07)
def ablation_interval_part(drop: Interval, excess: Interval, big: float = 0.20) -> str:
    """The ablation claim from 95% intervals (criteria fixed before the run).

    ``drop``: plain minus in-context-heads-ablated accuracy; ``excess``: random-heads-ablated minus
    in-context-heads-ablated accuracy (the paper's contrast), both paired per input
    (:class:`helpers.study.stats.Interval`). "replicates": the excess lies above zero and the drop at or above
    ``big``; "partly": the excess lies above zero; "does not replicate": it lies below zero;
    "inconclusive": it contains zero.
    """
    if excess.low > 0:
        return "replicates" if drop.low >= big else "partly"
    if excess.high < 0:
        return "does not replicate"
    return "inconclusive"


ALL_POSITIONS = " (all positions)"  # suffix of the ablation conditions that ablate every position
ABLATION_CONDITIONS = ("plain", "in-context heads ablated", "random heads ablated", "in-context heads ablated"
                       + ALL_POSITIONS, "random heads ablated" + ALL_POSITIONS)


def ablation_cells(runs: dict[tuple[str, int], dict]) -> dict[str, dict[tuple[str, int], list[int]]]:
    """Per-input correctness (0/1) of :func:`ablation_runs` results: ``{condition: {(task, seed): [...]}}``."""
    return {c: {key: r["correct"][c] for key, r in runs.items()} for c in ABLATION_CONDITIONS}


def ablation_intervals(runs: dict[tuple[str, int], dict]) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs, per task; mean over tasks) of :func:`ablation_runs` results: the
    accuracy of every condition (:data:`ABLATION_CONDITIONS`), ``drop`` = plain minus in-context heads ablated
    and ``excess`` = random minus in-context heads ablated, both paired per input, at q and (suffix
    :data:`ALL_POSITIONS`) at every position."""
    cells = ablation_cells(runs)
    out = {c: bootstrap_means(cells[c]) for c in ABLATION_CONDITIONS}
    for at in ("", ALL_POSITIONS):
        heads, rnd = cells["in-context heads ablated" + at], cells["random heads ablated" + at]
        out["drop" + at] = bootstrap_means(paired_differences(cells["plain"], heads))
        out["excess" + at] = bootstrap_means(paired_differences(rnd, heads))
    return out


# ------------------------------------------------------------------ mapping control


def mapping_control(runs: dict[tuple[str, int], dict], swapped: dict[tuple[str, int], dict]) -> dict[str, dict]:
    """Per-input cells of the mapping control from two :func:`accuracy_runs` results on the same demonstrations
    and queries, the second with the two label words swapped (module docstring).

    Returns ``{"swap_averaged": {(task, seed): (correct + correct_swapped) / 2}, "same_word": {(task, seed):
    1 where the predicted word is the same under both mappings}}``. A model with only a word prior scores 0.5
    and 1 on every input; one that follows the mapping scores 1 and 0.
    """
    if runs.keys() != swapped.keys():
        raise ValueError("the two runs must cover the same (task, seed) cells")
    out = {"swap_averaged": {}, "same_word": {}}
    for key, r in runs.items():
        s = swapped[key]
        if len(r["pred"]) != len(s["pred"]):
            raise ValueError(f"{key}: {len(r['pred'])} vs {len(s['pred'])} inputs; the swapped run must score the "
                             "same inputs")
        a, b = np.asarray(r["pred"]), np.asarray(s["pred"])
        out["swap_averaged"][key] = (np.asarray(r["correct"], float) + np.asarray(s["correct"], float)) / 2
        out["same_word"][key] = (a == 1 - b).astype(float)  # label c under one mapping is word 1-c under the other
    return out


def mapping_intervals(runs: dict[tuple[str, int], dict], swapped: dict[tuple[str, int], dict]) -> dict[str, Interval]:
    """95% intervals of :func:`mapping_control`'s two per-input cells: ``swap_averaged`` and ``same_word``."""
    return {k: bootstrap_means(cells) for k, cells in mapping_control(runs, swapped).items()}


def mapping_interval_part(swap_averaged: Interval) -> str:
    """What the swap-averaged accuracy's 95% interval says: "follows the mapping" (above 0.5), "at chance"
    (contains 0.5) or "against the mapping" (below 0.5)."""
    if swap_averaged.low > 0.5:
        return "follows the mapping"
    if swap_averaged.high < 0.5:
        return "against the mapping"
    return "at chance"


# ------------------------------------------------------------------ notebook 07's verdict


def heads_verdict(acc_before: float, acc_ablated: float, acc_random: float, carrying: float, corr_attn: float,
                  corr_vo: float, majority_red: float, majority_bias: float, recency_red: float, recency_bias: float,
                  ablation: str | None = None, value_output: str | None = None, **graded: str) -> tuple[str, dict]:
    """Per-claim and overall verdicts of notebook 07, from numbers (it calls no other experiment).

    - ablation: replicates if the in-context heads drop accuracy by >= 0.20 and by >= 2x the random heads'
      drop; partly if by >= 0.05 and more than the random heads; else does not replicate.
    - value-output: replicates if label-carrying rate >= 0.75; partly if >= 0.60.
    - two towers: replicates if corr(attention diff, logit minus) >= 0.5 and exceeds |corr(VO diff, logit
      minus)| by >= 0.2; partly if it exceeds it at all.
    - each bias reduction: "no measurable bias" if the bias is < 0.05; replicates if the reduction is >= 10%;
      partly if > 0; else does not replicate.
    Overall: "replicates" if every measurable claim replicates, "does not replicate" if none does even
    partly, else "partly". ``ablation``: the ablation part already graded from intervals
    (:func:`ablation_interval_part`), and ``value_output``
    (:func:`helpers.experiments.two_towers.value_output_interval_part`), used instead of the point rules;
    ``**graded``: any other part graded from intervals (``two_towers``, ``majority``, ``recency``, or an extra
    part such as ``ablation_all``), used as given. Overall "inconclusive" when no part replicates even partly
    and some part is inconclusive.
    """
    def grade(ok, part):
        return "replicates" if ok else ("partly" if part else "does not replicate")

    d_heads, d_rand = acc_before - acc_ablated, acc_before - acc_random
    parts = {
        "ablation": grade(d_heads >= 0.20 and d_heads >= 2 * max(d_rand, 0), d_heads >= 0.05 and d_heads > d_rand),
        "value_output": grade(carrying >= 0.75, carrying >= 0.60),
        "two_towers": grade(corr_attn >= 0.5 and corr_attn - abs(corr_vo) >= 0.2, corr_attn > abs(corr_vo)),
    }
    if ablation is not None:
        parts["ablation"] = ablation
    if value_output is not None:
        parts["value_output"] = value_output
    for name, red, b in (("majority", majority_red, majority_bias), ("recency", recency_red, recency_bias)):
        parts[name] = "no measurable bias" if not abs(b) >= 0.05 else grade(red >= 10, red > 0)
    parts.update(graded)
    return heads_overall(parts), parts


def heads_overall(parts: dict[str, str]) -> str:
    """The overall verdict from graded parts: "replicates" if every measurable part replicates, "partly" if some
    part replicates at least partly, "inconclusive" if none does and some part is inconclusive, else "does not
    replicate" (parts with "no measurable bias" are not measurable)."""
    graded = [v for v in parts.values() if v != "no measurable bias"]
    if graded and all(v == "replicates" for v in graded):
        return "replicates"
    if any(v in ("replicates", "partly") for v in graded):
        return "partly"
    if "inconclusive" in graded:
        return "inconclusive"
    return "does not replicate"


# ------------------------------------------------------------------ notebook 07's claims

MAPPING_VERDICT = {"follows the mapping": "replicates", "at chance": "inconclusive",
                   "against the mapping": "does not replicate"}


def incontext_heads_claims(mapping: dict[str, Interval], ablation: dict[str, Interval], context: str = "") -> list[Claim]:
    """Notebook 07's claims about in-context learning with foo/bar and its heads, from :func:`mapping_intervals`
    (foo/bar with bar/foo) and :func:`ablation_intervals`, graded with the criteria above
    (:func:`mapping_interval_part`, :func:`ablation_interval_part`)."""
    reading = mapping_interval_part(mapping["swap_averaged"])
    out = [claim("07.foobar_icl", mapping["swap_averaged"], MAPPING_VERDICT[reading],
                 "swap-averaged accuracy (foo/bar with bar/foo, per input) above 0.5; a fixed word preference "
                 "scores exactly 0.5", context=context,
                 note=f"Reading: {reading}; same-word rate {mapping['same_word']:.2f} (1 = a word prior only).")]
    for at, key, where in (("", "07.ablation_at_q", "at q"), (ALL_POSITIONS, "07.ablation_all", "at every position")):
        acc = {c: ablation[c + at] for c in ("in-context heads ablated", "random heads ablated")}
        out.append(claim(key, ablation["excess" + at], ablation_interval_part(ablation["drop" + at],
                                                                              ablation["excess" + at]),
                         "accuracy with as many random heads ablated minus with the in-context heads ablated above 0 "
                         "(partly); and the drop from the plain accuracy at or above 0.20 (replicates); below 0: "
                         "does not replicate", context=context,
                         note=f"Accuracy {where}: plain {ablation['plain']:.3f}, in-context heads ablated "
                              f"{acc['in-context heads ablated']:.3f}, random heads ablated "
                              f"{acc['random heads ablated']:.3f}; drop {ablation['drop' + at]:.3f}."))
    return out


# ------------------------------------------------------------------ sizes and cached runs (notebook 07)


def incontext_heads_sizes(profile) -> dict:
    """Run sizes of the accuracy, attribution and ablation steps of notebook 07: the shared evaluation sizes
    (:func:`helpers.core.unrelated.eval_sizes`) and ``n_attr``, the prompts for head attribution (each label
    word is ranked on the prompts whose gold label it is, about half of them)."""
    n_attr = {"smoke": 6, "default": 16}.get(profile.name, 64)
    return {**eval_sizes(profile), "n_attr": n_attr}


def attribution_seed(sizes: dict) -> int:
    """Seed of the head-attribution prompts: the first seed + 1000 (never the evaluation prompts)."""
    return sizes["seeds"][0] + 1000


def accuracy_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], sizes: dict,
                  seeds: Sequence[int] | None = None, batch_size: int = 16,
                  model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """ICL accuracy on the evaluation prompts, per (task, seed) (cache kind ``"heads_acc"``).

    Returns ``{(task, seed): {"acc", "foo_share" (share predicted as label 0), "n" (prompts scored), "pred"
    and "correct" (per input)}}``. The label words are read from the tasks (key ``"words"``), so foo/bar, the
    swapped mapping, " A"/" B" and the real words are separate runs.
    """
    def run(ps, _heads, _seed):
        pr = predict_with_cache(model, ps.prompts, ps.label_ids, batch_size, cache=shared_cache(model, ps.prompts))
        return {"acc": pr.accuracy, "foo_share": float((pr.pred == 0).float().mean()), "n": len(ps.prompts),
                "pred": pr.pred.tolist(), "correct": (pr.pred == pr.gold).int().tolist()}

    return cached_eval_runs("heads_acc", model, uts, sizes, seeds, model_name, run,
                            extra=lambda ut: {"words": list(ut.task.label_words)})


@pins_weights
def attribution_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], sizes: dict, batch_size: int = 16,
                     model_name: str | None = None, progress: bool | str = False) -> dict[str, HeadScores]:
    """:func:`head_attribution` (zero ablation) per task on ``sizes["n_attr"]`` prompts of
    :func:`attribution_seed` (cache kind ``"heads_attr"``). Returns ``{task: HeadScores}``."""
    name, K, seed = run_model_name(model, model_name), sizes["k_per_class"], attribution_seed(sizes)
    unrelated_args(uts)
    out = {}
    for t, ut in uts.items():
        def compute(ut=ut):
            ps = make_set(model, ut, seed, sizes["n_attr"], K)
            return head_attribution(model, ps.prompts, ps.label_ids, batch_size=batch_size, progress=progress)
        out[t] = cached("heads_attr", {"model": name, "task": t, "seed": seed, "k": K, "n": sizes["n_attr"],
                                       "def": "final-resid-v2-per-label"}, compute, model=model)
    return out


def ablation_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                  sizes: dict, seeds: Sequence[int] | None = None, batch_size: int = 16,
                  model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """Accuracy on the evaluation prompts plain, with ``heads[task]`` zero-ablated, and with as many random
    heads (drawn with the seed, disjoint from ``heads[task]``) zero-ablated, each at q only and at every position
    (cache kind ``"heads_ablation"``).

    Returns ``{(task, seed): {"plain", "in-context heads ablated", "random heads ablated", "in-context heads
    ablated (all positions)", "random heads ablated (all positions)", "random_heads", "correct"}}``;
    ``correct`` maps each condition to its per-input 0/1 (same inputs in every condition).
    """
    def run(ps, hs, seed):
        return ablation_conditions(model, ps.prompts, ps.label_ids, hs, seed, batch_size)

    return cached_eval_runs("heads_ablation", model, uts, sizes, seeds, model_name, run, heads=heads)


def ablation_conditions(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                        heads: Sequence[Head], seed: int, batch_size: int = 16, shared: bool = True) -> dict:
    """One cell of :func:`ablation_runs` on any prompts: accuracy plain, with ``heads`` zero-ablated and with as
    many random heads (drawn with ``seed``, disjoint from ``heads``), each at q and at every position; ``shared``
    as in :func:`ablation_predictions` (prompts with their own demonstrations run whole either way)."""
    rnd = random_heads(model, len(heads), seed=seed, exclude=heads)
    plain = shared_cache(model, prompts, shared)  # at q the demonstrations run unablated: one prefix for three runs

    def run(hs, at="q"):
        if at == "q":
            hooks = ablation_hook_pair(hs, at="q")[1] if hs else None
            return predict_with_cache(model, prompts, label_ids, batch_size, hooks=hooks, cache=plain)
        return ablation_predictions(model, prompts, label_ids, hs, batch_size, shared=shared, at=at)

    preds = {"plain": run([])}
    for name, at in (("", "q"), (ALL_POSITIONS, "all")):
        preds["in-context heads ablated" + name] = run(heads, at=at)
        preds["random heads ablated" + name] = run(rnd, at=at)
    return {**{c: p.accuracy for c, p in preds.items()}, "random_heads": rnd,
            "correct": {c: (p.pred == p.gold).int().tolist() for c, p in preds.items()}}


# ------------------------------------------------------------------ the regime: demonstrations per class x label pairs

# Fixed before any regime was run (and not changed after): paper B's foo/bar, and " A"/" B", the pair with which
# paper A's appendix F.2 found LLaMA-33B following an unrelated mapping (83.0% on SST-2 at 8 per class). Each runs
# with its swap (bar/foo, B/A), so every regime has the mapping control of section 2.1.
REGIME_PAIRS = ("foo/bar", "A/B")
REGIME_KS = (1, 2, 4, 8, 16)  # demonstrations per class


def swapped_mapping(pair: str) -> str:
    """The name of a mapping with its two label words swapped: ``"foo/bar"`` -> ``"bar/foo"``."""
    words = pair.split("/")
    if len(words) != 2 or not all(words):
        raise ValueError(f"a mapping is named 'word0/word1', got {pair!r}")
    return f"{words[1]}/{words[0]}"


def regime_sizes(profile) -> dict:
    """Sizes of the regime measurement (:func:`regime_runs`): ``ks`` (demonstrations per class), ``n_eval``
    queries per (task, seed), ``seeds``, ``tasks`` (of notebook 07's foo/bar tasks) and ``n_attr`` (head
    attribution prompts, used only if a regime follows the mapping, :func:`regime_ablation`).

    ``smoke``: 1 and 2 per class, 4 queries, one seed, SST-2 only (the code runs; not evidence). ``default``:
    every size of :data:`REGIME_KS`, 32 queries x the first 2 seeds, both tasks (64 inputs per task and size):
    each (task, seed, size, mapping) runs its demonstrations once (the shared-prefix path), so the cost is set by
    the 16-per-class AGNews prompts (about 2,000 tokens; on one free CPU core about 20 s per demonstration set and
    its 32 queries for Gemma 3 270M, 50 s for SmolLM2-135M, whose 30 layers attend over them): about 9 minutes
    for Gemma and 18 for SmolLM2 on one free core, several times that on a shared one.
    ``paper``: every size, the profile's inputs and seeds.
    """
    base = {"n_attr": incontext_heads_sizes(profile)["n_attr"]}
    # ``confirm_seeds`` (:func:`regime_confirmation`): fresh seeds for the regime that clears, never the first pass's
    if profile.name == "smoke":
        return {**base, "ks": (1, 2), "n_eval": 4, "seeds": tuple(profile.seeds[:1]), "tasks": ("sst2",),
                "confirm_seeds": _fresh_seeds(profile.seeds[:1])}
    if profile.name == "paper":
        return {**base, "ks": REGIME_KS, "n_eval": profile.n_test, "seeds": tuple(profile.seeds),
                "tasks": ("sst2", "agnews"), "confirm_seeds": _fresh_seeds(profile.seeds)}
    return {**base, "ks": REGIME_KS, "n_eval": 32, "seeds": tuple(profile.seeds[:2]), "tasks": ("sst2", "agnews"),
            "confirm_seeds": tuple(profile.seeds[2:4])}


def _fresh_seeds(seeds) -> tuple[int, ...]:
    """As many seeds as ``seeds``, none of them among ``seeds`` (each plus 1000)."""
    return tuple(int(s) + 1000 for s in seeds)


def _regime_eval_sizes(sizes: dict, k: int) -> dict:
    """The sizes :func:`accuracy_runs` and :func:`ablation_runs` take, for ``k`` demonstrations per class."""
    return {"n_eval": sizes["n_eval"], "seeds": tuple(sizes["seeds"]), "k_per_class": int(k),
            "n_attr": sizes.get("n_attr", 16)}


@pins_weights
def regime_runs(model: HookedTransformer, uts: dict[str, dict[str, UnrelatedTask]], sizes: dict,
                pairs: Sequence[str] = REGIME_PAIRS, batch_size: int = 16, model_name: str | None = None,
                progress: bool | str = False) -> dict[tuple[str, int], dict]:
    """:func:`accuracy_runs` for every label pair of ``pairs`` and its swap, at every size of ``sizes["ks"]``.

    ``uts``: ``{mapping name: {task: UnrelatedTask}}`` holding every pair and its swap (:func:`swapped_mapping`),
    as notebook 07's ``UTS``; the swap must name the same classes with the two words exchanged (checked).
    Each (task, seed, size) has one fixed, shuffled demonstration set, the same under a mapping and its swap, and
    the same ``sizes["n_eval"]`` queries; each runs its demonstrations once (shared-prefix path) and is cached as
    notebook 07's accuracy runs are (kind ``"heads_acc"``; size 2 is section 2.1's run when the sizes agree).
    Prompts longer than the model's context are dropped and counted (a (task, seed, size) whose prompts are all
    too long raises :class:`helpers.core.prompts.PromptError`, as every prediction does).

    Returns ``{(pair, k): {"runs": {(task, seed): accuracy run}, "swapped": {...}, "asked": queries asked,
    "dropped": queries dropped for length}}`` (over all tasks and seeds).
    """
    out = {}
    jobs = [(p, k) for p in pairs for k in sizes["ks"]]
    for pair, k in tqdm(jobs, desc="regime" if progress is True else (progress or "regime"), disable=not progress):
        sw = swapped_mapping(pair)
        if pair not in uts or sw not in uts:
            raise KeyError(f"uts needs the mapping {pair!r} and its swap {sw!r}; it has {sorted(uts)}")
        if uts[pair].keys() != uts[sw].keys():
            raise ValueError(f"{pair!r} and {sw!r} must cover the same tasks")
        for t, ut in uts[pair].items():
            other = uts[sw][t]
            if tuple(other.task.label_words) != tuple(reversed(ut.task.label_words)) or other.classes != ut.classes:
                raise ValueError(f"{t}: {sw!r} does not swap the label words of {pair!r} on the same classes "
                                 f"({list(ut.task.label_words)} vs {list(other.task.label_words)})")
        s = _regime_eval_sizes(sizes, k)
        runs = accuracy_runs(model, uts[pair], s, batch_size=batch_size, model_name=model_name)
        swapped = accuracy_runs(model, uts[sw], s, batch_size=batch_size, model_name=model_name)
        asked = sum(min(s["n_eval"], len(uts[pair][t].test)) for t, _ in runs)
        scored = sum(r["n"] for r in runs.values())
        out[(pair, int(k))] = {"runs": runs, "swapped": swapped, "asked": asked, "dropped": asked - scored}
    return out


def regime_intervals(runs: dict[tuple[str, int], dict]) -> dict[tuple[str, int], dict]:
    """Per regime (pair, k) of :func:`regime_runs`: 95% intervals (seeds, then inputs; mean over tasks) of the
    ``swap_averaged`` accuracy and the ``same_word`` rate (:func:`mapping_control`), of the plain ``accuracy``
    under the pair and ``accuracy_swapped`` under its swap, the ``reading`` (:func:`mapping_interval_part`), and
    ``asked``/``dropped``."""
    out = {}
    for key, r in runs.items():
        row = {"asked": r["asked"], "dropped": r["dropped"], **mapping_intervals(r["runs"], r["swapped"])}
        row["accuracy"] = bootstrap_means({c: v["correct"] for c, v in r["runs"].items()})
        row["accuracy_swapped"] = bootstrap_means({c: v["correct"] for c, v in r["swapped"].items()})
        row["reading"] = mapping_interval_part(row["swap_averaged"])
        out[key] = row
    return out


def clear_regimes(intervals: dict[tuple[str, int], dict]) -> list[tuple[str, int]]:
    """The regimes whose swap-averaged accuracy lies clearly above 0.5 (its 95% interval's lower bound above 0.5,
    :func:`mapping_interval_part`), highest lower bound first: the first is where :func:`regime_ablation` runs."""
    ok = [k for k, r in intervals.items() if r["reading"] == "follows the mapping"]
    return sorted(ok, key=lambda k: -intervals[k]["swap_averaged"].low)


@pins_weights
def regime_confirmation(model: HookedTransformer, uts: dict[str, dict[str, UnrelatedTask]], regime: tuple[str, int],
                        sizes: dict, batch_size: int = 16, model_name: str | None = None,
                        progress: bool | str = False) -> dict:
    """The regime ``(pair, k)`` that cleared (:func:`clear_regimes`), run again on fresh seeds
    (``sizes["confirm_seeds"]``, none of the first pass's): its :func:`regime_intervals` row.

    The best of several intervals is biased upwards (with ten 95% intervals one may clear 0.5 by chance alone),
    so a regime chosen after the fact counts only if it clears again on inputs and demonstrations it was not
    chosen on: :func:`regime_claims` grades ``07.unrelated_regime`` with this row."""
    pair, k = regime
    seeds = tuple(sizes["confirm_seeds"])
    if set(seeds) & set(sizes["seeds"]):
        raise ValueError(f"confirm_seeds {seeds} overlap the first pass's seeds {tuple(sizes['seeds'])}: "
                         "a confirmation needs fresh seeds")
    runs = regime_runs(model, uts, {**sizes, "ks": (int(k),), "seeds": seeds}, pairs=(pair,), batch_size=batch_size,
                       model_name=model_name, progress=progress)
    return regime_intervals(runs)[(pair, int(k))]


@pins_weights
def regime_ablation(model: HookedTransformer, uts: dict[str, UnrelatedTask], k: int, sizes: dict, n_heads: int,
                    batch_size: int = 16, model_name: str | None = None,
                    progress: bool | str = False) -> tuple[dict[str, list[Head]], dict, dict[str, Interval]]:
    """Sections 2.2-2.3 of notebook 07 in one regime: the in-context heads found on that regime's own prompts
    (:func:`attribution_runs`, ``sizes["n_attr"]`` prompts of :func:`attribution_seed`, ``k`` demonstrations per
    class), then :func:`ablation_runs` on its evaluation prompts. Returns ``(heads, runs, intervals)``
    (:func:`ablation_intervals`)."""
    s = _regime_eval_sizes(sizes, k)
    scores = attribution_runs(model, uts, s, batch_size=batch_size, model_name=model_name, progress=progress)
    heads = {t: incontext_heads(scores[t], n_heads) for t in uts}
    abl = ablation_runs(model, uts, heads, s, batch_size=batch_size, model_name=model_name)
    return heads, abl, ablation_intervals(abl)


def _regime_name(key: tuple[str, int]) -> str:
    return f"{key[0]} at {key[1]} per class"


def regime_claims(intervals: dict[tuple[str, int], dict], ablation: dict[str, Interval] | None = None,
                  regime: tuple[str, int] | None = None, context: str = "",
                  confirmation: dict | None = None) -> list[Claim]:
    """Notebook 07's claims about the regime, from :func:`regime_intervals` (criterion fixed before the run:
    :func:`mapping_interval_part`, i.e. the 95% interval's lower bound above 0.5).

    ``07.unrelated_regime``: the regime with the highest lower bound, its verdict as ``07.foobar_icl``'s, except
    that a regime that clears 0.5 counts ("replicates") only when its run on fresh seeds (``confirmation``, the
    :func:`regime_confirmation` row of that regime) clears 0.5 again; otherwise the verdict is "inconclusive". Its
    note lists every regime and the confirmation. ``07.regime_ablation`` (only with ``ablation``, the :func:`ablation_intervals` of
    :func:`regime_ablation` in ``regime``): graded as ``07.ablation_at_q`` (:func:`ablation_interval_part`).
    """
    if not intervals:
        raise ValueError("no regime to report")
    best = max(intervals, key=lambda k: intervals[k]["swap_averaged"].low)
    reading = intervals[best]["reading"]
    verdict = MAPPING_VERDICT[reading]
    confirmed = ""
    if reading == "follows the mapping":
        if confirmation is None:
            verdict, confirmed = "inconclusive", " Not yet run on fresh seeds, so it does not count."
        else:
            again = confirmation["reading"] == "follows the mapping"
            verdict = "replicates" if again else "inconclusive"
            confirmed = (f" On fresh seeds: {confirmation['swap_averaged']:.2f} ({confirmation['reading']}), so it "
                         + ("counts." if again else "does not count: chosen as the best of several, it did not "
                                                    "clear 0.5 again."))
    listing = "; ".join(f"{_regime_name(k)} {r['swap_averaged']:.2f}" for k, r in intervals.items())
    dropped = sum(r["dropped"] for r in intervals.values())
    out = [claim("07.unrelated_regime", intervals[best]["swap_averaged"], verdict,
                 f"in at least one of the {len(intervals)} regimes (label pair x demonstrations per class) the "
                 "swap-averaged accuracy's 95% interval lies above 0.5, and again on fresh seeds; shown: the "
                 "regime with the highest lower bound", context=context,
                 note=f"Shown: {_regime_name(best)} ({reading}).{confirmed} Every regime: {listing}. Prompts "
                      f"dropped for length: {dropped}. With {len(intervals)} intervals at 95% each, one may clear "
                      "0.5 by chance alone.", regime=list(best))]
    if ablation is not None:
        if regime is None:
            raise ValueError("say in which regime the ablation ran")
        out.append(claim("07.regime_ablation", ablation["excess"], ablation_interval_part(ablation["drop"],
                                                                                             ablation["excess"]),
                         "accuracy with as many random heads ablated at q minus with the in-context heads ablated "
                         "above 0 (partly); and the drop from the plain accuracy at or above 0.20 (replicates)",
                         context=f"{context}; {_regime_name(regime)}",
                         note=f"Accuracy at q: plain {ablation['plain']:.3f}, in-context heads ablated "
                              f"{ablation['in-context heads ablated']:.3f}, random heads ablated "
                              f"{ablation['random heads ablated']:.3f}; drop {ablation['drop']:.3f}."))
    return out
