"""Shared-prefix engine: run a demonstration set once, then every input against it.

In the paper's setting one demonstration set serves every test input of a
(task, seed). Under causal attention the demonstrations' keys and values do
not depend on what follows them, so they can be computed once and every input
run as a short *suffix* against them. This module is the one place that does
so; every experiment with shared demonstrations goes through it.

- :func:`run_prefix` runs the prefix tokens once, optionally under hooks (e.g.
  label words isolated in some layers: an isolated row is a prefix row, so
  each hook condition runs its prefix once), and keeps the keys and values of
  all positions or of a chosen subset (Hidden_anchor), each with its ORIGINAL
  position.
- :func:`extend_prefix` appends more tokens to a cache (one input's query
  without its last token, so that only the last token is re-run, e.g. once
  per ablated head).
- :func:`suffix_forward` / :func:`suffix_logits` run right-padded suffixes
  against a cache; every TransformerLens hook works as in a full run, with the
  suffix's query positions and the cache's key positions.
- :mod:`helpers.core.prefix_ragged` runs one token after each of several caches that differ (per-prompt caches up
  to q, independent runs' caches) in one forward.
- :mod:`helpers.core.prefix_runs` runs prompt sets on this path: :func:`~helpers.core.prefix_runs.predict_shared`
  is :func:`helpers.core.predict.predict` on it.

Exactness (tests on learned-position, rotary and grouped-query models, and on
Gemma 3 and SmolLM2): a keep-everything cache plus a suffix gives the full
prompt's logits; a pruned cache gives the full prompt with attention from the
suffix to the dropped positions blocked.

Position mechanics (TransformerLens 3.9). TL caches *un-rotated* keys and, on
every forward with a cache of length ``K``, rotates cached and new keys at
positions ``0..K+m-1`` and gives new tokens learned position embeddings
``K..K+m-1``. Two things are wrong with that here: re-rotating the cache for
every row of every batch costs as much as the suffix itself, and after a
pruned cache the kept rows must keep their original positions ``o_j`` while
the suffix continues at ``P0``, not at ``K``. So:

- rotary: the cache stores each kept key already rotated at ``o_j``; during a
  suffix run each attention layer's ``apply_rotary`` rotates only the new
  queries and keys, at ``P0..P0+m-1`` (:func:`_suffix_rotary`, same formula
  as TL's). ``hook_rot_q``/``hook_rot_k`` see what they see in a full run.
- learned positions: the new tokens' ``hook_pos_embed`` is ``W_pos[P0:P0+m]``;
- sliding-window layers (Gemma 3's local layers, 512 tokens): TL measures the
  window in cache indices, which are closer together than original positions,
  so after a pruned cache it masks too little; ``hook_attn_scores``
  additionally masks every key whose original position is a window or more
  before the query's.

The suffix's first position is ``PrefixCache.start``: ``P0`` by default. A
cache with ``query_start=0`` (:func:`restart_positions`) runs the suffix at
positions ``0..m-1`` instead, as if nothing preceded it, while it still
attends to the cached rows, whose positions were fixed when the prefix ran:
learned positions ``W_pos[0:m]``, rotary angles ``0..m-1`` for the new queries
and keys (sliding-window layers then keep TL's window in cache rows). This is
the position handling of the GPT-2 code of arXiv 2305.14160 (§3.2), kept as an
option for comparison with its Table 2 (see :mod:`helpers.experiments.compression`).

An explicit attention mask of ones is always passed: with a cache TL would
otherwise build one from pad ids (GPT-2's pad id equals its BOS id). Suffixes
are right-padded, so pads come after every real token and change nothing.

A cache remembers the model and the tokens it was built from;
:func:`suffix_tokens` refuses prompts that do not start with those tokens and
every run refuses another model, so a cache never serves other inputs.
"""

from __future__ import annotations

import dataclasses
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int

