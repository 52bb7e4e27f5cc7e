"""Prompt sets run through the shared-prefix engine (:mod:`helpers.core.prefix`), and the stored vanilla run.

- :func:`predict_shared` is :func:`helpers.core.predict.predict` on the shared-prefix path: the demonstrations
  run once, every input as a suffix against them (:func:`helpers.core.prefix.predict_shared_split` serves
  several hook conditions that share the prefix's first layers).
- :func:`shared_cache`, :func:`prompt_batches` and :func:`predict_with_cache` take the suffix path when the
  prompts share their demonstrations and the full prompts otherwise, with the same numbers.
- :func:`vanilla_run` (and :func:`vanilla_predictions`): the unhooked run of a prompt set, predictions and the
  attention from q to each class's label words (:func:`label_attention_reader`), stored by content.
- :func:`token_bound`: the tokens a run processes, with and without the shared prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Int
from tqdm.auto import tqdm

from helpers.core.backend import is_bridge
from helpers.core.checks import positive_int
from helpers.core.predict import HookFactory, Predictions, length_batches, predict, predictions_from_resid
from helpers.core.prefix import (
    PrefixCache,
    PrefixError,
    run_prefix,
    shared_prefix_len,
    shared_prefix_or_none,
    suffix_batches,
    suffix_forward,
)
from helpers.core.prefix_ragged import query_caches, ragged_fits, ragged_token_forwards
from helpers.core.prompts import Prompt, check_prompts, label_class_onehot, label_span_arg, pad_batch
from helpers.core.sizing import FORWARD_BATCH, cache_rows, sizing
from helpers.core.store import cached, model_fingerprint, prompts_digest, stored

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "predict_shared",
    "shared_cache",
    "predict_with_cache",
    "prompt_batches",
    "q_row_fits",
    "predict_q_row",
    "label_attention_reader",
    "vanilla_run",
    "vanilla_predictions",
    "token_bound",
    "STORED_TOP_K",
]


def predict_shared(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH,
                   top_k: int = 5, hooks=None, prefix_hooks: Sequence = (), cache: PrefixCache | None = None,
                   progress: bool | str = False):
    """:func:`helpers.core.predict.predict` with the shared demonstrations run once.

    ``prefix_hooks``: TL hooks for the prefix pass (positions are prompt
    positions). ``hooks``: a hook factory, called per batch as
    ``hooks(batch_prompts, suffix_tokens, offset=P0)``: query positions in
    the hooked tensors are ``position - offset``, key positions are prompt
    positions. ``cache``: a prefix already built (e.g. pruned); by default the
    prompts' shared demonstrations are run here. Same predictions as the full
    prompts (tests).
    """
    check_prompts(model, prompts, "predict", label_ids)
    if len(set(label_ids)) != len(label_ids):
        raise ValueError("label_ids must be distinct (see tasks.label_token_ids)")
    if cache is None and not prefix_hooks and is_bridge(model):  # no shared-prefix cache on TL 4: full prompts
        return predict(model, prompts, label_ids, batch_size, top_k=top_k, hooks=hooks, progress=progress)
    if cache is None:
        p0 = shared_prefix_len(prompts)
        cache = run_prefix(model, prompts[0].tokens[:p0], hooks=prefix_hooks)
    elif prefix_hooks:
        raise ValueError("pass prefix_hooks or a ready cache, not both")
    resid = torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
    batches = list(suffix_batches(cache, prompts, batch_size))
    with torch.inference_mode():
        for idx, toks, q in tqdm(batches, desc=progress if isinstance(progress, str) else "predict", leave=False,
                                 disable=not progress):
            fwd = hooks([prompts[i] for i in idx], toks, offset=cache.length) if hooks else []
            r = suffix_forward(model, cache, toks, fwd)
            resid[idx] = r[torch.arange(len(idx)), q.to(r.device)]
        return predictions_from_resid(model, resid, prompts, label_ids, top_k)


def shared_cache(model: HookedTransformer, prompts: Sequence[Prompt], shared: bool = True,
                 prefix_hooks: Sequence = ()) -> PrefixCache | None:
    """The prompts' shared demonstrations run once (under ``prefix_hooks``) into a keep-everything cache, or
    None when ``shared`` is False or the prompts do not share their demonstrations token for token (or the
    model's positions are not supported): then the caller runs full prompts."""
    p0 = shared_prefix_or_none(model, prompts, shared)
    return None if p0 is None else run_prefix(model, prompts[0].tokens[:p0], hooks=prefix_hooks)


def predict_with_cache(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int,
                       hooks: HookFactory | None = None, cache: PrefixCache | None = None, top_k: int = 0,
                       progress: bool | str = False) -> Predictions:
    """:func:`predict_shared` against ``cache`` if given, else :func:`helpers.core.predict.predict` on the full
    prompts: with :func:`shared_cache`, the one place that picks the shared-prefix or the full-prompt path for
    prompts that may or may not share their demonstrations (notebook 07's heads code, compression's
    Text_anchor)."""
    if cache is not None:
        return predict_shared(model, prompts, label_ids, batch_size, top_k=top_k, hooks=hooks, cache=cache,
                              progress=progress)
    return predict(model, prompts, label_ids, batch_size, top_k=top_k, hooks=hooks, progress=progress)


def q_row_fits(model: HookedTransformer, prompts: Sequence[Prompt]) -> bool:
    """Whether :func:`predict_q_row` can run ``prompts`` on ``model``: rotary or learned positions, and every
    prompt's tokens before q within a sliding-window layer's window (:func:`helpers.core.prefix_ragged.ragged_fits`)."""
    return (bool(prompts) and model.cfg.positional_embedding_type in ("rotary", "standard")
            and ragged_fits(model, [p.q for p in prompts]))


def predict_q_row(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int],
                  conditions: dict, batch_size: int = FORWARD_BATCH, cache: PrefixCache | None = None,
                  top_k: int = 0) -> dict:
    """``{name: Predictions}`` under several conditions that change only q's own row: ``conditions`` maps a name
    to plain TL hooks, which here see one row per prompt, its q (e.g. heads' ``hook_z`` zeroed there).

    Every prompt's tokens before q run once for all conditions (:func:`helpers.core.prefix_ragged.query_caches`, after
    ``cache``, the prompts' shared demonstrations, when given) and q alone once per condition
    (:func:`helpers.core.prefix_ragged.ragged_token_forwards`): under causal attention nothing before q sees q, so this
    equals the full prompts run with the same change at q (tests), at the cost of one token per condition instead
    of the whole query. Raises :class:`helpers.core.prefix.PrefixError` where :func:`q_row_fits` is False."""
    check_prompts(model, prompts, "predict", label_ids)
    if not q_row_fits(model, prompts):
        raise PrefixError("these prompts reach a sliding-window layer's window before q (or the model's positions "
                          "are not supported): run each condition with predict_with_cache instead")
    resid = {name: torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
             for name in conditions}
    rows = cache_rows(model, max(p.q for p in prompts), batch_size)  # the caches' memory, not only the batch's
    with torch.inference_mode():
        for start in range(0, len(prompts), rows):
            chunk = prompts[start:start + rows]
            caches = query_caches(model, cache, chunk, batch_size)
            tokens = torch.stack([p.tokens[p.q] for p in chunk]).to(model.cfg.device)
            for name, r in ragged_token_forwards(model, caches, tokens, conditions).items():
                resid[name][start:start + len(chunk)] = r
    return {name: predictions_from_resid(model, r, prompts, label_ids, top_k) for name, r in resid.items()}


