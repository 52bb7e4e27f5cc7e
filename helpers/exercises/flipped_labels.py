"""The exercise of notebook 11's first section: the semantic override rate by hand, checked against
:func:`helpers.experiments.flipped_labels.override_rate` on flipped prompts of the tiny random models
(:mod:`helpers.exercises.tiny`) and on a case built so that every input is right both ways."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from helpers.core.predict import predict
from helpers.core.tasks import LabelWordWarning
from helpers.exercises.grading import compare_to_reference, grader
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.flipped_labels import flip_permutation, flipped_icl_set, override_rate, zero_shot_prompts

__all__ = ["check_override_rate"]


def _override_mistakes(flipped, natural, prior, gold, perm):
    known = (natural == gold) & (prior == gold)
    inverse = torch.argsort(perm)
    return [
        ("This is prompt alignment over every input: the override rate keeps only the inputs the model gets right "
         "both without demonstrations and with the natural labels.", lambda: (flipped == perm[gold]).float().mean()),
        ("This keeps the inputs right with the natural labels only: the model must also know the answer without "
         "demonstrations (prior == gold).",
         lambda: (flipped[natural == gold] == perm[gold[natural == gold]]).float().mean()),
        ("This is the share that follows the words' meaning (flipped == gold) on the inputs right both ways: the "
         "override follows the flipped mapping, perm[gold].", lambda: (flipped[known] == gold[known]).float().mean()),
        ("This uses the inverse permutation: demonstrations of class c carry the word of class perm[c].",
         lambda: (flipped[known] == inverse[gold[known]]).float().mean()),
    ]


def _cases(model, task: str) -> dict[str, tuple]:
    """``{case: (flipped, natural, prior, gold, perm)}``: the tiny model's own predictions (when some input is right
    both ways) and a case whose every input is right both ways, half of them following the flip."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)  # TREC's multi-token words: read at their first token
        natural, flipped = flipped_icl_set(model, task, 42, 12)
        pred = {name: predict(model, s.prompts, s.label_ids, top_k=0).pred
                for name, s in (("natural", natural), ("flipped", flipped))}
        prior = predict(model, zero_shot_prompts(model, natural), natural.label_ids, top_k=0).pred
    gold = torch.tensor([p.gold for p in natural.prompts])
    perm = torch.tensor(flip_permutation(natural.task.n_classes))
    out = {}
    if override_rate(pred["flipped"], pred["natural"], prior, gold, perm).size:
        out["the model's predictions"] = (pred["flipped"], pred["natural"], prior, gold, perm)
    half = torch.where(torch.arange(len(gold)) % 2 == 0, perm[gold], gold)
    out["right both ways, every other input following the flip"] = (half, gold.clone(), gold.clone(), gold, perm)
    return out


@grader
def check_override_rate(fn: Callable) -> None:
    """Run ``fn(flipped, natural, prior, gold, perm)`` (1-d integer tensors: each input's prediction with the
    flipped demonstrations, with the natural ones, without demonstrations, its gold class, and the permutation the
    labels were moved by) on the SST-2 and TREC prompts of each tiny model, against the share following the flipped
    mapping among the inputs right both without demonstrations and with the natural labels."""
    n = 0
    for kind in TINY_KINDS:
        model = tiny_model(kind)
        for task in ("sst2", "trec"):
            for case, args in _cases(model, task).items():
                want = torch.tensor(float(override_rate(*args).mean()))
                got = fn(*(a.clone() for a in args))
                compare_to_reference(torch.as_tensor(got, dtype=torch.float32).reshape(()), want,
                                     f"{kind} model, {task} ({len(args[3])} inputs, {case})",
                                     "the share following perm[gold] among the inputs right both ways, a number in "
                                     "[0, 1]", mistakes=lambda args=args: _override_mistakes(*args))
                n += 1
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on 3 tiny models (learned "
          f"positions, rotary, grouped-query), {n} cases")
