"""Paper B (Yu & Ananiadou 2024): in-context heads, value-output vectors, the two towers, biases.

Everything is measured at the last position ``q`` of each prompt.

Definitions (fixed before any result was looked at):

- **Unrelated-label tasks** (:func:`unrelated_task`): a task from ``TASKS``
  with its label words replaced by ``foo``/``bar`` (class 0 -> foo, class 1 ->
  bar) and, by default, the paper's prompt shape ``S0 : bar\\nS1 : foo\\n...
  \\nSx :`` (no input prefix, label prefix ``" :"``). Multi-class sources are
  made binary by keeping two classes (e.g. AGNews World vs Sports) and
  relabelling them 0/1.
- **A head's output at q**: ``z[q, h] @ W_O[l, h]`` (hook_z has ``n_heads``
  heads). What it adds to the residual stream is that vector, except in
  models with a norm after attention (Gemma's ``ln1_post``), where the norm is
  applied with its scale frozen at the actual value at q (the linear part of
  the norm: centring for LayerNorm, division by the frozen scale, times its
  weight; the norm's bias belongs to no head). ``b_O`` is per layer and is not
  split between heads: it is returned separately.
- **Gain** (a log-probability gain read at the final residual): for head
  (l, h) and prompt b with predicted label y (the unmodified model's
  label-restricted argmax), ``log p(y | r) - log p(y | r - c_lh)``, where ``r``
  is the final residual stream at q, ``c_lh`` the head's residual contribution
  at q, and ``log p(. | x)`` the full-vocabulary log-softmax of
  ``unembed(ln_final(x))`` (ln_final recomputed, not frozen). It is what the
  head's own write at q adds to the predicted label's log-probability (its
  direct effect). The paper's variant adds ``c_lh`` to the residual entering
  layer l instead; on Gemma that residual, unembedded, is so far from a
  distribution in layers 0-1 (gains of ~100-200 nats) that those layers
  dominated every ranking, so the final residual is used.
- **Drop**: ``log p(y) - log p(y | head ablated)``, the head's ``hook_z`` at
  position q only set to zero (``ablation="zero"``) or to its mean at q over
  the prompts scored (``"mean"``). Ablating at q changes only position q's
  residual stream (causal attention), so it is computed exactly and cheaply:
  the prefix ``tokens[:q]`` runs once with a key/value cache and the last token
  is re-run once per head, all heads in one batch. With shared demonstrations
  that cache is the demonstrations' (run once for all prompts) extended by the
  prompt's own query tokens.
- **In-context heads**: heads ranked, for each label word separately, by the
  mean of their two ranks (gain and drop of that label's log-probability, mean
  over the prompts whose gold label it is: the heads that raise "foo" and the
  heads that raise "bar"); the two rankings are taken in turn (best foo head,
  best bar head, ...) up to ``max(min_heads, ceil(frac * n_heads_total))``
  heads (:func:`incontext_heads`). A single ranking on the predicted label
  (:func:`rank_heads`) is the option ``per_label=False``: with a model that
  predicts one word most of the time it finds only that word's heads.
- **Mapping control**: the same demonstrations and queries with the label
  words swapped (class 0 -> bar, class 1 -> foo; and " A"/" B" both ways). A
  model that follows the mapping in context is right under both mappings; a
  model with only a prior for one word predicts the same word under both, and
  is then right in exactly one of the two. *Swap-averaged accuracy* = per
  input, the mean of its correctness under a mapping and under its swap: a
  fixed word preference gives exactly 0.5, so only in-context use of the
  mapping lifts it above 0.5 (:func:`mapping_control`).
- **Value-output vector** of source position j for head (l, h) at q:
  ``A[q, j] * (v_j @ W_O[l, h])`` (GQA: query head h reads KV head
  ``h // (n_heads // n_kv_heads)``). Summed over j it is the head's output at
  q (b_O excluded). Its **logit minus** is ``log p(foo) - log p(bar)`` of the
  vector projected through the (frozen) post-attention norm, the final norm
  with its scale frozen at that of the actual final residual at q, and
  ``W_U`` - i.e. a logit difference, since the log-softmax normaliser cancels.
  :func:`value_outputs` reports it per unit attention (``vo_lm``, from
  ``v_j @ W_O``) and attention-weighted (``wvo_lm``).
- **Biases** (label 0 = foo, 1 = bar; size in probability points, 0 = none):
  majority bias = mean over the two 3:1 imbalanced demonstration sets of
  P(pred = majority label) - 0.5; recency bias = mean over the two orders
  ``[a, a, b, b]`` and ``[b, b, a, a]`` of P(pred = label of the last two
  demonstrations) - 0.5. Averaging the two directions cancels the model's own
  foo/bar preference and the class balance of the test sample.
- **Reductions**: (1) majority: in the in-context heads, the attention at q to
  the minority label's positions is multiplied by ``n_major / n_minor`` (= 3,
  no renormalisation), which multiplies the minority label's value-output
  contribution by 3. (2) recency: the positional part of an in-context head's
  attention is its mean attention from q to the k-th label slot over the two
  orders (each slot holds each class once, so class content averages out);
  it is removed by re-weighting ``A[q, p_k] *= mean_k(m) / m_k`` (no
  renormalisation). % reduction = ``100 * (|before| - |after|) / |before|``.

Shared demonstrations: when the prompts of a call share their demonstrations token for token (one
:class:`PromptSet`), the demonstrations run once (:mod:`helpers.core.prefix`) and each input runs as a short suffix
against them; every function here then gives the full prompts' numbers (tests, to float rounding). Prompts
with their own demonstrations (:func:`fresh_demo_prompts`) run as full prompts; ``shared=False`` forces that
path everywhere.

Notebook 07's steps, each cached on disk, are the ``*_runs`` functions at the end (:func:`accuracy_runs`,
:func:`attribution_runs`, :func:`ablation_runs`, :func:`value_output_runs`, :func:`towers_runs`,
:func:`bias_runs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from einops import einsum, rearrange
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core.predict import HookFactory, Predictions, length_batches, predict
from helpers.core.prefix import (
    PrefixCache,
    PrefixError,
    extend_prefix,
    predict_shared,
    run_prefix,
    shared_prefix_or_none,
    suffix_batches,
    suffix_forward,
)
from helpers.core.prompts import (
    Demo,
    Prompt,
    PromptSet,
    build_prompt,
    build_prompts,
    class_draws,
    demos_from_indices,
    pad_batch,
    sample_demos,
    sample_test,
)
from helpers.core.store import cached
from helpers.core.tasks import Task, get_task, label_token_ids, load_split
from helpers.study.stats import Interval, bootstrap_means, bootstrap_of_means, bootstrap_statistic

__all__ = [
    "PAPER_B",
    "UnrelatedTask",
    "unrelated_task",
    "make_set",
    "HeadScores",
    "head_attribution",
    "n_incontext_heads",
    "rank_heads",
    "rank_heads_for_label",
    "incontext_heads",
    "random_heads",
    "ablation_hooks",
    "ablation_hook_pair",
    "ablation_accuracy",
    "ablation_predictions",
    "ablation_interval_part",
    "label_carrying_rows",
    "value_output_interval_part",
    "value_output_vectors",
    "ValueOutputs",
    "value_outputs",
    "two_towers",
    "two_towers_intervals",
    "two_towers_interval_part",
    "mapping_control",
    "mapping_interval_part",
    "bias_cells",
    "bias_intervals",
    "bias_interval_part",
    "ALL_POSITIONS",
    "attention_rows_at_q",
    "fresh_demo_prompts",
    "label_carrying_rate",
    "BiasResult",
    "reduction_pct",
    "majority_bias",
    "recency_bias",
    "heads_sizes",
    "heads_verdict",
    "attribution_seed",
    "towers_seed",
    "eval_set",
    "accuracy_runs",
    "attribution_runs",
    "ablation_runs",
    "value_output_runs",
    "towers_runs",
    "bias_runs",
]

Head = tuple[int, int]

# the paper's numbers (Yu & Ananiadou 2024)
PAPER_B = {"acc_before": 0.876, "acc_after_ablation": 0.244, "head_fraction": 0.01,
           "majority_reduction_pct": 22.0, "recency_reduction_pct": 17.0}


# ------------------------------------------------------------------ tasks


@dataclass
class UnrelatedTask:
    """A binary task with its own (filtered, relabelled) train/test pools."""

    task: Task
    train: object  # datasets.Dataset
    test: object
    source: str
    classes: tuple[int, int]


def unrelated_task(base: str | Task, classes: tuple[int, int] = (0, 1), words: tuple[str, str] | None = ("foo", "bar"),
                   paper_shape: bool = True) -> UnrelatedTask:
    """``base`` made binary on ``classes`` with label words ``words`` (None keeps the real words).

    ``paper_shape=True`` renders ``{text} : {label}`` lines (paper B's
    ``S0 : bar``); False keeps the base task's prefixes.
    """
    import datasets

    base = get_task(base)
    if len(classes) != 2 or len(set(classes)) != 2 or not all(0 <= c < base.n_classes for c in classes):
        raise ValueError(f"classes must be two distinct class indices of {base.display} (0..{base.n_classes - 1})")
    real = tuple(base.label_words[c] for c in classes)
    lw = tuple(words) if words is not None else real
    suffix = "foobar" if words is not None else "real"
    binary = tuple(classes) != (0, 1) or base.n_classes != 2
    name = f"{base.name}{''.join(map(str, classes)) if binary else ''}_{suffix}"
    display = f"{base.display}{' ' + '/'.join(real) if binary else ''} ({'/'.join(lw)})"
    task = replace(base, name=name, display=display, label_words=lw,
                   input_prefix="" if paper_shape else base.input_prefix,
                   label_prefix=" :" if paper_shape else base.label_prefix,
                   template="" if paper_shape else base.template, separator="\n" if paper_shape else base.separator,
                   digest="")

    def _filter(split):
        ds = load_split(base, split)
        labels = np.asarray(ds["label"])
        keep = np.flatnonzero(np.isin(labels, classes))
        texts = ds.select(keep.tolist())["text"]
        relab = (labels[keep] == classes[1]).astype(int).tolist()
        return datasets.Dataset.from_dict({"text": texts, "label": relab})

    return UnrelatedTask(task, _filter("train"), _filter("test"), base.name, tuple(classes))


def make_set(model, ut: UnrelatedTask, seed: int, n_test: int, k_per_class: int = 2,
             demos: Sequence[Demo] | None = None) -> PromptSet:
    """One fixed demonstration set (``k_per_class`` per class, shuffled with ``seed``) for ``n_test`` queries."""
    demos = list(demos) if demos is not None else sample_demos(ut.train, ut.task, k_per_class, seed)
    queries = sample_test(ut.test, n_test, seed)
    prompts, dropped = build_prompts(model, ut.task, demos, queries)
    return PromptSet(ut.task, seed, k_per_class, demos, [p.query for p in prompts], prompts, dropped,
                     label_token_ids(model.tokenizer, ut.task))


def fresh_demo_prompts(model, ut: UnrelatedTask, seed: int, n: int, k_per_class: int = 2) -> list[Prompt]:
    """``n`` prompts, each with its own demonstrations (seed ``[seed, i]``), for the two-towers analysis."""
    queries = sample_test(ut.test, n, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    out = []
    for i, qd in enumerate(queries):
        demos = sample_demos(ut.train, ut.task, k_per_class, seed * 1000 + i + 1)
        p = build_prompt(model, ut.task, demos, qd, label_ids=lids)
        if len(p) <= model.cfg.n_ctx:
            out.append(p)
    return out


# ------------------------------------------------------------------ internals


def _post_norm(model):
    return bool(getattr(model.cfg, "use_normalization_before_and_after", False))


def _frozen_norm(norm, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The linear part of a LayerNorm/RMSNorm applied to a component ``x`` with the norm's scale frozen."""
    kind = type(norm).__name__
    if kind.startswith("LayerNorm"):
        x = x - x.mean(-1, keepdim=True)
    elif not kind.startswith("RMSNorm"):
        raise NotImplementedError(f"frozen norm for {kind}")
    x = x / scale
    w = getattr(norm, "w", None)
    return x * w if w is not None else x


