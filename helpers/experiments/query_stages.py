"""Two stages of the query (Yang, Cho, Zhong and Inoue, arXiv 2505.18752): first the query's hidden state comes to
separate the classes, then it turns towards the label words' output directions.

Per layer, two curves over the query position q's residual stream:

- **separability** (:func:`probe_correct`): a linear probe (scikit-learn's logistic regression on standardised
  states) predicts each input's gold class from its state at q, scored on held-out folds (stratified
  cross-validation), so a layer scores what a linear read-out can find, not what it memorises;
- **alignment with the label words** (:func:`label_readout`): the state read through the final norm and the
  label words' unembedding columns alone (the logit lens restricted to the label words); its top class against
  the gold class. At the last layer this is the model's own prediction among the label words.

A trained probe set against a fixed read-out favours "separability first" by construction: the probe learns
where the class lies, the read-out must find it in the label words' directions. :func:`label_logits` gives the
like-for-like measure: the same cross-validated probe, trained on the state's label-word logits alone (its
projection on the label words' directions through the final norm), so both curves are probes and differ only in
what they may read: the whole state, or its label-word directions.

The paper ties the first stage to previous-token heads and the second to induction heads; ablating each ranking's
top heads (:func:`previous_token_scores` beside :func:`helpers.experiments.head_scores.induction_scores`) asks
which stage each breaks. Method only: states and labels in, per-input correctness out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float

from helpers.core.checks import ArgumentError, is_int, positive_int, seed_arg
from helpers.core.heads import collect_at_q, mean_attention, repeated_random_tokens
from helpers.core.predict import unembed_rows
from helpers.core.prefix_runs import prompt_batches, shared_cache
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.sizing import HEAVY_BATCH

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = ["query_states", "probe_correct", "label_logits", "label_readout", "previous_token_scores", "layer_matched"]

# previous_token_scores' longest sequence: the scores are means over positions, 512 random tokens (twice) are many
# more than a head needs to show whether it attends to the one before
MAX_SCORE_LENGTH = 512


def query_states(model: HookedTransformer, prompts: Sequence[Prompt], batch_size: int = HEAVY_BATCH, shared: bool = True,
                 hooks: tuple | None = None) -> Float[torch.Tensor, "n stage d_model"]:
    """The residual stream at each prompt's q before every layer and after the last: ``[n, n_layers + 1, d_model]``
    (stage ``l`` < n_layers is ``blocks.l.hook_resid_pre``, the last is the final residual before ln_final), in
    float32 on the CPU. Prompts sharing their demonstrations run them once (``shared``). ``hooks``: a
    ``(prefix_hooks, factory)`` pair changing the pass (an ablation, e.g.
    :func:`helpers.experiments.head_ablation.ablation_hook_pair`): the prefix hooks run in the shared prefix,
    ``factory(batch, tokens, offset)`` gives the hooks of each batch (``offset``: where its tokens start)."""
    check_prompts(model, prompts, "query_states")
    L = model.cfg.n_layers
    out = torch.empty(len(prompts), L + 1, model.cfg.d_model)
    prefix_hooks, factory = hooks if hooks is not None else ((), None)
    cache = shared_cache(model, prompts, shared, prefix_hooks)
    offset = 0 if cache is None else cache.length
    with torch.inference_mode():
        for idx, tokens, q in prompt_batches(model, prompts, batch_size, cache):
            extra = factory([prompts[i] for i in idx], tokens, offset) if factory is not None else ()
            st = collect_at_q(model, tokens.to(model.cfg.device), q, cache=cache, hooks=extra)
            layers = [st["resid_pre"][l] for l in range(L)] + [st["resid_final"]]
            out[idx] = torch.stack(layers, 1).float().cpu()
    return out


def probe_correct(states: Float[torch.Tensor, "n stage d"], gold: Sequence[int], folds: int = 5, seed: int = 0,
                  c: float = 1.0) -> np.ndarray:
    """``[n, stage]`` 1 where a linear probe trained on the other folds predicts input ``i``'s gold class from its
    state at that stage, 0 where not: scikit-learn's ``LogisticRegression(C=c)`` after a ``StandardScaler``, with
    ``StratifiedKFold(folds, shuffle=True, random_state=seed)`` and ``cross_val_predict``. Needs at least ``folds``
    inputs of every class present."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = torch.as_tensor(states).float().cpu().numpy()
    raw = np.asarray(gold)
    if raw.ndim != 1 or raw.dtype.kind not in "iu":
        raise ValueError(f"gold must be a 1-d sequence of integer classes, got dtype {raw.dtype}, shape {raw.shape}")
    y = raw.astype(int)
    if x.ndim != 3 or x.shape[0] != len(y):
        raise ValueError(f"states must be [n, stage, d] with n = len(gold) = {len(y)}, got {tuple(x.shape)}")
    if not np.isfinite(x).all():
        raise ValueError("states hold NaN or inf: a probe cannot be fitted on them; check the forward pass (dtype, "
                         "ablation) that produced them")
    folds, seed = positive_int("folds", folds), seed_arg(seed)
    if folds < 2:
        raise ArgumentError(f"folds must be 2 or more for a cross-validated probe, got {folds}")
    if not (isinstance(c, (int, float)) and not isinstance(c, bool) and np.isfinite(c) and c > 0):
        raise ArgumentError(f"c, the probe's inverse regularisation strength, must be a positive number, got {c!r}")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2 or counts.min() < folds:
        raise ValueError(f"a {folds}-fold probe needs two classes or more with at least {folds} inputs each; the gold "
                         f"classes count {dict(zip(classes.tolist(), counts.tolist()))}: use more inputs or fewer folds")
    split = StratifiedKFold(folds, shuffle=True, random_state=seed)
    out = np.zeros((len(y), x.shape[1]), dtype=int)
    for s in range(x.shape[1]):
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))
        out[:, s] = cross_val_predict(probe, x[:, s], y, cv=split) == y
    return out


