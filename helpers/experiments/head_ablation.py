"""Paper B (Yu & Ananiadou 2024, arXiv 2402.02872, the in-context heads experiment): ablating the in-context heads.

The paper intervenes on its in-context heads (about 1% of the heads) and ICL accuracy drops from 87.6% to 24.4%.
Here the heads found by :mod:`helpers.experiments.incontext_heads` are zero-ablated on the evaluation prompts, at
the last position q and at every position, against as many random heads.

Definitions (fixed before any result was looked at):

- **Ablation**: the chosen heads' ``hook_z`` set to zero (or to a mean) at each prompt's q, or at every position
  (:func:`ablation_hook_pair`, :func:`ablation_predictions`).
- **Random control**: as many heads drawn with the evaluation seed, never among the in-context heads
  (:func:`random_heads`).
- **Conditions** (:data:`ABLATION_CONDITIONS`): plain, in-context heads ablated, random heads ablated, each of
  the two ablations at q and (suffix :data:`ALL_POSITIONS`) at every position (:func:`ablation_conditions`).
- **Drop** = plain minus in-context-heads-ablated accuracy; **excess** = random-heads-ablated minus
  in-context-heads-ablated accuracy (the paper's contrast), both paired per input (:func:`~helpers.protocols.head_ablation.ablation_intervals`),
  graded by :func:`~helpers.protocols.head_ablation.ablation_interval_part`.

Cached step of notebook 07: :func:`~helpers.protocols.head_ablation.ablation_runs`; its intervals become the claims of :func:`~helpers.protocols.head_ablation.ablation_claims` (and,
in a regime of :mod:`helpers.experiments.mapping_control`, :func:`~helpers.protocols.head_ablation.regime_ablation_claim`).

Notebook 10 ablates several head sets (one per ranking) on the same inputs: :func:`sets_ablation_conditions` runs
the plain prompts once for all of them; :func:`~helpers.protocols.head_ablation.head_sets_runs` on the tasks' ordinary label words and
:func:`~helpers.protocols.head_ablation.head_sets_foobar_runs` on paper B's foo/bar mapping and its swap (:func:`swap_averaged`), each stored on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.heads import Head
from helpers.core.predict import HookFactory, Predictions
from helpers.core.prefix_runs import predict_q_row, predict_with_cache, q_row_fits, shared_cache
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["random_heads", "ablation_hook_pair", "ablation_hooks", "ablation_predictions", "ablation_accuracy", "ALL_POSITIONS", "ABLATION_CONDITIONS", "ablation_conditions", "SET_CONDITIONS", "sets_ablation_conditions", "FOOBAR_MAPPINGS", "swap_averaged"]


# ------------------------------------------------------------------ the random control and the ablation hooks


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


def ablation_hook_pair(heads: Sequence[Head], ablation: str = "zero", means: torch.Tensor | None = None,
                       at: str = "q") -> tuple[list, HookFactory]:
    """``(prefix_hooks, factory)``: the listed heads' ``hook_z`` replaced by zero (or ``means[l, h]``) at each
    prompt's q (``at="q"``) or at every position (``at="all"``).

    ``factory`` is a :func:`helpers.core.predict.predict` / :func:`helpers.core.prefix.predict_shared` hook
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
                         heads: Sequence[Head], batch_size: int = FORWARD_BATCH, *, shared: bool = True, **kw) -> Predictions:
    """Predictions with ``heads`` ablated (``**kw`` to :func:`ablation_hook_pair`). Prompts sharing their
    demonstrations run them once (with ``at="all"``, with the heads ablated there too)."""
    prefix_hooks, hooks = ablation_hook_pair(heads, **kw) if heads else ([], None)
    cache = shared_cache(model, prompts, shared, prefix_hooks)
    return predict_with_cache(model, prompts, label_ids, batch_size, hooks=hooks, cache=cache)


def ablation_accuracy(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                      heads: Sequence[Head], batch_size: int = FORWARD_BATCH, *, shared: bool = True, **kw) -> float:
    """ICL accuracy with ``heads`` ablated (:func:`ablation_predictions`)."""
    return ablation_predictions(model, prompts, label_ids, heads, batch_size, shared=shared, **kw).accuracy


# ------------------------------------------------------------------ conditions, cached runs, intervals

ALL_POSITIONS = " (all positions)"  # suffix of the ablation conditions that ablate every position
ABLATION_CONDITIONS = ("plain", "in-context heads ablated", "random heads ablated", "in-context heads ablated"
                       + ALL_POSITIONS, "random heads ablated" + ALL_POSITIONS)


