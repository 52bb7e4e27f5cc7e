"""Notebook 11's protocols: the knockout's control rows, the query's states under an ablation, the runs over tasks x
seeds on tiny random models of the three architectures, the intervals and criteria by hand, and the verdict table."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from masked_forward import masked_label_logits

from helpers.exercises.tiny import TINY_KINDS
from helpers.study.profiles import AfterSizes
from helpers.study.stats import Interval

TINY_SIZES = AfterSizes(seeds=(42,), n=8, n_flow=2, random_n=2, k=1, folds=2, frac=0.02, batch_size=4)


def _trec(model, n=3):
    import warnings

    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, "trec", seed=42, n_test=n)


# ------------------------------------------------------------------ the knockout's control


def test_content_rows_lie_in_each_demonstration_text_and_follow_the_seed(tiny_model):
    from helpers.experiments.isolation_context import content_rows

    s = _trec(tiny_model)
    p = s.prompts[0]
    rows = content_rows(p, 7)
    assert len(rows) == p.n_demos
    assert all(a <= r < b for r, (a, b) in zip(rows, p.text_spans))
    assert content_rows(p, 7) == rows and all(content_rows(q, 7) == rows for q in s.prompts)  # same demonstrations
    assert any(content_rows(p, seed) != rows for seed in range(8, 20))


def test_earlier_demo_pairs_with_rows_move_only_the_rows(tiny_model):
    from helpers.core.positions import LINKS, earlier_demo_pairs
    from helpers.experiments.isolation_context import content_rows

    p = _trec(tiny_model).prompts[0]
    rows = content_rows(p, 3)
    for links in LINKS:
        ref, got = earlier_demo_pairs(p, None, links), earlier_demo_pairs(p, None, links, rows)
        for k in range(1, p.n_demos):  # the same keys, in the control's row
            assert torch.equal(got[rows[k]], ref[p.label_pos[k]])
        assert got.sum() == ref.sum() and all(j < i for i, j in got.nonzero().tolist())
    bad = list(rows)
    bad[1] = p.label_pos[1] + 1  # past its own demonstration
    with pytest.raises(ValueError, match="within its own demonstration"):
        earlier_demo_pairs(p, None, "all", bad)
    with pytest.raises(ValueError, match="one position per demonstration"):
        earlier_demo_pairs(p, None, "all", rows[:-1])


def test_the_control_knockout_equals_a_masked_forward_and_shares_its_prefix(tiny_model):
    from helpers.core.positions import earlier_demo_pairs
    from helpers.experiments.isolation_context import content_rows, run_context_knockout

    s = _trec(tiny_model)
    layers = [0, 2]
    want = [masked_label_logits(tiny_model, p, earlier_demo_pairs(p, None, "all", content_rows(p, 5)), layers,
                                s.label_ids) for p in s.prompts]
    for shared in (True, False):
        got = run_context_knockout(tiny_model, s.prompts, s.label_ids, layers, shared=shared, control_seed=5)
        torch.testing.assert_close(got.label_logits.float(), torch.stack(want), atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ the query's states under an ablation


def test_query_states_under_an_ablation_match_the_ablated_prediction(tiny_sst2_set):
    """The last stage read through the label words is the ablated model's own prediction; shared prefix == whole
    prompts; no heads == no hooks."""
    from helpers.experiments.head_ablation import ablation_hook_pair, ablation_predictions
    from helpers.experiments.query_stages import label_readout, query_states

    model, prompts, lids = tiny_sst2_set
    heads = [(0, 1), (1, 0)]
    plain = query_states(model, prompts)
    torch.testing.assert_close(query_states(model, prompts, hooks=([], None)), plain)
    ablated = {shared: query_states(model, prompts, 2, shared, ablation_hook_pair(heads, at="all"))
               for shared in (True, False)}
    torch.testing.assert_close(ablated[True], ablated[False], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(ablated[True][:, 2:], plain[:, 2:])  # layer 1's output changes what follows
    torch.testing.assert_close(ablated[True][:, 0], plain[:, 0])  # stage 0 is the embedding
    pred = ablation_predictions(model, prompts, lids, heads, at="all").label_logits.argmax(-1)
    assert torch.equal(label_readout(model, ablated[True], lids)[:, -1], pred)


def test_mean_attention_needs_no_unembedding(tiny_model):
    from helpers.core.heads import mean_attention, repeated_random_tokens

    toks = repeated_random_tokens(tiny_model, 8, 4, 0)
    rows = torch.arange(1, toks.shape[1])
    _, cache = tiny_model.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_pattern"))
    want = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][:, :, rows, rows - 1].mean((0, 2))
                        for l in range(tiny_model.cfg.n_layers)])
    torch.testing.assert_close(mean_attention(tiny_model, toks, rows, rows - 1, batch_size=3), want)


# ------------------------------------------------------------------ the runs on a tiny model


@pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")
def test_flipped_runs_pair_their_inputs_and_are_stored(tmp_path, monkeypatch):
    """On one architecture: the protocol's bookkeeping (the methods it runs are tested on all three)."""
    from helpers.exercises.tiny import tiny_model as shared_tiny
    from helpers.protocols import flipped_labels as fl

    tiny_model = shared_tiny("gpt2")
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    runs = fl.flipped_runs(tiny_model, ["sst2", "trec"], TINY_SIZES, progress=False)
    L = tiny_model.cfg.n_layers
    for (task, _), r in runs.items():
        n = len(r["gold"])
        assert n == len(r["pred"]["natural"]) == len(r["pred"]["flipped"]) == len(r["pred"]["prior"])
        assert tuple(r["perm"].tolist()) == fl.flip_permutation(2 if task == "sst2" else 6)
        for kind in fl.PROMPTS:
            assert r["flows"][kind].shape == (2, L, 3) and r["context"][kind].shape == (2, L, 2)
            assert len(r["loyal"][kind]["random"]) == 2 and len(r["loyal"][kind]["label"]) == n
    again = fl.flipped_runs(tiny_model, ["sst2", "trec"], TINY_SIZES, progress=False)  # read back from the store
    for cell in runs:
        assert torch.equal(again[cell]["pred"]["flipped"], runs[cell]["pred"]["flipped"])
    ivs = fl.override_intervals(runs)
    assert {"truth", "prompt", "prior", "truth - prompt", "natural accuracy", "same"} <= set(ivs)
    on_sst2 = fl.override_intervals({c: r for c, r in runs.items() if c[0] == "sst2"})
    assert on_sst2["truth"].estimate + on_sst2["prompt"].estimate == pytest.approx(1)  # two classes: one or the other
    keys = [c.key for c in fl.flipped_flow_claims(runs, ["sst2", "trec"])]
    assert keys == ["11.flipped_shallow_wp_dominant", "11.flipped_deep_pq_dominant", "11.flipped_label_flows_above_ww"]
    frame = fl.after_flow_frame(runs)
    assert set(frame["flow"]) == {"S_wp", "S_pq", "S_ww", "from_label", "from_text"} and len(frame) == 2 * 2 * L * 5
    with pytest.raises(TypeError, match="AfterSizes"):
        fl.flipped_runs(tiny_model, ["sst2"], object())


@pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")
@pytest.mark.parametrize("kind", TINY_KINDS)
def test_flipped_runs_read_notebook_02s_isolation_of_the_same_natural_prompts(kind, tmp_path, monkeypatch):
    """Where notebook 02's isolation of the same inputs is stored, the natural prompts' loyalty is read from it, equal
    to computing it; where it is not stored, or ran other inputs, nothing of notebook 02 is computed or read."""
    from helpers.exercises.tiny import make_tiny_model
    from helpers.protocols import flipped_labels as fl
    from helpers.protocols import isolation as iso
    from helpers.study.profile_table import PROFILES

    model = make_tiny_model(kind, n_layers=8)  # notebook 02 isolates 5 layers, its sweep up to 7
    sizes = AfterSizes(seeds=(42,), n=6, n_flow=1, random_n=2, k=5, folds=2, frac=0.02, batch_size=4)
    profile = PROFILES["default"].with_(seeds=(42,), n_test=6, n_random_control=3, tasks=("sst2",), batch_size=4)
    calls = []
    real = fl.isolation_experiment
    monkeypatch.setattr(fl, "isolation_experiment", lambda *a, **kw: calls.append(len(a[1])) or real(*a, **kw))

    def flipped(store, prof):
        monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / store))
        calls.clear()
        return fl.flipped_runs(model, ["sst2"], sizes, progress=False, profile=prof)[("sst2", 42)]

    def same_loyalty(a, b):
        return all(torch.equal(a["loyal"][name][c], b["loyal"][name][c]) for name in fl.PROMPTS
                   for c in ("label", "random"))

    own = flipped("own", None)
    assert len(calls) == 2  # natural and flipped prompts
    assert same_loyalty(flipped("empty", profile), own)
    assert len(calls) == 2  # nothing stored: computed, and notebook 02's run is not
    assert iso.stored_isolation(model, "sst2", 42, iso.isolation_sizes(profile), profile="default") is None
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "nb02"))
    iso.isolation_runs(model, ["sst2"], iso.isolation_sizes(profile), profile="default", progress=False)
    ran, cell = iso.stored_isolation(model, "sst2", 42, iso.isolation_sizes(profile), profile="default")
    assert len(ran.prompts) == 6 and len(cell[("random", "first", 5)]) == 3
    # the named query notebook 11 reads it by: the same cell, and None for a task or seed notebook 02 did not run
    named = iso.notebook02_cell(model, "sst2", 42, profile)
    assert [p.text for p in named[0].prompts] == [p.text for p in ran.prompts] and named[1].keys() == cell.keys()
    assert iso.notebook02_cell(model, "sst2", 43, profile) is None and iso.notebook02_cell(model, "trec", 42, profile) is None
    assert same_loyalty(flipped("nb02", profile), own)
    assert len(calls) == 1  # the flipped prompts only
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "other"))  # notebook 02 ran fewer inputs: not read
    iso.isolation_runs(model, ["sst2"], iso.isolation_sizes(profile.with_(n_test=4)), profile="default",
                       progress=False)
    assert same_loyalty(flipped("other", profile.with_(n_test=4)), own) and len(calls) == 2
    with pytest.raises(TypeError, match="Profile"):
        fl.flipped_runs(model, ["sst2"], sizes, profile="default")


@pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")
def test_knockout_and_stage_runs_on_a_tiny_model(tiny_model, tmp_path, monkeypatch):
    from helpers.protocols import isolation_context as ik
    from helpers.protocols import query_stages as qs

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    knock = ik.context_knockout_runs(tiny_model, ["sst2"], TINY_SIZES, progress=False)
    assert set(knock[("sst2", 42)]) == {"label", "control"} and len(knock[("sst2", 42)]["label"]) == 8
    claim = ik.context_knockout_claim(ik.context_knockout_intervals(knock), 1)
    assert claim.key == "11.context_knockout" and claim.verdict in ("replicates", "inconclusive", "does not replicate")
    sets = qs.stage_head_sets(tiny_model, 2)
    assert all(len(v) == 2 for v in sets.values())
    runs = qs.query_stage_runs(tiny_model, ["sst2"], TINY_SIZES, sets, progress=False)
    cell = runs[("sst2", 42)]
    L = tiny_model.cfg.n_layers
    assert set(cell) == set(qs.SETS)
    assert all(cell[s]["readout"].shape == (8, L + 1) for s in qs.SETS)
    assert all(cell[s]["probe"] is None or cell[s]["probe"].shape == (8, L + 1) for s in qs.SETS)
    assert cell["none"]["label_probe"] is None or cell["none"]["label_probe"].shape == (8, L + 1)
    keys = [c.key for c in qs.query_stage_claims(qs.two_stages_interval(runs), qs.stage_ablation_intervals(runs, L),
                                                 2, L)]
    assert keys == ["11.two_stages", "11.previous_token_heads_separability", "11.induction_heads_alignment",
                    "11.dissociation_separability", "11.dissociation_alignment"]
    layered = ik.layered_knockout_runs(tiny_model, ["sst2"], TINY_SIZES, progress=False)
    assert len(layered[("sst2", 42)]) == 3 * 2 * 2
    got = ik.layered_claims(ik.layered_intervals(layered), L)
    assert [c.key for c in got] == ["11.context_labels_lower", "11.context_text_lower", "11.aggregation_upper",
                                    "11.context_lower_first", "11.aggregation_upper_later"]


