"""The run record and the result tables generated from it (helpers.study.record).

    python scripts/record.py save --profile default --models M ... [--results results] [--commit SHA]
    python scripts/record.py tables [--check]

``save`` (``make record``) writes ``docs/record/<model>-<run key>.json`` for each model (and the positive
control, when the run has it) from a finished ``make run``. ``tables`` (``make tables``) rewrites every
``<!-- record:... -->`` block of README.md and docs/*.md from the records; ``--check`` only says which blocks
differ and which results are typed outside a block (exit 1), as ``tests/test_record.py`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    from helpers.study.record import (
        CONTROL,
        RecordError,
        apply_blocks,
        check_blocks,
        load_records,
        make_record,
        render_blocks,
        stray_results,
    )
    from helpers.study.results import run_key

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("save", help="record a finished make run")
    sv.add_argument("--profile", default="default")
    sv.add_argument("--models", nargs="+", default=["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"])
    sv.add_argument("--results", type=Path, default=ROOT / "results")
    sv.add_argument("--commit", default=None, help="the commit that ran it, when runs.json does not say")
    tb = sub.add_parser("tables", help="rewrite the record blocks of README.md and docs/")
    tb.add_argument("--check", action="store_true", help="only report blocks that differ and stray results")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "save":
            key = run_key(a.profile)
            models = list(a.models) + ([CONTROL] if (a.results / CONTROL / key / "metrics").is_dir() else [])
            for m in models:
                print(f"record: {make_record(a.results, m, key, a.commit).relative_to(ROOT)}")
            print("record: now `make tables` rewrites README.md and docs/ from the records")
            return 0
        blocks = render_blocks(load_records())
        problems = []
        for page in PAGES:
            text, where = page.read_text(), str(page.relative_to(ROOT))
            if a.check:
                problems += check_blocks(text, blocks, where) + stray_results(text, where)
            else:
                new = apply_blocks(text, blocks, where)
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
