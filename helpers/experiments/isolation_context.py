"""Contextualise, then aggregate (Bakalova et al., arXiv 2504.00132): is a label word built from the earlier
demonstrations as well as from its own?

§2.2's isolation (:mod:`helpers.experiments.isolation`) blocks every earlier key of a label word in the first
``k`` layers, so it cannot tell the label's own demonstration from the ones before it. This knockout blocks only
the links from each demonstration's label word (its first token, as §2.2 reads it) to the earlier
demonstrations, in ``layers``, and keeps the rest of its row (BOS, its own demonstration, itself):

- ``all``: every position of the earlier demonstrations, from the first after BOS to the end of the previous
  label word;
- ``label``: the earlier demonstrations' label words (every token of each);
- ``text``: the earlier demonstrations' input texts.

The first demonstration's label word has no earlier demonstration: a one-demonstration prompt is unchanged.

The control (:func:`content_rows`) blocks the same links for as many rows taken from the demonstrations' text:
one token of each demonstration's input, drawn at random, in place of its label word. A label word that is built
from the earlier demonstrations loses more than a text token does.
Every blocked row lies in the demonstrations, so prompts that share them run the knocked-out prefix once
(:func:`helpers.core.prefix_runs.shared_cache` with prefix hooks), as §2.2's label isolation does.

**Both steps, layer by layer** (:func:`helpers.core.edges.run_edge_knockout`, any set of (row, key) edges blocked in any layers): the
account's order is that lower layers contextualise the label words and upper layers aggregate them at q.
:func:`layer_windows` splits the layers into a lower and an upper half; the aggregation's edges are q's links to
every token of the label words (:func:`q_label_pairs`), its control q's links to as many content tokens of the
demonstrations (:func:`q_content_cols`, never the query's own text). Edges whose rows lie in the shared
demonstrations are blocked in the shared prefix pass, the rest (q's row) in each prompt's suffix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool

from helpers.core.checks import is_int, seed_arg
from helpers.core.edges import layers_arg, pair_hooks
from helpers.core.positions import demo_content, draw_content, earlier_demo_pairs, position_classes
from helpers.core.predict import Predictions, predict
from helpers.core.prefix import shared_prefix_or_none
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.sizing import FORWARD_BATCH

__all__ = ["content_rows", "run_context_knockout", "layer_windows", "q_label_pairs",
           "q_content_cols", "WINDOWS"]

WINDOWS = ("lower", "upper")  # layer_windows' two halves


def content_rows(prompt: Prompt, seed: int) -> list[int]:
    """One position per demonstration, drawn with ``seed`` from its input text (entry 0, the first demonstration,
    is its first text token and is never used): the control's rows for :func:`run_context_knockout`. Prompts with
    the same demonstrations get the same rows."""
    rng = np.random.default_rng(seed_arg(seed))
    empty = [k for k, (a, b) in enumerate(prompt.text_spans) if b <= a]
    if empty:
        raise ValueError(f"demonstrations {empty[:4]} have no text token to draw a control row from")
    return [int(rng.integers(a, b)) for a, b in prompt.text_spans]


def run_context_knockout(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int],
                         links: str = "all", batch_size: int = FORWARD_BATCH, shared: bool = True, top_k: int = 5,
                         control_seed: int | None = None) -> Predictions:
    """Predictions with each label word's links to the earlier demonstrations (``links``) blocked in ``layers``;
    with ``control_seed``, the same links blocked for the rows of :func:`content_rows` instead (the control).
    Prompts that share their demonstrations run the knocked-out prefix once (``shared``); otherwise, or when they
    do not share it, every prompt runs whole with its own pairs blocked (the reference the shared path is tested
    against)."""
    check_prompts(model, prompts, "run_context_knockout", label_ids)
    layers = layers_arg(model, layers)

    def pairs(p, seq=None):
        rows = None if control_seed is None else content_rows(p, control_seed)
        return earlier_demo_pairs(p, seq, links, rows)

    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None and max(prompts[0].label_pos) < p0:
        pre = pair_hooks(layers, pairs(prompts[0])[None, :p0, :p0])
        cache = shared_cache(model, prompts, shared, pre)
        return predict_with_cache(model, prompts, label_ids, batch_size, cache=cache, top_k=top_k)

    def factory(batch, tokens, offset=0):
        if offset:
            raise ValueError("the knockout's rows lie in the demonstrations: run whole prompts")
        return pair_hooks(layers, torch.stack([pairs(p, tokens.shape[1]) for p in batch]))

    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory)


def layer_windows(n_layers: int) -> dict[str, list[int]]:
    """``{"lower": the first half of the layers, "upper": the rest}`` (``n_layers // 2`` in the lower half; on 2
    layers, layer 0 and layer 1)."""
    if not is_int(n_layers) or n_layers < 2:
        raise ValueError(f"a lower and an upper window need 2 layers or more, got {n_layers!r}")
    return {"lower": list(range(n_layers // 2)), "upper": list(range(n_layers // 2, n_layers))}


def q_label_pairs(prompt: Prompt, seq: int | None = None, cols: Sequence[int] | None = None
                  ) -> Bool[torch.Tensor, "seq seq"]:
    """``[row, key]`` True at (q, every token of every label word): the aggregation's edges; with ``cols``, at (q,
    each of ``cols``) instead (the control)."""
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    cols = position_classes(prompt)["label"] if cols is None else [int(c) for c in cols]
    if any(not 0 <= c < prompt.q for c in cols):
        raise ValueError(f"the columns must be positions before q ({prompt.q}), got {cols}")
    out = torch.zeros(seq, seq, dtype=torch.bool)
    out[prompt.q, cols] = True
    return out


def q_content_cols(prompt: Prompt, seed: int) -> list[int]:
    """As many content tokens of the demonstrations as the prompt has label-word tokens, drawn with ``seed``
    (never the query's own text, which q must read): the columns of the aggregation's control. Prompts with the
    same demonstrations get the same columns."""
    pool, count = len(demo_content(prompt)), len(position_classes(prompt)["label"])
    if count > pool:
        raise ValueError(f"the demonstrations hold {pool} content tokens, fewer than the {count} label tokens "
                         "the control must match")
    return draw_content(prompt, count, np.random.default_rng(seed_arg(seed)))
