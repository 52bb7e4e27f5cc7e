"""The tables, lines and figures that notebooks 04-06 show (helpers.study.plots.applications), on small inputs."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from helpers.study import plots
from helpers.study.stats import Interval

METHODS = ("ICL", "Text_anchor", "Hidden_random", "Hidden_random-top", "Hidden_anchor")


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A fresh results folder; returns a function listing the figure names saved in it. No figure stays open."""
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    plt.close("all")
    yield lambda: sorted(p.stem for p in tmp_path.rglob("figures/*.png"))
    assert plt.get_fignums() == [], "a shown figure was left open"


@pytest.fixture
def shown(monkeypatch):
    """What the helpers hand to IPython's ``display``, in order (tables as DataFrames, figures as Figures)."""
    from helpers.study.plots import applications, figures

    objs = []
    monkeypatch.setattr(applications, "display", objs.append)
    monkeypatch.setattr(figures, "display", objs.append)  # figures: plots.show_figure
    return objs


# ------------------------------------------------------------------------------------------------- notebook 04

def _row(acc1, acc5, accr, n, dropped, beta, losses):
    result = SimpleNamespace(beta=beta, demo_classes=[1, 0], epoch_losses=losses)
    return SimpleNamespace(acc_1shot=acc1, acc_5shot=acc5, acc_reweight=accr, n_test=n, n_dropped=dropped,
                           result=result)


def _rows():
    beta = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2) / 10 - 0.5  # [layer, head, demo]
    return {("sst2", 42): _row(0.5, 0.25, 0.75, 8, 0, beta, [0.9, 0.7]),
            ("trec", 42): _row(0.125, 0.0, 0.3333, 6, 2, beta, [1.2, 1.1])}


def test_reweighting_probs_table():
    plain, mine = torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.0])
    t = plots.reweighting_probs_table(plain, mine, ["Negative", "Positive"], target=0, layers=(2, 3))
    assert list(t.columns) == ["Negative", "Positive"]
    assert list(t.index) == ["beta = 0", "beta = 1 on 'Negative''s anchor, layers 2-3"]
    np.testing.assert_allclose(t.iloc[0], [0.269, 0.731])
    np.testing.assert_allclose(t.iloc[1], [0.881, 0.119])


def test_show_reweighting_by_hand_prints_the_check_and_the_table(capsys, shown):
    task = SimpleNamespace(display="SST-2", label_words=["Negative", "Positive"])
    plots.show_reweighting_by_hand(task, 1, torch.tensor([0.0, 0.0]), torch.tensor([0.0, 1.0]), layers=(9, 17))
    assert capsys.readouterr().out == "✓ SST-2, one prompt: re-weighted label logits by hand = the helper's\n"
    (table,) = shown
    assert list(table.index) == ["beta = 0", "beta = 1 on 'Positive''s anchor, layers 9-17"]
    np.testing.assert_allclose(table.to_numpy(), [[0.5, 0.5], [0.269, 0.731]])


def test_reweighting_runs_table():
    t = plots.reweighting_runs_table(_rows())
    assert list(t.index) == ["sst2 seed 42", "trec seed 42"]
    assert list(t.columns) == ["1-shot", "5-shot", "re-weighting", "n", "dropped (5-shot too long)"]
    assert t.loc["trec seed 42"].tolist() == [0.125, 0.0, 0.333, 6, 2]
    assert t.loc["sst2 seed 42", "re-weighting"] == 0.75


def test_beta_heatmaps_and_loss_curves_name_their_axes_and_are_saved(results, shown):
    rows = _rows()
    plots.beta_heatmaps(rows[("sst2", 42)].result, x="head", y="layer", panels=["Negative", "Positive"],
                        title="learned beta, SST-2, seed 42", save_as="04_beta_heatmap")
    plots.loss_curves({f"{t} s{s}": r.result.epoch_losses for (t, s), r in rows.items()}, x="epoch",
                      y="training loss (mean per epoch)", save_as="04_training_loss")
    beta, loss = shown
    assert beta._suptitle.get_text() == "learned beta, SST-2, seed 42"
    assert [ax.get_title() for ax in beta.axes[:2]] == ["Positive", "Negative"]  # the demonstrations' classes
    assert (beta.axes[0].get_xlabel(), beta.axes[0].get_ylabel()) == ("head", "layer")
    assert [line.get_label() for line in loss.axes[0].get_lines()] == ["sst2 s42", "trec s42"]
    assert (loss.axes[0].get_xlabel(), loss.axes[0].get_ylabel()) == ("epoch", "training loss (mean per epoch)")
    assert results() == ["04_beta_heatmap", "04_training_loss"]


