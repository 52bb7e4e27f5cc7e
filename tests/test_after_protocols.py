"""Notebook 11's protocols: the knockout's control rows, the query's states under an ablation, the runs over tasks x
seeds on tiny random models of the three architectures, the intervals and criteria by hand, and the verdict table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.stats import Interval
from helpers.exercises.tiny import TINY_KINDS
from helpers.study.profiles import AfterSizes

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
    want = []
    for p in s.prompts:
        mask = earlier_demo_pairs(p, None, "all", content_rows(p, 5))

        def blank(scores, hook, mask=mask):
            return scores.masked_fill(mask[None, None], float("-inf"))

        with torch.inference_mode():
            logits = tiny_model.run_with_hooks(p.tokens[None], fwd_hooks=[
                (f"blocks.{l}.attn.hook_attn_scores", blank) for l in layers])
        want.append(logits[0, p.q, s.label_ids].float())
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
    keys = [c.key for c in qs.query_stage_claims(qs.two_stages_interval(runs), qs.stage_ablation_intervals(runs, L),
                                                 2, L)]
    assert keys == ["11.two_stages", "11.previous_token_heads_separability", "11.induction_heads_alignment"]


# ------------------------------------------------------------------ criteria by hand


def test_half_rise_by_hand():
    from helpers.protocols.query_stages import half_rise

    assert half_rise([0.5, 0.5, 0.6, 0.9, 1.0]) == 3.0  # half way from 0.5 to 1.0 is 0.75
    assert half_rise([0.0, 1.0]) == 1.0
    assert half_rise([0.9, 0.1, 0.2]) == 0.0  # a falling curve starts above half way
    assert np.isnan(half_rise([0.3, 0.3]))


def _stage_cell(probe_rise: int, read_rise: int, n: int = 6, stages: int = 5) -> dict:
    def curve(rise):
        return torch.tensor([[int(s >= rise) for s in range(stages)]] * n)

    return {name: {"probe": curve(probe_rise), "readout": curve(read_rise)} for name in ("none", "previous_token",
                                                                                          "induction", "random")}


def test_two_stages_interval_by_hand():
    from helpers.protocols.query_stages import two_stages_interval

    runs = {("a", 1): _stage_cell(1, 3), ("a", 2): _stage_cell(1, 4), ("b", 1): _stage_cell(2, 2),
            ("b", 2): _stage_cell(2, 2)}
    iv, rises = two_stages_interval(runs)
    assert rises == {"separability": pytest.approx(1.5), "alignment": pytest.approx(2.75)}
    assert iv.estimate == pytest.approx(1.25)  # task a: 3.5 - 1 = 2.5, task b: 0
    none = {cell: {k: dict(v, probe=None) for k, v in r.items()} for cell, r in runs.items()}
    assert two_stages_interval(none) == (None, {})
    part = dict(runs)
    part[("b", 2)] = {k: dict(v, probe=None) for k, v in runs[("b", 2)].items()}  # task b loses a seed: left out
    assert two_stages_interval(part)[1]["alignment"] == pytest.approx(3.5)


def test_stage_ablation_intervals_pair_random_against_each_set():
    from helpers.protocols.query_stages import stage_ablation_intervals

    cell = _stage_cell(0, 0, n=4, stages=3)
    cell["previous_token"]["probe"] = torch.zeros(4, 3, dtype=torch.long)  # separability gone at every stage
    ivs = stage_ablation_intervals({("a", 1): cell}, n_layers=2)
    assert ivs[("previous_token", "separability")].estimate == 1.0
    assert ivs[("induction", "separability")].estimate == 0.0
    assert ivs[("previous_token", "alignment")].estimate == 0.0 and ivs[("none", "alignment")].estimate == 1.0


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


def test_semantic_anchor_and_control_override_read_their_signs():
    from helpers.protocols.flipped_labels import semantic_anchor_claim

    def iv(x):
        return Interval(x, x - 0.1, x + 0.1, 1, 10)

    ivs = {k: iv(0.5) for k in ("truth", "prompt", "prior", "natural accuracy", "same")}
    for diff, verdict in ((0.4, "replicates"), (-0.4, "does not replicate"), (0.05, "inconclusive")):
        assert semantic_anchor_claim({**ivs, "truth - prompt": iv(diff)}).verdict == verdict


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
