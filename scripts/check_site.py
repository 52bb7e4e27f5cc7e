"""Load every page of a built site in headless Chromium and check that it reads as it should: ``make site-check``.

    python scripts/check_site.py [site/html]

For every HTML page of the site (Sphinx's index and search pages included):
- no console error (a script that failed, a missing file);
- nothing requested from outside the site (every resource a ``file://`` URL: the
  pages must read offline);
- every circuitsvis view rendered: its mount point ``<div id="circuits-vis-...">``
  has content, and no later cell nests inside it;
- every flow view (``helpers.study.plots.flow_view``, ``<div class="icl-flow">``)
  drawn: its SVG has edges, and its top-k control, set to its smallest and largest
  value by a simulated input event, changes how many edges are drawn;
- every formula typeset by the site's own MathJax (each ``.math`` element holds
  MathJax's output, no raw ``\\(...\\)`` left);
- no run-time residue or hole a reader would see: an image that did not load, a
  figure shown as its file path, a frozen progress bar, a local absolute path, a
  table cell cut with "...", a missing value shown as ``undefined``/``NaN``, a
  table wider than its column without a scroll box of its own.

Uses Debian's ``chromium`` and ``chromium-driver`` packages through selenium
(``apt-get install chromium chromium-driver``; ``.ci/run`` installs them). Exits
non-zero naming each page and problem.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# every resource the page requested from outside the site (its own files are file:// URLs)
_OUTSIDE = "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('file:'));"
# what a page reports once it has settled: views, their content, nesting, math, resources outside the site
_PROBE = r"""
const views = Array.from(document.querySelectorAll('div[id^="circuits-vis-"]'));
const rendered = views.filter(v => v.children.length > 0 && v.getBoundingClientRect().height > 0).length;
const nested = views.filter(v => v.querySelector('.cell, .output, section, p')).length;
const formulas = Array.from(document.querySelectorAll('.math'));
const untypeset = formulas.filter(m => !m.querySelector('mjx-container')).length;
const typeset = document.querySelectorAll('mjx-container').length;
const outside = performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('file:'));
const broken = Array.from(document.images).filter(i => i.complete && i.naturalWidth === 0)
  .map(i => i.getAttribute('src') || '').map(s => s.slice(0, 80));
