"""Build the static site of a finished run: ``make site`` (after ``make run``).

    python scripts/build_site.py [--results results] [--profile default] [--models M ...] [--out site]

One page per notebook, rendered from the executed notebooks of the run
(``results/<model>/<run key>/notebooks/``: figures, tables and circuitsvis views as
they were when the notebook ran; nothing is run again), the run's summary
(``results/RESULTS-<run key>.md``), the README as the front page and the pages of
``docs/``. Notebooks 00-08 come from the first of ``--models`` that has them (the
Makefile passes its MODELS), notebook 09 from the positive control's folder.

The sources are staged in ``<out>/_src`` (docs/conf.py, the pages with links
between them rewritten to stay inside the site, the notebooks with every
circuitsvis mount point closed) and built by Sphinx with myst-nb
(``nb_execution_mode = "off"``), offline: MathJax is copied into the site.
``scripts/check_site.py`` (``make site-check``) then loads every page in headless
Chromium.

A problem that would give a site with holes (no run, a notebook that failed, a
circuitsvis view that imports its code from a CDN) stops the build with what to do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOC_PAGES = ("start", "results", "your-own", "gpu", "transformerlens4", "performance", "contributing")
CONTROL = "control"
SUMMARY_PAGE = "summary"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class SiteError(RuntimeError):
    """A site that cannot be built as asked; the message says what to do."""


def model_folders(models: list[str]) -> list[str]:
    """The results folder names of ``models`` (:func:`helpers.study.results.model_slug`)."""
    from helpers.study.results import model_slug

    return [model_slug(m) for m in models]


def find_notebooks(results: Path, key: str, folders: list[str]) -> tuple[str, dict[str, Path]]:
    """``(model folder, {notebook stem: executed .ipynb})``: notebooks 00-08 of the first folder that has any,
    and notebook 09 from the control's folder when it is there."""
    for folder in folders:
        nb_dir = results / folder / key / "notebooks"
        found = {p.stem: p for p in sorted(nb_dir.glob("*.ipynb"))}
        if found:
            break
    else:
        tried = ", ".join(str(results / f / key / "notebooks") for f in folders)
        others = sorted({p.parent.parent.name for f in folders for p in results.glob(f"{f}/*/notebooks/*.ipynb")})
        hint = (f"; a finished run is there at run key {', '.join(others)}: `make site PROFILE={others[0].split('-')[0]}`"
                f" builds {'it' if len(others) == 1 else 'the first'}" if others else "")
        raise SiteError(f"no executed notebooks in {tried}{hint}; or run `make run` first (with the same PROFILE and "
                        f"MODELS), or pass --results/--profile/--models of a finished run")
    control = results / CONTROL / key / "notebooks"
    for p in sorted(control.glob("*.ipynb")):
        found.setdefault(p.stem, p)
    return folder, dict(sorted(found.items()))


def _html_text(data) -> str:
    return "".join(data) if isinstance(data, list) else data


_BAR = re.compile(r"\d+%\|[^\n|]*\|\s*\d+/\d+")  # a tqdm bar's text form


RUN_ROOTS: list[str] = []  # checkouts the shown run was made in (build() adds the results folder's parent)


def local_paths(text: str) -> str:
    """``text`` with this checkout's and the run's checkout's absolute paths made relative to them and the user's
    home shown as ``~``: a page of the site never shows the machine it was built or run on."""
    for root in dict.fromkeys([str(ROOT), *RUN_ROOTS]):
        text = text.replace(root + os.sep, "").replace(root, ".")
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~/") if home not in ("", "/") else text


def run_cell(run: dict) -> dict:
    """The markdown cell a notebook page starts with: which run it shows (:func:`run_line`)."""
    return {"cell_type": "markdown", "id": "site-run", "metadata": {},
            "source": f'<div class="site-run">{run_line(run)}</div>'}


def run_line(run: dict) -> str:
    """``"This page shows the `smoke` run of gemma-3-270m at commit abc1234, finished ..."``."""
    commit = str(run.get("commit") or "unknown")[:7] + ("-dirty" if str(run.get("commit", "")).endswith("-dirty") else "")
    return (f"This page shows the <code>{run.get('key', '?')}</code> run of <code>{run.get('model', '?')}</code> at "
            f"commit <code>{commit}</code>, finished {run.get('finished', 'at an unknown time')}, executed by "
            f"<code>make run</code>.")