from helpers.core.backend import is_bridge, require_hooked
from helpers.core.predict import length_batches, predictions_from_resid, unembed_at
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH, pass_tokens, suffix_sizing
from helpers.core.tl_patches import fast_attention

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer


__all__ = [
    "PrefixCache",
    "PrefixError",
    "demo_prefix_len",
    "shared_prefix_len",
    "shared_prefix_or_none",
    "run_prefix",
    "extend_prefix",
    "keep_rows",
    "restart_positions",
    "suffix_tokens",
    "pad_suffixes",
    "suffix_forward",
    "suffix_logits",
    "suffix_batches",
    "predict_shared_split",
    "check_suffix",
    "kv_cache_classes",
    "prefix_kv",
    "rotate_from",
    "run_layers",
    "window_layers",
]


class PrefixError(ValueError):
    """The prompts, the cache or the model do not fit together."""


@dataclass(eq=False)
class PrefixCache:
    """Per-layer keys/values of the kept prefix positions, in TL's cache convention."""

    keys: list[Float[torch.Tensor, "kept kv_head d_head"]]
    values: list[Float[torch.Tensor, "kept kv_head d_head"]]
    kept: list[int]  # original positions o_j of the cache rows
    length: int  # P0: the prefix's length, the first suffix token's position in the full prompt
    tokens: Int[torch.Tensor, "prefix"]  # the prefix tokens (all P0, kept or not)
    model_ref: Callable = field(repr=False, default=lambda: None)  # weakref to the model it was built with
    note: str = ""  # what ran on the prefix (hooks), for display
    query_start: int | None = None  # position of the first suffix token; None: ``length`` (P0)

    def __len__(self) -> int:
        return len(self.kept)

    @property
    def start(self) -> int:
        """Position given to the first suffix token: P0 (it continues the prefix) unless ``query_start`` is set."""
        return self.length if self.query_start is None else self.query_start

    @property
    def full(self) -> bool:
        """True when every prefix position is kept (then suffix runs starting at P0 equal full-prompt runs)."""
        return len(self.kept) == self.length

    @property
    def as_in_prompt(self) -> bool:
        """True when TL's own positions are right: every row kept and the suffix continuing at P0."""
        return self.full and self.start == self.length

    @property
    def prefix_len(self) -> int:  # the name compression code and notebooks use
        return self.length

    def check_model(self, model) -> None:
        if self.model_ref() is not model:
            raise PrefixError("this prefix cache was built with another model; build one with run_prefix(model, ...)")


def demo_prefix_len(prompt: Prompt, tokenizer=None) -> int:
    """P0 of a prompt: one past the newline that ends its last demonstration (the query's first position); for a
    prompt without template tokens (no ``format_pos``, e.g. the control's), its ``demo_end``."""
    if not prompt.label_spans:
        raise PrefixError("prompt has no demonstrations: there is no shared prefix")
    if not prompt.format_pos and prompt.demo_end is not None:
        # a prompt without a template (the control of helpers.core.controls.model): the query follows the last label
        if prompt.demo_end >= len(prompt):
            raise PrefixError("the prompt ends with its demonstrations: there is no query after the prefix")
        return int(prompt.demo_end)
    p0 = prompt.label_spans[-1][1] + 1
    nl = p0 - 1
    if nl not in prompt.format_pos or p0 >= len(prompt):
        raise PrefixError("expected exactly one separator token between the last label and the query; this "
                          "tokenizer merges them, so the prompt cannot be cut there")
    if tokenizer is not None and tokenizer.decode([int(prompt.tokens[nl])]) != "\n":
        raise PrefixError(f"token at {nl} is {tokenizer.decode([int(prompt.tokens[nl])])!r}, not a newline")
    return p0


def shared_prefix_len(prompts: Sequence[Prompt]) -> int:
    """P0 shared by all ``prompts``: their demonstrations, token for token, or a :class:`PrefixError`."""
    if not prompts:
        raise PrefixError("no prompts")
    p0 = demo_prefix_len(prompts[0])
    ref = prompts[0].tokens[:p0]
    for i, p in enumerate(prompts):
        if len(p) <= p0 or not torch.equal(p.tokens[:p0], ref):
            raise PrefixError(f"prompt {i} does not share prompt 0's demonstrations (first {p0} tokens); build "
                              "all prompts with the same demonstrations (make_icl_set), or use the full-prompt path")
    return p0


