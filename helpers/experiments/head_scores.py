"""Two more rankings of attention heads, beside paper B's in-context score: induction and function vectors.

Which heads carry in-context learning? Paper B (arXiv 2402.02872) ranks heads by their effect at the query
position q (:mod:`helpers.experiments.incontext_heads`). Two other rankings come from other work:

- **Induction score** (Olsson et al., 2022; Crosbie & Shutova, arXiv 2407.07011, ablate the top ones): on a
  sequence of random tokens repeated once, ``[r_0 .. r_{L-1} r_0 .. r_{L-1}]``, an induction head attends
  from the second copy of ``r_i`` to ``r_{i+1}`` of the first copy, the token after the earlier occurrence of
  the current token. :func:`induction_scores` is each head's mean attention from every position of the second
  copy (but its last) to that target, over ``n`` sequences: 1 for a perfect induction head.
- **Function-vector score** (Todd et al., arXiv 2310.15213; Yin & Steinhardt, arXiv 2502.14010, find these
  heads matter more for few-shot ICL than induction heads): a head's mean output at q over prompts with the
  correct labels (``z`` at q, averaged) is patched, one head at a time, into prompts whose demonstrations carry
  shuffled labels; the score is the mean rise of the correct label's probability over the full vocabulary
  (the causal indirect effect, :func:`fv_scores`). The patched runs are one-token runs of as many copies of a
  prompt as there are heads (:func:`helpers.core.heads.ablated_last_logprobs`).

:func:`top_heads` takes the top of any ranking and :func:`overlap` compares the sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float

from helpers.core.checks import positive_int, seed_arg
from helpers.core.heads import Head, ablated_last_logprobs, collect_at_q, mean_attention, repeated_random_tokens
from helpers.core.prefix_runs import prompt_batches, shared_cache
from helpers.core.prompts import Demo, PromptSet, check_prompts, make_icl_set
from helpers.core.sizing import HEAVY_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["induction_scores", "shuffled_demos", "shuffled_label_set", "mean_z_at_q", "fv_scores", "top_heads", "overlap", "top_share", "SETS"]


def induction_scores(model: HookedTransformer, length: int = 32, n: int = 16, seed: int = 0, batch_size: int = HEAVY_BATCH
                     ) -> Float[torch.Tensor, "layer head"]:
    """Each head's mean attention from the second copy's position of ``r_i`` to the first copy's ``r_{i+1}``
    (``i < length - 1``) on :func:`repeated_random_tokens` (module docstring)."""
    toks = repeated_random_tokens(model, length, n, seed)
    off = toks.shape[1] - 2 * length  # 1 with BOS
    rows = torch.arange(off + length, off + 2 * length - 1)  # the second copy of r_0 .. r_{L-2}
    return mean_attention(model, toks, rows, rows - length + 1, batch_size)  # to r_1 .. r_{L-1} of the first copy


def shuffled_demos(demos: Sequence[Demo], seed: int) -> list[Demo]:
    """``demos`` with their labels permuted (``numpy.random.default_rng(seed)``), redrawn until at least one label
    changes (the same list when every label is the same): the demonstrations keep their texts, the mapping
    from text to label is broken."""
    demos = list(demos)
    labels = [d.label for d in demos]
    if len(set(labels)) < 2:
        return demos
    rng = np.random.default_rng(seed_arg(seed))
    while True:
        perm = [labels[i] for i in rng.permutation(len(labels))]
        if perm != labels:
            return [Demo(d.text, lab, d.idx) for d, lab in zip(demos, perm)]


def shuffled_label_set(model: HookedTransformer, icl: PromptSet, seed: int) -> PromptSet:
    """The prompts of ``icl`` (same queries) with :func:`shuffled_demos` as demonstrations."""
    out = make_icl_set(model, icl.task, icl.seed, len(icl.prompts) + icl.n_dropped, icl.k_per_class,
                       demos=shuffled_demos(icl.demos, seed))
    if [p.query for p in out.prompts] != [p.query for p in icl.prompts]:
        raise ValueError("the shuffled prompts do not keep the clean prompts' queries (one may exceed the context "
                         "with the new demonstrations): use fewer or shorter demonstrations")
    return out


def mean_z_at_q(model: HookedTransformer, prompts, batch_size: int = HEAVY_BATCH, shared: bool = True
                ) -> Float[torch.Tensor, "layer head d_head"]:
    """Every head's ``z`` at q averaged over ``prompts`` (:func:`helpers.core.heads.collect_at_q`)."""
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head)
    cache = shared_cache(model, prompts, shared)
    for _, tokens, q in prompt_batches(model, prompts, batch_size, cache):
        store = collect_at_q(model, tokens, q, cache=cache)
        total += torch.stack([store["z"][l] for l in range(model.cfg.n_layers)], dim=1).float().sum(0).cpu()
    return total / len(prompts)


