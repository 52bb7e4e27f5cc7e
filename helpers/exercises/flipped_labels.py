"""The exercise of notebook 11's first section: the semantic override rate by hand, checked against
:func:`helpers.experiments.flipped_labels.agreements` on flipped prompts of the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from helpers.core.predict import predict
from helpers.core.tasks import LabelWordWarning
from helpers.exercises.grading import compare_to_reference, grader
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.flipped_labels import agreements, flip_permutation, flipped_icl_set

__all__ = ["check_override_rate"]


def _override_mistakes(pred: torch.Tensor, gold: torch.Tensor, perm: torch.Tensor):
    inverse = torch.argsort(perm)
    return [
        ("This is the share that follows the words' meaning (pred == gold): the override follows the flipped "
         "mapping, pred == perm[gold].", lambda: (pred == gold).float().mean()),
        ("This maps the prediction instead of the gold class (perm[pred] == gold): with more than two classes the "
         "cycle runs the other way. Compare pred with perm[gold].", lambda: (perm[pred] == gold).float().mean()),
        ("This counts every prediction that is not the gold class: with more than two classes a wrong answer need "
         "not be the flipped one.", lambda: (pred != gold).float().mean()),
        ("This uses the inverse permutation: demonstrations of class c carry the word of class perm[c].",
         lambda: (pred == inverse[gold]).float().mean()),
    ]


@grader
def check_override_rate(fn: Callable) -> None:
    """Run ``fn(pred, gold, perm)`` (1-d integer tensors: each flipped prompt's predicted class, its query's gold
    class, and the permutation the demonstrations' labels were moved by) on the flipped SST-2 and TREC prompts of
    each tiny model, against the share of inputs whose prediction is ``perm[gold]``."""
    n = 0
    for kind in TINY_KINDS:
        model = tiny_model(kind)
        for task in ("sst2", "trec"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LabelWordWarning)  # TREC's multi-token words: read at their first
                _, flipped = flipped_icl_set(model, task, 42, 12)
            pred = predict(model, flipped.prompts, flipped.label_ids, top_k=0).label_logits.argmax(-1)
            gold = torch.tensor([p.gold for p in flipped.prompts])
            perm = torch.tensor(flip_permutation(flipped.task.n_classes))
            for case, (g, p) in {"the model's predictions": (gold, pred),
                                 "predictions that all follow the flip": (gold, perm[gold])}.items():
                want = torch.tensor(float(agreements(p, g, perm)["prompt"].mean()))
                got = fn(p.clone(), g.clone(), perm.clone())
                compare_to_reference(torch.as_tensor(got, dtype=torch.float32).reshape(()), want,
                                     f"{kind} model, {task} ({len(g)} inputs, {case})",
                                     "the share of inputs whose prediction is perm[gold], a number in [0, 1]",
                                     mistakes=lambda p=p, g=g: _override_mistakes(p, g, perm))
                n += 1
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on 3 tiny models (learned "
          f"positions, rotary, grouped-query), {n} cases")
