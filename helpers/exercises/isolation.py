"""Notebook 02's exercises: blocking the label rows of a score tensor, and the label words isolated in chosen
layers of a whole model, each checked against :mod:`helpers.experiments.isolation` on causal score tensors and the
tiny random models (:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import torch

from helpers.core.predict import predict
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.isolation import block_rows, label_isolation

__all__ = ["check_block_label_rows", "check_isolated_label_logits"]


def _blocked_reference(scores: torch.Tensor, label_pos, keys=lambda p: slice(0, p), shift: int = 0,
                       column: bool = False) -> torch.Tensor:
    out = scores.clone()
    for p in label_pos:
        if column:
            out[:, :, p + 1:, p] = float("-inf")
        else:
            out[:, :, p + shift, keys(p + shift)] = float("-inf")
    return out


@grader
def check_block_label_rows(fn) -> None:
    """Check a by-hand ``fn(scores, label_pos) -> scores`` (every score from a label position p to a key j < p set
    to -inf, nothing else changed) on causal score tensors of a few shapes, against the rows
    :func:`label_isolation` blocks. Raises :class:`CheckFailed` naming the likely mistake, or prints one line."""
    gen = torch.Generator().manual_seed(0)
    name = getattr(fn, "__name__", "your function")
    for batch, heads, n, label_pos in ((1, 2, 6, [2, 4]), (2, 3, 9, [3, 6, 8]), (1, 1, 5, [1])):
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = torch.randn(batch, heads, n, n, generator=gen).masked_fill(~causal, float("-inf"))
        rows = torch.zeros(batch, n, dtype=torch.bool)
        rows[:, label_pos] = True
        want = block_rows(scores, rows)  # what label_isolation's hooks do
        got = fn(scores.clone(), list(label_pos))
        what = f"{name} on scores [{batch}, {heads}, {n}, {n}] with label positions {label_pos}"
        if got is None:
            raise CheckFailed(f"{what}: your function returned None; return the scores")
        got = torch.as_tensor(got)
        if tuple(got.shape) != tuple(want.shape):
            raise CheckFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}: return the whole "
                              "scores tensor, edited")
        if torch.equal(got, want):
            continue
        mistakes = [
            ("You blocked the diagonal too (j = p): that row is then all -inf, which has no softmax. Block only "
             "the keys before p.", lambda: _blocked_reference(scores, label_pos, keys=lambda p: slice(0, p + 1))),
            ("Your rows are one after the label positions: use label_pos as it is.",
             lambda: _blocked_reference(scores, [p for p in label_pos if p + 1 < n], shift=1)),
            ("Your rows are one before the label positions: use label_pos as it is.",
             lambda: _blocked_reference(scores, label_pos, shift=-1)),
            ("You blocked a column (what later rows read from p): isolation blocks row p, what p reads.",
             lambda: _blocked_reference(scores, label_pos, column=True)),
            ("Only the first label position is blocked: block every position in label_pos.",
             lambda: _blocked_reference(scores, label_pos[:1])),
            ("Only the first head (or batch entry) is blocked: block in every batch entry and head.",
             lambda: _only_first(scores, label_pos)),
        ]
        cause = next((m for m, f in mistakes if torch.equal(got, f())), None)
        diff = (got != want) & ~(got.isinf() & want.isinf() & (got.sign() == want.sign()))
        b, h, i, j = (int(x) for x in diff.nonzero()[0])
        raise CheckFailed(f"{what}: at [batch {b}, head {h}, row {i}, key {j}] yours {float(got[b, h, i, j]):.4g}, "
                          f"expected {float(want[b, h, i, j]):.4g}. " + (cause or "Row p (each label position), "
                          "keys j < p, -inf; every other score unchanged."))
    print(f"✓ {name} blocks exactly the label rows' earlier keys on 3 score tensors")


def _only_first(scores: torch.Tensor, label_pos) -> torch.Tensor:
    out = scores.clone()
    for p in label_pos:
        out[0, 0, p, :p] = float("-inf")
    return out


@grader
def check_isolated_label_logits(fn) -> None:
    """Check a by-hand ``fn(model, prompt, label_ids, layers) -> logits`` (the label-restricted logits at q,
    ``[n_labels]``, with every label position p_k blocked from all j < p_k in ``layers``) against
    :func:`label_isolation` through :func:`helpers.core.predict.predict`, on tiny random models of the three
    architectures (two SST-2 prompts each; isolated in the first layer, the last layer, and every layer).
    Raises an AssertionError that says what differs, or prints one line."""
    import warnings

    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    for kind in TINY_KINDS:
        model = tiny_model(kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, "sst2", seed=42, n_test=2)
        L = model.cfg.n_layers
        base = predict(model, s.prompts, s.label_ids).label_logits
        for layers in ([0], [L - 1], list(range(L))):
            ref = predict(model, s.prompts, s.label_ids, hooks=label_isolation(layers)).label_logits
            for i, p in enumerate(s.prompts):
                with torch.no_grad():
                    mine = fn(model, p, s.label_ids, layers)
                what = (f"{fn.__name__} on the tiny {kind} model, layers {layers} ({len(p)}-token prompt, "
                        f"label positions {p.label_pos}, q={p.q})")
                if not isinstance(mine, torch.Tensor):
                    raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(mine).__name__}")
                mine = mine.detach().float().cpu()
                if tuple(mine.shape) != tuple(ref[i].shape):
                    raise CheckFailed(f"{what}: shape {tuple(mine.shape)}, expected {tuple(ref[i].shape)} "
                                         "(one logit per label word, at q)")
                if not torch.allclose(mine, ref[i], rtol=1e-4, atol=1e-4):
                    if torch.allclose(mine, base[i], rtol=1e-4, atol=1e-4):
                        cause = "These are the unmodified logits: nothing was blocked."
                    else:
                        cause = _isolation_mistake(model, p, s.label_ids, layers, mine)
                    raise CheckFailed(f"{what}: yours {[round(x, 4) for x in mine.tolist()]}, reference "
                                      f"{[round(x, 4) for x in ref[i].tolist()]}. {cause}")
    print(f"✓ {fn.__name__} matches the reference (label_isolation) on 3 tiny models")


# Typical wrong versions of the by-hand isolation, each with what went wrong: a function whose logits equal one
# of these is told its likely cause (each is tested against its wrong version in tests/test_isolation.py).
_ISOLATION_MISTAKES = {
    "diagonal": "You blocked the diagonal too (the label word's own key, j = p): that row is then all -inf, "
                "which has no softmax. TransformerLens turns the NaN it gives into zeros, so the label word read "
                "nothing at all (finite, wrong logits, no error). Block j < p only: scores[:, :, p, :p].",
    "after": "You blocked the row only from p + 1 on, or one position off: the rows to block are the label "
             "positions themselves (prompt.label_pos), each over its keys j < p.",
    "before": "Your rows are one position before the label words: use prompt.label_pos as it is (the position "
              "of each label word's token), not p - 1.",
    "column": "You blocked attention to the label words (a column: scores[..., :, p]); isolation blocks what "
              "each label word reads (its row: scores[..., p, :p]).",
    "every_layer": "You blocked in every layer: isolate only in the layers passed as `layers`.",
    "pattern": "You zeroed the attention pattern after the softmax, so the row no longer sums to 1. Set the "
               "scores to -inf before the softmax (hook_attn_scores) and let it renormalise the row.",
    "one_label": "Only some label words are isolated: block the row of every position in prompt.label_pos.",
}


def _isolation_mistake(model, prompt, label_ids, layers, mine: torch.Tensor) -> str:
    """The likely cause of a wrong by-hand isolation: the typical wrong version whose logits ``mine`` equals, or a
    general pointer."""
    def scores_hook(rows, keys):
        def hook(scores, hook):
            for p in rows:
                scores[:, :, p, keys(p)] = float("-inf")
            return scores
        return hook

    def pattern_hook(scores, hook):
        for p in prompt.label_pos:
            scores[:, :, p, :p] = 0.0
        return scores

    pos, last = list(prompt.label_pos), len(prompt) - 1

    def column_hook(scores, hook):
        for p in pos:
            scores[:, :, p + 1:, p] = float("-inf")
        return scores

    variants = {
        "diagonal": ("attn_scores", layers, scores_hook(pos, lambda p: slice(0, p + 1))),
        "after": ("attn_scores", layers, scores_hook([p + 1 for p in pos if p + 1 <= last], lambda p: slice(0, p))),
        "before": ("attn_scores", layers, scores_hook([p - 1 for p in pos], lambda p: slice(0, p))),
        "column": ("attn_scores", layers, column_hook),
        "every_layer": ("attn_scores", range(model.cfg.n_layers), scores_hook(pos, lambda p: slice(0, p))),
        "pattern": ("pattern", layers, pattern_hook),
        "one_label": ("attn_scores", layers, scores_hook(pos[:1], lambda p: slice(0, p))),
    }

    def run(point, where, hook):
        with torch.no_grad():
            out = model.run_with_hooks(prompt.tokens[None], fwd_hooks=[(f"blocks.{l}.attn.hook_{point}", hook)
                                                                        for l in where])
        return out[0, prompt.q, label_ids]

    found = likely_mistake(mine, [(_ISOLATION_MISTAKES[name], lambda v=v: run(*v)) for name, v in variants.items()
                                  if not (name == "every_layer" and len(layers) == model.cfg.n_layers)])
    if found:
        return found
    return ("Check the rows (each label position p in prompt.label_pos), the keys (j < p, the diagonal kept), "
            "the layers (only `layers`), and that you set scores before the softmax.")
