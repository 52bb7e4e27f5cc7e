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

**Both steps, layer by layer** (:func:`run_edge_knockout`, any set of (row, key) edges blocked in any layers): the
account's order is that lower layers contextualise the label words and upper layers aggregate them at q.
:func:`layer_windows` splits the layers into a lower and an upper half; the aggregation's edges are q's links to
every token of the label words (:func:`q_label_pairs`), its control q's links to as many content tokens of the
demonstrations (:func:`q_content_cols`, never the query's own text). Edges whose rows lie in the shared
demonstrations are blocked in the shared prefix pass, the rest (q's row) in each prompt's suffix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float

from helpers.core.checks import is_int, seed_arg
from helpers.core.positions import earlier_demo_pairs, position_classes
from helpers.core.predict import Predictions, predict
from helpers.core.prefix import shared_prefix_or_none
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.prompts import Prompt, check_prompts

__all__ = ["block_pairs", "pair_hooks", "content_rows", "run_context_knockout", "layer_windows", "q_label_pairs",
           "q_content_cols", "run_edge_knockout", "WINDOWS"]

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


def block_pairs(scores: Float[torch.Tensor, "batch head qpos kpos"], pairs: Bool[torch.Tensor, "batch qpos kpos"]
                ) -> Float[torch.Tensor, "batch head qpos kpos"]:
    """``scores`` with the marked (query, key) pairs set to ``-inf``; a marked pair is always an earlier key, so no
    row loses its diagonal."""
    q, k = scores.shape[-2:]
    return scores.masked_fill(pairs[:, None, :q, :k].to(scores.device), float("-inf"))


def pair_hooks(layers: Iterable[int], pairs: Bool[torch.Tensor, "batch seq seq"]) -> list:
    """``(hook_name, fn)`` pairs blocking ``pairs`` in the attention scores of ``layers``."""
    def fn(scores, hook):
        return block_pairs(scores, pairs)

    return [(f"blocks.{l}.attn.hook_attn_scores", fn) for l in layers]


def run_context_knockout(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int],
                         links: str = "all", batch_size: int = 16, shared: bool = True, top_k: int = 5,
                         control_seed: int | None = None) -> Predictions:
    """Predictions with each label word's links to the earlier demonstrations (``links``) blocked in ``layers``;
    with ``control_seed``, the same links blocked for the rows of :func:`content_rows` instead (the control).
    Prompts that share their demonstrations run the knocked-out prefix once (``shared``); otherwise, or when they
    do not share it, every prompt runs whole with its own pairs blocked (the reference the shared path is tested
    against)."""
    check_prompts(model, prompts, "run_context_knockout", label_ids)
    layers = _layers(model, layers)

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


def _layers(model, layers) -> list[int]:
    """``layers`` as a non-empty list of whole layer indices of ``model``; a clear error otherwise (an empty list
    would block nothing, and 0.5 is no layer)."""
    layers = list(layers)
    if not layers:
        raise ValueError("layers is empty, so nothing would be blocked: pass the layers to knock out, e.g. range(k)")
    bad = [l for l in layers if not is_int(l) or not 0 <= l < model.cfg.n_layers]
    if bad:
        raise ValueError(f"layers must be whole numbers in 0..{model.cfg.n_layers - 1}, got {bad[:4]}")
    return [int(l) for l in layers]


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
    classes = position_classes(prompt)
    a, b = prompt.query_span
    pool = [i for i in classes["content"] if not a <= i < b]
    count = len(classes["label"])
    if count > len(pool):
        raise ValueError(f"the demonstrations hold {len(pool)} content tokens, fewer than the {count} label tokens "
                         "the control must match")
    rng = np.random.default_rng(seed_arg(seed))
    return sorted(int(i) for i in rng.choice(pool, size=count, replace=False))


def run_edge_knockout(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int], pairs,
                      batch_size: int = 16, shared: bool = True, top_k: int = 0) -> Predictions:
    """Predictions with the (row, key) edges ``pairs(prompt, seq)`` (a ``[seq, seq]`` boolean mask, every key
    before its row) blocked in ``layers``. Where the prompts share their demonstrations and agree on the edges
    inside them, those run once in the shared prefix and the rest in each prompt's suffix; otherwise every prompt
    runs whole (the reference the shared path is tested against)."""
    check_prompts(model, prompts, "run_edge_knockout", label_ids)
    layers = _layers(model, layers)
    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None:
        heads = [pairs(p)[:p0, :p0] for p in prompts]
        if all(torch.equal(h, heads[0]) for h in heads[1:]):
            pre = pair_hooks(layers, heads[0][None]) if heads[0].any() else ()
            cache = shared_cache(model, prompts, shared, pre)

            def suffix(batch, tokens, offset=0):
                seq = offset + tokens.shape[1]
                return pair_hooks(layers, torch.stack([pairs(p, seq)[offset:] for p in batch]))

            return predict_with_cache(model, prompts, label_ids, batch_size, hooks=suffix, cache=cache, top_k=top_k)

    def factory(batch, tokens, offset=0):
        if offset:
            raise ValueError("run_edge_knockout runs whole prompts here")
        return pair_hooks(layers, torch.stack([pairs(p, tokens.shape[1]) for p in batch]))

    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory)
