"""Anchor-only context compression (paper A, §3.2).

Hidden_anchor runs the demonstrations once, keeps at every layer the keys and
values of the anchor positions only (label tokens, the demonstrations'
formatting tokens and BOS: :attr:`helpers.prompts.Prompt.anchor_pos`), and runs
each test input alone (``Review: x\\nSentiment:``) with that pruned cache
prepended.

Mechanics (TransformerLens 3.9 past-key-value cache). TL stores *un-rotated*
keys in its cache and rotates cache + new keys at positions ``0..K+m-1``
(``K`` = cache length), and gives the new tokens learned position embeddings
``K..K+m-1``. For a pruned cache both are wrong: the anchors must keep their
ORIGINAL positions ``o_j`` and the query must continue at ``P0..P0+m-1``, where
``P0`` is the original position of the query's first token (one past the
newline that ends the last demonstration). We therefore

- rotary models: store each kept key pre-rotated by ``o_j - j`` (so TL's
  rotation by ``j`` lands on ``o_j``), and rotate the new queries and keys by a
  further ``P0 - K`` in ``hook_rot_q``/``hook_rot_k`` (rotations compose
  additively), so every query and key carries its original position;
- learned positions: keys/values already contain their original position
  embeddings; ``hook_pos_embed`` of the new tokens is replaced by
  ``W_pos[P0:P0+m]``.

We always pass an explicit attention mask of ones: with a cache TL would
otherwise build one from pad ids (GPT-2's pad id equals its BOS id), and the
right-padded batch needs no mask (pads come after every real token).
Keeping every position reproduces full ICL exactly (tests), and a pruned cache
equals the full prompt with attention from the query to the dropped
positions blocked (tests), which proves the positions are the original ones.
Gemma 3's sliding-window layers measure the window in cache indices, which is
irrelevant here (all prompts are shorter than the 512-token window).

Baselines: Text_anchor (demonstration texts removed from the prompt string),
Hidden_random (formatting + BOS + one random text position per demonstration
instead of the label token; seeded) and Hidden_random-top (best of N seeded
Hidden_random draws by label loyalty against full ICL, selected on the same
test inputs as the paper does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from .loyalty import label_loyalty, word_loyalty
from .predict import Predictions, length_batches, logits_at, predict
from .prompts import Demo, Prompt, build_prompts

__all__ = [
    "AnchorCache",
    "prefix_len",
    "anchor_keep",
    "random_keep",
    "build_cache",
    "cache_from_tokens",
    "cached_logits",
    "predict_cached",
    "text_anchor_demos",
    "text_anchor_prompts",
    "token_counts",
    "CompressionResult",
    "run_compression",
    "METHODS",
    "table2_verdict",
    "speed_verdict",
    "time_icl_vs_anchor",
]


@dataclass
class AnchorCache:
    """Per-layer keys/values of the kept prefix positions, in TL's cache convention."""

    keys: list[Float[torch.Tensor, "kept kv_head d_head"]]
    values: list[Float[torch.Tensor, "kept kv_head d_head"]]
    kept: list[int]  # original positions o_j of the cache rows
    prefix_len: int  # P0: original position of the query's first token
    prefix_tokens: Int[torch.Tensor, "prefix"]

    def __len__(self) -> int:
        return len(self.kept)


def prefix_len(prompt: Prompt, tokenizer=None) -> int:
    """P0: one past the newline that ends the last demonstration (= the query's first position)."""
    if not prompt.label_spans:
        raise ValueError("prompt has no demonstrations: nothing to compress")
    p0 = prompt.label_spans[-1][1] + 1
    nl = p0 - 1
    if nl not in prompt.format_pos or p0 >= len(prompt):
        raise ValueError("expected exactly one newline token between the last label and the query; "
                         "this tokenizer merges them, so the prefix cannot be cut there")
    if tokenizer is not None and tokenizer.decode([int(prompt.tokens[nl])]) != "\n":
        raise ValueError(f"token at {nl} is {tokenizer.decode([int(prompt.tokens[nl])])!r}, not a newline")
    return p0


def anchor_keep(prompt: Prompt) -> list[int]:
    """Hidden_anchor's kept positions: label tokens + demonstration formatting + BOS (before P0)."""
    p0 = prefix_len(prompt)
    return [p for p in prompt.anchor_pos if p < p0]


def random_keep(prompt: Prompt, seed: int) -> list[int]:
    """Hidden_random: formatting + BOS + one random text position per demonstration (no label token)."""
    p0 = prefix_len(prompt)
    rng = np.random.default_rng(seed)
    keep = set(p for p in prompt.format_pos if p < p0)
    if prompt.bos:
        keep.add(0)
    for (s, e), lp in zip(prompt.text_spans, prompt.label_pos):
        cand = [i for i in range(s, e) if i not in prompt.label_pos]
        keep.add(int(rng.choice(cand)) if cand else lp)
    return sorted(keep)


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