# ------------------------------------------------------------------ criteria by hand


def test_half_rise_by_hand():
    from helpers.protocols.query_stages import half_rise

    assert half_rise([0.5, 0.5, 0.6, 0.9, 1.0]) == 3.0  # half way from 0.5 to 1.0 is 0.75
    assert half_rise([0.0, 1.0]) == 1.0
    assert half_rise([0.9, 0.1, 0.2]) == 0.0  # a falling curve starts above half way
    assert np.isnan(half_rise([0.3, 0.3]))
    for bad, match in (([float("nan"), 0, 1], "NaN"), ([], "non-empty"), ([[0, 1], [1, 0]], "1-d")):
        with pytest.raises(ValueError, match=match):
            half_rise(bad)


def _stage_cell(probe_rise: int, read_rise: int, n: int = 6, stages: int = 5) -> dict:
    from helpers.protocols.query_stages import SETS

    def curve(rise):
        return torch.tensor([[int(s >= rise) for s in range(stages)]] * n)

    out = {name: {"probe": curve(probe_rise), "readout": curve(read_rise)} for name in SETS}
    out["none"]["label_probe"] = curve(read_rise)  # the like-for-like alignment: a probe, rising with the read-out
    return out


def test_two_stages_interval_by_hand():
    from helpers.protocols.query_stages import two_stages_interval

    runs = {("a", 1): _stage_cell(1, 3), ("a", 2): _stage_cell(1, 4), ("b", 1): _stage_cell(2, 2),
            ("b", 2): _stage_cell(2, 2)}
    iv, rises = two_stages_interval(runs)
    assert rises == {"separability": pytest.approx(1.5), "alignment": pytest.approx(2.75),
                     "readout": pytest.approx(2.75)}
    assert iv.estimate == pytest.approx(1.25)  # task a: 3.5 - 1 = 2.5, task b: 0
    none = {cell: {k: dict(v, probe=None) for k, v in r.items()} for cell, r in runs.items()}
    assert two_stages_interval(none) == (None, {})
    part = dict(runs)
    part[("b", 2)] = {k: dict(v, probe=None) for k, v in runs[("b", 2)].items()}  # task b loses a seed: left out
    assert two_stages_interval(part)[1]["alignment"] == pytest.approx(3.5)


def test_stage_ablation_intervals_pair_each_set_with_its_layer_matched_random_set():
    from helpers.protocols.query_stages import stage_ablation_intervals

    cell = _stage_cell(0, 0, n=4, stages=3)
    cell["previous_token"]["probe"] = torch.zeros(4, 3, dtype=torch.long)  # separability gone at every stage
    ivs = stage_ablation_intervals({("a", 1): cell}, n_layers=2)
    assert ivs[("previous_token", "separability")].estimate == 1.0
    assert ivs[("induction", "separability")].estimate == 0.0
    assert ivs[("previous_token", "alignment")].estimate == 0.0 and ivs[("none", "alignment")].estimate == 1.0
    assert ivs[("dissociation", "separability")].estimate == 1.0  # previous-token drop 1 minus induction drop 0
    cell["random_previous_token"]["probe"] = torch.zeros(4, 3, dtype=torch.long)  # its own baseline lost it too
    assert stage_ablation_intervals({("a", 1): cell}, 2)[("previous_token", "separability")].estimate == 0.0


def _iv(x, half=0.01):
    return Interval(x, x - half, x + half, 1, 10)


