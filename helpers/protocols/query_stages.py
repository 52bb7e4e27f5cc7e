"""The protocol of the query's two stages (notebook 11, arXiv 2505.18752): its head sets, its runs over tasks x
seeds (stored by content), its curves and intervals, the criteria written before any run, its claims, and the
same checks on notebook 09's controls. The method (states at q, the probe, the label read-out, the previous-token
score) is :mod:`helpers.experiments.query_stages`.

One run per (task, seed): the query's states at every stage on one demonstration set, five times: as they are
(``none``), with the top previous-token heads ablated, with the top induction heads ablated, and with a
layer-matched random set for each (as many random heads in the same layers,
:func:`~helpers.experiments.query_stages.layer_matched`; every position, outputs set to zero). For each, per
input and stage: whether a cross-validated probe finds its gold class (separability), and whether the label words'
read-out does (alignment); with nothing ablated also whether the same probe finds it from the label-word logits
alone (alignment by a probe, the like-for-like measure of the stage order).

The head sets hold :data:`HEAD_SHARE` of all heads, the share arXiv 2505.18752 ablates (the top 10% of each
kind, against as many random heads).

Criteria, fixed before any run:

- **two stages**: per curve (the share of inputs per stage), its half-rise stage: the first stage that reaches
  half of the way from the curve's lowest to its highest value. The label-word probe's minus the state probe's,
  in layers (mean over seeds, then tasks): above 0 separability comes first ("replicates"), below 0 alignment
  does, containing 0 "inconclusive". Both are the same probe, so neither is favoured by being trained. A (task,
  seed) whose gold classes leave fewer than two inputs of a class has no probe and is left out; a task left
  without a seed is left out.
- **which stage each set breaks**: the probe's accuracy at the middle stage (``n_layers // 2``, between §2.1's
  shallow third and deep half) with the layer-matched random heads ablated minus with the previous-token heads
  ablated, and the read-out's accuracy after the last layer with its layer-matched random heads ablated minus with
  the induction heads ablated; each above 0 "replicates".
- **the double dissociation**: a set's *drop* on a measure is its layer-matched random set's accuracy minus its
  own, per input. Separability: the previous-token heads' drop minus the induction heads' drop, above 0
  "replicates". Alignment: the induction heads' drop minus the previous-token heads' drop above 0, while the
  induction heads' drop on separability has its 95% interval's upper end at most :data:`SEPARABILITY_BOUND`,
  "replicates"; the difference below 0, or that drop's lower end above the bound, "does not replicate"; otherwise
  "inconclusive".
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from helpers.core.grid import run_grid
from helpers.core.prompts import Prompt, make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.head_ablation import ablation_hook_pair
from helpers.experiments.head_scores import induction_scores, top_heads, top_share
from helpers.experiments.query_stages import (
    label_logits,
    layer_matched,
    previous_token_scores,
    probe_correct,
    query_states,
)
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profiles import AfterSizes
from helpers.study.stats import Interval, bootstrap_means, bootstrap_statistic, paired_differences

__all__ = ["SETS", "KINDS", "HEAD_SHARE", "SEPARABILITY_BOUND", "stage_head_sets", "random_sets", "n_top_heads",
           "query_stage_runs", "stage_curves", "half_rise", "two_stages_interval", "stage_ablation_intervals",
           "query_stage_claims", "control_stage_claims"]

KINDS = ("previous_token", "induction")  # the two rankings
SETS = ("none", *KINDS, *(f"random_{k}" for k in KINDS))  # what is ablated in each pass
HEAD_SHARE = 0.10  # arXiv 2505.18752 ablates the top 10% of heads of each kind
SEPARABILITY_BOUND = 0.10  # the dissociation: induction heads may lower separability by at most this (upper end)
MEASURES = {"separability": "probe", "alignment": "readout", "alignment (probe)": "label_probe"}


def stage_head_sets(model, n: int) -> dict[str, list]:
    """The top ``n`` heads by previous-token score and by induction score (both on repeated random tokens, 32 long,
    or as long as two copies fit the context)."""
    length = min(32, (model.cfg.n_ctx - 1) // 2)
    return {"previous_token": top_heads(previous_token_scores(model, length), n),
            "induction": top_heads(induction_scores(model, length), n)}


def random_sets(model, sets: dict[str, list], seed: int) -> dict[str, list]:
    """``{"random_<kind>": heads}``: for each kind of :data:`KINDS`, a layer-matched random set
    (:func:`~helpers.experiments.query_stages.layer_matched`), drawn with ``seed`` apart from both kinds' heads."""
    both = [*sets["previous_token"], *sets["induction"]]
    return {f"random_{k}": layer_matched(model, sets[k], seed + i, exclude=both) for i, k in enumerate(KINDS)}


