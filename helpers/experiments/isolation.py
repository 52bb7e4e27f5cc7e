"""§2.2 Shallow layers: isolating label words, and the random control.

This module says which rows each condition blocks and holds the hooks that block them (:func:`block_rows`,
:func:`isolation_hooks`; the label words, :func:`label_isolation`; the random control, :func:`random_isolation`),
then runs the conditions and measures them.

Isolating a position r in layer l blocks its attention to every earlier
position: the pre-softmax score ``scores[r, j]`` is set to ``-inf`` for
``j < r`` in all heads (``hook_attn_scores``), so the softmax renormalises the
row onto r itself (the diagonal is never blocked, so no row is all ``-inf``).
Isolating the label words uses r = p_k for every demonstration; the control
isolates as many random positions as there are demonstrations.

The control's draw (``random_draw``):

- ``"authors"`` (default) follows the paper (arXiv 2305.14160, §2.2) and its
  authors' code: a fresh draw for every input AND every isolated layer, among
  the positions before q-1 (``0..q-2``, so never q nor the token before it)
  that are not label tokens. Ours differs in two details: a label token is any
  token of a label word (the authors exclude the label word's first token, the
  one they locate after "Sentiment:" and the like), and position 0 is never
  drawn (BOS, or the first token: its row has nothing earlier to block, so the
  authors' draw of 0 is a no-op that isolates one word fewer). The draw of input i in layer l is
  ``numpy.random.default_rng([seed, i, layer])`` (:func:`authors_positions`):
  fixed by (seed, input index, layer), whatever the batching or the number of
  inputs run. Every input has its own isolated demonstrations, so this control
  runs full prompts (about as costly as an unmodified run without the shared
  prefix, many times the label condition's cost).
- ``"set"`` draws once per demonstration set, a fresh draw in every isolated
  layer, among the demonstrations only (:func:`random_set_positions`, seed
  ``[seed, layer]``): every input shares it, so it runs as one shared prefix,
  as cheap as the label condition.

The effect is measured with :mod:`helpers.core.loyalty` against the unmodified run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from helpers.core.backend import is_bridge
from helpers.core.loyalty import label_loyalty, label_loyalty_rows, word_loyalty, word_loyalty_rows
from helpers.core.predict import HookFactory, Predictions, predict
from helpers.core.prefix import predict_shared_split, run_prefix, shared_prefix_len, shared_prefix_or_none
from helpers.core.prefix_runs import predict_shared, vanilla_predictions
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH

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
    "CONDITIONS",
    "layer_range",
    "random_isolation_last",
    "run_isolation",
    "isolation_experiment",
    "loyalty_rows",
    "label_token_share",
    "MAIN_CONDITIONS",
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


CONDITIONS = ("label", "random")


def layer_range(model, where: str, k: int) -> list[int]:
    """The first or last ``k`` layers of ``model`` (``where`` in {"first", "last"})."""
    n = model.cfg.n_layers
    if not 0 <= k <= n:
        raise ValueError(f"k={k} layers asked but the model has {n}: isolating the first or last k layers needs at "
                         f"least k layers; pass a k of at most {n}, or use a deeper model (make run NOTEBOOKS=... "
                         f"leaves notebook 02 out)")
    if where == "first":
        return list(range(k))
    if where == "last":
        return list(range(n - k, n))
    raise ValueError(f"where must be 'first' or 'last', got {where!r}")


def run_isolation_last(model, prompts: Sequence[Prompt], label_ids: Sequence[int], conditions: Sequence[str],
                       k: int, seed: int = 0, batch_size: int = FORWARD_BATCH, top_k: int = 5) -> dict:
    """:func:`run_isolation` for every condition isolated in the last ``k`` layers, in one pass.

    Below layer ``n_layers - k`` nothing is isolated, so every input's residual
    stream there is the unmodified run's: each batch of inputs runs those layers
    once for all conditions (:func:`helpers.core.prefix.predict_shared_split`).
    Returns ``{condition: Predictions}``, equal to separate :func:`run_isolation` runs (tests).
    """
    layers = layer_range(model, "last", k)
    caches = {}
    for c in conditions:
        if c not in CONDITIONS:
            raise ValueError(f"condition must be one of {CONDITIONS}, got {c!r}")
        p0, rows_of = isolated_rows(prompts, c, layers, seed)
        caches[c] = run_prefix(model, prompts[0].tokens[:p0], hooks=per_layer_hooks(rows_of, 1, p0),
                               note=f"{c} words isolated in the last {k} layers")
    return predict_shared_split(model, prompts, label_ids, caches, model.cfg.n_layers - k, batch_size, top_k)


def run_isolation(model, prompts: Sequence[Prompt], label_ids: Sequence[int], condition: str, where: str,
                  k: int, seed: int = 0, batch_size: int = FORWARD_BATCH, top_k: int = 5,
                  progress: bool | str = False, shared: bool = True, random_draw: str = "authors") -> Predictions:
    """Predictions with ``condition`` ("label"/"random") isolated in the first/last ``k`` layers.

    Label words lie in the shared demonstrations, so with ``shared`` (default)
    the isolated prefix runs once and every input runs as a suffix against it
    (:mod:`helpers.core.prefix`; same predictions as the full prompts, tests).

    ``random_draw`` picks the control's positions (module docstring):
    ``"authors"`` (default) draws them per input and per layer before q-1
    (:func:`~helpers.experiments.isolation.random_isolation`), so every prompt differs and runs whole
    (``shared`` does not apply); ``"set"`` draws them once per demonstration
    set, per layer, among the demonstrations (:func:`~helpers.experiments.isolation.random_set_positions`), so
    the control costs what the label condition costs.
    """
    if random_draw not in RANDOM_DRAWS:
        raise ValueError(f"random_draw must be one of {RANDOM_DRAWS}, got {random_draw!r}")
    shared = shared and not is_bridge(model)  # no shared-prefix cache on TL 4: whole prompts, same predictions
    layers = layer_range(model, where, k)
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    if condition == "label" and not shared:  # each prompt's own label positions (prompts need not share them)
        return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, progress=progress,
                       hooks=label_isolation(layers))
    if condition == "label" or random_draw == "set":
        p0, rows_of = isolated_rows(prompts, condition, layers, seed)
        if shared:
            pre = per_layer_hooks(rows_of, 1, p0)
            return predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, prefix_hooks=pre,
                                  progress=progress)
        # the same rows isolated in every full prompt (the reference the shared path is tested against)
        return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, progress=progress,
                       hooks=lambda batch, tokens, offset=0: per_layer_hooks(rows_of, len(batch), tokens.shape[1]))
    if shared and where == "last" and layers and _shared_prefix(model, prompts):
        return random_isolation_last(model, prompts, label_ids, layers, seed, batch_size, top_k)
    factory = random_isolation(prompts, layers, seed)
    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory, progress=progress)


def _shared_prefix(model, prompts: Sequence[Prompt]) -> bool:
    return shared_prefix_or_none(model, prompts) is not None


def random_isolation_last(model, prompts: Sequence[Prompt], label_ids: Sequence[int], layers: Sequence[int],
                          seed: int, batch_size: int = FORWARD_BATCH, top_k: int = 5,
                          factory: HookFactory | None = None) -> Predictions:
    """The authors' random control isolated in the last layers (``layers``, the top ones), with the layers below
    them shared: :func:`~helpers.experiments.isolation.random_isolation` on full prompts, at a fraction of the cost.

    Every input has its own random rows, some in the demonstrations, so the isolated layers must run each
    input's whole prompt. Below the first isolated layer nothing is isolated: there the demonstrations' residual
    stream is the same for every input and each input's own tokens need only the demonstrations' keys and
    values. So the demonstrations run once (their residual stream entering the first isolated layer is kept),
    each input's own tokens run through the lower layers after them (:func:`helpers.core.prefix.suffix_forward`
    with ``stop_at_layer``), and only the isolated layers run on the whole prompt, from the joined residual
    stream. The same function as the full run (tests); on Gemma 3's 18 layers with the last 5 isolated, the
    lower 13 layers' full-prompt work is saved. ``factory``: other per-input rows to isolate in ``layers``
    (:func:`~helpers.experiments.isolation.rows_isolation`; default the authors' draw of ``seed``).
    """
    from helpers.core.predict import length_batches, predictions_from_resid
    from helpers.core.prefix import pad_suffixes, run_prefix, suffix_forward, suffix_tokens
    from helpers.core.sizing import sizing

    split, n_layers = min(layers), model.cfg.n_layers
    if sorted(layers) != list(range(split, n_layers)):
        raise ValueError(f"random_isolation_last isolates the top layers {split}..{n_layers - 1}, got {sorted(layers)}")
    p0 = shared_prefix_len(prompts)
    kept: dict = {}

    def keep(x, hook):
        kept["x"] = x.detach().clone()

    cache = run_prefix(model, prompts[0].tokens[:p0], hooks=[(f"blocks.{split}.hook_resid_pre", keep)])
    lower = kept["x"][0]  # [P0, d_model]: the demonstrations entering layer `split`
    factory = random_isolation(prompts, layers, seed) if factory is None else factory
    suffixes = suffix_tokens(cache, prompts)
    resid = torch.empty(len(prompts), model.cfg.d_model, dtype=model.cfg.dtype, device=model.cfg.device)
    sized = sizing(model, max(len(p) for p in prompts), batch_size)
    with torch.inference_mode():
        for idx in length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens):  # by whole-prompt length: the top layers run those
            batch = [prompts[i] for i in idx]
            toks, _ = pad_suffixes([suffixes[i] for i in idx])
            own = suffix_forward(model, cache, toks, stop_at_layer=split)  # [B, m, d_model]
            x = torch.cat([lower[None].expand(len(idx), -1, -1).to(own.dtype), own], dim=1)
            with model.hooks(fwd_hooks=factory(batch, x[..., 0], offset=0)):
                out = model(x, start_at_layer=split, stop_at_layer=n_layers)
            resid[idx] = out[torch.arange(len(idx)), torch.tensor([p.q for p in batch])]
        return predictions_from_resid(model, resid, prompts, label_ids, top_k)


def isolation_experiment(model, prompts: Sequence[Prompt], label_ids: Sequence[int], ks: Sequence[int] = (5,),
                         conditions: Sequence[str] = CONDITIONS, wheres: Sequence[str] = ("first", "last"),
                         seed: int = 0, batch_size: int = FORWARD_BATCH, top_k: int = 5, progress: bool = False,
                         shared: bool = True, random_draw: str = "authors", sub_n: dict | None = None,
                         random_n: int | None = None) -> dict:
    """The unmodified run plus every (condition, where, k) run.

    ``sub_n`` maps some k to a number of inputs: those runs use only the first
    that many prompts (a cheaper sweep). ``random_n``: the random condition
    uses at most the first that many prompts (the authors' draw runs full
    prompts, many times the cost of the label condition). The i-th input's draw
    depends on i only, so a subset's draws are those of the full run.
    :func:`loyalty_rows` compares a subset with the same first inputs of the base run.
    Returns ``{"base": Predictions, ("label", "first", 5): Predictions, ...}``.
    """
    if random_n is not None and random_n < 1:
        raise ValueError(f"random_n must be >= 1 or None, got {random_n}")
    shared = shared and not is_bridge(model)  # no shared-prefix cache on TL 4 (helpers.core.backend)
    base = (vanilla_predictions if shared else predict)(model, prompts, label_ids, batch_size=batch_size, top_k=top_k)
    out: dict = {"base": base}
    combos = [(c, w, k) for k in ks for c in conditions for w in wheres]

    def n_of(c, k):
        n = (sub_n or {}).get(k, len(prompts))
        return min(n, random_n) if c == "random" and random_n is not None else n

    # last-k conditions on a shared prefix share the unisolated lower layers of every input (run_isolation_last)
    together = shared and random_draw == "set" and "last" in wheres
    for c, w, k in tqdm(combos, desc="isolation", leave=False, disable=not progress):
        if together and w == "last":
            if (c, w, k) not in out:
                n = max(n_of(cc, k) for cc in conditions)
                last = run_isolation_last(model, prompts[:n], label_ids, conditions, k, seed=seed,
                                          batch_size=batch_size, top_k=top_k)
                out.update({(cc, "last", k): _first(pred, n_of(cc, k)) for cc, pred in last.items()})
            continue
        out[(c, w, k)] = run_isolation(model, prompts[: n_of(c, k)], label_ids, c, w, k, seed=seed,
                                       batch_size=batch_size, top_k=top_k, shared=shared, random_draw=random_draw)
    return {"base": base, **{key: out[key] for key in combos}}


def _first(pred: Predictions, n: int) -> Predictions:
    return Predictions(pred.label_logits[:n], pred.topk[:n], pred.gold[:n])


def loyalty_rows(runs: dict, k_words: int = 5) -> list[dict]:
    """One row per isolation run: condition, where, k, label_loyalty, word_loyalty, accuracy (fractions),
    and per input ``label_loyal`` (0/1) and ``word_loyal`` (Jaccard), for intervals, and ``input`` (each
    input's index in the prompt set: a run on a subset scores the first inputs), for paired contrasts."""
    base = runs["base"]
    rows = []
    for key, pred in runs.items():
        if key == "base":
            continue
        c, w, k = key
        ref = base if len(pred) == len(base) else _first(base, len(pred))  # a sweep on the first inputs
        rows.append({"condition": c, "where": w, "k": k, "n": len(pred), "label_loyalty": label_loyalty(pred, ref),
                     "word_loyalty": word_loyalty(pred, ref, k_words),
                     "accuracy": pred.accuracy if (pred.gold >= 0).any() else float("nan"),
                     "label_loyal": label_loyalty_rows(pred, ref).tolist(),
                     "word_loyal": word_loyalty_rows(pred, ref, k_words).tolist(),
                     "input": list(range(len(pred)))})
    return rows


def label_token_share(pred: Predictions, label_ids: Sequence[int], k: int = 5) -> float:
    """Fraction of the top-``k`` tokens at q that are label-word (first) tokens, over all inputs."""
    ids = torch.tensor(list(label_ids))
    top = pred.topk[:, :k]
    return float((top[..., None] == ids).any(-1).float().mean())


# --- paper vs ours ---

MAIN_CONDITIONS = (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last"))
