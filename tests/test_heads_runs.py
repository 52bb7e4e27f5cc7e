"""Notebook 07's cached steps (helpers.core.unrelated.cached_eval_runs and the ``*_runs`` of the three paper-B
experiments): cache kinds and keys, equality with direct calls, and a second call served from the store."""

from __future__ import annotations

import pytest
from heads_common import _same

from helpers.core import grid as G
from helpers.core import heads as CH
from helpers.core import unrelated as U
from helpers.core.predict import predict
from helpers.core.store import cached
from helpers.experiments.head_ablation import ALL_POSITIONS, ablation_accuracy, ablation_predictions, random_heads
from helpers.experiments.head_biases import majority_bias, recency_bias
from helpers.experiments.incontext_heads import head_attribution
from helpers.experiments.two_towers import value_outputs
from helpers.protocols import head_ablation as HA
from helpers.protocols import head_biases as HB
from helpers.protocols import incontext_heads as IH
from helpers.protocols import mapping_control as MC
from helpers.protocols import two_towers as TT

STEP_MODULES = (G,)  # every module whose steps store results with cached(): the run grid, for them all
RUN_SIZES = IH.HeadsSizes(n_eval=3, seeds=[1], k_per_class=1, n_attr=2, batch_size=2)  # accuracy, attribution, ablation
TOWERS_SIZES = TT.TowersSizes(n_eval=3, seeds=[1], k_per_class=1, n_towers=3, batch_size=2)
BIAS_SIZES = HB.BiasSizes(n_eval=3, seeds=[1], k_per_class=1, bias_tasks=("sst2",), batch_size=2)


@pytest.fixture(scope="module")
def tiny_gpt2():
    from helpers.exercises.tiny import make_tiny_model

    return make_tiny_model("gpt2", seed=0)


@pytest.fixture(scope="module")
def ut_real(ut):
    full = U.unrelated_task("sst2", (0, 1), None)
    return U.UnrelatedTask(full.task, full.train.select(range(300)), full.test.select(range(60)), "sst2", (0, 1))


@pytest.fixture
def run_cache(tmp_path, monkeypatch):
    """A fresh results cache, and a log of every (kind, params) passed to helpers.core.store.cached."""
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    calls = []

    def logged(kind, params, compute, **kw):
        calls.append((kind, params))
        return cached(kind, params, compute, **kw)
    for module in STEP_MODULES:
        monkeypatch.setattr(module, "cached", logged)
    return tmp_path, calls


def _all_runs(model, ut, ut_real, heads):
    return {"acc": MC.accuracy_runs(model, {"sst2": ut}, RUN_SIZES),
            "acc_real": MC.accuracy_runs(model, {"sst2": ut_real}, RUN_SIZES),
            "attr": IH.attribution_runs(model, {"sst2": ut}, RUN_SIZES),
            "abl": HA.ablation_runs(model, {"sst2": ut}, heads, RUN_SIZES),
            "vo": TT.value_output_runs(model, {"sst2": ut}, heads, TOWERS_SIZES),
            "towers": TT.towers_runs(model, {"sst2": ut}, heads, TOWERS_SIZES),
            "bias": HB.bias_runs(model, {"sst2": ut}, heads, BIAS_SIZES)}


