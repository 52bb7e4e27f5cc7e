"""Notebook 09: the collection's analyses on a model that certainly learns in context (the positive control).

The model and its task are in :mod:`helpers.core.control`. This module holds what only notebook 09 measures:

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

from collections.abc import Callable, Sequence

import numpy as np
import torch
from jaxtyping import Float

from helpers.core.checks import CheckFailed, grader, likely_mistake
from helpers.core.control import ControlPrompts, ControlTask, control_prompts, relabel
from helpers.core.predict import predict
from helpers.core.prefix import run_prefix
from helpers.core.prefix_runs import predict_shared
from helpers.core.prompts import Prompt
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval

__all__ = [
    "control_sizes",
    "accuracy_cells",
    "label_swap",
    "swap_cells",
    "circuit_attention",
    "circuit_attention_reference",
    "check_circuit_attention",
    "hidden_anchor_accuracy",
    "control_claims",
    "SHIFT",
]


def control_sizes(profile) -> dict:
    """Run size of notebook 09: the profile's seeds, and per seed ``4 * n_test`` evaluation sequences (the control
    costs about a thousandth of the offline models per input), ``2 * n_test`` for head attribution (seed + 1000)
    and ``n_saliency * 4`` for saliency (a backward pass each)."""
    return {"seeds": tuple(profile.seeds), "n": 4 * profile.n_test, "n_attr": 2 * profile.n_test,
            "n_saliency": 4 * profile.n_saliency, "batch_size": 256}


def accuracy_cells(model, cps: dict[int, ControlPrompts], batch_size: int = 256) -> dict[tuple[str, int], np.ndarray]:
    """Per input 0/1 correctness, ``{("control", seed): [...]}`` (the input of ``bootstrap_means``)."""
    out = {}
    for seed, cp in cps.items():
        pred = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
        out[("control", seed)] = (pred == cp.gold).numpy().astype(float)
    return out


def SHIFT(n_labels: int) -> list[int]:
    """The label-swap permutation: label i becomes label i + 1 (mod n), which moves every label."""
    return [(i + 1) % n_labels for i in range(n_labels)]


def label_swap(model, cp: ControlPrompts, perm: Sequence[int] | None = None, batch_size: int = 256) -> dict:
    """Predictions on ``cp`` and on the same sequences relabelled with ``perm`` (default :func:`SHIFT`).

    Returns per input: ``pred`` (the class predicted before the swap), ``correct``, ``correct_swapped``,
    ``swap_averaged`` (their mean), ``follows`` (1 where the answer after the swap is ``perm`` of the answer
    before) and ``same`` (1 where the answer is the same label). ``correct`` is the plain in-context accuracy's
    input (:func:`swap_cells`), so the sequences need not run a second time for it."""
    perm = list(perm) if perm is not None else SHIFT(len(cp.label_ids))
    sw = relabel(cp, perm)
    a = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
    b = predict(model, sw.prompts, sw.label_ids, batch_size=batch_size, top_k=0).pred
    ca, cb = (a == cp.gold).numpy().astype(float), (b == sw.gold).numpy().astype(float)
    return {"pred": a, "correct": ca, "correct_swapped": cb, "swap_averaged": (ca + cb) / 2,
            "follows": (b == torch.tensor(perm)[a]).numpy().astype(float), "same": (a == b).numpy().astype(float)}


def swap_cells(runs: dict[int, dict], key: str) -> dict[tuple[str, int], np.ndarray]:
    return {("control", seed): r[key] for seed, r in runs.items()}


# ----------------------------------------------------------------- the circuit in the attention


def circuit_attention(model, cp: ControlPrompts, batch_size: int = 256) -> Float[torch.Tensor, "n layer head 2"]:
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


def circuit_attention_reference(model, prompt: Prompt, item_class: np.ndarray) -> torch.Tensor:
    """:func:`circuit_attention` for one prompt (``item_class``: its items' classes, query last): ``[layer, head, 2]``."""
    cp = ControlPrompts([prompt], np.asarray(item_class)[None], [], "", 0, 0)
    return circuit_attention(model, cp)[0]


@grader
def check_circuit_attention(fn: Callable, task: ControlTask | None = None) -> None:
    """Compare a reader's ``fn(model, prompt, item_class) -> [layer, head, 2]`` with :func:`circuit_attention` on
    tiny random models of three architectures (learned positions, rotary, grouped-query) and two control
    sequences; raises AssertionError naming the first case that differs."""
    from helpers.core.models import make_tiny_model

    task = task or ControlTask()
    cp = control_prompts(task, 2, seed=0)
    for kind in ("gpt2", "rotary", "gqa"):
        model = make_tiny_model(kind, seed=0, n_layers=2)
        for i, p in enumerate(cp.prompts):
            with torch.inference_mode():
                got = torch.as_tensor(fn(model, p, cp.item_class[i])).float().cpu()
            want = circuit_attention_reference(model, p, cp.item_class[i])
            where = f"tiny {kind} model, sequence {i}"
            if got.shape != want.shape:
                raise CheckFailed(f"{where}: shape {tuple(got.shape)}, expected {tuple(want.shape)} "
                                  "[layer, head, 2]")
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-4):
                part = "[..., 0] (label -> its item)" if not torch.allclose(got[..., 0], want[..., 0], atol=1e-5,
                                                                           rtol=1e-4) else "[..., 1] (q -> matching labels)"
                cause = likely_mistake(got, _circuit_mistakes(model, p, cp.item_class[i]), atol=1e-5)
                raise CheckFailed(f"{where}: {part} differs, by up to {(got - want).abs().max():.2e}. " + (
                    cause or "[..., 0]: the mean over label positions p of A[p, p - 1]; [..., 1]: the sum over the "
                    "label positions whose item has the query's class of A[q, p]."))
    print("check_circuit_attention: matches circuit_attention on 3 architectures x 2 sequences")


