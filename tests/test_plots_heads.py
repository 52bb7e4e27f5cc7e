"""Notebook 07 (in-context heads) on small synthetic inputs: its tables and figures (helpers.study.plots.heads)
and its printed lines and saved metrics (helpers.study.heads_report)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers.experiments import head_ablation as ha
from helpers.experiments import two_towers as tt
from helpers.experiments.mapping_control import REGIME_PAIRS
from helpers.protocols import head_biases as hb
from helpers.protocols import mapping_control as mc
from helpers.study import heads_report as hr  # noqa: E402
from helpers.study import plots  # noqa: E402
from helpers.study.stats import Interval  # noqa: E402

TASKS = ("sst2", "agnews")
TITLES = {"sst2": "SST-2 (foo/bar)", "agnews": "AGNews (foo/bar)"}
NAMES = {"sst2": "SST-2", "agnews": "AGNews"}
CFG = SimpleNamespace(n_layers=18, n_heads=4)


def iv(est: float, lo: float, hi: float) -> Interval:
    return Interval(est, lo, hi, 2, 64)


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    return tmp_path


def saved_figures(root) -> list[str]:
    paths = sorted(root.rglob("*.png"))
    assert all(p.parent.name == "figures" for p in paths)
    return [p.stem for p in paths]


def value_outputs(n: int = 3) -> tt.ValueOutputs:
    """Two heads, four label positions (foo, bar, foo, bar): foo positions positive, bar negative but one."""
    g = torch.Generator().manual_seed(0)
    label_class = torch.tensor([[0, 1, 0, 1]] * n)
    sign = 1 - 2 * label_class[:, None, :].float()
    vo_lm = sign * torch.rand(n, 2, 4, generator=g) + 0.1
    vo_lm[0, 0, 1] = 0.5  # one bar position with the wrong sign
    attn = torch.rand(n, 2, 4, generator=g) / 4
    return tt.ValueOutputs(heads=[(3, 1), (5, 0)], attn=attn, vo_lm=vo_lm, wvo_lm=attn * vo_lm,
                           label_class=label_class, label_pos=torch.tensor([[2, 5, 8, 11]] * n),
                           out_lm=torch.tensor([1.0, -0.5, 0.3][:n]), pred=torch.tensor([0, 1, 0][:n]))


def test_setup_and_overall_lines_count_the_heads():
    text = hr.heads_setup_text("smoke", "google/gemma-3-270m", {"seeds": (42,)}, CFG, 4)
    assert text == "smoke google/gemma-3-270m {'seeds': (42,)} 72 heads -> 4 in-context heads"
    text = hr.heads_overall_text("does not replicate", 4, CFG)
    assert text == "Overall: does not replicate. In-context heads: 4 of 72 (5.6%; paper: ~1%)."


def test_overall_of_claims_reads_parts_and_verdicts():
    from helpers.study.claims import claim

    def graded(key, verdict, **extra):
        return claim(key, iv(0.5, 0.4, 0.6), verdict, "probe", **extra)

    assert hr.overall_of_claims([graded("07.ablation_at_q", "partly"),
                                 graded("07.majority_reduction", "inconclusive", part="no measurable bias")]) == "partly"
    assert hr.overall_of_claims([graded("07.ablation_at_q", "inconclusive"),
                                 graded("07.two_towers", "does not replicate")]) == "inconclusive"


def test_by_hand_table_and_vo_line():
    drops = torch.tensor([[0.12345, -0.5], [0.0, 1.0]])
    df = plots.by_hand_drop_table(drops, [(3, 1), (5, 0)], ["foo", "bar"])
    assert list(df.index) == ["L3H1", "L5H0"] and list(df.columns) == ["drop of log p(foo)", "drop of log p(bar)"]
    assert df.loc["L3H1", "drop of log p(foo)"] == pytest.approx(0.123) and df.loc["L5H0", "drop of log p(bar)"] == 1.0
    line = hr.by_hand_vo_text((3, 1), ["foo", "bar"], [1, 0, 0], torch.tensor([-0.5, 0.25, 1.234]))
    assert line == "L3H1, VO logit minus at each label position: bar -0.50, foo +0.25, foo +1.23"


def test_mapping_control_tables():
    acc = {"foo/bar": iv(0.49, 0.45, 0.53), "real": iv(0.731, 0.66, 0.79)}
    df = plots.unrelated_accuracy_table(acc)
    assert df["accuracy [95% CI]"].to_dict() == {"foo/bar": "0.490 [0.450, 0.530]", "real": "0.731 [0.660, 0.790]"}
    maps = {("foo/bar", "bar/foo"): {"swap_averaged": iv(0.5, 0.49, 0.51), "same_word": iv(0.96, 0.91, 1.0)},
            ("A/B", "B/A"): {"swap_averaged": iv(0.6, 0.55, 0.65), "same_word": iv(0.2, 0.1, 0.3)}}
    df = plots.mapping_control_table(maps, mc.mapping_interval_part)
    assert list(df.columns) == ["foo/bar with bar/foo", "A/B with B/A"]
    assert df["foo/bar with bar/foo"].to_dict() == {"swap-averaged accuracy": "0.500 [0.490, 0.510]",
                                                    "same-word rate": "0.960 [0.910, 1.000]", "reading": "at chance"}
    assert df.loc["reading", "A/B with B/A"] == "follows the mapping"


def test_head_maps_name_the_heads_and_save_a_map_per_task(results):
    heads = {t: [(1, 0), (2, 3)] for t in TASKS}
    per_word = {t: {"foo": [(1, 0), (0, 1)], "bar": [(2, 3), (3, 3)]} for t in TASKS}
    pooled = {t: [(1, 0), (0, 1)] for t in TASKS}
    text = hr.incontext_heads_text("SST-2 (foo/bar)", heads["sst2"], per_word["sst2"], pooled["sst2"])
    assert text.splitlines() == ["SST-2 (foo/bar): in-context heads (layer, head) [(1, 0), (2, 3)]",
                                 "  top heads for each word {'foo': [(1, 0), (0, 1)], 'bar': [(2, 3), (3, 3)]}",
                                 "  single ranking on the predicted label [(1, 0), (0, 1)] (1 shared)"]
    scores = {t: SimpleNamespace(mean_gain=torch.randn(4, 4), mean_drop=torch.randn(4, 4)) for t in TASKS}
    assert plots.show_gain_and_drop_by_layer_and_head(scores, boxed=heads, titles=TITLES) is None
    assert saved_figures(results) == ["07_head_map_agnews", "07_head_map_sst2"]
    assert plt.get_fignums() == []  # shown and closed: no second copy at the cell's end


def test_ablation_table_means_over_seeds_and_figure(results):
    conds = ha.ABLATION_CONDITIONS
    runs = {("sst2", 42): {c: 0.5 for c in conds}, ("sst2", 43): {c: 0.6 for c in conds},
            ("agnews", 42): {c: 0.25 for c in conds}}
    runs[("sst2", 42)]["plain"] = 0.9
    frame = plots.incontext_ablation_frame(runs, NAMES, conds)
    assert list(frame.columns) == ["task", "condition", "accuracy"] and len(frame) == 3 * len(conds)
    df = plots.incontext_ablation_table(runs, NAMES, conds)
    assert set(df.index) == {"SST-2", "AGNews"} and set(df.columns) == set(conds)
    assert df.loc["SST-2", "plain"] == 0.75 and df.loc["SST-2", "random heads ablated"] == 0.55
    assert df.loc["AGNews", "in-context heads ablated"] == 0.25
    ivs = {(NAMES[t], c): iv(0.5, 0.4, 0.6) for t in TASKS for c in conds}
    plots.show_accuracy_by_task_and_condition(runs, intervals=ivs, names=NAMES, conditions=conds)
    assert saved_figures(results) == ["07_ablation"] and plt.get_fignums() == []


def test_value_outputs_rates_and_a_figure_per_task(results):
    vo = {t: value_outputs() for t in TASKS}
    rates = {t: tt.label_carrying_rate(vo[t]) for t in TASKS}
    assert rates["sst2"] == pytest.approx(23 / 24)
    text = hr.label_carrying_text(iv(0.76, 0.73, 0.79), rates)
    assert text == "label-carrying rate 0.760 [0.730, 0.790]; per task (first seed): {'sst2': 0.958, 'agnews': 0.958}"
    plots.show_vo_logit_minus_by_head_and_label(vo, carrying_rates=rates, titles=TITLES)
    assert saved_figures(results) == ["07_value_outputs_agnews", "07_value_outputs_sst2"]


def test_two_towers_table_text_and_figures(results):
    towers = {t: value_outputs() for t in TASKS}
    stats = {t: tt.two_towers(towers[t]) for t in TASKS}
    df = plots.two_towers_table(stats, TITLES)
    assert list(df.index) == ["SST-2 (foo/bar)", "AGNews (foo/bar)"]
    assert not any(c.startswith("d_") for c in df.columns) and "corr_attn_logit_minus" in df.columns
    assert df.loc["SST-2 (foo/bar)", "corr_attn_logit_minus"] == round(stats["sst2"]["corr_attn_logit_minus"], 3)
    ivs = {"corr_attn": iv(0.67, 0.46, 0.8), "abs_corr_vo": None}
    text = hr.two_towers_text(ivs)
    assert text == "{'corr_attn': '0.670 [0.460, 0.800]', 'abs_corr_vo': 'no estimate'}"
    plots.show_logit_minus_against_attention_and_vo(stats, towers, titles=TITLES)
    assert saved_figures(results) == ["07_two_towers_agnews", "07_two_towers_sst2"]


def test_bias_table_frame_and_figure(results):
    ivs = {"majority": {"before": iv(0.24, 0.08, 0.41), "after": iv(0.08, 0.0, 0.2), "reduction": iv(65.6, 16.1, 100)},
           "recency": {"before": iv(0.02, 0.0, 0.06), "after": iv(0.02, 0.0, 0.05), "reduction": None}}
    df = plots.head_bias_table(ivs, hb.bias_interval_part)
    assert list(df.index) == ["majority", "recency"]
    assert df.loc["majority"].to_dict() == {"bias before": "0.240 [0.080, 0.410]", "bias after": "0.080 [0.000, 0.200]",
                                            "reduction %": "65.6 [16.1, 100.0]", "reading": "replicates"}
    assert df.loc["recency", "reduction %"] == "none: no bias measured"
    assert df.loc["recency", "reading"] == "no measurable bias"
    runs = {("sst2", 42, "majority"): SimpleNamespace(bias_before=0.3, bias_after=0.1),
            ("sst2", 42, "recency"): SimpleNamespace(bias_before=0.05, bias_after=0.04)}
    frame = plots.head_bias_frame(runs, NAMES)
    assert frame.to_dict("records")[:2] == [
        {"task": "SST-2", "bias": "majority", "stage": "before", "size": 0.3, "seed": 42},
        {"task": "SST-2", "bias": "majority", "stage": "after reduction", "size": 0.1, "seed": 42}]
    plots.show_bias_before_and_after_reduction(runs, ivs, names=NAMES)
    assert saved_figures(results) == ["07_biases"]


def regime_row(est: float, lo: float, hi: float) -> dict:
    return {"swap_averaged": iv(est, lo, hi), "same_word": iv(0.9, 0.8, 1.0), "accuracy": iv(0.6, 0.5, 0.7),
            "accuracy_swapped": iv(0.4, 0.3, 0.5), "asked": 64, "dropped": 2,
            "reading": mc.mapping_interval_part(iv(est, lo, hi))}


REGIME = {("foo/bar", 1): regime_row(0.5, 0.45, 0.55), ("foo/bar", 4): regime_row(0.56, 0.51, 0.62),
          ("A/B", 1): regime_row(0.52, 0.49, 0.56)}
RS = mc.RegimeSizes(ks=(1, 4), n_eval=32, seeds=(42, 43), tasks=("sst2",), confirm_seeds=(44, 45))


def test_regime_table_and_context():
    df = plots.regime_table(REGIME)
    assert df.index.names == ["pair", "per class"] and list(df.index) == [("foo/bar", 1), ("foo/bar", 4), ("A/B", 1)]
    assert df.loc[("foo/bar", 4)].to_dict() == {
        "swap-averaged accuracy": "0.560 [0.510, 0.620]", "same-word rate": "0.900 [0.800, 1.000]",
        "accuracy (pair)": "0.600 [0.500, 0.700]", "accuracy (swap)": "0.400 [0.300, 0.500]", "dropped": "2/64",
        "reading": "follows the mapping"}
    assert mc.regime_context(["SST-2", "AGNews"], REGIME_PAIRS, RS) == \
        "SST-2, AGNews with foo/bar and A/B, 2 seed(s) x 32 queries per size"


def test_regime_without_a_clear_regime_says_why_no_ablation(results):
    text = hr.regime_outcome_text(REGIME, [], RS)
    assert text.startswith("No regime follows the mapping") and "foo/bar at 4 per class, 0.560 [0.510, 0.620]" in text
    plots.show_swap_averaged_by_demos_per_class(REGIME, title="SST-2: swap-averaged accuracy")
    assert saved_figures(results) == ["07_regime"] and plt.get_fignums() == []


def test_regime_with_a_clear_regime_shows_confirmation_and_ablation():
    assert hr.regime_excess_text.__defaults__ == (ha.ALL_POSITIONS,)  # the suffix of the conditions
    conf = {"swap_averaged": iv(0.5, 0.48, 0.5), "reading": "at chance"}
    abl = {c: iv(0.5 + 0.01 * i, 0.4, 0.6) for i, c in enumerate(ha.ABLATION_CONDITIONS)}
    abl["excess"], abl["excess" + ha.ALL_POSITIONS] = iv(0.09, 0.02, 0.17), iv(0.05, -0.03, 0.17)
    heads = {"sst2": [(11, 2), (12, 3)]}
    text = hr.regime_outcome_text(REGIME, [("foo/bar", 4)], RS, conf, heads)
    assert text.splitlines() == [
        "('foo/bar', 4) on fresh seeds (44, 45): swap-averaged accuracy 0.500 [0.480, 0.500] (at chance)",
        "Regimes that follow the mapping: [('foo/bar', 4)]. Ablation in ('foo/bar', 4), in-context heads "
        "{'sst2': [(11, 2), (12, 3)]}:"]
    df = plots.regime_ablation_table(abl, ha.ABLATION_CONDITIONS)
    assert list(df.index) == list(ha.ABLATION_CONDITIONS)
    assert df.loc["random heads ablated", "accuracy [95% CI]"] == "0.520 [0.400, 0.600]"
    excess = hr.regime_excess_text(abl)
    assert excess == ("random minus in-context heads ablated, at q: 0.090 [0.020, 0.170]; at every position: "
                      "0.050 [-0.030, 0.170]")


def test_report_metrics_keep_their_keys_and_formatting():
    acc = {"foo/bar": iv(0.49, 0.45, 0.53)}
    metrics = hr.heads_report_metrics("inconclusive", {"sst2": [(1, 0)]}, acc,
                                         {"swap_averaged": iv(0.54, 0.49, 0.59)}, REGIME, {"seeds": (42,)})
    assert list(metrics) == ["overall", "incontext_heads", "accuracy", "swap_averaged_A/B", "sizes", "regime"]
    assert metrics["accuracy"] == {"foo/bar": "0.490 [0.450, 0.530]"}
    assert metrics["swap_averaged_A/B"] == "0.540 [0.490, 0.590]"
    assert metrics["regime"] == {"foo/bar at 1 per class": "0.500 [0.450, 0.550]",
                                 "foo/bar at 4 per class": "0.560 [0.510, 0.620]",
                                 "A/B at 1 per class": "0.520 [0.490, 0.560]"}
    json.dumps(metrics)  # saved as JSON
    assert np.isclose(float(metrics["regime"]["A/B at 1 per class"].split()[0]), 0.52)
