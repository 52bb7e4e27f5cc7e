"""The rendered site (`make site`): staging, links, and a browser check of a site built from a small executed sample.

The browser tests drive Debian's headless ``chromium`` through selenium; without it they skip, unless
``REQUIRE_BROWSER=1`` (``.ci/run`` sets it after installing chromium), where a missing browser fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import build_site  # noqa: E402
import check_site  # noqa: E402


def _need_browser():
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail("REQUIRE_BROWSER=1 but chromium/chromedriver are missing: apt-get install chromium chromium-driver")
    pytest.skip("no headless Chromium (apt-get install chromium chromium-driver)")


# ------------------------------------------------------------------------------------------------ pages and links

def _links(md: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", md) if not re.match(r"^(https?:|mailto:|#)", t)]


def test_front_page_is_short_and_every_link_of_readme_and_docs_resolves():
    """The README is a front page of at most 200 lines, and every relative link in it and in docs/*.md names a file of
    the repository (and, with an anchor, a heading of that file)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for page in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        for target in _links(page.read_text()):
            path, _, anchor = target.partition("#")
            f = (page.parent / path).resolve() if path else page
            assert f.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
            if anchor and f.suffix == ".md":
                slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
                         for h in re.findall(r"^#+ (.+)$", f.read_text(), flags=re.M)}
                assert anchor in slugs, f"{page.relative_to(ROOT)} links to {target}: no such heading"
    for p in build_site.DOC_PAGES:
        assert f"docs/{p}.md" in readme, f"the front page does not link docs/{p}.md"


def test_links_are_rewritten_to_stay_inside_the_site():
    pages = {"README.md", "docs/start.md", "docs/your-own.md"}
    md = ("[a](docs/start.md#two-commands) [b](your-own.md) ![f](docs/figures/x.png) [c](../data/README.md) "
          "[d](https://arxiv.org/abs/2305.14160) [e](#here) [`01`](notebooks/01_saliency_flow.py) [g](notebooks/x.py)")
    assert build_site.rewrite_links(md, "", pages, ("01_saliency_flow",)) == (
        "[a](start.md#two-commands) b (`your-own.md`) ![f](figures/x.png) c (`data/README.md`) "
        "[d](https://arxiv.org/abs/2305.14160) [e](#here) [`01`](notebooks/01_saliency_flow.ipynb) g (`notebooks/x.py`)")
    assert build_site.rewrite_links("[b](your-own.md#settings) [r](../README.md#x) ![f](figures/y.png)", "docs",
                                    pages) == "[b](your-own.md#settings) [r](index.md#x) ![f](figures/y.png)"
    # a notebook's markdown: staged in notebooks/, so pages at the root are one level up
    nb_md = ("[x](../exercises/01_saliency_flow.ipynb) [n](02_shallow_isolation.ipynb#sec) [r](../README.md) "
             "[s](../docs/start.md#two-commands) ![f](../docs/figures/a.png) [h](../helpers/core/prefix.py)")
    assert build_site.rewrite_links(nb_md, "notebooks", pages, ("01_saliency_flow", "02_shallow_isolation")) == (
        "x (`exercises/01_saliency_flow.ipynb`) [n](02_shallow_isolation.ipynb#sec) [r](../index.md) "
        "[s](../start.md#two-commands) ![f](../figures/a.png) h (`helpers/core/prefix.py`)")


def _nb(outputs: list[dict], metadata: dict | None = None) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {}, "source": "x",
                       "outputs": outputs}],
            "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5}


def test_prepare_notebook_closes_views_drops_widgets_and_refuses_holes(tmp_path):
    """Views get closed mount points, widget state goes (it would load the widget manager from a CDN), and a
    notebook with a failed cell or a CDN-loaded view is refused with what to do."""
    view = '<div id="circuits-vis-1a" style="margin: 15px 0;"/>\n<script type="module">var CircuitsVis=1;</script>'
    src = tmp_path / "a.ipynb"
    src.write_text(json.dumps(_nb([{"output_type": "display_data", "metadata": {}, "data": {
        "text/html": view, "text/plain": "v"}}, {"output_type": "display_data", "metadata": {}, "data": {
            build_site.WIDGET_MIME: {"model_id": "m"}, "text/plain": "100%|##| 3/3"}}], {"widgets": {"state": {}}})))
    assert build_site.prepare_notebook(src, tmp_path / "out" / "a.ipynb") == 1
    nb = json.loads((tmp_path / "out" / "a.ipynb").read_text())
    outs = nb["cells"][0]["outputs"]
    assert '<div id="circuits-vis-1a" style="margin: 15px 0;"></div>' in outs[0]["data"]["text/html"]
    assert len(outs) == 1  # the progress bar (a widget, its text form a frozen bar on a static page) is gone
    assert "widgets" not in nb["metadata"]
    failed = tmp_path / "f.ipynb"
    failed.write_text(json.dumps(_nb([{"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": []}])))
    with pytest.raises(build_site.SiteError, match="cell 0 failed when it ran.*rerun the notebook"):
        build_site.prepare_notebook(failed, tmp_path / "out" / "f.ipynb")
    cdn = tmp_path / "c.ipynb"
    cdn.write_text(json.dumps(_nb([{"output_type": "display_data", "metadata": {}, "data": {
        "text/html": '<div id="circuits-vis-2b"/><script type="module">import {render} from "https://unpkg.com/x";'
                     '</script>'}}])))
    with pytest.raises(build_site.SiteError, match="imports its code from a CDN"):
        build_site.prepare_notebook(cdn, tmp_path / "out" / "c.ipynb")


def test_prepare_notebook_drops_run_residue_and_says_which_run(tmp_path):
    """stderr (warnings naming the machine's files, text progress bars) goes; a bar printed to stdout goes; this
    checkout's paths become relative; the page starts with the run it shows."""
    src = tmp_path / "a.ipynb"
    warn = f"{build_site.ROOT}/helpers/core/prompts.py:412: LabelWordWarning: split\n"
    src.write_text(json.dumps(_nb([]) | {"cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# T"},
                                                   {**_nb([])["cells"][0], "outputs": [
        {"output_type": "stream", "name": "stderr", "text": warn},
        {"output_type": "stream", "name": "stdout", "text": " 0%|          | 0/4 [00:00<?, ?it/s]\nkept line\n"},
        {"output_type": "execute_result", "execution_count": 1, "metadata": {},
         "data": {"text/plain": f"saved {build_site.ROOT}/results/x.png"}}]}]}))
    run = {"key": "smoke", "model": "gemma-3-270m", "commit": "abc1234def", "finished": "2026-11-26 16:00 UTC"}
    build_site.prepare_notebook(src, tmp_path / "out.ipynb", run=run)
    nb = json.loads((tmp_path / "out.ipynb").read_text())
    assert [c["cell_type"] for c in nb["cells"]] == ["markdown", "markdown", "code"]  # title, run line, code
    assert "<code>smoke</code> run of <code>gemma-3-270m</code> at commit <code>abc1234</code>" in nb["cells"][1]["source"]
    outs = nb["cells"][2]["outputs"]
    assert [o.get("name") for o in outs] == ["stdout", None]
    assert "0/4" not in outs[0]["text"] and "kept line" in outs[0]["text"]
    assert outs[1]["data"]["text/plain"] == "saved results/x.png"
    assert str(build_site.ROOT) not in json.dumps(nb)


def test_summary_page_shows_its_figures(tmp_path):
    """The RESULTS page's figures are copied into the site and linked as images, not shown as their paths."""
    results = tmp_path / "results"
    (results / "m" / "smoke" / "figures").mkdir(parents=True)
    (results / "m" / "smoke" / "figures" / "00_x.png").write_bytes(b"png")
    md, staged = build_site.stage_run_figures("![00_x](m/smoke/figures/00_x.png)\n", results, tmp_path / "site")
    assert (tmp_path / "site" / "results" / "m" / "smoke" / "figures" / "00_x.png").exists()
    assert build_site.rewrite_links(md, "results", set(), staged=staged) == "![00_x](results/m/smoke/figures/00_x.png)\n"


def test_no_run_to_show_says_what_to_do(tmp_path):
    with pytest.raises(build_site.SiteError, match="run `make run` first"):
        build_site.find_notebooks(tmp_path, "default", ["gemma-3-270m"])
    # `make site` (default profile) after `make run PROFILE=smoke`: it names the profile to pass
    (tmp_path / "gemma-3-270m" / "smoke" / "notebooks").mkdir(parents=True)
    (tmp_path / "gemma-3-270m" / "smoke" / "notebooks" / "00_icl_setting.ipynb").write_text("{}")
    with pytest.raises(build_site.SiteError, match="finished run is there at run key smoke: `make site PROFILE=smoke`"):
        build_site.find_notebooks(tmp_path, "default", ["gemma-3-270m"])


# ------------------------------------------------------------------------------------------------ in the browser

_SAMPLE = [
    ("markdown", "# A sample notebook\n\nThe saliency of one flow, $I_l = \\left|\\sum_h A_{h,l} \\odot "
                 "\\frac{\\partial L}{\\partial A_{h,l}}\\right|$, as notebook 01 defines it."),
    ("code", "from helpers.exercises.tiny import make_tiny_model\nfrom helpers.core.prompts import make_icl_set\n"
             "from helpers.study import plots\n\nmodel = make_tiny_model('rotary', seed=0)\n"
             "prompt = make_icl_set(model, 'sst2', seed=42, n_test=1).prompts[0]\n"
             "plots.attention_view(model, prompt, layer=0)"),
    ("code", "from helpers.core.tasks import label_token_ids\nfrom helpers.experiments.saliency_graph import flow_graph\n\n"
             "graph = flow_graph(model, prompt, label_token_ids(model.tokenizer, 'sst2'))\n"
             "_ = plots.show_flow_view(model, graph, '00_sample_flow', top_k=4, model_name='tiny')"),
    ("markdown", "## After the view\n\nThis heading must not nest inside the view above. The [exercise version]"
                 "(../exercises/00_sample.ipynb) is not in the site; [the front page](../README.md) is."),
    ("code", "from tqdm.auto import tqdm\nfor _ in tqdm(range(3)):\n    pass"),
    ("code", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(3, 2))\nax.plot([0, 1], [0, 1])\n"
             "plt.show()"),
    ("code", "import pandas as pd\npd.DataFrame({'task': ['sst2'], 'accuracy': [0.5]})"),
]


@pytest.fixture(scope="module")
def sample_site(tmp_path_factory):
    """A site built from a small executed sample: one notebook with a circuitsvis view and a flow view of a tiny
    model, math, a progress bar, a figure and a table, executed here, as `make run` leaves it under results/."""
    import nbformat
    from nbclient import NotebookClient

    _need_browser()
    base = tmp_path_factory.mktemp("site")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) if k == "markdown" else nbformat.v4.new_code_cell(s)
                for k, s in _SAMPLE]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    saved = os.environ.get("ICL_RESULTS_DIR")
    os.environ["ICL_RESULTS_DIR"] = str(base / "kernel-results")  # where the kernel saves the flow view's figure
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        if saved is None:
            os.environ.pop("ICL_RESULTS_DIR")
        else:
            os.environ["ICL_RESULTS_DIR"] = saved
    assert list((base / "kernel-results").rglob("figures/00_sample_flow.png"))
    nb_dir = base / "results" / "tiny" / "smoke" / "notebooks"
    nb_dir.mkdir(parents=True)
    nbformat.write(nb, nb_dir / "00_sample.ipynb")
    fig = base / "results" / "tiny" / "smoke" / "figures" / "00_line.png"
    fig.parent.mkdir(parents=True)
    import matplotlib.pyplot as plt

    f, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1])
    f.savefig(fig)
    plt.close(f)
    # the summary as `make run PROFILE=smoke` writes it, with notebook 11's smoke row, whose missing value is said in
    # words ("not comparable"), beside a claim with a value
    from helpers.protocols.query_stages import query_stage_claims
    from helpers.study.claims import claim
    from helpers.study.profiles import OWN_TASK_EXAMPLE, PROFILES
    from helpers.study.report import build_report
    from helpers.study.stats import Interval

    claims = [claim("02.label_first_hurts_most", Interval(62.0, 55.8, 68.1, 1, 16), "replicates", "above 0", unit="%")]
    claims += query_stage_claims((None, {}), {}, 4, 2)
    metrics = base / "results" / "tiny" / "smoke" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "11_after_the_anchors.json").write_text(json.dumps({"claims": [c.to_json(3) for c in claims]}))
    md = build_report(base / "results", "smoke", ["tiny"], tasks=PROFILES["smoke"].tasks, own_task=OWN_TASK_EXAMPLE)
    assert md.name == "RESULTS-smoke.md" and "not comparable" in md.read_text()
    md.write_text(md.read_text() + "\n![00_line](tiny/smoke/figures/00_line.png)\n")
    info = build_site.build(base / "results", "smoke", ["tiny"], base / "site")
    return info, Path(info["out"])


def test_sample_site_reads_offline_in_the_browser(sample_site):
    """Every page of the sample site loads in headless Chromium with no console error and no request outside the
    site; the circuitsvis view renders, the heading after it is not nested inside it, the flow view draws its edges
    and its top-k control changes them, and MathJax (the site's own copy) typesets the formula."""
    info, html = sample_site
    assert info["views"] == {"00_sample": 1} and info["flow_views"] == {"00_sample": 1} and info["summary"]
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    res = check_site.check_site(html, progress=lambda s: None)
    pages = {p: v for p, v in res.items() if not p.startswith("_")}
    assert {"index.html", "notebooks/00_sample.html", "summary.html", "results.html"} <= set(pages)
    assert all(v == [] for v in pages.values()), {p: v for p, v in pages.items() if v}
    assert res["_views"] == 1 and res["_flows"] == 1 and res["_math"] >= 1
    page = (html / "notebooks" / "00_sample.html").read_text()
    # the page shows the view once: its output's static figure (image/png, for viewers without HTML) is not added
    assert page.count('<div class="icl-flow"') == 1 and page.count("<img") == 1  # the one matplotlib figure
    summary = (html / "summary.html").read_text()
    assert '<img alt="00_line" src="_images/00_line.png"' in summary or "00_line.png" in summary
    assert "This summary is of" in summary and "The notebook pages of this site show" in (html / "index.html").read_text()


def test_check_site_reports_what_a_reader_would_miss(tmp_path):
    """The check is not blind: a script error, a view that never renders, a view left open around later content,
    untypeset math (also one formula of two) and a resource from the web are each reported on their page."""
    _need_browser()
    pages = {
        "error.html": "<p>x</p><script>throw new Error('boom')</script>",
        "view.html": '<div id="circuits-vis-9"></div><p>no script renders it</p>',
        "nested.html": '<div id="circuits-vis-8"><p>a later cell</p></div>',
        "math.html": '<span class="math">\\(x^2\\)</span>',
        "halfmath.html": '<span class="math"><mjx-container>y</mjx-container></span><span class="math">\\(z\\)</span>',
        "web.html": '<img src="https://example.invalid/x.png">',
        "fine.html": "<p>fine</p>",
        # what a reader of the first site saw: each planted alone
        "noimage.html": '<img src="missing.png" alt="a figure">',
        "aspath.html": "<p>00_vanilla_accuracy (results/gemma-3-270m/smoke/figures/00_vanilla_accuracy.png)</p>",
        "bar.html": "<pre> 0%|          | 0/4 [00:00&lt;?, ?it/s]</pre>",
        "cut.html": "<table><tr><td>(95% CI; 1 seed(s), 16 in...</td></tr></table>",
        "undefined.html": "<table><tr><th>ours</th></tr><tr><td>undefined</td></tr></table>",
        "nan.html": "<table><tr><td>NaN</td></tr></table>",
        "naninterval.html": "<table><tr><td>0.52 [nan, 0.61]: <b>inconclusive</b></td></tr></table>",
        # notebook 11's smoke row: a sentence that says why there is no value is not a missing value
        "why.html": "<table><tr><td>no task had inputs of every class in two folds or more (a probe), or the "
                    "half-rise stage was undefined in too many resamples: <b>not comparable</b></td></tr></table>",
        "wide.html": '<div style="width:300px"><table><tr><td style="white-space:nowrap">'
                     + "a wide cell " * 60 + "</td></tr></table></div>",
        "scrolls.html": '<div style="width:300px;overflow-x:auto"><table><tr><td style="white-space:nowrap">'
                        + "a wide cell " * 60 + "</td></tr></table></div>",
        "path.html": "<pre>/work/main/helpers/core/prompts.py:412: LabelWordWarning</pre>",
        # a flow view whose script never ran (its mount point keeps the line for readers without JavaScript), and one
        # whose edges are drawn but whose top-k control does nothing
        "flowblank.html": '<div class="icl-flow" id="icl-flow-1"><div class="icl-flow-mount"><p>drawn by '
                          'JavaScript</p></div></div>',
        "flowstuck.html": '<div class="icl-flow" id="icl-flow-2"><input type="range" min="1" max="9" value="3" '
                          'data-control="topk"><svg width="20" height="20"><line class="icl-flow-edge" x1="0" y1="0" '
                          'x2="9" y2="9" stroke="black"></line></svg></div>',
    }
    for name, body in pages.items():
        (tmp_path / name).write_text(f"<!doctype html><html><body>{body}</body></html>")
    res = check_site.check_site(tmp_path, progress=lambda s: None, timeout=3)
    assert any("console error" in p and "boom" in p for p in res["error.html"])
    assert any("did not render" in p for p in res["view.html"])
    assert any("nested inside them" in p for p in res["nested.html"])
    assert any("not typeset" in p for p in res["math.html"])
    assert any("1 of 2 formulas were not typeset" in p for p in res["halfmath.html"])  # one typeset is not enough
    assert any("outside the site" in p and "example.invalid" in p for p in res["web.html"])
    assert res["fine.html"] == []
    assert any("images did not load" in p and "missing.png" in p for p in res["noimage.html"])
    assert any("shown as its file path" in p for p in res["aspath.html"])
    assert any("progress bar" in p for p in res["bar.html"])
    assert any("cut with '...'" in p for p in res["cut.html"])
    assert any("undefined/NaN" in p for p in res["undefined.html"]) and any("undefined/NaN" in p for p in res["nan.html"])
    assert any("undefined/NaN" in p for p in res["naninterval.html"]) and res["why.html"] == []
    assert any("wider than their column" in p for p in res["wide.html"]) and res["scrolls.html"] == []
    assert any("local absolute path" in p and "/work/main/helpers" in p for p in res["path.html"])
    assert any("1 of 1 flow views did not render" in p for p in res["flowblank.html"])
    assert res["flowstuck.html"] == ["flow view icl-flow-2: its top-k control did not change the edges drawn"]


def test_the_run_line_sits_right_under_the_title(tmp_path):
    src = tmp_path / "a.ipynb"
    first = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# 01 · Title\n\n**Objectives.** Read."}
    src.write_text(json.dumps(_nb([]) | {"cells": [first, _nb([])["cells"][0]]}))
    build_site.prepare_notebook(src, tmp_path / "out.ipynb", run={"key": "smoke", "model": "m", "commit": "abc1234"})
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    assert cells[0]["source"] == "# 01 · Title" and "site-run" in cells[1]["source"]
    assert cells[2]["source"] == "**Objectives.** Read." and cells[2]["id"] != cells[0]["id"]


def test_make_site_without_a_browser_builds_and_says_the_check_was_skipped(tmp_path, monkeypatch, capsys):
    """Where no Chromium is found, the check says so and how to run it, and exits 0 (a reader who only wants the
    pages gets them); with REQUIRE_BROWSER=1 (make test, .ci/run) the same case fails."""
    monkeypatch.setattr(check_site.shutil, "which", lambda name: None)
    (tmp_path / "index.html").write_text("<html><body>x</body></html>")
    monkeypatch.delenv("REQUIRE_BROWSER", raising=False)
    assert check_site.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "check_site: skipped, no browser here" in out and "apt-get install chromium chromium-driver" in out
    assert "make site-check" in out
    monkeypatch.setenv("REQUIRE_BROWSER", "1")
    assert check_site.main([str(tmp_path)]) == 2
    assert "headless Chromium is needed" in capsys.readouterr().err
