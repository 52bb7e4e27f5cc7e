"""The flipped flows' specific forms (helpers.protocols.flipped_specific): each run equals the methods called by hand on
the flipped prompts and a hand-written masked forward, on the three tiny architectures; the controls both ways; the
claims, their kinds and their place in the power table and the semantic-anchors account."""

from __future__ import annotations

import pytest
import torch
from masked_forward import masked_label_logits

from helpers.core.relabelled import relabelled_prompts, shift
from helpers.experiments.flipped_labels import flip_permutation, flipped_icl_set
from helpers.experiments.label_gathering import content_pairs, own_text_pairs
from helpers.experiments.label_reading import label_reading
from helpers.protocols import flipped_specific as fsp
from helpers.study.profiles import AfterSizes

SIZES = AfterSizes(seeds=(42,), n=3, n_flow=1, random_n=1, k=1, folds=2, frac=0.25, batch_size=2)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))


def test_the_runs_are_the_methods_on_the_flipped_prompts(tiny_model, store):
    """The reading: notebook 10's method on the flipped prompts, donors relabelled again by shift. The gathering: a
    hand-written masked forward of the first k layers, scored against the flipped mapping's answer."""
    runs = fsp.flipped_specific_runs(tiny_model, ["sst2"], SIZES, progress=False)
    assert list(runs) == [("sst2", 42)]
    got = runs[("sst2", 42)]
    natural, flipped = flipped_icl_set(tiny_model, "sst2", 42, SIZES.n)
    assert [d.label for d in flipped.demos] == [1 - d.label for d in natural.demos]  # SST-2's two classes swap
    perm = shift(2)
    donors = [d if d is not None else p for d, p in zip(relabelled_prompts(tiny_model, flipped, perm), flipped.prompts)]
    want = label_reading(tiny_model, flipped.prompts, donors, perm, flipped.label_ids, 42, batch_size=1)
    for k in ("label", "content", "kept"):
        assert torch.equal(got["reading"][k], want[k]), k
    flip = flip_permutation(2)
    for name, pairs in (("label", own_text_pairs), ("control", lambda p: content_pairs(p, 42))):
        hand = [int(masked_label_logits(tiny_model, p, pairs(p), [0], flipped.label_ids).argmax() == flip[p.gold])
                for p in flipped.prompts]
        assert got["gathering"][name].tolist() == hand, name
    again = fsp.flipped_specific_runs(tiny_model, ["sst2"], SIZES, progress=False)  # read back from the store
    assert torch.equal(again[("sst2", 42)]["gathering"]["label"], got["gathering"]["label"])


def test_the_claims_from_the_intervals(tiny_models, store):
    runs = fsp.flipped_specific_runs(tiny_models["gpt2"], ["sst2"], SIZES, progress=False)
    ivs = fsp.flipped_specific_intervals(runs)
    claims = fsp.flipped_specific_claims(ivs, SIZES.k, "tiny")
    assert [c.key for c in claims] == list(fsp.SPECIFIC_KEYS)
    r = runs[("sst2", 42)]
    drop = (r["gathering"]["control"].double() - r["gathering"]["label"].double()).mean()
    assert claims[1].ours.estimate == pytest.approx(float(drop))
    assert "flipped prompts" in claims[1].criterion and "first 1 layer(s)" in claims[1].criterion


def test_bad_sizes_are_refused(tiny_models):
    with pytest.raises(TypeError, match="AfterSizes"):
        fsp.flipped_specific_runs(tiny_models["gpt2"], ["sst2"], {"n": 3})


def test_the_controls_both_ways():
    """The positive control follows the labels it reads and loses the flipped mapping when its label tokens cannot
    gather their items; the negative one, which answers from its weights, does neither."""
    from helpers.core.controls.model import control_prompts, control_spec, load_control

    cp = control_prompts(control_spec("control-negative").task, 64, 3)
    wide = {c.key: c for c in fsp.control_flipped_specific(load_control("control-wide"), cp, 3, 64)}
    neg = {c.key: c for c in fsp.control_flipped_specific(load_control("control-negative"), cp, 3, 64)}
    assert [wide[k].verdict for k in fsp.SPECIFIC_KEYS] == ["replicates", "replicates"]
    assert all(neg[k].verdict != "replicates" for k in fsp.SPECIFIC_KEYS)


def test_they_are_the_specific_forms_of_the_flipped_flows_and_count_in_the_account():
    from helpers.study.after_report import AFTER_ACCOUNTS
    from helpers.study.paper import CLAIMS
    from helpers.study.power_report import CHECKS, SPECIFIC_FORM, claim_kind

    for k in fsp.SPECIFIC_KEYS:
        assert CHECKS[k] == k and claim_kind(k) == "detector" and k in CLAIMS
        assert k in AFTER_ACCOUNTS["semantic anchors (arXiv 2511.21038)"]
    assert SPECIFIC_FORM["11.flipped_deep_pq_dominant"] == ("11.flipped_label_read_causal",)
    assert SPECIFIC_FORM["11.flipped_shallow_wp_dominant"] == ("11.flipped_label_gathers_causal",)