def _log_probs(model, resid: Float[torch.Tensor, "... d_model"]) -> Float[torch.Tensor, "... vocab"]:
    """Full-vocabulary log-probs of residual vectors (ln_final recomputed, unembed, soft cap)."""
    shape = resid.shape
    x = resid.reshape(-1, 1, shape[-1])
    logits = model.unembed(model.ln_final(x))[:, 0, :]
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0)
    if cap and cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits.float().log_softmax(-1).reshape(*shape[:-1], -1)


def _final_scale(model, resid: Float[torch.Tensor, "batch d_model"]) -> Float[torch.Tensor, "batch 1"] | None:
    """The scale ln_final divides ``resid`` by (None if ln_final has no scale)."""
    if not hasattr(model.ln_final, "hook_scale"):
        return None
    got = {}
    with model.hooks(fwd_hooks=[("ln_final.hook_scale", lambda act, hook: got.__setitem__("s", act.detach()))]):
        model.ln_final(resid[:, None, :])
    return got["s"][:, 0, :]


def _kv_index(model) -> torch.Tensor:
    """KV head read by each query head (TL's repeat_interleave convention)."""
    n, nkv = model.cfg.n_heads, (model.cfg.n_key_value_heads or model.cfg.n_heads)
    return torch.arange(n) // (n // nkv)


def _shared_cache(model, prompts: Sequence[Prompt], shared: bool = True, prefix_hooks: Sequence = ()) -> PrefixCache | None:
    """The prompts' shared demonstrations run once (under ``prefix_hooks``) into a keep-everything cache, or
    None when ``shared`` is False or the prompts do not share their demonstrations token for token (or the
    model's positions are not supported): then the caller runs full prompts."""
    p0 = shared_prefix_or_none(model, prompts, shared)
    return None if p0 is None else run_prefix(model, prompts[0].tokens[:p0], hooks=prefix_hooks)


def _predict(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int, hooks: HookFactory | None = None,
             cache: PrefixCache | None = None, top_k: int = 0, progress: bool | str = False) -> Predictions:
    """:func:`predict_shared` against ``cache`` if given, else :func:`predict` on the full prompts."""
    if cache is not None:
        return predict_shared(model, prompts, label_ids, batch_size, top_k=top_k, hooks=hooks, cache=cache,
                              progress=progress)
    return predict(model, prompts, label_ids, batch_size, top_k=top_k, hooks=hooks, progress=progress)


def _batches(model, prompts: Sequence[Prompt], batch_size: int, cache: PrefixCache | None):
    """``(indices, tokens, q)`` batches: suffixes after ``cache`` (q in the suffix) or padded full prompts."""
    if cache is not None:
        return list(suffix_batches(cache, prompts, batch_size))
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    return [(idx, *pad_batch([prompts[i] for i in idx], pad)) for idx in length_batches(prompts, batch_size)]


def _collect_at_q(model, tokens, q, want_pattern_layers: Sequence[int] = (), cache: PrefixCache | None = None):
    """One forward pass storing, at each row's q: resid_pre, z, post-attn norm scale, final resid and scale;
    for ``want_pattern_layers`` also the attention row at q and all values.

    With ``cache`` (a keep-everything prefix cache) ``tokens`` are suffixes run after it and ``q`` indexes
    the suffix; the attention row at q and the values then cover every prompt position (the prefix's values
    come from the cache), as in a full run."""
    if cache is not None and not cache.full:
        raise PrefixError("_collect_at_q needs a keep-everything cache (pattern columns = prompt positions)")
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

    hooks = []
    for l in range(model.cfg.n_layers):
        hooks += [(f"blocks.{l}.hook_resid_pre", at_q("resid_pre", l)), (f"blocks.{l}.attn.hook_z", at_q("z", l))]
        if _post_norm(model):
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
            pre = cache.values[l].to(v.device, v.dtype)[None].expand(B, -1, -1, -1)
            store["v"][l] = torch.cat([pre, v], 1)
    store["resid_final"] = resid[ar, q].detach()
    store["final_scale"] = _final_scale(model, store["resid_final"])
    return store