def _check_pos_type(model) -> str:
    t = model.cfg.positional_embedding_type
    if t not in ("rotary", "standard"):
        raise NotImplementedError(f"compression supports rotary and learned ('standard') positions, not {t!r}")
    return t


def build_cache(model, prompt: Prompt, keep: Sequence[int] | None = None) -> AnchorCache:
    """Run ``prompt``'s demonstrations (tokens before P0) once and keep the positions ``keep``.

    ``keep=None`` keeps the Hidden_anchor positions (:func:`anchor_keep`);
    ``keep=range(P0)`` keeps everything (then the cached run is plain ICL).
    """
    p0 = prefix_len(prompt)
    keep = anchor_keep(prompt) if keep is None else keep
    return cache_from_tokens(model, prompt.tokens[:p0], keep)


def cache_from_tokens(model, prefix: Int[torch.Tensor, "prefix"], keep: Sequence[int] | None = None) -> AnchorCache:
    """One pass over ``prefix``; keep the keys/values of positions ``keep`` (default: all) with original positions."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    kind = _check_pos_type(model)
    p0 = int(prefix.shape[0])
    keep = sorted(set(range(p0) if keep is None else keep))
    if not keep or keep[0] < 0 or keep[-1] >= p0:
        raise ValueError(f"kept positions must lie in [0, {p0}) (the demonstrations)")
    dev = model.cfg.device
    full = TransformerLensKeyValueCache.init_cache(model.cfg, dev, 1)
    with torch.inference_mode():
        model(prefix[None].to(dev), past_kv_cache=full, attention_mask=torch.ones(1, p0, dtype=torch.long, device=dev),
              stop_at_layer=model.cfg.n_layers)
    idx = torch.tensor(keep, device=dev)
    shift = idx - torch.arange(len(keep), device=dev)  # o_j - j >= 0
    keys, values = [], []
    for layer, entry in enumerate(full.entries):
        k, v = entry.past_keys[0, idx].clone(), entry.past_values[0, idx].clone()
        if kind == "rotary" and bool((shift > 0).any()):
            k = _rotate(model.blocks[layer].attn, k, shift)
        keys.append(k)
        values.append(v)
    return AnchorCache(keys, values, keep, p0, prefix.clone())


def _cache_hooks(model, cache: AnchorCache, m: int) -> list:
    K, shift = len(cache), cache.prefix_len - len(cache)
    if shift == 0:
        return []
    if model.cfg.positional_embedding_type == "standard":
        W = model.pos_embed.W_pos[cache.prefix_len: cache.prefix_len + m]

        def pos_hook(x, hook):
            return W[None].expand(x.shape[0], -1, -1).to(x.dtype).clone()

        return [("hook_pos_embed", pos_hook)]
    hooks = []
    for layer in range(model.cfg.n_layers):
        attn = model.blocks[layer].attn

        def rot_q(x, hook, attn=attn):
            return _rotate(attn, x, shift)

        def rot_k(x, hook, attn=attn):
            return torch.cat([x[:, :K], _rotate(attn, x[:, K:], shift)], dim=1)

        hooks += [(f"blocks.{layer}.attn.hook_rot_q", rot_q), (f"blocks.{layer}.attn.hook_rot_k", rot_k)]
    return hooks


def cached_logits(model, cache: AnchorCache, tokens: Int[torch.Tensor, "batch m"], q: Int[torch.Tensor, "batch"],
                  fwd_hooks: Sequence = (), vocab: Int[torch.Tensor, "v"] | None = None
                  ) -> Float[torch.Tensor, "batch vocab"]:
    """Logits at ``q[b]`` (index into ``tokens``) of the query tokens run after the cache.

    ``tokens``: right-padded query tokens (the prompt from P0 on). ``vocab``:
    compute only these unembedding columns (e.g. the label tokens). No
    inference mode inside (differentiable w.r.t. hook parameters).
    """
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
    from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry

    _check_pos_type(model)
    B, m = tokens.shape
    if cache.prefix_len + m > model.cfg.n_ctx:
        raise ValueError("query too long for the model's context after the cache's original positions")
    dev = model.cfg.device
    entries = [TransformerLensKeyValueCacheEntry(k[None].expand(B, -1, -1, -1), v[None].expand(B, -1, -1, -1),
                                                 frozen=True) for k, v in zip(cache.keys, cache.values)]
    kv = TransformerLensKeyValueCache(entries, torch.ones(B, len(cache), dtype=torch.long, device=dev), frozen=True)
    hooks = _cache_hooks(model, cache, m) + list(fwd_hooks)
    return logits_at(model, tokens.to(dev), q, hooks, vocab=vocab, past_kv_cache=kv,
                     attention_mask=torch.ones(B, m, dtype=torch.long, device=dev))


def _query_tokens(cache: AnchorCache, prompts: Sequence[Prompt]) -> list[torch.Tensor]:
    p0 = cache.prefix_len
    out = []
    for i, p in enumerate(prompts):
        if len(p) <= p0 or not torch.equal(p.tokens[:p0], cache.prefix_tokens):
            raise ValueError(f"prompt {i} does not start with the cache's demonstrations; build all prompts "
                             "with the same demonstrations (make_icl_set) as the cache")
        out.append(p.tokens[p0:])
    return out


def predict_cached(model, cache: AnchorCache, prompts: Sequence[Prompt], label_ids: Sequence[int],
                   batch_size: int = 16, top_k: int = 5, progress: bool | str = False) -> Predictions:
    """:func:`helpers.predict.predict`, but each prompt's demonstrations are replaced by ``cache``."""
    if not prompts:
        raise ValueError("no prompts to predict")
    qtok = _query_tokens(cache, prompts)
    ids = torch.tensor(list(label_ids))
    n = len(prompts)
    label_logits = torch.empty(n, len(ids))
    topk = torch.empty(n, top_k, dtype=torch.long)
    batches = length_batches(prompts, batch_size)
    with torch.inference_mode():
        for idx in tqdm(batches, desc=progress if isinstance(progress, str) else "cached", leave=False,
                        disable=not progress):
            T = max(len(qtok[i]) for i in idx)
            toks = torch.zeros(len(idx), T, dtype=torch.long)
            for r, i in enumerate(idx):
                toks[r, : len(qtok[i])] = qtok[i]
            q = torch.tensor([len(qtok[i]) - 1 for i in idx])
            logits = cached_logits(model, cache, toks, q).float().cpu()
            label_logits[idx] = logits[:, ids]
            topk[idx] = logits.topk(top_k, dim=-1).indices
    gold = torch.tensor([p.gold if p.gold is not None else -1 for p in prompts])
    return Predictions(label_logits, topk, gold)


