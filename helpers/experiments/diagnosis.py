"""Anchor distances for error diagnosis (paper A, §3.3).

At one deep layer, the key vectors at the label positions (one per class) and
the query vectors at the target position q of many test inputs are taken with
all heads concatenated. A PCA fitted on the queries gives the directions the
queries actually vary along; keys are projected on them and scaled by the
singular values, and the pairwise distances between the class keys,
normalised by their maximum, form the *predicted* confusion (small distance =
confusable). The *actual* confusion of classes a and b is the ROC AUC of
prob(a)/prob(b) on the test inputs whose gold label is a or b (0.5 =
indistinguishable). Both matrices read "low = confused"; their agreement is
the Spearman rank correlation over the off-diagonal pairs.

Vectors are the ones the attention uses, before the rotary embedding, so
keys at different positions are comparable: ``hook_q``/``hook_k``, followed
by the per-head q/k normalisation for models that have one (Gemma 3's
``q_norm``/``k_norm``; TransformerLens hooks q and k before it). Grouped-query attention (Gemma 3:
1 key/value head for 4 query heads; SmolLM2: 3 for 9): each key/value head is
shared by a group of query heads, so the key of query head h is the key of its
group's KV head; we repeat each KV head for the query heads that read it
(TransformerLens's ``repeat_interleave`` order) and concatenate, so keys and
queries both have width n_heads * d_head and column blocks correspond head by
head.

With one demonstration set for all inputs (the paper's setting) the
demonstrations run once (:mod:`helpers.core.prefix`): the class keys come from that
one pass, the queries and label probabilities from each input run as a suffix
against it; ``collect_qk(..., shared=False)`` runs full prompts (same outputs,
tests).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from einops import einsum, rearrange
from jaxtyping import Float
from scipy.stats import spearmanr
from sklearn.decomposition import PCA
from tqdm.auto import tqdm

from helpers.core.predict import length_batches, logits_at, predictions_from_resid
from helpers.core.prefix import run_prefix, shared_prefix_or_none, suffix_batches, suffix_forward
from helpers.core.prompts import Prompt, check_prompts, pad_batch
from helpers.core.ranks import rank_auc
from helpers.core.sizing import FORWARD_BATCH, sizing
from helpers.core.store import result_types

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["QKVectors", "collect_qk", "predicted_confusion", "actual_confusion", "rank_correlation", "seed_averaged_spearman", "diagnose", "layer_sweep", "default_layer", "diagnosis_set", "seed_mean", "key_projections", "key_distances", "most_confused"]


@result_types
@dataclass
class QKVectors:
    queries: Float[torch.Tensor, "n layer width"]  # query at q, heads concatenated
    keys: Float[torch.Tensor, "layer classes width"]  # mean key at each class's label positions
    label_probs: Float[torch.Tensor, "n classes"]
    gold: torch.Tensor
    layers: list[int]


def as_attention_uses(model, layer: int, x: torch.Tensor, kind: str) -> torch.Tensor:
    """``hook_q``/``hook_k`` output ``x`` as layer ``layer``'s attention uses it before rotary (q/k norm applied)."""
    if not getattr(model.cfg, "use_qk_norm", False):
        return x
    attn = model.blocks[layer].attn
    return attn._apply_qk_norm(x, attn.q_norm if kind == "q" else attn.k_norm)


