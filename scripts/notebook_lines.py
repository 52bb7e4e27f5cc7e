"""Count each notebook's code lines, and how many of them are reporting plumbing.

Code lines: non-blank, non-comment lines of code cells in ``notebooks/NN_*.py``. Plumbing: the lines of
top-level statements that only feed the report, i.e. that call one of :data:`PLUMBING_CALLS` (saving
metrics or figures, building summary rows, reporting claims), build claims (``claim``, ``*_claims``) or assign a name containing ``summary`` or ``sentence``.

    python scripts/notebook_lines.py          # a table per notebook and the total
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
PLUMBING_CALLS = {"save_metrics", "save_figure", "summary_row", "report_claims", "build_report", "mean_std"}


def _calls(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _is_plumbing(node) -> bool:
    calls = _calls(node)
    return bool(calls & PLUMBING_CALLS) or any(c == "claim" or c.endswith("_claims") for c in calls) \
        or _assigns_summary(node)


def _assigns_summary(node) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign)) else []
    return any(w in getattr(t, "id", "") for t in targets for w in ("summary", "sentence"))


def _code_lines(src: str, first: int, last: int) -> int:
    lines = src.splitlines()[first - 1:last]
    return sum(1 for ln in lines if ln.strip() and not ln.strip().startswith("#"))


def count(path: Path) -> dict:
    nb = jupytext.read(path)
    code = plumbing = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        code += _code_lines(src, 1, len(src.splitlines()))
        for node in ast.parse(src).body:
            if _is_plumbing(node):
                plumbing += _code_lines(src, node.lineno, node.end_lineno)
    return {"notebook": path.stem, "code": code, "plumbing": plumbing,
            "share": plumbing / code if code else 0.0}


def counts(root: Path = ROOT) -> list[dict]:
    return [count(p) for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))]


def main() -> int:
    rows = counts()
    total = {"notebook": "all", "code": sum(r["code"] for r in rows), "plumbing": sum(r["plumbing"] for r in rows)}
    total["share"] = total["plumbing"] / total["code"]
    for r in rows + [total]:
        print(f"{r['notebook']:<26} {r['code']:>5} code lines {r['plumbing']:>4} plumbing ({r['share']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
