"""Notebook 07's regime measurement (helpers.experiments.mapping_control: regime_*): the swap-averaged accuracy
over demonstrations per class and label pairs, on the tiny random models, and the ablation in a regime."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from helpers.core import heads as CH
from helpers.core import unrelated as U
from helpers.core.predict import predict
from helpers.experiments.head_ablation import ABLATION_CONDITIONS, ablation_accuracy
from helpers.experiments.incontext_heads import incontext_heads
from helpers.experiments.mapping_control import REGIME_KS, REGIME_PAIRS, clear_regimes, regime_name, swapped_mapping
from helpers.protocols import head_ablation as HA
from helpers.protocols import incontext_heads as IH
from helpers.protocols import mapping_control as MC
from helpers.study.profile_table import PROFILES
from helpers.study.stats import Interval

KS = (1, 2, 8)
# 16 per class can pass the tiny models' 512 tokens
SIZES = MC.RegimeSizes(ks=KS, n_eval=3, seeds=(1, 2), tasks=("sst2",), confirm_seeds=(7,), batch_size=2)


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
    smoke, default, paper = (MC.regime_sizes(PROFILES[n]) for n in ("smoke", "default", "paper"))
    assert default.ks == paper.ks == REGIME_KS == (1, 2, 4, 8, 16)
    assert default.n_eval * len(default.seeds) >= 64 and set(default.tasks) == {"sst2", "agnews"}
    assert len(smoke.ks) <= 2 and smoke.n_eval <= 4 and len(smoke.seeds) == 1
    assert paper.n_eval == PROFILES["paper"].n_test and paper.seeds == PROFILES["paper"].seeds
    assert default.at(4) == U.EvalSizes(n_eval=default.n_eval, seeds=default.seeds, k_per_class=4,
                                        batch_size=default.batch_size)
    assert len(REGIME_PAIRS) >= 2 and "foo/bar" in REGIME_PAIRS
    assert swapped_mapping("foo/bar") == "bar/foo" and swapped_mapping("A/B") == "B/A"
    with pytest.raises(ValueError, match="word0/word1"):
        swapped_mapping("foo")


def test_regime_runs_swap_share_demos_and_equal_full_prompts(tiny_model, ut, uts):
    """Every size: the swapped run has the same demonstrations and queries with the words exchanged; the
    shared-prefix predictions are those of the full prompts; the swap-averaged cells are (correct + swapped)/2."""
    runs = MC.regime_runs(tiny_model, uts, SIZES, pairs=("foo/bar",))
    assert list(runs) == [("foo/bar", k) for k in KS]
    for (_, k), r in runs.items():
        assert r["asked"] == 6 and r["dropped"] == 0
        for seed in SIZES.seeds:
            s = SIZES.at(k)
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
    iv = MC.regime_intervals(runs)
    for key, row in iv.items():
        for name in ("swap_averaged", "same_word", "accuracy", "accuracy_swapped"):
            assert isinstance(row[name], Interval) and row[name].n_seeds == 2 and row[name].n_inputs == 6
            assert row[name].low <= row[name].estimate <= row[name].high
        cells = [(np.array(runs[key]["runs"][("sst2", s)]["correct"]) + runs[key]["swapped"][("sst2", s)]["correct"]) / 2
                 for s in SIZES.seeds]
        assert row["swap_averaged"].estimate == pytest.approx(np.mean([c.mean() for c in cells]))
        assert row["reading"] == MC.mapping_interval_part(row["swap_averaged"])


def test_regime_runs_count_dropped_prompts(ut, uts):
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2", seed=0)
    lengths = [len(p) for p in U.eval_set(model, ut, 1, SIZES.at(16)).prompts]
    model.cfg.n_ctx = max(lengths) - 1  # the longest 16-per-class prompt no longer fits; every shorter one does
    want = sum(n > model.cfg.n_ctx for n in lengths)
    runs = MC.regime_runs(model, uts, replace(SIZES, ks=(1, 16), seeds=(1,)), pairs=("foo/bar",))
    assert want >= 1 and runs[("foo/bar", 16)]["dropped"] == want and runs[("foo/bar", 1)]["dropped"] == 0
    assert len(runs[("foo/bar", 16)]["swapped"][("sst2", 1)]["pred"]) == 3 - want  # the same inputs under the swap


def test_regime_runs_refuse_a_swap_that_does_not_swap(tiny_model, ut, uts):
    with pytest.raises(ValueError, match="does not swap"):
        MC.regime_runs(tiny_model, {"foo/bar": uts["foo/bar"], "bar/foo": uts["foo/bar"]}, SIZES, pairs=("foo/bar",))
    with pytest.raises(KeyError, match="B/A"):
        MC.regime_runs(tiny_model, uts, SIZES, pairs=("A/B",))
    with pytest.raises(TypeError, match="RegimeSizes that regime_sizes"):
        MC.regime_runs(tiny_model, uts, {"ks": (1,), "n_eval": 3, "seeds": (1,)}, pairs=("foo/bar",))


def _iv(lo, hi):
    return Interval((lo + hi) / 2, lo, hi, 3, 192)


def _row(lo, hi):
    return {"swap_averaged": _iv(lo, hi), "same_word": _iv(0.8, 0.9), "asked": 64, "dropped": 0,
            "reading": MC.mapping_interval_part(_iv(lo, hi))}


def test_clear_regimes_and_claims():
    from helpers.study.claims import VERDICTS

    chance = {("foo/bar", 1): _row(0.45, 0.55), ("A/B", 1): _row(0.48, 0.56)}
    assert clear_regimes(chance) == []
    claims = MC.regime_claims(chance, context="probe")
    assert [c.key for c in claims] == ["07.unrelated_regime"] and claims[0].verdict == "inconclusive"
    assert claims[0].ours.low == 0.48 and "A/B at 1 per class" in claims[0].note  # the highest lower bound
    both = {**chance, ("foo/bar", 8): _row(0.51, 0.6), ("A/B", 16): _row(0.55, 0.7)}
    assert clear_regimes(both) == [("A/B", 16), ("foo/bar", 8)]
    unconfirmed = MC.regime_claims(both, context="probe")
    assert unconfirmed[0].verdict == "inconclusive" and "Not yet run on fresh seeds" in unconfirmed[0].note
    failed = MC.regime_claims(both, context="probe", confirmation=_row(0.45, 0.6))
    assert failed[0].verdict == "inconclusive" and "did not clear 0.5 again" in failed[0].note
    claims = MC.regime_claims(both, context="probe", confirmation=_row(0.52, 0.7))
    assert [c.key for c in claims] == ["07.unrelated_regime"] and claims[0].verdict == "replicates"
    assert "On fresh seeds: " in claims[0].note
    abl = {c: _iv(0.5, 0.6) for c in ABLATION_CONDITIONS} | {"drop": _iv(0.1, 0.3), "excess": _iv(0.05, 0.2)}
    ablated = HA.regime_ablation_claim(abl, f"probe; {regime_name(('A/B', 16))}")
    assert ablated.key == "07.regime_ablation" and ablated.verdict == "partly" and ablated.verdict in VERDICTS
    assert "A/B at 16 per class" in ablated.context
    with pytest.raises(ValueError, match="no regime"):
        MC.regime_claims({})


def test_regime_confirmation_runs_the_regime_on_fresh_seeds(tiny_model, uts):
    """The confirmation is the regime's own run (same pair and size) on the confirm seeds, never the first pass's."""
    row = MC.regime_confirmation(tiny_model, uts, ("foo/bar", 1), SIZES)
    want = MC.regime_intervals(MC.regime_runs(tiny_model, uts, replace(SIZES, ks=(1,), seeds=(7,)),
                                              pairs=("foo/bar",)))[("foo/bar", 1)]
    assert row["swap_averaged"] == want["swap_averaged"] and row["asked"] == 3
    with pytest.raises(ValueError, match="fresh seeds"):
        MC.regime_confirmation(tiny_model, uts, ("foo/bar", 1), replace(SIZES, confirm_seeds=SIZES.seeds))
    for name in ("smoke", "default", "paper"):
        s = MC.regime_sizes(PROFILES[name])
        assert s.confirm_seeds and not set(s.confirm_seeds) & set(s.seeds)
        assert len(s.confirm_seeds) == len(s.seeds)


def test_the_ablation_in_a_regime_uses_its_sizes(tiny_model, ut):
    """Notebook 07's sections 2.2-2.3 in a regime: attribution and ablation at the regime's sizes
    (:func:`helpers.protocols.incontext_heads.heads_sizes_at`), with the attribution prompts of the heads' sizes."""
    heads_sizes = IH.HeadsSizes(n_eval=8, seeds=(42,), k_per_class=2, n_attr=12)
    in_regime = IH.heads_sizes_at(heads_sizes, replace(SIZES, seeds=(1,)).at(2))
    assert in_regime == IH.HeadsSizes(n_eval=3, seeds=(1,), k_per_class=2, n_attr=12, batch_size=2)
    scores = IH.attribution_runs(tiny_model, {"sst2": ut}, in_regime)
    heads = {"sst2": incontext_heads(scores["sst2"], 2)}
    runs = HA.ablation_runs(tiny_model, {"sst2": ut}, heads, in_regime)
    iv = HA.ablation_intervals(runs)
    assert len(heads["sst2"]) == 2 and list(runs) == [("sst2", 1)]
    ps = U.eval_set(tiny_model, ut, 1, in_regime)
    assert runs[("sst2", 1)]["plain"] == predict(tiny_model, ps.prompts, ps.label_ids, 2).accuracy
    assert runs[("sst2", 1)]["in-context heads ablated"] == ablation_accuracy(tiny_model, ps.prompts, ps.label_ids,
                                                                                  heads["sst2"], 2)
    assert {"drop", "excess"} <= set(iv) and all(isinstance(v, Interval) for v in iv.values())


def test_plot_regime_draws_a_band_per_pair():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from helpers.study.plots import plot_regime

    iv = {(p, k): _row(0.4, 0.6) for p in ("foo/bar", "A/B") for k in REGIME_KS}
    fig = plot_regime(iv)
    ax = fig.axes[0]
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 2
    assert [line.get_label() for line in ax.lines][:2] == ["foo/bar with its swap", "A/B with its swap"]
    assert any(list(line.get_ydata()) == [0.5, 0.5] for line in ax.lines)  # chance
    plt.close(fig)
    torch.manual_seed(0)