def test_reweighting_figures_carry_the_runs():
    rows = _rows()
    fig = plots.plot_beta(rows["sst2", 42].result.beta, [1, 0], ["Negative", "Positive"], title="learned beta, SST-2")
    assert [ax.get_title() for ax in fig.axes[:2]] == ["Positive", "Negative"]
    plt.close(fig)
    fig = plots.plot_loss_curves({f"{t} s{s}": r.result.epoch_losses for (t, s), r in rows.items()})
    assert [line.get_ydata().tolist() for line in fig.axes[0].get_lines()] == [[0.9, 0.7], [1.2, 1.1]]
    plt.close(fig)


# ------------------------------------------------------------------------------------------------- notebook 05

class _Tokenizer:
    def decode(self, token):
        return {0: "<bos>", 1: "Review", 2: ":", 3: " good", 4: "\n"}[int(token)]


def _icl():
    prompt = SimpleNamespace(tokens=torch.tensor([0, 1, 2, 3, 4, 1]))
    return SimpleNamespace(prompts=[prompt], task=SimpleNamespace(label_words=["negative", "positive"]))


def test_hidden_anchor_kept_line():
    line = plots.hidden_anchor_kept_line(_Tokenizer(), _icl().prompts[0], [0, 3, 4], 5)
    assert line == "kept 3 of 5 demonstration tokens: '<bos>' ' good' '\\n'"


def test_show_hidden_anchor_by_hand(capsys, shown):
    plots.show_hidden_anchor_by_hand(_Tokenizer(), _icl(), [2, 3], 5, torch.tensor([1.234, -0.5]),
                                     torch.tensor([0.987, 2.0]))
    assert capsys.readouterr().out == "kept 2 of 5 demonstration tokens: ':' ' good'\n"
    (table,) = shown
    assert list(table.index) == ["negative", "positive"] and list(table.columns) == ["full ICL", "Hidden_anchor (by hand)"]
    np.testing.assert_allclose(table.to_numpy(), [[1.23, 0.99], [-0.5, 2.0]], atol=1e-6)


def _avg():
    return pd.DataFrame({"LL": [100.0, 50.123, 40.0, 55.0, 80.456], "WL": [100.0, 30.0, 5.0, 4.0, 60.0],
                         "Acc": [55.0, 40.0, 45.0, 47.0, 58.0]}, index=list(METHODS))


def test_compression_table2_sets_ours_beside_the_paper():
    t = plots.compression_table2(_avg(), "google/gemma-3-270m")
    assert list(t.index) == list(METHODS)
    assert list(t.columns) == [f"{m} {c}" for m in ("GPT2-XL", "GPT-J") for c in ("LL", "WL", "Acc")] + \
        [f"gemma-3-270m (ours) {c}" for c in ("LL", "WL", "Acc")]
    assert t.loc["Hidden_anchor", "GPT2-XL LL"] == 79.47 and t.loc["Hidden_random-top", "GPT-J Acc"] == 52.34
    assert t.loc["Hidden_anchor", "gemma-3-270m (ours) LL"] == 80.46
    assert t.loc["Text_anchor", "gemma-3-270m (ours) LL"] == 50.12