def prepare_notebook(src: Path, dst: Path, pages: set[str] = frozenset(), notebooks: tuple[str, ...] = (),
                     run: dict | None = None) -> int:
    """Copy an executed notebook for the site: every circuitsvis mount point closed
    (:func:`helpers.study.plots.close_view_divs`); run-time residue dropped (widget state, progress bars, whether
    widgets or their text, and every stderr stream: warnings and bars, which name files of the machine it ran on);
    this checkout's paths made relative (:func:`local_paths`); the links of its markdown cells rewritten for the
    site (:func:`rewrite_links`, with the site's ``pages`` and ``notebooks``); with ``run``, a first cell that says
    which run the page shows (:func:`run_cell`). Refuses a notebook with an error output (a failed cell) or a view
    that loads its code from the network. Returns the number of circuitsvis views."""
    from helpers.study.plots import close_view_divs

    nb = json.loads(src.read_text())
    # tqdm's bars are Jupyter widgets: their saved state would make the page load the widget manager from a CDN
    nb.get("metadata", {}).pop("widgets", None)
    views = 0
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "markdown":  # links as the site sees them (rewrite_links)
            cell["source"] = rewrite_links(_html_text(cell.get("source", "")), "notebooks", pages, notebooks)
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise SiteError(f"{src}: cell {i} failed when it ran ({out.get('ename')}: {out.get('evalue')}); "
                                f"rerun the notebook (`make run`), then `make site`")
            if out.get("output_type") == "stream":
                if out.get("name") == "stderr":
                    continue
                text = _BAR.sub("", local_paths(_html_text(out.get("text", ""))))
                if text.strip():
                    kept.append({**out, "text": text})
                continue
            data = out.get("data", {})
            if WIDGET_MIME in data:  # a progress bar (its text form is a frozen "0%| | 0/4" on a static page)
                continue
            for mime in ("text/plain", "text/markdown"):
                if mime in data:
                    data[mime] = local_paths(_html_text(data[mime]))
            if "text/html" in data:
                html = _html_text(data["text/html"])
                if "circuits-vis-" in html:
                    views += 1
                    if "var CircuitsVis=" not in html:
                        raise SiteError(f"{src}: cell {i}'s circuitsvis view imports its code from a CDN, so it "
                                        f"would not show offline; rerun the notebook with this version of helpers "
                                        f"(its views carry their code), then `make site`")
                    data["text/html"] = close_view_divs(html)
                else:
                    data["text/html"] = local_paths(html)
            kept.append(out)
        if "outputs" in cell:
            cell["outputs"] = kept
    if run is not None:  # right under the title: the first cell's first line
        cells = nb.get("cells", [])
        first = _html_text(cells[0].get("source", "")) if cells and cells[0].get("cell_type") == "markdown" else ""
        if first.startswith("# "):
            title, _, rest = first.partition("\n")
            cells[0]["source"] = title
            cells = [cells[0], run_cell(run)] + ([{**cells[0], "id": "site-rest", "source": rest.lstrip("\n")}]
                                                 if rest.strip() else []) + cells[1:]
        else:
            cells = [run_cell(run)] + cells
        nb["cells"] = cells
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return views