def prompt_batches(model: HookedTransformer, prompts: Sequence[Prompt], batch_size: int,
                   cache: PrefixCache | None) -> list[tuple[list[int], Int[torch.Tensor, "batch seq"], Int[torch.Tensor, "batch"]]]:
    """``(indices, tokens, q)`` batches: suffixes after ``cache`` (q in the suffix) or padded full prompts."""
    if cache is not None:
        return list(suffix_batches(cache, prompts, batch_size))
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    sized = sizing(model, max((len(p) for p in prompts), default=1), batch_size)
    return [(idx, *pad_batch([prompts[i] for i in idx], pad))
            for idx in length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens)]



STORED_TOP_K = 5


def _has_hooks(model) -> bool:
    return any(hp.fwd_hooks or hp.bwd_hooks for hp in model.hook_dict.values())


def label_attention_reader(prompts: Sequence[Prompt], n_classes: int, n_layers: int, out: torch.Tensor,
                           span: str = "first"):
    """A hook factory for :func:`predict_shared` or :func:`helpers.core.predict.predict` (each batch seen once)
    that writes, for each prompt, the attention from q to each class's label positions per layer (summed over
    heads and over that class's positions: each label word's first token, or with ``span="all"`` every token of
    it, :func:`helpers.core.prompts.label_class_onehot`) into ``out[i, layer, class]``."""
    label_span_arg(span)
    index: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):  # a prompt object listed twice fills both rows, in the order batches come
        index.setdefault(id(p), []).append(i)

    def factory(batch, tokens, offset: int = 0):
        idx = torch.tensor([index[id(p)].pop(0) for p in batch])
        q = torch.tensor([p.q - offset for p in batch])

        def read(pattern, hook):  # [batch, head, suffix rows, key columns = prompt positions]
            ar = torch.arange(len(batch), device=pattern.device)
            at_q = pattern[ar, :, q.to(pattern.device)].sum(1).float().cpu()  # [batch, key]
            onehot = label_class_onehot(batch, at_q.shape[-1], n_classes, span)
            out[idx, hook.layer()] = torch.einsum("bk,bkc->bc", at_q, onehot)
            return pattern

        return [(f"blocks.{l}.attn.hook_pattern", read) for l in range(n_layers)]

    return factory