def test_runs_cache_keys_are_the_notebooks(tiny_gpt2, ut, ut_real, run_cache):
    """Kinds and parameter dicts of notebook 07's steps (the label words are part of the accuracy runs' key)."""
    _, calls = run_cache
    heads = {"sst2": [(0, 1), (2, 3)]}
    _all_runs(tiny_gpt2, ut, ut_real, heads)
    m, hs = "tiny-gpt2", heads["sst2"]

    def made_of(u):  # what cached_eval_runs keys every step on: the prompts' label words, classes and shape
        return {"words": list(u.task.label_words), "classes": [0, 1], "shape": [u.task.input_prefix, u.task.label_prefix]}

    want = [("heads_acc", {"model": m, "task": "sst2", "seed": 1, **made_of(ut), "k": 1, "n": 3}),
            ("heads_acc", {"model": m, "task": "sst2", "seed": 1, **made_of(ut_real), "k": 1, "n": 3}),
            ("heads_attr", {"model": m, "task": "sst2", "seed": 1001, "k": 1, "n": 2, "def": "final-resid-v2-per-label"}),
            ("heads_ablation", {"model": m, "task": "sst2", "seed": 1, **made_of(ut), "k": 1, "n": 3, "heads": hs}),
            ("heads_vo", {"model": m, "task": "sst2", "seed": 1, **made_of(ut), "k": 1, "n": 3, "heads": hs}),
            ("heads_towers", {"model": m, "task": "sst2", "seed": 2001, "k": 1, "n": 3, "heads": hs}),
            ("heads_bias", {"model": m, "task": "sst2", "seed": 1, "kind": "majority", "n": 3, "heads": hs}),
            ("heads_bias", {"model": m, "task": "sst2", "seed": 1, "kind": "recency", "n": 3, "heads": hs})]
    assert calls == want
    assert made_of(ut)["words"] == ["foo", "bar"] and made_of(ut_real)["words"] == ["Negative", "Positive"]
    calls.clear()
    MC.accuracy_runs(tiny_gpt2, {"sst2": ut}, RUN_SIZES, model_name="gemma")  # the notebook's name wins
    assert calls[0][1]["model"] == "gemma"


def test_runs_equal_direct_calls_and_second_call_is_cached(tiny_gpt2, ut, ut_real, run_cache, monkeypatch):
    root, _ = run_cache
    heads = {"sst2": [(0, 1), (2, 3)]}
    first = _all_runs(tiny_gpt2, ut, ut_real, heads)
    kinds = {p.parent.name for p in root.rglob("*.pt")}
    assert kinds == {"heads_acc", "heads_attr", "heads_ablation", "heads_vo", "heads_towers", "heads_bias"}
    assert len(list(root.rglob("*.pt"))) == 8

    # the same numbers as the underlying functions called directly
    ps = U.eval_set(tiny_gpt2, ut, 1, RUN_SIZES)
    pr = predict(tiny_gpt2, ps.prompts, ps.label_ids, 2)
    assert first["acc"][("sst2", 1)] == {"acc": pr.accuracy, "foo_share": float((pr.pred == 0).float().mean()), "n": 3,
                                         "pred": pr.pred.tolist(), "correct": (pr.pred == pr.gold).int().tolist()}
    ps_r = U.eval_set(tiny_gpt2, ut_real, 1, RUN_SIZES)
    assert first["acc_real"][("sst2", 1)]["acc"] == predict(tiny_gpt2, ps_r.prompts, ps_r.label_ids, 2).accuracy
    attr_ps = U.make_set(tiny_gpt2, ut, 1001, 2, 1)
    assert _same(first["attr"]["sst2"], head_attribution(tiny_gpt2, attr_ps.prompts, attr_ps.label_ids, batch_size=2))
    abl = first["abl"][("sst2", 1)]
    assert abl["random_heads"] == random_heads(tiny_gpt2, 2, seed=1, exclude=heads["sst2"])
    assert abl["plain"] == pr.accuracy
    assert abl["in-context heads ablated"] == ablation_accuracy(tiny_gpt2, ps.prompts, ps.label_ids, heads["sst2"], 2)
    assert abl["random heads ablated"] == ablation_accuracy(tiny_gpt2, ps.prompts, ps.label_ids, abl["random_heads"], 2)
    for hs, name in ((heads["sst2"], "in-context heads ablated"), (abl["random_heads"], "random heads ablated")):
        everywhere = ablation_predictions(tiny_gpt2, ps.prompts, ps.label_ids, hs, 2, at="all")
        assert abl[name + ALL_POSITIONS] == everywhere.accuracy
        assert abl["correct"][name + ALL_POSITIONS] == (everywhere.pred == everywhere.gold).int().tolist()
    assert _same(first["vo"][("sst2", 1)], value_outputs(tiny_gpt2, ps.prompts, ps.label_ids, heads["sst2"], 2))
    fresh = U.fresh_demo_prompts(tiny_gpt2, ut, 2001, 3, 1)
    assert _same(first["towers"]["sst2"], value_outputs(tiny_gpt2, fresh, ps.label_ids, heads["sst2"], 2))
    assert _same(first["bias"][("sst2", 1, "majority")], majority_bias(tiny_gpt2, ut, heads["sst2"], 1, 3, batch_size=2))
    assert _same(first["bias"][("sst2", 1, "recency")], recency_bias(tiny_gpt2, ut, heads["sst2"], 1, 3, batch_size=2))

    # a second call is served from the cache: nothing is recomputed
    def boom(*a, **k):
        raise AssertionError("recomputed instead of read from the cache")
    for fn in ("predict", "head_attribution", "ablation_accuracy", "value_outputs", "majority_bias", "recency_bias",
               "make_set", "fresh_demo_prompts"):
        for module in (U, IH, TT, HB, HA, MC, CH):
            if hasattr(module, fn):
                monkeypatch.setattr(module, fn, boom)
    assert _same(_all_runs(tiny_gpt2, ut, ut_real, heads), first)
    # other in-context heads are another run
    with pytest.raises(AssertionError, match="recomputed"):
        HA.ablation_runs(tiny_gpt2, {"sst2": ut}, {"sst2": [(1, 1)]}, RUN_SIZES)


