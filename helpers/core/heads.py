"""Reading attention heads at the query position q (paper B's measurements start here).

Everything is read at the last position ``q`` of each prompt.

- **A head's output at q** is ``z[q, h] @ W_O[l, h]`` (``hook_z`` has ``n_heads`` heads). What it adds to the
  residual stream is that vector, except in models with a norm after attention (Gemma's ``ln1_post``), where
  the norm is applied with its scale frozen at the actual value at q (:func:`frozen_norm`: the linear part of
  the norm, i.e. centring for LayerNorm, division by the frozen scale, times its weight; the norm's bias
  belongs to no head). ``b_O`` is per layer and is not split between heads (:func:`head_contributions`).
- :func:`collect_at_q` is the one forward pass the measurements read: at each row's q the residual entering
  every layer, every head's ``z``, the post-attention norm's scale, the final residual and the final norm's
  scale; for chosen layers also the attention row from q and the values of every position.
- :func:`full_log_probs`: full-vocabulary log-probabilities of residual vectors (``ln_final`` recomputed,
  unembedding, Gemma's soft cap).
- :func:`z_mask_hooks`: hooks that replace chosen heads' ``z`` in a one-token run of several copies of a
  prompt (one copy per ablation); :func:`ablated_last_logprobs` runs them (paper B's attribution, the
  function-vector score).

Shared demonstrations: when the prompts of a call share their demonstrations token for token (one
:class:`helpers.core.prompts.PromptSet`), the demonstrations run once (:func:`shared_cache`,
:mod:`helpers.core.prefix_runs`) and each input runs as a short suffix against them; :func:`prompt_batches` and
:func:`predict_with_cache` then take the suffix path and give the full prompts' numbers (tests, to float
rounding). Prompts with their own demonstrations run as full prompts; ``shared=False`` forces that path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from einops import einsum, repeat
from jaxtyping import Float, Int

from helpers.core.backend import is_bridge
from helpers.core.checks import positive_int, seed_arg
from helpers.core.predict import predictions_from_resid
from helpers.core.prefix import PrefixCache, PrefixError, extend_prefix, suffix_forward
from helpers.core.prefix_runs import (  # noqa: F401  (shared_cache, predict_with_cache, prompt_batches: re-exported)
    predict_with_cache,
    prompt_batches,
    shared_cache,
)
from helpers.core.prompts import Prompt
from helpers.core.sizing import HEAVY_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "Head",
    "has_post_norm",
    "frozen_norm",
    "full_log_probs",
    "final_norm_scale",
    "kv_head_index",
    "shared_cache",
    "predict_with_cache",
    "prompt_batches",
    "collect_at_q",
    "head_contributions",
    "z_mask_hooks",
    "ablated_last_logprobs",
    "label_attention_at_q",
    "attention_rows_at_q",
    "repeated_random_tokens",
    "mean_attention",
]

Head = tuple[int, int]  # (layer, head)


# ------------------------------------------------------------------ norms, log-probs, GQA


def has_post_norm(model: HookedTransformer) -> bool:
    """True for models with a norm after attention (Gemma's ``ln1_post``; on a TransformerLens 4 bridge the
    config does not say so, the block's component does)."""
    if is_bridge(model):
        return getattr(model.blocks[0], "ln1_post", None) is not None
    return bool(getattr(model.cfg, "use_normalization_before_and_after", False))


def frozen_norm(norm, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The linear part of a LayerNorm/RMSNorm applied to a component ``x`` with the norm's scale frozen."""
    if hasattr(norm, "uses_weight_offset"):  # a TransformerLens 4 bridge's norm: transformers' own weights
        if not norm.uses_rms_norm:
            x = x - x.mean(-1, keepdim=True)
        return x / scale * ((1.0 + norm.weight) if norm.uses_weight_offset else norm.weight)
    kind = type(norm).__name__
    if kind.startswith("LayerNorm"):
        x = x - x.mean(-1, keepdim=True)
    elif not kind.startswith("RMSNorm"):
        raise NotImplementedError(f"frozen norm for {kind}")
    x = x / scale
    w = getattr(norm, "w", None)
    return x * w if w is not None else x


def full_log_probs(model: HookedTransformer, resid: Float[torch.Tensor, "... d_model"]) -> Float[torch.Tensor, "... vocab"]:
    """Full-vocabulary log-probs of residual vectors (ln_final recomputed, unembed, soft cap)."""
    shape = resid.shape
    x = resid.reshape(-1, 1, shape[-1])
    logits = model.unembed(model.ln_final(x))[:, 0, :]
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0)
    if cap and cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits.float().log_softmax(-1).reshape(*shape[:-1], -1)


def final_norm_scale(model: HookedTransformer, resid: Float[torch.Tensor, "batch d_model"]
                     ) -> Float[torch.Tensor, "batch 1"] | None:
    """The scale ln_final divides ``resid`` by (None if ln_final has no scale)."""
    if not hasattr(model.ln_final, "hook_scale"):
        return None
    got = {}
    with model.hooks(fwd_hooks=[("ln_final.hook_scale", lambda act, hook: got.__setitem__("s", act.detach()))]):
        model.ln_final(resid[:, None, :])
    return got["s"][:, 0, :]


def kv_head_index(model: HookedTransformer) -> Int[torch.Tensor, "head"]:
    """KV head read by each query head (TL's repeat_interleave convention: ``h // (n_heads // n_kv_heads)``)."""
    n, nkv = model.cfg.n_heads, (model.cfg.n_key_value_heads or model.cfg.n_heads)
    return torch.arange(n) // (n // nkv)


# ------------------------------------------------------------------ one pass, read at q


def collect_at_q(model: HookedTransformer, tokens: Int[torch.Tensor, "batch seq"], q: Int[torch.Tensor, "batch"],
                 want_pattern_layers: Sequence[int] = (), cache: PrefixCache | None = None,
                 hooks: Sequence = ()) -> dict:
    """One forward pass storing, at each row's q: ``resid_pre`` and ``z`` of every layer, the post-attention
    norm's scale (``post_scale``, post-norm models), the final residual (``resid_final``) and ln_final's scale
    (``final_scale``); for ``want_pattern_layers`` also the attention row at q (``pattern[l]``: [batch, head,
    key]) and all values (``v[l]``: [batch, key, kv_head, d_head]). ``hooks``: TransformerLens ``(name, fn)``
    hooks that change the pass (an ablation); they run before the ones that store, so what is stored is changed.

    With ``cache`` (a keep-everything prefix cache) ``tokens`` are suffixes run after it and ``q`` indexes
    the suffix; the attention row at q and the values then cover every prompt position (the prefix's values
    come from the cache), as in a full run."""
    if cache is not None and not cache.full:
        raise PrefixError("collect_at_q needs a keep-everything cache (pattern columns = prompt positions)")
    B = tokens.shape[0]
    ar = torch.arange(B)
    store: dict = {"z": {}, "resid_pre": {}, "post_scale": {}, "pattern": {}, "v": {}}

    def at_q(kind, layer):
        def fn(act, hook):
            store[kind][layer] = act[ar, q].detach()
        return fn

    def keep(kind, layer):
        def fn(act, hook):
            store[kind][layer] = act.detach()
        return fn

    hooks = list(hooks)
    for l in range(model.cfg.n_layers):
        hooks += [(f"blocks.{l}.hook_resid_pre", at_q("resid_pre", l)), (f"blocks.{l}.attn.hook_z", at_q("z", l))]
        if has_post_norm(model):
            hooks.append((f"blocks.{l}.ln1_post.hook_scale", at_q("post_scale", l)))
    for l in want_pattern_layers:
        hooks += [(f"blocks.{l}.attn.hook_pattern", lambda act, hook, l=l: store["pattern"].__setitem__(l, act[ar, :, q].detach())),
                  (f"blocks.{l}.attn.hook_v", keep("v", l))]
    if cache is None:
        with model.hooks(fwd_hooks=hooks):
            resid = model(tokens, stop_at_layer=model.cfg.n_layers)
    else:
        resid = suffix_forward(model, cache, tokens, hooks)
        for l in want_pattern_layers:
            v = store["v"][l]
            pre = repeat(cache.values[l].to(v.device, v.dtype), "pos kv d_head -> batch pos kv d_head", batch=B)
            store["v"][l] = torch.cat([pre, v], 1)
    store["resid_final"] = resid[ar, q].detach()
    store["final_scale"] = final_norm_scale(model, store["resid_final"])
    return store


def head_contributions(model: HookedTransformer, store: dict, layer: int) -> Float[torch.Tensor, "batch head d_model"]:
    """Each head's residual contribution at q in ``layer`` (post-attention norm frozen), from a
    :func:`collect_at_q` store."""
    W_O = model.blocks[layer].attn.W_O  # [head, d_head, d_model]
    out = einsum(store["z"][layer], W_O, "batch head d_head, head d_head d_model -> batch head d_model")
    if has_post_norm(model):
        out = frozen_norm(model.blocks[layer].ln1_post, out, store["post_scale"][layer][:, None, :])
    return out


def z_mask_hooks(model: HookedTransformer, masks: Float[torch.Tensor, "rows layer head"],
                 fill: Float[torch.Tensor, "layer head d_head"] | None, at: int = 0) -> list:
    """hook_z hooks for a run of ``rows`` copies: at position ``at`` (the one token of a cached run; -1: the
    last of whole prompts), row r's heads with ``masks[r] == 1`` get ``fill`` (zero if None)."""
    def hook_for(l):
        def fn(z, hook):  # z [R, pos, head, d_head]
            m = masks[:, l, :, None].to(z)  # masks and fill may be on the CPU, z on the model's device
            repl = torch.zeros_like(z[:, at]) if fill is None else fill[l].to(z)[None].expand_as(z[:, at])
            z = z.clone()
            z[:, at] = z[:, at] * (1 - m) + repl * m
            return z
        return fn

    return [(f"blocks.{l}.attn.hook_z", hook_for(l)) for l in range(model.cfg.n_layers) if masks[:, l].any()]


def ablated_last_logprobs(model: HookedTransformer, tokens: Int[torch.Tensor, "seq"],
                          masks: Float[torch.Tensor, "rows layer head"],
                          fill: Float[torch.Tensor, "layer head d_head"] | None,
                          cache: PrefixCache | None = None) -> Float[torch.Tensor, "rows vocab"]:
    """Log-probs at the last position of one prompt, once per row of ``masks`` (1 = head's z at q replaced
    by ``fill``, zero if None). The prefix runs once into a key/value cache; with ``cache`` (the shared
    demonstrations, keep-everything) only the tokens between it and the last token run, to extend it."""
    R = masks.shape[0]
    dev = model.cfg.device
    masks = masks.to(dev)
    if is_bridge(model):  # no key/value cache to extend on TL 4 (helpers.core.backend): R whole prompts
        whole = tokens[None].to(dev).expand(R, -1)
        with model.hooks(fwd_hooks=z_mask_hooks(model, masks, fill, at=-1)):
            resid = model(whole, stop_at_layer=model.cfg.n_layers)
        return full_log_probs(model, resid[:, -1])
    hooks = z_mask_hooks(model, masks, fill)
    last = tokens[-1:].to(dev)[None].expand(R, 1)
    if cache is not None:
        P0 = cache.length
        if len(tokens) <= P0 or not torch.equal(tokens[:P0].cpu(), cache.tokens):
            raise PrefixError("the prompt does not start with the cache's prefix tokens")
        ext = extend_prefix(model, cache, tokens[P0:-1])
        resid = suffix_forward(model, ext, last, hooks)
        return full_log_probs(model, resid[:, 0])

    # lazy: TransformerLens takes seconds to import
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    prefix = tokens[None, :-1].to(dev)
    kv = TransformerLensKeyValueCache.init_cache(model.cfg, dev, batch_size=1)
    model(prefix, past_kv_cache=kv, attention_mask=torch.ones_like(prefix), stop_at_layer=model.cfg.n_layers)
    for e in kv.entries:
        e.past_keys = e.past_keys.expand(R, *e.past_keys.shape[1:])
        e.past_values = e.past_values.expand(R, *e.past_values.shape[1:])
    kv.previous_attention_mask = kv.previous_attention_mask.expand(R, -1)
    kv.freeze()
    with model.hooks(fwd_hooks=hooks):
        resid = model(last, past_kv_cache=kv, attention_mask=torch.ones_like(last), stop_at_layer=model.cfg.n_layers)
    return full_log_probs(model, resid[:, 0])


def label_attention_at_q(model: HookedTransformer, prompts: Sequence[Prompt], heads: Sequence[Head],
                         batch_size: int = HEAVY_BATCH, shared: bool = True, cache: PrefixCache | None = None,
                         label_ids: Sequence[int] | None = None):
    """Each head's attention from q to every demonstration label position, ``A[q, p_k]`` [n, head, demo] (all
    prompts have the same number of demonstrations). Prompts sharing their demonstrations run them once
    (``cache``: that prefix already built, keep-everything). With ``label_ids``, returns ``(attention,
    Predictions)``: the same pass's label-restricted predictions, so a caller that needs both runs once."""
    K = {p.n_demos for p in prompts}
    if len(K) != 1:
        raise ValueError("all prompts must have the same number of demonstrations")
    K = K.pop()
    layers = sorted({l for l, _ in heads})
    attn = torch.empty(len(prompts), len(heads), K)
    resid = torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
    if cache is None:
        cache = shared_cache(model, prompts, shared)
    with torch.inference_mode():
        for idx, tokens, q in prompt_batches(model, prompts, batch_size, cache):
            st = collect_at_q(model, tokens.to(model.cfg.device), q, want_pattern_layers=layers, cache=cache)
            pos = torch.tensor([prompts[i].label_pos for i in idx])  # [b, K] prompt positions
            ar = torch.arange(len(idx))[:, None]
            for s, (l, h) in enumerate(heads):
                attn[idx, s] = st["pattern"][l][ar, h, pos].float().cpu()
            resid[idx] = st["resid_final"]
        if label_ids is None:
            return attn
        return attn, predictions_from_resid(model, resid, prompts, label_ids, top_k=0)


def attention_rows_at_q(model: HookedTransformer, prompt: Prompt, heads: Sequence[Head]) -> Float[torch.Tensor, "head seq"]:
    """Each head's attention row from q over the prompt's tokens (for the circuitsvis view)."""
    layers = sorted({l for l, _ in heads})
    with torch.inference_mode():
        st = collect_at_q(model, prompt.tokens[None].to(model.cfg.device), torch.tensor([prompt.q]), layers)
    return torch.stack([st["pattern"][l][0, h] for l, h in heads]).float().cpu()


# ------------------------------------------------------------------ attention on random tokens (head scores)


def repeated_random_tokens(model: HookedTransformer, length: int, n: int, seed: int) -> torch.Tensor:
    """``[n, (BOS) + 2 * length]`` tokens: ``n`` sequences of ``length`` random tokens, each repeated once, drawn
    with ``torch.Generator`` seeded ``seed`` from the vocabulary's upper part (ids ``d_vocab // 4`` and up, past
    the special and byte tokens), BOS first when the model uses one."""
    length, n, seed = positive_int("length", length), positive_int("n", n), seed_arg(seed)
    g = torch.Generator().manual_seed(seed)
    lo = model.cfg.d_vocab // 4
    r = torch.randint(lo, model.cfg.d_vocab, (n, length), generator=g)
    toks = torch.cat([r, r], dim=1)
    if model.cfg.default_prepend_bos and model.tokenizer is not None and model.tokenizer.bos_token_id is not None:
        toks = torch.cat([torch.full((n, 1), model.tokenizer.bos_token_id), toks], dim=1)
    return toks


def mean_attention(model: HookedTransformer, toks: Int[torch.Tensor, "n seq"], rows: torch.Tensor, cols: torch.Tensor,
                   batch_size: int = HEAVY_BATCH) -> Float[torch.Tensor, "layer head"]:
    """Each head's attention from query position ``rows[i]`` to key position ``cols[i]``, averaged over ``i`` and
    the ``n`` sequences of ``toks`` (``batch_size`` at a time): the induction and previous-token scores."""
    out = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    names = lambda name: name.endswith("hook_pattern")  # noqa: E731
    with torch.inference_mode():
        for lo in range(0, len(toks), batch_size):
            _, cache = model.run_with_cache(toks[lo:lo + batch_size].to(model.cfg.device), names_filter=names,
                                            stop_at_layer=model.cfg.n_layers)  # no unembedding: patterns only
            for l in range(model.cfg.n_layers):
                pat = cache[f"blocks.{l}.attn.hook_pattern"]  # [batch, head, query, key]
                out[l] += pat[:, :, rows, cols].float().sum(dim=(0, 2)).cpu()
    return out / (len(toks) * len(rows))
