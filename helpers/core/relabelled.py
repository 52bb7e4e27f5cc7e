"""The same inputs after relabelled demonstrations: the donors of the checks that ask whether an answer moves with
the labels the context shows (notebook 10's causal label reading and the anchors' mapping check).

A relabelling is a permutation ``perm`` of the classes: every demonstration of class ``c`` shows the label word of
``perm[c]`` instead, its text and order unchanged, and every input is asked again after them. :func:`shift` moves
every label one place, so no label stays and no answer can stay by chance where the answer is read from the labels.
"""

from __future__ import annotations

from collections.abc import Sequence

from helpers.core.prompts import Demo, Prompt, PromptSet, build_prompts

__all__ = ["shift", "relabelled_prompts"]


def shift(n: int) -> list[int]:
    """The permutation that moves every one of ``n`` labels one place: no label stays."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"a relabelling needs 2 labels or more, got {n!r}")
    return [(i + 1) % n for i in range(n)]


def relabelled_prompts(model, icl_set: PromptSet, perm: Sequence[int]) -> list[Prompt | None]:
    """Per prompt of ``icl_set``, the same input after its demonstrations relabelled by ``perm`` (the demonstrations
    again, each class ``c`` shown with ``perm[c]``'s label word), or None where that prompt passes the model's
    context."""
    perm = [int(c) for c in perm]
    if sorted(perm) != list(range(len(icl_set.label_ids))):
        raise ValueError(f"perm must be a permutation of 0..{len(icl_set.label_ids) - 1}, got {perm}")
    moved = [Demo(d.text, perm[d.label], d.idx) for d in icl_set.demos]
    donors, _ = build_prompts(model, icl_set.task, moved, [p.query for p in icl_set.prompts])
    by_query = {id(d.query): d for d in donors}
    return [by_query.get(id(p.query)) for p in icl_set.prompts]