def vanilla_run(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH,
                progress: bool | str = False, full: bool = True) -> dict:
    """The unmodified run of prompts that share their demonstrations, stored on disk by content.

    ``full`` (the run the 1-shot experiments share): ``{"pred": Predictions with the top-5 tokens,
    "label_attention": [n, layer, class]}``, the attention from q to each class's label positions summed over
    heads (what notebook 03's AUCROC reads), both from one pass. ``full=False``: ``{"pred": Predictions with
    label logits only}``, no full-vocabulary unembedding and no attention read (the 5-shot baselines, which
    nothing else reads); a stored full run serves it too.

    Several experiments start from it (vanilla accuracy, the isolation and compression references, Table 1's
    baselines, AUCROC), so it runs once for all of them. The store key is the model's weights
    (:func:`helpers.core.store.model_fingerprint`), every prompt's tokens, query position and gold label, and
    ``label_ids`` (:func:`helpers.core.store.prompts_digest`), so a stored result is only ever returned for the
    same inputs to the same weights. Batch size is not part of the key: batched and one-by-one runs agree
    (tests). A model with hooks attached is run afresh and not stored.
    """
    check_prompts(model, prompts, "run", label_ids)  # before the store is consulted, never only on a miss
    batch_size = positive_int("batch_size", batch_size)

    def run(full=full):
        if not full:
            return {"pred": predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=0, progress=progress)}
        att = torch.zeros(len(prompts), model.cfg.n_layers, len(label_ids))
        pred = predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=STORED_TOP_K,
                              hooks=label_attention_reader(prompts, len(label_ids), model.cfg.n_layers, att),
                              progress=progress)
        return {"pred": pred, "label_attention": att}

    if _has_hooks(model):
        return run()
    key = {"model": model_fingerprint(model), "prompts": prompts_digest(prompts, label_ids), "n": len(prompts)}
    if not full and stored("vanilla_run", key):  # the full run of the same prompts holds the label logits too
        full = True
    return cached("vanilla_run" if full else "vanilla_run_labels", key, run)


def vanilla_predictions(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH,
                        top_k: int = 5, progress: bool | str = False):
    """The predictions of :func:`vanilla_run`: its top-5 tokens cut to ``top_k``; ``top_k=0`` reads the
    label-only run unless the full one is stored; ``top_k > 5`` runs afresh and is not stored."""
    if top_k > STORED_TOP_K:
        return predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, progress=progress)
    full = vanilla_run(model, prompts, label_ids, batch_size, progress, full=top_k > 0)["pred"]
    return Predictions(full.label_logits.clone(), full.topk[:, :top_k].clone(), full.gold.clone())


def token_bound(prompts: Sequence[Prompt], conditions: int = 1, prefix_len: int | None = None) -> dict:
    """Tokens a full-prompt run processes against the unique-token bound of a shared-prefix run.

    ``full`` = the prompts' tokens, per condition; ``unique`` = the shared prefix
    once per condition plus each input's own tokens per condition; ``bound`` =
    full / unique, the speed-up a cost linear in tokens allows.
    """
    p0 = shared_prefix_len(prompts) if prefix_len is None else prefix_len
    lens = np.array([len(p) for p in prompts])
    full = int(lens.sum()) * conditions
    unique = (p0 + int((lens - p0).sum())) * conditions
    return {"n": len(prompts), "prefix": p0, "mean_suffix": float((lens - p0).mean()), "full_tokens": full,
            "unique_tokens": unique, "bound": full / unique}