def test_compression_bars_group_by_x_a_bar_per_hue_and_are_saved(results, shown):
    means = pd.DataFrame([dict(method=m, metric=met, value=0.1 * (i + 1))
                          for i, m in enumerate(METHODS) for met in ("label_loyalty", "accuracy")])
    ivs = {(r.method, r.metric): Interval(100 * r.value, 100 * r.value - 5, 100 * r.value + 5, 1, 8)
           for r in means.itertuples()}
    assert plots.compression_table2(_avg(), "smollm2").loc["Hidden_anchor", "smollm2 (ours) LL"] == 80.46
    plots.compression_bars(means, x="metric", y="value", hue="method", intervals=ivs,
                           title="smollm2: loyalty and accuracy, mean over tasks", save_as="05_table2_bars_restart")
    (fig,) = shown
    ax = fig.axes[0]
    assert ax.get_title() == "smollm2: loyalty and accuracy, mean over tasks"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("metric", "value")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["label_loyalty", "accuracy"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [*METHODS, "95% CI (seeds and inputs)"]
    assert results() == ["05_table2_bars_restart"]


def test_compression_bars_draw_the_intervals_as_fractions():
    from matplotlib.container import ErrorbarContainer

    bars = pd.DataFrame([dict(method=m, metric="label_loyalty", value=0.5) for m in METHODS[:2]])
    ivs = {("label_loyalty", m): Interval(50, 40, 70, 1, 8).scaled(0.01) for m in METHODS[:2]}
    fig = plots.plot_compression_bars(bars, intervals=ivs)
    segs = [c.lines[2][0].get_segments()[0] for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    assert sorted((round(min(s[0][1], s[1][1]), 6), round(max(s[0][1], s[1][1]), 6)) for s in segs) == \
        [(0.4, 0.7), (0.4, 0.7)]
    plt.close(fig)


def _speed():
    return pd.DataFrame({"task": ["sst2", "tweet_emotion"], "L_demo": [20.123, 50.0], "L_x": [18.0, 12.0],
                         "L_anchor": [11.0, 15.0], "bound": [1.9, 3.5], "speedup": [1.456, 2.0],
                         "speedup_low": [1.2, 1.8], "speedup_high": [1.7, 2.3], "extra": [0, 0]})


def test_compression_table3_adds_the_paper_columns():
    t = plots.compression_table3(_speed())
    assert list(t.columns) == ["task", "L_demo", "L_x", "L_anchor", "bound", "speedup", "speedup_low",
                               "speedup_high", "paper GPT2-XL", "paper GPT-J", "paper L_demo / L_x"]
    assert t.task.tolist() == ["sst2", "tweet_emotion"]
    assert t["paper GPT2-XL"].tolist() == [1.1, 1.4] and t["paper GPT-J"].tolist() == [1.5, 1.9]
    assert t["paper L_demo / L_x"].tolist() == ["18 / 19", "53 / 12"]  # tweet_emotion stands in for EmoC
    assert t.L_demo.tolist() == [20.12, 50.0] and t.speedup.tolist() == [1.46, 2.0]
    own = plots.compression_table3(_speed().assign(task=["sst2", "rotten_tomatoes"]))  # a task of your own
    assert own["paper GPT2-XL"].tolist()[1].startswith("not in the paper")
    assert own["paper L_demo / L_x"].tolist()[1].startswith("not in the paper")


def test_speedup_bars(results, shown):
    plots.speedup_bars(_speed(), x="task", bars={"speedup": "measured speed-up", "bound": "token-ratio bound"},
                       title="smollm2: Hidden_anchor speed-up vs token-ratio bound", save_as="05_speedup")
    (fig,) = shown
    ax = fig.axes[0]
    assert ax.get_title() == "smollm2: Hidden_anchor speed-up vs token-ratio bound"
    assert [p.get_height() for p in ax.patches] == [1.456, 2.0, 1.9, 3.5]  # measured, then bound
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured speed-up", "token-ratio bound"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["sst2", "tweet_emotion"]
    assert results() == ["05_speedup"]
    with pytest.raises(ValueError, match="two or three side by side"):
        plots.plot_speedup(_speed(), bars={"speedup": "measured speed-up"})


def test_speedup_bars_with_the_flop_count_and_the_measured_interval(shown):
    speed = _speed().assign(flop_speedup=[3.0, 4.0])
    plots.speedup_bars(speed, x="task", bars={"speedup": "measured speed-up", "flop_speedup": "FLOP speed-up",
                                              "bound": "token-ratio bound"}, title="t", save_as="05_speedup")
    (fig,) = shown
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [1.456, 2.0, 3.0, 4.0, 1.9, 3.5]
    (bars,) = [c for c in ax.containers if getattr(c, "errorbar", None) is not None and c.errorbar is not None]
    low, high = zip(*[sorted(seg[:, 1]) for seg in bars.errorbar.lines[2][0].get_segments()])
    assert [round(v, 6) for v in low] == [1.2, 1.8] and [round(v, 6) for v in high] == [1.7, 2.3]
    t = plots.compression_table3(speed)
    assert list(t.columns[:8]) == ["task", "L_demo", "L_x", "L_anchor", "bound", "flop_speedup", "speedup",
                                   "speedup_low"]


# ------------------------------------------------------------------------------------------------- notebook 06

def test_diagnosis_setting(capsys):
    cfg = SimpleNamespace(n_layers=18, n_heads=4, n_key_value_heads=1)
    profile = "Profile(name='smoke')"
    assert plots.diagnosis_setting_lines(profile, cfg, 12) == [profile, "layer 12 of 18; n_heads 4, n_key_value_heads 1"]
    plots.show_diagnosis_setting(profile, cfg, 12)
    assert capsys.readouterr().out == f"{profile}\nlayer 12 of 18; n_heads 4, n_key_value_heads 1\n"


NAMES = ["Abbreviation", "Entity", "Description"]


def test_query_projections(capsys, shown):
    projections = torch.tensor([[1.04, -2.0, 0.5], [2.0, 0.0, 0.33]])  # [head, classes]
    score = projections.sum(0)
    dist = (score[:, None] - score[None, :]).abs()
    line = plots.query_projections_line(score, dist, (0, 2), NAMES, gold=1)
    assert line == "gold Entity; best-matching key Abbreviation; closest pair seen by this query: " \
                   "Abbreviation–Description (2.2)"
    plots.show_query_projections(projections, score, dist, (0, 2), NAMES, 1)
    assert capsys.readouterr().out == line + "\n"
    (table,) = shown
    assert list(table.index) == ["head 0", "head 1"] and list(table.columns) == NAMES
    np.testing.assert_allclose(table.to_numpy(), [[1.0, -2.0, 0.5], [2.0, 0.0, 0.3]], atol=1e-6)


def test_seed_accuracies(capsys):
    vecs = {42: SimpleNamespace(label_probs=torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]]),
                                gold=torch.tensor([0, 1, 1, 1])),
            7: SimpleNamespace(label_probs=torch.tensor([[0.9, 0.1], [0.2, 0.8]]), gold=torch.tensor([1, 1]))}
    assert plots.seed_accuracy_lines(vecs) == ["seed 42: 4 inputs, accuracy 0.750", "seed 7: 2 inputs, accuracy 0.500"]
    plots.show_seed_accuracies(vecs)
    assert capsys.readouterr().out == "seed 42: 4 inputs, accuracy 0.750\nseed 7: 2 inputs, accuracy 0.500\n"