def text_anchor_demos(demos: Sequence[Demo]) -> list[Demo]:
    """Demonstrations with their text removed (formatting and label words stay as plain text)."""
    return [Demo("", d.label, d.idx) for d in demos]


def text_anchor_prompts(model, task, demos: Sequence[Demo], queries: Sequence[Demo]) -> list[Prompt]:
    """Text_anchor prompts, e.g. ``"Review: \\nSentiment: Negative\\nReview: <x>\\nSentiment:"``."""
    prompts, dropped = build_prompts(model, task, text_anchor_demos(demos), queries)
    if dropped:
        raise ValueError(f"{dropped} Text_anchor prompts exceed the context")
    return prompts


def token_counts(prompts: Sequence[Prompt], cache: AnchorCache) -> dict:
    """L_demo (mean tokens per demonstration), L_x (mean query tokens), L_anchor (cache length), the bound.

    bound = (P0 + L_x) / (L_anchor + L_x): the ratio of attended tokens, an
    upper bound of the speed-up when cost is linear in tokens.
    """
    p0 = cache.prefix_len
    n_demos = prompts[0].n_demos
    bos = 1 if prompts[0].bos else 0
    lx = float(np.mean([len(p) - p0 for p in prompts]))
    return dict(L_demo=(p0 - bos) / n_demos, L_context=p0, L_x=lx, L_anchor=len(cache),
                bound=(p0 + lx) / (len(cache) + lx))


@dataclass
class CompressionResult:
    task: str
    seed: int
    metrics: dict  # method -> {"label_loyalty", "word_loyalty", "accuracy"} (fractions)
    counts: dict  # token_counts of Hidden_anchor
    random_top_draw: int  # which draw won Hidden_random-top
    n_test: int


METHODS = ("ICL", "Text_anchor", "Hidden_random", "Hidden_random-top", "Hidden_anchor")


