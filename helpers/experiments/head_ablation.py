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
  in-context-heads-ablated accuracy (the paper's contrast), both paired per input (:func:`ablation_intervals`),
  graded by :func:`ablation_interval_part`.

Cached step of notebook 07: :func:`ablation_runs`; its intervals become the claims of :func:`ablation_claims` (and,
in a regime of :mod:`helpers.experiments.mapping_control`, :func:`regime_ablation_claim`).

Notebook 10 ablates several head sets (one per ranking) on the same inputs: :func:`sets_ablation_conditions` runs
the plain prompts once for all of them; :func:`head_sets_runs` on the tasks' ordinary label words and
:func:`head_sets_foobar_runs` on paper B's foo/bar mapping and its swap (:func:`swap_averaged`), each stored on disk.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.grid import run_grid
from helpers.core.heads import Head
from helpers.core.predict import HookFactory, Predictions
from helpers.core.prefix_runs import predict_q_row, predict_with_cache, q_row_fits, shared_cache
from helpers.core.prompts import Prompt, make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.core.unrelated import BINARY_SOURCES, EvalSizes, UnrelatedTask, cached_eval_runs, unrelated_task
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means, paired_differences

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "random_heads",
    "ablation_hook_pair",
    "ablation_hooks",
    "ablation_predictions",
    "ablation_accuracy",
    "ALL_POSITIONS",
    "ABLATION_CONDITIONS",
    "ablation_conditions",
    "ablation_runs",
    "ablation_cells",
    "ablation_intervals",
    "ablation_interval_part",
    "ablation_claims",
    "regime_ablation_claim",
    "SET_CONDITIONS",
    "sets_ablation_conditions",
    "head_sets_runs",
    "FOOBAR_MAPPINGS",
    "task_intervals",
    "head_sets_foobar_runs",
    "sets_cells",
    "swap_averaged",
]


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


# ------------------------------------------------------------------ conditions, cached runs, intervals

ALL_POSITIONS = " (all positions)"  # suffix of the ablation conditions that ablate every position
ABLATION_CONDITIONS = ("plain", "in-context heads ablated", "random heads ablated", "in-context heads ablated"
                       + ALL_POSITIONS, "random heads ablated" + ALL_POSITIONS)


def ablation_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                  sizes: EvalSizes, seeds: Sequence[int] | None = None, batch_size: int = 16,
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
                             sets: Mapping[str, Sequence[Head]], seed: int, batch_size: int = 16,
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


def _sets_key(sets: Mapping[str, Sequence[Head]]) -> dict:
    return {name: [list(map(int, h)) for h in heads] for name, heads in sets.items()}


