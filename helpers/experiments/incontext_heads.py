"""Paper B (Yu & Ananiadou 2024, arXiv 2402.02872, the in-context heads experiment): finding the *in-context heads*.

The paper ranks every attention head by what it does to the prediction on classification with semantically
unrelated labels (foo/bar) and keeps about 1% of them. Everything is measured at the last position ``q`` of each
prompt of an unrelated-label task (:mod:`helpers.core.unrelated`). A head's output at q, and how it is read, are
defined in :mod:`helpers.core.heads`. What ablating the heads found here does to accuracy is
:mod:`helpers.experiments.head_ablation`; whether the model reads the foo/bar mapping at all is
:mod:`helpers.experiments.mapping_control`.

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
  one batch (:func:`helpers.core.heads.ablated_last_logprobs`). With shared demonstrations that cache is the demonstrations'
  (run once for all prompts) extended by the prompt's own query tokens.
- **In-context heads**: heads ranked, for each label word separately, by the mean of their two ranks (gain
  and drop of that label's log-probability, mean over the prompts whose gold label it is: the heads that
  raise "foo" and the heads that raise "bar"); the two rankings are taken in turn (best foo head, best bar
  head, ...) up to ``max(min_heads, ceil(frac * n_heads_total))`` heads (:func:`incontext_heads`). A single
  ranking on the predicted label (:func:`rank_heads`) is the option ``per_label=False``: with a model that
  predicts one word most of the time it finds only that word's heads.

Cached step of notebook 07: :func:`~helpers.protocols.incontext_heads.attribution_runs` (sizes: :func:`~helpers.protocols.incontext_heads.incontext_heads_sizes`). By hand:
:func:`helpers.exercises.incontext_heads.check_head_ablation` compares a reader's one-head ablation with :func:`head_label_drops`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from einops import rearrange
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core.heads import Head, ablated_last_logprobs, collect_at_q, full_log_probs, head_contributions
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

__all__ = ["HeadScores", "head_attribution", "head_label_drops", "n_incontext_heads", "rank_heads", "rank_heads_for_label", "incontext_heads", "attribution_seed"]

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


def head_attribution(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                     batch_size: int = HEAVY_BATCH, ablation: str = "zero", progress: bool | str = False,
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
    per head; all heads in one batched one-token run, :func:`helpers.core.heads.ablated_last_logprobs`)."""
    masks = torch.zeros(1 + len(heads), model.cfg.n_layers, model.cfg.n_heads)
    for i, (l, h) in enumerate(heads):
        masks[1 + i, l, h] = 1.0
    with torch.inference_mode():
        lp = ablated_last_logprobs(model, tokens, masks, None, cache)[:, list(label_ids)].float().cpu()
    return lp[:1] - lp[1:]


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


# ------------------------------------------------------------------ sizes and the cached step (notebook 07)


def attribution_seed(sizes: EvalSizes) -> int:
    """Seed of the head-attribution prompts: the first seed + 1000 (never the evaluation prompts)."""
    return stream_seed("ranking", sizes.seeds[0])