def run_compression(model, icl_set, random_top_draws: int = 20, batch_size: int = 16,
                    progress: bool = False) -> CompressionResult:
    """Table 2 for one :class:`helpers.prompts.PromptSet` (1-shot, one seed): every method vs full ICL."""
    prompts, lids, seed = icl_set.prompts, icl_set.label_ids, icl_set.seed
    ref = predict(model, prompts, lids, batch_size)

    def score(pr: Predictions) -> dict:
        return dict(label_loyalty=label_loyalty(pr.pred, ref.pred),
                    word_loyalty=word_loyalty(pr.topk, ref.topk, k=5),
                    accuracy=pr.accuracy)

    out = {"ICL": score(ref)}
    ta = text_anchor_prompts(model, icl_set.task, icl_set.demos, icl_set.test)
    out["Text_anchor"] = score(predict(model, ta, lids, batch_size))
    anchor = build_cache(model, prompts[0])
    out["Hidden_anchor"] = score(predict_cached(model, anchor, prompts, lids, batch_size))
    draws = []
    for d in tqdm(range(max(1, random_top_draws)), desc="random draws", disable=not progress, leave=False):
        c = build_cache(model, prompts[0], random_keep(prompts[0], seed=int(seed) * 1000 + d))
        draws.append(score(predict_cached(model, c, prompts, lids, batch_size)))
    out["Hidden_random"] = draws[0]
    best = int(np.argmax([s["label_loyalty"] for s in draws]))
    out["Hidden_random-top"] = draws[best]
    return CompressionResult(icl_set.task.name, seed, {m: out[m] for m in METHODS}, token_counts(prompts, anchor),
                             best, len(prompts))


def table2_verdict(table: dict) -> str:
    """Verdict on §3.2 from task-averaged metrics ``{method: {label_loyalty, word_loyalty, accuracy}}``.

    Criteria (fixed before running): "replicates" if Hidden_anchor has the
    highest label loyalty AND the highest word loyalty of the four compressed
    methods; "partly" if it has the highest of the two on one metric, or beats the
    hidden baselines (Hidden_random, Hidden_random-top) on both; otherwise
    "does not replicate".
    """
    others = ["Text_anchor", "Hidden_random", "Hidden_random-top"]
    ha = table["Hidden_anchor"]
    best = {m: all(ha[m] > table[o][m] for o in others) for m in ("label_loyalty", "word_loyalty")}
    hidden = all(ha[m] > table[o][m] for o in others[1:] for m in best)
    if all(best.values()):
        return "replicates"
    if any(best.values()) or hidden:
        return "partly"
    return "does not replicate"


def speed_verdict(speedups: dict, bounds: dict, frac: float = 0.9) -> str:
    """Speed-up criterion: "meets the goal" if every task reaches ``frac`` of its token-ratio bound,
    "speeds up" if every task is faster than full ICL, else "no speed-up"."""
    if all(speedups[t] >= frac * bounds[t] for t in speedups):
        return "meets the goal"
    if all(speedups[t] > 1 for t in speedups):
        return "speeds up"
    return "no speed-up"


def time_icl_vs_anchor(model, icl_set, n_inputs: int = 16, repeats: int = 3, warmup: int = 2,
                       label_only: bool = False) -> dict:
    """Inference time per input of full ICL vs Hidden_anchor, one input at a time, in the same run.

    Both paths compute full-vocabulary logits at q only (``label_only``: only
    the label words' logits, which removes the fixed cost of a large
    unembedding, e.g. Gemma's 262k x 640 matrix, from both paths). The anchor cache is
    built once (its time is reported separately, amortised over the test set
    as in the paper). Inputs alternate between the two paths so machine load
    affects both alike; the time per path is the median over ``repeats`` of the
    mean over ``n_inputs`` inputs.
    """
    import time

    from .predict import logits_at

    prompts = icl_set.prompts[:n_inputs]
    t0 = time.perf_counter()
    cache = build_cache(model, prompts[0])
    t_build = time.perf_counter() - t0
    qtok = _query_tokens(cache, prompts)
    dev = model.cfg.device

    ids = torch.tensor(icl_set.label_ids, device=dev) if label_only else None

    def full(p):
        logits_at(model, p.tokens[None].to(dev), torch.tensor([p.q]), vocab=ids)

    def anchor(i):
        t = qtok[i][None]
        cached_logits(model, cache, t, torch.tensor([t.shape[1] - 1]), vocab=ids)

    tf, ta = [], []
    with torch.inference_mode():
        for i in range(min(warmup, len(prompts))):
            full(prompts[i]), anchor(i)
        for _ in range(repeats):
            sf = sa = 0.0
            for i, p in enumerate(prompts):
                t = time.perf_counter(); full(p); sf += time.perf_counter() - t
                t = time.perf_counter(); anchor(i); sa += time.perf_counter() - t
            tf.append(sf / len(prompts)); ta.append(sa / len(prompts))
    out = token_counts(prompts, cache)
    t_full, t_anchor = float(np.median(tf)), float(np.median(ta))
    out.update(task=icl_set.task.name, label_only=label_only, t_full=t_full, t_anchor=t_anchor, t_build=t_build,
               speedup=t_full / t_anchor, n_inputs=len(prompts))
    out["speedup_over_bound"] = out["speedup"] / out["bound"]
    return out
