"""§2.2 Shallow layers: isolating label words, and the random control.

Which rows each condition blocks, and the hooks that block them, are :mod:`helpers.experiments.isolation_rows`;
this module runs the conditions, measures them and states the claims.

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
  ``numpy.random.default_rng([seed, i, layer])`` (:func:`~helpers.experiments.isolation_rows.authors_positions`):
  fixed by (seed, input index, layer), whatever the batching or the number of
  inputs run. Every input has its own isolated demonstrations, so this control
  runs full prompts (about as costly as an unmodified run without the shared
  prefix, many times the label condition's cost).
- ``"set"`` draws once per demonstration set, a fresh draw in every isolated
  layer, among the demonstrations only (:func:`~helpers.experiments.isolation_rows.random_set_positions`, seed
  ``[seed, layer]``): every input shares it, so it runs as one shared prefix,
  as cheap as the label condition.

The effect is measured with :mod:`helpers.core.loyalty` against the unmodified run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from helpers.core.loyalty import label_loyalty, label_loyalty_rows, word_loyalty, word_loyalty_rows
from helpers.core.predict import HookFactory, Predictions, predict
from helpers.core.prefix import predict_shared_split, run_prefix, shared_prefix_len, shared_prefix_or_none
from helpers.core.prefix_runs import predict_shared, vanilla_predictions
from helpers.core.prompts import Prompt
from helpers.core.store import pins_weights
from helpers.core.tasks import run_args
from helpers.experiments.isolation_rows import (
    RANDOM_DRAWS,
    isolated_rows,
    label_isolation,
    per_layer_hooks,
    random_isolation,
)
from helpers.study.claims import claim
from helpers.study.paper import CLAIMS
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_means, paired_differences

__all__ = [
    "CONDITIONS",
    "layer_range",
    "random_isolation_last",
    "run_isolation",
    "isolation_experiment",
    "loyalty_rows",
    "IsolationSizes",
    "isolation_sizes",
    "isolation_runs",
    "loyalty_frame",
    "label_token_share",
    "isolation_verdict",
    "MAIN_CONDITIONS",
    "isolation_intervals",
    "isolation_claims",
    "condition_cells",
    "condition_ids",
]

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
                       k: int, seed: int = 0, batch_size: int = 16, top_k: int = 5) -> dict:
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
                  k: int, seed: int = 0, batch_size: int = 16, top_k: int = 5,
                  progress: bool | str = False, shared: bool = True, random_draw: str = "authors") -> Predictions:
    """Predictions with ``condition`` ("label"/"random") isolated in the first/last ``k`` layers.

    Label words lie in the shared demonstrations, so with ``shared`` (default)
    the isolated prefix runs once and every input runs as a suffix against it
    (:mod:`helpers.core.prefix`; same predictions as the full prompts, tests).

    ``random_draw`` picks the control's positions (module docstring):
    ``"authors"`` (default) draws them per input and per layer before q-1
    (:func:`~helpers.experiments.isolation_rows.random_isolation`), so every prompt differs and runs whole
    (``shared`` does not apply); ``"set"`` draws them once per demonstration
    set, per layer, among the demonstrations (:func:`~helpers.experiments.isolation_rows.random_set_positions`), so
    the control costs what the label condition costs.
    """
    if random_draw not in RANDOM_DRAWS:
        raise ValueError(f"random_draw must be one of {RANDOM_DRAWS}, got {random_draw!r}")
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
                          seed: int, batch_size: int = 16, top_k: int = 5,
                          factory: HookFactory | None = None) -> Predictions:
    """The authors' random control isolated in the last layers (``layers``, the top ones), with the layers below
    them shared: :func:`~helpers.experiments.isolation_rows.random_isolation` on full prompts, at a fraction of the cost.

    Every input has its own random rows, some in the demonstrations, so the isolated layers must run each
    input's whole prompt. Below the first isolated layer nothing is isolated: there the demonstrations' residual
    stream is the same for every input and each input's own tokens need only the demonstrations' keys and
    values. So the demonstrations run once (their residual stream entering the first isolated layer is kept),
    each input's own tokens run through the lower layers after them (:func:`helpers.core.prefix.suffix_forward`
    with ``stop_at_layer``), and only the isolated layers run on the whole prompt, from the joined residual
    stream. The same function as the full run (tests); on Gemma 3's 18 layers with the last 5 isolated, the
    lower 13 layers' full-prompt work is saved. ``factory``: other per-input rows to isolate in ``layers``
    (:func:`~helpers.experiments.isolation_rows.rows_isolation`; default the authors' draw of ``seed``).
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
        for idx in length_batches(prompts, sized.batch_size, sized.max_tokens):  # by whole-prompt length: the top layers run those
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
                         seed: int = 0, batch_size: int = 16, top_k: int = 5, progress: bool = False,
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


def condition_cells(df, condition: str, where: str, k: int, metric: str = "label_loyal") -> dict:
    """``{(task, seed): per-input values}`` of one condition of :func:`loyalty_frame` (``metric``:
    ``label_loyal`` or ``word_loyal``), the input of :func:`helpers.study.stats.bootstrap_means`."""
    sub = df[(df.condition == condition) & (df["where"] == where) & (df.k == k)]
    if sub.empty:
        raise ValueError(f"no isolation runs for ({condition}, {where}, k={k})")
    return {(r.task, r.seed): getattr(r, metric) for r in sub.itertuples()}


def condition_ids(df, condition: str, where: str, k: int) -> dict:
    """``{(task, seed): input indices}`` matching :func:`condition_cells`: pass two of them to
    :func:`helpers.study.stats.paired_differences` to pair a condition run on the first inputs only (the
    random control, a sweep) with one run on all of them."""
    return condition_cells(df, condition, where, k, metric="input")


@dataclass(frozen=True)
class IsolationSizes(RunSizes):
    """Run sizes of :func:`isolation_runs` (notebook 02's: :func:`isolation_sizes`)."""

    seeds: tuple[int, ...]  # every seed gets the four conditions at k_main layers
    n: Mapping[str, int] | int  # test inputs per (task, seed): per task, or one number for every task
    sweep_seeds: tuple[int, ...]  # these seeds also get the sweep over k_sweep
    k_main: int  # the isolated layers (first / last k) of the four conditions
    k_sweep: tuple[int, ...]
    sweep_n: int | None  # the sweep's k != k_main run on the first sweep_n inputs (None: all)
    random_n: int | None  # the random control runs on the first random_n inputs (None: all)
    random_draw: str  # "authors": a draw of random positions per input and per layer
    batch_size: int


def isolation_sizes(profile) -> IsolationSizes:
    """Run size of notebook 02.

    With a shared prefix the label conditions cost about one vanilla pass each
    (the isolated demonstrations run once, the inputs as suffixes). The random
    control with the authors' draw runs every input's full prompt (a draw per
    input and layer), so it runs on the first ``random_n`` inputs
    (``profile.n_random_control``) of each task and seed. ``default`` and
    ``paper``: the four k=5 conditions on ``n_test`` inputs per task and every
    seed; the k in {1, 3, 7} sweep (12 more conditions, a curve) on the first
    ``sweep_n`` inputs (16 by default) of the first seed (``paper``: all inputs,
    every seed). ``smoke``: 4 inputs per task (2 on AGNews), k in {1} only.
    """
    name = profile.name
    k_sweep = (1, 3, 7)
    sweep_n = None
    if name == "paper":
        n = {t: profile.n_test for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds)
    elif name == "default":
        n = {t: profile.n_test for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds[:1])
        sweep_n = 16
    else:
        n = {t: min(2 if t == "agnews" else 4, profile.n_test) for t in profile.tasks}
        sweep_seeds = tuple(profile.seeds[:1])
        k_sweep = (1,)
    random_n = min(profile.n_random_control, max(n.values()))
    return IsolationSizes(seeds=tuple(profile.seeds), n=n, sweep_seeds=sweep_seeds, k_main=5, k_sweep=k_sweep,
                          sweep_n=sweep_n, random_n=random_n, random_draw="authors", batch_size=profile.batch_size)


@pins_weights
def isolation_runs(model, tasks: Sequence[str], sizes: IsolationSizes, top_k: int = 5, profile: str = "",
                   progress: bool = True) -> dict:
    """All isolation runs of notebook 02, cached per (task, seed), at the run sizes ``sizes``
    (:func:`isolation_sizes`, or an :class:`IsolationSizes` of your own).

    Every seed of ``sizes.seeds`` gets the four conditions at ``sizes.k_main`` layers; seeds in
    ``sizes.sweep_seeds`` also get ``sizes.k_sweep``. The random control uses the run's seed
    and, with ``sizes.random_n``, only the first that many inputs (:func:`isolation_experiment`).
    Returns ``{(task, seed): {"base": Predictions, (condition, where, k): Predictions, ...}}``.
    """
    if not isinstance(sizes, IsolationSizes):
        from helpers.core.checks import ArgumentError

        raise ArgumentError(f"sizes must be an IsolationSizes (isolation_sizes(profile), or IsolationSizes(seeds=..., "
                            f"n=..., ...)), got {type(sizes).__name__}")
    n, k_main, k_sweep, sweep_seeds = sizes.n, sizes.k_main, sizes.k_sweep, sizes.sweep_seeds
    sweep_n, random_draw, random_n, batch_size = sizes.sweep_n, sizes.random_draw, sizes.random_n, sizes.batch_size
    tasks, seeds = run_args(tasks, sizes.seeds, n=n, k_main=k_main)
    import warnings

    from helpers.core.grid import run_grid
    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    def count(task):
        return n[task] if isinstance(n, Mapping) else int(n)

    def layer_counts(seed):
        return sorted({k_main, *(k_sweep if seed in sweep_seeds else ())})

    def run(task, seed):
        ks = layer_counts(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, count(task))
        sub = {k: sweep_n for k in ks if k != k_main} if sweep_n else None
        return isolation_experiment(model, s.prompts, s.label_ids, ks=ks, seed=seed, batch_size=batch_size,
                                    top_k=top_k, random_draw=random_draw, sub_n=sub, random_n=random_n)

    return run_grid("isolation", model, tasks, seeds, run,
                    lambda task, seed: {"n": count(task), "ks": layer_counts(seed), "top_k": top_k, "profile": profile,
                                        "sweep_n": sweep_n, "random_draw": random_draw, "random_n": random_n},
                    progress=progress and "isolation")


def loyalty_frame(runs: dict, k_words: int = 5):
    """``pandas.DataFrame`` of :func:`loyalty_rows` for every (task, seed) of :func:`isolation_runs`."""
    import pandas as pd  # lazy: pandas takes a second to import

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


def isolation_verdict(loyalty: dict, drop: dict, barely: float = 0.80) -> tuple[str, dict]:
    """Verdict on the §2.2 claim from 95% intervals (criteria fixed before the run).

    ``loyalty[(condition, where)]``: the interval of mean label loyalty (fraction) at k=5;
    ``drop[(condition, where)]``: the interval of that condition's loyalty minus
    label-first's, paired per input, for the three other conditions.

      1. label words isolated in the first layers hurt most: every ``drop`` interval lies above zero;
      2. label words isolated in the last layers barely matter: the loyalty interval lies at or above ``barely``;
      3. random words barely matter: both loyalty intervals lie at or above ``barely``.

    "replicates" if all hold; "partly" if check 1 holds but not all; "does not replicate"
    if some ``drop`` interval lies below zero; otherwise "inconclusive".
    """
    checks = {
        "label-first lowest (every paired drop above 0)": all(iv.low > 0 for iv in drop.values()),
        f"label-last >= {barely:.0%}": loyalty[("label", "last")].low >= barely,
        f"random first and last >= {barely:.0%}": all(loyalty[("random", w)].low >= barely for w in ("first", "last")),
    }
    c1 = next(iter(checks.values()))
    if c1:
        return ("replicates" if all(checks.values()) else "partly"), checks
    if any(iv.high < 0 for iv in drop.values()):
        return "does not replicate", checks
    return "inconclusive", checks


# --- paper vs ours ---

MAIN_CONDITIONS = (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last"))


def isolation_intervals(df, k: int) -> tuple[dict, dict]:
    """95% intervals of notebook 02 at ``k`` layers, from :func:`loyalty_frame`.

    Returns ``(loyalty, drop)``: ``loyalty[(condition, where, metric)]`` for ``metric`` in ``label_loyal`` and
    ``word_loyal`` (fractions), and ``drop[(condition, where)]``: that condition's label loyalty minus
    label-first's, paired per input (for the random control, on its first inputs), for the three other
    conditions. Seeds, then the inputs within each (task, seed), resampled (:mod:`helpers.study.stats`).
    """
    loyalty = {(c, w, m): bootstrap_means(condition_cells(df, c, w, k, m))
               for c, w in MAIN_CONDITIONS for m in ("label_loyal", "word_loyal")}
    first = condition_cells(df, "label", "first", k), condition_ids(df, "label", "first", k)
    drop = {(c, w): bootstrap_means(paired_differences(condition_cells(df, c, w, k), first[0],
                                                       condition_ids(df, c, w, k), first[1]))
            for c, w in MAIN_CONDITIONS[1:]}
    return loyalty, drop


def isolation_claims(loyalty: dict, drop: dict, k: int = 5, barely: float = 0.80, context: str = "") -> list:
    """The §2.2 claims (:data:`helpers.study.paper.CLAIMS_02`), one per condition, from :func:`isolation_intervals`.

    The checks are :func:`isolation_verdict`'s, one claim each: label words isolated in the first ``k`` layers
    hurt most (every paired drop above 0: replicates; one below 0: does not replicate; otherwise inconclusive);
    label words in the last ``k`` layers, and random words in the first and in the last ``k``, barely matter
    (label loyalty interval at or above ``barely``: replicates; entirely below it: does not replicate;
    otherwise inconclusive). ``ours``: the condition's label loyalty in percent.
    """
    pct = {cw: loyalty[(*cw, "label_loyal")].scaled(100) for cw in MAIN_CONDITIONS}
    drops = "; ".join(f"{c} words {w} {k} minus label words first {k}: {drop[(c, w)].scaled(100):+.1f} points"
                      for c, w in MAIN_CONDITIONS[1:])
    if all(iv.low > 0 for iv in drop.values()):
        v1 = "replicates"
    elif any(iv.high < 0 for iv in drop.values()):
        v1 = "does not replicate"
    else:
        v1 = "inconclusive"
    def said(key: str) -> str:  # the paper's statement, with this run's k (the control isolates its 1 of 2 layers)
        text = CLAIMS[key]["statement"]
        return text if k == 5 else text.replace("5 layers", "layer" if k == 1 else f"{k} layers")

    out = [claim("02.label_first_hurts_most", pct[("label", "first")], v1,
                 "each other condition's label loyalty minus this one's, paired per input, has its 95% interval "
                 "above 0", unit="%", context=context, note=f"Paired drops: {drops}.",
                 statement=said("02.label_first_hurts_most"))]
    names = {("label", "last"): "02.label_last_barely_matters", ("random", "first"): "02.random_first_barely_matters",
             ("random", "last"): "02.random_last_barely_matters"}
    for cw, key in names.items():
        iv = pct[cw]
        verdict = ("replicates" if iv.low >= 100 * barely else
                   "does not replicate" if iv.high < 100 * barely else "inconclusive")
        out.append(claim(key, iv, verdict, f"label loyalty interval at or above {barely:.0%}", unit="%",
                         context=context, statement=said(key)))
    return out
