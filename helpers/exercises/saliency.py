"""Notebook 01's exercises: the attention patterns from a cache, the saliency matrices of one prompt, and its three
flows, each checked against :mod:`helpers.experiments.saliency` on the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.saliency import flow_scores, saliency_matrices, saliency_prompts

__all__ = ["check_attention_patterns", "check_pattern_saliency", "check_saliency_flows"]


def _tiny_saliency_setups(n: int = 2):
    """``(kind, model, prompts, label_ids)`` for the three tiny architectures: ``n`` SST-2 prompts each, every
    prompt with its own demonstrations (as :func:`saliency_prompts` draws them)."""
    from helpers.core.tasks import LabelWordWarning

    for kind in TINY_KINDS:
        model = tiny_model(kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            prompts, lids = saliency_prompts(model, "sst2", seed=0, n=n)
        yield kind, model, prompts, lids


def _first_difference(mine: torch.Tensor, ref: torch.Tensor, names: Sequence[str]) -> str:
    """Where ``mine`` and ``ref`` differ most, as ``"name=i, ...: yours x, reference y"``."""
    idx = np.unravel_index(int((mine - ref).abs().argmax()), tuple(ref.shape))
    where = ", ".join(f"{n}={int(i)}" for n, i in zip(names, idx))
    return f"{where}: yours {float(mine[idx]):.4g}, reference {float(ref[idx]):.4g}"


def _assert_matches(mine, ref: torch.Tensor, what: str, names: Sequence[str], rtol: float = 1e-3,
                    mistakes=None) -> None:
    """Raise :class:`CheckFailed` saying what differs; ``mistakes()`` gives ``(message, compute)`` typical wrong
    versions (:func:`~helpers.exercises.grading.likely_mistake`), tried only when the values differ."""
    if not isinstance(mine, torch.Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(mine).__name__}")
    mine = mine.detach().float().cpu()
    if tuple(mine.shape) != tuple(ref.shape):
        raise CheckFailed(f"{what}: shape {tuple(mine.shape)}, expected {tuple(ref.shape)} "
                             f"[{', '.join(names)}]")
    if torch.isnan(mine).any():
        raise CheckFailed(f"{what}: NaN at {_first_difference(torch.isnan(mine).float(), torch.zeros_like(ref), names)}")
    atol = 1e-4 * float(ref.abs().max()) + 1e-9
    if not torch.allclose(mine, ref, rtol=rtol, atol=atol):
        cause = likely_mistake(mine, mistakes(), atol=atol, rtol=rtol) if mistakes else None
        raise CheckFailed(f"{what} differs from the reference; largest difference at "
                          f"{_first_difference(mine, ref, names)}. " + (cause or "Compare your steps with the "
                                                                       "docstring, one at a time."))


def _pattern_saliency_mistakes(model, p, lids):
    """Typical wrong versions of the by-hand saliency of one prompt, each with its likely cause."""
    def parts(target: str = "gold", vocab: str = "labels"):
        patterns = []

        def keep(pattern, hook):
            pattern.retain_grad()
            patterns.append(pattern)

        with torch.enable_grad():
            logits = model.run_with_hooks(p.tokens[None], fwd_hooks=[(f"blocks.{l}.attn.hook_pattern", keep)
                                                                     for l in range(model.cfg.n_layers)])[0, p.q]
            cols = logits[list(lids)] if vocab == "labels" else logits
            gold = p.gold if vocab == "labels" else list(lids)[p.gold]
            y = int(cols.argmax()) if target == "pred" else gold
            torch.nn.functional.cross_entropy(cols[None], torch.tensor([y])).backward()
        model.zero_grad(set_to_none=True)
        return (torch.stack([a[0] for a in patterns]).detach(), torch.stack([a.grad[0] for a in patterns]))

    A, G = parts()
    n_heads = A.shape[1]
    return [
        ("You took the absolute value per head, then summed: sum over heads first, then abs.",
         lambda: (A * G).abs().sum(1)),
        ("No absolute value: I is |sum over heads of A * dL/dA|.", lambda: (A * G).sum(1)),
        ("You averaged over heads: sum them.", lambda: (A * G).sum(1).abs() / n_heads),
        ("This is |dL/dA| without the pattern: multiply by A (elementwise) before summing over heads.",
         lambda: G.sum(1).abs()),
        ("The loss is over the whole vocabulary: restrict the logits at q to label_ids first, then take the "
         "cross-entropy against the gold class.", lambda: (lambda a, g: (a * g).sum(1).abs())(*parts(vocab="full"))),
        ("The loss is against the predicted class: use the gold class, prompt.gold.",
         lambda: (lambda a, g: (a * g).sum(1).abs())(*parts(target="pred"))),
    ]


def _flow_mistakes(I: torch.Tensor, p):
    """Typical wrong versions of the three flows of one prompt's saliency matrices, each with its likely cause."""
    n = I.shape[-1]

    def flows(strict: bool = True, reduce: str = "mean", ww_rest: bool = False, shift: int = 0):
        earlier = torch.ones(n, n, dtype=torch.bool).tril(-1 if strict else 0)
        rows = [x + shift for x in p.label_pos]
        wp = torch.zeros(n, n, dtype=torch.bool)
        wp[rows] = earlier[rows]
        pq = torch.zeros(n, n, dtype=torch.bool)
        pq[p.q, rows] = True
        ww = earlier & ~wp & ~pq
        if ww_rest:
            ww = torch.ones(n, n, dtype=torch.bool).tril(-1) & ~wp & ~pq | ~torch.ones(n, n, dtype=torch.bool).tril()
        out = [I[:, m].mean(-1) if reduce == "mean" else I[:, m].sum(-1) for m in (wp, pq, ww)]
        return torch.stack(out, dim=-1)

    return [
        ("You counted the diagonal (j = i): the flows take only earlier positions, j < i.",
         lambda: flows(strict=False)),
        ("These are sums: the flows are means over their pairs.", lambda: flows(reduce="sum")),
        ("S_ww takes every other pair above the diagonal too: only pairs with j < i count (the rest of a causal "
         "saliency matrix is zero, and counting it lowers the mean).", lambda: flows(ww_rest=True)),
        ("Your label positions are one after the label words: use prompt.label_pos as it is.",
         lambda: flows(shift=1)),
        ("Your label positions are one before the label words: use prompt.label_pos as it is.",
         lambda: flows(shift=-1)),
        ("The three flows are in another order: return S_wp, S_pq, S_ww in that order.",
         lambda: flows()[:, [1, 0, 2]]),
    ]