def shared_prefix_or_none(model: HookedTransformer, prompts: Sequence[Prompt], shared: bool = True) -> int | None:
    """P0 when the shared-prefix path applies (``shared``, one demonstration set, rotary or learned
    positions), else None: the caller then runs the full prompts."""
    if not shared or not prompts or model.cfg.positional_embedding_type not in ("rotary", "standard"):
        return None
    if is_bridge(model):  # the shared-prefix cache is HookedTransformer 3.9's (helpers.core.backend)
        return None
    try:
        return shared_prefix_len(prompts)
    except PrefixError:
        return None


def kv_cache_classes():
    from transformer_lens.cache.key_value_cache import (
        TransformerLensKeyValueCache,  # lazy: TransformerLens takes seconds to import
    )
    from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry

    return TransformerLensKeyValueCache, TransformerLensKeyValueCacheEntry


def _check_pos_type(model) -> str:
    t = model.cfg.positional_embedding_type
    if t not in ("rotary", "standard"):
        raise NotImplementedError(f"shared prefixes support rotary and learned ('standard') positions, not {t!r}")
    return t


def _rotate(attn, x: torch.Tensor, n: torch.Tensor | int) -> torch.Tensor:
    """Rotate ``x[..., pos, head, d_head]`` by ``n`` positions (scalar or one per ``pos``), n >= 0."""
    rd = attn.cfg.rotary_dim
    n = torch.as_tensor(n, device=attn.rotary_cos.device)
    need = int(n.max()) + 1
    if need > attn.rotary_cos.shape[0]:
        attn._extend_rotary_embeddings(min(attn.cfg.n_ctx, max(need, 2 * attn.rotary_cos.shape[0])))
    cos, sin = attn.rotary_cos[n], attn.rotary_sin[n]  # [pos, rd] or [rd]
    if cos.dim() == 2:
        cos, sin = cos[:, None, :], sin[:, None, :]
    xr = x[..., :rd]
    out = xr * cos.to(x.dtype) + attn.rotate_every_two(xr) * sin.to(x.dtype)
    return torch.cat([out, x[..., rd:]], dim=-1)


def window_layers(model) -> list[int]:
    """Layers whose attention is local (sliding window), as TL built them."""
    return [l for l, b in enumerate(model.blocks) if getattr(b.attn, "attn_type", "global") == "local"]


def prefix_kv(model, cache: PrefixCache | None, B: int):
    """A frozen TL cache holding ``cache`` expanded to ``B`` rows (None: an empty one to fill)."""
    KV, Entry = kv_cache_classes()
    dev = model.cfg.device
    if cache is None:
        return KV.init_cache(model.cfg, dev, B)
    entries = [Entry(k[None].expand(B, -1, -1, -1), v[None].expand(B, -1, -1, -1), frozen=True)
               for k, v in zip(cache.keys, cache.values)]
    return KV(entries, torch.ones(B, len(cache), dtype=torch.long, device=dev), frozen=True)