def _head_contrib(model, store, layer: int) -> Float[torch.Tensor, "batch head d_model"]:
    """Each head's residual contribution at q in ``layer`` (post-attention norm frozen)."""
    W_O = model.blocks[layer].attn.W_O  # [head, d_head, d_model]
    out = einsum(store["z"][layer], W_O, "b h dh, h dh d -> b h d")
    if _post_norm(model):
        out = _frozen_norm(model.blocks[layer].ln1_post, out, store["post_scale"][layer][:, None, :])
    return out


# ------------------------------------------------------------------ head attribution


@dataclass
class HeadScores:
    gain: Float[torch.Tensor, "n layer head"]  # per prompt, for the predicted label
    drop: Float[torch.Tensor, "n layer head"]
    pred: Int[torch.Tensor, "n"]
    ablation: str
    label_gain: Float[torch.Tensor, "n label layer head"] | None = None  # per prompt, for every label word
    label_drop: Float[torch.Tensor, "n label layer head"] | None = None
    gold: Int[torch.Tensor, "n"] | None = None  # -1 where unknown

    @property
    def mean_gain(self) -> Float[torch.Tensor, "layer head"]:
        return self.gain.mean(0)

    @property
    def mean_drop(self) -> Float[torch.Tensor, "layer head"]:
        return self.drop.mean(0)


def _z_mask_hooks(model, masks: Float[torch.Tensor, "rows layer head"],
                  fill: Float[torch.Tensor, "layer head d_head"] | None) -> list:
    """hook_z hooks for a one-token run of ``rows`` copies: row r's heads with ``masks[r] == 1`` get ``fill``
    (zero if None)."""
    def hook_for(l):
        def fn(z, hook):  # z [R, 1, head, d_head]
            m = masks[:, l, :, None]
            repl = torch.zeros_like(z[:, 0]) if fill is None else fill[l].to(z.dtype)[None].expand_as(z[:, 0])
            z = z.clone()
            z[:, 0] = z[:, 0] * (1 - m) + repl * m
            return z
        return fn

    return [(f"blocks.{l}.attn.hook_z", hook_for(l)) for l in range(model.cfg.n_layers) if masks[:, l].any()]


def _ablated_last_logprobs(model, tokens: Int[torch.Tensor, "seq"], masks: Float[torch.Tensor, "rows layer head"],
                           fill: Float[torch.Tensor, "layer head d_head"] | None,
                           cache: PrefixCache | None = None) -> Float[torch.Tensor, "rows vocab"]:
    """Log-probs at the last position of one prompt, once per row of ``masks`` (1 = head's z at q replaced
    by ``fill``, zero if None). The prefix runs once into a key/value cache; with ``cache`` (the shared
    demonstrations, keep-everything) only the tokens between it and the last token run, to extend it."""
    R = masks.shape[0]
    dev = model.cfg.device
    masks = masks.to(dev)
    hooks = _z_mask_hooks(model, masks, fill)
    last = tokens[-1:].to(dev)[None].expand(R, 1)
    if cache is not None:
        P0 = cache.length
        if len(tokens) <= P0 or not torch.equal(tokens[:P0].cpu(), cache.tokens):
            raise PrefixError("the prompt does not start with the cache's prefix tokens")
        ext = extend_prefix(model, cache, tokens[P0:-1])
        resid = suffix_forward(model, ext, last, hooks)
        return _log_probs(model, resid[:, 0])

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
    return _log_probs(model, resid[:, 0])


def head_attribution(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                     ablation: str = "zero", progress: bool | str = False, shared: bool = True) -> HeadScores:
    """Gain and drop (module docstring) of every head for every prompt, at the prompt's q.

    Prompts sharing their demonstrations run them once (``shared=False``: full prompts throughout)."""
    if ablation not in ("zero", "mean"):
        raise ValueError("ablation must be 'zero' or 'mean'")
    if not prompts:
        raise ValueError("no prompts to score")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    lids = torch.tensor(list(label_ids))
    n = len(prompts)
    C = len(lids)
    gain = torch.empty(n, L, H)
    label_gain = torch.empty(n, C, L, H)
    pred = torch.empty(n, dtype=torch.long)
    zq = torch.empty(n, L, H, model.cfg.d_head)
    cache = _shared_cache(model, prompts, shared)
    batches = _batches(model, prompts, batch_size, cache)
    with torch.inference_mode():
        for idx, tokens, q in tqdm(batches, desc="gain" if progress is True else (progress or "gain"), leave=False,
                                   disable=not progress):
            st = _collect_at_q(model, tokens.to(model.cfg.device), q, cache=cache)
            lp_final = _log_probs(model, st["resid_final"])
            y = lp_final[:, lids.to(lp_final.device)].argmax(-1)
            tok_y = lids.to(y.device)[y]
            r = st["resid_final"]  # [b, d]
            c = torch.stack([_head_contrib(model, st, l) for l in range(L)], 1)  # [b, L, H, d]
            without = r[:, None, None, :] - c
            lp = _log_probs(model, rearrange(without, "b l h d -> b (l h) d"))  # [b, L*H, vocab]
            ly = lp.gather(-1, tok_y[:, None, None].expand(-1, L * H, 1))[..., 0]
            ly0 = lp_final.gather(-1, tok_y[:, None])  # [b, 1]
            gain[idx] = rearrange(ly0 - ly, "b (l h) -> b l h", l=L).float().cpu()
            lab = lids.to(lp.device)
            label_gain[idx] = rearrange(lp_final[:, lab][:, None, :] - lp[..., lab], "b (l h) c -> b c l h",
                                        l=L).float().cpu()
            for l in range(L):
                zq[idx, l] = st["z"][l].float().cpu()
            pred[idx] = y.cpu()
        fill = zq.mean(0) if ablation == "mean" else None
        # one row per head plus an unablated row
        masks = torch.cat([torch.zeros(1, L * H), torch.eye(L * H)]).reshape(-1, L, H)
        drop = torch.empty(n, L, H)
        label_drop = torch.empty(n, C, L, H)
        for i in tqdm(range(n), desc="drop", leave=False, disable=not progress):
            lp = _ablated_last_logprobs(model, prompts[i].tokens, masks, fill, cache=cache)
            lc = lp[:, lids.to(lp.device)].float().cpu()  # [1 + L*H, C]
            drop[i] = (lc[0, pred[i]] - lc[1:, pred[i]]).reshape(L, H)
            label_drop[i] = (lc[:1] - lc[1:]).T.reshape(C, L, H)
    gold = torch.tensor([-1 if p.gold is None else int(p.gold) for p in prompts])
    return HeadScores(gain, drop, pred, ablation, label_gain, label_drop, gold)


def n_incontext_heads(model, frac: float = 0.01, min_heads: int = 4) -> int:
    """``max(min_heads, ceil(frac * n_layers * n_heads))``."""
    return max(min_heads, math.ceil(frac * model.cfg.n_layers * model.cfg.n_heads))


