"""Which attention rows §2.2's isolation blocks, and the hooks that block them.

The experiment (:mod:`helpers.experiments.isolation`) isolates a set of positions r in chosen layers: each row r
keeps only its own key (:func:`block_rows`, applied at ``hook_attn_scores`` by :func:`isolation_hooks`). This module
says which rows: the label words of every demonstration (:func:`label_isolation`, :func:`label_prefix_hooks`), or
the random-word control, drawn as the authors drew it, per input and per layer (:func:`authors_positions`,
:func:`random_isolation`), or once per demonstration set (:func:`random_set_positions`, :func:`random_prefix_hooks`);
:mod:`helpers.experiments.isolation`'s docstring says how the two draws differ from each other and from the
authors' code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float

from helpers.core.predict import HookFactory
from helpers.core.prefix import shared_prefix_len
from helpers.core.prompts import Prompt

__all__ = [
    "block_rows",
    "isolation_hooks",
    "label_isolation",
    "label_prefix_hooks",
    "random_positions",
    "authors_positions",
    "random_set_positions",
    "per_layer_hooks",
    "random_prefix_hooks",
    "random_isolation",
    "rows_isolation",
    "RANDOM_DRAWS",
    "isolated_rows",
]


def block_rows(scores: Float[torch.Tensor, "batch head qpos kpos"], rows: Bool[torch.Tensor, "batch qpos"]
               ) -> Float[torch.Tensor, "batch head qpos kpos"]:
    """``scores`` with every earlier key of the marked query rows set to ``-inf`` (diagonal kept)."""
    T = scores.shape[-1]
    pos = torch.arange(T, device=scores.device)
    earlier = pos[None, :] < pos[:, None]  # [qpos, kpos]: j < i
    mask = rows.to(scores.device)[:, None, :, None] & earlier[None, None]
    return scores.masked_fill(mask, float("-inf"))


def isolation_hooks(layers: Iterable[int], rows: Bool[torch.Tensor, "batch seq"]) -> list:
    """``(hook_name, fn)`` pairs isolating the marked positions in ``layers``."""
    def fn(scores, hook):
        return block_rows(scores, rows)

    return [(f"blocks.{l}.attn.hook_attn_scores", fn) for l in layers]


def _rows(batch: Sequence[Prompt], seq: int, positions: Callable[[int, Prompt], Sequence[int]]) -> torch.Tensor:
    rows = torch.zeros(len(batch), seq, dtype=torch.bool)
    for b, p in enumerate(batch):
        rows[b, list(positions(b, p))] = True
    return rows


def label_isolation(layers: Iterable[int]) -> HookFactory:
    """Hook factory for :func:`helpers.core.predict.predict`: isolate every p_k in ``layers``."""
    layers = list(layers)

    def factory(batch: Sequence[Prompt], tokens: torch.Tensor, offset: int = 0) -> list:
        if offset:
            raise ValueError("label isolation acts on prefix rows: pass label_prefix_hooks(...) as prefix_hooks")
        return isolation_hooks(layers, _rows(batch, tokens.shape[1], lambda b, p: p.label_pos))

    return factory


def label_prefix_hooks(layers: Iterable[int], prompt: Prompt, prefix_len: int) -> list:
    """Hooks for a shared prefix's pass (:func:`helpers.core.prefix.run_prefix`) isolating its label words in
    ``layers``. Every label position lies in the demonstrations, so isolating them changes the prefix only
    and each condition's prefix runs once for all inputs."""
    if max(prompt.label_pos) >= prefix_len:
        raise ValueError("a label position lies after the shared prefix")
    rows = torch.zeros(1, prefix_len, dtype=torch.bool)
    rows[0, prompt.label_pos] = True
    return isolation_hooks(layers, rows)


def random_positions(prompt: Prompt, count: int, seed, stop: int | None = None) -> list[int]:
    """``count`` distinct positions in ``1..stop-1`` of ``prompt`` that are not label tokens (any token of a
    label word), sorted.

    ``stop`` defaults to ``q - 1``, the authors' bound (never q nor the token before it); position 0 is never
    drawn (its row has nothing earlier to block). ``seed``: anything :func:`numpy.random.default_rng` accepts
    (an int or a list of ints).
    """
    stop = prompt.q - 1 if stop is None else stop
    if stop > prompt.q:
        raise ValueError(f"stop={stop} lies after q={prompt.q}")
    label_tokens = {i for a, b in prompt.label_spans for i in range(a, b)} | set(prompt.label_pos)
    pool = [i for i in range(1, stop) if i not in label_tokens]
    if count > len(pool):
        raise ValueError(f"asked for {count} random positions but positions 1..{stop - 1} hold only {len(pool)} "
                         "eligible ones")
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(pool, size=count, replace=False))


