"""The flow view (paper A's Fig. 1 for one prompt): its data is the saliency helper's output, its HTML carries that
data and fetches nothing, its controls select what they say, in Python and in the browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.core.checks import ArgumentError
from helpers.experiments.saliency import FLOWS, flow_masks, flow_scores, saliency_matrices
from helpers.experiments.saliency_graph import flow_edges, flow_graph
from helpers.study import plots

ROOT = Path(__file__).resolve().parent.parent


def _pairs(I: torch.Tensor) -> dict:
    """Every (layer, i, j) with j < i and I > 0, with its weight (as float64)."""
    out = {}
    for layer in range(I.shape[0]):
        for i, j in torch.nonzero(torch.tril(I[layer], diagonal=-1) > 0).tolist():
            out[(layer, i, j)] = float(I[layer, i, j].double())
    return out


def test_graph_is_the_saliency_helpers_output(tiny_sst2_set):
    """Every edge of the full graph is one pair j < i of saliency_matrices with its weight, classed as flow_masks
    classes it; summed per flow and divided by the pairs of each flow they give flow_scores back."""
    model, prompts, lids = tiny_sst2_set
    for p in prompts[:2]:
        I = saliency_matrices(model, [p], lids)[0]  # the prompt alone, as flow_graph computes it
        g = flow_graph(model, p, lids, max_edges=None)
        e = g.edges
        assert g.n_layers == model.cfg.n_layers and g.prompt is p
        got = {(int(r.layer), int(r.i), int(r.j)): r.weight for r in e.itertuples()}
        assert got == _pairs(I)  # the same pairs, the same weights (exactly)
        masks = flow_masks(p)
        assert all(masks[FLOWS.index(r.flow), r.i, r.j] for r in e.itertuples())
        means = np.zeros((g.n_layers, 3))
        for (layer, flow), w in e.groupby(["layer", "flow"])["weight"].sum().items():
            means[layer, FLOWS.index(flow)] = w / int(masks[FLOWS.index(flow)].sum())
        np.testing.assert_allclose(means, flow_scores(I[None], [p])[0].double().numpy(), rtol=1e-6, atol=1e-12)
        lower = torch.tril(I, diagonal=-1).double().sum((-1, -2)).numpy()
        np.testing.assert_allclose(g.layer_total, lower, rtol=1e-9)
        np.testing.assert_allclose(e.groupby("layer")["share"].sum(), 1.0, rtol=1e-9)
        # the graph of matrices at hand is the same graph
        again = flow_graph(model, p, lids, max_edges=None, sal=I)
        assert again.edges.equals(e) and again.layer_total == g.layer_total


def test_kept_edges_are_each_layers_largest(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    p = prompts[0]
    I = saliency_matrices(model, [p], lids)[0]
    g = flow_graph(model, p, lids, max_edges=7, sal=I)
    full = flow_graph(model, p, lids, max_edges=None, sal=I).edges
    for layer in range(g.n_layers):
        kept = g.edges[g.edges.layer == layer]
        assert list(kept["rank"]) == list(range(len(kept))) and len(kept) == min(7, (full.layer == layer).sum())
        largest = np.sort(torch.tril(I[layer], -1).double().flatten().numpy())[::-1][:len(kept)]
        np.testing.assert_array_equal(kept["weight"].to_numpy(), largest)
        # a kept edge keeps the share it has in the full graph (the share is of the whole layer)
        merged = kept.merge(full, on=["layer", "i", "j"], suffixes=("", "_full"))
        np.testing.assert_array_equal(merged["share"], merged["share_full"])


def test_select_keeps_what_the_controls_say(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    g = flow_graph(model, prompts[0], lids, max_edges=20)
    for k in (1, 4, 20):
        s = g.select(top_k=k)
        assert (s["rank"] < k).all()
        assert s.groupby("layer").size().to_dict() == g.edges.groupby("layer").size().clip(upper=k).to_dict()
    share = float(g.edges["share"].median())
    s = g.select(min_share=share)
    assert (s["share"] >= share).all() and len(s) == (g.edges["share"] >= share).sum()
    last = g.n_layers - 1
    assert set(g.select(layers=(1, last))["layer"]) == set(range(1, last + 1)) & set(g.edges["layer"])
    assert g.select().equals(g.edges)
    for bad, match in [({"top_k": 0}, "at least 1"), ({"top_k": 21}, "max_edges=21"), ({"min_share": 1.5}, "between 0"),
                       ({"layers": (2, 1)}, "first <= last"), ({"layers": (0, g.n_layers)}, "has 3 layers"),
                       ({"layers": "all"}, "two layer indices")]:
        with pytest.raises(ArgumentError, match=match):
            g.select(**bad)


def test_bad_input_says_what_to_do(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    p = prompts[0]
    with pytest.raises(ArgumentError, match=rf"\[layer, {len(p)}, {len(p)}\]"):
        flow_edges(torch.zeros(3, 4, 4), p)
    with pytest.raises(ArgumentError, match="max_edges"):
        flow_edges(torch.zeros(3, len(p), len(p)), p, max_edges=0)
    with pytest.raises(TypeError, match="one Prompt"):
        flow_graph(model, prompts, lids)
    with pytest.raises(TypeError, match="must be a FlowGraph"):
        plots.flow_view(model, {"edges": []})


_URL = re.compile(r"https?://[^\s\"'<>)]+")


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" class="icl-flow-data">(.*?)</script>', html, flags=re.S)
    assert m, "the view inlines its data as JSON"
    return json.loads(m.group(1))


def test_view_inlines_its_data_has_unique_ids_and_fetches_nothing(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    g = flow_graph(model, prompts[0], lids)
    a, b = plots.flow_view(model, g), plots.flow_view(model, g)
    ids = [re.findall(r'\bid="([^"]+)"', v.html) for v in (a, b)]
    assert len(ids[0]) == 1 and len(ids[1]) == 1 and ids[0] != ids[1]  # one id per view, a fresh one each time
    assert ids[0][0] in a.html.split("<script>", 1)[1]  # the script draws into its own view
    data = _data(a.html)
    assert data == json.loads(json.dumps(a.data))
    assert data["edges"] == [[int(r.layer), int(r.i), int(r.j), float(r.weight), float(r.share), int(r.rank),
                              FLOWS.index(r.flow)] for r in g.edges.itertuples()]
    assert data["label_pos"] == prompts[0].label_pos and data["q"] == prompts[0].q
    assert len(data["tokens"]) == len(prompts[0])
    # nothing is fetched: the only URL is the SVG namespace's name (an identifier, never requested)
    assert set(_URL.findall(a.html)) == {"http://www.w3.org/2000/svg"}
    for fetching in (r"\bsrc\s*=", r"\bhref\s*=", r"\bimport\b", r"fetch\(", "XMLHttpRequest", r"url\("):
        assert not re.search(fetching, a.html), fetching


def test_tokens_cannot_break_out_of_the_script(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    view = plots.flow_view(model, flow_graph(model, prompts[0], lids), title="</script><b>&amp;")
    assert view.html.count("</script>") == 2  # the data's and the drawing script's own
    assert _data(view.html)["title"] == "</script><b>&amp;"


def test_show_flow_view_saves_the_static_figure(tiny_sst2_set, tmp_path, monkeypatch):
    """show_flow_view shows the view with the figure beside it (image/png) and saves it in the results folder."""
    model, prompts, lids = tiny_sst2_set
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    shown = []
    monkeypatch.setattr(plots.flow, "display", lambda obj, raw=False: shown.append(obj))
    view = plots.show_flow_view(model, flow_graph(model, prompts[0], lids), "01_flow_test", top_k=5,
                                model_name="tiny")
    assert len(shown) == 1 and shown[0]["text/html"] == view.html and shown[0]["image/png"]
    assert "01_flow_test.png" in view.html  # the line for readers without JavaScript names the figure
    assert list(tmp_path.rglob("figures/01_flow_test.png"))
    fig = plots.plot_flow_graph(model, flow_graph(model, prompts[0], lids), top_k=5)
    drawn = sum(len(c.get_segments()) for c in fig.axes[0].collections)
    assert drawn == len(flow_graph(model, prompts[0], lids).select(top_k=5))


# ------------------------------------------------------------------------------------------------ in the browser

def _browser():
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail("REQUIRE_BROWSER=1 but chromium/chromedriver are missing: apt-get install chromium chromium-driver")
        pytest.skip("no headless Chromium (apt-get install chromium chromium-driver)")
    sys.path.insert(0, str(ROOT / "scripts"))
    import check_site

    return check_site.browser()


_SET = """
const input = document.querySelector('#' + arguments[0] + ' input[data-control="' + arguments[1] + '"]');
input.value = arguments[2];
input.dispatchEvent(new Event('input', {bubbles: true}));
"""
_EDGES = """
return Array.from(document.querySelectorAll('#' + arguments[0] + ' line.icl-flow-edge'))
  .map(l => [+l.dataset.l, +l.dataset.i, +l.dataset.j, l.classList.contains('icl-flow-focus')]);
