"""The protocol of anchor-distance error diagnosis (paper A §3.3, notebook 06): its run sizes, its runs over tasks x
seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.diagnosis`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers.experiments.diagnosis import QKVectors, collect_qk, diagnosis_set, most_confused, seed_averaged_spearman
from helpers.study.claims import claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_statistic

__all__ = ["spearman_interval", "diagnosis_verdict", "DiagnosisSizes", "diagnosis_sizes", "qk_runs",
           "diagnosis_claims"]


def spearman_interval(vecs: dict, layer: int, n_components: int = 10, n_boot: int = 1000, seed: int = 0):
    """:func:`seed_averaged_spearman` with its 95% two-level bootstrap interval (seeds, then inputs)."""
    from threadpoolctl import threadpool_limits  # lazy: only while a thread limit is set

    # one BLAS thread: each resample refits a PCA on a ~100 x 1000 matrix, which two threads do twice as slowly
    with threadpool_limits(1):
        return bootstrap_statistic({s: len(v.gold) for s, v in vecs.items()},
                                   lambda sample: seed_averaged_spearman(vecs, layer, n_components, sample), n_boot,
                                   seed=seed)


def diagnosis_verdict(iv, strong: float = 0.5) -> str:
    """Verdict on §3.3 from the 95% interval of the rank correlation (criteria fixed before the run):
    "replicates" if the interval lies above zero and the estimate is at least ``strong``; "partly" if it lies
    above zero; "does not replicate" if it lies below zero; "inconclusive" if it contains zero."""
    if iv.low > 0:
        return "replicates" if iv.estimate >= strong else "partly"
    if iv.high < 0:
        return "does not replicate"
    return "inconclusive"


@dataclass(frozen=True)
class DiagnosisSizes(RunSizes):
    """Run sizes of notebook 06 (:func:`diagnosis_sizes`)."""

    seeds: tuple[int, ...]
    n: int  # test inputs per seed
    batch_size: int


def diagnosis_sizes(profile) -> DiagnosisSizes:
    """Run size of notebook 06: ``profile.n_diagnosis`` test inputs of the profile's first seed (every seed on
    ``paper``)."""
    return DiagnosisSizes(**run_sizes("diagnosis", profile))


def qk_runs(model, task: str, sizes: DiagnosisSizes, model_name: str) -> dict[int, QKVectors]:
    """``{seed: QKVectors}``: :func:`collect_qk` at every layer on ``sizes.n`` inputs of ``task`` for every seed of
    ``sizes`` (:func:`diagnosis_sizes`), each cached on disk (``diagnosis_qk``: model, task, seed, n)."""
    from helpers.core.grid import run_grid

    def run(task, seed):
        icl = diagnosis_set(model, task, seed, sizes.n)
        return collect_qk(model, icl.prompts, icl.label_ids, batch_size=sizes.batch_size)

    runs = run_grid("diagnosis_qk", model, [task], list(sizes.seeds), run, {"n": sizes.n}, model_name=model_name)
    return {seed: out for (_, seed), out in runs.items()}


def diagnosis_claims(rho_iv, predicted: np.ndarray, actual: np.ndarray, names: Sequence[str], layer: int,
                     n_layers: int, context: str = "") -> list:
    """Notebook 06's claim: the Spearman interval at the preset layer with :func:`diagnosis_verdict`, and the most
    confused pair by each measure in the note."""
    crit = ("95% interval of the Spearman correlation (bootstrap over seeds and inputs): replicates if above 0 and "
            "the estimate is at least 0.5; partly if above 0; does not replicate if below 0; else inconclusive")
    note = (f"Layer {layer} of {n_layers}. Most confused pair, actual: {most_confused(actual, names)}; "
            f"predicted: {most_confused(predicted, names)}.")
    return [claim("06.confusion_agreement", rho_iv, diagnosis_verdict(rho_iv), crit, context=context, note=note)]
