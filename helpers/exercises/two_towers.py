"""Notebook 07's exercise (b): a head's value-output vectors through the unembedding, checked against
:func:`helpers.experiments.two_towers.value_outputs` on the tiny random models (:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.exercises.grading import compare_to_reference, grader
from helpers.exercises.tiny import tiny_check_sets
from helpers.experiments.two_towers import value_outputs

__all__ = ["check_value_output_logit_minus"]


def _value_output_mistakes(model, cache, layer: int, head: int, positions, label_ids, want):
    """Typical wrong versions of the by-hand value-output logit minus, each with its likely cause."""
    n_kv = model.cfg.n_key_value_heads or model.cfg.n_heads
    group = model.cfg.n_heads // n_kv
    foo_bar = model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]]
    layer_norm = type(model.ln_final).__name__.startswith("LayerNorm")

    def raw(kv_head):
        return cache[f"blocks.{layer}.attn.hook_v"][0, positions, kv_head] @ model.W_O[layer, head]

    def final(x, centre=True):
        if layer_norm and centre:
            x = x - x.mean(-1, keepdim=True)
        return x / cache["ln_final.hook_scale"][0, -1] * model.ln_final.w

    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, -1, positions]
    return [
        ("The key/value head is wrong: query head h reads key/value head h // (n_heads // n_key_value_heads), "
         "not h % n_key_value_heads.", lambda: final(raw(head % n_kv)) @ foo_bar if group > 1 else None),
        ("No final norm: the vector passes ln_final (its scale frozen at the last position) before W_U.",
         lambda: raw(head // group) @ foo_bar),
        ("The final LayerNorm is not centred: a LayerNorm subtracts the mean before it scales.",
         lambda: final(raw(head // group), centre=False) @ foo_bar if layer_norm else None),
        ("You weighted by the attention at q: the value-output vector is per unit attention (no pattern).",
         lambda: pattern * want),
        ("The logit minus is bar minus foo: take W_U[:, foo] - W_U[:, bar] (label_ids[0] minus label_ids[1]).",
         lambda: -want),
    ]


@grader
def check_value_output_logit_minus(fn: Callable) -> None:
    """Check a reader's ``fn(model, cache, layer, head, positions, label_ids) -> [position]`` (the value-output
    logit minus of one head at the given source positions, per unit attention, read at the last position; ``cache``
    from ``model.run_with_cache``) against :func:`value_outputs` at the label positions of two prompts, for three
    heads, on each tiny architecture (:func:`helpers.exercises.tiny.tiny_check_sets`). Raises an AssertionError
    that says what differs; prints one line when everything matches."""
    name = getattr(fn, "__name__", "your function")
    for kind, model, ps in tiny_check_sets(k_per_class=2):
        L, H = model.cfg.n_layers, model.cfg.n_heads
        heads = [(0, 1), (L // 2, H - 1), (L - 1, 2)]
        want = value_outputs(model, ps.prompts, ps.label_ids, heads, shared=False).vo_lm  # [prompt, head, demo]
        for i, p in enumerate(ps.prompts):
            with torch.inference_mode():
                _, cache = model.run_with_cache(p.tokens[None])
                for row, (l, h) in enumerate(heads):
                    got = fn(model, cache, l, h, p.label_pos, ps.label_ids)
                    compare_to_reference(got, want[i, row], f"{name} on the tiny {kind} model, prompt {i}, head "
                                         f"({l}, {h})", "Take v at each position from the head's key/value head "
                                         "(grouped-query attention: head // (n_heads // n_key_value_heads)), times "
                                         "W_O[layer, head], no attention weight; then the norms' linear parts with "
                                         "their scales frozen at the last position (a LayerNorm also centres), then "
                                         "W_U[:, foo] - W_U[:, bar].",
                                         mistakes=lambda: _value_output_mistakes(model, cache, l, h, p.label_pos,
                                                                                 ps.label_ids, want[i, row]))
    print(f"✓ {name} matches the reference on 3 tiny models")
