"""Notebook 04's exercises: one layer's re-weighting edit, and the re-weighted label logits of a whole model, each
checked against :mod:`helpers.experiments.reweighting` on random patterns and the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import torch

from helpers.core.prompts import Demo, Prompt
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, tiny_sst2_cases
from helpers.experiments.reweighting import reweighted_label_logits_reference

__all__ = ["check_reweight_pattern", "check_reweighted_label_logits"]


def _tiny_cases():
    """One small SST-2 prompt (four demonstrations) and a seeded beta on a tiny random model of each
    architecture (:func:`helpers.exercises.tiny.tiny_sst2_cases`)."""
    demos = [Demo("a truly great film", 1), Demo("dull and far too long", 0), Demo("I smiled all the way", 1),
             Demo("boring", 0)]
    for kind, model, prompt, lids in tiny_sst2_cases(demos, "a film to remember"):
        beta = torch.randn(model.cfg.n_layers, model.cfg.n_heads, prompt.n_demos,
                           generator=torch.Generator().manual_seed(0))
        yield kind, model, prompt, beta, lids


@grader
def check_reweight_pattern(fn) -> None:
    """Check a reader's ``fn(pattern, q, label_pos, beta_l) -> pattern`` (one layer's re-weighting edit) on random
    causal patterns of a few shapes. Raises :class:`CheckFailed` naming the likely mistake; prints one line."""
    gen = torch.Generator().manual_seed(0)
    name = getattr(fn, "__name__", "your function")
    for heads, n, label_pos in ((2, 7, [2, 4]), (3, 10, [2, 5, 8]), (1, 5, [3])):
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        pattern = torch.rand(1, heads, n, n, generator=gen).masked_fill(~causal, 0.0)
        pattern = pattern / pattern.sum(-1, keepdim=True)
        beta = torch.randn(heads, len(label_pos), generator=gen)
        q = n - 1

        def edit(factor=None, row=q, cols=label_pos, renorm=False, every_row=False):
            out = pattern.clone()
            f = torch.exp(beta) if factor is None else factor
            if every_row:
                out[0, :, :, cols] *= f[:, None, :]
            else:
                out[0, :, row, cols] *= f
            if renorm:
                out[0, :, q] /= out[0, :, q].sum(-1, keepdim=True)
            return out

        want = edit()
        got = fn(pattern.clone(), q, list(label_pos), beta.clone())
        what = f"{name} on a pattern [1, {heads}, {n}, {n}], q = {q}, label positions {label_pos}"
        if got is None:
            raise CheckFailed(f"{what}: your function returned None; return the pattern")
        got = torch.as_tensor(got).detach().float()
        if tuple(got.shape) != tuple(want.shape):
            raise CheckFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}: return the whole "
                              "pattern, edited")
        if torch.allclose(got, want, atol=1e-6, rtol=1e-5):
            continue
        cause = likely_mistake(got, [
            ("Nothing changed: multiply the entries in place (or return the edited copy).", lambda: pattern),
            ("You multiplied by beta itself: the factor is exp(beta).", lambda: edit(factor=beta)),
            ("You renormalised the row: leave the other entries as they are (the row need not sum to 1).",
             lambda: edit(renorm=True)),
            ("You scaled the row before q: the row to change is q's.", lambda: edit(row=q - 1)),
            ("You scaled every row's label columns: only the row at q changes.", lambda: edit(every_row=True)),
            ("Your columns are one after the label positions: use label_pos as it is.",
             lambda: edit(cols=[p + 1 for p in label_pos])),
        ], atol=1e-6, rtol=1e-5)
        raise CheckFailed(f"{what}: differs by up to {(got - want).abs().max():.3g}. "
                          + (cause or "Entries (q, label_pos[i]) of every head h times exp(beta_l[h, i]); nothing "
                             "else changes."))
    print(f"✓ {name} re-weights exactly the query row's label columns on 3 patterns")


def _reweighting_mistakes(model, prompt: Prompt, beta, label_ids):
    """Typical wrong versions of the by-hand re-weighting, each with its likely cause."""
    def run(factor=None, q_shift=0, renormalise=False, layers=None, every_row=False, pos_shift=0):
        scale = torch.exp(beta) if factor is None else factor
        pos = [x + pos_shift for x in prompt.label_pos]

        def reweight(pattern, hook):
            rows = slice(None) if every_row else prompt.q + q_shift
            pattern[0, :, rows, pos] = pattern[0, :, rows, pos] * (scale[hook.layer()][:, None] if every_row
                                                                  else scale[hook.layer()])
            if renormalise:
                pattern[0, :, prompt.q] /= pattern[0, :, prompt.q].sum(-1, keepdim=True)
            return pattern

        where = range(model.cfg.n_layers) if layers is None else layers
        with torch.inference_mode():
            out = model.run_with_hooks(prompt.tokens[None],
                                       fwd_hooks=[(f"blocks.{l}.attn.hook_pattern", reweight) for l in where])
        return out[0, prompt.q, list(label_ids)]

    L = model.cfg.n_layers
    return [
        ("You multiplied by beta itself: the factor is exp(beta) (beta = 0 leaves the attention unchanged).",
         lambda: run(factor=beta)),
        ("You renormalised the row after scaling it: the paper's re-weighting leaves the other entries as they "
         "are, so the row need not sum to 1.", lambda: run(renormalise=True)),
        ("You re-weighted the row before q: the row to change is the query's, prompt.q.", lambda: run(q_shift=-1)),
        ("You re-weighted every row that reads a label word: only the row at q changes.",
         lambda: run(every_row=True)),
        ("Your columns are one after the label words: use prompt.label_pos as it is.", lambda: run(pos_shift=1)),
        ("Only the first layer is re-weighted: hook every layer's hook_pattern, with that layer's beta.",
         lambda: run(layers=[0])),
        ("Only the last layer is re-weighted: hook every layer's hook_pattern, with that layer's beta.",
         lambda: run(layers=[L - 1])),
    ]


@grader
def check_reweighted_label_logits(fn) -> None:
    """Check a reader's ``fn(model, prompt, beta, label_ids) -> [n_classes]`` (label logits at q with the
    attention from q to label position i multiplied by ``exp(beta[l, h, i])``) against
    :func:`reweighted_label_logits_reference` on tiny random models of three architectures (learned positions,
    rotary, grouped-query). Raises ``AssertionError`` saying what differs; prints one line when all match."""
    for kind, model, prompt, beta, lids in _tiny_cases():
        want = reweighted_label_logits_reference(model, prompt, beta, lids)
        got = torch.as_tensor(fn(model, prompt, beta, lids)).detach().float().cpu().reshape(-1)
        if got.shape != want.shape:
            raise CheckFailed(f"tiny {kind} model: expected the {len(lids)} label logits at q, got shape "
                                 f"{tuple(got.shape)}")
        if torch.allclose(got, want, atol=1e-4, rtol=1e-4):
            continue
        plain = reweighted_label_logits_reference(model, prompt, torch.zeros_like(beta), lids)
        hint = ""
        if torch.allclose(got, plain, atol=1e-4, rtol=1e-4):
            hint = (" Yours equals the run without re-weighting: does the hook change the pattern it returns, in "
                    "every layer's hook_pattern?")
        else:
            found = likely_mistake(got, _reweighting_mistakes(model, prompt, beta, lids))
            hint = f" {found}" if found else ""
        raise CheckFailed(f"tiny {kind} model: yours {[round(x, 4) for x in got.tolist()]}, reference "
                             f"{[round(x, 4) for x in want.tolist()]} (without re-weighting: "
                             f"{[round(x, 4) for x in plain.tolist()]}). The reference multiplies pattern[q, p_i] "
                             f"(q = {prompt.q}, p = {prompt.label_pos}) by exp(beta[layer, head, i]) after the "
                             f"softmax, every other entry unchanged, and does not renormalise the row.{hint}")
    print(f"✓ re-weighted label logits match the reference on {len(TINY_KINDS)} tiny models "
          f"({', '.join(TINY_KINDS)})")