def _label_ids(model: HookedTransformer, label_ids: Sequence[int]) -> torch.Tensor:
    ids = list(label_ids)
    if len(ids) < 2 or not all(is_int(i) for i in ids):
        raise ValueError(f"label_ids must be two or more token ids (one per class), got {ids!r}")
    bad = [i for i in ids if not 0 <= i < model.cfg.d_vocab]
    if bad:
        raise ValueError(f"label_ids {bad} lie outside the vocabulary 0..{model.cfg.d_vocab - 1}")
    return torch.as_tensor(ids, dtype=torch.long)


def label_logits(model: HookedTransformer, states: Float[torch.Tensor, "n stage d_model"],
                 label_ids: Sequence[int]) -> Float[torch.Tensor, "n stage classes"]:
    """``[n, stage, classes]``: each state read as the last one, through the final norm (ln_final, recomputed on
    that state) and only the label words' unembedding columns (:func:`helpers.core.predict.unembed_rows`), in
    float32. States must be ``[n, stage, d_model]`` and finite."""
    ids = _label_ids(model, label_ids)
    x = torch.as_tensor(states)
    if x.ndim != 3 or x.shape[-1] != model.cfg.d_model:
        raise ValueError(f"states must be [n, stage, d_model = {model.cfg.d_model}], got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("states hold NaN or inf: no class can be read from them")
    n, s, d = x.shape
    with torch.inference_mode():
        logits = unembed_rows(model, x.to(model.cfg.device, model.cfg.dtype).reshape(n * s, d), ids)
    return logits.float().reshape(n, s, len(ids)).cpu()


def label_readout(model: HookedTransformer, states: Float[torch.Tensor, "n stage d_model"],
                  label_ids: Sequence[int]) -> torch.Tensor:
    """``[n, stage]`` the class whose label word scores highest when each state is read as the last one
    (:func:`label_logits`). At the last stage this is the model's prediction among them."""
    return label_logits(model, states, label_ids).argmax(-1)


def previous_token_scores(model: HookedTransformer, length: int = 32, n: int = 16, seed: int = 0, batch_size: int = HEAVY_BATCH
                          ) -> Float[torch.Tensor, "layer head"]:
    """Each head's mean attention from every position to the one before it, over the random tokens of
    :func:`helpers.core.heads.repeated_random_tokens` (first copy and second, past the first token):
    1 for a head that always attends to the previous token. ``length`` at most :data:`MAX_SCORE_LENGTH` and two
    copies within the context."""
    length = positive_int("length", length)
    if length > MAX_SCORE_LENGTH or 2 * length + 1 > model.cfg.n_ctx:
        raise ArgumentError(f"length {length} is too long: two copies (and BOS) must fit the context of "
                            f"{model.cfg.n_ctx} tokens, and {MAX_SCORE_LENGTH} is plenty for a mean over positions")
    toks = repeated_random_tokens(model, length, n, seed)
    rows = torch.arange(1, toks.shape[1])
    return mean_attention(model, toks, rows, rows - 1, batch_size)


def layer_matched(model: HookedTransformer, heads: Sequence[tuple[int, int]], seed: int,
                  exclude: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """As many random heads as ``heads``, drawn with ``seed`` layer by layer: in each layer as many as ``heads``
    has there, from the heads in neither ``heads`` nor ``exclude``; where a layer has too few, the rest come from
    the nearest layers that have some (the lower first on a tie). A baseline that removes as much from the same
    depths, so a set's effect is not its layers'."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = [tuple(h) for h in heads]
    bad = [h for h in heads if len(h) != 2 or not all(is_int(x) for x in h) or not (0 <= h[0] < L and 0 <= h[1] < H)]
    if bad or len(set(heads)) != len(heads):
        raise ValueError(f"heads must be distinct (layer, head) pairs within {L} layers x {H} heads, got "
                         f"{bad or heads}")
    taken = set(heads) | {tuple(h) for h in exclude}
    free = {l: [h for h in range(H) if (l, h) not in taken] for l in range(L)}
    if len(heads) > sum(map(len, free.values())):
        raise ValueError(f"{len(heads)} layer-matched heads asked for, {sum(map(len, free.values()))} free")
    rng = np.random.default_rng(seed_arg(seed))
    out = []
    for layer in sorted({l for l, _ in heads}):
        want = sum(1 for l, _ in heads if l == layer)
        for l in sorted(range(L), key=lambda x: (abs(x - layer), x)):
            k = min(want, len(free[l]))
            if k:
                pick = sorted(rng.choice(free[l], size=k, replace=False).tolist())
                out += [(l, h) for h in pick]
                free[l] = [h for h in free[l] if h not in pick]
                want -= k
            if not want:
                break
    return sorted(out)
