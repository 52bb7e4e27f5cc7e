"""Notebook 09: the collection's analyses on a model that certainly learns in context (the positive control).

The model and its task are in :mod:`helpers.core.controls.model`. This module holds what only notebook 09 measures:

- **Accuracy and the mapping control.** In-context accuracy on fresh sequences of training classes and of
  classes never seen in training; the *label-swap control*: the same sequences with every label token replaced
  by the next one (``L0 -> L1 -> L2 -> L3 -> L0``, a permutation that moves every label), so the right answer
  moves too. Per input, the *swap-averaged accuracy* is the mean of its correctness before and after the swap:
  a model that ignores the context's labels gives the same answer to both and scores at most 0.5 on every
  input; *follows the mapping* is the share of inputs whose answer moves with the labels.
- **The circuit, read off the attention** (:func:`circuit_attention`): in layer 0, the attention from each
  label position to the item just before it (a previous-token head copies the item into its label); in the
  last layer, the attention from q to the label positions whose item has the query's class (a matching head
  reads the label whose copied item matches). Reddy (arXiv 2312.03002) and Olsson et al. (2022) describe this
  two-step induction circuit.
- :func:`hidden_anchor_accuracy`: paper A's Hidden_anchor on the control, one sequence at a time (each has its
  own context): the context's keys and values kept at BOS and the label tokens only, against one random item per
  demonstration (Hidden_random).

Every other measurement is the collection's own function, called on the control's prompts (saliency flows,
isolation, AUCROC_l, head attribution, ablation, value-output vectors, two towers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float

from helpers.core.controls.model import ControlPrompts, relabel
from helpers.core.predict import predict
from helpers.core.prefix import run_prefix
from helpers.core.prefix_runs import predict_shared
from helpers.core.prompts import Prompt
from helpers.core.relabelled import shift
from helpers.core.sizing import CONTROL_BATCH, sizing

__all__ = ["circuit_attention_reference", "label_swap", "circuit_attention", "hidden_anchor_accuracy", "text_anchor_prompts", "text_anchor_loyalty", "SHIFT"]


SHIFT = shift  # the label-swap permutation (helpers.core.relabelled.shift): label i becomes i + 1 (mod n)


def label_swap(model, cp: ControlPrompts, perm: Sequence[int] | None = None, batch_size: int = CONTROL_BATCH) -> dict:
    """Predictions on ``cp`` and on the same sequences relabelled with ``perm`` (default :func:`SHIFT`).

    Returns per input: ``pred`` (the class predicted before the swap), ``correct``, ``correct_swapped``,
    ``swap_averaged`` (their mean), ``follows`` (1 where the answer after the swap is ``perm`` of the answer
    before) and ``same`` (1 where the answer is the same label). ``correct`` is the plain in-context accuracy's
    input (:func:`~helpers.protocols.positive_control.swap_cells`), so the sequences need not run a second time for it."""
    perm = list(perm) if perm is not None else SHIFT(len(cp.label_ids))
    sw = relabel(cp, perm)
    a = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
    b = predict(model, sw.prompts, sw.label_ids, batch_size=batch_size, top_k=0).pred
    ca, cb = (a == cp.gold).numpy().astype(float), (b == sw.gold).numpy().astype(float)
    return {"pred": a, "correct": ca, "correct_swapped": cb, "swap_averaged": (ca + cb) / 2,
            "follows": (b == torch.tensor(perm)[a]).numpy().astype(float), "same": (a == b).numpy().astype(float)}


# ----------------------------------------------------------------- the circuit in the attention


def circuit_attention(model, cp: ControlPrompts, batch_size: int = CONTROL_BATCH) -> Float[torch.Tensor, "n layer head 2"]:
    """Per sequence, layer and head: ``[..., 0]`` the mean attention from each label position to the item just
    before it; ``[..., 1]`` the attention from q summed over the label positions whose item has the query's class.
    One batched forward per ``batch_size`` sequences (every control prompt has the same length)."""
    prompts = cp.prompts
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = torch.empty(len(prompts), L, H, 2)
    pos = torch.tensor(prompts[0].label_pos)
    if any(p.label_pos != prompts[0].label_pos or len(p) != len(prompts[0]) for p in prompts):
        raise ValueError("circuit_attention reads the control's prompts, which all have the same positions")
    match = torch.from_numpy(cp.item_class[:, :-1] == cp.item_class[:, -1:]).float()  # [n, demo]
    q = prompts[0].q
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    batch_size = sizing(model, len(prompts[0]), batch_size).batch_size
    for s in range(0, len(prompts), batch_size):
        tokens = torch.stack([p.tokens for p in prompts[s: s + batch_size]])
        with torch.inference_mode():
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
        at_match = match[s: s + len(tokens), None].to(cache[names[0]].device)  # [b, 1, demo], on the model's device
        for l in range(L):
            pat = cache[names[l]].float()  # [b, head, qpos, kpos]
            out[s: s + len(tokens), l, :, 0] = pat[:, :, pos, pos - 1].mean(-1)
            out[s: s + len(tokens), l, :, 1] = (pat[:, :, q][:, :, pos] * at_match).sum(-1)
    return out


# ----------------------------------------------------------------- Hidden_anchor, one sequence at a time


def hidden_anchor_accuracy(model, cp: ControlPrompts, seed: int, full: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Per input: correctness with the full context (``icl``), with only BOS and the label tokens' keys and values
    kept (``hidden_anchor``), and with BOS plus one random item per demonstration instead (``hidden_random``,
    drawn with ``seed``), and the label loyalty of the two against full ICL (``*_loyal``). Each sequence has its
    own context, so each runs its own cache (paper A's compression reads one shared demonstration set).
    ``full``: the predictions with the full context when already computed (:func:`label_swap`'s ``pred``)."""
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("icl", "hidden_anchor", "hidden_random", "hidden_anchor_loyal", "hidden_random_loyal")}
    if full is None:
        full = predict(model, cp.prompts, cp.label_ids, batch_size=CONTROL_BATCH, top_k=0).pred
    for i, p in enumerate(cp.prompts):
        p0 = p.q  # the context: everything before the query item
        anchors = [0] + list(p.label_pos)
        rand = [0] + [int(rng.choice(range(s, e))) for s, e in p.text_spans]
        out["icl"].append(float(full[i] == p.gold))
        for name, keep in (("hidden_anchor", anchors), ("hidden_random", rand)):
            cache = run_prefix(model, p.tokens[:p0], keep)
            with torch.inference_mode():
                pred = int(predict_shared(model, [p], cp.label_ids, batch_size=1, top_k=0, cache=cache).pred[0])
            out[name].append(float(pred == p.gold))
            out[f"{name}_loyal"].append(float(pred == full[i]))
    return {k: np.asarray(v) for k, v in out.items()}


