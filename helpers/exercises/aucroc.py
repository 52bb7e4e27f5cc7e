"""Notebook 03's exercises: what q reads in each layer, and its attention to each class's label words, each checked
against :mod:`helpers.experiments.aucroc` on the tiny random models (:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import torch

from helpers.core.prompts import Demo, Prompt
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, tiny_sst2_cases
from helpers.experiments.aucroc import label_attention_reference

__all__ = ["check_attention_at_q", "check_label_attention"]


def _tiny_cases():
    """One small SST-2 prompt (two demonstrations per class, so same-class positions add up) on a tiny random
    model of each architecture (:func:`helpers.exercises.tiny.tiny_sst2_cases`)."""
    demos = [Demo("a truly great film", 1), Demo("dull and far too long", 0), Demo("I smiled all the way", 1),
             Demo("boring", 0)]
    return tiny_sst2_cases(demos, "a film to remember", TINY_KINDS)


def _label_attention_mistakes(model, prompt: Prompt, n_classes: int):
    """Typical wrong versions of the by-hand attention from q to each class's label words, with their causes."""
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
    pat = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float().cpu()  # [l, h, i, j]

    def at(q_shift: int = 0, pos_shift: int = 0, transpose: bool = False):
        a = pat.transpose(-1, -2) if transpose else pat
        rows = a[:, :, prompt.q + q_shift].sum(1)  # [layer, key]
        out = torch.zeros(model.cfg.n_layers, n_classes)
        for pos, c in zip(prompt.label_pos, prompt.label_class):
            out[:, c] += rows[:, pos + pos_shift]
        return out

    return [
        ("You read the row before q: the query position is prompt.q (the last token).", lambda: at(q_shift=-1)),
        ("Your columns are the tokens before the label words: use prompt.label_pos as it is.",
         lambda: at(pos_shift=-1)),
        ("Your columns are the tokens after the label words: use prompt.label_pos as it is.",
         lambda: at(pos_shift=1)),
        ("This is attention from the label words to q (the pattern transposed): the row is q, the columns the "
         "label positions (pattern[..., q, p]).", lambda: at(transpose=True)),
    ]


@grader
def check_attention_at_q(fn) -> None:
    """Check a reader's ``fn(model, prompt) -> [n_layers, seq]`` (each layer's attention from q to every position,
    summed over heads) on tiny random models of three architectures. Raises :class:`CheckFailed` naming the likely
    mistake; prints one line when all match."""
    for kind, model, prompt, _ in _tiny_cases():
        with torch.inference_mode():
            _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
        pat = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float().cpu()  # [l, h, i, j]
        want = pat[:, :, prompt.q].sum(1)
        got = torch.as_tensor(fn(model, prompt)).detach().float().cpu()
        if got.shape != want.shape:
            per_head = tuple(got.shape) == tuple(pat[:, :, prompt.q].shape)
            raise CheckFailed(f"tiny {kind} model: expected shape [n_layers, seq] = {tuple(want.shape)}, got "
                              f"{tuple(got.shape)}" + (": sum over the heads axis." if per_head else "."))
        if torch.allclose(got, want, atol=1e-5, rtol=1e-4):
            continue
        H = model.cfg.n_heads
        cause = likely_mistake(got, [
            (f"You averaged over the {H} heads: sum them.", lambda: want / H),
            ("You read the row before q: the query position is prompt.q.", lambda: pat[:, :, prompt.q - 1].sum(1)),
            ("This is the column of q (what later positions read from q): take the row of q, what q reads.",
             lambda: pat[:, :, :, prompt.q].sum(1)),
        ], atol=1e-5)
        layer = int((got - want).abs().amax(-1).argmax())
        raise CheckFailed(f"tiny {kind} model, layer {layer}: yours {[round(x, 4) for x in got[layer].tolist()]}, "
                          f"reference {[round(x, 4) for x in want[layer].tolist()]}. "
                          + (cause or "Row prompt.q of each layer's pattern, summed over heads."))
    print(f"✓ attention at q matches the reference on {len(TINY_KINDS)} tiny models ({', '.join(TINY_KINDS)})")


@grader
def check_label_attention(fn) -> None:
    """Check a reader's ``fn(model, prompt, n_classes) -> [n_layers, n_classes]`` against
    :func:`label_attention` on tiny random models of three architectures (learned positions, rotary,
    grouped-query). Raises ``AssertionError`` saying what differs; prints one line when all match."""
    for kind, model, prompt, lids in _tiny_cases():
        want = label_attention_reference(model, prompt, lids)
        got = torch.as_tensor(fn(model, prompt, len(lids))).detach().float().cpu()
        if got.shape != want.shape:
            raise CheckFailed(f"tiny {kind} model: expected shape [n_layers, n_classes] = {tuple(want.shape)}, "
                                 f"got {tuple(got.shape)}")
        if torch.allclose(got, want, atol=1e-5, rtol=1e-4):
            continue
        H = model.cfg.n_heads
        hint = ""
        if torch.allclose(got * H, want, atol=1e-5, rtol=1e-4):
            hint = f" Yours is the reference divided by {H} (the number of heads): sum over heads, do not average."
        elif torch.allclose(got.sum(-1), want.sum(-1), atol=1e-5, rtol=1e-4):
            hint = " The total over classes matches: check which class each label position adds to (label_class)."
        else:
            hint = " " + (likely_mistake(got, _label_attention_mistakes(model, prompt, len(lids)), atol=1e-5)
                          or "Check the row (q), the columns (the label positions), the sum over heads and the "
                             "class each position adds to.")
        layer = int((got - want).abs().amax(-1).argmax())
        raise CheckFailed(f"tiny {kind} model, layer {layer}: yours {[round(x, 5) for x in got[layer].tolist()]}, "
                             f"reference {[round(x, 5) for x in want[layer].tolist()]} (the attention row at q = "
                             f"{prompt.q}, summed over heads, at the label positions {prompt.label_pos} of classes "
                             f"{prompt.label_class}).{hint}")
    print(f"✓ label attention at q matches the reference on {len(TINY_KINDS)} tiny models ({', '.join(TINY_KINDS)})")