"""


def test_the_view_draws_and_its_controls_select_in_the_browser(tiny_model, tmp_path):
    """Two views on one page: each draws the edges FlowGraph.select gives for its controls' values, the controls of
    one leave the other alone, hovering a token marks exactly its flows, and nothing is requested or logged."""
    from helpers.core.prompts import make_icl_set

    ps = make_icl_set(tiny_model, "sst2", seed=7, n_test=2)
    graphs = [flow_graph(tiny_model, p, ps.label_ids, max_edges=30) for p in ps.prompts]
    views = [plots.flow_view(tiny_model, g, top_k=6) for g in graphs]
    page = tmp_path / "views.html"
    page.write_text("<!doctype html><html><body>" + "".join(v.html for v in views) + "</body></html>")
    uids = [re.search(r'id="([^"]+)"', v.html).group(1) for v in views]

    def key(df):
        return sorted(map(tuple, df[["layer", "i", "j"]].to_numpy().tolist()))

    drv = _browser()
    try:
        drv.get(page.resolve().as_uri())
        for uid, g in zip(uids, graphs):
            assert sorted((e[0], e[1], e[2]) for e in drv.execute_script(_EDGES, uid)) == key(g.select(top_k=6))
        share = float(graphs[0].edges["share"].quantile(0.6)) * 100
        steps = [("topk", 3, {"top_k": 3}), ("share", round(share, 1), {"top_k": 3, "min_share": round(share, 1) / 100}),
                 ("from", 1, {"top_k": 3, "min_share": round(share, 1) / 100, "layers": (1, 2)}),
                 ("share", 0, {"top_k": 3, "layers": (1, 2)}), ("to", 1, {"top_k": 3, "layers": (1, 1)})]
        for control, value, selection in steps:
            drv.execute_script(_SET, uids[0], control, value)
            drawn = sorted((e[0], e[1], e[2]) for e in drv.execute_script(_EDGES, uids[0]))
            assert drawn == key(graphs[0].select(**selection)), (control, value)
        assert sorted((e[0], e[1], e[2]) for e in drv.execute_script(_EDGES, uids[1])) == key(graphs[1].select(top_k=6))
        # hover q in the second view: exactly the flows into q and out of it are marked
        q = ps.prompts[1].q
        drv.execute_script("document.querySelector('#' + arguments[0] + ' g.icl-flow-token[data-t=\"' + arguments[1]"
                           " + '\"]').dispatchEvent(new MouseEvent('mouseenter'))", uids[1], q)
        edges = drv.execute_script(_EDGES, uids[1])
        assert any(e[3] for e in edges)
        assert all(e[3] == (e[1] == q or e[2] == q) for e in edges)
        status = drv.execute_script(f"return document.querySelector('#{uids[1]} [data-role=status]').textContent")
        assert f"position {q} " in status and "flows into it" in status
        assert [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"] == []
        outside = drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"
                                     ".filter(n => !n.startsWith('file:'))")
        assert outside == []
    finally:
        drv.quit()
