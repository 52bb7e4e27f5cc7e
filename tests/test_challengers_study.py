"""Notebook 10's study object (helpers.protocols.challengers): its named results are the protocols' own, and its
claims equal the protocol calls made one by one, on a tiny model."""

from __future__ import annotations

from dataclasses import replace

from helpers.experiments.head_ablation import swap_averaged
from helpers.protocols import aucroc_span as asp
from helpers.protocols import compression_span as csp
from helpers.protocols import compression_specific as cs
from helpers.protocols import head_ablation as ha
from helpers.protocols import head_scores as hs
from helpers.protocols import isolation_classes as ic
from helpers.protocols import label_gathering as lg
from helpers.protocols import label_reading as lr
from helpers.protocols import saliency_classes as sc
from helpers.protocols.challengers import ChallengersStudy
from helpers.protocols.rankings import head_rankings
from helpers.study.profile_table import PROFILES
from helpers.study.profiles import label_span_sizes


def test_the_study_computes_what_the_protocols_compute_one_by_one(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model, tasks = tiny_models["gpt2"], ("sst2",)
    profile = replace(PROFILES["smoke"], tasks=tasks)
    fs, iz, hz = sc.class_saliency_sizes(profile), ic.class_isolation_sizes(profile), hs.head_score_sizes(profile)
    spans = label_span_sizes(profile)
    study = ChallengersStudy(model, tasks, fs, iz, hz, spans)
    flow_runs = sc.class_saliency_runs(model, tasks, fs)
    loyalty = ic.class_loyalty_intervals(ic.class_isolation_runs(model, tasks, iz))
    reading_runs = lr.reading_runs(model, tasks, iz)
    gathering = lg.gathering_intervals(lg.gathering_runs(model, tasks, iz))
    anchors = cs.specificity_intervals(cs.specificity_runs(model, tasks, iz))
    assert study.gathering.label == gathering["label"] and study.anchors.relabelled == anchors["relabelled"]
    assert study.anchors.anchor_minus_in_place == anchors["anchor - in_place"]
    assert study.reading.difference == lr.reading_interval(reading_runs)
    rankings = head_rankings(model, tasks, hz)
    ablated = ha.head_sets_runs(model, tasks, rankings.top, hz.ablation_sizes())
    foobar = ha.head_sets_foobar_runs(model, tasks, rankings.top, hz.foobar_sizes())
    head_ivs = hs.head_set_intervals(ha.sets_cells(ablated))
    foobar_ivs = hs.head_set_intervals(ha.sets_cells(swap_averaged(foobar["foo/bar"], foobar["bar/foo"])))
    span_loyalty = ic.class_loyalty_intervals(ic.span_isolation_runs(model, spans))
    span_auc = asp.span_aucroc_runs(model, spans)
    span_anchor = csp.span_anchor_intervals(csp.span_anchor_runs(model, spans))
    context = "tiny"
    by_hand = (sc.class_saliency_claims(sc.class_flow_intervals(flow_runs, model.cfg.n_layers), context)
               + ic.class_isolation_claims(loyalty, iz.k, context)
               + hs.head_set_claims(head_ivs, rankings.n_top, context, foobar=foobar_ivs)
               + [lr.reading_claim(lr.reading_interval(reading_runs), context=context),
                  lg.gathering_claim(gathering, iz.k, context=context),
                  *cs.specificity_claims(anchors, context=context),
                  ic.span_isolation_claim(span_loyalty, spans.k, context),
                  asp.span_aucroc_claim(asp.span_aucroc_interval(span_auc), context),
                  csp.span_anchor_claim(span_anchor, context)])
    by_hand = ha.foobar_measured_on(by_hand, tasks)
    got = study.claims(context)
    assert [c.key for c in got] == [c.key for c in by_hand]
    assert [(c.verdict, c.ours, c.note, c.criterion) for c in got] == [(c.verdict, c.ours, c.note, c.criterion)
                                                                       for c in by_hand]
    assert set(study.sizes()) == {"flow_sizes", "isolation_sizes", "head_sizes", "span_sizes", "top_heads"}
