"""The plots package re-exports every submodule; no name may shadow another."""

from __future__ import annotations

import importlib

SUBMODULES = ("setting", "analysis", "applications", "heads")


def test_no_name_collisions_between_plot_modules():
    owners: dict[str, str] = {}
    for sub in SUBMODULES:
        mod = importlib.import_module(f"helpers.study.plots.{sub}")
        for name in getattr(mod, "__all__", []):
            assert name not in owners, f"plots.{name} is defined in both {owners[name]} and {sub}"
            owners[name] = sub


def test_anchor_html_marks_label_format_and_q(tiny_models):
    from helpers.core.prompts import Demo, build_prompt
    from helpers.study import plots

    m = tiny_models["gpt2"]
    p = build_prompt(m, "sst2", [Demo("good", 1)], Demo("bad", 0))
    html = plots.anchor_html(m, p)
    assert html.count("(p_k)") == 1 and f"pos {p.q}: q" in html and "format" in html


def test_interval_bars_sit_on_their_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from helpers.study.plots import plot_interval_bars
    from helpers.study.stats import Interval

    df = pd.DataFrame({"x": ["a", "a", "b", "b"], "hue": ["u", "v", "u", "v"], "y": [0.2, 0.4, 0.6, 0.8]})
    fig, ax = plt.subplots()
    sns.barplot(data=df, x="x", y="y", hue="hue", errorbar=None, ax=ax)
    ivs = {(r.x, r.hue): Interval(r.y, r.y - 0.05, r.y + 0.1, 5, 320) for r in df.itertuples()}
    plot_interval_bars(ax, ["a", "b"], ["u", "v"], ivs)
    from matplotlib.container import ErrorbarContainer

    bars = sorted((p.get_x() + p.get_width() / 2, p.get_height()) for p in ax.patches if p.get_height() > 0)
    segs = [c.lines[2][0].get_segments()[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
    lines = sorted((seg[0][0], min(seg[0][1], seg[1][1]), max(seg[0][1], seg[1][1])) for seg in segs)
    assert len(lines) == 4
    for (bx, by), (lx, lo, hi) in zip(bars, lines):
        assert abs(bx - lx) < 1e-9 and abs(lo - (by - 0.05)) < 1e-9 and abs(hi - (by + 0.1)) < 1e-9
    plt.close(fig)


def test_bias_plot_draws_an_interval_on_every_bar():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd
    from matplotlib.container import ErrorbarContainer

    from helpers.study.plots import plot_biases
    from helpers.study.stats import Interval

    df = pd.DataFrame({"bias": ["majority", "majority", "recency", "recency"],
                       "stage": ["before", "after reduction"] * 2, "size": [0.2, 0.1, 0.15, 0.05]})
    ivs = {(r.bias, r.stage): Interval(r.size, r.size - 0.05, r.size + 0.05, 5, 320) for r in df.itertuples()}
    fig = plot_biases(df, intervals=ivs)
    ax = fig.axes[0]
    segs = [c.lines[2][0].get_segments()[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(segs) == 4
    assert sorted(round(min(s[0][1], s[1][1]), 3) for s in segs) == sorted(round(v - 0.05, 3) for v in df["size"])


def test_flow_curves_draw_the_interval_bands():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from helpers.study.plots import plot_flow_curves
    from helpers.study.stats import Interval

    flows = ("S_wp", "S_pq", "S_ww")
    df = pd.DataFrame([{"task": t, "seed": 1, "layer": l, "flow": f, "value": 0.1 * (i + 1)}
                       for t in ("A", "B") for l in range(3) for i, f in enumerate(flows)])
    ivs = {(r.task, "curve", r.layer, r.flow): Interval(r.value, r.value - 0.05, r.value + 0.02 * (r.layer + 1), 5, 60)
           for r in df.itertuples()}
    fig = plot_flow_curves(df, intervals=ivs)
    ax = fig.axes[0]
    line = next(l for l in ax.get_lines() if l.get_label() == "S_pq")
    np.testing.assert_allclose(line.get_ydata(), [0.2, 0.2, 0.2])
    bands = [c for c in ax.collections if len(c.get_paths()) and len(c.get_paths()[0].vertices)]
    assert len(bands) == 3  # one band per flow
    ys = np.concatenate([b.get_paths()[0].vertices[:, 1] for b in bands])
    for r in df[df.task == "A"].itertuples():
        iv = ivs[(r.task, "curve", r.layer, r.flow)]
        assert np.isclose(ys, iv.low).any() and np.isclose(ys, iv.high).any()
    assert "95% CI (seeds and inputs)" in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    plt.close(fig)
    plt.close(plot_flow_curves(df))  # without intervals: the sd over seeds, as before


# ----------------------------------------------------------------------------------- tokens as the views show them

def _bos_prompt(model):
    from helpers.core.prompts import Demo, build_prompt

    return build_prompt(model, "sst2", [Demo("a <b>bold</b> & fine film", 1), Demo("dull", 0)], Demo("fun", 1))


def test_bos_is_visible_in_token_strings_and_views(tiny_models):
    """A BOS token (GPT-2 tokenizer: <|endoftext|>; Gemma: <bos>) is shown as ‹...›, never as a raw <...> that an
    HTML view reads as a tag and hides; in circuitsvis views no token carries markup characters at all."""
    import json

    from helpers.study import plots

    m = tiny_models["rotary"]  # prepends BOS
    p = _bos_prompt(m)
    assert p.bos
    toks = plots.token_strings(m, p)
    assert toks[0] == "\u2039|endoftext|\u203a"
    assert "<|endoftext|>" not in toks
    assert "".join(toks[1:]) == m.tokenizer.decode(p.tokens[1:].tolist())  # ordinary tokens as decoded
    shown = plots.view_token_strings(m, p)
    assert len(shown) == len(p) and shown[0] == toks[0]
    assert not any(c in "".join(shown) for c in "<>&"), shown
    assert any("\u21b5" in t for t in shown)  # newline tokens get a visible mark
    html = plots.anchor_html(m, p)
    assert "\u2039|endoftext|\u203a" in html and "endoftext|&gt;" not in html
    for view in (plots.anchor_tokens_view(m, p), plots.attention_view(m, p, layer=0),
                 plots.head_attention_view(m, p, [[0.5] * len(p), [0.25] * len(p)], ["L0H1", "L1H2"])):
        props = str(view)  # the rendered HTML, the view's props as JSON
        assert json.dumps(shown[0]) in props
        assert "<|endoftext|>" not in props and "<b>" not in props


def test_saliency_view_is_titled_by_layer(tiny_models):
    """The saliency view's panels are layers, and are named so ("layer 1"), not "Head 0"."""
    import json

    import torch

    from helpers.study import plots

    m = tiny_models["rotary"]
    p = _bos_prompt(m)
    n = len(p)
    sal = torch.rand(m.cfg.n_layers, n, n).tril()
    props = str(plots.saliency_view(m, p, sal, [1, 2]))
    assert '"attentionHeadNames": ["layer 1", "layer 2"]' in props
    assert json.dumps(plots.view_token_strings(m, p)[0]) in props


def test_views_carry_their_bundle_and_close_their_mount_point(tiny_models, monkeypatch):
    """Every circuitsvis view of the helpers shows the inline JavaScript bundle without asking whether a network is
    there (a page rendered from it works offline), and its mount point is a closed <div ...></div>: circuitsvis's
    self-closing <div .../> would leave the div open in HTML and nest whatever follows inside the view."""
    import re

    import circuitsvis.utils.render as render
    import torch

    from helpers.study import plots

    def no_network_check():
        raise AssertionError("the view asked whether a network is there")

    monkeypatch.setattr(render, "internet_on", no_network_check)
    m = tiny_models["rotary"]
    p = _bos_prompt(m)
    sal = torch.rand(m.cfg.n_layers, len(p), len(p)).tril()
    views = (plots.anchor_tokens_view(m, p), plots.attention_view(m, p, layer=0), plots.saliency_view(m, p, sal, [1]),
             plots.head_attention_view(m, p, [[0.5] * len(p)], ["L0H1"]))
    for view in views:
        html = view._repr_html_()
        assert html == str(view) == view.__html__()
        assert "var CircuitsVis=" in html  # the bundle itself, not an import
        assert not re.search(r"""(?:src|from)\s*=?\s*["']https?://""", html) and "unpkg.com" not in html
        mounts = re.findall(r'<div id="circuits-vis-[^"]*"[^>]*>', html)
        assert len(mounts) == 1 and not mounts[0].endswith("/>"), mounts
        assert mounts[0] + "</div>" in html


def test_close_view_divs_is_idempotent_and_touches_nothing_else():
    """Only circuitsvis mount points are rewritten, and a second pass changes nothing."""
    src = '<div id="circuits-vis-ab12" style="margin: 15px 0;"/>\n<br/><div id="other"/><img src="x.png"/>'
    once = plots_close(src)
    assert once == '<div id="circuits-vis-ab12" style="margin: 15px 0;"></div>\n<br/><div id="other"/><img src="x.png"/>'
    assert plots_close(once) == once


def plots_close(src: str) -> str:
    from helpers.study.plots import close_view_divs

    return close_view_divs(src)


def test_topk_table_shows_every_token_whole(tiny_models):
    """Table 5: every top-k token of every shown input has a cell of its own, whitespace visible, and pandas' HTML
    display (what a notebook shows) cuts none of them."""
    import pandas as pd
    import torch

    from helpers.core.predict import Predictions
    from helpers.study import plots

    m = tiny_models["gpt2"]
    tok = m.tokenizer
    words = [" business", " sports", "\n", " technology", " world", " The", ",", " the", " and", " of"]
    ids = [tok.encode(w, add_special_tokens=False)[-1] for w in words]  # one token each
    top = torch.tensor([ids[:5], ids[5:], ids[2:7]])
    base = Predictions(torch.zeros(3, 2), top, torch.zeros(3, dtype=torch.long))
    iso = Predictions(torch.zeros(3, 2), top.flip(-1), torch.zeros(3, dtype=torch.long))
    df = plots.topk_table(m, base, iso, n=2)
    assert list(df.columns) == ["input", "condition", "top 1", "top 2", "top 3", "top 4", "top 5"]
    assert len(df) == 4 and list(df["condition"][:2]) == ["without isolation", "with isolation"]
    assert list(df.iloc[0, 2:]) == ["\u2423business", "\u2423sports", "\u21b5", "\u2423technology", "\u2423world"]
    assert list(df.iloc[1, 2:]) == ["\u2423world", "\u2423technology", "\u21b5", "\u2423sports", "\u2423business"]
    with pd.option_context("display.max_colwidth", 50):
        html = df._repr_html_()
    assert "..." not in html and "\u2026" not in html
    for cell in df.iloc[:, 2:].to_numpy().ravel():
        assert f">{cell}<" in html


# ----------------------------------------------------------------------------------- whole-number layer axes

def _layer_plots(n_layers: int = 18):
    """Every figure with an axis of layer indices or counts of layers (or epochs): (name, figure, "x" or "y")."""
    import numpy as np
    import pandas as pd

    from helpers.study import plots

    L = range(n_layers)
    flows = pd.DataFrame([{"task": t, "seed": s, "layer": l, "flow": f, "value": 0.3}
                          for t in ("A", "B") for s in (1, 2) for l in L for f in ("S_wp", "S_pq", "S_ww")])
    sweep = pd.DataFrame([{"task": "A", "seed": 1, "condition": c, "where": w, "k": k, "label_loyalty": 0.9,
                           "word_loyalty": 0.8} for c in ("label", "random") for w in ("first", "last")
                          for k in (1, 3, 5, 7, 9, 11, 13, 15, 17)])
    auc = {"model": pd.DataFrame({"layer": list(L), "auc": np.linspace(0.5, 0.9, n_layers),
                                  "r": np.linspace(0, 1, n_layers)})}
    gain = np.random.default_rng(0).normal(size=(n_layers, 4))
    beta = np.random.default_rng(0).normal(size=(n_layers, 4, 2))
    return [("plot_flow_curves", plots.plot_flow_curves(flows), "x"),
            ("plot_loyalty_sweep", plots.plot_loyalty_sweep(sweep), "x"),
            ("plot_aucroc_curves", plots.plot_aucroc_curves(auc), "x"),
            ("plot_layer_sweep", plots.plot_layer_sweep({l: 0.1 * l for l in L}, chosen=5), "x"),
            ("plot_loss_curves", plots.plot_loss_curves({"a": [1.0, 0.8, 0.7, 0.65, 0.6, 0.58, 0.57]}), "x"),
            ("plot_head_map", plots.plot_head_map(gain, gain, chosen=[(1, 2)]), "y"),
            ("plot_beta", plots.plot_beta(beta, [0, 1], ["neg", "pos"]), "y")]


def test_layer_axes_have_whole_number_ticks():
    """Layer indices and counts of layers are whole numbers: no tick at 2.5 on any layer axis (heatmaps: one tick
    per cell centre, labelled with the cell's whole number)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for n_layers in (18, 9, 30):
        for name, fig, which in _layer_plots(n_layers):
            fig.canvas.draw()
            for ax in fig.axes:
                if ax.get_label() == "<colorbar>" or not ax.has_data():
                    continue
                axis = ax.xaxis if which == "x" else ax.yaxis
                ticks = axis.get_majorticklocs()
                lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
                shown = [t for t in ticks if lo - 1e-9 <= t <= hi + 1e-9]
                assert shown, (name, n_layers)
                if name in ("plot_head_map", "plot_beta"):  # heatmap cells centred at i + 0.5, labelled i
                    labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
                    assert all(lab.lstrip("-").isdigit() for lab in labels), (name, labels)
                    assert all(abs(t - round(t - 0.5) - 0.5) < 1e-9 for t in shown), (name, shown)
                else:
                    assert all(abs(t - round(t)) < 1e-9 for t in shown), (name, n_layers, shown)
            plt.close(fig)


def test_tables_show_undefined_values_in_words_and_every_column():
    """A notebook's table never shows NaN (a spread of one seed, an AUC of one predicted class) and never cuts
    columns with "...": the site's check fails on both."""
    import numpy as np
    import pandas as pd

    from helpers.study import plots

    html = plots.frame_html(pd.DataFrame({"mean": [1.0], "std": [np.nan]}))
    assert f">{plots.MISSING}<" in html and "NaN" not in html
    assert "..." not in plots.frame_html(pd.DataFrame([list(range(60))]))
    assert "..." not in plots.frame_html(pd.DataFrame({"claim": ["x" * 200]}))


def test_importing_plots_changes_no_pandas_or_matplotlib_setting():
    import subprocess
    import sys

    code = ("import pandas as pd, matplotlib as mpl; before = (pd.get_option('display.max_colwidth'), "
            "pd.get_option('display.max_columns'), dict(mpl.rcParams)); from helpers.study import plots; "
            "assert before == (pd.get_option('display.max_colwidth'), pd.get_option('display.max_columns'), "
            "dict(mpl.rcParams)), 'plots changed a global setting'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_interval_bars_keep_shares_on_0_1_and_show_a_negative_effect(monkeypatch):
    """A share keeps the 0-1 axis; an effect whose interval goes below 0 gets an axis that holds it, and the zero
    line, so no bar or error bar is cut off."""
    import matplotlib.pyplot as plt

    from helpers.study.plots import after
    from helpers.study.stats import Interval

    shown = []
    monkeypatch.setattr(after, "show_figure", lambda fig, save_as=None: shown.append(fig))

    def iv(x, lo, hi):
        return Interval(x, lo, hi, 1, 10)

    after.interval_bars({"g": {"a": iv(0.5, 0.4, 0.6)}}, "t", "share")
    assert shown[-1].axes[0].get_ylim() == (0, 1.05)
    after.interval_bars({"g": {"a": iv(-0.02, -0.08, 0.03), "b": iv(0.01, -0.01, 0.04)}}, "t", "effect")
    lo, hi = shown[-1].axes[0].get_ylim()
    assert lo < -0.08 and 0.04 < hi < 0.2
    assert any(list(line.get_ydata()) == [0, 0] for line in shown[-1].axes[0].lines)  # the zero line
    plt.close("all")