def collect_qk(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int] | None = None,
               batch_size: int = FORWARD_BATCH, progress: bool | str = False, shared: bool = True) -> QKVectors:
    """Queries at q, class keys at the label positions (GQA keys repeated per query head) and label probs.

    One forward pass per batch collects every requested layer. The key of a
    class is the mean over its demonstrations and over the prompts (with one
    fixed demonstration set the prefix keys are the same in every prompt).

    ``shared`` (default): when the prompts share their demonstrations token for
    token, the demonstrations run once (:func:`helpers.core.prefix.run_prefix`; the
    class keys are read in that pass) and every input as a suffix against them
    (queries at q and label probabilities). Otherwise (``shared=False``, or no
    common demonstration set) full prompts are run. Same outputs (tests).
    """
    check_prompts(model, prompts, "collect q/k vectors for", label_ids)
    layers = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None:
        return _collect_qk_shared(model, prompts, label_ids, layers, p0, batch_size, progress)
    n_classes = len(label_ids)
    H = model.cfg.n_heads
    rep = H // (model.cfg.n_key_value_heads or H)
    ids = torch.tensor(list(label_ids), device=model.cfg.device)
    n = len(prompts)
    width = H * model.cfg.d_head
    Q = torch.zeros(n, len(layers), width)
    Ksum = torch.zeros(len(layers), n_classes, width)
    Kcnt = torch.zeros(n_classes)
    probs = torch.zeros(n, n_classes)
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    sized = sizing(model, max((len(p) for p in prompts), default=1), batch_size)
    with torch.inference_mode():
        for idx in tqdm(length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens), desc=progress if isinstance(progress, str) else "q/k",
                        disable=not progress, leave=False):
            batch = [prompts[i] for i in idx]
            tokens, q = pad_batch(batch, pad)
            B = len(batch)
            rows = torch.arange(B)
            store: dict = {}

            def grab(x, hook, kind):
                store[(kind, hook.layer())] = as_attention_uses(model, hook.layer(), x, kind)
                return x

            hooks = []
            for l in layers:
                hooks += [(f"blocks.{l}.attn.hook_q", lambda x, hook: grab(x, hook, "q")),
                          (f"blocks.{l}.attn.hook_k", lambda x, hook: grab(x, hook, "k"))]
            logits = logits_at(model, tokens.to(model.cfg.device), q, hooks)[:, ids].float().cpu()
            probs[idx] = logits.softmax(-1)
            for j, l in enumerate(layers):
                qv = store[("q", l)].float().cpu()[rows, q]  # [B, H, d]
                Q[idx, j] = qv.reshape(B, width)
                k = store[("k", l)].float().cpu()  # [B, T, kvH, d]
                k = torch.repeat_interleave(k, rep, dim=2).reshape(B, k.shape[1], width)
                for b, p in enumerate(batch):
                    for pos, c in zip(p.label_pos, p.label_class):
                        Ksum[j, c] += k[b, pos]
                        if j == 0:
                            Kcnt[c] += 1
    if (Kcnt == 0).any():
        raise ValueError(f"classes {torch.nonzero(Kcnt == 0).flatten().tolist()} have no demonstration")
    gold = torch.tensor([p.gold if p.gold is not None else -1 for p in prompts])
    return QKVectors(Q, Ksum / Kcnt[None, :, None], probs, gold, layers)