@pytest.mark.parametrize("align, sep_drop, verdict", [
    (0.3, 0.02, "replicates"),  # induction heads lower alignment more, separability within the bound
    (0.3, 0.3, "does not replicate"),  # ... but they also break separability: no dissociation
    (-0.3, 0.02, "does not replicate"),  # previous-token heads lower alignment more
    (0.0, 0.02, "inconclusive"),
    (0.3, 0.095, "inconclusive"),  # the drop's interval holds the bound
])
def test_the_double_dissociation_criterion_on_synthetic_effects(align, sep_drop, verdict):
    from helpers.protocols.query_stages import query_stage_claims

    ablation = {("none", m): _iv(0.8) for m in ("separability", "alignment")}
    for name in ("previous_token", "induction", "random_previous_token", "random_induction"):
        for m in ("separability", "alignment"):
            ablation[(name, m, "level")] = _iv(0.5)
    ablation |= {("previous_token", "separability"): _iv(0.2), ("previous_token", "alignment"): _iv(0.0),
                 ("induction", "separability"): _iv(sep_drop), ("induction", "alignment"): _iv(align),
                 ("dissociation", "separability"): _iv(0.2 - sep_drop), ("dissociation", "alignment"): _iv(align)}
    got = {c.key: c.verdict for c in query_stage_claims((None, {}), ablation, 4, 6)}
    assert got["11.dissociation_alignment"] == verdict
    assert got["11.dissociation_separability"] == ("replicates" if 0.2 - sep_drop > 0.01 else
                                                   "does not replicate" if 0.2 - sep_drop < -0.01 else "inconclusive")


def test_folds_follow_the_rarest_class():
    from helpers.protocols.query_stages import _folds

    assert _folds(torch.tensor([0] * 6 + [1] * 6), 5) == 5
    assert _folds(torch.tensor([0] * 6 + [1] * 3), 5) == 3
    assert _folds(torch.tensor([0] * 6 + [1]), 5) == 0  # a class of one input: no probe
    assert _folds(torch.tensor([0] * 6), 5) == 0  # one class: nothing to separate


def test_context_flow_intervals_are_the_ratio_to_s_ww_by_hand():
    from helpers.protocols.saliency_context import context_flow_intervals

    L = 6  # shallow layers: the first 2
    flows = torch.ones(3, L, 3)
    flows[..., 2] = 2.0  # S_ww
    context = torch.ones(3, L, 2) * torch.tensor([4.0, 1.0])
    context[:, 2:] = 100.0  # deep layers do not count
    ivs = context_flow_intervals({("t", 1): flows}, {("t", 1): context})
    assert ivs["from_label"].estimate == pytest.approx(1.0) and ivs["from_text"].estimate == pytest.approx(-0.5)
    assert ivs["S_wp"].estimate == pytest.approx(-0.5)  # S_wp = 1 against S_ww = 2, for scale
    context[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="earlier demonstration"):
        context_flow_intervals({("t", 1): flows}, {("t", 1): context})


@pytest.mark.parametrize("override, reads, verdict", [
    (0.01, 0.3, "replicates"),  # reads its context, no override
    (0.4, 0.3, "does not replicate"),  # reads its context and the flipped mapping overrides what it knows
    (0.01, 0.0, "inconclusive"),  # an override rate of 0 in a model that reads no context says nothing
    (0.05, 0.3, "inconclusive"),  # the interval holds the bound
    (None, 0.3, "not comparable"),
])
def test_semantic_anchor_criterion_needs_both_halves(override, reads, verdict):
    from helpers.protocols.flipped_labels import semantic_anchor_claim

    ivs = {k: _iv(0.5, 0.1) for k in ("truth", "prompt", "prior", "natural accuracy", "zero-shot accuracy", "same")}
    ivs |= {"override": None if override is None else _iv(override), "reads context": _iv(reads, 0.1)}
    c = semantic_anchor_claim(ivs)
    assert c.verdict == verdict
    if verdict == "inconclusive" and reads == 0.0:
        assert "does not read its context" in c.note


def test_override_rate_by_hand():
    from helpers.experiments.flipped_labels import override_rate

    perm = (1, 2, 0)
    gold = [0, 1, 2, 0, 1, 2]
    natural = [0, 1, 2, 1, 1, 2]  # input 3 wrong with natural labels
    prior = [0, 1, 0, 0, 1, 2]  # input 2 wrong without demonstrations
    flipped = [1, 1, 0, 1, 2, 2]  # on inputs 0, 1, 4, 5 (right both ways): 0 -> 1 follows, 1 stays, 4 -> 2 follows
    got = override_rate(flipped, natural, prior, gold, perm)
    assert got.tolist() == [1, 0, 1, 0]
    assert override_rate(flipped, [1, 2, 0] * 2, prior, gold, perm).size == 0  # nothing right both ways


