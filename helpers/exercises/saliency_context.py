"""The exercise of notebook 11's second section: the (label word, earlier label word) pairs of arXiv 2504.00132's
flow, checked against :func:`helpers.core.positions.earlier_demo_pairs` on prompts of the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from helpers.core.positions import earlier_demo_pairs
from helpers.core.prompts import make_icl_set
from helpers.core.tasks import LabelWordWarning
from helpers.exercises.grading import CheckFailed, compare_to_reference, grader
from helpers.exercises.tiny import TINY_KINDS, tiny_model

__all__ = ["check_earlier_label_pairs"]


def _pairs_mistakes(prompt):
    def mask(rows, spans_of):
        out = torch.zeros(len(prompt), len(prompt), dtype=torch.bool)
        for k in rows:
            for a, b in spans_of(k):
                out[prompt.label_pos[k], a:b] = True
        return out

    every = range(prompt.n_demos)
    later = range(1, prompt.n_demos)
    return [
        ("Each label word's own label is counted among the earlier ones: take the spans of demonstrations 0..k-1, "
         "label_spans[:k].", lambda: mask(later, lambda k: prompt.label_spans[: k + 1])),
        ("Only the first token of each earlier label word is marked: a label word may span several tokens; mark "
         "every position of label_spans[j].", lambda: mask(later, lambda k: [(prompt.label_pos[j], prompt.label_pos[j] + 1)
                                                                          for j in range(k)])),
        ("These are the earlier demonstrations' texts (text_spans), not their label words.",
         lambda: mask(later, lambda k: prompt.text_spans[:k])),
        ("The first demonstration's label word has no earlier demonstration, so its row stays empty; here it "
         "reads its own label.", lambda: mask(every, lambda k: prompt.label_spans[: max(k, 1)])),
    ]


@grader
def check_earlier_label_pairs(fn: Callable) -> None:
    """Run ``fn(prompt)`` on TREC prompts (six classes, one demonstration each; some label words span several
    tokens) of each tiny model, against ``earlier_demo_pairs(prompt, links="label")``: a ``[seq, seq]`` boolean
    mask, True at (label word k's first token, a token of the label word of an earlier demonstration j < k)."""
    n = 0
    for kind in TINY_KINDS:
        model = tiny_model(kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token label words are the point here
            prompts = make_icl_set(model, "trec", 42, 2).prompts
        for p in prompts:
            got = fn(p)
            if got is None:
                raise CheckFailed(f"{kind} model: your function returned None; return a [seq, seq] boolean tensor")
            compare_to_reference(torch.as_tensor(got).float(), earlier_demo_pairs(p, None, "label").float(),
                                 f"{kind} model, a TREC prompt ({len(p)} tokens, {p.n_demos} demonstrations)",
                                 "row = each label word's first token (label_pos[k], k >= 1), columns = every token of "
                                 "the label words before it", mistakes=lambda p=p: [(m, lambda f=f: f().float())
                                                                                   for m, f in _pairs_mistakes(p)])
            n += 1
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on 3 tiny models (learned "
          f"positions, rotary, grouped-query), {n} prompts")
