"""Do the anchors carry the demonstrations? Two forms of paper A's Hidden_anchor checks (§3.2) that a model which
reads no mapping cannot pass.

Hidden_anchor keeps, at every layer, the keys and values of the anchor positions only (label words, formatting, BOS:
:func:`helpers.experiments.compression.anchor_keep`) and asks how often the prediction stays the full prompt's
(label loyalty). On a model that answers from its weights every prediction stays, whatever the context keeps, so
high loyalty and its gaps to Text_anchor and Hidden_random say nothing there (notebook 09's negative controls pass
them). Two comparisons ask what the paper's reading needs, each against Hidden_anchor itself on the same inputs:

- **the anchors carry the mapping** (``relabelled``): the anchors' cache built from the same demonstrations with
  every label moved to another class (the donor prompt), the input unchanged. If the answer is read from what the
  anchors hold, it moves with the labels and the loyalty falls; a model that answers from its weights keeps it.
- **the anchors carry the text** (``in_place``): the anchors' cache built while the demonstrations' text is hidden
  from every later position (its keys blocked in every layer), everything at its original position. This is
  Text_anchor (the label words without the text they label) without its one confound: Text_anchor deletes the
  text, so the input moves to other positions, and a model with learned positions answers otherwise though it reads
  nothing from the text.

Both run as edges blocked in every layer (:func:`helpers.core.edges.run_edge_knockout`): Hidden_anchor is the rows
from P0 on blocked from the demonstrations' positions outside the anchors (equal to the pruned cache of
:func:`~helpers.experiments.compression.build_cache`: tests); ``in_place`` adds every later row's links to those
positions. Prompts that share their demonstrations run them once per condition.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool

from helpers.core.edges import run_edge_knockout
from helpers.core.loyalty import label_loyalty_rows
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH
from helpers.experiments.compression import anchor_keep, prefix_len

__all__ = ["CONDITIONS", "dropped", "hidden_pairs", "in_place_pairs", "anchor_specificity"]

CONDITIONS = ("anchor", "relabelled", "in_place")  # anchor_specificity's per-input loyalties


def dropped(prompt: Prompt) -> list[int]:
    """The demonstrations' positions Hidden_anchor drops: every position before P0 outside
    :func:`~helpers.experiments.compression.anchor_keep` (the demonstrations' text)."""
    keep = set(anchor_keep(prompt))
    return [i for i in range(prefix_len(prompt)) if i not in keep]


def _mask(prompt: Prompt, seq: int | None) -> torch.Tensor:
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    return torch.zeros(seq, seq, dtype=torch.bool)


def hidden_pairs(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "seq seq"]:
    """``[row, key]`` True from every row at or after P0 to every :func:`dropped` position: Hidden_anchor as edges."""
    out = _mask(prompt, seq)
    cols = dropped(prompt)
    if cols:
        out[prefix_len(prompt):, cols] = True
    return out


def in_place_pairs(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "seq seq"]:
    """``[row, key]`` True from every later row to every :func:`dropped` position: the demonstrations' text hidden
    from everything after it (its own row keeps its diagonal), so the anchors are built without it."""
    out = _mask(prompt, seq)
    for c in dropped(prompt):
        out[c + 1:, c] = True
    return out


def anchor_specificity(model, prompts: Sequence[Prompt], donors: Sequence[Prompt | None], label_ids: Sequence[int],
                       full: torch.Tensor, batch_size: int = FORWARD_BATCH, shared: bool = True) -> dict:
    """Per input with a donor (``donors[i]``: ``prompts[i]`` with its demonstrations relabelled; None where there is
    none), 1.0 where the prediction is ``full[i]`` (the full prompt's label-restricted prediction), else 0.0, under
    each of :data:`CONDITIONS` (float tensors, module docstring); ``kept``: the indices of the inputs used, ``n``:
    the inputs given."""
    if not len(prompts) == len(donors) == len(full):
        raise ValueError(f"prompts, donors and full must have one entry per input, got {len(prompts)}, {len(donors)} "
                         f"and {len(full)}")
    keep = [i for i, d in enumerate(donors) if d is not None]
    bad = [i for i in keep if _query(donors[i]) != _query(prompts[i])]
    if bad:
        raise ValueError(f"donor {bad[0]} asks another query than its prompt: a donor is the same input after "
                         "relabelled demonstrations")
    if not keep:
        return {**{c: torch.zeros(0) for c in CONDITIONS}, "kept": torch.zeros(0, dtype=torch.long), "n": len(prompts)}
    ps, ds = [prompts[i] for i in keep], [donors[i] for i in keep]
    ref = torch.as_tensor(full)[torch.as_tensor(keep, dtype=torch.long)]
    every = range(model.cfg.n_layers)

    def loyal(group, pairs):
        pred = run_edge_knockout(model, group, label_ids, every, pairs, batch_size=batch_size, shared=shared).pred
        return torch.as_tensor(label_loyalty_rows(pred, ref)).float()

    return {"anchor": loyal(ps, hidden_pairs), "relabelled": loyal(ds, hidden_pairs),
            "in_place": loyal(ps, in_place_pairs), "kept": torch.tensor(keep, dtype=torch.long), "n": len(prompts)}


def _query(p: Prompt) -> tuple:
    """A prompt's input: the tokens from P0 on (a donor asks the same one after other demonstrations)."""
    return tuple(p.tokens[prefix_len(p):].tolist())