def _folds(gold: torch.Tensor, folds: int) -> int:
    """The probe's folds: ``folds``, fewer where a class has fewer inputs; 0 where a class has one (no probe)."""
    counts = np.unique(gold.numpy(), return_counts=True)[1]
    f = min(int(folds), int(counts.min()))
    return f if f >= 2 and len(counts) >= 2 else 0


def _stage_cell(model, prompts: Sequence[Prompt], label_ids: Sequence[int], sets: dict, folds: int, seed: int,
                batch_size: int, shared: bool) -> dict:
    """``{set: {"probe": [n, stage] or None, "readout": [n, stage]}}``: per input and stage, 1 where the probe
    (resp. the read-out) finds the gold class, with each set of heads ablated; with nothing ablated (``none``) also
    ``"label_probe"``, the probe on the label-word logits."""
    gold = torch.tensor([p.gold for p in prompts])
    f = _folds(gold, folds)
    out = {}
    for name, heads in sets.items():
        hooks = ablation_hook_pair(heads, at="all") if heads else None
        states = query_states(model, prompts, batch_size, shared, hooks)
        logits = label_logits(model, states, label_ids)
        out[name] = {"probe": torch.as_tensor(probe_correct(states, gold, f, seed)) if f else None,
                     "readout": (logits.argmax(-1) == gold[:, None]).to(torch.int8)}
        if name == "none":
            out[name]["label_probe"] = torch.as_tensor(probe_correct(logits, gold, f, seed)) if f else None
    return out


def _check_sets(model, sets: dict) -> None:
    """Both kinds present, non-empty, of one size, every head within the model: a clear error otherwise."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    missing = [k for k in KINDS if not sets.get(k)]
    if missing:
        raise ValueError(f"sets needs a non-empty list of heads for {missing} (stage_head_sets(model, n))")
    if len({len(sets[k]) for k in KINDS}) != 1:
        raise ValueError(f"the two sets must hold as many heads, got {[len(sets[k]) for k in KINDS]}")
    bad = [h for k in KINDS for h in sets[k] if not (len(h) == 2 and 0 <= h[0] < L and 0 <= h[1] < H)]
    if bad:
        raise ValueError(f"heads {bad[:4]} lie outside the model's {L} layers x {H} heads")


@pins_weights
def query_stage_runs(model, tasks: Sequence[str], sizes: AfterSizes, sets: dict[str, list],
                     progress: bool = True) -> dict:
    """``{(task, seed): {set: {"probe", "readout"}}}`` (module docstring) on ``sizes.n`` inputs of one
    demonstration set per (task, seed), with the head ``sets`` of :func:`stage_head_sets` and a layer-matched random
    set for each (:func:`random_sets`, drawn with the seed), stored on disk."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    _check_sets(model, sets)
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, sizes.n)
        every = {"none": [], **{k: sets[k] for k in KINDS}, **random_sets(model, sets, seed)}
        return _stage_cell(model, s.prompts, s.label_ids, every, sizes.folds, seed, sizes.batch_size, shared=True)

    return run_grid("query_stages", model, tasks, seeds, run,
                    {"n": sizes.n, "folds": sizes.folds, "random": "layer-matched",
                     "sets": {k: [list(map(int, h)) for h in sets[k]] for k in KINDS}},
                    progress=progress and "query stages")


def n_top_heads(model, sizes: AfterSizes) -> int:
    """How many heads each ablated set holds: the top ``sizes.frac`` of all heads, at least 4 (notebook 11 passes
    :data:`HEAD_SHARE`, the paper's share)."""
    return top_share(model, sizes.frac)


def stage_curves(runs: dict, name: str = "none"):
    """A ``pandas.DataFrame``, a row per (task, seed, stage, measure): the share of inputs the probe
    (``separability``), the read-out (``alignment``) or, with nothing ablated, the probe on the label-word logits
    (``alignment (probe)``) gets right with set ``name`` ablated (:data:`SETS`)."""
    import pandas as pd  # lazy

    if name not in SETS:
        raise ValueError(f"name must be one of {SETS}, got {name!r}")
    rows = []
    for (task, seed), r in runs.items():
        for measure, kind in MEASURES.items():
            if r[name].get(kind) is None:
                continue
            for stage, v in enumerate(r[name][kind].float().mean(0).tolist()):
                rows.append({"task": task, "seed": seed, "stage": stage, "measure": measure, "share": v})
    return pd.DataFrame(rows, columns=["task", "seed", "stage", "measure", "share"])


