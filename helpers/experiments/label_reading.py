"""Is the answer read from the label words? A causal form of "q reads the label words in the deep layers".

The saliency form of that claim (S_pq dominant in the deep layers, arXiv 2305.14160 §2.1) fires on a model that
reads no mapping: a label token's value feeds the label logits directly, so attention x gradient is large at label
positions whatever the model does with the mapping. The causal form asks the question the claim is about. Run each
prompt a second time with its labels relabelled by a permutation ``perm`` (every demonstration's label ``c``
becomes ``perm[c]``: the donor), then run the prompt itself with the keys and values of the label positions in the
deep layers taken from the donor. If q reads the mapping from the label words there, the answer moves to
``perm[answer]``; a model that answers from its weights keeps its answer. The same patch at as many content
positions (demonstration text, drawn at random) is the baseline: whatever moves the answer without the label words'
keys and values.

:func:`label_reading` returns, per prompt, whether the answer moved to ``perm`` of the unpatched answer with the
label positions patched and with the content positions patched; the score is their difference (protocol:
:mod:`helpers.protocols.label_reading`). Prompts whose donor has other positions (a label word that is more tokens
under the permutation) cannot be patched position by position and are left out (:func:`aligned`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from helpers.core.predict import predict
from helpers.core.prompts import Prompt, pad_batch

__all__ = ["deep_layers", "aligned", "content_positions", "patched_predictions", "label_reading"]


def deep_layers(n_layers: int) -> list[int]:
    """The deep half of the layers (paper A's "deep layers": where q reads the label words): ``L // 2`` to ``L - 1``."""
    return list(range(n_layers // 2, n_layers))


def _label_positions(p: Prompt) -> list[int]:
    return sorted({t for a, b in p.label_spans for t in range(a, b)} or set(p.label_pos))


def aligned(p: Prompt, donor: Prompt) -> bool:
    """Whether ``donor`` has ``p``'s length and label positions, so positions can be patched one by one."""
    return len(p) == len(donor) and _label_positions(p) == _label_positions(donor)


def content_positions(p: Prompt, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` positions drawn at random (without replacement) among the demonstrations' text tokens of ``p`` (not the
    query's, not a label's); all of them when there are fewer."""
    labels = set(_label_positions(p))
    q0 = p.query_span[0]
    pool = sorted({t for a, b in p.text_spans for t in range(a, b) if t < q0 and t not in labels})
    if len(pool) <= k:
        return pool
    return sorted(int(t) for t in rng.choice(pool, size=k, replace=False))


def patched_predictions(model, prompts: Sequence[Prompt], donors: Sequence[Prompt], positions: Sequence[Sequence[int]],
                        layers: Sequence[int], label_ids: Sequence[int], batch_size: int = 16) -> torch.Tensor:
    """Label-restricted predictions at q of ``prompts``, with the keys and values of ``positions[i]`` in ``layers``
    taken from ``donors[i]`` (same length; each donor batch runs once, with a cache of those keys and values only)."""
    if len(prompts) != len(donors) or len(prompts) != len(positions):
        raise ValueError(f"prompts, donors and positions must have one entry per prompt, got {len(prompts)}, "
                         f"{len(donors)} and {len(positions)}")
    bad = [i for i, (p, d) in enumerate(zip(prompts, donors)) if len(p) != len(d)]
    if bad:
        raise ValueError(f"donor {bad[0]} has {len(donors[bad[0]])} tokens, its prompt {len(prompts[bad[0]])}: keep "
                         "aligned pairs only (label_reading.aligned)")
    index = {id(p): i for i, p in enumerate(prompts)}
    names = [f"blocks.{layer}.attn.hook_{x}" for layer in layers for x in ("k", "v")]
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0

    def hooks(batch, tokens, offset: int = 0):  # full prompts only: offset is always 0 here
        idx = [index[id(p)] for p in batch]
        dtoks, _ = pad_batch([donors[i] for i in idx], pad)
        dtoks = dtoks[:, : tokens.shape[1]].to(tokens.device)
        with torch.no_grad():
            _, cache = model.run_with_cache(dtoks, names_filter=lambda n: n in names)
        rows = torch.tensor([b for b, i in enumerate(idx) for _ in positions[i]], dtype=torch.long)
        cols = torch.tensor([t for i in idx for t in positions[i]], dtype=torch.long)

        def make(name):
            def fn(act, hook):
                act[rows, cols] = cache[name][rows, cols].to(act.dtype)
                return act
            return fn

        return [(n, make(n)) for n in names]

    return predict(model, list(prompts), label_ids, batch_size=batch_size, top_k=0, hooks=hooks).pred


def label_reading(model, prompts: Sequence[Prompt], donors: Sequence[Prompt], perm: Sequence[int],
                  label_ids: Sequence[int], seed: int, layers: Sequence[int] | None = None,
                  batch_size: int = 16) -> dict:
    """Per prompt (aligned pairs only: :func:`aligned`), 1.0 where the answer moved to ``perm[answer]`` (float
    tensors):
    ``label`` with the label positions' keys and values in ``layers`` (default :func:`deep_layers`) from the donor,
    ``content`` with as many demonstration-text positions' (drawn with ``seed``); ``pred`` the unpatched answers,
    ``kept`` the indices of the prompts used and ``n`` the number of prompts given."""
    perm_t = torch.as_tensor(list(perm))
    if sorted(perm_t.tolist()) != list(range(len(label_ids))):
        raise ValueError(f"perm must be a permutation of 0..{len(label_ids) - 1}, got {list(perm)}")
    keep = [i for i, (p, d) in enumerate(zip(prompts, donors)) if aligned(p, d)]
    ps, ds = [prompts[i] for i in keep], [donors[i] for i in keep]
    layers = deep_layers(model.cfg.n_layers) if layers is None else list(layers)
    if not ps:  # tensors, not numpy arrays: the store reads an empty tensor back, not an empty numpy array
        return {"label": torch.zeros(0), "content": torch.zeros(0), "pred": torch.zeros(0, dtype=torch.long),
                "kept": torch.zeros(0, dtype=torch.long), "n": len(prompts)}
    rng = np.random.default_rng([seed, 7])
    lab = [_label_positions(p) for p in ps]
    con = [content_positions(p, len(pos), rng) for p, pos in zip(ps, lab)]
    pred = predict(model, ps, label_ids, batch_size=batch_size, top_k=0).pred
    target = perm_t[pred]
    out = {}
    for name, pos in (("label", lab), ("content", con)):
        patched = patched_predictions(model, ps, ds, pos, layers, label_ids, batch_size)
        out[name] = (patched == target).float()
    return {**out, "pred": pred, "kept": torch.tensor(keep, dtype=torch.long), "n": len(prompts)}