def text_anchor_prompts(cp: ControlPrompts) -> list[Prompt]:
    """Paper A's Text_anchor on the control: each sequence with its items removed from the context, so BOS, its
    label tokens in order, then the query item (the label words as text, without what they label)."""
    out = []
    for p in cp.prompts:
        n = len(p.label_pos)
        tokens = p.tokens[[0, *p.label_pos, p.q]]
        words = p.text.split(" ")
        out.append(Prompt(tokens=tokens, text=" ".join([words[j - 1] for j in p.label_pos] + [words[-1]]),
                          label_pos=list(range(1, n + 1)), label_class=list(p.label_class),
                          label_spans=[(j, j + 1) for j in range(1, n + 1)], format_pos=[], text_spans=[],
                          query_span=(n + 1, n + 2), q=n + 1, bos=True, gold=p.gold,
                          kinds=["bos"] + ["label"] * n + ["query"], demo_end=n + 1))
    return out


def text_anchor_loyalty(model, cp: ControlPrompts, full: torch.Tensor | None = None,
                        batch_size: int = CONTROL_BATCH) -> np.ndarray:
    """Per input, 1 where the prediction on :func:`text_anchor_prompts` equals the one with the full context
    (``full``: those predictions when already computed), else 0: Text_anchor's label loyalty."""
    if full is None:
        full = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
    pred = predict(model, text_anchor_prompts(cp), cp.label_ids, batch_size=batch_size, top_k=0).pred
    return (pred == full).numpy().astype(float)


# ----------------------------------------------------------------- claims (criteria fixed before the run)


def circuit_attention_reference(model, prompt: Prompt, item_class: np.ndarray) -> torch.Tensor:
    """:func:`circuit_attention` for one prompt (``item_class``: its items' classes, query last): ``[layer, head, 2]``."""
    cp = ControlPrompts([prompt], np.asarray(item_class)[None], [], "", 0, 0)
    return circuit_attention(model, cp)[0]
