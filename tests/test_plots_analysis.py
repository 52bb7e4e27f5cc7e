"""What notebooks 01-03 show through ``helpers.study.plots.analysis``: printed lines, tables and saved figures.

Every ``show_*`` is run on small synthetic inputs; what it displays is captured in order, what it prints is read from
stdout, and every figure must be saved under the notebook's name in a temporary results folder and closed.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.study.plots import analysis, figures  # noqa: E402
from helpers.study.stats import Interval  # noqa: E402


@pytest.fixture
def shown(monkeypatch, tmp_path):
    """Results go to ``tmp_path``; returns the list that collects, in order, everything the helpers display."""
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    out = []
    monkeypatch.setattr(analysis, "display", out.append)
    monkeypatch.setattr(figures, "display", out.append)  # figures: plots.show_figure
    yield out
    plt.close("all")


def _saved(tmp_path, name: str):
    return list(tmp_path.rglob(f"figures/{name}.png"))


@pytest.fixture
def prompt(tiny_models):
    from helpers.core.prompts import Demo, build_prompt

    return build_prompt(tiny_models["gpt2"], "sst2", [Demo("a fine film", 1), Demo("dull", 0)], Demo("fun", 1))


def _figures(items):
    return [x for x in items if isinstance(x, matplotlib.figure.Figure)]


# ------------------------------------------------------------------------------------------------ notebook 01

def test_saliency_by_hand_lines_name_the_prompt_and_every_sixth_layer(prompt, capsys):
    rel = torch.tensor([[0.5, 0.25, 0.25]] * 12) + torch.arange(12)[:, None] * torch.tensor([0.0, 0.01, -0.01])
    lines = analysis.saliency_by_hand_lines("SST-2", prompt, rel)
    assert lines[0] == (f"✓ by hand = helpers on one SST-2 prompt ({len(prompt)} tokens, "
                        f"label positions {prompt.label_pos}, q = {prompt.q})")
    assert [ln[:8] for ln in lines[1:]] == [f"layer {l:2d}" for l in (0, 2, 4, 6, 8, 10)]
    assert lines[2] == "layer  2: relative S_wp 0.50  S_pq 0.27  S_ww 0.23"
    analysis.show_saliency_by_hand("SST-2", prompt, rel)
    assert capsys.readouterr().out.splitlines() == lines
    few = analysis.saliency_by_hand_lines("SST-2", prompt, rel[:4])  # fewer than 6 layers: every layer
    assert len(few) == 5


def test_flows_by_layer_renames_tasks_names_its_axes_and_saves_the_figure(shown, tmp_path):
    flows = ("S_wp", "S_pq", "S_ww")
    df = pd.DataFrame([{"task": t, "seed": 1, "layer": l, "flow": f, "value": 0.1 * (i + 1)}
                       for t in ("SST-2", "mean over tasks") for l in range(3) for i, f in enumerate(flows)])
    ids = {"SST-2": "sst2", "mean over tasks": "mean over tasks"}
    ivs = {(ids[r.task], "curve", r.layer, r.flow): Interval(r.value, r.value - 0.05, r.value + 0.05, 2, 40)
           for r in df.itertuples()}
    fig = analysis.flows_by_layer(df, intervals=ivs, panels={"sst2": "SST-2"}, x="layer", y="relative size",
                                  curves=flows, save_as="01_saliency_flow",
                                  title="Relative saliency flows per layer, tiny/model (mean over 2 seed(s), 95% CI)")
    assert shown == [fig] and not plt.fignum_exists(fig.number)
    assert [ax.get_title() for ax in fig.axes] == ["SST-2", "mean over tasks"]
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [("layer", "relative size")] * 2
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == list(flows)
    line = next(l for l in fig.axes[0].get_lines() if l.get_label() == "S_pq")
    np.testing.assert_allclose(line.get_ydata(), [0.2, 0.2, 0.2])  # the intervals reached the renamed panel
    assert fig.get_suptitle() == "Relative saliency flows per layer, tiny/model (mean over 2 seed(s), 95% CI)"
    assert len(_saved(tmp_path, "01_saliency_flow")) == 1


# ------------------------------------------------------------------------------------------------ notebook 02

def _sst2():
    from helpers.core.tasks import get_task

    return get_task("sst2")


def test_isolation_by_hand_shows_the_line_and_the_label_probabilities(prompt, shown, capsys):
    task = _sst2()
    moves = {"unmodified": torch.tensor([0.0, 0.0]), "label words isolated, first 5 layers": torch.tensor([0.0, 1.0])}
    line = analysis.isolation_by_hand_line(task, prompt)
    assert line == (f"✓ by hand = helper on one SST-2 prompt ({len(prompt)} tokens, label positions {prompt.label_pos}, "
                    f"q = {prompt.q}, gold: Positive)")
    table = analysis.isolation_probs_table(moves, task.label_words)
    assert list(table.index) == list(moves) and list(table.columns) == ["P(Negative)", "P(Positive)"]
    assert table.loc["unmodified"].tolist() == [0.5, 0.5]
    assert table.loc["label words isolated, first 5 layers", "P(Positive)"] == round(1 / (1 + np.exp(-1)), 3)
    analysis.show_isolation_by_hand(task, prompt, moves)
    assert capsys.readouterr().out.strip() == line
    assert len(shown) == 1 and shown[0].equals(table)


def _loyalty_frame():
    rows = []
    for task in ("SST-2", "TREC"):
        for seed in (1, 2):
            for cond, where in (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")):
                for k in (1, 5):
                    base = 0.3 if (cond, where) == ("label", "first") else 0.9
                    rows.append({"task": task, "seed": seed, "condition": cond, "where": where, "k": k,
                                 "label_loyalty": base + 0.01 * seed + (0.02 if task == "TREC" else 0.0),
                                 "word_loyalty": base - 0.1, "n": 8 if cond == "label" else 4})
    return pd.DataFrame(rows)


def test_isolation_tables_count_inputs_and_average_label_loyalty():
    df = _loyalty_frame()
    n = analysis.isolation_inputs_table(df, 5)
    assert list(n.index) == ["label", "random"] and list(n.columns) == ["SST-2", "TREC"]
    assert n.loc["label"].tolist() == [8, 8] and n.loc["random"].tolist() == [4, 4]
    ll = analysis.label_loyalty_table(df, 5)
    assert list(ll.index) == [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]
    assert list(ll.columns) == ["SST-2", "TREC"]
    assert ll.loc[("label", "first"), "SST-2"] == 31.5  # mean of 31 % and 32 % over the two seeds
    assert ll.loc[("random", "last"), "TREC"] == 93.5


CONDITIONS = [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]


def test_loyalty_bars_and_sweep_draw_the_named_conditions_against_the_named_axes(shown, tmp_path):
    df = _loyalty_frame()
    loyalty = {(c, w, m): Interval(0.5, 0.4, 0.6, 2, 32) for c in ("label", "random") for w in ("first", "last")
               for m in ("label_loyal", "word_loyal")}
    analysis.loyalty_bars(df, k=5, conditions=CONDITIONS, bars=("label_loyalty", "word_loyalty"), y="loyalty (%)",
                          intervals=loyalty, title="Isolation in the first / last 5 layers, tiny/model",
                          save_as="02_isolation_loyalty")
    analysis.loyalty_sweep(df[df.seed.isin([1])], x="isolated layers", y="loyalty (%)",
                           panels=("label_loyalty", "word_loyalty"), save_as="02_isolation_sweep",
                           title="Loyalty vs isolated layers (seed(s) [1]; k != 5 on all inputs)")
    bars, sweep = _figures(shown)
    ax = bars.axes[0]
    assert ax.get_title() == "Isolation in the first / last 5 layers, tiny/model" and ax.get_ylabel() == "loyalty (%)"
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{c} words, {w} 5" for c, w in CONDITIONS]
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["label_loyalty", "word_loyalty"]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches if p.get_height() > 0)
    assert heights[-1] == pytest.approx(92.5)  # bars in %: mean label loyalty of random, last over tasks and seeds
    assert sweep.get_suptitle() == "Loyalty vs isolated layers (seed(s) [1]; k != 5 on all inputs)"
    assert [(a.get_title(), a.get_xlabel(), a.get_ylabel()) for a in sweep.axes] == [
        ("label loyalty", "isolated layers", "loyalty (%)"), ("word loyalty", "isolated layers", "loyalty (%)")]
    assert not plt.get_fignums()
    assert len(_saved(tmp_path, "02_isolation_loyalty")) == 1 and len(_saved(tmp_path, "02_isolation_sweep")) == 1
    analysis.loyalty_bars(df, k=5, conditions=CONDITIONS[:2], bars=("label_loyalty",), y="label loyalty (%)",
                          intervals=loyalty, title="", save_as="two_conditions")
    ax = _figures(shown)[-1].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["label words, first 5", "label words, last 5"]


def test_top_tokens_table_and_label_word_share(tiny_models, shown, capsys):
    from helpers.core.predict import Predictions

    m = tiny_models["gpt2"]
    ids = m.tokenizer.encode(" the cat sat on a mat")
    base = Predictions(torch.zeros(2, 2), torch.tensor([ids[:5], ids[1:6]]), torch.tensor([0, 1]))
    iso = Predictions(torch.zeros(2, 2), torch.tensor([ids[1:6], ids[:5]]), torch.tensor([0, 1]))
    share = {"without isolation": 0.4, "label words first 5": 0.05, "label words last 5": 0.375}
    line = analysis.label_word_share_line("AGNews", share)
    assert line == ("AGNews, share of top-5 tokens that are label words: without isolation 40%, "
                    "label words first 5 5%, label words last 5 38%")
    analysis.show_top_tokens(m, {"base": base, ("label", "first", 5): iso}, 5, share, "AGNews", n=2)
    assert capsys.readouterr().out.strip() == line
    (table,) = shown
    assert table.equals(analysis.topk_table(m, base, iso, n=2))
    assert table["condition"].tolist() == ["without isolation", "with isolation"] * 2
    assert table.loc[1, "top 1"] == analysis._token_shown(m.tokenizer.decode([ids[1]]))


# ------------------------------------------------------------------------------------------------ notebook 03

def test_label_attention_by_hand_shows_the_line_and_the_table(prompt, shown, capsys):
    task = _sst2()
    attn = torch.tensor([[0.1, 0.2], [0.3, 0.4], [1.25, 0.1234]])
    line = analysis.label_attention_by_hand_line(task, prompt, 3)
    assert line == f"✓ SST-2, one prompt of {len(prompt)} tokens: by hand = label_attention on all 3 layers"
    table = analysis.label_attention_table(attn, task.label_words)
    assert list(table.index) == ["A_l(q, 'Negative')", "A_l(q, 'Positive')"]
    assert list(table.columns) == [0, 1, 2] and table.columns.name == "layer"
    assert table.loc["A_l(q, 'Negative')", 2] == 1.25
    assert table.loc["A_l(q, 'Positive')", 2] == pytest.approx(0.123)
    analysis.show_label_attention_by_hand(task, prompt, attn)
    assert capsys.readouterr().out.strip() == line
    assert len(shown) == 1 and shown[0].equals(table)


def test_aucroc_by_layer_draws_the_named_curves_per_panel_and_saves_them(shown, tmp_path):
    curve = pd.DataFrame({"layer": [0, 1, 2, 3], "auc": [0.5, 0.6, 0.8, 0.7], "r": [0.1, 0.3, 0.6, 0.9]})
    fig = analysis.aucroc_by_layer({"model-a (mean over tasks, seeds)": curve,
                                    "model-b (mean over tasks, seeds)": curve.assign(auc=0.55)},
                                   x="layer", curves={"auc": "AUCROC$_l$", "r": "$R_l$"}, threshold=0.5,
                                   save_as="03_aucroc")
    assert shown == [fig]
    assert [ax.get_title() for ax in fig.axes] == ["model-a (mean over tasks, seeds)", "model-b (mean over tasks, seeds)"]
    assert [ax.get_xlabel() for ax in fig.axes] == ["layer", "layer"]
    assert [ln.get_label() for ln in fig.axes[0].get_lines()][:2] == ["AUCROC$_l$", "$R_l$"]
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), curve["auc"])
    np.testing.assert_allclose(fig.axes[0].get_lines()[1].get_ydata(), curve["r"])
    assert "R > 0.5 at layer 2" in [t.get_text() for t in fig.axes[0].texts]
    assert not plt.fignum_exists(fig.number)
    assert len(_saved(tmp_path, "03_aucroc")) == 1
