"""Notebook 05's exercises: which scores an input may not read, and the input run against the pruned cache, each
checked against :mod:`helpers.experiments.compression` on a few prompt shapes and the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import torch

from helpers.core.prompts import Demo
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import tiny_sst2_cases
from helpers.experiments.compression import anchor_keep, hidden_anchor_reference, prefix_len, random_keep

__all__ = ["check_input_mask", "check_hidden_anchor_logits"]


def _tiny_cases():
    """(name, model, prompt, label ids) for the three tiny architectures: 3 SST-2 demonstrations and one input."""
    demos = [Demo("a truly great film", 1), Demo("dull and far too long", 0), Demo("I loved every minute", 1)]
    return tiny_sst2_cases(demos, Demo("what a waste of time", 0))


def _mask(n: int, p0: int, keep, rows_from: int | None = None, unkeep: bool = True, self_block: bool = False):
    blocked = torch.zeros(n, n, dtype=torch.bool)
    blocked[p0 if rows_from is None else rows_from:, :p0] = True
    if unkeep:
        blocked[p0 if rows_from is None else rows_from:, list(keep)] = False
    if self_block:
        blocked[p0:, p0:] = True
    return blocked


@grader
def check_input_mask(fn) -> None:
    """Check a reader's ``fn(n, p0, keep) -> [n, n]`` booleans (True where an input row reads a demonstration
    column that is not kept) on a few prompt shapes. Raises :class:`CheckFailed` naming the likely mistake."""
    name = getattr(fn, "__name__", "your function")
    for n, p0, keep in ((8, 5, [0, 2, 4]), (12, 9, [0, 3, 6, 8]), (6, 3, [0])):
        want = _mask(n, p0, keep)
        got = fn(n, p0, list(keep))
        what = f"{name}(n={n}, p0={p0}, keep={keep})"
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (n, n):
            raise CheckFailed(f"{what}: expected an [n, n] boolean tensor, got "
                              f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        got = got.bool()
        if torch.equal(got, want):
            continue
        variants = [
            ("You also blocked the demonstrations' own rows: only rows i >= p0 (the input) lose columns.",
             _mask(n, p0, keep, rows_from=0)),
            ("The kept columns are blocked too: unmark the columns in keep.", _mask(n, p0, keep, unkeep=False)),
            ("The input's rows are one off: they start at p0 (row p0 is the input's first token).",
             _mask(n, p0, keep, rows_from=p0 - 1)),
            ("The input's rows are one off: they start at p0 (row p0 is the input's first token).",
             _mask(n, p0, keep, rows_from=p0 + 1)),
            ("The input may not read itself: only demonstration columns (j < p0) are blocked.",
             _mask(n, p0, keep, self_block=True)),
            ("True and False are swapped: True marks what is blocked.", ~want),
        ]
        cause = next((m for m, v in variants if torch.equal(got, v)), None)
        i, j = (int(x) for x in (got != want).nonzero()[0])
        raise CheckFailed(f"{what}: at (row {i}, column {j}) yours {bool(got[i, j])}, expected {bool(want[i, j])}. "
                          + (cause or "True exactly at rows i >= p0 and columns j < p0 that are not in keep."))
    print(f"✓ {name} marks exactly the input's dropped demonstration columns on 3 prompt shapes")


def _hidden_anchor_mistakes(model, prompt, keep, label_ids):
    """Typical wrong versions of the by-hand Hidden_anchor, each with its likely cause."""
    p0, n, keep = prefix_len(prompt), len(prompt), list(keep)
    ids = list(label_ids)

    def masked(rows_from: int = None, keep_rows=keep, zero_kv: bool = False, mask: bool = True):
        blocked = torch.zeros(n, n, dtype=torch.bool)
        blocked[p0 if rows_from is None else rows_from:, :p0] = True
        blocked[:, keep_rows] = False
        idx = torch.tensor(keep_rows, dtype=torch.long)

        def only_kept(scores, hook):
            return scores.masked_fill(blocked, float("-inf"))

        def zero_others(x, hook):
            x = x.clone()
            kept = x[:, idx].clone()
            x[:, :p0] = 0.0
            x[:, idx] = kept
            return x

        hooks = [(f"blocks.{l}.attn.hook_attn_scores", only_kept) for l in range(model.cfg.n_layers)] if mask else []
        if zero_kv:
            hooks += [(f"blocks.{l}.attn.hook_{x}", zero_others) for l in range(model.cfg.n_layers) for x in "kv"]
        with torch.inference_mode():
            return model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q, ids]

    def compacted():
        tokens = torch.cat([prompt.tokens[keep], prompt.tokens[p0:]])
        with torch.inference_mode():
            return model(tokens[None])[0, -1, ids]

    before = sorted({max(k - 1, 0) for k in keep})
    after = sorted({k + 1 for k in keep if k + 1 < p0})
    return [
        ("The input still sees every demonstration position (full ICL): nothing was pruned.",
         lambda: masked(mask=False)),
        ("The other demonstration rows are zeroed but not masked: a zero key still gets a score of 0 and a share of "
         "the softmax. Set the input rows' scores to those positions to -inf (hook_attn_scores).",
         lambda: masked(zero_kv=True, mask=False)),
        ("You masked the demonstrations' own rows too: they must run as a normal prompt (the cache is built from "
         "the whole demonstration part); only the input's rows (>= p0) lose the other positions.",
         lambda: masked(rows_from=0)),
        ("Your kept positions are one before `keep`: use the positions in keep as they are.",
         lambda: masked(keep_rows=before)),
        ("Your kept positions are one after `keep`: use the positions in keep as they are.",
         lambda: masked(keep_rows=after)),
        ("You ran the kept tokens and the input as a new, shorter prompt: that moves them to new positions. "
         "Keep every position where it is and mask the others.", compacted),
    ]


@grader
def check_hidden_anchor_logits(fn, atol: float = 1e-4) -> None:
    """Check ``fn(model, prompt, keep, label_ids) -> [classes]`` (the notebook's by-hand Hidden_anchor) against
    :func:`hidden_anchor_reference` on tiny learned-position, rotary and grouped-query models, with the anchor
    positions and with a random draw (:func:`random_keep`). Raises an AssertionError that says what differs."""
    for kind, model, prompt, lids in _tiny_cases():
        for what, keep in (("anchor positions", anchor_keep(prompt)), ("a random draw", random_keep(prompt, 0))):
            with torch.inference_mode():
                mine = torch.as_tensor(fn(model, prompt, keep, lids)).detach().float().cpu().reshape(-1)
            ref = hidden_anchor_reference(model, prompt, keep, lids)
            if mine.shape != ref.shape:
                raise CheckFailed(f"tiny {kind} model, {what}: expected {ref.shape[0]} label logits (one per "
                                     f"class), got shape {tuple(mine.shape)}")
            if not torch.allclose(mine, ref, atol=atol, rtol=1e-4):
                cause = likely_mistake(mine, _hidden_anchor_mistakes(model, prompt, keep, lids), atol=atol) or (
                    "Does the input attend only to the kept rows, at its original positions, and read the logits "
                    "at q?")
                raise CheckFailed(f"tiny {kind} model, {what}: label logits {mine.numpy().round(4)} differ from "
                                  f"the pruned cache's {ref.numpy().round(4)} (max diff "
                                  f"{(mine - ref).abs().max():.2e}). {cause}")
    print("✓ hidden-anchor logits match the reference (pruned cache) on 3 tiny models")
