"""Notebook 07's regime measurement (helpers.experiments.incontext_heads: regime_*): the swap-averaged accuracy
over demonstrations per class and label pairs, on the tiny random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core import heads as CH
from helpers.core import unrelated as U
from helpers.core.predict import predict
from helpers.experiments import incontext_heads as IH
from helpers.study.profile_table import PROFILES
from helpers.study.stats import Interval

KS = (1, 2, 8)
SIZES = {"ks": KS, "n_eval": 3, "seeds": (1, 2), "n_attr": 2}  # 16 per class can pass the tiny models' 512 tokens


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)


def _swap(ut, words):
    return U.UnrelatedTask(U.unrelated_task("sst2", (0, 1), words).task, ut.train, ut.test, "sst2", (0, 1))


@pytest.fixture
def uts(ut):
    return {"foo/bar": {"sst2": ut}, "bar/foo": {"sst2": _swap(ut, ("bar", "foo"))}}


def test_regime_sizes_and_names():
    smoke, default, paper = (IH.regime_sizes(PROFILES[n]) for n in ("smoke", "default", "paper"))
    assert default["ks"] == paper["ks"] == IH.REGIME_KS == (1, 2, 4, 8, 16)
    assert default["n_eval"] * len(default["seeds"]) >= 64 and set(default["tasks"]) == {"sst2", "agnews"}
    assert len(smoke["ks"]) <= 2 and smoke["n_eval"] <= 4 and len(smoke["seeds"]) == 1
    assert paper["n_eval"] == PROFILES["paper"].n_test and paper["seeds"] == PROFILES["paper"].seeds
    assert len(IH.REGIME_PAIRS) >= 2 and "foo/bar" in IH.REGIME_PAIRS
    assert IH.swapped_mapping("foo/bar") == "bar/foo" and IH.swapped_mapping("A/B") == "B/A"
    with pytest.raises(ValueError, match="word0/word1"):
        IH.swapped_mapping("foo")


def test_regime_runs_swap_share_demos_and_equal_full_prompts(tiny_model, ut, uts):
    """Every size: the swapped run has the same demonstrations and queries with the words exchanged; the
    shared-prefix predictions are those of the full prompts; the swap-averaged cells are (correct + swapped)/2."""
    runs = IH.regime_runs(tiny_model, uts, SIZES, pairs=("foo/bar",), batch_size=2)
    assert list(runs) == [("foo/bar", k) for k in KS]
    for (_, k), r in runs.items():
        assert r["asked"] == 6 and r["dropped"] == 0
        for seed in SIZES["seeds"]:
            s = {"n_eval": 3, "k_per_class": k}
            ps, ps_s = U.eval_set(tiny_model, uts["foo/bar"]["sst2"], seed, s), U.eval_set(tiny_model, uts["bar/foo"]["sst2"], seed, s)
            assert ps.demos == ps_s.demos and [p.query for p in ps.prompts] == [p.query for p in ps_s.prompts]
            assert len(ps.demos) == 2 * k and ps.label_ids == ps_s.label_ids[::-1]
            assert [ps_s.task.label_words[d.label] for d in ps_s.demos] == \
                [{"foo": "bar", "bar": "foo"}[ps.task.label_words[d.label]] for d in ps.demos]
            for p_set, run in ((ps, r["runs"]), (ps_s, r["swapped"])):
                assert CH.shared_cache(tiny_model, p_set.prompts) is not None  # the shared path is the one taken
                full = predict(tiny_model, p_set.prompts, p_set.label_ids, 2)
                assert run[("sst2", seed)]["pred"] == full.pred.tolist()
                assert run[("sst2", seed)]["correct"] == (full.pred == full.gold).int().tolist()
    iv = IH.regime_intervals(runs)
    for key, row in iv.items():
        for name in ("swap_averaged", "same_word", "accuracy", "accuracy_swapped"):
            assert isinstance(row[name], Interval) and row[name].n_seeds == 2 and row[name].n_inputs == 6
            assert row[name].low <= row[name].estimate <= row[name].high
        cells = [(np.array(runs[key]["runs"][("sst2", s)]["correct"]) + runs[key]["swapped"][("sst2", s)]["correct"]) / 2
                 for s in SIZES["seeds"]]
        assert row["swap_averaged"].estimate == pytest.approx(np.mean([c.mean() for c in cells]))
        assert row["reading"] == IH.mapping_interval_part(row["swap_averaged"])


def test_regime_runs_count_dropped_prompts(ut, uts):
    from helpers.core.models import make_tiny_model

    model = make_tiny_model("gpt2", seed=0)
    lengths = [len(p) for p in U.eval_set(model, ut, 1, {"n_eval": 3, "k_per_class": 16}).prompts]
    model.cfg.n_ctx = max(lengths) - 1  # the longest 16-per-class prompt no longer fits; every shorter one does
    want = sum(n > model.cfg.n_ctx for n in lengths)
    runs = IH.regime_runs(model, uts, {**SIZES, "ks": (1, 16), "seeds": (1,)}, pairs=("foo/bar",), batch_size=2)
    assert want >= 1 and runs[("foo/bar", 16)]["dropped"] == want and runs[("foo/bar", 1)]["dropped"] == 0
    assert len(runs[("foo/bar", 16)]["swapped"][("sst2", 1)]["pred"]) == 3 - want  # the same inputs under the swap


def test_regime_runs_refuse_a_swap_that_does_not_swap(tiny_model, ut, uts):
    with pytest.raises(ValueError, match="does not swap"):
        IH.regime_runs(tiny_model, {"foo/bar": uts["foo/bar"], "bar/foo": uts["foo/bar"]}, SIZES, pairs=("foo/bar",))
    with pytest.raises(KeyError, match="B/A"):
        IH.regime_runs(tiny_model, uts, SIZES, pairs=("A/B",))


def _iv(lo, hi):
    return Interval((lo + hi) / 2, lo, hi, 3, 192)


def _row(lo, hi):
    return {"swap_averaged": _iv(lo, hi), "same_word": _iv(0.8, 0.9), "asked": 64, "dropped": 0,
            "reading": IH.mapping_interval_part(_iv(lo, hi))}


def test_clear_regimes_and_claims():
    from helpers.study.claims import VERDICTS

    chance = {("foo/bar", 1): _row(0.45, 0.55), ("A/B", 1): _row(0.48, 0.56)}
    assert IH.clear_regimes(chance) == []
    claims = IH.regime_claims(chance, context="probe")
    assert [c.key for c in claims] == ["07.unrelated_regime"] and claims[0].verdict == "inconclusive"
    assert claims[0].ours.low == 0.48 and "A/B at 1 per class" in claims[0].note  # the highest lower bound
    both = {**chance, ("foo/bar", 8): _row(0.51, 0.6), ("A/B", 16): _row(0.55, 0.7)}
    assert IH.clear_regimes(both) == [("A/B", 16), ("foo/bar", 8)]
    abl = {c: _iv(0.5, 0.6) for c in IH.ABLATION_CONDITIONS} | {"drop": _iv(0.1, 0.3), "excess": _iv(0.05, 0.2)}
    unconfirmed = IH.regime_claims(both, abl, ("A/B", 16), context="probe")
    assert unconfirmed[0].verdict == "inconclusive" and "Not yet run on fresh seeds" in unconfirmed[0].note
    failed = IH.regime_claims(both, abl, ("A/B", 16), context="probe", confirmation=_row(0.45, 0.6))
    assert failed[0].verdict == "inconclusive" and "did not clear 0.5 again" in failed[0].note
    claims = IH.regime_claims(both, abl, ("A/B", 16), context="probe", confirmation=_row(0.52, 0.7))
    assert [c.key for c in claims] == ["07.unrelated_regime", "07.regime_ablation"]
    assert [c.verdict for c in claims] == ["replicates", "partly"] and all(c.verdict in VERDICTS for c in claims)
    assert "On fresh seeds: " in claims[0].note
    assert "A/B at 16 per class" in claims[1].context
    with pytest.raises(ValueError, match="which regime"):
        IH.regime_claims(both, abl)


def test_regime_confirmation_runs_the_regime_on_fresh_seeds(tiny_model, uts):
    """The confirmation is the regime's own run (same pair and size) on the confirm seeds, never the first pass's."""
    sizes = {**SIZES, "confirm_seeds": (7,)}
    row = IH.regime_confirmation(tiny_model, uts, ("foo/bar", 1), sizes, batch_size=2)
    want = IH.regime_intervals(IH.regime_runs(tiny_model, uts, {**SIZES, "ks": (1,), "seeds": (7,)},
                                              pairs=("foo/bar",), batch_size=2))[("foo/bar", 1)]
    assert row["swap_averaged"] == want["swap_averaged"] and row["asked"] == 3
    with pytest.raises(ValueError, match="fresh seeds"):
        IH.regime_confirmation(tiny_model, uts, ("foo/bar", 1), {**SIZES, "confirm_seeds": SIZES["seeds"]})
    for name in ("smoke", "default", "paper"):
        s = IH.regime_sizes(PROFILES[name])
        assert s["confirm_seeds"] and not set(s["confirm_seeds"]) & set(s["seeds"])
        assert len(s["confirm_seeds"]) == len(s["seeds"])


def test_regime_ablation_runs_attribution_and_ablation_in_the_regime(tiny_model, ut):
    heads, runs, iv = IH.regime_ablation(tiny_model, {"sst2": ut}, 2, {**SIZES, "seeds": (1,), "n_attr": 12}, n_heads=2,
                                         batch_size=2)
    assert len(heads["sst2"]) == 2 and list(runs) == [("sst2", 1)]
    ps = U.eval_set(tiny_model, ut, 1, {"n_eval": 3, "k_per_class": 2})
    assert runs[("sst2", 1)]["plain"] == predict(tiny_model, ps.prompts, ps.label_ids, 2).accuracy
    assert runs[("sst2", 1)]["in-context heads ablated"] == IH.ablation_accuracy(tiny_model, ps.prompts, ps.label_ids,
                                                                                  heads["sst2"], 2)
    assert {"drop", "excess"} <= set(iv) and all(isinstance(v, Interval) for v in iv.values())


def test_plot_regime_draws_a_band_per_pair():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from helpers.study.plots import plot_regime

    iv = {(p, k): _row(0.4, 0.6) for p in ("foo/bar", "A/B") for k in IH.REGIME_KS}
    fig = plot_regime(iv)
    ax = fig.axes[0]
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 2
    assert [line.get_label() for line in ax.lines][:2] == ["foo/bar with its swap", "A/B with its swap"]
    assert any(list(line.get_ydata()) == [0.5, 0.5] for line in ax.lines)  # chance
    plt.close(fig)
    torch.manual_seed(0)