PRED = np.array([[0.0, 0.2, 0.9], [0.2, 0.0, 0.5], [0.9, 0.5, 0.0]])
ACT = np.array([[1.0, 0.6, 0.95], [0.6, 1.0, 0.7123], [0.95, 0.7123, 1.0]])


def test_confused_pairs_table():
    t = plots.confused_pairs_table(PRED, ACT, NAMES)
    assert list(t.columns) == ["pair", "predicted (distance)", "actual (AUC)", "rank predicted", "rank actual"]
    assert t.pair.tolist() == ["Abbreviation–Entity", "Entity–Description", "Abbreviation–Description"]
    assert t["actual (AUC)"].tolist() == [0.6, 0.712, 0.95]
    assert t["predicted (distance)"].tolist() == [0.2, 0.5, 0.9]
    assert t["rank predicted"].tolist() == [1.0, 2.0, 3.0] and t["rank actual"].tolist() == [1.0, 2.0, 3.0]


def test_confusion_pair_titles_its_panels_and_is_saved(results, shown):
    plots.confusion_pair(PRED, ACT, classes=NAMES, panels=("predicted: normalised key distance", "actual: AUC-ROC"),
                         title="smollm2, TREC, layer 20: Spearman 0.50", save_as="06_confusion_pair")
    (fig,) = shown
    assert fig._suptitle.get_text() == "smollm2, TREC, layer 20: Spearman 0.50"
    assert [ax.get_title() for ax in fig.axes[:2]] == ["predicted: normalised key distance", "actual: AUC-ROC"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == NAMES
    assert results() == ["06_confusion_pair"]


def test_confusion_pair_title_carries_the_correlation():
    fig = plots.plot_confusion_pair(PRED, ACT, NAMES, title="smollm2, TREC, layer 20: Spearman 0.50")
    assert fig._suptitle.get_text() == "smollm2, TREC, layer 20: Spearman 0.50"
    plt.close(fig)


def test_layer_sweep(results, shown):
    sweep = {0: 0.1, 1: float("nan"), 2: 0.734}
    plots.layer_sweep(sweep, x="layer", y="Spearman(predicted, actual)", chosen=1, title="smollm2, TREC",
                      save_as="06_layer_sweep")
    (fig,) = shown
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("layer", "Spearman(predicted, actual)", "smollm2, TREC")
    assert "chosen layer 1" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert results() == ["06_layer_sweep"]
