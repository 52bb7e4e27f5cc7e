"""Paper B's premise (Yu & Ananiadou 2024, arXiv 2402.02872, task setting): does the model read a foo/bar mapping from its context?

Paper B's claims are about classification with semantically unrelated labels (foo/bar): they presuppose that the
model learns the label mapping in context. Paper A (arXiv 2305.14160, appendix F.2) found GPT2-XL and GPT-J-6B at
chance with such labels. This module tests the premise on the evaluation prompts of
:mod:`helpers.core.unrelated`, before any claim about heads is read.

Definitions (fixed before any result was looked at):

- **Mapping control**: the same demonstrations and queries with the label words swapped (class 0 -> bar,
  class 1 -> foo; and " A"/" B" both ways). A model that follows the mapping in context is right under both
  mappings; a model with only a prior for one word predicts the same word under both, and is then right in
  exactly one of the two. *Swap-averaged accuracy* = per input, the mean of its correctness under a mapping
  and under its swap: a fixed word preference gives exactly 0.5, so only in-context use of the mapping lifts
  it above 0.5 (:func:`mapping_control`).
- **Regime**: the mapping control at 1, 2, 4, 8 and 16 demonstrations per class with two label pairs fixed
  before the run (foo/bar and " A"/" B", :data:`REGIME_PAIRS`), each with its swap (:func:`~helpers.protocols.mapping_control.regime_runs`,
  :func:`~helpers.protocols.mapping_control.regime_intervals`). A regime *follows the mapping* when its swap-averaged accuracy's 95% interval lies
  above 0.5 (:func:`~helpers.protocols.mapping_control.mapping_interval_part`); the best such regime counts only if it clears 0.5 again on fresh
  seeds (:func:`~helpers.protocols.mapping_control.regime_confirmation`). Notebook 07 then finds and ablates the in-context heads again in it
  (:mod:`helpers.experiments.incontext_heads`, :mod:`helpers.experiments.head_ablation`).

Cached step of notebook 07: :func:`~helpers.protocols.mapping_control.accuracy_runs` (the regime runs it at every size); its intervals
(:func:`~helpers.protocols.mapping_control.mapping_intervals`, :func:`~helpers.protocols.mapping_control.regime_intervals`) become the claims of :func:`~helpers.protocols.mapping_control.mapping_claims` and
:func:`~helpers.protocols.mapping_control.regime_claims`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    pass

__all__ = ["MAPPINGS", "mapping_control", "MAPPING_VERDICT", "REGIME_PAIRS", "REGIME_KS", "swapped_mapping", "regime_name", "clear_regimes"]


# ------------------------------------------------------------------ accuracy and the mapping control

# label words per mapping: paper B's unrelated foo/bar, its swap, letters and their swap, and the task's own words
MAPPINGS = {"foo/bar": ("foo", "bar"), "bar/foo": ("bar", "foo"), "A/B": ("A", "B"), "B/A": ("B", "A"), "real": None}


def mapping_control(runs: dict[tuple[str, int], dict], swapped: dict[tuple[str, int], dict]) -> dict[str, dict]:
    """Per-input cells of the mapping control from two :func:`~helpers.protocols.mapping_control.accuracy_runs` results on the same demonstrations
    and queries, the second with the two label words swapped (module docstring).

    Returns ``{"swap_averaged": {(task, seed): (correct + correct_swapped) / 2}, "same_word": {(task, seed):
    1 where the predicted word is the same under both mappings}}``. A model with only a word prior scores 0.5
    and 1 on every input; one that follows the mapping scores 1 and 0.
    """
    if runs.keys() != swapped.keys():
        raise ValueError("the two runs must cover the same (task, seed) cells")
    out = {"swap_averaged": {}, "same_word": {}}
    for key, r in runs.items():
        s = swapped[key]
        if len(r["pred"]) != len(s["pred"]):
            raise ValueError(f"{key}: {len(r['pred'])} vs {len(s['pred'])} inputs; the swapped run must score the "
                             "same inputs")
        a, b = np.asarray(r["pred"]), np.asarray(s["pred"])
        out["swap_averaged"][key] = (np.asarray(r["correct"], float) + np.asarray(s["correct"], float)) / 2
        out["same_word"][key] = (a == 1 - b).astype(float)  # label c under one mapping is word 1-c under the other
    return out


MAPPING_VERDICT = {"follows the mapping": "replicates", "at chance": "inconclusive",
                   "against the mapping": "does not replicate"}


# ------------------------------------------------------------------ the regime: demonstrations per class x label pairs


# Fixed before any regime was run (and not changed after): paper B's foo/bar, and " A"/" B", the pair with which
# paper A's appendix F.2 found LLaMA-33B following an unrelated mapping (83.0% on SST-2 at 8 per class). Each runs
# with its swap (bar/foo, B/A), so every regime has the mapping control of section 2.1.
REGIME_PAIRS = ("foo/bar", "A/B")
REGIME_KS = (1, 2, 4, 8, 16)  # demonstrations per class


def swapped_mapping(pair: str) -> str:
    """The name of a mapping with its two label words swapped: ``"foo/bar"`` -> ``"bar/foo"``."""
    words = pair.split("/")
    if len(words) != 2 or not all(words):
        raise ValueError(f"a mapping is named 'word0/word1', got {pair!r}")
    return f"{words[1]}/{words[0]}"


def regime_name(key: tuple[str, int]) -> str:
    """A regime as the claims name it: ``"foo/bar at 2 per class"``."""
    return f"{key[0]} at {key[1]} per class"


def clear_regimes(intervals: dict[tuple[str, int], dict]) -> list[tuple[str, int]]:
    """The regimes whose swap-averaged accuracy lies clearly above 0.5 (its 95% interval's lower bound above 0.5,
    :func:`~helpers.protocols.mapping_control.mapping_interval_part`), highest lower bound first: notebook 07 confirms the first on fresh seeds and
    ablates its in-context heads there."""
    ok = [k for k, r in intervals.items() if r["reading"] == "follows the mapping"]
    return sorted(ok, key=lambda k: -intervals[k]["swap_averaged"].low)