def _collect_qk_shared(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: list[int], p0: int,
                       batch_size: int, progress: bool | str) -> QKVectors:
    """:func:`collect_qk` with the shared demonstrations (``p0`` tokens) run once.

    Keys: ``hook_k`` of the one prefix pass (every label position lies in the
    prefix, and the prefix keys are the same in every prompt, so the mean over
    prompts is the mean of the prefix's keys with the same weights). Queries:
    ``hook_q`` rows at q of the suffix runs (query rows are suffix rows).
    """
    n_classes = len(label_ids)
    H = model.cfg.n_heads
    rep = H // (model.cfg.n_key_value_heads or H)
    n = len(prompts)
    width = H * model.cfg.d_head
    # weight of each prefix position in each class's mean key, counted over demonstrations and prompts
    W = torch.zeros(n_classes, p0)
    for p in prompts:
        for pos, c in zip(p.label_pos, p.label_class):
            if pos >= p0:
                raise ValueError(f"label position {pos} lies after the shared prefix ({p0} tokens)")
            W[c, pos] += 1
    cnt = W.sum(1)
    if (cnt == 0).any():
        raise ValueError(f"classes {torch.nonzero(cnt == 0).flatten().tolist()} have no demonstration")
    W = W / cnt[:, None]

    pkeys: dict = {}

    def grab_k(x, hook):  # [1, p0, kvH, d], before the rotary embedding
        pkeys[hook.layer()] = as_attention_uses(model, hook.layer(), x, "k")[0].float().cpu()
        return x

    cache = run_prefix(model, prompts[0].tokens[:p0], hooks=[(f"blocks.{l}.attn.hook_k", grab_k) for l in layers])
    keys = torch.stack([W @ torch.repeat_interleave(pkeys[l], rep, dim=1).reshape(p0, width) for l in layers])

    Q = torch.zeros(n, len(layers), width)
    resid = torch.empty(n, model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
    batches = list(suffix_batches(cache, prompts, batch_size))
    with torch.inference_mode():
        for idx, toks, q in tqdm(batches, desc=progress if isinstance(progress, str) else "q/k",
                                 disable=not progress, leave=False):
            B = len(idx)
            store: dict = {}

            def grab_q(x, hook):  # [B, m, H, d]: suffix rows
                x_used = as_attention_uses(model, hook.layer(), x, "q")
                store[hook.layer()] = x_used[torch.arange(B, device=x.device), q.to(x.device)].float().cpu()
                return x

            r = suffix_forward(model, cache, toks, [(f"blocks.{l}.attn.hook_q", grab_q) for l in layers])
            resid[idx] = r[torch.arange(B, device=r.device), q.to(r.device)]
            for j, l in enumerate(layers):
                Q[idx, j] = store[l].reshape(B, width)
        probs = predictions_from_resid(model, resid, prompts, label_ids, top_k=0).label_probs
    gold = torch.tensor([p.gold if p.gold is not None else -1 for p in prompts])
    return QKVectors(Q, keys, probs, gold, layers)


def predicted_confusion(queries: Float[torch.Tensor, "n width"], keys: Float[torch.Tensor, "classes width"],
                        n_components: int = 10) -> np.ndarray:
    """Normalised distances between class keys in the queries' PCA space (scaled by singular values).

    Diagonal set to 1 (a class is not confused with itself), like the paper's figure.
    """
    X = np.asarray(queries, dtype=np.float64)
    nc = int(min(n_components, X.shape[0], X.shape[1]))
    if nc < 1:
        raise ValueError("need at least one query vector")
    # the exact LAPACK solver: deterministic, and on these shapes (a hundred queries of ~1000 dimensions, refitted
    # per bootstrap resample) far faster than the randomized solver sklearn's "auto" picks for them
    with warnings.catch_warnings():  # constant queries (e.g. layer 0): explained-variance ratio 0/0, unused here
        warnings.simplefilter("ignore", RuntimeWarning)
        pca = PCA(n_components=nc, svd_solver="full").fit(X)
    Z = (np.asarray(keys, dtype=np.float64) - pca.mean_) @ pca.components_.T * pca.singular_values_
    D = np.linalg.norm(Z[:, None, :] - Z[None, :, :], axis=-1)
    off = ~np.eye(len(D), dtype=bool)
    mx = D[off].max() if off.any() else 0.0
    D = D / mx if mx > 0 else D
    np.fill_diagonal(D, 1.0)
    return D


def actual_confusion(label_probs, gold) -> np.ndarray:
    """AUC-ROC of prob(a)/prob(b) on inputs with gold a or b (positive class a). NaN where undefined; diagonal 1."""
    P = np.asarray(label_probs, dtype=np.float64)
    g = np.asarray(gold)
    C = P.shape[1]
    out = np.ones((C, C))
    for a in range(C):
        for b in range(C):
            if a == b:
                continue
            m = (g == a) | (g == b)
            y = (g[m] == a).astype(int)
            if len(np.unique(y)) < 2:
                out[a, b] = np.nan
                continue
            out[a, b] = float(rank_auc(y.astype(bool), P[m, a] / np.maximum(P[m, b], 1e-30)))
    return out


def rank_correlation(pred: np.ndarray, actual: np.ndarray) -> float:
    """Spearman correlation over the upper triangle (pairs a<b), ignoring NaN pairs."""
    iu = np.triu_indices(len(pred), k=1)
    x, y = np.asarray(pred)[iu], np.asarray(actual)[iu]
    ok = ~(np.isnan(x) | np.isnan(y))
    if ok.sum() < 3:
        return float("nan")
    with warnings.catch_warnings():  # a constant matrix (tiny samples): NaN, said by the NaN itself
        warnings.simplefilter("ignore")
        return float(spearmanr(x[ok], y[ok]).statistic)


def diagnose(vecs: QKVectors, layer: int, n_components: int = 10) -> dict:
    """Predicted and actual confusion matrices and their rank correlation at ``layer``."""
    if layer not in vecs.layers:
        raise ValueError(f"layer {layer} not collected; collected: {vecs.layers}")
    j = vecs.layers.index(layer)
    pred = predicted_confusion(vecs.queries[:, j], vecs.keys[j], n_components)
    act = actual_confusion(vecs.label_probs, vecs.gold)
    return dict(layer=layer, predicted=pred, actual=act, spearman=rank_correlation(pred, act))


def seed_mean(values, nan: bool = False):
    """Mean over seeds (``nan``: ignoring NaN, with no warning where every seed is NaN: the result is NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.nanmean if nan else np.mean)(np.asarray(values, dtype=float), axis=0)


def layer_sweep(vecs: QKVectors, n_components: int = 10) -> dict[int, float]:
    """Rank correlation of predicted vs actual confusion at every collected layer."""
    return {l: diagnose(vecs, l, n_components)["spearman"] for l in vecs.layers}


def _subset(v: QKVectors, idx) -> QKVectors:
    idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
    return QKVectors(v.queries[idx], v.keys, v.label_probs[idx], v.gold[idx], v.layers)


def seed_averaged_spearman(vecs: dict, layer: int, n_components: int = 10, sample=None) -> float:
    """Spearman of the predicted and actual confusion, each averaged over seeds (``vecs``: ``{seed: QKVectors}``).

    ``sample``: ``[(seed, input indices), ...]`` (:func:`helpers.study.stats.bootstrap_statistic`); default all inputs.
    """
    sample = sample if sample is not None else [(s, np.arange(len(v.gold))) for s, v in vecs.items()]
    outs = [diagnose(_subset(vecs[s], idx), layer, n_components) for s, idx in sample]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pred = np.mean([o["predicted"] for o in outs], axis=0)
        act = np.nanmean([o["actual"] for o in outs], axis=0)
    return rank_correlation(pred, act)


def default_layer(model: HookedTransformer) -> int:
    """The paper's depth ratio: GPT2-XL layer 32 of 48 -> round(2/3 * n_layers)."""
    return int(round(model.cfg.n_layers * 32 / 48))


def diagnosis_set(model, task: str, seed: int, n_test: int):
    """The prompt set of one seed (:func:`helpers.core.prompts.make_icl_set`), without the warning that a
    multi-token label word (e.g. TREC's " Abbreviation") stands for its class by its first token: notebook 00's
    task table shows those words once."""
    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, task, seed, n_test)


