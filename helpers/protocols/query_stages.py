"""The protocol of the query's two stages (notebook 11, arXiv 2505.18752): its head sets, its runs over tasks x
seeds (stored by content), its curves and intervals, the criteria written before any run, its claims, and the
same checks on notebook 09's controls. The method (states at q, the probe, the label read-out, the previous-token
score) is :mod:`helpers.experiments.query_stages`.

One run per (task, seed): the query's states at every stage on one demonstration set, four times: as they are
(``none``), with the top previous-token heads ablated, with the top induction heads ablated, and with as many
random heads ablated (every position, outputs set to zero). For each, per input and stage: whether a
cross-validated probe finds its gold class (separability), and whether the label words' read-out does
(alignment).

Criteria, fixed before any run:

- **two stages**: per curve (the share of inputs per stage), its half-rise stage: the first stage that reaches
  half of the way from the curve's lowest to its highest value. Alignment's minus separability's, in layers (mean
  over seeds, then tasks): above 0 separability comes first ("replicates"), below 0 alignment does, containing 0
  "inconclusive". A (task, seed) whose gold classes leave fewer than two inputs of a class has no probe and is
  left out; a task left without a seed is left out.
- **which stage each set breaks**: the probe's accuracy at the middle stage (``n_layers // 2``, between §2.1's
  shallow third and deep half) with as many random heads ablated minus with the previous-token heads ablated, and
  the read-out's accuracy after the last layer with random heads ablated minus with the induction heads ablated;
  each above 0 "replicates".
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from helpers.core.grid import run_grid
from helpers.core.prompts import Prompt, make_icl_set
from helpers.core.stats import Interval, bootstrap_means, bootstrap_statistic, paired_differences
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.head_ablation import ablation_hook_pair, random_heads
from helpers.experiments.head_scores import induction_scores, top_heads, top_share
from helpers.experiments.query_stages import label_readout, previous_token_scores, probe_correct, query_states
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profiles import AfterSizes

__all__ = ["SETS", "stage_head_sets", "n_top_heads", "query_stage_runs", "stage_curves", "half_rise", "two_stages_interval",
           "stage_ablation_intervals", "query_stage_claims", "control_stage_claims"]

SETS = ("none", "previous_token", "induction", "random")  # what is ablated in each pass


def stage_head_sets(model, n: int) -> dict[str, list]:
    """The top ``n`` heads by previous-token score and by induction score (both on repeated random tokens, 32 long,
    or as long as two copies fit the context)."""
    length = min(32, (model.cfg.n_ctx - 1) // 2)
    return {"previous_token": top_heads(previous_token_scores(model, length), n),
            "induction": top_heads(induction_scores(model, length), n)}


def _folds(gold: torch.Tensor, folds: int) -> int:
    """The probe's folds: ``folds``, fewer where a class has fewer inputs; 0 where a class has one (no probe)."""
    counts = np.unique(gold.numpy(), return_counts=True)[1]
    f = min(int(folds), int(counts.min()))
    return f if f >= 2 and len(counts) >= 2 else 0


def _stage_cell(model, prompts: Sequence[Prompt], label_ids: Sequence[int], sets: dict, folds: int, seed: int,
                batch_size: int, shared: bool) -> dict:
    """``{set: {"probe": [n, stage] or None, "readout": [n, stage]}}``: per input and stage, 1 where the probe
    (resp. the read-out) finds the gold class, with each set of heads ablated."""
    gold = torch.tensor([p.gold for p in prompts])
    f = _folds(gold, folds)
    out = {}
    for name, heads in sets.items():
        hooks = ablation_hook_pair(heads, at="all") if heads else None
        states = query_states(model, prompts, batch_size, shared, hooks)
        out[name] = {"probe": torch.as_tensor(probe_correct(states, gold, f, seed)) if f else None,
                     "readout": (label_readout(model, states, label_ids) == gold[:, None]).to(torch.int8)}
    return out


