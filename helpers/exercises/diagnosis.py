"""Notebook 06's exercises: the query and the keys of one layer, and the projections of the class keys on the
query, each checked against :mod:`helpers.experiments.diagnosis` on the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

import torch
from einops import einsum

from helpers.core.prompts import Demo
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import tiny_sst2_cases
from helpers.experiments.diagnosis import collect_qk, key_projections

__all__ = ["check_query_and_keys", "check_anchor_key_projections"]


def _tiny_cases():
    """(name, model, prompt, label ids): tiny learned-position, rotary and grouped-query models; two SST-2 classes,
    one of them with two demonstrations (its key is their mean)."""
    demos = [Demo("a truly great film", 1), Demo("dull and far too long", 0), Demo("I loved every minute", 1)]
    return tiny_sst2_cases(demos, Demo("what a waste of time", 0))


def _query_and_keys(model, prompt, layer: int, q_hook="hook_q", k_hook="hook_k", q_shift=0, tile=False,
                    repeat=True):
    names = [f"blocks.{layer}.attn.{q_hook}", f"blocks.{layer}.attn.{k_hook}"]
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=names)
    q, k = cache[names[0]][0, prompt.q + q_shift], cache[names[1]][0]
    if getattr(model.cfg, "use_qk_norm", False) and q_hook == "hook_q":
        attn = model.blocks[layer].attn
        q, k = attn.q_norm(q), attn.k_norm(k)
    g = model.cfg.n_heads // k.shape[1]
    if repeat:
        k = k.repeat(1, g, 1) if tile else k.repeat_interleave(g, dim=1)
    return q.float().cpu(), k.float().cpu()


@grader
def check_query_and_keys(fn, atol: float = 1e-5) -> None:
    """Check a reader's ``fn(model, prompt, layer) -> (q [head, d_head], k [pos, head, d_head])`` on tiny
    learned-position, rotary and grouped-query models, at every layer. Raises :class:`CheckFailed` naming the
    likely mistake; prints one line."""
    name = getattr(fn, "__name__", "your function")
    for kind, model, prompt, _ in _tiny_cases():
        for layer in range(model.cfg.n_layers):
            want_q, want_k = _query_and_keys(model, prompt, layer)
            with torch.inference_mode():
                out = fn(model, prompt, layer)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise CheckFailed(f"{name} on the tiny {kind} model: return two tensors, (q, k)")
            got_q, got_k = (torch.as_tensor(x).detach().float().cpu() for x in out)
            what = f"{name} on the tiny {kind} model, layer {layer}"
            for label, got, want in (("q", got_q, want_q), ("k", got_k, want_k)):
                if got.shape != want.shape:
                    hint = (f" Repeat each of the {model.cfg.n_key_value_heads} key/value heads for the query heads "
                            f"that read it (to {model.cfg.n_heads})." if label == "k" and got.ndim == 3
                            and got.shape[1] != want.shape[1] else "")
                    raise CheckFailed(f"{what}: {label} has shape {tuple(got.shape)}, expected "
                                      f"{tuple(want.shape)}.{hint}")
            if torch.allclose(got_q, want_q, atol=atol, rtol=1e-4) and torch.allclose(got_k, want_k, atol=atol,
                                                                                      rtol=1e-4):
                continue
            variants = [
                ("Your query and keys are after rotary (hook_rot_q/hook_rot_k): read them before it.",
                 lambda: _query_and_keys(model, prompt, layer, "hook_rot_q", "hook_rot_k")),
                ("Your query is one position early: read it at prompt.q.",
                 lambda: _query_and_keys(model, prompt, layer, q_shift=-1)),
                ("The key heads are tiled (repeat): each key/value head serves a block of consecutive query heads "
                 "(repeat_interleave).", lambda: _query_and_keys(model, prompt, layer, tile=True)),
            ]
            cause = None
            for message, compute in variants:
                try:
                    vq, vk = compute()
                except KeyError:  # no rotary hooks on a learned-position model
                    continue
                if torch.allclose(got_q, vq, atol=atol, rtol=1e-4) and torch.allclose(got_k, vk, atol=atol, rtol=1e-4):
                    cause = message
                    break
            wrong = "q" if not torch.allclose(got_q, want_q, atol=atol, rtol=1e-4) else "k"
            raise CheckFailed(f"{what}: {wrong} differs from the reference. " + (cause or "hook_q at prompt.q and "
                              "hook_k at every position (before rotary), q/k norm where the model has one, each key "
                              "head repeated for its query heads."))
    print(f"✓ {name} matches the cached query and keys on 3 tiny models")


def _key_projection_mistakes(model, prompt, layer: int, n_classes: int):
    """Typical wrong versions of the by-hand key projections at ``layer``, each with its likely cause."""
    attn, H = model.blocks[layer].attn, model.cfg.n_heads

    def proj(q_hook="hook_q", k_hook="hook_k", q_shift=0, k_shift=0, reduce="mean", tile=False, scale=1.0):
        names = [f"blocks.{layer}.attn.{q_hook}", f"blocks.{layer}.attn.{k_hook}"]
        with torch.inference_mode():
            _, cache = model.run_with_cache(prompt.tokens[None], names_filter=names)
        q, k = cache[names[0]][0, prompt.q + q_shift], cache[names[1]][0]
        if getattr(model.cfg, "use_qk_norm", False) and q_hook == "hook_q":
            q, k = attn.q_norm(q), attn.k_norm(k)
        g = H // k.shape[1]
        k = k.repeat(1, g, 1) if tile else k.repeat_interleave(g, dim=1)
        pos, cls = torch.tensor(prompt.label_pos) + k_shift, torch.tensor(prompt.label_class)
        keys = torch.stack([getattr(k[pos[cls == c]], reduce)(0) for c in range(n_classes)])
        return einsum(q, keys, "head d, classes head d -> head classes") * scale

    d_head = model.cfg.d_head
    return [
        ("Your queries and keys are after rotary (hook_rot_q/hook_rot_k): take them before it (hook_q/hook_k), "
         "where they do not depend on position.", lambda: proj("hook_rot_q", "hook_rot_k")),
        ("Your keys are after rotary (hook_rot_k): take them before it (hook_k).", lambda: proj(k_hook="hook_rot_k")),
        ("Your keys are at the tokens after the label words: use prompt.label_pos as it is.",
         lambda: proj(k_shift=1)),
        ("Your keys are at the tokens before the label words: use prompt.label_pos as it is.",
         lambda: proj(k_shift=-1)),
        ("Your query is one position early: read it at prompt.q.", lambda: proj(q_shift=-1)),
        ("The class keys are summed over their demonstrations: take their mean.", lambda: proj(reduce="sum")),
        ("The key heads are tiled (repeat): each key/value head serves a block of consecutive query heads "
         "(repeat_interleave).", lambda: proj(tile=True)),
        (f"These are scaled by 1/sqrt(d_head) (= 1/{d_head ** 0.5:g}): return the plain dot products.",
         lambda: proj(scale=d_head ** -0.5)),
    ]


@grader
def check_anchor_key_projections(fn, atol: float = 1e-4) -> None:
    """Check ``fn(model, prompt, layer, n_classes) -> [head, classes]`` (the notebook's by-hand projections of
    the class keys on the query at q) against :func:`key_projections` of :func:`collect_qk` on tiny
    learned-position, rotary and grouped-query models, at every layer. Raises an AssertionError saying what
    differs."""
    for kind, model, prompt, lids in _tiny_cases():
        H = model.cfg.n_heads
        vecs = collect_qk(model, [prompt], lids)
        for layer in range(model.cfg.n_layers):
            ref = key_projections(vecs, layer, H)[0]
            with torch.inference_mode():
                mine = torch.as_tensor(fn(model, prompt, layer, len(lids))).detach().float().cpu()
            if mine.shape != ref.shape:
                raise CheckFailed(f"tiny {kind} model, layer {layer}: expected shape {tuple(ref.shape)} "
                                     f"(head, classes), got {tuple(mine.shape)}")
            if not torch.allclose(mine, ref, atol=atol, rtol=1e-4):
                cause = likely_mistake(mine, _key_projection_mistakes(model, prompt, layer, len(lids)), atol=atol)
                raise CheckFailed(
                    f"tiny {kind} model, layer {layer}: projections differ from the reference by up to "
                    f"{(mine - ref).abs().max():.2e} (head 0: {mine[0].numpy().round(4)} vs "
                    f"{ref[0].numpy().round(4)}). " + (cause or "Query at q and keys at the label positions, "
                    "before rotary (hook_q/hook_k, then q/k norm), each key head repeated for its query heads, "
                    "class keys averaged over their demonstrations?"))
    print("✓ anchor key projections match the reference (collect_qk) on 3 tiny models")