def half_rise(curve) -> float:
    """The first stage where ``curve`` reaches half of the way from its lowest value to its highest; NaN when it
    is flat. ``curve``: a non-empty 1-d sequence of finite numbers."""
    c = np.asarray(curve, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"curve must be a non-empty 1-d sequence (one value per stage), got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"curve holds NaN or inf at stages {np.flatnonzero(~np.isfinite(c)).tolist()[:4]}")
    lo, hi = c.min(), c.max()
    return float("nan") if hi <= lo else float(np.argmax(c >= lo + (hi - lo) / 2))


def _probed(runs: dict) -> dict:
    """The cells with a probe, of the tasks that have one in every seed."""
    ok = {cell for cell, r in runs.items() if r["none"]["probe"] is not None
          and r["none"].get("label_probe") is not None}
    seeds = {s for _, s in runs}
    tasks = [t for t in dict.fromkeys(t for t, _ in runs) if all((t, s) in ok for s in seeds)]
    return {(t, s): runs[(t, s)]["none"] for t in tasks for s in seeds}


def two_stages_interval(runs: dict) -> tuple[Interval | None, dict[str, float]]:
    """The 95% interval of alignment's half-rise stage minus separability's, both by the probe (module docstring;
    seeds, then inputs), and the half-rise stages of the full data (mean over seeds, then tasks): ``separability``,
    ``alignment`` (the label-word probe) and ``readout`` (the fixed read-out, for comparison). ``(None, {})`` when
    no task has a probe in every seed, or the difference is undefined in too many resamples."""
    cells = _probed(runs)
    if not cells:
        return None, {}
    tasks, seeds = list(dict.fromkeys(t for t, _ in cells)), sorted({s for _, s in cells})

    def rises(sample):
        out = {"separability": [], "alignment": [], "readout": []}
        for t in tasks:
            for name, kind in (("separability", "probe"), ("alignment", "label_probe"), ("readout", "readout")):
                out[name].append(np.mean([half_rise(cells[t, s][kind][idx[t]].float().mean(0)) for s, idx in sample]))
        return {k: float(np.mean(v)) for k, v in out.items()}

    sizes = {s: {t: len(cells[t, s]["probe"]) for t in tasks} for s in seeds}
    full = rises([(s, {t: np.arange(sizes[s][t]) for t in tasks}) for s in seeds])
    try:
        iv = bootstrap_statistic(sizes, lambda sample: (lambda r: r["alignment"] - r["separability"])(rises(sample)))
    except ValueError:
        return None, full
    return iv, full


def stage_ablation_intervals(runs: dict, n_layers: int) -> dict[tuple, Interval]:
    """``(kind, measure)``: the 95% interval of the measure with the kind's layer-matched random heads ablated minus
    with its heads ablated (its *drop*), paired per input: ``separability`` the probe at the middle stage
    (``n_layers // 2``; cells with a probe only), ``alignment`` the read-out after the last layer.
    ``("dissociation", measure)``: the previous-token drop minus the induction drop on separability, the induction
    drop minus the previous-token drop on alignment, paired per input. ``("none", measure)`` and ``(set, measure,
    "level")``: the measures themselves."""
    where = {"separability": ("probe", n_layers // 2), "alignment": ("readout", n_layers)}
    probed = _probed(runs)
    first = {"separability": "previous_token", "alignment": "induction"}
    out = {}
    for measure, (kind, stage) in where.items():
        cells = probed if kind == "probe" else runs
        if not cells:
            continue

        def col(name, kind=kind, stage=stage, cells=cells):
            return {c: runs[c][name][kind][:, stage].numpy().astype(float) for c in cells}

        out[("none", measure)] = bootstrap_means(col("none"))
        drop = {}
        for name in KINDS:
            drop[name] = paired_differences(col(f"random_{name}"), col(name))
            out[(name, measure)] = bootstrap_means(drop[name])
            out[(name, measure, "level")] = bootstrap_means(col(name))
            out[(f"random_{name}", measure, "level")] = bootstrap_means(col(f"random_{name}"))
        a, b = first[measure], next(k for k in KINDS if k != first[measure])
        out[("dissociation", measure)] = bootstrap_means(paired_differences(drop[a], drop[b]))
    return out


def _dissociation_alignment(iv: Interval, sep_drop: Interval | None) -> str:
    """The alignment half of the double dissociation (module docstring)."""
    if iv.high < 0 or (sep_drop is not None and sep_drop.low > SEPARABILITY_BOUND):
        return "does not replicate"
    if iv.low > 0 and sep_drop is not None and sep_drop.high <= SEPARABILITY_BOUND:
        return "replicates"
    return "inconclusive"


def query_stage_claims(two: tuple[Interval | None, dict], ablation: dict, n_top: int, n_layers: int,
                       context: str = "") -> list[Claim]:
    """``11.two_stages``, ``11.previous_token_heads_separability``, ``11.induction_heads_alignment``,
    ``11.dissociation_separability`` and ``11.dissociation_alignment`` (module docstring); "not comparable" where
    no task had a probe."""
    iv, rises = two
    crit = ("95% interval of the half-rise stage of the label-word probe's accuracy minus that of the state probe's "
            "(layers), above 0")
    if iv is None:
        out = [claim("11.two_stages", None, "not comparable", crit, context=context,
                     missing="no task had inputs of every class in two folds or more (a probe), or the half-rise "
                             "stage was undefined in too many resamples")]
    else:
        out = [claim("11.two_stages", iv, above_zero(iv), crit, context=context,
                     note=f"half-rise stage: separability {rises['separability']:.1f}, alignment by the probe "
                          f"{rises['alignment']:.1f}, by the fixed read-out {rises['readout']:.1f} (stages "
                          f"0-{n_layers}; §2.1's shallow layers: the first {max(1, n_layers // 3)}, deep: from "
                          f"{n_layers // 2})")]
    specs = {"previous_token": ("11.previous_token_heads_separability", "separability",
                                f"the probe's accuracy at stage {n_layers // 2}"),
             "induction": ("11.induction_heads_alignment", "alignment", "the read-out's accuracy after the last layer")}
    for name, (key, measure, what) in specs.items():
        other = "alignment" if measure == "separability" else "separability"
        crit = (f"95% interval of {what} with {n_top} layer-matched random heads ablated minus with the top {n_top} "
                f"{name} heads, above 0")
        if (name, measure) not in ablation:
            out.append(claim(key, None, "not comparable", crit, context=context, missing="no task had a probe"))
            continue
        iv = ablation[(name, measure)]
        cross = ablation.get((name, other))
        note = (f"{measure}: nothing ablated {ablation[('none', measure)]:.3f}, these heads "
                f"{ablation[(name, measure, 'level')]:.3f}, layer-matched random "
                f"{ablation[(f'random_{name}', measure, 'level')]:.3f}"
                + ("" if cross is None else f"; the same set on {other}: its drop {cross:+.3f}"))
        out.append(claim(key, iv, above_zero(iv), crit, context=context, note=note))
    dis_crit = {"separability": "95% interval of the previous-token heads' drop in the probe's accuracy at stage "
                                f"{n_layers // 2} minus the induction heads' drop (each against its layer-matched "
                                "random set), above 0",
                "alignment": "95% interval of the induction heads' drop in the read-out's accuracy after the last "
                             "layer minus the previous-token heads' drop, above 0, with the induction heads' drop in "
                             f"separability at most {SEPARABILITY_BOUND} (upper end)"}
    for measure, crit in dis_crit.items():
        key = f"11.dissociation_{measure}"
        if ("dissociation", measure) not in ablation:
            out.append(claim(key, None, "not comparable", crit, context=context, missing="no task had a probe"))
            continue
        iv = ablation[("dissociation", measure)]
        if measure == "separability":
            verdict = above_zero(iv)
            note = (f"drops in separability: previous-token heads {ablation[('previous_token', measure)]:+.3f}, "
                    f"induction heads {ablation[('induction', measure)]:+.3f}")
        else:
            sep = ablation.get(("induction", "separability"))
            verdict = _dissociation_alignment(iv, sep)
            note = (f"drops in alignment: induction heads {ablation[('induction', measure)]:+.3f}, previous-token "
                    f"heads {ablation[('previous_token', measure)]:+.3f}; the induction heads' drop in separability "
                    + ("not measured (no probe)" if sep is None else f"{sep:+.3f}"))
        out.append(claim(key, iv, verdict, crit, context=context, note=note))
    return out


def control_stage_claims(model, prompts: Sequence[Prompt], label_ids: Sequence[int], seed: int, batch_size: int,
                         context: str = "", folds: int = 5) -> list[Claim]:
    """The claims on a control's sequences (:mod:`helpers.protocols.power`): the top head of each score (the
    controls' sets hold one head, as notebook 10's) against one layer-matched random head each, every sequence
    run whole."""
    sets = stage_head_sets(model, 1)
    every = {"none": [], **sets, **random_sets(model, sets, seed)}
    cell = _stage_cell(model, prompts, label_ids, every, folds, seed, batch_size, shared=False)
    runs, L = {("control", seed): cell}, model.cfg.n_layers
    return query_stage_claims(two_stages_interval(runs), stage_ablation_intervals(runs, L), 1, L, context)
