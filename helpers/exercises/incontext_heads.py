"""Notebook 07's exercise (a): one head ablated at the last position, checked against
:func:`helpers.experiments.incontext_heads.head_label_drops` on the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from helpers.exercises.grading import compare_to_reference, grader
from helpers.exercises.tiny import tiny_check_sets
from helpers.experiments.incontext_heads import head_label_drops

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["check_head_ablation"]


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
    three heads of two prompts on each tiny architecture (:func:`helpers.exercises.tiny.tiny_check_sets`).
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