def fv_scores(model: HookedTransformer, clean, corrupted, label_ids: Sequence[int], batch_size: int = HEAVY_BATCH,
              shared: bool = True) -> Float[torch.Tensor, "n layer head"]:
    """Per corrupted prompt, every head's causal indirect effect (module docstring): the correct label's
    probability with the head's ``z`` at q set to its mean over ``clean`` (:func:`mean_z_at_q`), minus the
    probability without. ``corrupted[i]`` must have ``gold``; the label's token is ``label_ids[gold]``."""
    check_prompts(model, corrupted, "score heads on", label_ids)
    fill = mean_z_at_q(model, clean, batch_size, shared).to(model.cfg.dtype)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    masks = torch.zeros(1 + L * H, L, H)
    masks[1:].view(L * H, L, H)[torch.arange(L * H), torch.arange(L * H) // H, torch.arange(L * H) % H] = 1
    cache = shared_cache(model, corrupted, shared)
    out = torch.empty(len(corrupted), L, H)
    with torch.inference_mode():
        for i, p in enumerate(corrupted):
            lp = ablated_last_logprobs(model, p.tokens, masks, fill, cache=cache)[:, label_ids[p.gold]].float()
            prob = lp.exp().cpu()
            out[i] = (prob[1:] - prob[0]).view(L, H)
    return out


def top_heads(scores: Float[torch.Tensor, "layer head"], n: int) -> list[Head]:
    """The ``n`` heads of highest score, best first (ties in (layer, head) order)."""
    n = positive_int("n", n)
    flat = scores.flatten()
    if n > flat.numel():
        raise ValueError(f"n={n} but the model has {flat.numel()} heads")
    order = sorted(range(flat.numel()), key=lambda i: (-float(flat[i]), i))[:n]
    H = scores.shape[1]
    return [(i // H, i % H) for i in order]


def overlap(a: Sequence[Head], b: Sequence[Head], n_heads: int | None = None) -> dict:
    """The heads two sets share: ``{"shared": [...], "n_shared", "jaccard"}``, and with ``n_heads`` (the model's
    number of heads) ``"chance"``: the number two random sets of these sizes share on average,
    ``len(a) * len(b) / n_heads``."""
    sa, sb = {tuple(h) for h in a}, {tuple(h) for h in b}
    shared = sorted(sa & sb)
    union = sa | sb
    out = {"shared": shared, "n_shared": len(shared), "jaccard": len(shared) / len(union) if union else 0.0}
    if n_heads is not None:
        out["chance"] = len(sa) * len(sb) / positive_int("n_heads", n_heads)
    return out


# ------------------------------------------------------------------------------------------- at scale


def top_share(model: HookedTransformer, frac: float, min_heads: int = 4) -> int:
    """How many heads the top ``frac`` of all heads is: ``max(min_heads, ceil(frac * n_layers * n_heads))``."""
    return max(min_heads, math.ceil(frac * model.cfg.n_layers * model.cfg.n_heads))


SETS = {"incontext": "in-context heads (arXiv 2402.02872)", "induction": "induction heads (arXiv 2407.07011)",
        "fv": "function-vector heads (arXiv 2310.15213, 2502.14010)"}