@pins_weights
def query_stage_runs(model, tasks: Sequence[str], sizes: AfterSizes, sets: dict[str, list],
                     progress: bool = True) -> dict:
    """``{(task, seed): {set: {"probe", "readout"}}}`` (module docstring) on ``sizes.n`` inputs of one
    demonstration set per (task, seed), with the head ``sets`` of :func:`stage_head_sets` and as many random heads
    (drawn with the seed, apart from both sets), stored on disk."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    n_top = len(sets["induction"])

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, sizes.n)
        rnd = random_heads(model, n_top, seed, exclude=[*sets["previous_token"], *sets["induction"]])
        return _stage_cell(model, s.prompts, s.label_ids, {"none": [], **sets, "random": rnd}, sizes.folds, seed,
                           sizes.batch_size, shared=True)

    return run_grid("query_stages", model, tasks, seeds, run,
                    {"n": sizes.n, "folds": sizes.folds, "sets": {k: [list(map(int, h)) for h in v]
                                                                  for k, v in sets.items()}},
                    progress=progress and "query stages")


def n_top_heads(model, sizes: AfterSizes) -> int:
    """How many heads each ablated set holds: the top ``sizes.frac`` of all heads, at least 4."""
    return top_share(model, sizes.frac)


def stage_curves(runs: dict, name: str = "none"):
    """A ``pandas.DataFrame``, a row per (task, seed, stage, measure): the share of inputs the probe
    (``separability``) or the read-out (``alignment``) gets right with set ``name`` ablated."""
    import pandas as pd  # lazy

    rows = []
    for (task, seed), r in runs.items():
        for measure, kind in (("separability", "probe"), ("alignment", "readout")):
            if r[name][kind] is None:
                continue
            for stage, v in enumerate(r[name][kind].float().mean(0).tolist()):
                rows.append({"task": task, "seed": seed, "stage": stage, "measure": measure, "share": v})
    return pd.DataFrame(rows)


def half_rise(curve) -> float:
    """The first stage where ``curve`` reaches half of the way from its lowest value to its highest; NaN when it
    is flat."""
    c = np.asarray(curve, dtype=float)
    lo, hi = c.min(), c.max()
    return float("nan") if hi <= lo else float(np.argmax(c >= lo + (hi - lo) / 2))


def _probed(runs: dict) -> dict:
    """The cells with a probe, of the tasks that have one in every seed."""
    ok = {cell for cell, r in runs.items() if r["none"]["probe"] is not None}
    seeds = {s for _, s in runs}
    tasks = [t for t in dict.fromkeys(t for t, _ in runs) if all((t, s) in ok for s in seeds)]
    return {(t, s): runs[(t, s)]["none"] for t in tasks for s in seeds}


def two_stages_interval(runs: dict) -> tuple[Interval | None, dict[str, float]]:
    """The 95% interval of alignment's half-rise stage minus separability's (module docstring; seeds, then inputs),
    and the two half-rise stages of the full data (mean over seeds, then tasks). ``(None, {})`` when no task has a
    probe in every seed, or the difference is undefined in too many resamples."""
    cells = _probed(runs)
    if not cells:
        return None, {}
    tasks, seeds = list(dict.fromkeys(t for t, _ in cells)), sorted({s for _, s in cells})

    def rises(sample):
        out = {"separability": [], "alignment": []}
        for t in tasks:
            per = [(half_rise(cells[t, s]["probe"][idx[t]].float().mean(0)),
                    half_rise(cells[t, s]["readout"][idx[t]].float().mean(0))) for s, idx in sample]
            out["separability"].append(np.mean([a for a, _ in per]))
            out["alignment"].append(np.mean([b for _, b in per]))
        return {k: float(np.mean(v)) for k, v in out.items()}

    sizes = {s: {t: len(cells[t, s]["probe"]) for t in tasks} for s in seeds}
    full = rises([(s, {t: np.arange(sizes[s][t]) for t in tasks}) for s in seeds])
    try:
        iv = bootstrap_statistic(sizes, lambda sample: (lambda r: r["alignment"] - r["separability"])(rises(sample)))
    except ValueError:
        return None, full
    return iv, full


def stage_ablation_intervals(runs: dict, n_layers: int) -> dict[tuple[str, str], Interval]:
    """``(set, measure)``: the 95% interval of the measure with as many random heads ablated minus with ``set``
    ablated, paired per input: ``separability`` the probe at the middle stage (``n_layers // 2``; cells with a
    probe only), ``alignment`` the read-out after the last layer. ``("none", measure)`` and ``(set, measure,
    "level")``: the measures themselves."""
    where = {"separability": ("probe", n_layers // 2), "alignment": ("readout", n_layers)}
    probed = _probed(runs)
    out = {}
    for measure, (kind, stage) in where.items():
        cells = probed if kind == "probe" else runs

        def col(name, kind=kind, stage=stage, cells=cells):
            return {c: runs[c][name][kind][:, stage].numpy().astype(float) for c in cells}

        if not cells:
            continue
        out[("none", measure)] = bootstrap_means(col("none"))
        for name in ("previous_token", "induction"):
            out[(name, measure)] = bootstrap_means(paired_differences(col("random"), col(name)))
            out[(name, measure, "level")] = bootstrap_means(col(name))
        out[("random", measure, "level")] = bootstrap_means(col("random"))
    return out


def query_stage_claims(two: tuple[Interval | None, dict], ablation: dict, n_top: int, n_layers: int,
                       context: str = "") -> list[Claim]:
    """``11.two_stages``, ``11.previous_token_heads_separability`` and ``11.induction_heads_alignment`` (module
    docstring); "not comparable" where no task had a probe."""
    iv, rises = two
    crit = ("95% interval of the half-rise stage of the read-out's accuracy minus that of the probe's (layers), "
            "above 0")
    if iv is None:
        out = [claim("11.two_stages", None, "not comparable", crit, context=context,
                     missing="no task had inputs of every class in two folds or more (a probe), or the half-rise "
                             "stage was undefined in too many resamples")]
    else:
        out = [claim("11.two_stages", iv, above_zero(iv), crit, context=context,
                     note=f"half-rise stage: separability {rises['separability']:.1f}, alignment "
                          f"{rises['alignment']:.1f} (stages 0-{n_layers}; §2.1's shallow layers: the first "
                          f"{max(1, n_layers // 3)}, deep: from {n_layers // 2})")]
    specs = {"previous_token": ("11.previous_token_heads_separability", "separability",
                                f"the probe's accuracy at stage {n_layers // 2}"),
             "induction": ("11.induction_heads_alignment", "alignment", "the read-out's accuracy after the last layer")}
    for name, (key, measure, what) in specs.items():
        other = "alignment" if measure == "separability" else "separability"
        crit = f"95% interval of {what} with {n_top} random heads ablated minus with the top {n_top} {name} heads, above 0"
        if (name, measure) not in ablation:
            out.append(claim(key, None, "not comparable", crit, context=context, missing="no task had a probe"))
            continue
        iv = ablation[(name, measure)]
        cross = ablation.get((name, other))
        note = (f"{measure}: nothing ablated {ablation[('none', measure)]:.3f}, these heads "
                f"{ablation[(name, measure, 'level')]:.3f}, random {ablation[('random', measure, 'level')]:.3f}"
                + ("" if cross is None else f"; the same set on {other}: random minus it {cross:+.3f}"))
        out.append(claim(key, iv, above_zero(iv), crit, context=context, note=note))
    return out


def control_stage_claims(model, prompts: Sequence[Prompt], label_ids: Sequence[int], seed: int, batch_size: int,
                         context: str = "", folds: int = 5) -> list[Claim]:
    """The three claims on a control's sequences (:mod:`helpers.protocols.power`): the top head of each score (the
    controls' sets hold one head, as notebook 10's) against one random head, every sequence run whole."""
    sets = stage_head_sets(model, 1)
    rnd = random_heads(model, 1, seed, exclude=[*sets["previous_token"], *sets["induction"]])
    cell = _stage_cell(model, prompts, label_ids, {"none": [], **sets, "random": rnd}, folds, seed, batch_size,
                       shared=False)
    runs, L = {("control", seed): cell}, model.cfg.n_layers
    return query_stage_claims(two_stages_interval(runs), stage_ablation_intervals(runs, L), 1, L, context)
