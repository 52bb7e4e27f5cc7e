"""The run record and the result tables generated from it (helpers.study.record).

    python scripts/record.py save --profile default --models M ... [--results results] [--commit SHA]
    python scripts/record.py tables [--check]     (make tables, make tables-check)
    python scripts/record.py restamp

``save`` (``make record``) writes ``docs/record/<model>-<run key>.json`` for each model (and the positive
control, when the run has it) from a finished ``make run``; with ``--notebooks``, those notebooks only, taken out of
the model's older records (:func:`helpers.study.record.supersede`). ``tables`` (``make tables``) rewrites every
``<!-- record:... -->`` block of README.md and docs/*.md from the records; ``--check`` only says which blocks
differ and which results are typed outside a block (exit 1), as ``tests/test_record.py`` does. ``restamp``
rewrites the records' code digests when the rule that makes them changes but the code does not: only for the
notebooks whose files are the same as at the run's commit (:func:`helpers.study.record.restamp`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import timing  # noqa: E402  (scripts/timing.py)

from helpers.study.record import minutes, model_label  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _default_runs(records) -> list:
    return [r for r in records if r.profile == "default" and r.slug != "control"]


def _took(r) -> str:
    if r.part:  # notebooks recorded on their own (make record NOTEBOOKS=...)
        return (f"{model_label(r)}'s notebook{'s' if '+' in r.part else ''} {r.part.replace('+', ', ')} took "
                f"{minutes(r):.0f} min")
    return f"{model_label(r)} alone took {minutes(r):.0f} min of notebooks"


def how_long(records) -> str:
    """The README's first-screen sentence on run times: what is derived for both models on 2 cores and on an 8-core
    laptop (scripts/timing.py's estimate from the measured per-notebook seconds, one worker per model), what the
    recorded default runs measured in all per model, and the smoke run; each run's notebooks, commit and conditions
    are listed in docs/results.md (:func:`run_notes`)."""
    both = ["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"]
    nbs = [nb for nb in timing.MEASURED_DEFAULT["google/gemma-3-270m"] if nb[:2] not in timing.OWN_MODEL]

    def derived(cores: int) -> str:
        jobs = timing.parallel_jobs(len(both), 0, cores)
        per = [sum(timing.builtin_seconds(m, "default", nb, threads=timing.worker_threads(jobs, cores)) for nb in nbs)
               for m in both]
        return timing.fmt_duration(timing.wall_seconds(per, jobs))

    per_model: dict[str, list] = {}
    for r in _default_runs(records):
        per_model.setdefault(model_label(r), []).append(r)
    parts = [f"{sum(minutes(r) for r in rs):.0f} min for {m}" for m, rs in per_model.items()]
    measured = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    smoke: dict[str, list] = {}  # a model's smoke records (its parts too) by model
    for r in records:
        if r.profile == "smoke":
            smoke.setdefault(model_label(r), []).append(r)
    each = ", ".join(f"{sum(minutes(r) for r in rs):.1f} min for {m}" for m, rs in smoke.items())
    commits = list(dict.fromkeys(r.commit[:7] for rs in smoke.values() for r in sorted(rs, key=lambda r: r.date)))
    quick = (f"`make run PROFILE=smoke` (every notebook on a handful of inputs: for trying the collection, not "
             f"for evidence) ran its notebooks in {each} (measured, commit{'s' if len(commits) > 1 else ''} "
             f"{', '.join(f'`{c}`' for c in commits)})" if smoke else
             "`make run PROFILE=smoke` runs every notebook on a handful of inputs, for trying the collection")
    said = (f"the recorded default runs took, their notebooks' minutes summed, {measured} ([each run, notebook "
            "by notebook](docs/results.md#run-sizes), with its commit and conditions)" if measured else
            "no default run is recorded yet")
    return (f"Both offline models take about {derived(2)} on 2 CPU cores and about {derived(8)} on an 8-core laptop "
            f"(derived by `scripts/timing.py` from the measured per-notebook times, one worker per model); {said}. "
            f"{quick}.\n")


def run_notes(records) -> str:
    """docs/results.md's list of the recorded default runs: per model and part, the minutes, the commit and what a
    reader should know about the run (its note)."""
    runs = _default_runs(records)
    if not runs:
        return "No default run is recorded yet.\n"
    return "".join(f"- {_took(r)} (commit `{r.commit[:7]}`{'; ' + r.note if r.note else ''}).\n" for r in runs)


def blocks(records) -> dict[str, str]:
    """Every record block of README.md and docs/: the tables (helpers.study.record), the run-time sentence, the
    architectures a local model folder may have (helpers.core.models.architectures_text) and TransformerLens 4's
    parity table (scripts/bridge_parity.py, from docs/bridge-parity.json)."""
    import bridge_parity  # scripts/bridge_parity.py: TransformerLens 4 against 3.9

    from helpers.core.models import architectures_text
    from helpers.study.record import render_blocks

    return render_blocks(records, {"howlong": how_long, "runnotes": run_notes,
                                   "architectures": lambda _: architectures_text(),
                                   "bridge": lambda _: bridge_parity.table()})


def main(argv: list[str] | None = None) -> int:
    from helpers.study.record import (
        CONTROL,
        RecordError,
        apply_blocks,
        check_blocks,
        load_records,
        make_record,
        missing_records,
        stray_results,
        supersede,
    )
    from helpers.study.record_code import restamp, stale_methods
    from helpers.study.results import run_key

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("save", help="record a finished make run")
    sv.add_argument("--profile", default="default")
    sv.add_argument("--models", nargs="+", default=["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"])
    sv.add_argument("--results", type=Path, default=ROOT / "results")
    sv.add_argument("--commit", default=None, help="the commit that ran it, when runs.json does not say")
    sv.add_argument("--note", default="", help="what a reader should know about the run, e.g. 'machine shared'")
    sv.add_argument("--notebooks", nargs="*", default=[], help="record only these notebooks (numbers), as a part "
                    "beside the model's record of the others")
    tb = sub.add_parser("tables", help="rewrite the record blocks of README.md and docs/")
    tb.add_argument("--check", action="store_true", help="only report blocks that differ and stray results")
    sub.add_parser("restamp", help="rewrite code digests for notebooks whose code is unchanged since their run")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "restamp":
            for path in sorted((ROOT / "docs" / "record").glob("*.json")):
                done = restamp(path)
                print(f"record: {path.name}: " + (f"restamped {', '.join(s[:2] for s in done)}" if done else
                                                 "nothing restamped"))
            return 0
        if a.cmd == "save":
            key = run_key(a.profile)
            models = list(dict.fromkeys(list(a.models) + ([CONTROL] if (a.results / CONTROL / key / "metrics").is_dir()
                                                          else [])))
            for m in models:
                if a.notebooks and m == CONTROL and not any(n.zfill(2) in timing.OWN_MODEL for n in a.notebooks):
                    continue  # the control's own notebook was not asked for
                path = make_record(a.results, m, key, a.commit, note=a.note, notebooks=a.notebooks)
                print(f"record: {path.relative_to(ROOT)}")
                for line in supersede(path):
                    print(f"record: {line}")
            print("record: now `make tables` rewrites README.md and docs/ from the records")
            return 0
        gone = missing_records()
        if gone:
            raise RecordError(f"{', '.join(gone)}: tracked by git but missing, so its cells would read 'not run'; "
                              "restore it (`git checkout -- <file>`) or commit its removal (`git rm <file>`) first")
        records = load_records()
        for r in records:  # said, not failed: the tables say it too, beside each run (record.code_note)
            stale = stale_methods(r)
            if stale or not r.methods:
                print(f"tables: docs/record/{r.file_name}: " + (f"the code of notebooks {', '.join(stale)} has "
                      "changed since its run; rerun them and `make record`" if stale else
                      "no code digests recorded (a record made before they were)"))
        made = blocks(records)
        problems = []
        for page in PAGES:
            text, where = page.read_text(), str(page.relative_to(ROOT))
            if a.check:
                problems += check_blocks(text, made, where) + stray_results(text, where)
            else:
                new = apply_blocks(text, made, where)
                if new != text:
                    page.write_text(new)
                    print(f"tables: rewrote {where}")
                problems += stray_results(new, where)
    except RecordError as e:
        print(f"record: {e}", file=sys.stderr)
        return 1
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
