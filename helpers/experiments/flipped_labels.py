"""Flipped labels: demonstrations whose label words say another class than their text (Krishna Kumar, arXiv
2511.21038, "Semantic anchors in in-context learning").

Each demonstration keeps its text and position; its label is moved by a fixed permutation of the classes that
moves every class (:func:`flip_permutation`: the two classes swapped, or each class to the next). The context then
maps a negative review to the word "Positive". Two readings of the model's prediction at q compete:

- it follows the words' meaning: the prediction is the query's own class (``truth``);
- it follows the context's mapping: the prediction is the permuted class (``prompt``): the paper's *prompt
  alignment*.

A third compares with the model's prediction for the same query without demonstrations (``prior``). The paper's
*semantic override rate*, correctness under flipped semantics, stays exactly 0 for 1-12B models while prompt
alignment rises, so it is not prompt alignment: its formula is not in the abstract, and :func:`override_rate` takes
it as the share following the flipped mapping among the inputs the model gets right both without demonstrations
and with the natural labels, ``P(flipped prediction = perm[gold] | zero-shot = natural = gold)``: an input whose
meaning the model knows, overridden by the flipped context. Whether the label words still gather the
demonstrations when their meaning contradicts the mapping is read with §2.1's flows and §2.2's isolation on the
same flipped prompts (their own methods, :mod:`helpers.experiments.saliency`, :mod:`helpers.experiments.isolation`).

Method only: prompts in, predictions and per-input agreements out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.checks import positive_int
from helpers.core.prompts import Demo, PromptSet, build_prompts, make_icl_set
from helpers.core.tasks import get_task

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["flip_permutation", "flipped_demos", "flipped_icl_set", "zero_shot_prompts", "agreements", "override_rate",
           "ALIGNMENTS"]

ALIGNMENTS = ("truth", "prompt", "prior")  # the keys of agreements(): the words' meaning, the context's mapping, zero-shot


def flip_permutation(n_classes: int) -> tuple[int, ...]:
    """The class each class's demonstrations are relabelled as, fixed before any run: two classes swap; with more,
    each goes to the next (``c -> (c + 1) % n``), so no class keeps its word (a derangement, as the paper cycles
    multi-class labels)."""
    n = positive_int("n_classes", n_classes)
    if n < 2:
        raise ValueError(f"a task needs at least two classes to flip its labels, got {n}")
    return tuple((c + 1) % n for c in range(n))


def _permutation(perm, allow_fixed: bool = False) -> tuple[int, ...]:
    """``perm`` as a tuple of ints if it is a permutation of ``0..n-1`` (n >= 2) that moves every class (any
    permutation with ``allow_fixed``); a clear error otherwise (1.5 is not a class; a class that keeps its word is
    not flipped)."""
    values = np.asarray(torch.as_tensor(perm).cpu() if isinstance(perm, torch.Tensor) else list(perm), dtype=object)
    if values.ndim != 1 or not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in values):
        raise ValueError(f"perm must be a 1-d sequence of whole class indices, got {list(values)!r}")
    out = tuple(int(c) for c in values)
    if len(out) < 2 or sorted(out) != list(range(len(out))):
        raise ValueError(f"perm must be a permutation of 0..{len(out) - 1} (two classes or more), got {out}")
    kept = [c for c, to in enumerate(out) if c == to]
    if kept and not allow_fixed:
        raise ValueError(f"perm {out} leaves classes {kept} on their own word, so their demonstrations are not "
                         "flipped: pass a permutation that moves every class (flip_permutation(n))")
    return out


def _classes(name: str, x, n: int) -> np.ndarray:
    """``x`` as a 1-d int array of class indices in ``0..n-1``; a clear error for NaN, fractions, strings or a class
    out of range."""
    t = torch.as_tensor(x) if isinstance(x, torch.Tensor) else None
    arr = t.cpu().numpy() if t is not None else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-d (one class per input), got shape {arr.shape}")
    if arr.dtype.kind not in "iuf" or arr.dtype == bool:
        raise ValueError(f"{name} must hold class indices (integers), got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
        raise ValueError(f"{name} must hold whole class indices, got non-integer values such as "
                         f"{arr[~(np.isfinite(arr) & (arr == np.round(arr)))][:3].tolist()}")
    arr = arr.astype(int)
    bad = arr[(arr < 0) | (arr >= n)]
    if bad.size:
        raise ValueError(f"{name} has classes {sorted(set(bad.tolist()))[:4]} outside 0..{n - 1} (the permutation's "
                         f"{n} classes)")
    return arr


def flipped_demos(demos: Sequence[Demo], perm: Sequence[int], allow_fixed: bool = False) -> list[Demo]:
    """The same demonstrations, in the same order, each labelled ``perm[label]``. A permutation that leaves a class
    on its own word is refused unless ``allow_fixed`` (the identity: the natural demonstrations, a test's case)."""
    perm = _permutation(perm, allow_fixed)
    bad = [d.label for d in demos if not 0 <= d.label < len(perm)]
    if bad:
        raise ValueError(f"demonstration labels {sorted(set(bad))} are outside the permutation's {len(perm)} classes")
    return [replace(d, label=perm[d.label]) for d in demos]


def flipped_icl_set(model: HookedTransformer, task, seed: int, n_test: int, k_per_class: int = 1,
                    perm: Sequence[int] | None = None, allow_fixed: bool = False) -> tuple[PromptSet, PromptSet]:
    """``(natural, flipped)``: :func:`helpers.core.prompts.make_icl_set`'s demonstrations and queries for ``seed``,
    and the same with every demonstration relabelled by ``perm`` (default :func:`flip_permutation`). The queries,
    their gold classes and the label words' token ids are the natural set's; a prompt's positions move only where
    a flipped label word has another token count. Both keep only the queries that fit the context in both, in the
    natural order, so their inputs pair one to one. ``allow_fixed``: as :func:`flipped_demos`."""
    task = get_task(task)
    natural = make_icl_set(model, task, seed, n_test, k_per_class)
    perm = flip_permutation(task.n_classes) if perm is None else _permutation(perm, allow_fixed)
    if len(perm) != task.n_classes:
        raise ValueError(f"perm has {len(perm)} classes; {task.display} has {task.n_classes}")
    demos = flipped_demos(natural.demos, perm, allow_fixed)
    if len({q.idx for q in natural.test}) != len(natural.test):
        raise ValueError("flipped_icl_set pairs inputs by their row in the test split; rows must be distinct")
    flipped, _ = build_prompts(model, task, demos, natural.test)
    fits = {p.query.idx for p in flipped}
    nat = [p for p in natural.prompts if p.query.idx in fits]
    natural = replace(natural, test=[p.query for p in nat], prompts=nat,
                      n_dropped=natural.n_dropped + len(natural.prompts) - len(nat))
    return natural, replace(natural, demos=demos, prompts=flipped)


def zero_shot_prompts(model: HookedTransformer, icl: PromptSet):
    """The queries of ``icl`` without demonstrations (the template and the query alone), in its order: the model's
    prior for each input."""
    prompts, dropped = build_prompts(model, icl.task, [], icl.test)
    if dropped:
        raise ValueError(f"{dropped} queries do not fit the context even without demonstrations")
    return prompts


def agreements(pred, gold, perm: Sequence[int], prior=None) -> dict[str, np.ndarray]:
    """Per input, 1 where the flipped prompt's prediction ``pred`` agrees and 0 where not: ``truth`` with the
    query's class (the words' meaning), ``prompt`` with its permuted class (the context's mapping: prompt
    alignment), and with ``prior`` (the zero-shot predictions) ``prior``. Every argument holds class indices of
    ``perm``'s classes; anything else is refused."""
    perm = _permutation(perm)
    n = len(perm)
    pred, gold = _classes("pred", pred, n), _classes("gold", gold, n)
    if pred.shape != gold.shape:
        raise ValueError(f"pred and gold must be two 1-d arrays of one length, got {pred.shape} and {gold.shape}")
    perm = np.asarray(perm, dtype=int)
    out = {"truth": (pred == gold).astype(int), "prompt": (pred == perm[gold]).astype(int)}
    if prior is not None:
        prior = _classes("prior", prior, n)
        if prior.shape != pred.shape:
            raise ValueError(f"prior must have pred's shape {pred.shape}, got {prior.shape}")
        out["prior"] = (pred == prior).astype(int)
    return out


def override_rate(flipped, natural, prior, gold, perm: Sequence[int]) -> np.ndarray:
    """The semantic override, per input of those the model gets right without demonstrations (``prior``) and with
    the natural labels (``natural``): 1 where the flipped prompt's prediction ``flipped`` is ``perm[gold]`` (the
    flipped mapping overrides a meaning the model knows), 0 where not. Its mean is the override rate (module
    docstring); an empty array when no input is right both ways."""
    perm = _permutation(perm)
    n = len(perm)
    flipped, natural, prior, gold = (_classes(k, v, n) for k, v in
                                     (("flipped", flipped), ("natural", natural), ("prior", prior), ("gold", gold)))
    if not flipped.shape == natural.shape == prior.shape == gold.shape:
        raise ValueError(f"flipped, natural, prior and gold must have one length, got {flipped.shape}, "
                         f"{natural.shape}, {prior.shape} and {gold.shape}")
    known = (natural == gold) & (prior == gold)
    return (flipped[known] == np.asarray(perm)[gold[known]]).astype(int)
