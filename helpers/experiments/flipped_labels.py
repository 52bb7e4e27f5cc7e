"""Flipped labels: demonstrations whose label words say another class than their text (Krishna Kumar, arXiv
2511.21038, "Semantic anchors in in-context learning").

Each demonstration keeps its text and position; its label is moved by a fixed permutation of the classes that
moves every class (:func:`flip_permutation`: the two classes swapped, or each class to the next). The context then
maps a negative review to the word "Positive". Two readings of the model's prediction at q compete:

- it follows the words' meaning: the prediction is the query's own class (``truth``);
- it follows the context's mapping: the prediction is the permuted class (``prompt``), what the paper calls
  correctness under flipped semantics, the semantic override.

A third compares with the model's prediction for the same query without demonstrations (``prior``). The paper
reports a semantic override rate of exactly 0 for 1-12B models. Whether the label words still gather the
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

__all__ = ["flip_permutation", "flipped_demos", "flipped_icl_set", "zero_shot_prompts", "agreements", "ALIGNMENTS"]

ALIGNMENTS = ("truth", "prompt", "prior")  # the keys of agreements(): the words' meaning, the context's mapping, zero-shot


def flip_permutation(n_classes: int) -> tuple[int, ...]:
    """The class each class's demonstrations are relabelled as, fixed before any run: two classes swap; with more,
    each goes to the next (``c -> (c + 1) % n``), so no class keeps its word (a derangement, as the paper cycles
    multi-class labels)."""
    n = positive_int("n_classes", n_classes)
    if n < 2:
        raise ValueError(f"a task needs at least two classes to flip its labels, got {n}")
    return tuple((c + 1) % n for c in range(n))


def flipped_demos(demos: Sequence[Demo], perm: Sequence[int]) -> list[Demo]:
    """The same demonstrations, in the same order, each labelled ``perm[label]``."""
    perm = tuple(int(c) for c in perm)
    if sorted(perm) != list(range(len(perm))):
        raise ValueError(f"perm must be a permutation of 0..{len(perm) - 1}, got {perm}")
    bad = [d.label for d in demos if not 0 <= d.label < len(perm)]
    if bad:
        raise ValueError(f"demonstration labels {sorted(set(bad))} are outside the permutation's {len(perm)} classes")
    return [replace(d, label=perm[d.label]) for d in demos]


def flipped_icl_set(model: HookedTransformer, task, seed: int, n_test: int, k_per_class: int = 1,
                    perm: Sequence[int] | None = None) -> tuple[PromptSet, PromptSet]:
    """``(natural, flipped)``: :func:`helpers.core.prompts.make_icl_set`'s demonstrations and queries for ``seed``,
    and the same with every demonstration relabelled by ``perm`` (default :func:`flip_permutation`). The queries,
    their gold classes and the label words' token ids are the natural set's; a prompt's positions move only where
    a flipped label word has another token count. Both keep only the queries that fit the context in both, in the
    natural order, so their inputs pair one to one."""
    task = get_task(task)
    natural = make_icl_set(model, task, seed, n_test, k_per_class)
    perm = flip_permutation(task.n_classes) if perm is None else tuple(perm)
    if len(perm) != task.n_classes:
        raise ValueError(f"perm has {len(perm)} classes; {task.display} has {task.n_classes}")
    demos = flipped_demos(natural.demos, perm)
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
    query's class (the words' meaning), ``prompt`` with its permuted class (the context's mapping: the semantic
    override), and with ``prior`` (the zero-shot predictions) ``prior``."""
    pred, gold = (np.asarray(torch.as_tensor(x).cpu(), dtype=int) for x in (pred, gold))
    if pred.shape != gold.shape or pred.ndim != 1:
        raise ValueError(f"pred and gold must be two 1-d arrays of one length, got {pred.shape} and {gold.shape}")
    perm = np.asarray(perm, dtype=int)
    out = {"truth": (pred == gold).astype(int), "prompt": (pred == perm[gold]).astype(int)}
    if prior is not None:
        prior = np.asarray(torch.as_tensor(prior).cpu(), dtype=int)
        if prior.shape != pred.shape:
            raise ValueError(f"prior must have pred's shape {pred.shape}, got {prior.shape}")
        out["prior"] = (pred == prior).astype(int)
    return out
