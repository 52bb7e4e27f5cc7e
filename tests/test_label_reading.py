"""The causal label-reading check (helpers.experiments.label_reading): identities, a hand-checked case and
batching, on tiny random models of three architectures and on the controls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import predict
from helpers.core.prompts import Demo, build_prompts, make_icl_set
from helpers.experiments.label_reading import (
    aligned,
    content_positions,
    deep_layers,
    label_reading,
    patched_predictions,
)
from helpers.protocols import label_reading as lr


def _pairs(model):
    """Four SST-2 prompts of seed 42 and their donors with both labels swapped."""
    s = make_icl_set(model, "sst2", seed=42, n_test=4)
    perm = lr.shift(len(s.label_ids))
    donors, _ = build_prompts(model, s.task, [Demo(d.text, perm[d.label], d.idx) for d in s.demos],
                              [p.query for p in s.prompts])
    return s, donors, perm


def test_patching_from_the_prompt_itself_changes_nothing_and_everything_from_the_donor_gives_its_answer(tiny_model):
    """Identity: keys and values from the prompt itself leave every logit's argmax. Hand-checked: keys and values
    at every position of every layer from the donor make q's residual stream the donor's at every layer (q's token
    is the same), so the answer is the donor's."""
    s, donors, _ = _pairs(tiny_model)
    keep = [i for i, (p, d) in enumerate(zip(s.prompts, donors)) if aligned(p, d)]
    assert keep, "the tiny tokenizer gives both SST-2 label words one token each"
    ps, ds = [s.prompts[i] for i in keep], [donors[i] for i in keep]
    every = list(range(tiny_model.cfg.n_layers))
    base = predict(tiny_model, ps, s.label_ids, top_k=0).pred
    donor_pred = predict(tiny_model, ds, s.label_ids, top_k=0).pred
    same = patched_predictions(tiny_model, ps, ps, [p.label_pos for p in ps], every, s.label_ids)
    assert torch.equal(same, base)
    allpos = [list(range(len(p))) for p in ps]
    assert torch.equal(patched_predictions(tiny_model, ps, ds, allpos, every, s.label_ids), donor_pred)


def test_batched_equals_one_by_one_and_the_scores_are_shares(tiny_model):
    s, donors, perm = _pairs(tiny_model)
    a = label_reading(tiny_model, s.prompts, donors, perm, s.label_ids, seed=0, batch_size=8)
    b = label_reading(tiny_model, s.prompts, donors, perm, s.label_ids, seed=0, batch_size=1)
    for k in ("label", "content", "pred", "kept"):
        assert torch.equal(a[k], b[k]), k
    assert set(a["label"].tolist()) <= {0.0, 1.0} and a["n"] == 4


def test_a_run_with_no_aligned_prompt_is_stored_and_read_back(tmp_path, monkeypatch, tiny_models):
    """A task whose label words change length under the permutation leaves no prompt to patch: the run says so
    (empty, n given) and the store keeps it (an empty numpy array would not read back)."""
    from helpers.core.store import cached

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    m = tiny_models["gpt2"]
    s, donors, perm = _pairs(m)
    shorter = [donors[0]] * len(s.prompts)
    shorter = [type(d)(**{**d.__dict__, "tokens": d.tokens[:-1]}) for d in shorter]
    out = cached("probe_label_reading", {"n": 4}, lambda: label_reading(m, s.prompts, shorter, perm, s.label_ids, 0))
    assert out["n"] == 4 and len(out["kept"]) == 0
    assert cached("probe_label_reading", {"n": 4}, lambda: 1 / 0)["n"] == 4  # read back, not computed


def test_content_positions_are_demonstration_text_never_a_label_or_the_query(tiny_models):
    s, _, _ = _pairs(tiny_models["gpt2"])
    p = s.prompts[0]
    got = content_positions(p, 3, np.random.default_rng(0))
    assert len(got) == 3 and not set(got) & set(p.label_pos) and all(t < p.query_span[0] for t in got)
    assert deep_layers(2) == [1] and deep_layers(4) == [2, 3] and deep_layers(5) == [2, 3, 4]


def test_bad_input_is_refused_with_what_to_do(tiny_models):
    m = tiny_models["gpt2"]
    s, donors, perm = _pairs(m)
    with pytest.raises(ValueError, match="permutation"):
        label_reading(m, s.prompts, donors, [0, 0], s.label_ids, seed=0)
    short = [s.prompts[0]]
    with pytest.raises(ValueError, match="one entry per prompt"):
        patched_predictions(m, short, donors, [[1]], [0], s.label_ids)


def test_on_the_controls_the_check_sees_the_reading_and_stays_silent_without_it():
    """The positive control's answer follows the relabelled label positions; the negative control's never does."""
    from helpers.core.controls.model import control_prompts, load_control
    from helpers.protocols.power import _prompt_task

    out = {}
    for name in ("control-wide", "control-negative"):
        m = load_control(name)
        cp = control_prompts(_prompt_task(m), 64, 70_000)
        out[name] = lr.control_reading_claim({("control", 0): lr.control_reading(m, cp, 70_000)})
    assert out["control-wide"].verdict == "replicates" and out["control-wide"].ours.low > 0.5
    assert out["control-negative"].verdict != "replicates"


def test_the_4_layer_positive_controls_read_the_labels_in_layer_1_outside_the_deep_half():
    """Why the check misses the 4-layer positive controls in the power table: their q reads the mapping from the
    label positions in layer 1 of 4, before the deep half (:func:`deep_layers`) that the check patches, where the
    2-layer ones read it in layer 1 of 2, inside it. Patching one layer at a time on the first checkpoint of each
    population: the answer moves with the labels in layer 1 alone, and the deep half moves none on 4 layers."""
    from helpers.core.controls.model import control_prompts, relabel
    from helpers.core.controls.population import POPULATIONS, load_member
    from helpers.protocols.power import _prompt_task

    moved = {}
    for pop in ("wide", "deep"):
        m = load_member(pop, POPULATIONS[pop].seeds[0])
        cp = control_prompts(_prompt_task(m), 64, 70_000)
        perm = lr.shift(len(cp.label_ids))
        donors = relabel(cp, perm).prompts
        for layers in [[layer] for layer in range(m.cfg.n_layers)] + [deep_layers(m.cfg.n_layers)]:
            r = label_reading(m, cp.prompts, donors, perm, cp.label_ids, 0, layers=layers, batch_size=64)
            moved[pop, tuple(layers)] = float(r["label"].mean())
    assert moved["wide", (1,)] > 0.9 and deep_layers(2) == [1]
    assert moved["deep", (1,)] > 0.9 and deep_layers(4) == [2, 3], moved
    assert moved["deep", (2, 3)] < 0.1 and moved["deep", (0,)] < 0.1, moved