def test_runs_read_label_words_from_the_task(tiny_gpt2, ut, run_cache):
    _, calls = run_cache
    swapped = U.UnrelatedTask(U.unrelated_task("sst2", (0, 1), ("bar", "foo")).task, ut.train, ut.test, "sst2", (0, 1))
    MC.accuracy_runs(tiny_gpt2, {"sst2": ut}, RUN_SIZES)
    b = MC.accuracy_runs(tiny_gpt2, {"sst2": swapped}, RUN_SIZES)
    assert [c[1]["words"] for c in calls] == [["foo", "bar"], ["bar", "foo"]]  # two runs, never one served for both
    ps, ps_s = U.eval_set(tiny_gpt2, ut, 1, RUN_SIZES), U.eval_set(tiny_gpt2, swapped, 1, RUN_SIZES)
    assert [p.query for p in ps.prompts] == [p.query for p in ps_s.prompts]  # same queries and demonstrations
    assert ps.demos == ps_s.demos and ps.label_ids == ps_s.label_ids[::-1]
    assert b[("sst2", 1)]["pred"] == predict(tiny_gpt2, ps_s.prompts, ps_s.label_ids, 2).pred.tolist()
    with pytest.raises(ValueError, match="kinds"):
        HB.bias_runs(tiny_gpt2, {"sst2": ut}, {"sst2": [(0, 0)]}, BIAS_SIZES, kinds=("order",))


def test_runs_refuse_sizes_that_are_not_their_sizes(tiny_gpt2, ut, run_cache):
    """Sizes come from the experiments' ``*_sizes(profile)``: a plain dict, or another step's sizes, is refused
    with an error that says where they come from."""
    as_dict = {"n_eval": 3, "seeds": [1], "k_per_class": 1, "n_attr": 2}
    with pytest.raises(TypeError, match="EvalSizes that eval_sizes"):
        MC.accuracy_runs(tiny_gpt2, {"sst2": ut}, as_dict)
    with pytest.raises(TypeError, match="HeadsSizes that incontext_heads_sizes"):
        IH.attribution_runs(tiny_gpt2, {"sst2": ut}, TOWERS_SIZES)
    with pytest.raises(TypeError, match="TowersSizes that two_towers_sizes"):
        TT.towers_runs(tiny_gpt2, {"sst2": ut}, {"sst2": [(0, 0)]}, RUN_SIZES)
