"""The tables, printed summaries and figures of notebook 09 (the positive control), on small synthetic inputs."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers.study import plots  # noqa: E402
from helpers.study.stats import Interval  # noqa: E402


def iv(est: float, lo: float, hi: float) -> Interval:
    return Interval(est, lo, hi, 1, 32)


def test_setup_text_prints_profile_sizes_training_and_one_sequence():
    from helpers.protocols.positive_control import control_sizes
    from helpers.study.profile_table import PROFILES

    prompt = SimpleNamespace(text="x1.0 L2 x1.1", gold=2)
    sizes, training = control_sizes(PROFILES["smoke"]), {"steps": 2100, "seconds": 425.3}
    assert sizes.as_dict() == {"seeds": (42,), "n": 32, "n_attr": 16, "n_saliency": 16, "batch_size": 256,
                               "flow_batch_size": 64}
    text = plots.control_setup_text("smoke", sizes, training, prompt)
    assert text.splitlines() == ["smoke ControlSizes(seeds=(42,), n=32, n_attr=16, n_saliency=16, batch_size=256, "
                                 "flow_batch_size=64) | "
                                 "training: {'steps': 2100, 'seconds': 425.3}", "one sequence: x1.0 L2 x1.1 -> gold L2"]


def test_training_curve_is_saved_under_its_name_and_shown(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    curve = pd.DataFrame({"step": [0, 100, 200], "seconds": [0.0, 10.0, 20.0], "loss": [1.4, 1.0, 0.1],
                          "accuracy": [0.25, 0.3, 0.99]})
    info = {"recipe": {"seed": 7}, "training": {"seconds": 425.3}}
    title = f"Training the control (seed {info['recipe']['seed']}, {info['training']['seconds']:.0f} s on the CPU)"
    assert plots.training_curve(curve, x="training step", y="accuracy", y_right="loss (nats)", chance=1 / 4, title=title,
                                save_as="09_training_curve", model_name="control") is None
    saved = list(tmp_path.rglob("*.png"))
    assert [p.name for p in saved] == ["09_training_curve.png"] and saved[0].parent.name == "figures"
    assert "Figure" in capsys.readouterr().out  # displayed (printed outside IPython)
    assert plt.get_fignums() == []  # closed after showing: no second copy at the cell's end
    fig = plots.plot_training_curve(curve, 0.25, "Training the control (seed 7, 425 s on the CPU)")
    ax = fig.axes[0]
    assert ax.get_title() == "Training the control (seed 7, 425 s on the CPU)"
    assert list(ax.lines[0].get_ydata()) == [0.25, 0.3, 0.99] and "chance (0.25)" in ax.get_legend_handles_labels()[1]
    assert (ax.get_xlabel(), ax.get_ylabel(), fig.axes[1].get_ylabel()) == ("training step", "accuracy", "loss (nats)")


def test_interval_table_rows_and_cells():
    swap = {"swap_averaged": iv(0.984, 0.953, 1.0), "follows": iv(0.969, 0.906, 1.0), "same": iv(0.031, 0.0, 0.094)}
    df = plots.interval_table({"accuracy, training classes": iv(0.969, 0.906, 1.0),
                               "accuracy, classes never seen in training": iv(1.0, 1.0, 1.0),
                               "label swap: swap-averaged accuracy": swap["swap_averaged"],
                               "label swap: answer moves with the labels": swap["follows"],
                               "label swap: same answer (a label prior)": swap["same"]})
    assert list(df.columns) == ["[95% CI]"]
    assert df["[95% CI]"].to_dict() == {
        "accuracy, training classes": "0.969 [0.906, 1.000]",
        "accuracy, classes never seen in training": "1.000 [1.000, 1.000]",
        "label swap: swap-averaged accuracy": "0.984 [0.953, 1.000]",
        "label swap: answer moves with the labels": "0.969 [0.906, 1.000]",
        "label swap: same answer (a label prior)": "0.031 [0.000, 0.094]"}


def test_circuit_table_and_uniform_attention():
    import torch

    m = np.zeros((2, 2, 2))
    m[0, 1, 0], m[1, 1, 1], m[1, 0, 0] = 0.92, 0.913, 0.08
    for scores in (m, torch.tensor(m)):
        df = plots.circuit_table(scores, rows=("(a) label -> its item", "(b) q -> labels of the query's class"))
        assert list(df.columns) == ["L0H0", "L0H1", "L1H0", "L1H1"]
        assert list(df.index) == ["(a) label -> its item", "(b) q -> labels of the query's class"]
        assert df.loc["(a) label -> its item", "L0H1"] == "0.92" and df.loc["(b) q -> labels of the query's class",
                                                                                "L1H1"] == "0.91"
        assert df.loc["(a) label -> its item", "L1H0"] == "0.08" and df.loc["(a) label -> its item", "L0H0"] == "0.00"
    prompt = SimpleNamespace(label_pos=[2, 4], q=6)  # (a) mean(1/3, 1/5) = 0.27, (b) 2/7 = 0.29
    text = plots.control_uniform_text(prompt)
    assert text == "Uniform attention would give (a) 0.27 and (b) 0.29 (2 of the 8 labels match)."
    with pytest.raises(ValueError, match="name each one"):
        plots.circuit_table(m, rows=("(a) label -> its item",))


def test_saliency_flows_by_layer_draws_the_named_curves_against_the_named_axes(capsys):
    rows = [{"task": "control", "seed": 0, "layer": layer, "flow": f, "value": v}
            for layer in (0, 1) for f, v in (("S_wp", 0.3), ("S_pq", 0.6), ("S_ww", 0.1))]
    ivs = {("control", "curve", r["layer"], r["flow"]): iv(r["value"], r["value"] - 0.05, r["value"] + 0.05)
           for r in rows}
    fig = plots.flows_by_layer(pd.DataFrame(rows), intervals=ivs, x="layer", y="relative size",
                               curves=("S_wp", "S_pq", "S_ww"))
    assert "Figure" in capsys.readouterr().out and plt.get_fignums() == []
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("layer", "relative size", "control")
    assert [line.get_label() for line in ax.lines] == ["S_wp", "S_pq", "S_ww"]
    assert list(ax.lines[1].get_ydata()) == [0.6, 0.6]
    fig = plots.plot_flow_curves(pd.DataFrame(rows), intervals=ivs, curves=("S_pq",))
    assert [line.get_label() for line in fig.axes[0].lines] == ["S_pq"]
    with pytest.raises(ValueError, match="not saliency flows"):
        plots.plot_flow_curves(pd.DataFrame(rows), intervals=ivs, curves=("S_qq",))


def test_isolation_table_loyalty_and_mean_accuracy():
    conds = (("label", "first"), ("label", "last"), ("random", "first"), ("random", "last"))
    loyal = {(c, w, "label_loyal"): iv(0.25 * (i + 1), 0.0, 1.0) for i, (c, w) in enumerate(conds)}
    frame = pd.DataFrame([{"condition": c, "where": w, "accuracy": a} for i, (c, w) in enumerate(conds)
                          for a in (0.5, 0.5 + 0.1 * i)])
    df = plots.loyalty_by_condition(loyal, frame, conditions=conds)
    assert list(df.columns) == ["label words, first layer", "label words, last layer", "random words, first layer",
                                "random words, last layer"]
    assert list(df.index) == ["label loyalty", "accuracy"]
    assert df.loc["label loyalty", "random words, first layer"] == "0.750 [0.000, 1.000]"
    assert df.loc["accuracy", "label words, first layer"] == "0.500"
    assert df.loc["accuracy", "random words, last layer"] == "0.650"  # mean of 0.5 and 0.8
    assert list(plots.loyalty_by_condition(loyal, frame, conditions=conds[:1]).columns) == ["label words, first layer"]


def test_heads_tables_and_head_map(monkeypatch):
    ivs = {"plain": iv(0.969, 0.906, 1.0), "in-context heads ablated": iv(0.344, 0.188, 0.5)}
    df = plots.interval_table(ivs, column="accuracy [95% CI]")
    assert df["accuracy [95% CI]"].to_dict() == {"plain": "0.969 [0.906, 1.000]",
                                                 "in-context heads ablated": "0.344 [0.188, 0.500]"}
    one = plots.layer_head_table([[0.71875, 0.3125], [1.0, 0.34375]],
                                 cells="accuracy, one head ablated everywhere (first seed)")
    assert list(one.index) == ["layer 0", "layer 1"] and list(one.columns) == ["head 0", "head 1"]
    assert one.loc["layer 0", "head 0"] == 0.719 and one.loc["layer 1", "head 1"] == 0.344
    assert one.index.name == "accuracy, one head ablated everywhere (first seed)"
    scores = SimpleNamespace(mean_gain=np.array([[0.1, -0.2], [0.0, 1.5]]), mean_drop=np.array([[0.0, 0.3], [0.1, 2.0]]))
    shown = []
    monkeypatch.setattr("helpers.study.plots.control.show_figure", lambda fig, *a, **k: shown.append(fig))
    plots.head_attribution_map(scores, boxed=[(1, 1)], x="head", y="layer", title="control: head attribution at q",
                               panels=("gain: direct log-prob effect at q", "drop when ablated at q"))
    maps = [ax for ax in shown[0].axes if ax.get_label() != "<colorbar>"]
    assert [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in maps] == [
        ("gain: direct log-prob effect at q", "head", "layer"), ("drop when ablated at q", "head", "layer")]
    assert shown[0].get_suptitle() == "control: head attribution at q"
    with pytest.raises(ValueError):  # a name for each of the two panels
        plots.head_attribution_map(scores, boxed=[], x="head", y="layer", title="", panels=("gain",))
    plt.close("all")


def test_two_way_line():
    mapping = {"swap_averaged": iv(1.0, 1.0, 1.0), "same_word": iv(0.0, 0.0, 0.0)}
    text = plots.control_two_way_text(mapping, iv(0.9, 0.8, 1.0), {"corr_attn": iv(0.997, 0.995, 0.998),
                                                                     "abs_corr_vo": None})
    assert text == ("2-way: swap-averaged accuracy 1.000 [1.000, 1.000], same answer after the swap 0.000 [0.000, "
                    "0.000]; label-carrying rate 0.900 [0.800, 1.000]; two towers {'corr_attn': '0.997 [0.995, 0.998]', "
                    "'abs_corr_vo': 'no estimate'}")
    assert "'corr_attn': 'no estimate'" in plots.control_two_way_text(mapping, iv(0.9, 0.8, 1.0), {"corr_attn": None})


def test_hidden_anchor_table():
    ivs = {"icl": iv(0.969, 0.906, 1.0), "hidden_anchor": iv(0.969, 0.906, 1.0), "hidden_random": iv(0.219, 0.094, 0.375)}
    df = plots.interval_table(ivs)
    assert list(df.index) == ["icl", "hidden_anchor", "hidden_random"] and list(df.columns) == ["[95% CI]"]
    assert df.loc["hidden_random", "[95% CI]"] == "0.219 [0.094, 0.375]"


def test_control_names_are_not_defined_elsewhere_in_plots():
    import importlib
    import pkgutil

    import helpers.study.plots as pkg

    mine = set(importlib.import_module("helpers.study.plots.control").__all__)
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name != "control":
            other = set(getattr(importlib.import_module(f"helpers.study.plots.{info.name}"), "__all__", []))
            assert not mine & other, f"defined in both control and {info.name}: {mine & other}"