# ---- one prompt's keys as its query sees them (notebook 06) and the claims ----

def key_projections(vecs: QKVectors, layer: int, n_heads: int) -> Float[torch.Tensor, "n head classes"]:
    """Per input and query head h, the projection ``q_h . k_{c,h}`` of each class's key on the input's query at
    ``layer`` (the vectors of :func:`collect_qk`, split back into heads). Summed over heads it is the dot product
    of the concatenated vectors, which is what the queries' PCA in :func:`predicted_confusion` sees."""
    j = vecs.layers.index(layer)
    q = rearrange(vecs.queries[:, j], "n (head d_head) -> n head d_head", head=n_heads)
    k = rearrange(vecs.keys[j], "classes (head d_head) -> classes head d_head", head=n_heads)
    return einsum(q, k, "n head d_head, classes head d_head -> n head classes")


def key_distances(proj: Float[torch.Tensor, "... head classes"]) -> Float[torch.Tensor, "... classes classes"]:
    """How far apart the classes' keys lie as one query sees them: ``|sum_h proj[h, a] - sum_h proj[h, b]|``
    (the query's score gap between the two label words, times sqrt(d_head)).

    :func:`predicted_confusion` with every principal component is the same gap taken over all inputs: its
    distance between a and b is ``sqrt(sum_i ((q_i - mean q) . (k_a - k_b))^2)`` (then normalised), i.e. the
    root sum of squares of these per-input gaps with the mean query subtracted (tests)."""
    s = proj.sum(-2)
    return (s[..., :, None] - s[..., None, :]).abs()


def most_confused(matrix: np.ndarray, names: Sequence[str]) -> str:
    """The pair ``"a–b"`` with the lowest off-diagonal value (NaN ignored)."""
    iu = np.triu_indices(len(names), 1)
    vals = np.asarray(matrix, dtype=float)[iu]
    i = int(np.nanargmin(vals))
    return f"{names[iu[0][i]]}–{names[iu[1][i]]}"
