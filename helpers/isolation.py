"""§2.2 Shallow layers: isolating label words, and the random control.

Isolating a position r in layer l blocks its attention to every earlier
position: the pre-softmax score ``scores[r, j]`` is set to ``-inf`` for
``j < r`` in all heads (``hook_attn_scores``), so the softmax renormalises the
row onto r itself (the diagonal is never blocked, so no row is all ``-inf``).
Isolating the label words uses r = p_k for every demonstration; the control
isolates the same number of random positions that are neither label tokens
(any token of a label word) nor q nor position 0 (BOS, or the first token,
which has nothing earlier to block), drawn with a seed per input.

The effect is measured with :mod:`helpers.loyalty` against the unmodified run.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from .loyalty import label_loyalty, word_loyalty
from .predict import HookFactory, Predictions, predict
from .prompts import Prompt

__all__ = [
    "CONDITIONS",
    "layer_range",
    "block_rows",
    "isolation_hooks",
    "label_isolation",
    "random_positions",
    "random_isolation",
    "run_isolation",
    "isolation_experiment",
    "loyalty_rows",
    "isolation_budget",
    "isolation_runs",
    "loyalty_frame",
    "label_token_share",
    "isolation_verdict",
]

CONDITIONS = ("label", "random")


def layer_range(model, where: str, k: int) -> list[int]:
    """The first or last ``k`` layers of ``model`` (``where`` in {"first", "last"})."""
    n = model.cfg.n_layers
    if not 0 <= k <= n:
        raise ValueError(f"k={k} layers asked but the model has {n}")
    if where == "first":
        return list(range(k))
    if where == "last":
        return list(range(n - k, n))
    raise ValueError(f"where must be 'first' or 'last', got {where!r}")


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
    """Hook factory for :func:`helpers.predict.predict`: isolate every p_k in ``layers``."""
    layers = list(layers)

    def factory(batch: Sequence[Prompt], tokens: torch.Tensor) -> list:
        return isolation_hooks(layers, _rows(batch, tokens.shape[1], lambda b, p: p.label_pos))

    return factory


def random_positions(prompt: Prompt, count: int, seed) -> list[int]:
    """``count`` distinct positions of ``prompt`` that are not label tokens, not q and not 0.

    ``seed``: anything :func:`numpy.random.default_rng` accepts (an int or a list of ints).
    """
    label_tokens = {i for a, b in prompt.label_spans for i in range(a, b)} | set(prompt.label_pos)
    pool = [i for i in range(1, prompt.q) if i not in label_tokens]
    if count > len(pool):
        raise ValueError(f"asked for {count} random positions but the prompt has only {len(pool)} eligible ones")
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(pool, size=count, replace=False))


def random_isolation(prompts: Sequence[Prompt], layers: Iterable[int], seed: int,
                     count: int | None = None) -> HookFactory:
    """Hook factory isolating random non-label positions; the i-th prompt's draw uses seed ``[seed, i]``.

    ``count`` defaults to each prompt's number of demonstrations (the same count as the label words).
    The draw depends only on (seed, input index), never on batching.
    """
    layers = list(layers)
    chosen = {id(p): random_positions(p, p.n_demos if count is None else count, [seed, i])
              for i, p in enumerate(prompts)}

    def factory(batch: Sequence[Prompt], tokens: torch.Tensor) -> list:
        try:
            return isolation_hooks(layers, _rows(batch, tokens.shape[1], lambda b, p: chosen[id(p)]))
        except KeyError as e:
            raise ValueError("random_isolation: predict() was given prompts other than the ones the "
                             "factory was built for") from e

    return factory


def run_isolation(model, prompts: Sequence[Prompt], label_ids: Sequence[int], condition: str, where: str,
                  k: int, seed: int = 0, batch_size: int = 16, top_k: int = 5,
                  progress: bool | str = False) -> Predictions:
    """Predictions with ``condition`` ("label"/"random") isolated in the first/last ``k`` layers."""
    layers = layer_range(model, where, k)
    if condition == "label":
        factory = label_isolation(layers)
    elif condition == "random":
        factory = random_isolation(prompts, layers, seed)
    else:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory, progress=progress)


def isolation_experiment(model, prompts: Sequence[Prompt], label_ids: Sequence[int], ks: Sequence[int] = (5,),
                         conditions: Sequence[str] = CONDITIONS, wheres: Sequence[str] = ("first", "last"),
                         seed: int = 0, batch_size: int = 16, top_k: int = 5, progress: bool = False
                         ) -> dict:
    """The unmodified run plus every (condition, where, k) run.

    Returns ``{"base": Predictions, ("label", "first", 5): Predictions, ...}``.
    """
    out: dict = {"base": predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k)}
    combos = [(c, w, k) for k in ks for c in conditions for w in wheres]
    for c, w, k in tqdm(combos, desc="isolation", leave=False, disable=not progress):
        out[(c, w, k)] = run_isolation(model, prompts, label_ids, c, w, k, seed=seed, batch_size=batch_size,
                                       top_k=top_k)
    return out


def loyalty_rows(runs: dict, k_words: int = 5) -> list[dict]:
    """One row per isolation run: condition, where, k, label_loyalty, word_loyalty, accuracy (fractions)."""
    base = runs["base"]
    rows = []
    for key, pred in runs.items():
        if key == "base":
            continue
        c, w, k = key
        rows.append({"condition": c, "where": w, "k": k, "label_loyalty": label_loyalty(pred, base),
                     "word_loyalty": word_loyalty(pred, base, k_words),
                     "accuracy": pred.accuracy if (pred.gold >= 0).any() else float("nan")})
    return rows


def isolation_budget(profile) -> dict:
    """Run size of notebook 02.

    Every condition costs one full pass over the inputs (1 + 4 conditions x 4
    layer counts = 17 passes), so the notebook uses a fraction of ``n_test``:
    ``smoke`` 4 inputs per task (2 on AGNews) and a sweep over k in {1} only;
    ``default`` 8 inputs (4 on AGNews, ~2.5x longer prompts), the k=5
    conditions on every seed and the k in {1,3,7} sweep on the first seed only;
    ``paper`` the full ``n_test`` and the sweep on every seed.
    """
    name = profile.name
    k_sweep = (1, 3, 7)
    if name == "paper":
        n = {t: profile.n_test for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds)
    elif name == "default":
        n = {t: 4 if t == "agnews" else 8 for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds[:1])
    else:
        n = {t: min(2 if t == "agnews" else 4, profile.n_test) for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds[:1])
        k_sweep = (1,)
    return {"seeds": tuple(profile.seeds), "n": n, "sweep_seeds": sweep_seeds, "k_main": 5,
            "k_sweep": k_sweep, "batch_size": profile.batch_size}


def isolation_runs(model, tasks: Sequence[str], seeds: Sequence[int], n: dict | int, k_main: int = 5,
                   k_sweep: Sequence[int] = (1, 3, 7), sweep_seeds: Sequence[int] = (), batch_size: int = 16,
                   top_k: int = 5, profile: str = "", progress: bool = True) -> dict:
    """All isolation runs of notebook 02, cached per (task, seed).

    Every seed gets the four conditions at ``k_main`` layers; seeds in
    ``sweep_seeds`` also get ``k_sweep``. The random control uses the run's seed.
    Returns ``{(task, seed): {"base": Predictions, (condition, where, k): Predictions, ...}}``.
    """
    import warnings

    from .prompts import make_icl_set
    from .results import cached
    from .tasks import LabelWordWarning

    name = getattr(model.cfg, "icl_model_name", model.cfg.model_name)
    out = {}
    combos = [(t, s) for t in tasks for s in seeds]
    for task, seed in tqdm(combos, desc="isolation", disable=not progress):
        m = n[task] if isinstance(n, dict) else int(n)
        ks = sorted({k_main, *(k_sweep if seed in sweep_seeds else ())})

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LabelWordWarning)
                s = make_icl_set(model, task, seed, m)
            return isolation_experiment(model, s.prompts, s.label_ids, ks=ks, seed=seed, batch_size=batch_size,
                                        top_k=top_k)

        out[(task, seed)] = cached("isolation", {"model": name, "task": task, "seed": seed, "n": m, "ks": ks,
                                                 "top_k": top_k, "profile": profile}, run)
    return out


def loyalty_frame(runs: dict, k_words: int = 5):
    """``pandas.DataFrame`` of :func:`loyalty_rows` for every (task, seed) of :func:`isolation_runs`."""
    import pandas as pd

    rows = []
    for (task, seed), r in runs.items():
        for row in loyalty_rows(r, k_words):
            rows.append({"task": task, "seed": seed, **row})
    return pd.DataFrame(rows)


def label_token_share(pred: Predictions, label_ids: Sequence[int], k: int = 5) -> float:
    """Fraction of the top-``k`` tokens at q that are label-word (first) tokens, over all inputs."""
    ids = torch.tensor(list(label_ids))
    top = pred.topk[:, :k]
    return float((top[..., None] == ids).any(-1).float().mean())


def isolation_verdict(means: dict[tuple[str, str], float], hurt_margin: float = 0.10,
                      barely: float = 0.80) -> tuple[str, dict]:
    """Verdict on the §2.2 claim from mean label loyalty (fractions) per (condition, where) at k=5.

    Criteria, fixed before any run:
      1. label words isolated in the first layers give the lowest loyalty, at least
         ``hurt_margin`` (10 points) below each of the three other conditions;
      2. label words isolated in the last layers barely matter: loyalty >= ``barely`` (80%);
      3. random words barely matter: loyalty >= ``barely`` in the first and in the last layers.
    "replicates" if all hold; "partly" if criterion 1 holds but not all; else "does not replicate".
    """
    lf = means[("label", "first")]
    others = [means[("label", "last")], means[("random", "first")], means[("random", "last")]]
    checks = {
        "label-first lowest by >= %d points" % round(100 * hurt_margin): all(lf <= o - hurt_margin for o in others),
        "label-last >= %d%%" % round(100 * barely): means[("label", "last")] >= barely,
        "random first and last >= %d%%" % round(100 * barely): min(means[("random", "first")],
                                                                    means[("random", "last")]) >= barely,
    }
    vals = list(checks.values())
    verdict = "replicates" if all(vals) else "partly" if vals[0] else "does not replicate"
    return verdict, checks