def flow_views(notebook: Path) -> int:
    """How many flow views (``helpers.study.plots.flow_view``: plain HTML and inline JavaScript, nothing to fetch)
    the outputs of a notebook hold."""
    nb = json.loads(notebook.read_text())
    return sum(_html_text(out.get("data", {}).get("text/html", "")).count('<div class="icl-flow"')
               for cell in nb.get("cells", []) for out in cell.get("outputs", []))


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def rewrite_links(text: str, page_dir: str, pages: set[str], notebooks: tuple[str, ...] = (),
                  staged: set[str] = frozenset()) -> str:
    """Links of a markdown page (or a notebook's markdown cell) as the site sees them. ``page_dir``: the page's
    folder in the repository (``""`` for the README, ``"docs"`` for docs pages, ``"notebooks"`` for a notebook).
    Links to pages that are in the site (``pages``: their repository paths) point at the staged page; figures at
    ``figures/``; a notebook's source or notebook (``notebooks/<stem>.py`` or ``.ipynb``) at its rendered page
    when ``notebooks`` has that stem; links to other files of the repository become their path in code (the site
    has no copy of them); web links and anchors stay; ``staged`` paths (files copied into the site at that path,
    e.g. a run's figures) are linked as they are. Staged paths are written relative to where the page is
    staged (docs pages and the README at the site's root, notebooks in ``notebooks/``)."""
    staged_dir = "notebooks" if page_dir == "notebooks" else ""

    def resolve(target: str) -> str:
        parts = []
        for part in (page_dir.split("/") if page_dir else []) + target.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return "/".join(parts)

    def rel(site_path: str) -> str:
        return os.path.relpath(site_path, staged_dir or ".")

    def rep(m: re.Match) -> str:
        bang, text_, target = m.groups()
        if re.match(r"^(https?:|mailto:|#)", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        anchor = f"#{anchor}" if anchor else ""
        repo_path = resolve(path)
        if repo_path in staged:  # a file staged into the site at its own path (a run's figures)
            return f"{bang}[{text_}]({rel(repo_path)})"
        if repo_path.startswith("docs/figures/"):
            return f"{bang}[{text_}]({rel(repo_path[len('docs/'):])})"
        nb = Path(repo_path)
        if nb.parent.as_posix() == "notebooks" and nb.suffix in (".py", ".ipynb") and nb.stem in notebooks:
            return f"[{text_}]({rel(f'notebooks/{nb.stem}.ipynb')}{anchor})"
        if repo_path in pages:
            return f"[{text_}]({rel('index.md' if repo_path == 'README.md' else nb.name)}{anchor})"
        return f"{text_} (`{repo_path}`)" if text_.strip("`") != repo_path else f"`{repo_path}`"

    return _LINK.sub(rep, text)


def _with_line(md: str, line: str) -> str:
    """``md`` with ``line`` (HTML) right under its first heading."""
    head, sep, rest = md.partition("\n")
    return f"{head}\n\n{line}\n{sep}{rest}" if head.startswith("#") else f"{line}\n\n{md}"


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def stage_run_figures(md: str, results: Path, out: Path) -> tuple[str, set[str]]:
    """Copy the figures a RESULTS page shows (paths relative to ``results``) into ``out/results/`` and return the
    page with its image links pointing there, and the staged paths (for :func:`rewrite_links`)."""
    staged = set()

    def rep(m: re.Match) -> str:
        alt, target = m.groups()
        src = results / target
        if re.match(r"^(https?:|/)", target) or not src.is_file():
            return m.group(0)
        dst = out / "results" / target
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
        staged.add(f"results/{target}")
        return f"![{alt or src.stem}]({target})"

    return _IMAGE.sub(rep, md), staged


def stage(out: Path, notebooks: dict[str, Path], summary: Path | None, model_folder: str, key: str) -> dict:
    """Write the Sphinx sources into ``out`` (emptied first). Returns what was staged."""
    from helpers.study.report import recorded_runs

    if out.exists():
        shutil.rmtree(out)
    (out / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "conf.py", out / "conf.py")
    shutil.copytree(ROOT / "docs" / "figures", out / "figures")
    shutil.copytree(ROOT / "docs" / "_static", out / "_static")
    pages = {"README.md"} | {f"docs/{p}.md" for p in DOC_PAGES}
    for p in DOC_PAGES:
        (out / f"{p}.md").write_text(rewrite_links((ROOT / "docs" / f"{p}.md").read_text(), "docs", pages,
                                                   tuple(notebooks)))
    views, flows, shown = {}, {}, {}
    for stem, src in notebooks.items():
        folder = src.parent.parent  # results/<model>/<key>
        run = {"key": key, "model": folder.parent.name, **recorded_runs(folder).get(stem, {})}
        shown[stem] = run
        views[stem] = prepare_notebook(src, out / "notebooks" / f"{stem}.ipynb", pages, tuple(notebooks), run)
        flows[stem] = flow_views(out / "notebooks" / f"{stem}.ipynb")
    latest = max((r.get("finished", "") for r in shown.values()), default="") or "at an unknown time"
    commits = sorted({str(r.get("commit"))[:7] for r in shown.values() if r.get("commit")}) or ["unknown"]
    site_line = (f'<div class="site-run">The notebook pages of this site show the <code>{key}</code> run of '
                 f"<code>{model_folder}</code> (notebook 09: the positive control) at commit "
                 f"<code>{', '.join(commits)}</code>, finished {latest}, executed by <code>make run</code>"
                 + (f"; its summary is the [Summary]({SUMMARY_PAGE}.md) page" if summary else "")
                 + ". The result tables on this page come from the recorded runs named under them.</div>")
    index = _with_line(rewrite_links((ROOT / "README.md").read_text(), "", pages, tuple(notebooks)), site_line)
    toc_pages = "\n".join(DOC_PAGES) + (f"\n{SUMMARY_PAGE}" if summary else "")
    toc_nbs = "\n".join(f"notebooks/{s}" for s in notebooks)
    index += (f"\n```{{toctree}}\n:caption: Notebooks\n:maxdepth: 1\n\n{toc_nbs}\n```\n\n"
              f"```{{toctree}}\n:caption: Pages\n:maxdepth: 1\n\n{toc_pages}\n```\n")
    (out / "index.md").write_text(index)
    if summary:
        md, staged = stage_run_figures(summary.read_text(), summary.parent, out)
        md = _with_line(rewrite_links(md, "results", pages, staged=staged),
                        site_line.replace("The notebook pages of this site show", "This summary is of").replace(
                            f"; its summary is the [Summary]({SUMMARY_PAGE}.md) page", "").replace(
                            " The result tables on this page come from the recorded runs named under them.", ""))
        (out / f"{SUMMARY_PAGE}.md").write_text(md)
    return {"notebooks": list(notebooks), "views": views, "flow_views": flows, "summary": bool(summary)}


def build(results: Path, profile_key: str, folders: list[str], out: Path, quiet: bool = True) -> dict:
    """Stage and build the run ``results/<folder>/<profile_key>`` of the first of ``folders`` (model folders,
    :func:`model_folders`) that has executed notebooks; returns what was staged, with ``out`` (the built site)."""
    folder, notebooks = find_notebooks(results, profile_key, folders)
    RUN_ROOTS[:] = [str(Path(results).resolve().parent)]  # the checkout whose `make run` wrote results/
    summary = results / f"RESULTS-{profile_key}.md"
    info = stage(out / "_src", notebooks, summary if summary.exists() else None, folder, profile_key)
    html = out / "html"
    if html.exists():
        shutil.rmtree(html)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-E", "-n"] + (["-q"] if quiet else [])
    r = subprocess.run(cmd + [str(out / "_src"), str(html)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SiteError(f"sphinx-build failed (exit {r.returncode}):\n{r.stderr.strip() or r.stdout.strip()}")
    info["out"] = str(html)
    return info


def main(argv: list[str] | None = None) -> int:
    from helpers.study.results import run_key

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results", help="the folder `make run` wrote (results/)")
    ap.add_argument("--profile", default="default", help="the run's profile (its run key when tasks differ)")
    ap.add_argument("--models", nargs="+", default=["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"],
                    help="models in order of preference: the first with executed notebooks is shown")
    ap.add_argument("--out", type=Path, default=ROOT / "site", help="where the site goes (site/html/index.html)")
    a = ap.parse_args(argv)
    try:
        info = build(a.results, run_key(a.profile), model_folders(a.models), a.out)
    except SiteError as e:
        print(f"build_site: {e}", file=sys.stderr)
        return 1
    n_views, n_flows = sum(info["views"].values()), sum(info["flow_views"].values())
    print(f"build_site: {len(info['notebooks'])} notebooks ({n_views} circuitsvis views, {n_flows} flow views), "
          f"{len(DOC_PAGES) + 1 + info['summary']} pages -> {info['out']}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
