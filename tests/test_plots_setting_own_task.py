"""What notebooks 00 and 08 show: tables, printed lines and figures of ``helpers.study.plots.setting`` (00) and
``helpers.study.plots.own_task`` (08), on small synthetic inputs."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from helpers.protocols.setting import vanilla_interval_metrics
from helpers.study.stats import Interval


@pytest.fixture
def shown(monkeypatch, tmp_path):
    """Everything the two modules pass to ``display`` (in order), with figures saved under ``tmp_path``."""
    from helpers.study.plots import figures, own_task, setting

    matplotlib.use("Agg")
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    out = []
    monkeypatch.setattr(setting, "display", out.append)
    monkeypatch.setattr(figures, "display", out.append)  # figures: plots.show_figure
    monkeypatch.setattr(own_task, "display", out.append)
    yield out
    plt.close("all")


def _saved(tmp_path, name: str) -> list:
    return list(tmp_path.rglob(f"figures/{name}.png"))


def _task(name: str = "sst2"):
    from helpers.core.tasks import get_task

    return get_task(name)


def _prompt(model):
    from helpers.core.prompts import Demo, build_prompt

    return build_prompt(model, "sst2", [Demo("a fine film", 1), Demo("dull", 0)], Demo("fun", 1))


# --------------------------------------------------------------------------------------------------- notebook 00


def test_show_anchor_prompts_shows_a_heading_and_the_tokens_per_task(tiny_models, shown):
    from IPython.display import HTML

    from helpers.study import plots

    m = tiny_models["gpt2"]
    p = _prompt(m)
    plots.show_anchor_prompts(m, {"sst2": p, "agnews": p})
    assert len(shown) == 4 and all(isinstance(h, HTML) for h in shown)
    assert shown[0].data == f"<h4>SST-2: {len(p)} tokens, p_k = {p.label_pos}, q = {p.q}</h4>"
    assert shown[0].data == plots.anchor_prompt_heading("SST-2", p)
    assert shown[1].data == plots.anchor_html(m, p)
    assert shown[2].data.startswith(f"<h4>{_task('agnews').display}: ")


def test_show_label_ranks_prints_positions_table_and_prediction(tiny_models, shown, capsys):
    from helpers.core.tasks import label_token_ids
    from helpers.study import plots

    m = tiny_models["gpt2"]
    task, p = _task(), _prompt(m)
    ids = label_token_ids(m.tokenizer, task)
    with torch.inference_mode():
        full = m(p.tokens[None])[0, p.q].float().cpu()
    mine = full[ids]
    rank = (full[None, :] > mine[:, None]).sum(-1)
    plots.show_label_ranks(m, task, p, mine, full, rank)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    tok = m.tokenizer.decode([int(p.tokens[p.q])])
    assert lines[0].startswith("SST-2: p_k = [") and f"q = {p.q} {tok!r}" in lines[0]
    assert all(f"({i}, " in lines[0] for i in p.label_pos)
    top = [m.tokenizer.decode([i]) for i in full.topk(5).indices.tolist()]
    assert lines[1] == (f"top-5 tokens at q: {top}; prediction {task.label_words[int(mine.argmax())]!r}, "
                        f"gold {task.label_words[p.gold]!r}")
    (table,) = shown
    assert list(table.index) == list(task.label_words)
    assert list(table.columns) == ["logit at q", "rank in the vocabulary"]
    np.testing.assert_allclose(table["logit at q"], mine.numpy().round(2))
    assert table["rank in the vocabulary"].tolist() == rank.tolist()
    assert (table["rank in the vocabulary"] >= 0).all() and (table["rank in the vocabulary"] < m.cfg.d_vocab).all()


def _accuracy_inputs():
    acc = pd.DataFrame([{"task": t, "setting": s, "seed": seed, "accuracy": a}
                        for t, base in (("SST-2", 0.7), ("TREC", 0.4)) for s, d in (("vanilla 1-shot", 0.0),
                                                                                     ("vanilla 5-shot", -0.1))
                        for seed, a in ((42, base + d), (43, base + d + 0.02))])
    intervals = {("SST-2", "vanilla 1-shot"): Interval(0.71, 0.6, 0.8, 2, 20),
                 ("TREC", "vanilla 1-shot"): Interval(0.41, 0.3, 0.5, 2, 20),
                 ("SST-2", "vanilla 5-shot"): Interval(0.61, 0.5, 0.7, 2, 20),
                 ("TREC", "vanilla 5-shot"): Interval(0.31, 0.2, 0.4, 2, 20)}
    chance = {"SST-2": 0.5, "TREC": 1 / 6}
    marks = {("SST-2", "vanilla 1-shot"): 0.61, ("SST-2", "vanilla 5-shot"): 0.55}
    return acc, intervals, chance, marks


def test_vanilla_interval_table_and_metrics():
    from helpers.study import plots

    _, intervals, chance, marks = _accuracy_inputs()
    t = plots.vanilla_interval_table(intervals, chance, marks)
    assert list(t.columns) == ["setting", "task", "accuracy [95% CI]", "chance", "paper GPT2-XL"]
    assert t.values.tolist() == [["vanilla 1-shot", "SST-2", "0.710 [0.600, 0.800]", 0.5, 0.61],
                                 ["vanilla 1-shot", "TREC", "0.410 [0.300, 0.500]", 0.167, "not run"],
                                 ["vanilla 5-shot", "SST-2", "0.610 [0.500, 0.700]", 0.5, 0.55],
                                 ["vanilla 5-shot", "TREC", "0.310 [0.200, 0.400]", 0.167, "not run"]]
    assert vanilla_interval_metrics(intervals) == {
        "vanilla 1-shot|SST-2": [0.71, 0.6, 0.8], "vanilla 1-shot|TREC": [0.41, 0.3, 0.5],
        "vanilla 5-shot|SST-2": [0.61, 0.5, 0.7], "vanilla 5-shot|TREC": [0.31, 0.2, 0.4]}


def test_accuracy_bars_group_tasks_a_bar_per_setting_and_are_saved(shown, tmp_path):
    from matplotlib.figure import Figure

    from helpers.study import plots

    acc, intervals, chance, marks = _accuracy_inputs()
    plots.accuracy_bars(acc, x="task", y="accuracy", bars="setting", intervals=intervals, chance=chance, paper=marks,
                        title="Vanilla ICL accuracy, tiny-model (smoke: 2 seed(s), n=10); diamonds: paper, GPT2-XL",
                        save_as="00_vanilla_accuracy")
    (fig,) = shown
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() == "Vanilla ICL accuracy, tiny-model (smoke: 2 seed(s), n=10); diamonds: paper, GPT2-XL"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("task", "accuracy")
    assert [t.get_text() for t in ax.get_xticklabels()] == list(dict.fromkeys(acc["task"]))
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == list(dict.fromkeys(acc["setting"]))
    assert len(_saved(tmp_path, "00_vanilla_accuracy")) == 1
    assert not plt.fignum_exists(fig.number)  # closed: not shown a second time at the end of the cell


# --------------------------------------------------------------------------------------------------- notebook 08


def test_task_spec_text_and_show(capsys):
    from helpers.study import plots

    own = _task("rotten_tomatoes")
    text = plots.task_spec_text(own)
    assert text.startswith(f"{own.spec_path}:\n") and '"template"' in text
    plots.show_task_spec(own)
    assert capsys.readouterr().out == text + "\n"
    assert plots.task_spec_text(_task()) is None
    plots.show_task_spec(_task())
    assert capsys.readouterr().out == ""


def test_show_rendered_prediction_prints_the_query_end_and_the_logits(capsys):
    from helpers.study import plots

    task = _task()
    text = "x" * 100 + "Review: fun\nSentiment:"
    plots.show_rendered_prediction(task, text, torch.tensor([0.123, 1.5]), gold=0)
    out = capsys.readouterr().out.splitlines()
    assert out == [f"the query as rendered: ...{text[-80:]!r}",
                   "label logits at q: Negative 0.12, Positive 1.50; prediction 'Positive', gold 'Negative'"]


def test_show_own_accuracy_shows_seeds_and_the_interval_beside_chance(shown, capsys):
    from helpers.study import plots

    task = _task()
    runs = pd.DataFrame({"task": "sst2", "seed": [42, 43], "n": [8, 8], "dropped": [0, 1],
                         "accuracy": [0.62345, 0.5], "correct": [[1, 0], [0, 1]]})
    plots.show_own_accuracy(task, runs, Interval(0.5612, 0.4, 0.7, 2, 16))
    (table,) = shown
    assert list(table.columns) == ["seed", "n", "dropped", "accuracy"]
    assert table["accuracy"].tolist() == [0.623, 0.5]
    assert capsys.readouterr().out == ("SST-2: vanilla 1-shot accuracy 0.561 [0.400, 0.700] (95% CI; 2 seed(s), "
                                       "16 inputs), chance 0.500\n")


def test_own_saliency_checks_and_flows_of_one_task(shown, tmp_path):
    from matplotlib.figure import Figure

    from helpers.study import plots

    task = _task()
    flows = pd.DataFrame([{"task": "sst2", "seed": 1, "layer": l, "flow": f, "value": 0.1 * (i + 1)}
                          for l in range(3) for i, f in enumerate(("S_wp", "S_pq", "S_ww"))])
    ivs = {("sst2", "curve", r.layer, r.flow): Interval(r.value, r.value - 0.05, r.value + 0.05, 1, 6)
           for r in flows.itertuples()}
    checks = {("sst2", "S_wp > S_pq (shallow)"): True, ("sst2", "S_pq > S_wp (deep)"): False}
    assert plots.own_saliency_checks_table(checks).to_dict() == {
        "on the 95% intervals": {"S_wp > S_pq (shallow)": True, "S_pq > S_wp (deep)": False}}
    plots.flows_by_layer(flows, intervals=ivs, panels={task.name: task.display}, x="layer", y="relative size",
                         curves=("S_wp", "S_pq", "S_ww"), save_as="08_sst2_saliency_flow",
                         title="Relative saliency flows, SST-2, m/tiny (2 seed(s) x 3 inputs, 95% CI)")
    (fig,) = shown
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "SST-2"
    assert fig._suptitle.get_text() == "Relative saliency flows, SST-2, m/tiny (2 seed(s) x 3 inputs, 95% CI)"
    assert len(_saved(tmp_path, "08_sst2_saliency_flow")) == 1
    assert flows["task"].unique().tolist() == ["sst2"]  # the caller's frame is not relabelled


def _isolation_intervals():
    conds = [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]
    return {(c, w, m): Interval(0.5 + 0.1 * i + (0.05 if m == "word_loyal" else 0), 0.4, 0.95, 2, 16)
            for i, (c, w) in enumerate(conds) for m in ("label_loyal", "word_loyal")}


def test_own_isolation_table():
    from helpers.study import plots

    t = plots.own_isolation_table(_isolation_intervals(), k=2)
    assert list(t.columns) == ["label loyalty % [95% CI]", "word loyalty % [95% CI]"]
    assert list(t.index) == ["label words, first 2", "label words, last 2", "random words, first 2",
                             "random words, last 2"]
    assert t.loc["label words, first 2"].tolist() == ["50.0 [40.0, 95.0]", "55.0 [40.0, 95.0]"]
    assert t.loc["random words, last 2"].tolist() == ["80.0 [40.0, 95.0]", "85.0 [40.0, 95.0]"]


def test_own_isolation_bars_carry_every_interval(shown, tmp_path):
    from matplotlib.container import ErrorbarContainer
    from matplotlib.figure import Figure

    from helpers.study import plots

    ivs = _isolation_intervals()
    loy = pd.DataFrame([{"task": "SST-2", "seed": s, "condition": c, "where": w, "k": 2, "label_loyalty": 0.6,
                         "word_loyalty": 0.7} for s in (42, 43) for c, w, _ in list(ivs)[::2]])
    conds = [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]
    plots.loyalty_bars(loy, k=2, conditions=conds, bars=("label_loyalty", "word_loyalty"), y="loyalty (%)",
                       intervals=ivs, title="Isolation in the first / last 2 layers, SST-2", save_as="08_sst2_isolation")
    (fig,) = shown
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "Isolation in the first / last 2 layers, SST-2"
    assert sum(isinstance(c, ErrorbarContainer) for c in fig.axes[0].containers) == 8  # every bar has its interval
    assert len(_saved(tmp_path, "08_sst2_isolation")) == 1


def test_own_aucroc_tables():
    from helpers.study import plots

    t = plots.own_aucroc_table({"peak": Interval(0.81234, 0.7, 0.9, 2, 16), "crossing": None})
    assert t.to_dict() == {"95% interval (layers 0-based)": {"peak": "0.81 [0.70, 0.90]", "crossing": "no estimate"}}
    c = plots.own_aucroc_checks_table({"peak above 0.5": True})
    assert c.to_dict() == {"holds": {"peak above 0.5": True}}
    assert plots.own_aucroc_checks_table({}).empty  # undefined AUCROC: no checks


def test_own_aucroc_curves_of_one_task(shown, tmp_path):
    from matplotlib.figure import Figure

    from helpers.study import plots

    curve = pd.DataFrame({"layer": [0, 1, 2], "auc": [0.5, 0.7, 0.8], "r": [0.2, 0.6, 1.0]})
    plots.aucroc_by_layer({"tiny-model, SST-2": curve}, x="layer", curves={"auc": "AUCROC$_l$", "r": "$R_l$"},
                          threshold=0.5, save_as="08_sst2_aucroc")
    (fig,) = shown
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "tiny-model, SST-2"
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [0.5, 0.7, 0.8])
    assert len(_saved(tmp_path, "08_sst2_aucroc")) == 1
