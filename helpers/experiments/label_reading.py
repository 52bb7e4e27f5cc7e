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

from helpers.core.positions import draw_content, position_classes
from helpers.core.predict import predict
from helpers.core.prompts import Prompt, pad_batch
from helpers.core.sizing import FORWARD_BATCH

__all__ = ["deep_layers", "aligned", "content_positions", "donor_states", "patched_sets", "patched_predictions",
           "label_reading"]


def deep_layers(n_layers: int) -> list[int]:
    """The deep half of the layers (paper A's "deep layers": where q reads the label words): ``L // 2`` to ``L - 1``."""
    return list(range(n_layers // 2, n_layers))


def aligned(p: Prompt, donor: Prompt) -> bool:
    """Whether ``donor`` has ``p``'s length and label positions, so positions can be patched one by one."""
    return len(p) == len(donor) and position_classes(p)["label"] == position_classes(donor)["label"]


def content_positions(p: Prompt, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` positions drawn at random (without replacement) among the demonstrations' content tokens of ``p``
    (:func:`helpers.core.positions.draw_content`: not a label's, not the template's; never the query's own text);
    all of them when there are fewer."""
    return draw_content(p, k, rng)


def _names(layers: Sequence[int]) -> list[str]:
    return [f"blocks.{layer}.attn.hook_{x}" for layer in layers for x in ("k", "v")]


def donor_states(model, donors: Sequence[Prompt], positions: Sequence[Sequence[int]], layers: Sequence[int],
                 batch_size: int = FORWARD_BATCH) -> list[dict[str, torch.Tensor]]:
    """Per donor, ``{hook name: [len(positions[i]), ...]}``: its keys and values at ``positions[i]`` in ``layers``,
    each donor run once (in batches of ``batch_size``, right-padded)."""
    names = _names(layers)
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    out: list[dict[str, torch.Tensor]] = []
    for start in range(0, len(donors), batch_size):
        part = list(donors[start: start + batch_size])
        toks, _ = pad_batch(part, pad)
        with torch.inference_mode():
            _, cache = model.run_with_cache(toks.to(model.cfg.device), names_filter=lambda n: n in names)
        for b, i in enumerate(range(start, start + len(part))):
            pos = torch.as_tensor(list(positions[i]), dtype=torch.long)
            out.append({n: cache[n][b, pos].clone() for n in names})
    return out


def _patched(model, prompts: Sequence[Prompt], states: Sequence[dict[str, torch.Tensor]], union: Sequence[list[int]],
             positions: Sequence[Sequence[int]], layers: Sequence[int], label_ids: Sequence[int],
             batch_size: int) -> torch.Tensor:
    """Predictions with ``positions[i]``'s keys and values from ``states[i]`` (taken at ``union[i]``)."""
    index = {id(p): i for i, p in enumerate(prompts)}
    names = _names(layers)

    def hooks(batch, tokens, offset: int = 0):  # full prompts only: offset is always 0 here
        idx = [index[id(p)] for p in batch]
        rows = torch.tensor([b for b, i in enumerate(idx) for _ in positions[i]], dtype=torch.long)
        cols = torch.tensor([t for i in idx for t in positions[i]], dtype=torch.long)
        pick = [(i, [union[i].index(t) for t in positions[i]]) for i in idx]

        def make(name):
            vals = torch.cat([states[i][name][torch.as_tensor(j, dtype=torch.long)] for i, j in pick])

            def fn(act, hook):
                act[rows, cols] = vals.to(act.device, act.dtype)
                return act
            return fn

        return [(n, make(n)) for n in names]

    return predict(model, list(prompts), label_ids, batch_size=batch_size, top_k=0, hooks=hooks).pred


def _check_pairs(prompts, donors, position_sets) -> None:
    if any(len(prompts) != len(x) for x in (donors, *position_sets)):
        raise ValueError(f"prompts, donors and positions must have one entry per prompt, got {len(prompts)}, "
                         f"{len(donors)} and {[len(x) for x in position_sets]}")
    bad = [i for i, (p, d) in enumerate(zip(prompts, donors)) if len(p) != len(d)]
    if bad:
        raise ValueError(f"donor {bad[0]} has {len(donors[bad[0]])} tokens, its prompt {len(prompts[bad[0]])}: keep "
                         "aligned pairs only (label_reading.aligned)")


def patched_sets(model, prompts: Sequence[Prompt], donors: Sequence[Prompt], position_sets: dict[str, Sequence],
                 layers: Sequence[int], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH) -> dict[str, torch.Tensor]:
    """``{name: predictions}`` for each set of positions, every donor run once for all of them
    (:func:`donor_states` at the union of each prompt's positions)."""
    _check_pairs(prompts, donors, list(position_sets.values()))
    union = [sorted({t for pos in position_sets.values() for t in pos[i]}) for i in range(len(prompts))]
    states = donor_states(model, donors, union, layers, batch_size)
    return {name: _patched(model, prompts, states, union, pos, layers, label_ids, batch_size)
            for name, pos in position_sets.items()}


def patched_predictions(model, prompts: Sequence[Prompt], donors: Sequence[Prompt], positions: Sequence[Sequence[int]],
                        layers: Sequence[int], label_ids: Sequence[int], batch_size: int = FORWARD_BATCH) -> torch.Tensor:
    """Label-restricted predictions at q of ``prompts``, with the keys and values of ``positions[i]`` in ``layers``
    taken from ``donors[i]`` (same length; each donor runs once, keeping those keys and values only)."""
    return patched_sets(model, prompts, donors, {"p": positions}, layers, label_ids, batch_size)["p"]


def label_reading(model, prompts: Sequence[Prompt], donors: Sequence[Prompt], perm: Sequence[int],
                  label_ids: Sequence[int], seed: int, layers: Sequence[int] | None = None,
                  batch_size: int = FORWARD_BATCH, pred: torch.Tensor | None = None) -> dict:
    """Per prompt (aligned pairs only: :func:`aligned`), 1.0 where the answer moved to ``perm[answer]`` (float
    tensors):
    ``label`` with the label positions' keys and values in ``layers`` (default :func:`deep_layers`) from the donor,
    ``content`` with as many demonstration-content positions' (drawn with ``seed``); ``pred`` the unpatched answers,
    ``kept`` the indices of the prompts used and ``n`` the number of prompts given. ``pred``: the prompts'
    unpatched label-restricted predictions when the caller has them (one per prompt given), else computed here.
    Three forwards per prompt: the donor, and the prompt patched at each set of positions."""
    perm_t = torch.as_tensor(list(perm))
    if sorted(perm_t.tolist()) != list(range(len(label_ids))):
        raise ValueError(f"perm must be a permutation of 0..{len(label_ids) - 1}, got {list(perm)}")
    if pred is not None and len(pred) != len(prompts):
        raise ValueError(f"pred must hold one prediction per prompt ({len(prompts)}), got {len(pred)}")
    keep = [i for i, (p, d) in enumerate(zip(prompts, donors)) if aligned(p, d)]
    ps, ds = [prompts[i] for i in keep], [donors[i] for i in keep]
    layers = deep_layers(model.cfg.n_layers) if layers is None else list(layers)
    if not ps:  # tensors, not numpy arrays: the store reads an empty tensor back, not an empty numpy array
        return {"label": torch.zeros(0), "content": torch.zeros(0), "pred": torch.zeros(0, dtype=torch.long),
                "kept": torch.zeros(0, dtype=torch.long), "n": len(prompts)}
    rng = np.random.default_rng([seed, 7])
    lab = [position_classes(p)["label"] for p in ps]
    con = [content_positions(p, len(pos), rng) for p, pos in zip(ps, lab)]
    if pred is None:
        pred = predict(model, ps, label_ids, batch_size=batch_size, top_k=0).pred
    else:
        pred = torch.as_tensor(pred)[torch.as_tensor(keep, dtype=torch.long)]
    target = perm_t[pred]
    patched = patched_sets(model, ps, ds, {"label": lab, "content": con}, layers, label_ids, batch_size)
    out = {name: (p == target).float() for name, p in patched.items()}
    return {**out, "pred": pred, "kept": torch.tensor(keep, dtype=torch.long), "n": len(prompts)}