def _circuit_mistakes(model, prompt: Prompt, item_class):
    """Typical wrong versions of the by-hand circuit scores, each with its likely cause."""
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
    pat = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float()  # [l, h, i, j]
    pos = torch.tensor(prompt.label_pos)
    item_class = np.asarray(item_class)
    match = torch.as_tensor(item_class[:-1] == item_class[-1], dtype=torch.float32)

    def scores(back=1, reduce0="mean", weights=match, reduce1="sum"):
        a = getattr(pat[:, :, pos, pos - back], reduce0)(-1)
        b = getattr(pat[:, :, prompt.q][:, :, pos] * weights, reduce1)(-1)
        return torch.stack([a, b], -1)

    return [
        ("[..., 0] reads the label position itself (A[p, p]): the item is the token before it, A[p, p - 1].",
         lambda: scores(back=0)),
        ("[..., 0] is summed over label positions: take the mean.", lambda: scores(reduce0="sum")),
        ("[..., 1] sums over every label position: keep only those whose item has the query's class "
         "(item_class[:-1] == item_class[-1]).", lambda: scores(weights=torch.ones_like(match))),
        ("[..., 1] is a mean: sum over the matching label positions.", lambda: scores(reduce1="mean")),
        ("The two scores are swapped: [..., 0] is label -> its item, [..., 1] q -> matching labels.",
         lambda: scores().flip(-1)),
    ]


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
        full = predict(model, cp.prompts, cp.label_ids, batch_size=256, top_k=0).pred
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


# ----------------------------------------------------------------- claims (criteria fixed before the run)


def _above(iv: Interval, value: float) -> str:
    if iv.low >= value:
        return "replicates"
    return "does not replicate" if iv.high < value else "inconclusive"


def control_claims(acc: Interval, heldout: Interval, swap: Interval, follows: Interval, context: str = "") -> list[Claim]:
    """The control's own premise, graded before the run: in-context accuracy on fresh sequences at or above 0.90
    (training classes; and classes never seen in training), and the label-swap control's swap-averaged accuracy at
    or above 0.90 (a model that ignores the context's labels scores at most 0.5)."""
    return [
        claim("09.icl_accuracy", acc, _above(acc, 0.90), "whole 95% interval at or above 0.90 (chance 0.25)",
              context=context),
        claim("09.heldout_accuracy", heldout, _above(heldout, 0.90),
              "whole 95% interval at or above 0.90 on classes never seen in training (chance 0.25)", context=context),
        claim("09.label_swap", swap, _above(swap, 0.90),
              "swap-averaged accuracy's whole 95% interval at or above 0.90 (ignoring the labels scores at most 0.5)",
              context=context, note=f"Answers that move with the labels: {follows:.3f}."),
    ]
