"""Attention edges blocked: any set of (row, key) pairs kept out of the attention of any layers, on whole prompts
or on the shared-demonstration engine.

Several methods ask the same thing of a model: what does it predict when some positions may not read some others?
Paper A's isolation (§2.2) blocks a label word's earlier keys; the knockouts of arXiv 2504.00132 block a label word's
links to the earlier demonstrations or q's links to the label words; the compression checks of notebook 10 hide
the demonstrations' text from every later position. :func:`run_edge_knockout` runs any of them: the caller says which
edges, as a ``[seq, seq]`` boolean mask per prompt (True = blocked, always a key before its row), and in which
layers. The scores of a blocked edge are set to ``-inf`` before the softmax (:func:`block_pairs`), so the row's other
keys share its attention as if the blocked key were not there.

Where the prompts share their demonstrations and agree on the edges inside them, those edges are blocked in the
shared prefix pass (:func:`helpers.core.prefix_runs.shared_cache` with prefix hooks) and the rest in each prompt's
suffix; otherwise every prompt runs whole, the reference the shared path is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from jaxtyping import Bool, Float

from helpers.core.checks import is_int
from helpers.core.predict import Predictions, predict
from helpers.core.prefix import PrefixCache, shared_prefix_or_none
from helpers.core.prefix_runs import predict_with_cache, shared_cache
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.sizing import FORWARD_BATCH

__all__ = ["block_pairs", "pair_hooks", "layers_arg", "run_edge_knockout"]

Pairs = Callable[..., Bool[torch.Tensor, "seq seq"]]  # pairs(prompt, seq=None) -> [seq, seq] mask, True = blocked


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


def layers_arg(model, layers) -> list[int]:
    """``layers`` as a non-empty list of whole layer indices of ``model``; a clear error otherwise (an empty list
    would block nothing, and 0.5 is no layer)."""
    layers = list(layers)
    if not layers:
        raise ValueError("layers is empty, so nothing would be blocked: pass the layers to knock out, e.g. range(k)")
    bad = [l for l in layers if not is_int(l) or not 0 <= l < model.cfg.n_layers]
    if bad:
        raise ValueError(f"layers must be whole numbers in 0..{model.cfg.n_layers - 1}, got {bad[:4]}")
    return [int(l) for l in layers]


def run_edge_knockout(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int], pairs: Pairs,
                      batch_size: int = FORWARD_BATCH, shared: bool = True, top_k: int = 0,
                      plain: PrefixCache | None = None) -> Predictions:
    """Predictions with the (row, key) edges ``pairs(prompt, seq)`` (a ``[seq, seq]`` boolean mask, every key
    before its row) blocked in ``layers``. Where the prompts share their demonstrations and agree on the edges
    inside them, those run once in the shared prefix and the rest in each prompt's suffix; otherwise every prompt
    runs whole (the reference the shared path is tested against). ``plain``: the prompts' demonstrations already
    run without hooks (:func:`helpers.core.prefix_runs.shared_cache`), reused when no blocked edge lies inside them,
    so several knockouts of q's row share one prefix pass (its tokens are checked against every prompt's)."""
    if plain is not None and not plain.as_in_prompt:
        raise ValueError("plain must be a keep-everything cache of the demonstrations (shared_cache without hooks)")
    check_prompts(model, prompts, "run_edge_knockout", label_ids)
    layers = layers_arg(model, layers)
    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None:
        heads = [pairs(p)[:p0, :p0] for p in prompts]
        if all(torch.equal(h, heads[0]) for h in heads[1:]):
            if heads[0].any():
                cache = shared_cache(model, prompts, shared, pair_hooks(layers, heads[0][None]))
            else:
                cache = plain if plain is not None and plain.length == p0 else shared_cache(model, prompts, shared)

            def suffix(batch, tokens, offset=0):
                seq = offset + tokens.shape[1]
                return pair_hooks(layers, torch.stack([pairs(p, seq)[offset:] for p in batch]))

            return predict_with_cache(model, prompts, label_ids, batch_size, hooks=suffix, cache=cache, top_k=top_k)

    def factory(batch, tokens, offset=0):
        if offset:
            raise ValueError("run_edge_knockout runs whole prompts here")
        return pair_hooks(layers, torch.stack([pairs(p, tokens.shape[1]) for p in batch]))

    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory)