const text = document.body ? document.body.innerText : '';
const bars = (text.match(/\d+%\|[^\n|]*\|\s*\d+\/\d+/g) || []).slice(0, 3);
const shownAsPath = (text.match(/\([\w./-]+\.(?:png|jpe?g|svg)\)/g) || []).slice(0, 3);
const paths = (text.match(/(?:^|[\s'"(=:])(\/(?:home|root|Users|tmp|work|private|var\/folders|mnt|opt)\/[^\s'")]*)/g) || [])
  .map(s => s.trim()).slice(0, 3);
const cells = Array.from(document.querySelectorAll('td, th')).map(c => c.innerText.trim());
const cut = cells.filter(t => /\.\.\.$/.test(t)).map(t => t.slice(-40)).slice(0, 3);
// a missing value where a value stands: the whole cell, or beside an interval's brackets, a comma or a colon
// ("nan [nan, nan]", "0.5 [None, 0.7]", "None: **inconclusive**"); a sentence that says why a value is missing
// ("the stage was undefined in too many resamples") is honest prose, not a hole
const missing = cells.filter(t => /(^|[\[(,=]\s*)(undefined|NaN|nan|None)(\s*([\]),:%]|\[|$))/.test(t))
  .map(t => t.slice(0, 40)).slice(0, 3);
const scrolls = el => { for (let a = el; a && a !== document.body; a = a.parentElement) {
  const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
const wide = Array.from(document.querySelectorAll('table')).filter(t => {
  const box = t.parentElement; if (!box) return false;
  return t.getBoundingClientRect().width > box.getBoundingClientRect().width + 2 && !scrolls(t); }).length;
const flows = Array.from(document.querySelectorAll('div.icl-flow'));
const flowsDrawn = flows.filter(v => v.querySelectorAll('svg line.icl-flow-edge').length > 0).length;
const flowsNested = flows.filter(v => v.querySelector('.cell, .output, section')).length;
return {ready: document.readyState === 'complete', views: views.length, rendered: rendered, nested: nested,
        flows: flows.length, flowsDrawn: flowsDrawn, flowsNested: flowsNested,
        math: formulas.length, untypeset: untypeset, typeset: typeset, outside: outside, broken: broken,
        bars: bars, shownAsPath: shownAsPath, paths: paths, cut: cut, missing: missing, wide: wide};
"""


# each drawn flow view's top-k control set to its smallest, then its largest value (an input event each, as a reader's
# drag sends), then back: the edges drawn must change
_FLOW_CONTROLS = r"""
return Array.from(document.querySelectorAll('div.icl-flow')).map(v => {
  const edges = () => v.querySelectorAll('svg line.icl-flow-edge').length;
  const input = v.querySelector('input[data-control="topk"]');
  if (!input || !edges()) return {id: v.id, responds: false};
  const set = value => { input.value = value; input.dispatchEvent(new Event('input', {bubbles: true})); return edges(); };
  const before = input.value, fewest = set(input.min), most = set(input.max);
  set(before);
  return {id: v.id, responds: fewest < most, fewest: fewest, most: most};
});
"""


class BrowserMissing(RuntimeError):
    pass


def browser():
    """A headless Chromium driven by selenium, with the browser console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        raise BrowserMissing("headless Chromium is needed: `apt-get install chromium chromium-driver` (Debian/Ubuntu)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--allow-file-access-from-files", "--window-size=1280,900"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def check_page(drv, page: Path, timeout: float = 20.0) -> tuple[list[str], dict]:
    """Problems of one page (empty: none) and what the probe saw."""
    drv.get(page.resolve().as_uri())  # may return while the page is still loading: the probe reads its state too
    deadline = time.monotonic() + timeout
    while True:
        state = drv.execute_script(_PROBE)  # one snapshot: loaded, views and formulas read together
        done = (state["ready"] and state["rendered"] == state["views"] and state["flowsDrawn"] == state["flows"]
                and not state["untypeset"])
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    problems = [] if state["ready"] else [f"the page did not finish loading within {timeout:g} s"]
    if state["rendered"] < state["views"]:
        problems.append(f"{state['views'] - state['rendered']} of {state['views']} circuitsvis views did not render")
    if state["nested"]:
        problems.append(f"{state['nested']} circuitsvis views have later page content nested inside them")
    if state["flowsDrawn"] < state["flows"]:
        problems.append(f"{state['flows'] - state['flowsDrawn']} of {state['flows']} flow views did not render "
                        "(no SVG edges)")
    if state["flowsNested"]:
        problems.append(f"{state['flowsNested']} flow views have later page content nested inside them")
    if state["flowsDrawn"]:
        for view in drv.execute_script(_FLOW_CONTROLS):
            if not view["responds"]:
                problems.append(f"flow view {view['id']}: its top-k control did not change the edges drawn")
        state["outside"] = drv.execute_script(_OUTSIDE)  # what the controls made the page request counts too
    if state["untypeset"]:
        problems.append(f"{state['untypeset']} of {state['math']} formulas were not typeset by MathJax")
    for entry in drv.get_log("browser"):  # read after the flow views' controls moved: their errors count too
        if entry.get("level") == "SEVERE":
            problems.append(f"console error: {entry.get('message', '')[:300]}")
    if state["outside"]:
        problems.append("requested from outside the site: " + ", ".join(sorted(set(state["outside"]))[:5]))
    if state["broken"]:
        problems.append(f"{len(state['broken'])} images did not load: " + ", ".join(state["broken"]))
    if state["shownAsPath"]:
        problems.append("a figure shown as its file path instead of the image: " + ", ".join(state["shownAsPath"]))
    if state["bars"]:
        problems.append("a progress bar frozen in the page: " + ", ".join(state["bars"]))
    if state["paths"]:
        problems.append("a local absolute path in the page: " + ", ".join(state["paths"]))
    if state["cut"]:
        problems.append("table cells cut with '...': " + ", ".join(repr(c) for c in state["cut"]))
    if state["missing"]:
        problems.append("a missing value shown as undefined/NaN/None in a table: "
                        + ", ".join(repr(c) for c in state["missing"]))
    if state["wide"]:
        problems.append(f"{state['wide']} tables wider than their column without a scroll box")
    return problems, state


def pages_of(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


def check_site(site: Path, progress=print, timeout: float = 20.0) -> dict:
    """``{page: problems}`` for every page, plus ``"_views"``/``"_flows"``/``"_math"`` totals (circuitsvis views,
    flow views, formulas); raises BrowserMissing."""
    pages = pages_of(site)
    if not pages:
        raise FileNotFoundError(f"no HTML pages under {site}: run `make site` first")
    drv = browser()
    out, views, flows, math = {}, 0, 0, 0
    try:
        for p in pages:
            problems, state = check_page(drv, p, timeout)
            views += state["rendered"]
            flows += state["flowsDrawn"]
            math += state["typeset"]
            out[str(p.relative_to(site))] = problems
            progress(f"check_site: {p.relative_to(site)}: {'ok' if not problems else '; '.join(problems)}"
                     f" ({state['rendered']}/{state['views']} views, {state['flowsDrawn']}/{state['flows']} flow "
                     f"views, {state['typeset']} formulas)")
    finally:
        drv.quit()
    out["_views"], out["_flows"], out["_math"] = views, flows, math
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", nargs="?", type=Path, default=ROOT / "site" / "html")
    a = ap.parse_args(argv)
    try:
        res = check_site(a.site)
    except BrowserMissing as e:
        if os.environ.get("REQUIRE_BROWSER") == "1":  # make test and .ci/run: the check is not optional there
            print(f"check_site: {e}", file=sys.stderr)
            return 2
        print(f"check_site: skipped, no browser here ({e}). The pages are built in {a.site}; to check them as a "
              "reader's browser shows them, install those packages and run `make site-check`.")
        return 0
    except FileNotFoundError as e:
        print(f"check_site: {e}", file=sys.stderr)
        return 2
    bad = {p: v for p, v in res.items() if not p.startswith("_") and v}
    n = len([p for p in res if not p.startswith("_")])
    print(f"check_site: {n - len(bad)}/{n} pages ok; {res['_views']} circuitsvis views rendered, "
          f"{res['_flows']} flow views drawn, {res['_math']} formulas typeset")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
