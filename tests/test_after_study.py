"""Notebook 11's study object (helpers.protocols.after): its named results are the protocols' own, and its claims
equal the protocol calls made one by one, on a tiny model; a name that is not there says which are."""

from __future__ import annotations

import pytest

from helpers.protocols import flipped_labels as fl
from helpers.protocols import flipped_specific as fsp
from helpers.protocols import isolation_context as ik
from helpers.protocols import query_stages as qs
from helpers.protocols import saliency_context as sx
from helpers.protocols.after import AfterStudy, Named
from helpers.study.profiles import AfterSizes

SIZES = AfterSizes(seeds=(42,), n=6, n_flow=1, random_n=2, k=1, folds=2, frac=0.25, batch_size=4)


def test_named_reads_attributes_and_keys_and_says_what_is_there():
    n = Named({"natural": {"label": 1, "random": 2}, "drop": 3})
    assert n.natural.label == 1 and n["natural"]["random"] == 2 and n.drop == 3 and dict(n)["drop"] == 3
    assert sorted(n) == ["drop", "natural"] and len(n.natural) == 2
    with pytest.raises(AttributeError, match=r"'flipped'.*\['drop', 'natural'\]"):
        _ = n.flipped
    with pytest.raises(KeyError, match="the names here"):
        n["flipped"]
    with pytest.raises(ValueError, match="identifiers"):
        Named({("natural", "label"): 1})


def test_the_study_computes_what_the_protocols_compute_one_by_one(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model, tasks = tiny_models["gpt2"], ("sst2",)
    study = AfterStudy(model, tasks, SIZES)
    runs = fl.flipped_runs(model, tasks, SIZES)
    override, isolated = fl.override_intervals(runs), fl.flipped_isolation_intervals(runs)
    assert study.override.natural_accuracy == override["natural accuracy"] and study.override.truth == override["truth"]
    assert study.isolated.flipped.label == isolated[("flipped", "label")]
    assert study.isolated.natural.difference == isolated["natural"]
    layered = ik.layered_intervals(ik.layered_knockout_runs(model, tasks, SIZES))
    assert study.layered.aggregation.upper == layered[("aggregation", "upper")]
    assert study.layered.context_lower_first == layered["context_lower_first"]
    knockout = ik.context_knockout_intervals(ik.context_knockout_runs(model, tasks, SIZES))
    specific = fsp.flipped_specific_intervals(fsp.flipped_specific_runs(model, tasks, SIZES))
    assert study.specific.moved_label_positions == specific["moved, label positions"]
    head_sets = qs.stage_head_sets(model, qs.n_top_heads(model, SIZES))
    stage_runs = qs.query_stage_runs(model, tasks, SIZES, head_sets)
    L, context = model.cfg.n_layers, "tiny"
    natural = ({c: r["flows"]["natural"] for c, r in runs.items()}, {c: r["context"]["natural"] for c, r in runs.items()})
    by_hand = ([fl.semantic_anchor_claim(override, context)] + fl.flipped_flow_claims(runs, tasks, context)
               + [fl.flipped_isolation_claim(isolated["flipped"], SIZES.k, context,
                                             note=f"natural labels, same inputs: {isolated['natural']:.3f}")]
               + fsp.flipped_specific_claims(specific, SIZES.k, context)
               + sx.context_flow_claims(sx.context_flow_intervals(*natural), context)
               + [ik.context_knockout_claim(knockout, SIZES.k, context, isolation=isolated[("natural", "label")])]
               + ik.layered_claims(layered, L, context)
               + qs.query_stage_claims(qs.two_stages_interval(stage_runs), qs.stage_ablation_intervals(stage_runs, L),
                                       len(head_sets["induction"]), L, context))
    got = study.claims(context)
    assert [c.key for c in got] == [c.key for c in by_hand]
    assert [(c.verdict, c.ours, c.note, c.criterion) for c in got] == [(c.verdict, c.ours, c.note, c.criterion)
                                                                       for c in by_hand]
    assert set(study.ablation_curves()["ablated"]) == set(qs.SETS)
    assert "alignment (probe)" not in set(study.ablation_curves()["measure"])
