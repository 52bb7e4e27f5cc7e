"""Do the label words gather their demonstrations? A causal form of "information flows from the text into the label
words in the shallow layers" (arXiv 2305.14160 §2.1's S_wp, §2.2's isolation).

§2.2's isolation blocks every earlier key of a label word, so it also cuts the label word off from BOS, the template
and every earlier demonstration. This check blocks only the edges the claim is about: each demonstration's label
tokens (rows) reading its own input text (keys), in the first ``k`` layers (:func:`own_text_pairs`). Its baseline
blocks as many edges between content tokens of the demonstrations (:func:`content_pairs`: a content token reading
an earlier one), drawn at random, so the check asks whether the label words' view of their own text matters more
than as many ordinary text-to-text edges. A model that builds its answer from the labels gathered this way loses
accuracy; one that answers from its weights does not.

Both edge sets lie in the demonstrations, so prompts that share them run the knocked-out prefix once
(:func:`helpers.core.edges.run_edge_knockout`). Method only: prompts in, masks and per-input
correctness out; the protocol is :mod:`helpers.protocols.label_gathering`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool

from helpers.core.checks import seed_arg
from helpers.core.edges import run_edge_knockout
from helpers.core.positions import demo_content
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH

__all__ = ["own_text_pairs", "content_pairs", "gathering"]


def own_text_pairs(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "seq seq"]:
    """``[row, key]`` True at (a token of demonstration k's label word, a token of demonstration k's input text),
    for every demonstration, padded to ``seq``."""
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    if len(prompt.label_spans) != len(prompt.text_spans):
        raise ValueError(f"the prompt has {len(prompt.label_spans)} label words and {len(prompt.text_spans)} texts: "
                         "one of each per demonstration is needed")
    out = torch.zeros(seq, seq, dtype=torch.bool)
    for (la, lb), (ta, tb) in zip(prompt.label_spans, prompt.text_spans):
        if tb > la:
            raise ValueError(f"a demonstration's text {ta}-{tb} does not end before its label word at {la}")
        out[la:lb, ta:tb] = True
    return out


def content_pairs(prompt: Prompt, seed: int, seq: int | None = None) -> Bool[torch.Tensor, "seq seq"]:
    """As many (row, key) edges as :func:`own_text_pairs` has, drawn with ``seed`` among the edges from a content
    token of the demonstrations to an earlier one (:func:`helpers.core.positions.position_classes`; never the
    query's own text): the baseline. Prompts with the same demonstrations get the same edges."""
    n = len(prompt)
    seq = seq or n
    want = int(own_text_pairs(prompt).sum())
    content = demo_content(prompt)
    edges = [(r, c) for i, r in enumerate(content) for c in content[:i]]
    if want > len(edges):
        raise ValueError(f"the demonstrations have {len(edges)} content-to-content edges, fewer than the {want} "
                         "label-to-own-text edges the baseline must match")
    pick = np.random.default_rng(seed_arg(seed)).choice(len(edges), size=want, replace=False)
    out = torch.zeros(seq, seq, dtype=torch.bool)
    for j in pick:
        out[edges[j]] = True
    return out


def gathering(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int], seed: int,
              batch_size: int = FORWARD_BATCH, shared: bool = True) -> dict[str, torch.Tensor]:
    """Per prompt, 1 where the label-restricted prediction is the gold class: ``label`` with the label words' links
    to their own text blocked in ``layers``, ``control`` with as many content-to-content links blocked (drawn
    with ``seed``)."""
    gold = torch.tensor([p.gold for p in prompts])
    if (gold < 0).any():
        raise ValueError("the gathering check scores accuracy: every prompt needs a gold label")
    out = {}
    for name, pairs in (("label", own_text_pairs), ("control", lambda p, seq=None: content_pairs(p, seed, seq))):
        pred = run_edge_knockout(model, prompts, label_ids, layers, pairs, batch_size=batch_size, shared=shared)
        out[name] = (pred.label_logits.argmax(-1) == gold).to(torch.int8)
    return out
