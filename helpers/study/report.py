"""RESULTS.md / RESULTS.html from the metrics the notebooks saved.

Convention: a notebook saves ``save_metrics(section, {"table": [records], "verdict": str, ...})``;
``table`` rows are rendered as a markdown table (one per section and model),
``verdict`` as a sentence under it. Other keys stay in the JSON files.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

from helpers.core.accounting import read_ledgers, summarise
from helpers.core.tasks import get_task
from helpers.study.after_report import AFTER_ACCOUNTS, after_verdicts
from helpers.study.challengers_report import ACCOUNT_CLAIMS, verdicts
from helpers.study.claims import Claim
from helpers.study.power_report import (
    KINDS,
    Power,
    account_power,
    annotate,
    as_power_map,
    checked_keys,
    power_markdown,
    power_word,
)
from helpers.study.results import model_slug, run_key, run_tasks

__all__ = ["build_report", "markdown_table", "replace_block", "record_run", "recorded_runs", "RUNS_FILE", "write_accounting",
           "ACCOUNTING_DIR", "git_commit", "accounting_markdown"]

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.3f}"
    if v is None:
        return ""
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "_(no rows)_\n"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c)).replace("|", "/") for c in cols) + " |")
    return "\n".join(out) + "\n"


def task_display(t: str) -> str:
    """A task's display name; its name for a spec that is gone since."""
    try:
        return get_task(t).display
    except Exception:  # a spec that is gone since: its name
        return t


def other_tasks(tasks, run_tasks) -> str:
    """`` (on <tasks>, not this run's tasks)`` for a claim measured on ``tasks`` (:attr:`Claim.tasks`) when they
    are not among ``run_tasks``; empty otherwise (and when ``run_tasks`` is None: no run to compare with)."""
    if not tasks or run_tasks is None or set(tasks) <= set(run_tasks):
        return ""

    return f" (on {', '.join(task_display(t) for t in tasks)}, not this run's tasks)"


def summary_rows(sections: dict, models: list[str], power: dict[str, Power] | None = None,
                 run_tasks: tuple[str, ...] | None = None) -> list[dict]:
    """Merge the notebooks' ``summary`` rows across models: one row per (section, claim); with ``power`` (the
    checks' power by claim key, notebook 09's), a last column says what each check of notebooks 01-03, 05, 07 and
    10 is worth on the controls (:func:`helpers.study.power_report.annotate`).

    A claim that one notebook reports with another notebook's key (notebook 09 grades the positive control with
    01-03's and 07's claims) joins that notebook's row when it is in the report, so the control's number stands
    beside the offline models' under the same claim. With ``run_tasks``, a claim measured on other tasks (its
    ``tasks``) says so after its statement (:func:`other_tasks`)."""
    by_number = {sec[:2]: sec for sec in sections}
    rows: dict[tuple[str, str], dict] = {}
    for sec in sorted(sections):
        for m in models:
            for r in sections[sec].get(m, {}).get("summary", []) or []:
                home = by_number.get(str(r.get("key", ""))[:2], sec)
                claim = (f"{home[:2]} {r['claim'][3:]}" if home != sec else r["claim"]) + other_tasks(
                    r.get("tasks"), run_tasks)
                row = rows.setdefault((home, claim), {"section": home, "claim": claim, "paper": r.get("paper", "")})
                row[f"{model_slug(m)}"] = r.get("ours", "")
                key = str(r.get("key", ""))
                worth = f" ({power_word(key, power)})" if power and key in KINDS and r.get("verdict") else ""
                row[f"verdict ({model_slug(m)})"] = r.get("verdict", "") + worth
                if power and checked_keys([str(r.get("key", ""))]) and sec[:2] != "09":
                    row["the check on the controls"] = annotate(power.get(r["key"]))
    out = sorted(rows.values(), key=lambda row: row["section"])
    if power:  # the column last, on every row (empty where the claim is not a check)
        out = [{**{k: v for k, v in row.items() if k != "the check on the controls"},
                "the check on the controls": row.get("the check on the controls", "")} for row in out]
    return out


