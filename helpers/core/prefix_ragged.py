"""One token after each of several different caches, in one forward (the shared-prefix engine's ragged runs).

:mod:`helpers.core.prefix` runs many suffixes after one shared cache. Here every row has its own keep-everything
cache, of its own length and content, and runs one token after it:

- :func:`ragged_token_forward` / :func:`ragged_token_forwards`: the caches stacked right-padded into one batch, the
  padded keys masked out and each row's new token placed at its own P0, so one forward reads the weights once for
  all rows (under one hook list, or once per hook list with the caches stacked once);
- :func:`query_caches`: each prompt's cache of its tokens before q, from batched suffix passes, so that a change of
  q's own row (heads ablated at q) runs only q once per condition
  (:func:`helpers.core.prefix_runs.predict_q_row`);
- :func:`ragged_fits`: whether a sliding-window layer allows the stacking.

Each equals the rows run one by one (and the full prompts) to float precision (tests on learned-position, rotary
and grouped-query models and on both offline models).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int

from helpers.core.prefix import (
    PrefixCache,
    PrefixError,
    check_suffix,
    kv_cache_classes,
    prefix_kv,
    rotate_from,
    run_layers,
    run_prefix,
    suffix_batches,
    suffix_forward,
    window_layers,
)
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["ragged_fits", "ragged_token_forward", "ragged_token_forwards", "query_caches"]


def ragged_fits(model: HookedTransformer, caches: Sequence[PrefixCache | int]) -> bool:
    """Whether :func:`ragged_token_forward` can stack ``caches`` (or caches of these lengths, before building
    them) for ``model``: no sliding-window layer, or every cache plus one token within the window."""
    window = getattr(model.cfg, "window_size", None)
    longest = max(c.length if isinstance(c, PrefixCache) else int(c) for c in caches)
    return not (window_layers(model) and window is not None and longest + 1 > window)


def ragged_token_forward(model: HookedTransformer, caches: Sequence[PrefixCache], tokens: Int[torch.Tensor, "batch"],
                         hooks: Sequence = ()) -> Float[torch.Tensor, "batch d_model"]:
    """The final residual stream of one token per row, row ``b``'s token run right after ``caches[b]`` (each a
    keep-everything cache continuing at its own P0; the caches may differ in content and length).

    The caches are stacked right-padded into one batch, the padded keys masked out (TL's attention mask), and
    each row's new query and key rotated (or position-embedded) at its own P0, so one forward reads the weights
    once for all rows: what makes batch-1 training steps of independent runs cheap to take together
    (:func:`helpers.experiments.reweighting.train_reweighting_many`). Hooks see ``pattern[b, head, 0, key]``
    with key columns = each row's prompt positions (padding after its P0). Equal to ``caches[b]`` run alone
    with :func:`suffix_forward` (tests); differentiable with respect to hook parameters. Raises
    :class:`PrefixError` when the longest cache reaches a sliding-window layer's window (TL measures the window
    by column, which padding would shift): run the rows one by one then.
    """
    return ragged_token_forwards(model, caches, tokens, {"": hooks})[""]


def ragged_token_forwards(model: HookedTransformer, caches: Sequence[PrefixCache], tokens: Int[torch.Tensor, "batch"],
                          conditions: dict[str, Sequence]) -> dict[str, Float[torch.Tensor, "batch d_model"]]:
    """:func:`ragged_token_forward` once per hook list of ``conditions`` (``{name: TL hooks}``), the caches
    stacked once for all of them: ``{name: final residual stream [batch, d_model]}``."""
    if not caches or len(caches) != int(tokens.shape[0]):
        raise PrefixError(f"ragged_token_forward needs one cache per token, got {len(caches)} caches and "
                          f"{int(tokens.shape[0])} tokens")
    for c in caches:
        check_suffix(model, c, 1)
        if not c.as_in_prompt:
            raise PrefixError("ragged_token_forward needs keep-everything caches that continue at their P0")
    lengths = torch.tensor([c.length for c in caches])
    K = int(lengths.max())
    if not ragged_fits(model, caches):
        raise PrefixError(f"caches of up to {K} tokens reach the {model.cfg.window_size}-token sliding window: run "
                          "them one by one")
    KV, Entry = kv_cache_classes()
    dev, B = model.cfg.device, len(caches)
    entries = []
    for layer in range(model.cfg.n_layers):
        k0, v0 = caches[0].keys[layer], caches[0].values[layer]
        keys = k0.new_zeros(B, K, *k0.shape[1:])
        values = v0.new_zeros(B, K, *v0.shape[1:])
        for b, c in enumerate(caches):
            keys[b, : c.length], values[b, : c.length] = c.keys[layer], c.values[layer]
        entries.append(Entry(keys, values, frozen=True))
    seen = (torch.arange(K)[None] < lengths[:, None]).long().to(dev)
    kv = KV(entries, seen, frozen=True)  # frozen: nothing is appended, so every condition reads the same cache
    pos_hooks = []
    if model.cfg.positional_embedding_type == "standard":
        W = model.pos_embed.W_pos[lengths.to(model.pos_embed.W_pos.device)]  # row b at position P0_b

        def pos_hook(x, hook):
            return W[:, None, :].to(x.dtype).clone()

        pos_hooks.append(("hook_pos_embed", pos_hook))
    blocks = model.blocks if model.cfg.positional_embedding_type == "rotary" else []
    out = {}
    try:
        for block in blocks:
            block.attn._icl_suffix = (K, lengths)
        for name, hooks in conditions.items():
            with model.hooks(fwd_hooks=pos_hooks + list(hooks)):
                out[name] = run_layers(model, kv, tokens.reshape(B, 1), None, model.cfg.n_layers, 1)[:, 0]
    finally:
        for block in blocks:
            block.attn.__dict__.pop("_icl_suffix", None)
    return out


def query_caches(model: HookedTransformer, cache: PrefixCache | None, prompts: Sequence[Prompt],
                 batch_size: int = FORWARD_BATCH) -> list[PrefixCache]:
    """Each prompt's keep-everything cache of its tokens before q: what :func:`helpers.core.prefix.extend_prefix`
    gives for ``p.tokens[P0:p.q]`` after ``cache``, from batched suffix passes (the keys of a row do not depend on
    the tokens after it, so the suffix's q and padding are cut off afterwards). Without ``cache`` (prompts with
    their own demonstrations), :func:`helpers.core.prefix.run_prefix` of ``p.tokens[:p.q]`` per prompt.

    With these, a condition that changes only q's own row (e.g. heads ablated at q) runs one token per prompt
    (:func:`ragged_token_forwards`) instead of the whole suffix."""
    for i, p in enumerate(prompts):
        if p.q < 1:
            raise PrefixError(f"prompt {i}: q is its first token, so nothing precedes it to cache")
    if cache is None:
        return [run_prefix(model, p.tokens[: p.q]) for p in prompts]
    if not cache.as_in_prompt:
        raise PrefixError("query_caches needs a keep-everything cache whose suffix continues at P0")
    out: list[PrefixCache | None] = [None] * len(prompts)
    K, rotary = len(cache), model.cfg.positional_embedding_type == "rotary"
    for idx, toks, q in suffix_batches(cache, prompts, batch_size):
        kv = prefix_kv(model, cache, len(idx))
        for e in kv.entries:
            e.frozen = False
        kv.frozen = False
        with torch.no_grad():
            suffix_forward(model, cache, toks, kv=kv)
        keys = [e.past_keys[:, K:] for e in kv.entries]  # the suffix rows, un-rotated as TL appends them
        if rotary:
            keys = [rotate_from(model.blocks[l].attn, k, cache.length) for l, k in enumerate(keys)]
        for row, (i, qi) in enumerate(zip(idx, q.tolist())):
            p = prompts[i]
            values = [torch.cat([cv, e.past_values[row, K:K + qi]]) for cv, e in zip(cache.values, kv.entries)]
            out[i] = PrefixCache([torch.cat([ck, k[row, :qi]]) for ck, k in zip(cache.keys, keys)], values,
                                 list(range(p.q)), p.q, p.tokens[: p.q].clone().cpu(), cache.model_ref, cache.note)
    return out