@grader
def check_attention_patterns(fn) -> None:
    """Check a by-hand ``fn(model, tokens) -> [layer, head, query, key]`` (every layer's attention pattern of one
    sequence, from a cache) on the tiny models of the three architectures. Raises :class:`CheckFailed` naming the
    likely mistake, or prints one line."""
    name = getattr(fn, "__name__", "your function")
    for kind, model, prompts, _ in _tiny_saliency_setups(n=1):
        tokens = prompts[0].tokens
        with torch.inference_mode():
            _, cache = model.run_with_cache(tokens[None])
            ref = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float().cpu()
            mine = fn(model, tokens)
        scores = torch.stack([cache["attn_scores", l][0] for l in range(model.cfg.n_layers)]).float().cpu()

        def mistakes(ref=ref, scores=scores):
            return [("These are the scores before the softmax (hook_attn_scores): the pattern is after it "
                     "(hook_pattern).", lambda: scores),
                    ("Query and key are swapped (the pattern transposed): keep the axes as the cache has them.",
                     lambda: ref.transpose(-1, -2))]

        if isinstance(mine, torch.Tensor) and mine.ndim == 5 and mine.shape[1] == 1:
            raise CheckFailed(f"{name} on the tiny {kind} model: shape {tuple(mine.shape)} keeps the batch axis: "
                              "take [0] of each layer's pattern")
        if isinstance(mine, torch.Tensor) and tuple(mine.shape) == tuple(ref.shape[1:]):
            raise CheckFailed(f"{name} on the tiny {kind} model: shape {tuple(mine.shape)} is one layer's: stack "
                              f"all {model.cfg.n_layers} layers")
        _assert_matches(mine, ref, f"{name} on the tiny {kind} model ({len(tokens)} tokens)",
                        ("layer", "head", "query", "key"), rtol=1e-4, mistakes=mistakes)
    print(f"✓ {name} matches the cached patterns on 3 tiny models")


@grader
def check_pattern_saliency(fn) -> None:
    """Check a by-hand ``fn(model, prompt, label_ids) -> I`` (``[layer, seq, seq]``, the saliency matrices of
    one prompt) against :func:`saliency_matrices` on tiny random models of the three architectures (two SST-2
    prompts each). Raises an AssertionError that says what differs, or prints one line."""
    for kind, model, prompts, lids in _tiny_saliency_setups():
        refs = saliency_matrices(model, prompts, lids)
        for p, ref in zip(prompts, refs):
            mine = fn(model, p, lids)
            if any(w.grad is not None for w in model.parameters()):
                model.zero_grad(set_to_none=True)
            _assert_matches(mine, ref, f"{fn.__name__} on the tiny {kind} model ({len(p)}-token prompt)",
                            ("layer", "row i (to)", "column j (from)"),
                            mistakes=lambda: _pattern_saliency_mistakes(model, p, lids))
    print(f"✓ {fn.__name__} matches the reference (saliency_matrices) on 3 tiny models")


@grader
def check_saliency_flows(fn) -> None:
    """Check a by-hand ``fn(I, prompt) -> flows`` (``[layer, 3]``: S_wp, S_pq, S_ww per layer, from one
    prompt's unpadded saliency matrices ``I [layer, seq, seq]``) against :func:`flow_scores`, on the saliency
    matrices of tiny random models of the three architectures and on random matrices of the same shape."""
    gen = torch.Generator().manual_seed(0)
    for kind, model, prompts, lids in _tiny_saliency_setups():
        for p, sal in zip(prompts, saliency_matrices(model, prompts, lids)):
            for name, I in (("its saliency", sal), ("random matrices", torch.rand(sal.shape, generator=gen).tril())):
                ref = flow_scores(I[None], [p])[0]
                _assert_matches(fn(I, p), ref, f"{fn.__name__} on the tiny {kind} model ({len(p)}-token prompt, "
                                f"{name}; label positions {p.label_pos}, q={p.q})", ("layer", "flow (S_wp, S_pq, S_ww)"),
                                rtol=1e-4, mistakes=lambda: _flow_mistakes(I, p))
    print(f"✓ {fn.__name__} matches the reference (flow_scores) on 3 tiny models")