def git_commit(root: Path = ROOT) -> str:
    """The commit checked out at ``root`` (``<sha>-dirty`` with uncommitted changes to tracked files; ``unknown``
    outside git). The run records (``docs/record/``, what ``make record`` writes after a run) do not count: no
    notebook reads them, so a record saved between two runs leaves the second at the commit."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)docs/record"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


RUNS_FILE = "runs.json"  # per results folder: the last run of every notebook (scripts/run_all.py writes it)


def record_run(folder: Path, notebook: str, info: dict) -> None:
    """Record the last run of ``notebook`` (``{"status", "seconds", ...}``) in ``folder/runs.json``, with the commit
    it ran at (:func:`git_commit`) and when it finished: ``make record`` names both."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RUNS_FILE
    runs = recorded_runs(folder)
    runs[notebook] = {**info, "commit": info.get("commit") or git_commit(),
                      "finished": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".runs-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(dict(sorted(runs.items())), f, indent=1)
    os.replace(tmp, path)


def recorded_runs(folder: Path) -> dict[str, dict]:
    path = Path(folder) / RUNS_FILE
    try:
        runs = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return runs if isinstance(runs, dict) else {}


def _task_line(tasks: tuple[str, ...], own_task: str | None) -> str:
    line = (f"Tasks: {', '.join(task_display(t) for t in tasks)} ({len(tasks)} task{'s' * (len(tasks) != 1)}; every "
            "mean over tasks below is over these)")
    if own_task:
        line += f"; notebook 08 studies {task_display(own_task)}"
    return line + ".\n"


def filed_elsewhere(results_root: Path, model: str, key: str, notebook: str) -> str | None:
    """The run key under which ``notebook``'s latest metrics for ``model`` were saved, when not ``key`` (a notebook
    that studies fixed tasks, :func:`helpers.study.results.studies_tasks`); None when it saved none."""
    found = [f for f in (Path(results_root) / model_slug(model)).glob(f"*/metrics/{notebook}.json")
             if f.parent.parent.name != key]
    return max(found, key=lambda f: f.stat().st_mtime).parent.parent.name if found else None


def build_report(results_root: Path, profile: str, models: list[str], runs: dict | None = None,
                 note: str = "", tasks: tuple[str, ...] | None = None, own_task: str | None = None) -> Path:
    """Write ``results_root/RESULTS-<run key>.md`` and ``.html``; returns the markdown path.

    The run key is the profile, plus the task set when it is not the profile's
    (:func:`helpers.study.results.run_key`; ``tasks`` and ``own_task`` default to ``$ICL_TASKS`` and
    ``$ICL_OWN_TASK``). ``runs``: ``{model: {notebook: {"status", "seconds"}}}`` of this invocation; the Runs
    table also lists the notebooks of earlier runs whose results the report shows (``runs.json`` of each
    results folder), marked as such, so a rerun of one notebook keeps the table and the claims in agreement.
    ``note``: one line about the run (e.g. jobs and wall time), printed under the runs table.
    """
    if tasks is None or own_task is None:
        t, o = run_tasks(profile)
        tasks, own_task = (t if tasks is None else tuple(tasks)), (o if own_task is None else own_task)
    key = run_key(profile, tasks, own_task)
    results_root = Path(results_root)
    runs = runs or {}
    substitute = " TweetEval-emotion stands in for EmoC." if "tweet_emotion" in tasks else ""
    lines = [f"# Results ({profile} profile{', ' + key if key != profile else ''})\n",
             "Generated by `make run` from the executed notebooks; numbers are computed by the notebooks, "
             "never typed in. Offline test pools are seeded samples of merged splits (data/README.md)."
             f"{substitute}\n",
             _task_line(tuple(tasks), own_task)]
    sections: dict[str, dict[str, dict]] = {}
    table = []
    for m in models:
        folder = results_root / model_slug(m) / key
        metrics = {f.stem: json.loads(f.read_text()) for f in sorted((folder / "metrics").glob("*.json"))}
        for sec, met in metrics.items():
            sections.setdefault(sec, {})[m] = met
        earlier = recorded_runs(folder)
        now = runs.get(m, {})
        shown = set()
        for nb in sorted(set(now) | set(earlier)):
            info = now.get(nb) or earlier[nb]
            here = any(sec[:2] == nb[:2] for sec in metrics)
            if nb not in now and not here:
                continue  # an earlier run whose results are not in this report
            shown.add(nb[:2])
            run = "this run" if nb in now else f"earlier ({info.get('finished', 'time unknown')})"
            elsewhere = None if here or info.get("status") != "ok" else filed_elsewhere(results_root, m, key, nb)
            if elsewhere:  # a notebook that studies fixed tasks files its results under their run (studies_tasks)
                run += f"; its results are under {elsewhere}, the run of the tasks it studies"
            table.append({"model": m, "notebook": nb, "status": info.get("status", ""),
                          "seconds": info.get("seconds", ""), "run": run})
        for sec in metrics:
            if sec[:2] not in shown:
                table.append({"model": m, "notebook": sec, "status": "metrics only", "seconds": "",
                              "run": "outside make run (e.g. in JupyterLab)"})
                shown.add(sec[:2])
    if table:
        lines.append("## Runs\n")
        lines.append(markdown_table(table))
    if note:
        lines.append(f"Run: {note}.\n")
    power = as_power_map(Power.from_json(p) for sec in sections.values() for met in sec.values()
                         for p in (met.get("metrics") or {}).get("power") or [])  # notebook 09's, on the controls
    lines.append("## Summary: paper vs ours, models side by side\n")
    lines.append(markdown_table(summary_rows(sections, models, power, run_tasks=tuple(tasks))))
    for sec in sorted(sections):
        lines.append(f"## {sec}\n")
        for m, met in sections[sec].items():
            lines.append(f"### {m}\n")
            if isinstance(met.get("table"), list):
                lines.append(markdown_table(met["table"]))
            for c in met.get("claims") or []:
                lines.append(f"- {c['sentence']}{other_tasks(c.get('tasks'), tasks)}\n")
            if sec.startswith("10_") and met.get("claims"):  # notebook 10: a verdict per account
                ten = [Claim.from_json(c) for c in met["claims"]]
                found, every = verdicts(ten, power), verdicts(ten, power, which="checks")
                if found:
                    lines.append("Verdict per account on its informative checks only (helpers.study.challengers_report"
                                 "), the paper's checks' verdict, and what its checks are worth on the controls "
                                 "(notebook 09; 'not recorded' before it has run):\n")
                    lines.append(markdown_table([{"account": a, "verdict (informative checks only)": v,
                                                  "the paper's checks' verdict": every[a],
                                                  "its checks on the controls": account_power(
                        ACCOUNT_CLAIMS.get(a, ()), power) if power else "not recorded"} for a, v in found.items()]))
            if sec.startswith("11_") and met.get("claims"):  # notebook 11: a verdict per account
                eleven = [Claim.from_json(c) for c in met["claims"]]
                found, every = after_verdicts(eleven, power), after_verdicts(eleven, which="checks")
                if found:
                    lines.append("Verdict per account on its informative checks only (helpers.study.after_report), "
                                 "the paper's checks' verdict, and what its checks are worth on the controls:\n")
                    lines.append(markdown_table([{"account": a, "verdict (informative checks only)": v,
                                                  "the paper's checks' verdict": every[a],
                                                  "its checks on the controls": account_power(
                        AFTER_ACCOUNTS[a], power) if power else "not recorded"} for a, v in found.items()]))
            if (met.get("metrics") or {}).get("power") and sec.startswith("09_"):  # every check's power on the controls
                lines.append("Every check's power on the controls (helpers.study.power_report):\n")
                lines.append(power_markdown([Power.from_json(p) for p in met["metrics"]["power"]]))
            if met.get("verdict"):
                lines.append(f"**Verdict:** {met['verdict']}\n")
            figs = sorted((results_root / model_slug(m) / key / "figures").glob(f"{sec[:2]}_*.png"))
            for fig in figs:
                lines.append(f"![{fig.stem}]({fig.relative_to(results_root)})\n")
    md = "\n".join(lines)
    out = results_root / f"RESULTS-{key}.md"
    out.write_text(md)
    out.with_suffix(".html").write_text(results_html(md, f"Results ({key})"))
    return out


def results_html(md: str, title: str) -> str:
    """The RESULTS page as a web page (tables, figures beside it, long cells wrapping, wide tables scrolling in
    their own box), rendered with markdown-it-py; opens offline from the results folder."""
    from markdown_it import MarkdownIt  # lazy: only when a report is written

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(md)
    style = ("body{font-family:system-ui,sans-serif;max-width:72em;margin:2em auto;padding:0 1em;line-height:1.45}"
             "table{border-collapse:collapse;display:block;overflow-x:auto;max-width:100%;font-size:.85em}"
             "td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;overflow-wrap:anywhere}"
             "img{max-width:100%;cursor:zoom-in}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{body}</body></html>")


ACCOUNTING_DIR = "accounting"  # per results folder: one ledger per notebook (make run ACCOUNT=1)


def accounting_markdown(rows: list[dict], title: str | None = None) -> str:
    """The accounting table of :func:`helpers.core.accounting.summarise` rows, with how it was counted (under a
    ``# title`` if given)."""
    peaks = sorted({round(r["peak_gflop_s"]) for r in rows if r.get("peak_gflop_s")})
    shown = [{"notebook": r["notebook"], "step": r["step"], "wall s": r.get("wall_s", ""), "step s": r["seconds"],
              "fwd positions": r["positions"], "bwd positions": r["backward_positions"], "TFLOP": r["tflop"],
              "GFLOP/s": r["gflop_s"], "% of peak": r["pct_peak"], "computed / read back": f"{r['computed']} / {r['hits']}"}
             for r in rows]
    for r in shown:
        for k in ("step s", "GFLOP/s", "% of peak"):
            if isinstance(r[k], float):
                r[k] = f"{r[k]:.1f}"
        if isinstance(r["wall s"], float):
            r["wall s"] = f"{r['wall s']:.0f}"
    return ((f"# {title}\n\n" if title else "") + "Per notebook and stored step (helpers.core.accounting): positions "
            "run forward and backward (padding included), FLOPs counted from the shapes of every forward (the matmuls TransformerLens runs; a "
            "backward pass counts one forward when only activations take gradients, two when weights do), wall "
            "time inside the step, the GFLOP/s that makes, and its share of this machine's fp32 matmul peak "
            f"measured in the same kernel on the model's weight shapes ({', '.join(map(str, peaks)) or '?'} GFLOP/s). "
            "`total` rows cover the kernel from its first helper import; `wall s` is the notebook's time in the run "
            "(kernel start, imports and the model's load included).\n\n" + markdown_table(shown))


def write_accounting(folder: Path, walls: dict[str, float] | None = None, title: str = "Accounting") -> Path | None:
    """``accounting.md`` and ``accounting.json`` in ``folder`` from its notebooks' ledgers; None if there are none."""
    ledgers = read_ledgers(Path(folder) / ACCOUNTING_DIR)
    if not ledgers:
        return None
    rows = summarise(ledgers, walls)
    (Path(folder) / "accounting.json").write_text(json.dumps(rows, indent=1))
    out = Path(folder) / "accounting.md"
    out.write_text(accounting_markdown(rows, title))
    return out


def replace_block(text: str, body: str, begin: str, end: str, where: str = "the page") -> str:
    """``text`` with what lies between the marker lines ``begin`` and ``end`` replaced by ``body`` (the generated
    blocks of docs/gpu.md); a ValueError naming ``where`` when a marker is missing."""
    if begin not in text or end not in text:
        raise ValueError(f"{where} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"