def rotate_from(attn, x: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
    """TL's rotary embedding of ``x[batch, pos, head, d_head]`` at positions ``start, start+1, ...`` (``start``:
    one position for every row, or a tensor of one per row)."""
    n = x.shape[1]
    last = int(start.max()) if isinstance(start, torch.Tensor) else start
    if last + n > attn.rotary_cos.shape[0]:
        attn._extend_rotary_embeddings(min(attn.cfg.n_ctx, max(last + n, 2 * attn.rotary_cos.shape[0])))
    rd = attn.cfg.rotary_dim
    if isinstance(start, torch.Tensor):  # row b at start[b], start[b]+1, ...
        idx = start.to(attn.rotary_cos.device)[:, None] + torch.arange(n, device=attn.rotary_cos.device)
        cos, sin = attn.rotary_cos[idx][:, :, None, :], attn.rotary_sin[idx][:, :, None, :]
    else:
        cos = attn.rotary_cos[None, start:start + n, None, :]
        sin = attn.rotary_sin[None, start:start + n, None, :]
    xr = x[..., :rd]
    return torch.cat([xr * cos + attn.rotate_every_two(xr) * sin, x[..., rd:]], dim=-1)


def _suffix_rotary(self, x, past_kv_pos_offset: int = 0, attention_mask=None):
    """``apply_rotary`` of an attention layer: TL's own unless a suffix run is under way (``_icl_suffix``)."""
    state = self.__dict__.get("_icl_suffix")
    if state is None:
        return type(self).apply_rotary(self, x, past_kv_pos_offset, attention_mask)
    K, start = state  # cache rows, position of the first suffix token (P0 unless restarted)
    if x.device != self.rotary_sin.device:
        x = x.to(self.rotary_sin.device)
    if past_kv_pos_offset == K:  # the new queries
        return rotate_from(self, x, start)
    # the keys: K cached rows, already rotated at their original positions, then the new ones
    return torch.cat([x[:, :K], rotate_from(self, x[:, K:], start)], dim=1)


def restart_positions(cache: PrefixCache) -> PrefixCache:
    """``cache`` whose suffixes run at positions ``0..m-1`` (the cached rows keep theirs; module doc)."""
    return dataclasses.replace(cache, query_start=0)


def _install(model) -> None:
    """Make ``model`` ready for suffix runs (idempotent): copy-free attention products and
    :func:`_suffix_rotary` (inactive outside suffix runs)."""
    if getattr(model, "_icl_prefix_ready", False):
        return
    if model.cfg.positional_embedding_type == "rotary":
        if getattr(model.cfg, "use_dynamic_ntk_rope", False) or getattr(model.cfg, "use_logn_attn", False):
            raise NotImplementedError("shared prefixes do not support dynamic-NTK or log-n rotary variants")
        for block in model.blocks:
            block.attn.apply_rotary = types.MethodType(_suffix_rotary, block.attn)
    fast_attention(model)
    model._icl_prefix_ready = True


class _SuffixPositions:
    """Context: the suffix of ``m`` tokens runs at positions ``cache.start..`` after ``cache`` (module doc)."""

    def __init__(self, model, cache: PrefixCache, m: int):
        self.model, self.cache, self.m = model, cache, m

    def hooks(self) -> list:
        model, cache, m = self.model, self.cache, self.m
        start = cache.start
        hooks = []
        if model.cfg.positional_embedding_type == "standard" and not cache.as_in_prompt:
            W = model.pos_embed.W_pos[start: start + m]

            def pos_hook(x, hook):
                return W[None].expand(x.shape[0], -1, -1).to(x.dtype).clone()

            hooks.append(("hook_pos_embed", pos_hook))
        window = getattr(model.cfg, "window_size", None)
        local = window_layers(model)
        if local and not cache.as_in_prompt and start + m > window:
            kpos = torch.tensor(list(cache.kept) + list(range(start, start + m)))
            qpos = torch.arange(start, start + m)
            too_far = kpos[None, :] <= qpos[:, None] - window  # [m, K+m]

            def window_hook(scores, hook):
                return scores.masked_fill(too_far.to(scores.device), float("-inf"))

            hooks += [(f"blocks.{l}.attn.hook_attn_scores", window_hook) for l in local]
        return hooks

    def __enter__(self):
        if self.model.cfg.positional_embedding_type == "rotary":
            for block in self.model.blocks:
                block.attn._icl_suffix = (len(self.cache), self.cache.start)
        return self

    def __exit__(self, *exc):
        for block in self.model.blocks:
            block.attn.__dict__.pop("_icl_suffix", None)
        return False


def run_prefix(model: HookedTransformer, tokens: Int[torch.Tensor, "prefix"], keep: Sequence[int] | None = None,
               hooks: Sequence = (), note: str = "") -> PrefixCache:
    """One forward pass over ``tokens`` (under ``hooks``); keep the keys/values of ``keep`` (default: all).

    Kept rows keep their original positions. ``hooks`` act on the prefix rows
    only (e.g. isolation of label words). No gradient flows into the cache.
    """
    require_hooked(model, "a shared-prefix cache (helpers.core.prefix)")
    _check_pos_type(model)
    _install(model)
    tokens = torch.as_tensor(tokens).reshape(-1)
    p0 = int(tokens.shape[0])
    if p0 == 0:
        raise PrefixError("empty prefix")
    if p0 > model.cfg.n_ctx:
        raise PrefixError(f"the prefix has {p0} tokens but the model's context (n_ctx) is {model.cfg.n_ctx}")
    keep = sorted(set(range(p0) if keep is None else (int(k) for k in keep)))
    if not keep or keep[0] < 0 or keep[-1] >= p0:
        raise PrefixError(f"kept positions must lie in [0, {p0}) (the prefix)")
    dev = model.cfg.device
    kv = prefix_kv(model, None, 1)
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        model(tokens[None].to(dev), past_kv_cache=kv, attention_mask=torch.ones(1, p0, dtype=torch.long, device=dev),
              stop_at_layer=model.cfg.n_layers)
    idx = torch.tensor(keep, device=dev)
    keys, values = [], []
    for layer, entry in enumerate(kv.entries):
        k, v = entry.past_keys[0, idx].clone(), entry.past_values[0, idx].clone()
        if model.cfg.positional_embedding_type == "rotary":  # stored rotated at the original positions
            k = _rotate(model.blocks[layer].attn, k, idx)
        keys.append(k)
        values.append(v)
    return PrefixCache(keys, values, keep, p0, tokens.clone().cpu(), weakref.ref(model), note)


def keep_rows(cache: PrefixCache, keep: Sequence[int], note: str = "") -> PrefixCache:
    """``cache`` (keep-everything) pruned to the positions ``keep``: what :func:`run_prefix` with that ``keep``
    gives (an unhooked prefix pass does not depend on which rows are kept afterwards), without running the prefix
    again: several prunings of one demonstration set share its one pass (tests)."""
    if not cache.full:
        raise PrefixError("keep_rows prunes a keep-everything cache (run_prefix without keep)")
    keep = sorted(set(int(k) for k in keep))
    if not keep or keep[0] < 0 or keep[-1] >= cache.length:
        raise PrefixError(f"kept positions must lie in [0, {cache.length}) (the prefix)")
    idx = torch.tensor(keep, device=cache.keys[0].device)
    return dataclasses.replace(cache, keys=[k[idx].clone() for k in cache.keys], values=[v[idx].clone() for v in cache.values],
                               kept=keep, note=note or cache.note)


def extend_prefix(model: HookedTransformer, cache: PrefixCache, tokens: Int[torch.Tensor, "more"], hooks: Sequence = ()) -> PrefixCache:
    """``cache`` followed by ``tokens`` (all kept): the cache of the longer prefix, from one suffix pass."""
    cache.check_model(model)
    tokens = torch.as_tensor(tokens).reshape(-1)
    if tokens.numel() == 0:
        return cache
    if not cache.as_in_prompt:
        raise PrefixError("extend_prefix needs a keep-everything cache whose suffix continues at P0")
    kv = prefix_kv(model, cache, 1)
    for e in kv.entries:
        e.frozen = False
    kv.frozen = False
    with torch.no_grad():
        suffix_forward(model, cache, tokens[None], hooks, kv=kv)
    K = len(cache)
    keys = [e.past_keys[0].clone() for e in kv.entries]
    if model.cfg.positional_embedding_type == "rotary":  # TL appended the new keys un-rotated
        keys = [torch.cat([k[:K], rotate_from(model.blocks[l].attn, k[None, K:], cache.length)[0]])
                for l, k in enumerate(keys)]
    values = [e.past_values[0].clone() for e in kv.entries]
    n = cache.length + int(tokens.shape[0])
    return PrefixCache(keys, values, list(range(n)), n, torch.cat([cache.tokens, tokens.cpu()]), cache.model_ref,
                       cache.note)


def run_layers(model, kv, x: torch.Tensor, start: int | None, stop: int, m: int) -> torch.Tensor:
    """Layers ``start..stop-1`` of a suffix run: ``x`` is the token batch when ``start`` is None (embedding
    first), else the residual stream entering layer ``start``. Returns the residual after layer ``stop - 1``
    (before ``ln_final``)."""
    dev = model.cfg.device
    ones = torch.ones(x.shape[0], m, dtype=torch.long, device=dev)
    if start is None:
        return model(x.to(dev), past_kv_cache=kv, attention_mask=ones, stop_at_layer=stop)
    # what TL's input_to_embed does with a cache, which start_at_layer skips (kv is frozen: nothing is stored)
    return model(x, start_at_layer=start, stop_at_layer=stop, past_kv_cache=kv,
                 attention_mask=kv.append_attention_mask(ones))


def check_suffix(model, cache: PrefixCache, m: int) -> None:
    """Refuse another model, unsupported positions, or ``m`` suffix tokens past the context; install the
    suffix-run attention patches."""
    cache.check_model(model)
    _check_pos_type(model)
    if cache.length + m > model.cfg.n_ctx:
        raise PrefixError(f"prefix ({cache.length}) plus suffix ({m}) tokens exceed the model's context "
                          f"(n_ctx = {model.cfg.n_ctx})")
    _install(model)


def suffix_forward(model: HookedTransformer, cache: PrefixCache, tokens: Int[torch.Tensor, "batch m"], hooks: Sequence = (),
                   kv=None, stop_at_layer: int | None = None) -> Float[torch.Tensor, "batch m d_model"]:
    """The final residual stream of right-padded ``tokens`` run after ``cache`` (no inference mode inside:
    differentiable with respect to hook parameters); with ``stop_at_layer``, the residual stream entering that
    layer instead."""
    B, m = tokens.shape
    check_suffix(model, cache, m)
    kv = prefix_kv(model, cache, B) if kv is None else kv
    stop = model.cfg.n_layers if stop_at_layer is None else stop_at_layer
    with _SuffixPositions(model, cache, m) as pos, model.hooks(fwd_hooks=pos.hooks() + list(hooks)):
        return run_layers(model, kv, tokens, None, stop, m)


def suffix_logits(model: HookedTransformer, cache: PrefixCache, tokens: Int[torch.Tensor, "batch m"], q: Int[torch.Tensor, "batch"],
                  hooks: Sequence = (), vocab: Int[torch.Tensor, "v"] | None = None
                  ) -> Float[torch.Tensor, "batch vocab"]:
    """Logits at ``q[b]`` (an index into the suffix ``tokens``), unembedding only there (``vocab``: only these
    columns). Differentiable with respect to hook parameters."""
    resid = suffix_forward(model, cache, tokens, hooks)
    return unembed_at(model, resid, q, vocab)


def suffix_tokens(cache: PrefixCache, prompts: Sequence[Prompt]) -> list[torch.Tensor]:
    """Each prompt's tokens after the cache's prefix, after checking that it starts with exactly that prefix."""
    p0 = cache.length
    out = []
    for i, p in enumerate(prompts):
        if len(p) <= p0 or not torch.equal(p.tokens[:p0], cache.tokens):
            raise PrefixError(f"prompt {i} does not start with the cache's {p0} prefix tokens; build all prompts "
                              "with the same demonstrations as the cache (make_icl_set)")
        out.append(p.tokens[p0:])
    return out


def pad_suffixes(suffixes: Sequence[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad suffixes into ``(tokens [B, m], last index [B])``."""
    m = max(len(s) for s in suffixes)
    out = torch.full((len(suffixes), m), pad_id, dtype=torch.long)
    for i, s in enumerate(suffixes):
        out[i, : len(s)] = s
    return out, torch.tensor([len(s) - 1 for s in suffixes])


def suffix_batches(cache: PrefixCache, prompts: Sequence[Prompt], batch_size: int, max_tokens: int | None = None):
    """``(indices, suffix tokens [B, m], q in the suffix [B])`` batches of similar suffix length.

    Batches are formed on suffix lengths (what is run); ``batch_size`` and ``max_tokens`` (None: the
    padded suffix tokens that fit the cache's model's device) go through :func:`helpers.core.sizing.suffix_sizing`.
    """
    suf = suffix_tokens(cache, prompts)
    p0 = cache.length
    for i, p in enumerate(prompts):
        if p.q < p0:
            raise PrefixError(f"prompt {i}: its position q ({p.q}) lies inside the shared prefix")
    batch_size, max_tokens = suffix_sizing(cache, suf, batch_size, max_tokens)
    for idx in length_batches(suf, batch_size, max_tokens, pass_tokens(cache.model_ref())):
        toks, _ = pad_suffixes([suf[i] for i in idx])
        yield idx, toks, torch.tensor([prompts[i].q - p0 for i in idx])


def predict_shared_split(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], caches: dict,
                         split_layer: int, batch_size: int = FORWARD_BATCH, top_k: int = 5) -> dict:
    """:func:`~helpers.core.prefix_runs.predict_shared` against several prefix caches that agree below ``split_layer``.

    Conditions that change the prefix only from ``split_layer`` on (label words
    or random words isolated in the last layers) leave every suffix's residual
    stream below that layer as in the unmodified run, because each layer reads
    only earlier layers' outputs. Each batch of suffixes runs layers
    ``0..split_layer-1`` once and the remaining layers once per cache. The caches
    must hold identical keys and values below ``split_layer`` (checked: a cache
    that differs there raises :class:`PrefixError` instead of giving a wrong
    number). Returns ``{name: Predictions}``, the same as :func:`~helpers.core.prefix_runs.predict_shared`
    per cache (tests).
    """
    if not prompts or not caches:
        raise ValueError("predict_shared_split needs prompts and at least one cache")
    names = list(caches)
    first = caches[names[0]]
    n_layers = model.cfg.n_layers
    if not 0 <= split_layer <= n_layers:
        raise ValueError(f"split_layer must lie in 0..{n_layers}, got {split_layer}")
    for name in names[1:]:
        c = caches[name]
        if c.kept != first.kept or c.start != first.start or not torch.equal(c.tokens, first.tokens):
            raise PrefixError(f"cache {name!r} holds other prefix tokens or positions than {names[0]!r}")
        for layer in range(split_layer):
            if not (torch.equal(c.keys[layer], first.keys[layer]) and torch.equal(c.values[layer], first.values[layer])):
                raise PrefixError(f"cache {name!r} differs from {names[0]!r} in layer {layer} < split_layer "
                                  f"{split_layer}: run it with predict_shared instead")
    resid = {n: torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
             for n in names}
    with torch.inference_mode():
        for idx, toks, q in suffix_batches(first, prompts, batch_size):
            B, m = toks.shape
            for c in caches.values():
                check_suffix(model, c, m)
            rows = torch.arange(B)
            with _SuffixPositions(model, first, m) as pos, model.hooks(fwd_hooks=pos.hooks()):
                lower = run_layers(model, prefix_kv(model, first, B), toks, None, split_layer, m)
                for n in names:
                    upper = run_layers(model, prefix_kv(model, caches[n], B), lower, split_layer, n_layers, m)
                    resid[n][idx] = upper[rows, q.to(upper.device)]
    return {n: predictions_from_resid(model, resid[n], prompts, label_ids, top_k) for n in names}