def authors_positions(prompt: Prompt, layers: Iterable[int], seed: int, index: int,
                      count: int | None = None) -> dict[int, list[int]]:
    """The authors' draw for the ``index``-th input: for every layer its own ``count`` (default: as many as
    there are demonstrations) positions among ``1..q-2``, never a label token, drawn with seed
    ``[seed, index, layer]`` (:func:`random_positions`)."""
    count = prompt.n_demos if count is None else count
    return {l: random_positions(prompt, count, [seed, index, l]) for l in layers}


def random_set_positions(prompt: Prompt, prefix_len: int, layers: Iterable[int], seed: int,
                         count: int | None = None) -> dict[int, list[int]]:
    """The control drawn once per demonstration set: for every layer its own ``count`` (default: as many as
    there are demonstrations) random positions among the demonstrations (``1..prefix_len-1``), never a label
    token, drawn with seed ``[seed, layer]``. Every input of the set shares the draw, so the isolated prefix
    runs once, as for the label words."""
    count = prompt.n_demos if count is None else count
    if prefix_len > prompt.q:
        raise ValueError(f"prefix_len={prefix_len} lies after q={prompt.q}")
    return {l: random_positions(prompt, count, [seed, l], stop=prefix_len) for l in layers}


def per_layer_hooks(rows_of: dict[int, list[int]], batch: int, seq: int) -> list:
    """Isolation hooks for ``{layer: positions}``, every row of a ``[batch, seq]`` run."""
    hooks = []
    for l, pos in rows_of.items():
        rows = torch.zeros(batch, seq, dtype=torch.bool)
        rows[:, pos] = True
        hooks += isolation_hooks([l], rows)
    return hooks


def random_prefix_hooks(prompt: Prompt, prefix_len: int, layers: Iterable[int], seed: int,
                        count: int | None = None) -> list:
    """Prefix-pass hooks isolating :func:`random_set_positions` (each layer its own draw)."""
    return per_layer_hooks(random_set_positions(prompt, prefix_len, layers, seed, count), 1, prefix_len)


def random_isolation(prompts: Sequence[Prompt], layers: Iterable[int], seed: int,
                     count: int | None = None) -> HookFactory:
    """Hook factory for :func:`helpers.core.predict.predict` isolating the authors' draw: the i-th prompt gets
    :func:`authors_positions` ``(prompt, layers, seed, i)``, a different draw in every layer.

    ``count`` defaults to each prompt's number of demonstrations (the same count as the label words).
    The draw depends only on (seed, input index, layer), never on batching; the first n prompts of a
    set get the same draws whether or not the rest are run.
    """
    layers = list(layers)
    return rows_isolation(prompts, [authors_positions(p, layers, seed, i, count) for i, p in enumerate(prompts)])


def rows_isolation(prompts: Sequence[Prompt], draws: Sequence[dict[int, list[int]]]) -> HookFactory:
    """Hook factory for :func:`helpers.core.predict.predict` isolating, in the i-th prompt, the rows
    ``draws[i][layer]`` in each of its layers (every prompt its own rows: full prompts only)."""
    if len(draws) != len(prompts):
        raise ValueError(f"{len(draws)} draws for {len(prompts)} prompts: give each prompt its rows")
    chosen: dict[int, dict[int, list[int]]] = {}
    for i, (p, d) in enumerate(zip(prompts, draws)):
        if id(p) in chosen:
            raise ValueError(f"prompt {i} is the same object as an earlier one: each input draws by its index, "
                             "so pass distinct Prompt objects")
        chosen[id(p)] = d
    layers = sorted({l for d in draws for l in d})

    def factory(batch: Sequence[Prompt], tokens: torch.Tensor, offset: int = 0) -> list:
        if offset:
            raise ValueError("these rows differ between inputs (some lie in the demonstrations): "
                             "run this control on full prompts")
        try:
            rows_of = [chosen[id(p)] for p in batch]
        except KeyError as e:
            raise ValueError("predict() was given prompts other than the ones the factory was built for") from e
        hooks = []
        for l in layers:
            rows = torch.zeros(len(batch), tokens.shape[1], dtype=torch.bool)
            for b, d in enumerate(rows_of):
                rows[b, d.get(l, [])] = True
            hooks += isolation_hooks([l], rows)
        return hooks

    return factory


RANDOM_DRAWS = ("authors", "set")


def isolated_rows(prompts: Sequence[Prompt], condition: str, layers: list[int], seed: int):
    """``(P0, {layer: prefix rows})`` isolated by ``condition`` with the per-set draw (label words, or random words)."""
    p0 = shared_prefix_len(prompts)
    if condition == "label":
        return p0, {l: list(prompts[0].label_pos) for l in layers}
    return p0, random_set_positions(prompts[0], p0, layers, seed)