@pytest.mark.parametrize("bad, match", [
    ({"pred": [0.5, 1.0]}, "whole class indices"), ({"pred": [float("nan"), 1]}, "whole class indices"),
    ({"gold": [-1, 0]}, "outside"), ({"gold": [5, 0]}, "outside"), ({"pred": ["a", "b"]}, "class indices"),
    ({"perm": (0, 0)}, "permutation"), ({"perm": (0, 1)}, "not flipped"), ({"perm": (1.5, 0)}, "whole class"),
    ({"pred": [[0, 1]]}, "1-d"),
])
def test_agreements_refuse_what_is_not_a_class(bad, match):
    from helpers.experiments.flipped_labels import agreements

    args = {"pred": [1, 0], "gold": [0, 1], "perm": (1, 0)} | bad
    with pytest.raises(ValueError, match=match):
        agreements(args["pred"], args["gold"], args["perm"])


def test_flipped_demos_refuse_a_fractional_or_identity_permutation():
    from helpers.core.prompts import Demo
    from helpers.experiments.flipped_labels import flipped_demos

    demos = [Demo("a", 0, 0), Demo("b", 1, 1)]
    for perm, match in (((1.5, 0), "whole class"), ((0, 1), "not flipped"), ((1, 1), "permutation")):
        with pytest.raises(ValueError, match=match):
            flipped_demos(demos, perm)
    assert [d.label for d in flipped_demos(demos, (1, 0))] == [1, 0]


def test_after_verdicts_follow_the_rule():
    from helpers.study.after_report import AFTER_ACCOUNTS, after_table, after_verdicts
    from helpers.study.claims import claim

    def claims(verdicts):
        return [claim(k, None, v, "c") for k, v in verdicts.items()]

    keys = [k for ks in AFTER_ACCOUNTS.values() for k in ks]
    semantic, context, stages = AFTER_ACCOUNTS
    got = after_verdicts(claims({k: "replicates" for k in keys}), which="checks")  # the paper's checks' verdict
    assert set(got.values()) == {"supported"}
    assert set(after_verdicts(claims({k: "replicates" for k in keys})).values()) == {"power not recorded"}
    mixed = {k: "replicates" for k in keys} | {AFTER_ACCOUNTS[context][0]: "inconclusive"}
    mixed |= {k: "does not replicate" for k in AFTER_ACCOUNTS[stages]}
    mixed |= {AFTER_ACCOUNTS[semantic][0]: "does not replicate"}
    got = after_verdicts(claims(mixed), which="checks")
    assert got == {semantic: "partly", context: "partly", stages: "not supported"}
    assert after_verdicts(claims({k: "inconclusive" for k in AFTER_ACCOUNTS[stages]}),
                          which="checks") == {stages: "inconclusive"}
    assert list(after_table(claims(mixed)).index) == list(AFTER_ACCOUNTS)


# ------------------------------------------------------------------ both steps, layer by layer


@pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")
def test_each_layered_knockout_equals_a_hand_written_masked_forward(tiny_model):
    """Every step, rows and window of the layered knockout against the same edges blanked by hand in a whole-prompt
    forward; the shared-prefix path (contextualisation in the prefix, aggregation in the suffix) == whole prompts."""
    from helpers.core.edges import run_edge_knockout
    from helpers.core.positions import earlier_demo_pairs, position_classes
    from helpers.experiments.isolation_context import (
        content_rows,
        layer_windows,
        q_content_cols,
        q_label_pairs,
    )

    s = _trec(tiny_model)
    L = tiny_model.cfg.n_layers
    windows = layer_windows(L)
    assert windows == {"lower": list(range(L // 2)), "upper": list(range(L // 2, L))}
    p = s.prompts[0]
    cols = q_content_cols(p, 3)
    assert len(cols) == len(position_classes(p)["label"]) and not set(cols) & set(position_classes(p)["label"])
    assert all(c < p.query_span[0] for c in cols)
    edges = {"labels": lambda p, seq=None: earlier_demo_pairs(p, seq, "label"),
             "text control": lambda p, seq=None: earlier_demo_pairs(p, seq, "text", content_rows(p, 3)),
             "aggregation": lambda p, seq=None: q_label_pairs(p, seq),
             "aggregation control": lambda p, seq=None: q_label_pairs(p, seq, q_content_cols(p, 3))}
    for name, pairs in edges.items():
        for window, layers in windows.items():
            masks = [pairs(q) for q in s.prompts]
            assert all(m.any() and all(j < i for i, j in m.nonzero().tolist()) for m in masks)
            want = [masked_label_logits(tiny_model, q, m, layers, s.label_ids) for q, m in zip(s.prompts, masks)]
            for shared in (True, False):
                got = run_edge_knockout(tiny_model, s.prompts, s.label_ids, layers, pairs, batch_size=2, shared=shared)
                torch.testing.assert_close(got.label_logits.float(), torch.stack(want), atol=1e-4, rtol=1e-4,
                                           msg=f"{name}, {window}, shared={shared}")


def test_q_label_pairs_mark_q_against_every_label_token(tiny_model):
    from helpers.core.positions import position_classes
    from helpers.experiments.isolation_context import q_label_pairs

    p = _trec(tiny_model).prompts[0]
    mask = q_label_pairs(p, len(p) + 3)
    assert mask.shape == (len(p) + 3,) * 2 and mask.sum() == len(position_classes(p)["label"])
    assert mask[p.q].nonzero().flatten().tolist() == position_classes(p)["label"]
    with pytest.raises(ValueError, match="before q"):
        q_label_pairs(p, None, [p.q])


@pytest.mark.parametrize("layers, match", [([], "empty"), ([0.5], "whole numbers"), ([99], "whole numbers")])
def test_knockouts_refuse_layers_that_block_nothing_or_are_no_layer(tiny_model, layers, match):
    from helpers.core.edges import run_edge_knockout
    from helpers.experiments.isolation_context import run_context_knockout

    s = _trec(tiny_model, n=2)
    with pytest.raises(ValueError, match=match):
        run_context_knockout(tiny_model, s.prompts, s.label_ids, layers)
    with pytest.raises(ValueError, match=match):
        run_edge_knockout(tiny_model, s.prompts, s.label_ids, layers, lambda p, seq=None: torch.zeros(1))


def test_layered_intervals_and_claims_by_hand():
    from helpers.protocols.isolation_context import STEPS, layered_claims, layered_intervals

    n = 4
    cell = {}
    for step in STEPS:
        for rows in ("label", "control"):
            for w in ("lower", "upper"):
                prob = 0.6
                if rows == "label" and step != "aggregation" and w == "lower":
                    prob = 0.4  # contextualisation matters in the lower window
                if rows == "label" and step == "aggregation" and w == "upper":
                    prob = 0.1  # aggregation in the upper one
                cell[(step, rows, w)] = {"gold_prob": torch.full((n,), prob), "loyal": torch.ones(n, dtype=torch.int8)}
    ivs = layered_intervals({("t", 1): cell})
    assert ivs[("labels", "lower")].estimate == pytest.approx(0.2) and ivs[("labels", "upper")].estimate == 0
    assert ivs["context_lower_first"].estimate == pytest.approx(0.4)  # (0.2 + 0.2) - 0
    assert ivs["aggregation_upper_later"].estimate == pytest.approx(0.5)
    got = {c.key: c.verdict for c in layered_claims(ivs, 6)}
    assert set(got.values()) == {"replicates"} and len(got) == 5


# ------------------------------------------------------------------ the query's stages: like for like, bad input


def test_label_logits_are_the_readouts_scores_and_feed_the_same_probe(tiny_sst2_set):
    from helpers.experiments.query_stages import label_logits, label_readout, probe_correct, query_states

    model, prompts, lids = tiny_sst2_set
    states = query_states(model, prompts)
    logits = label_logits(model, states, lids)
    assert logits.shape == (*states.shape[:2], len(lids))
    assert torch.equal(logits.argmax(-1), label_readout(model, states, lids))
    gold = torch.tensor([i % 2 for i in range(len(prompts))])
    assert probe_correct(logits, gold, 2).shape == states.shape[:2]


@pytest.mark.parametrize("ids, match", [([], "two or more"), ([10**9, 1], "outside"), ([1.5, 2], "two or more")])
def test_label_readout_refuses_ids_that_are_no_label_words(tiny_sst2_set, ids, match):
    from helpers.experiments.query_stages import label_readout

    model, _, _ = tiny_sst2_set
    with pytest.raises(ValueError, match=match):
        label_readout(model, torch.zeros(2, 3, model.cfg.d_model), ids)


def test_label_readout_refuses_states_of_a_wrong_width_or_nan(tiny_sst2_set):
    from helpers.experiments.query_stages import label_readout

    model, _, lids = tiny_sst2_set
    with pytest.raises(ValueError, match="d_model"):
        label_readout(model, torch.zeros(2, 3, model.cfg.d_model + 1), lids)
    with pytest.raises(ValueError, match="NaN"):
        label_readout(model, torch.full((2, 3, model.cfg.d_model), float("nan")), lids)


@pytest.mark.parametrize("kw, match", [({"folds": 1}, "2 or more"), ({"c": 0}, "positive number"),
                                       ({"states": float("nan")}, "NaN"), ({"gold": ["a", "b"] * 3}, "integer"),
                                       ({"gold": [0.5] * 6}, "integer")])
def test_probe_correct_refuses_what_it_cannot_fit(kw, match):
    from helpers.experiments.query_stages import probe_correct

    states = torch.randn(6, 2, 3)
    if "states" in kw:
        states[0, 0, 0] = kw.pop("states")
    args = {"gold": [0, 1] * 3, "folds": 2} | kw
    with pytest.raises(ValueError, match=match):
        probe_correct(states, **args)


def test_previous_token_scores_refuse_a_length_that_does_not_fit(tiny_model):
    from helpers.experiments.query_stages import previous_token_scores

    with pytest.raises(ValueError, match="too long"):
        previous_token_scores(tiny_model, length=10**6)


def test_layer_matched_heads_share_the_sets_layers_and_avoid_both_sets(tiny_model):
    from helpers.experiments.query_stages import layer_matched

    L, H = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    heads = [(0, 0), (1, 1), (1, 0)]
    other = [(0, 1)]
    got = layer_matched(tiny_model, heads, 3, exclude=other)
    assert len(got) == 3 and not set(got) & set(heads + other)
    free = {l: H - sum(1 for h in heads + other if h[0] == l) for l in range(L)}
    for layer in (0, 1):  # as many in each layer as the set has there, where the layer has room
        want = sum(1 for l, _ in heads if l == layer)
        assert sum(1 for l, _ in got if l == layer) == min(want, free[layer]) or free[layer] < want
    assert layer_matched(tiny_model, heads, 3, exclude=other) == got  # seeded
    with pytest.raises(ValueError, match="distinct"):
        layer_matched(tiny_model, [(0, 0), (0, 0)], 0)
    with pytest.raises(ValueError, match="within"):
        layer_matched(tiny_model, [(99, 0)], 0)


def test_stage_runs_refuse_empty_or_foreign_head_sets(tiny_model, tmp_path, monkeypatch):
    from helpers.protocols import query_stages as qs

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    for sets, match in (({"previous_token": [], "induction": []}, "non-empty"),
                        ({"previous_token": [(99, 0)], "induction": [(0, 0)]}, "outside"),
                        ({"previous_token": [(0, 0)], "induction": [(0, 1), (1, 1)]}, "as many")):
        with pytest.raises(ValueError, match=match):
            qs.query_stage_runs(tiny_model, ["sst2"], TINY_SIZES, sets, progress=False)
    with pytest.raises(ValueError, match="name must be one of"):
        qs.stage_curves({}, "bogus")
