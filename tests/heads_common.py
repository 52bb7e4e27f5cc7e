"""Helpers shared by the paper-B tests (test_unrelated, test_core_heads, test_incontext_heads, test_two_towers,
test_head_biases, test_heads_runs)."""

from __future__ import annotations

import torch

from helpers.core.predict import logits_at
from helpers.core.unrelated import make_set

ATOL = 2e-4
SHARED_ATOL = 1e-4


def _set(model, ut, n=3, k=1, seed=42):
    return make_set(model, ut, seed, n, k)


def _final_logprobs(model, toks, q, hooks=()):
    return logits_at(model, toks[None], torch.tensor([q]), hooks)[0].log_softmax(-1)


def _shared_vs_full(model, ps, factory=None, prefix_hooks=()):
    from helpers.core.predict import predict
    from helpers.core.prefix_runs import predict_shared

    full = predict(model, ps.prompts, ps.label_ids, 2, hooks=factory)
    shared = predict_shared(model, ps.prompts, ps.label_ids, 2, hooks=factory, prefix_hooks=prefix_hooks)
    return full, shared


def _assert_same_predictions(a, b):
    assert torch.allclose(a.label_logits, b.label_logits, atol=SHARED_ATOL), (a.label_logits - b.label_logits).abs().max()
    assert torch.equal(a.pred, b.pred)


def _same(a, b):
    """Equality of run results (dataclasses of tensors, dicts, lists, floats)."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)


# ------------------------------------------------------------------ notebook 07's by-hand solutions, read from the notebook


def _notebook_solutions(stem: str) -> dict:
    """The functions of a notebook's ``solution`` cells, executed from its source, so the tests check the very
    code a reader sees (and nothing drifts between a copy here and the notebook)."""
    from pathlib import Path

    import jupytext

    nb = jupytext.read(Path(__file__).resolve().parent.parent / "notebooks" / f"{stem}.py")
    ns: dict = {}
    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []):
            exec(compile(cell.source, f"{stem}.py (solution cell)", "exec"), ns)
    return ns


_SOLUTIONS = _notebook_solutions("07_incontext_heads")
head_ablation_drop = _SOLUTIONS["head_ablation_drop"]
value_output_logit_minus = _SOLUTIONS["value_output_logit_minus"]