def ablation_conditions(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                        heads: Sequence[Head], seed: int, batch_size: int = FORWARD_BATCH, shared: bool = True) -> dict:
    """One cell of :func:`~helpers.protocols.head_ablation.ablation_runs` on any prompts: accuracy plain, with ``heads`` zero-ablated and with as
    many random heads (drawn with ``seed``, disjoint from ``heads``), each at q and at every position; ``shared``
    as in :func:`ablation_predictions` (prompts with their own demonstrations run whole either way). The runs are
    :func:`sets_ablation_conditions`' for one set, under notebook 07's condition names."""
    preds, rnd = _sets_predictions(model, prompts, label_ids, {"": heads}, seed, batch_size, shared)
    names = {"plain": "plain", ("", "set@q"): "in-context heads ablated", ("", "random@q"): "random heads ablated",
             ("", "set"): "in-context heads ablated" + ALL_POSITIONS,
             ("", "random"): "random heads ablated" + ALL_POSITIONS}
    preds = {c: preds[k] for k, c in names.items()}
    return {**{c: p.accuracy for c, p in preds.items()}, "random_heads": rnd[""],
            "correct": {c: (p.pred == p.gold).int().tolist() for c, p in preds.items()}}


# ------------------------------------------------------------------ several head sets on the same inputs (notebook 10)

SET_CONDITIONS = ("set", "random", "set@q", "random@q")  # each set ablated, as many random heads, at every position / at q


def _sets_predictions(model, prompts, label_ids, sets: Mapping[str, Sequence[Head]], seed: int, batch_size: int,
                      shared: bool) -> tuple[dict, dict]:
    """The predictions behind :func:`sets_ablation_conditions` (``{"plain": ..., (name, condition): ...}``) and each
    set's random heads. The plain run and the ablations at q change only q's row: each prompt up to q runs once
    for all of them and q once per condition (:func:`helpers.core.prefix_runs.predict_q_row`; where a sliding
    window rules that out, each runs its suffixes after the one unablated prefix). Each ablation at every position
    runs its own ablated prefix and suffixes."""
    plain_cache = shared_cache(model, prompts, shared)  # at q the demonstrations run unablated: one prefix for all
    rnd = {name: random_heads(model, len(heads), seed=seed, exclude=heads) for name, heads in sets.items()}
    at_q = {"plain": []}
    for name, heads in sets.items():
        at_q[(name, "set@q")], at_q[(name, "random@q")] = heads, rnd[name]
    if q_row_fits(model, prompts):  # a hook on the q row alone: every row it sees, at="all"
        q_preds = predict_q_row(model, prompts, label_ids, {k: ablation_hook_pair(hs, at="all")[0]
                                                            for k, hs in at_q.items()}, batch_size, plain_cache)
    else:
        q_preds = {k: predict_with_cache(model, prompts, label_ids, batch_size, cache=plain_cache,
                                         hooks=ablation_hook_pair(hs, at="q")[1] if hs else None)
                   for k, hs in at_q.items()}
    preds = {"plain": q_preds["plain"]}
    for name, heads in sets.items():
        preds[(name, "set@q")], preds[(name, "random@q")] = q_preds[(name, "set@q")], q_preds[(name, "random@q")]
        for cond, hs in (("set", heads), ("random", rnd[name])):
            preds[(name, cond)] = ablation_predictions(model, prompts, label_ids, hs, batch_size, shared=shared,
                                                       at="all")
    return preds, rnd


def sets_ablation_conditions(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                             sets: Mapping[str, Sequence[Head]], seed: int, batch_size: int = FORWARD_BATCH,
                             shared: bool = True) -> dict:
    """:func:`ablation_conditions` for several head sets on the same prompts, with the plain run (and the
    demonstrations' prefix that the runs at q share) computed once for all of them.

    Returns ``{"correct": {"plain": [0/1 per input], (name, condition): [0/1 per input]}, "random_heads": {name:
    heads}}`` for every set ``name`` and condition of :data:`SET_CONDITIONS`: ``set`` its heads zero-ablated at
    every position, ``random`` as many random heads (drawn with ``seed``, disjoint from the set, as
    :func:`random_heads`), ``@q`` the same at q only."""
    if not isinstance(sets, Mapping) or not sets:
        raise ValueError("sets must be a non-empty dict {name: [(layer, head), ...]}, e.g. {'fv': top_heads(...)}")
    preds, rnd = _sets_predictions(model, prompts, label_ids, sets, seed, batch_size, shared)
    return {"correct": {k: (p.pred == p.gold).int().tolist() for k, p in preds.items()}, "random_heads": rnd}


FOOBAR_MAPPINGS = {"foo/bar": ("foo", "bar"), "bar/foo": ("bar", "foo")}  # paper B's mapping and its swap


def swap_averaged(a: dict[tuple[str, int], dict], b: dict[tuple[str, int], dict]) -> dict[tuple[str, int], dict]:
    """Per input, the mean of its correctness under a mapping (``a``) and under its swap (``b``), the same inputs
    in the same order (notebook 07's swap-averaged accuracy: a fixed preference for one word scores 0.5)."""
    if a.keys() != b.keys():
        raise ValueError("the two mappings' runs must cover the same (task, seed) cells")
    out = {}
    for key in a:
        ca, cb = a[key]["correct"], b[key]["correct"]
        if ca.keys() != cb.keys() or any(len(ca[c]) != len(cb[c]) for c in ca):
            raise ValueError(f"{key}: the two mappings' runs must have the same conditions and inputs")
        out[key] = {"correct": {c: [(x + y) / 2 for x, y in zip(ca[c], cb[c])] for c in ca}}
    return out


# ------------------------------------------------------------------ notebook 07's claims