def rank_heads(scores: HeadScores, by: str = "both") -> list[Head]:
    """All heads, best first: by mean gain, mean drop, or the mean of the two ranks (ties: gain)."""
    g, d = scores.mean_gain.flatten(), scores.mean_drop.flatten()
    H = scores.gain.shape[2]
    if by == "gain":
        key = -g
    elif by == "drop":
        key = -d
    elif by == "both":
        rg = torch.empty_like(g)
        rg[(-g).argsort()] = torch.arange(len(g), dtype=g.dtype)
        rd = torch.empty_like(d)
        rd[(-d).argsort()] = torch.arange(len(d), dtype=d.dtype)
        key = (rg + rd) / 2 + 1e-3 * rg / len(g)
    else:
        raise ValueError("by must be 'gain', 'drop' or 'both'")
    return [(int(i) // H, int(i) % H) for i in key.argsort()]


def rank_heads_for_label(scores: HeadScores, label: int, by: str = "both") -> list[Head]:
    """All heads, best first, for one label word: gain and drop of that label's log-probability, averaged over
    the prompts whose gold label it is (heads that raise "foo" when the answer is foo), ranked as
    :func:`rank_heads` does."""
    if scores.label_gain is None or scores.gold is None:
        raise ValueError("these HeadScores have no per-label scores: recompute them with head_attribution")
    n_labels = scores.label_gain.shape[1]
    if not 0 <= label < n_labels:
        raise ValueError(f"label must be in 0..{n_labels - 1}, got {label}")
    rows = scores.gold == label
    if not rows.any():
        raise ValueError(f"no attribution prompt has gold label {label}: score more prompts (n_attr) so that "
                         "every label has some")
    g, d = scores.label_gain[rows, label], scores.label_drop[rows, label]
    return rank_heads(HeadScores(g, d, scores.pred[rows], scores.ablation), by)


def incontext_heads(scores: HeadScores, n: int, per_label: bool = True, by: str = "both") -> list[Head]:
    """The ``n`` in-context heads. ``per_label`` (default): the rankings of each label word
    (:func:`rank_heads_for_label`) taken in turn - best foo head, best bar head, second foo head, ... - skipping
    heads already taken, so that heads raising either label are found even when the model favours one label.
    ``per_label=False``: :func:`rank_heads` on the predicted label."""
    if n < 1:
        raise ValueError("n must be at least 1")
    if not per_label:
        return rank_heads(scores, by)[:n]
    ranks = [rank_heads_for_label(scores, c, by) for c in range(scores.label_gain.shape[1])]
    out: list[Head] = []
    for tier in zip(*ranks):
        for h in tier:
            if h not in out and len(out) < n:
                out.append(h)
        if len(out) == n:
            break
    return out


def random_heads(model, n: int, seed: int, exclude: Sequence[Head] = (), allow_overlap: bool = False) -> list[Head]:
    """``n`` distinct heads drawn with ``seed``; never in ``exclude`` unless ``allow_overlap``."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    ex = set() if allow_overlap else {tuple(h) for h in exclude}
    pool = [(l, h) for l in range(L) for h in range(H) if (l, h) not in ex]
    if n > len(pool):
        raise ValueError(f"asked for {n} random heads but only {len(pool)} are available")
    pick = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted(pool[i] for i in pick)


def ablation_hook_pair(heads: Sequence[Head], ablation: str = "zero", means: torch.Tensor | None = None,
                       at: str = "q") -> tuple[list, HookFactory]:
    """``(prefix_hooks, factory)``: the listed heads' ``hook_z`` replaced by zero (or ``means[l, h]``) at each
    prompt's q (``at="q"``) or at every position (``at="all"``).

    ``factory`` is a :func:`predict` / :func:`helpers.core.prefix.predict_shared` hook factory (q row =
    ``p.q - offset``; with ``at="all"`` every row it sees). On full prompts it is all that is needed. In a
    shared-prefix run the prefix rows are not in the suffix's tensors: ``prefix_hooks`` (plain TL hooks,
    empty for ``at="q"``) ablate them in the prefix pass (``predict_shared(..., prefix_hooks=...)``).
    """
    if ablation == "mean" and means is None:
        raise ValueError("mean ablation needs means[layer, head, d_head] (e.g. from head_attribution's z at q)")
    if ablation not in ("zero", "mean"):
        raise ValueError("ablation must be 'zero' or 'mean'")
    if at not in ("q", "all"):
        raise ValueError("at must be 'q' or 'all'")
    lists: dict[int, list[int]] = {}
    for l, h in heads:
        lists.setdefault(int(l), []).append(int(h))
    by_layer = {l: torch.tensor(hs) for l, hs in lists.items()}

    def value(l, hs_t, z):
        return 0.0 if ablation == "zero" else means[l, hs_t].to(z.dtype).to(z.device)

    def every_row(l, hs_t):
        def fn(z, hook):
            z = z.clone()
            z[:, :, hs_t] = value(l, hs_t, z)
            return z
        return fn

    def factory(batch, tokens, offset: int = 0):
        q = torch.tensor([p.q - offset for p in batch])
        ar = torch.arange(len(batch))
        out = []
        for l, hs_t in by_layer.items():
            if at == "all":
                out.append((f"blocks.{l}.attn.hook_z", every_row(l, hs_t)))
                continue

            def fn(z, hook, l=l, hs_t=hs_t):
                val = value(l, hs_t, z)
                z = z.clone()
                z[ar[:, None], q[:, None], hs_t[None]] = val if ablation == "zero" else val[None].expand(len(ar), -1, -1)
                return z
            out.append((f"blocks.{l}.attn.hook_z", fn))
        return out

    prefix_hooks = [(f"blocks.{l}.attn.hook_z", every_row(l, hs_t)) for l, hs_t in by_layer.items()] if at == "all" else []
    return prefix_hooks, factory


def ablation_hooks(heads: Sequence[Head], ablation: str = "zero", means: torch.Tensor | None = None,
                   at: str = "q") -> HookFactory:
    """A :func:`predict` hook factory replacing the listed heads' ``hook_z`` by zero (or ``means[l, h]``)
    at each prompt's q (``at="q"``) or at every position (``at="all"``; after a shared prefix this covers
    the suffix rows only: use :func:`ablation_hook_pair`'s prefix hooks too)."""
    return ablation_hook_pair(heads, ablation, means, at)[1]


def ablation_predictions(model, prompts: Sequence[Prompt], label_ids: Sequence[int], heads: Sequence[Head],
                         batch_size: int = 16, *, shared: bool = True, **kw) -> Predictions:
    """Predictions with ``heads`` ablated (``**kw`` to :func:`ablation_hook_pair`). Prompts sharing their
    demonstrations run them once (with ``at="all"``, with the heads ablated there too)."""
    prefix_hooks, hooks = ablation_hook_pair(heads, **kw) if heads else ([], None)
    cache = _shared_cache(model, prompts, shared, prefix_hooks)
    return _predict(model, prompts, label_ids, batch_size, hooks=hooks, cache=cache)


def ablation_accuracy(model, prompts: Sequence[Prompt], label_ids: Sequence[int], heads: Sequence[Head],
                      batch_size: int = 16, *, shared: bool = True, **kw) -> float:
    """ICL accuracy with ``heads`` ablated (:func:`ablation_predictions`)."""
    return ablation_predictions(model, prompts, label_ids, heads, batch_size, shared=shared, **kw).accuracy


# ------------------------------------------------------------------ value-output vectors


def value_output_vectors(model, pattern_q: Float[torch.Tensor, "batch head seq"], v: Float[torch.Tensor, "batch seq kv d_head"],
                         layer: int, heads: Sequence[int] | None = None) -> Float[torch.Tensor, "batch head seq d_model"]:
    """``A[q, j] * (v_j @ W_O[layer, h])`` for every source j (b_O excluded); summed over j = the head's output."""
    hs = torch.arange(model.cfg.n_heads) if heads is None else torch.as_tensor(list(heads))
    vh = v[:, :, _kv_index(model)[hs]]  # [b, seq, h, dh]
    W_O = model.blocks[layer].attn.W_O[hs]
    vo = einsum(vh, W_O, "b s h dh, h dh d -> b h s d")
    return pattern_q[:, hs, :, None] * vo


@dataclass
class ValueOutputs:
    heads: list[Head]
    attn: Float[torch.Tensor, "n head demo"]  # A[q, p_k]
    vo_lm: Float[torch.Tensor, "n head demo"]  # logit minus of v_{p_k} W_O (per unit attention)
    wvo_lm: Float[torch.Tensor, "n head demo"]  # attention-weighted
    label_class: Int[torch.Tensor, "n demo"]
    label_pos: Int[torch.Tensor, "n demo"]
    out_lm: Float[torch.Tensor, "n"]  # the model's log p(foo) - log p(bar) at q
    pred: Int[torch.Tensor, "n"]


def value_outputs(model, prompts: Sequence[Prompt], label_ids: Sequence[int], heads: Sequence[Head],
                  batch_size: int = 8, progress: bool | str = False, shared: bool = True,
                  cache: PrefixCache | None = None) -> ValueOutputs:
    """Attention and value-output logit minus at every demonstration label position, for ``heads``.

    Prompts sharing their demonstrations run them once (values at the label positions from the prefix
    cache, attention rows from the suffix runs; ``cache``: that prefix already built, keep-everything);
    otherwise (e.g. :func:`fresh_demo_prompts`, or ``shared=False``) full prompts run."""
    if len(label_ids) != 2:
        raise ValueError("logit minus needs a binary task (label_ids = [foo, bar])")
    K = {p.n_demos for p in prompts}
    if len(K) != 1:
        raise ValueError("all prompts must have the same number of demonstrations")
    K = K.pop()
    n, S = len(prompts), len(heads)
    layers = sorted({l for l, _ in heads})
    W_U = model.W_U
    u = (W_U[:, label_ids[0]] - W_U[:, label_ids[1]]).float()
    attn = torch.empty(n, S, K)
    vo_lm = torch.empty(n, S, K)
    out_lm = torch.empty(n)
    pred = torch.empty(n, dtype=torch.long)
    if cache is None:
        cache = _shared_cache(model, prompts, shared)
    batches = _batches(model, prompts, batch_size, cache)
    with torch.inference_mode():
        for idx, tokens, q in tqdm(batches, desc="value-output", leave=False, disable=not progress):
            batch = [prompts[i] for i in idx]
            st = _collect_at_q(model, tokens.to(model.cfg.device), q, want_pattern_layers=layers, cache=cache)
            lp = _log_probs(model, st["resid_final"])[:, list(label_ids)]
            out_lm[idx] = (lp[:, 0] - lp[:, 1]).cpu()
            pred[idx] = lp.argmax(-1).cpu()
            pos = torch.tensor([p.label_pos for p in batch])  # [b, K] prompt positions
            ar = torch.arange(len(batch))[:, None]
            fs = st["final_scale"][:, None, :] if st["final_scale"] is not None else 1.0
            for s, (l, h) in enumerate(heads):
                v_pos = st["v"][l][ar, pos]  # [b, K, kv, dh]
                ones = torch.ones(len(batch), model.cfg.n_heads, K, dtype=v_pos.dtype, device=v_pos.device)
                vo = value_output_vectors(model, ones, v_pos, l, [h])[:, 0]  # [b, K, d] unweighted
                if _post_norm(model):
                    vo = _frozen_norm(model.blocks[l].ln1_post, vo, st["post_scale"][l][:, None, :])
                vo_lm[idx, s] = (_frozen_norm(model.ln_final, vo, fs).float() @ u).cpu()
                attn[idx, s] = st["pattern"][l][ar, h, pos].float().cpu()
    lc = torch.tensor([p.label_class for p in prompts])
    lpos = torch.tensor([p.label_pos for p in prompts])
    return ValueOutputs(list(heads), attn, vo_lm, attn * vo_lm, lc, lpos, out_lm, pred)


def attention_rows_at_q(model, prompt: Prompt, heads: Sequence[Head]) -> Float[torch.Tensor, "head seq"]:
    """Each head's attention row from q over the prompt's tokens (for the circuitsvis view)."""
    layers = sorted({l for l, _ in heads})
    with torch.inference_mode():
        st = _collect_at_q(model, prompt.tokens[None].to(model.cfg.device), torch.tensor([prompt.q]), layers)
    return torch.stack([st["pattern"][l][0, h] for l, h in heads]).float().cpu()


def label_carrying_rows(vo: ValueOutputs) -> np.ndarray:
    """Per input, the share of (head, label position) whose value-output logit minus has the sign of the
    position's label (foo > 0, bar < 0)."""
    want = 1 - 2 * vo.label_class[:, None, :].float()  # foo(0) -> +1, bar(1) -> -1
    return ((vo.vo_lm * want) > 0).float().flatten(1).mean(1).numpy()


def label_carrying_rate(vo: ValueOutputs) -> float:
    """Share of (input, head, label position) whose value-output logit minus has the sign of the position's
    label (every input has the same number of heads and label positions: the mean of :func:`label_carrying_rows`)."""
    return float(label_carrying_rows(vo).mean())


def value_output_interval_part(carrying, high: float = 0.75, fair: float = 0.60) -> str:
    """The value-output claim from the 95% interval of the label-carrying rate (criteria fixed before the
    run): "replicates" if it lies at or above ``high``; "partly" if at or above ``fair``; "does not
    replicate" if it lies below ``fair``; "inconclusive" otherwise."""
    if carrying.low >= high:
        return "replicates"
    if carrying.low >= fair:
        return "partly"
    if carrying.high < fair:
        return "does not replicate"
    return "inconclusive"


def _corr(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def two_towers(vo: ValueOutputs) -> dict:
    """Per input: attention difference d_attn = sum over heads of (attention on foo positions - on bar
    positions) and value-output difference d_vo = mean over heads of (mean vo_lm at foo positions - at bar
    positions, per unit attention). Pearson correlation of each with the model's logit minus, and with the
    predicted label (point-biserial, foo = 1); coefficient of variation (std / |mean|) of each."""
    foo = (vo.label_class == 0).float()[:, None, :]
    bar = 1 - foo
    d_attn = ((vo.attn * foo).sum(-1) - (vo.attn * bar).sum(-1)).sum(1)
    d_vo = ((vo.vo_lm * foo).sum(-1) / foo.sum(-1).clamp(min=1) - (vo.vo_lm * bar).sum(-1) / bar.sum(-1).clamp(min=1)).mean(1)
    is_foo = (vo.pred == 0).float()
    cv = lambda x: float(x.std() / x.mean().abs().clamp(min=1e-8))
    return {
        "d_attn": d_attn, "d_vo": d_vo,
        "corr_attn_logit_minus": _corr(d_attn, vo.out_lm), "corr_vo_logit_minus": _corr(d_vo, vo.out_lm),
        "corr_attn_pred": _corr(d_attn, is_foo), "corr_vo_pred": _corr(d_vo, is_foo),
        "cv_attn": cv(d_attn), "cv_vo": cv(d_vo),
        "frac_pred_foo": float(is_foo.mean()),
    }


def two_towers_intervals(towers: dict[str, ValueOutputs], n_boot: int = 1000) -> dict[str, Interval | None]:
    """95% intervals (bootstrap over the inputs of each task) of the two-towers statistics, each the mean over
    tasks of its per-task value: ``corr_attn`` = corr(d_attn, logit minus), ``abs_corr_vo`` = |corr(d_vo, logit
    minus)|, ``difference`` = the first minus the second (the contrast the verdict reads). None where a
    statistic is undefined in too many resamples (e.g. no variation in the logit minus)."""
    if not towers:
        raise ValueError("no two-towers runs to summarise")
    tt = {t: two_towers(vo) for t, vo in towers.items()}
    out_lm = {t: np.asarray(vo.out_lm, float) for t, vo in towers.items()}
    cols = {t: (np.asarray(tt[t]["d_attn"], float), np.asarray(tt[t]["d_vo"], float)) for t in towers}

    def statistic(sample):
        (_, idx), = sample
        ca = [_corr(cols[t][0][i], out_lm[t][i]) for t, i in idx.items()]
        cv = [abs(_corr(cols[t][1][i], out_lm[t][i])) for t, i in idx.items()]
        a, v = float(np.mean(ca)), float(np.mean(cv))
        return {"corr_attn": a, "abs_corr_vo": v, "difference": a - v}

    return bootstrap_statistic({0: {t: len(out_lm[t]) for t in towers}}, statistic, n_boot=n_boot)


def two_towers_interval_part(corr_attn: Interval | None, difference: Interval | None) -> str:
    """The two-towers claim from 95% intervals (criteria fixed before the run): "replicates" if the
    attention correlation's interval lies at or above 0.5 and that of (attention correlation - |VO
    correlation|) at or above 0.2; "partly" if the difference's interval lies above 0; "does not replicate" if
    it lies below 0; "inconclusive" otherwise (or when an interval is undefined)."""
    if corr_attn is None or difference is None:
        return "inconclusive"
    if difference.low > 0:
        return "replicates" if corr_attn.low >= 0.5 and difference.low >= 0.2 else "partly"
    if difference.high < 0:
        return "does not replicate"
    return "inconclusive"


# ------------------------------------------------------------------ mapping control


def mapping_control(runs: dict[tuple[str, int], dict], swapped: dict[tuple[str, int], dict]) -> dict[str, dict]:
    """Per-input cells of the mapping control from two :func:`accuracy_runs` results on the same demonstrations
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


def mapping_interval_part(swap_averaged: Interval) -> str:
    """What the swap-averaged accuracy's 95% interval says: "follows the mapping" (above 0.5), "at chance"
    (contains 0.5) or "against the mapping" (below 0.5)."""
    if swap_averaged.low > 0.5:
        return "follows the mapping"
    if swap_averaged.high < 0.5:
        return "against the mapping"
    return "at chance"


# ------------------------------------------------------------------ biases


@dataclass
class BiasResult:
    kind: str  # "majority" | "recency"
    bias_before: float
    bias_after: float
    acc_before: float
    acc_after: float
    per_direction: dict

    @property
    def reduction_pct(self) -> float:
        return reduction_pct(self.bias_before, self.bias_after)


def reduction_pct(before: float, after: float) -> float:
    """``100 * (|before| - |after|) / |before|``: an overshoot to the opposite bias counts as bias, not as a
    reduction beyond 100%; NaN when there is no bias."""
    return 100.0 * (abs(before) - abs(after)) / abs(before) if abs(before) > 0 else float("nan")


def _reweight_hooks(heads: Sequence[Head], weights_of) -> HookFactory:
    """Multiply, in ``heads``, the attention row at q by ``weights_of(prompt, head, len(prompt)) -> [seq]``
    (over prompt positions; after a shared prefix the key columns are prompt positions, the q row is
    ``p.q - offset``)."""
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(int(l), []).append(int(h))

    def factory(batch, tokens, offset: int = 0):
        T = offset + tokens.shape[1]  # key columns: the prefix's positions, then the suffix's
        out = []
        for l, hs in by_layer.items():
            w = torch.ones(len(batch), len(hs), T)
            for b, p in enumerate(batch):
                for j, h in enumerate(hs):
                    w[b, j, : len(p)] = weights_of(p, (l, h), len(p))
            q = torch.tensor([p.q - offset for p in batch])

            hs_t = torch.tensor(hs)

            def fn(pat, hook, hs=hs_t, w=w, q=q):
                if pat.shape[-1] != T:
                    raise PrefixError(f"{hook.name}: {pat.shape[-1]} key columns, expected {T} (re-weighting needs "
                                      "a keep-everything prefix cache)")
                pat = pat.clone()
                ar = torch.arange(pat.shape[0])[:, None]
                pat[ar, hs[None], q[:, None]] = pat[ar, hs[None], q[:, None]] * w.to(pat.dtype).to(pat.device)
                return pat
            out.append((f"blocks.{l}.attn.hook_pattern", fn))
        return out

    return factory


def _bias_from(preds: dict[int, torch.Tensor]) -> float:
    """mean over directions c of P(pred = c) - 0.5 (c = the favoured label of that direction)."""
    return float(np.mean([float((p == c).float().mean()) for c, p in preds.items()]) - 0.5)


def majority_bias(model, ut: UnrelatedTask, heads: Sequence[Head], seed: int, n_test: int,
                  n_major: int = 3, n_minor: int = 1, batch_size: int = 16, progress: bool = False,
                  shared: bool = True) -> BiasResult:
    """Majority-label bias with ``n_major:n_minor`` demonstrations, before/after amplifying the minority label's
    value-output contribution (attention at q on its label positions x ``n_major / n_minor``) in ``heads``.
    Each demonstration set runs once for both (the re-weighting acts on the query's row only)."""
    draws = class_draws(ut.train, ut.task, n_major, seed)
    queries = sample_test(ut.test, n_test, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    factor = n_major / n_minor
    before, after, acc_b, acc_a = {}, {}, [], []
    for c in (0, 1):
        idx = draws[c][:n_major] + draws[1 - c][:n_minor]
        order = np.random.default_rng([seed, 2, c]).permutation(len(idx))
        demos = demos_from_indices(ut.train, [idx[j] for j in order])
        prompts, _ = build_prompts(model, ut.task, demos, queries)
        cache = _shared_cache(model, prompts, shared)
        pb = _predict(model, prompts, lids, batch_size, cache=cache, progress=progress and f"majority {c} before")

        def w_of(p, head, T, minority=1 - c):
            w = torch.ones(T)
            w[[pos for pos, k in zip(p.label_pos, p.label_class) if k == minority]] = factor
            return w
        pa = _predict(model, prompts, lids, batch_size, hooks=_reweight_hooks(heads, w_of), cache=cache,
                      progress=progress and f"majority {c} after")
        before[c], after[c] = pb.pred, pa.pred
        acc_b.append(pb.accuracy)
        acc_a.append(pa.accuracy)
    return BiasResult("majority", _bias_from(before), _bias_from(after), float(np.mean(acc_b)), float(np.mean(acc_a)),
                      {"pred_before": before, "pred_after": after})


def recency_bias(model, ut: UnrelatedTask, heads: Sequence[Head], seed: int, n_test: int, k_per_class: int = 2,
                 batch_size: int = 16, progress: bool = False, shared: bool = True) -> BiasResult:
    """Recency bias with class-blocked orders ``[a]*k + [b]*k`` and its reverse, before/after removing the
    positional part of ``heads``' attention at q (re-weight slot k by mean(m) / m_k, m = mean attention per
    slot over both orders and all queries). Each order's demonstrations run once for all three passes."""
    draws = class_draws(ut.train, ut.task, k_per_class, seed)
    queries = sample_test(ut.test, n_test, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    sets, caches = {}, {}
    for last in (0, 1):
        demos = demos_from_indices(ut.train, draws[1 - last] + draws[last])
        sets[last], _ = build_prompts(model, ut.task, demos, queries)
        caches[last] = _shared_cache(model, sets[last], shared)
    # positional profile m[head, slot]
    prof = torch.zeros(len(heads), 2 * k_per_class)
    cnt = 0
    for last in (0, 1):
        vo = value_outputs(model, sets[last], lids, heads, batch_size, shared=shared, cache=caches[last])
        prof += vo.attn.sum(0)
        cnt += vo.attn.shape[0]
    prof /= cnt
    corr = prof.mean(-1, keepdim=True) / prof.clamp(min=1e-8)  # [head, slot]
    head_row = {tuple(h): i for i, h in enumerate(heads)}

    def w_of(p, head, T):
        w = torch.ones(T)
        w[p.label_pos] = corr[head_row[head]]
        return w

    before, after, acc_b, acc_a = {}, {}, [], []
    for last in (0, 1):
        pb = _predict(model, sets[last], lids, batch_size, cache=caches[last])
        pa = _predict(model, sets[last], lids, batch_size, hooks=_reweight_hooks(heads, w_of), cache=caches[last])
        before[last], after[last] = pb.pred, pa.pred
        acc_b.append(pb.accuracy)
        acc_a.append(pa.accuracy)
    return BiasResult("recency", _bias_from(before), _bias_from(after), float(np.mean(acc_b)), float(np.mean(acc_a)),
                      {"pred_before": before, "pred_after": after, "slot_profile": prof, "slot_weights": corr})


def bias_cells(runs: dict[tuple[str, int, str], BiasResult], kind: str, stage: str) -> dict[tuple[str, int], np.ndarray]:
    """Per-input bias of :func:`bias_runs` results: for each query, the mean over the two directions of
    1[pred = that direction's favoured label], minus 0.5 (its mean over inputs is the bias size).
    ``stage``: "before" or "after" the reduction."""
    if stage not in ("before", "after"):
        raise ValueError("stage must be 'before' or 'after'")
    out = {}
    for (t, seed, k), r in runs.items():
        if k != kind:
            continue
        preds = r.per_direction[f"pred_{stage}"]
        lens = {len(p) for p in preds.values()}
        if len(lens) != 1:
            raise ValueError(f"({t}, {seed}, {kind}): the two directions scored different numbers of queries {lens}")
        out[(t, seed)] = np.mean([(np.asarray(p) == c).astype(float) for c, p in preds.items()], axis=0) - 0.5
    if not out:
        raise ValueError(f"no {kind!r} bias runs")
    return out


def bias_intervals(runs: dict[tuple[str, int, str], BiasResult], kind: str) -> dict[str, Interval | None]:
    """95% intervals of one bias: its size before and after the reduction, and the % reduction
    (:func:`reduction_pct` of the two means, paired per input; None when the bias before is too often 0 for the
    ratio to be defined)."""
    before, after = bias_cells(runs, kind, "before"), bias_cells(runs, kind, "after")
    try:
        red = bootstrap_of_means({"before": before, "after": after},
                                 lambda m: reduction_pct(m["before"], m["after"]))
    except ValueError:
        red = None
    return {"before": bootstrap_means(before), "after": bootstrap_means(after), "reduction": red}


def bias_interval_part(before: Interval, reduction: Interval | None) -> str:
    """One bias reduction from 95% intervals (criteria fixed before the run): "no measurable bias" unless the
    interval of the bias before the reduction lies above 0; then "replicates" if the reduction's interval lies
    at or above 10%, "partly" if above 0, "does not replicate" if at or below 0, else "inconclusive"."""
    if not before.low > 0 or reduction is None:
        return "no measurable bias"
    if reduction.low >= 10:
        return "replicates"
    if reduction.low > 0:
        return "partly"
    if reduction.high <= 0:
        return "does not replicate"
    return "inconclusive"


# ------------------------------------------------------------------ sizes and verdict


def heads_sizes(profile) -> dict:
    """Run sizes for notebook 07 from the shared profile (documented fractions of it).

    n_attr: prompts for head attribution (each label word is ranked on the prompts whose gold label it is,
    about half of them); n_eval: accuracy / ablation / bias queries per seed;
    n_towers: fresh-demonstration prompts for the two-towers analysis; seeds: the seeds used;
    bias_tasks: tasks for the bias experiments (AGNews prompts are ~5x longer than SST-2's, so the
    CPU profiles run the biases on SST-2 only).
    """
    if profile.name == "smoke":
        return {"n_attr": 6, "n_eval": 8, "n_towers": 8, "seeds": profile.seeds[:1], "k_per_class": 2,
                "bias_tasks": ("sst2",)}
    if profile.name == "default":
        return {"n_attr": 16, "n_eval": profile.n_test, "n_towers": 32, "seeds": profile.seeds,
                "k_per_class": 2, "bias_tasks": ("sst2",)}
    return {"n_attr": 64, "n_eval": profile.n_test, "n_towers": 200, "seeds": profile.seeds, "k_per_class": 2,
            "bias_tasks": ("sst2", "agnews")}


# criteria fixed before the runs (see notebook 07)
def ablation_interval_part(drop, excess, big: float = 0.20) -> str:
    """The ablation claim from 95% intervals (criteria fixed before the run).

    ``drop``: plain minus in-context-heads-ablated accuracy; ``excess``: random-heads-ablated minus
    in-context-heads-ablated accuracy (the paper's contrast), both paired per input
    (:class:`helpers.study.stats.Interval`). "replicates": the excess lies above zero and the drop at or above
    ``big``; "partly": the excess lies above zero; "does not replicate": it lies below zero;
    "inconclusive": it contains zero.
    """
    if excess.low > 0:
        return "replicates" if drop.low >= big else "partly"
    if excess.high < 0:
        return "does not replicate"
    return "inconclusive"


def heads_verdict(acc_before: float, acc_ablated: float, acc_random: float, carrying: float, corr_attn: float,
            corr_vo: float, majority_red: float, majority_bias: float, recency_red: float, recency_bias: float,
            ablation: str | None = None, value_output: str | None = None, **graded: str) -> tuple[str, dict]:
    """Per-claim and overall verdicts.

    - ablation: replicates if the in-context heads drop accuracy by >= 0.20 and by >= 2x the random heads'
      drop; partly if by >= 0.05 and more than the random heads; else does not replicate.
    - value-output: replicates if label-carrying rate >= 0.75; partly if >= 0.60.
    - two towers: replicates if corr(attention diff, logit minus) >= 0.5 and exceeds |corr(VO diff, logit
      minus)| by >= 0.2; partly if it exceeds it at all.
    - each bias reduction: "no measurable bias" if the bias is < 0.05; replicates if the reduction is >= 10%;
      partly if > 0; else does not replicate.
    Overall: "replicates" if every measurable claim replicates, "does not replicate" if none does even
    partly, else "partly". ``ablation``: the ablation part already graded from intervals
    (:func:`ablation_interval_part`), and ``value_output`` (:func:`value_output_interval_part`), used instead of
    the point rules; ``**graded``: any other part graded from intervals (``two_towers``, ``majority``,
    ``recency``, or an extra part such as ``ablation_all``), used as given. Overall "inconclusive" when no
    part replicates even partly and some part is inconclusive.
    """
    def grade(ok, part):
        return "replicates" if ok else ("partly" if part else "does not replicate")

    d_heads, d_rand = acc_before - acc_ablated, acc_before - acc_random
    parts = {
        "ablation": grade(d_heads >= 0.20 and d_heads >= 2 * max(d_rand, 0), d_heads >= 0.05 and d_heads > d_rand),
        "value_output": grade(carrying >= 0.75, carrying >= 0.60),
        "two_towers": grade(corr_attn >= 0.5 and corr_attn - abs(corr_vo) >= 0.2, corr_attn > abs(corr_vo)),
    }
    if ablation is not None:
        parts["ablation"] = ablation
    if value_output is not None:
        parts["value_output"] = value_output
    for name, red, b in (("majority", majority_red, majority_bias), ("recency", recency_red, recency_bias)):
        parts[name] = "no measurable bias" if not abs(b) >= 0.05 else grade(red >= 10, red > 0)
    parts.update(graded)
    graded = [v for v in parts.values() if v != "no measurable bias"]
    if graded and all(v == "replicates" for v in graded):
        overall = "replicates"
    elif any(v in ("replicates", "partly") for v in graded):
        overall = "partly"
    elif "inconclusive" in graded:
        overall = "inconclusive"
    else:
        overall = "does not replicate"
    return overall, parts


# ------------------------------------------------------------------ cached runs (notebook 07)
#
# Each ``*_runs`` function runs one step of notebook 07 for every task (and seed) and caches each result on disk
# with helpers.core.store.cached. The cache kinds and parameter dicts are part of the results' identity: changing
# them orphans every stored result. ``uts`` maps a task name (the cache key's "task", e.g. "sst2") to its
# :class:`UnrelatedTask`; ``sizes`` is :func:`heads_sizes`'s dict; ``heads`` maps a task name to its in-context
# heads; ``model_name`` is the name recorded in the cache key (default: the name :func:`helpers.core.models.load_model`
# records, ``model.cfg.icl_model_name``; notebook 07 passes ``current_model_name()``).


def _run_name(model, model_name: str | None) -> str:
    return model_name if model_name is not None else getattr(model.cfg, "icl_model_name", model.cfg.model_name)


def attribution_seed(sizes: dict) -> int:
    """Seed of the head-attribution prompts: the first seed + 1000 (never the evaluation prompts)."""
    return sizes["seeds"][0] + 1000


def towers_seed(sizes: dict) -> int:
    """Seed of the two-towers prompts: the first seed + 2000."""
    return sizes["seeds"][0] + 2000


def eval_set(model, ut: UnrelatedTask, seed: int, sizes: dict) -> PromptSet:
    """The evaluation prompts of ``seed``: ``sizes["n_eval"]`` queries, ``sizes["k_per_class"]`` demos per class."""
    return make_set(model, ut, seed, sizes["n_eval"], sizes["k_per_class"])


def _eval_runs(kind: str, model, uts: dict[str, UnrelatedTask], sizes: dict, seeds: Sequence[int] | None,
               model_name: str | None, run: Callable, heads: dict[str, Sequence[Head]] | None = None,
               extra: Callable[[UnrelatedTask], dict] | None = None) -> dict[tuple[str, int], Any]:
    """``run(prompt_set, heads)`` on each (task, seed)'s :func:`eval_set`, cached under ``kind``.

    Cache parameters: model, task, seed, k, n (``sizes["n_eval"]``), the heads if given, and ``extra(ut)``.
    """
    name, K, seeds = _run_name(model, model_name), sizes["k_per_class"], sizes["seeds"] if seeds is None else seeds
    out = {}
    for t, ut in uts.items():
        hs = None if heads is None else heads[t]
        params = {"model": name, "task": t, "k": K, "n": sizes["n_eval"], **(extra(ut) if extra else {})}
        if hs is not None:
            params["heads"] = hs
        for seed in seeds:
            def compute(ut=ut, seed=seed, hs=hs):
                return run(eval_set(model, ut, seed, sizes), hs, seed)
            out[(t, seed)] = cached(kind, {**params, "seed": seed}, compute, model=model)
    return out


def accuracy_runs(model, uts: dict[str, UnrelatedTask], sizes: dict, seeds: Sequence[int] | None = None,
                  batch_size: int = 16, model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """ICL accuracy on the evaluation prompts, per (task, seed) (cache kind ``"heads_acc"``).

    Returns ``{(task, seed): {"acc", "foo_share" (share predicted as label 0), "n" (prompts scored), "pred"
    and "correct" (per input)}}``. The label words are read from the tasks (key ``"words"``), so foo/bar, the
    swapped mapping, " A"/" B" and the real words are separate runs.
    """
    def run(ps, _heads, _seed):
        pr = _predict(model, ps.prompts, ps.label_ids, batch_size, cache=_shared_cache(model, ps.prompts))
        return {"acc": pr.accuracy, "foo_share": float((pr.pred == 0).float().mean()), "n": len(ps.prompts),
                "pred": pr.pred.tolist(), "correct": (pr.pred == pr.gold).int().tolist()}

    return _eval_runs("heads_acc", model, uts, sizes, seeds, model_name, run,
                      extra=lambda ut: {"words": list(ut.task.label_words)})


def attribution_runs(model, uts: dict[str, UnrelatedTask], sizes: dict, batch_size: int = 16,
                     model_name: str | None = None, progress: bool | str = False) -> dict[str, HeadScores]:
    """:func:`head_attribution` (zero ablation) per task on ``sizes["n_attr"]`` prompts of
    :func:`attribution_seed` (cache kind ``"heads_attr"``). Returns ``{task: HeadScores}``."""
    name, K, seed = _run_name(model, model_name), sizes["k_per_class"], attribution_seed(sizes)
    out = {}
    for t, ut in uts.items():
        def compute(ut=ut):
            ps = make_set(model, ut, seed, sizes["n_attr"], K)
            return head_attribution(model, ps.prompts, ps.label_ids, batch_size=batch_size, progress=progress)
        out[t] = cached("heads_attr", {"model": name, "task": t, "seed": seed, "k": K, "n": sizes["n_attr"],
                                           "def": "final-resid-v2-per-label"}, compute, model=model)
    return out


ALL_POSITIONS = " (all positions)"  # suffix of the ablation conditions that ablate every position


def ablation_runs(model, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: dict,
                  seeds: Sequence[int] | None = None, batch_size: int = 16,
                  model_name: str | None = None) -> dict[tuple[str, int], dict]:
    """Accuracy on the evaluation prompts plain, with ``heads[task]`` zero-ablated, and with as many random
    heads (drawn with the seed, disjoint from ``heads[task]``) zero-ablated, each at q only and at every position
    (cache kind ``"heads_ablation"``).

    Returns ``{(task, seed): {"plain", "in-context heads ablated", "random heads ablated", "in-context heads
    ablated (all positions)", "random heads ablated (all positions)", "random_heads", "correct"}}``;
    ``correct`` maps each condition to its per-input 0/1 (same inputs in every condition).
    """
    def run(ps, hs, seed):
        rnd = random_heads(model, len(hs), seed=seed, exclude=hs)
        preds = {"plain": ablation_predictions(model, ps.prompts, ps.label_ids, [], batch_size)}
        for name, at in (("", "q"), (ALL_POSITIONS, "all")):
            preds["in-context heads ablated" + name] = ablation_predictions(model, ps.prompts, ps.label_ids, hs,
                                                                            batch_size, at=at)
            preds["random heads ablated" + name] = ablation_predictions(model, ps.prompts, ps.label_ids, rnd,
                                                                        batch_size, at=at)
        return {**{c: p.accuracy for c, p in preds.items()}, "random_heads": rnd,
                "correct": {c: (p.pred == p.gold).int().tolist() for c, p in preds.items()}}

    return _eval_runs("heads_ablation", model, uts, sizes, seeds, model_name, run, heads=heads)


def value_output_runs(model, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: dict,
                      seeds: Sequence[int] | None = None, batch_size: int = 16,
                      model_name: str | None = None) -> dict[tuple[str, int], ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on the evaluation prompts, per (task, seed) (cache kind
    ``"heads_vo"``). Returns ``{(task, seed): ValueOutputs}``."""
    def run(ps, hs, _seed):
        return value_outputs(model, ps.prompts, ps.label_ids, hs, batch_size)

    return _eval_runs("heads_vo", model, uts, sizes, seeds, model_name, run, heads=heads)


def towers_runs(model, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: dict,
                batch_size: int = 16, model_name: str | None = None) -> dict[str, ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on ``sizes["n_towers"]`` prompts that each have their own
    demonstrations (:func:`fresh_demo_prompts`, seed :func:`towers_seed`), per task (cache kind
    ``"heads_towers"``); :func:`two_towers` reads them. Returns ``{task: ValueOutputs}``."""
    name, K, seed = _run_name(model, model_name), sizes["k_per_class"], towers_seed(sizes)
    out = {}
    for t, ut in uts.items():
        hs = heads[t]

        def compute(ut=ut, hs=hs):
            prompts = fresh_demo_prompts(model, ut, seed, sizes["n_towers"], K)
            return value_outputs(model, prompts, label_token_ids(model.tokenizer, ut.task), hs, batch_size)
        out[t] = cached("heads_towers", {"model": name, "task": t, "seed": seed, "k": K, "n": sizes["n_towers"],
                                             "heads": hs}, compute, model=model)
    return out


def bias_runs(model, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]], sizes: dict,
              seeds: Sequence[int] | None = None, kinds: Sequence[str] = ("majority", "recency"),
              batch_size: int = 16, model_name: str | None = None) -> dict[tuple[str, int, str], BiasResult]:
    """:func:`majority_bias` / :func:`recency_bias` (default demonstration counts) with ``sizes["n_eval"]``
    queries, before/after the reduction in ``heads[task]``, per (task, seed, kind) (cache kind
    ``"heads_bias"``). Runs every task of ``uts``: notebook 07 passes only those in ``sizes["bias_tasks"]``.
    Returns ``{(task, seed, kind): BiasResult}``."""
    fns = {"majority": majority_bias, "recency": recency_bias}
    if not set(kinds) <= set(fns):
        raise ValueError(f"kinds must be among {sorted(fns)}")
    name, seeds = _run_name(model, model_name), sizes["seeds"] if seeds is None else seeds
    out = {}
    for t, ut in uts.items():
        hs = heads[t]
        for seed in seeds:
            for kind in kinds:
                def compute(fn=fns[kind], ut=ut, seed=seed, hs=hs):
                    return fn(model, ut, hs, seed=seed, n_test=sizes["n_eval"], batch_size=batch_size)
                out[(t, seed, kind)] = cached("heads_bias", {"model": name, "task": t, "seed": seed, "kind": kind,
                                                                 "n": sizes["n_eval"], "heads": hs}, compute,
                                              model=model)
    return out
