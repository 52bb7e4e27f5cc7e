"""A prompt's positions by the role of their tokens, for the accounts that name a different carrier than the
label words.

Paper A (arXiv 2305.14160) names the label words as the anchors. Bai et al. (arXiv 2401.11323) name the
template and stopword tokens; Cho et al. (arXiv 2410.04468) the "forerunner" token, the template token just
before each label (the ``:`` of ``Sentiment:``). To test them side by side, every position of a prompt's
demonstrations falls in one class (:data:`CLASSES`):

- ``label``: every token of every demonstration's label word (``label_first``: the first token of each, the one
  paper A's code and this collection's other notebooks use);
- ``forerunner``: the template token immediately before each label word;
- ``template``: the other template tokens of the demonstrations (``Review:``, ``Sentiment:``, newlines);
- ``content``: the demonstrations' own text.

BOS (when the model uses one) and the query (its text, its template and q) belong to no class: the classes say
where the demonstrations' information may sit before q reads it. The roles come from the prompt's token record
(:class:`helpers.core.prompts.Prompt`: ``kinds``, ``label_spans``, ``format_pos``, ``text_spans``), so they hold
for any template and tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool

from helpers.core.prompts import Prompt

__all__ = ["CLASSES", "position_classes", "class_positions", "demo_content", "draw_content", "demo_end", "LINKS", "earlier_demo_pairs"]

CLASSES = ("label", "forerunner", "template", "content")


def demo_end(prompt: Prompt) -> int:
    """One past the demonstrations' last position: the prompt's ``demo_end`` when recorded, else the token after
    the last label word's span (and its template tokens up to the query's text)."""
    if prompt.demo_end is not None:
        return prompt.demo_end
    if not prompt.label_spans:
        raise ValueError("the prompt has no demonstrations (no label words): its positions have no classes")
    return prompt.label_spans[-1][1]


def position_classes(prompt: Prompt) -> dict[str, list[int]]:
    """``{class: sorted positions}`` for :data:`CLASSES` plus ``label_first`` (the first token of each label word,
    ``prompt.label_pos``). Every demonstration position but BOS is in exactly one of :data:`CLASSES`; a
    forerunner is a template token, so a template whose label follows no template token (none before it) has
    none for that demonstration."""
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be a helpers.core.prompts.Prompt (make_icl_set(...).prompts[i]), got "
                        f"{type(prompt).__name__}")
    end = demo_end(prompt)
    label = sorted({i for a, b in prompt.label_spans for i in range(a, b)} | set(prompt.label_pos))
    template_all = {p for p in prompt.format_pos if p < end} - set(label)
    forerunner = sorted({a - 1 for a, _ in prompt.label_spans if a - 1 in template_all})
    template = sorted(template_all - set(forerunner))
    start = 1 if prompt.bos else 0
    taken = set(label) | set(forerunner) | set(template)
    content = [i for i in range(start, end) if i not in taken]
    return {"label": label, "label_first": sorted(prompt.label_pos), "forerunner": forerunner,
            "template": template, "content": content}


def class_positions(prompts: Sequence[Prompt], cls: str) -> list[list[int]]:
    """The positions of class ``cls`` (one of :data:`CLASSES` or ``label_first``) in each prompt."""
    if cls not in (*CLASSES, "label_first"):
        raise ValueError(f"cls must be one of {(*CLASSES, 'label_first')}, got {cls!r}")
    return [position_classes(p)[cls] for p in prompts]


def demo_content(prompt: Prompt) -> list[int]:
    """The demonstrations' content positions (:func:`position_classes`), never the query's own text: the pool the
    checks that patch or block "as many content tokens" draw their baseline from."""
    a, b = prompt.query_span
    return [i for i in position_classes(prompt)["content"] if not a <= i < b]


def draw_content(prompt: Prompt, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` of :func:`demo_content`'s positions drawn with ``rng`` without replacement, sorted; all of them when
    there are fewer (the caller that must match ``k`` exactly checks the pool's size first)."""
    pool = demo_content(prompt)
    if len(pool) <= k:
        return pool
    return sorted(int(t) for t in rng.choice(pool, size=k, replace=False))


LINKS = ("all", "label", "text")  # what of the earlier demonstrations a label word reads (earlier_demo_pairs)


def earlier_demo_pairs(prompt: Prompt, seq: int | None = None, links: str = "all",
                       rows: Sequence[int] | None = None) -> Bool[torch.Tensor, "seq seq"]:
    """``[row, key]`` True for each demonstration's first label token (row) and positions of the demonstrations
    before its own (key), padded to ``seq``: ``all`` of them (from the first token after BOS to the end of the
    previous label word), their label words' tokens (``label``) or their input texts' (``text``). The first
    demonstration has no earlier one. The pairs of the knockout and the flows of arXiv 2504.00132
    (:mod:`helpers.experiments.isolation_context`, :mod:`helpers.experiments.saliency_context`). ``rows``: one
    position per demonstration to take the label word's place as the row (a control; entry 0 is unused), each
    inside its own demonstration, so its keys are still the earlier demonstrations."""
    if links not in LINKS:
        raise ValueError(f"links must be one of {LINKS}, got {links!r}")
    if rows is not None:
        rows = [int(r) for r in rows]
        ends = [prompt.label_spans[k - 1][1] if k else (1 if prompt.bos else 0) for k in range(prompt.n_demos)]
        bad = [k for k in range(1, prompt.n_demos) if len(rows) != prompt.n_demos
               or not ends[k] <= rows[k] <= prompt.label_pos[k]]
        if bad:
            raise ValueError(f"rows must hold one position per demonstration ({prompt.n_demos}), each within its own "
                             f"demonstration; demonstrations {bad[:4]} are not")
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    out = torch.zeros(seq, seq, dtype=torch.bool)
    start = 1 if prompt.bos else 0
    for k in range(1, prompt.n_demos):
        row = prompt.label_pos[k] if rows is None else rows[k]
        if links == "all":
            out[row, start: prompt.label_spans[k - 1][1]] = True
        else:
            spans = prompt.label_spans[:k] if links == "label" else prompt.text_spans[:k]
            for a, b in spans:
                out[row, a:b] = True
    return out
