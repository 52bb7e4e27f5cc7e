"""Notebook 07's study object (helpers.protocols.heads): its named results are the protocols' own, on a tiny model,
and the regime step's parts hang together."""

from __future__ import annotations

from dataclasses import replace

from helpers.protocols import head_ablation as ha
from helpers.protocols import incontext_heads as ih
from helpers.protocols import mapping_control as mc
from helpers.protocols.heads import SWAPS, HeadsStudy
from helpers.study.profile_table import PROFILES
from helpers.study.stats import bootstrap_means


def test_the_study_computes_what_the_protocols_compute(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model = tiny_models["gpt2"]
    study = HeadsStudy(model, "tiny-gpt2", replace(PROFILES["smoke"], tasks=("sst2",)))
    kw = {"model_name": "tiny-gpt2"}  # each run's batch comes with its sizes (the eval row of the run-sizes table)
    runs = {m: mc.accuracy_runs(model, uts, study.heads_sizes, **kw) for m, uts in study.tasks_by_mapping.items()}
    assert study.accuracy == {m: bootstrap_means({k: r["correct"] for k, r in rs.items()}) for m, rs in runs.items()}
    assert study.swap_control[SWAPS[0]] == mc.mapping_intervals(runs["foo/bar"], runs["bar/foo"])
    scores = ih.attribution_runs(model, study.foobar, study.heads_sizes, **kw)
    assert set(study.ic_heads) == set(study.task_names)
    assert all(study.n_ic <= len(h) <= 2 * study.n_ic for h in study.ic_heads.values())  # each label's top, merged
    assert study.ablation_intervals == ha.ablation_intervals(
        ha.ablation_runs(model, study.foobar, study.ic_heads, study.heads_sizes, **kw))
    assert scores.keys() == study.scores.keys()
    regime = study.regime
    assert (regime.ablation is None) == (not regime.clear) == (regime.heads is None)
    claims, overall, metrics = study.claims()
    keys = [c.key for c in claims]
    assert keys[0] == "07.foobar_icl" and "07.ablation_at_q" in keys and "07.two_towers" in keys
    assert ("07.regime_ablation" in keys) == bool(regime.clear)
    assert metrics["overall"] == overall and metrics["incontext_heads"] == study.ic_heads
    assert metrics["accuracy"] == {m: f"{iv:.3f}" for m, iv in study.accuracy.items()}