@pins_weights
def head_sets_runs(model: HookedTransformer, tasks: Sequence[str], sets: Mapping[str, Sequence[Head]],
                   seeds: Sequence[int], n: int, batch_size: int = 16) -> dict[tuple[str, int], dict]:
    """:func:`sets_ablation_conditions` on ``n`` inputs of one demonstration set per (task, seed), with the tasks'
    ordinary label words (:func:`helpers.core.prompts.make_icl_set`), stored on disk by model, task, seed, n and
    the sets."""
    tasks, seeds = run_args(tasks, seeds, n=n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token label words: notebook 00 lists them
            s = make_icl_set(model, task, seed, n)
        return sets_ablation_conditions(model, s.prompts, s.label_ids, sets, seed, batch_size)

    return run_grid("head_sets_ablation", model, tasks, seeds, run, {"n": n, "sets": _sets_key(sets)})


FOOBAR_MAPPINGS = {"foo/bar": ("foo", "bar"), "bar/foo": ("bar", "foo")}  # paper B's mapping and its swap


def head_sets_foobar_runs(model: HookedTransformer, tasks: Sequence[str], sets: Mapping[str, Sequence[Head]],
                          sizes: EvalSizes, batch_size: int = 16) -> dict[str, dict[tuple[str, int], dict]]:
    """``{mapping: {(task, seed): result}}``: :func:`sets_ablation_conditions` on notebook 07's evaluation prompts
    (:func:`helpers.core.unrelated.eval_set`) of the binary tasks among ``tasks``
    (:data:`helpers.core.unrelated.BINARY_SOURCES`; SST-2 when none is), under the foo/bar mapping and its swap
    (:data:`FOOBAR_MAPPINGS`): the same demonstrations and queries, the label words exchanged. Stored on disk."""
    binary = [t for t in tasks if t in BINARY_SOURCES] or ["sst2"]

    def run(ps, _heads, seed):
        return sets_ablation_conditions(model, ps.prompts, ps.label_ids, sets, seed, batch_size)

    return {m: cached_eval_runs("head_sets_ablation", model, {t: unrelated_task(t, BINARY_SOURCES[t], words)
                                                              for t in binary}, sizes, None, None, run,
                                extra=lambda ut: {"sets": _sets_key(sets)})
            for m, words in FOOBAR_MAPPINGS.items()}


def sets_cells(runs: dict[tuple[str, int], dict]) -> dict[str, dict[str, dict[tuple[str, int], list]]]:
    """``{set name: {condition: {(task, seed): per-input values}}}`` from :func:`head_sets_runs` (or
    :func:`swap_averaged`) results, conditions ``plain`` and :data:`SET_CONDITIONS`."""
    first = next(iter(runs.values()))["correct"]
    names = list(dict.fromkeys(k[0] for k in first if isinstance(k, tuple)))
    return {name: {cond: {key: r["correct"][cond if cond == "plain" else (name, cond)] for key, r in runs.items()}
                   for cond in ("plain", *SET_CONDITIONS)} for name in names}


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


def ablation_cells(runs: dict[tuple[str, int], dict]) -> dict[str, dict[tuple[str, int], list[int]]]:
    """Per-input correctness (0/1) of :func:`ablation_runs` results: ``{condition: {(task, seed): [...]}}``."""
    return {c: {key: r["correct"][c] for key, r in runs.items()} for c in ABLATION_CONDITIONS}


def task_intervals(runs: dict[tuple[str, int], dict], names: dict[str, str]) -> dict[tuple[str, str], Interval]:
    """``{(names[task], condition): Interval}``: each task's accuracy per condition (:data:`ABLATION_CONDITIONS`),
    95% over its seeds, then inputs, from :func:`ablation_runs` results; ``names`` maps a task to its shown name."""
    cells = ablation_cells(runs)
    return {(shown, c): bootstrap_means({s: v for (task, s), v in cells[c].items() if task == t})
            for t, shown in names.items() for c in ABLATION_CONDITIONS}


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


# ------------------------------------------------------------------ notebook 07's claims


def ablation_claims(ablation: dict[str, Interval], context: str = "") -> list[Claim]:
    """Notebook 07's two ablation claims (``07.ablation_at_q``, ``07.ablation_all``), from
    :func:`ablation_intervals`, graded with :func:`ablation_interval_part`."""
    out = []
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


def regime_ablation_claim(ablation: dict[str, Interval], context: str) -> Claim:
    """``07.regime_ablation``: the ablation at q in the regime that follows the mapping (``context`` names the
    regime), graded as ``07.ablation_at_q`` (:func:`ablation_interval_part`)."""
    return claim("07.regime_ablation", ablation["excess"], ablation_interval_part(ablation["drop"], ablation["excess"]),
                 "accuracy with as many random heads ablated at q minus with the in-context heads ablated "
                 "above 0 (partly); and the drop from the plain accuracy at or above 0.20 (replicates)",
                 context=context,
                 note=f"Accuracy at q: plain {ablation['plain']:.3f}, in-context heads ablated "
                      f"{ablation['in-context heads ablated']:.3f}, random heads ablated "
                      f"{ablation['random heads ablated']:.3f}; drop {ablation['drop']:.3f}.")
