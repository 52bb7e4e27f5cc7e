"""Count each notebook's code lines, and how many of them are plumbing, by two definitions.

Code lines: non-blank, non-comment lines of code cells in ``notebooks/NN_*.py``.

- **Reporting** (narrow): the lines of top-level statements that only feed the report, i.e. that call one
  of :data:`PLUMBING_CALLS` (saving metrics or figures, building summary rows, reporting claims), build
  claims (``claim``, ``*_claims``) or assign a name containing ``summary`` or ``sentence``.
- **Display** (every line a reader does not need to follow the method): reporting, plus every statement
  that shows, formats, plots or saves (``display``, ``print``, ``plots.*``, figure and axes methods,
  :data:`DISPLAY_CALLS`), and every assignment that only reshapes or formats (:data:`RESHAPE_CALLS`: a table
  for display, a formatted string) and whose names are only ever read by such statements, found as a
  fixpoint over the notebook; a loop or ``with`` whose body is all display is display. Computing a result
  that is then only reported (an interval, a claim's input) is code. Imports are code, not display.

    python scripts/notebook_lines.py          # a table per notebook and the total
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
PLUMBING_CALLS = {"save_metrics", "save_figure", "summary_row", "report_claims", "build_report", "mean_std"}
DISPLAY_CALLS = PLUMBING_CALLS | {"display", "print", "HTML", "Markdown", "show", "savefig", "set_title", "set_xlabel",
                                  "set_ylabel", "legend", "tight_layout", "subplots", "figure", "suptitle",
                                  "imshow", "colorbar", "render_tokens", "attention_heads", "attention_patterns"}


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


def _shows(node) -> bool:
    """A statement that shows, plots, formats into output or saves: a display call, or a ``plots.*`` call."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in DISPLAY_CALLS:
                return True
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "plots":
                return True
    return False


# calls that only reshape or format what was computed (for a table, a label, a line of output)
RESHAPE_CALLS = {"DataFrame", "Series", "round", "format", "pivot_table", "pivot", "rename", "rename_axis",
                 "set_index", "reset_index", "to_frame", "join", "concat", "melt", "assign", "map", "items", "keys",
                 "values", "tolist", "item", "float", "int", "str", "len", "sorted", "list", "dict", "zip",
                 "enumerate", "range", "min", "max", "upper", "lower", "title", "split", "replace", "strip", "get",
                 "numpy", "cpu", "fmt", "fmt_duration", "decode", "repr"}


def _only_reshapes(node) -> bool:
    """Every call in the statement only reshapes or formats (no experiment, statistic or model call)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name not in RESHAPE_CALLS:
                return False
    return True


def _names_read(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_set(node) -> set[str]:
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _display_statements(stmts: list) -> set[int]:
    """Indices of the statements (top level, in notebook order) that are display by the honest definition."""
    disp = {i for i, s in enumerate(stmts) if _is_plumbing(s) or _shows(s)
            and not isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom))}
    for i, s in enumerate(stmts):  # a loop or with whose every statement shows
        if isinstance(s, (ast.For, ast.With, ast.If)) and s.body and all(_is_plumbing(b) or _shows(b) for b in s.body):
            disp.add(i)
    changed = True
    while changed:  # assignments that only reshape or format, read only by display statements
        changed = False
        for i, s in enumerate(stmts):
            names = _names_set(s)
            if i in disp or not names or not isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) \
                    or not _only_reshapes(s):
                continue
            readers = [j for j, t in enumerate(stmts) if j != i and names & _names_read(t)]
            if readers and all(j in disp for j in readers):
                disp.add(i)
                changed = True
    return disp


def count(path: Path) -> dict:
    nb = jupytext.read(path)
    code = plumbing = 0
    stmts, sources = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        code += _code_lines(src, 1, len(src.splitlines()))
        for node in ast.parse(src).body:
            if _is_plumbing(node):
                plumbing += _code_lines(src, node.lineno, node.end_lineno)
            stmts.append(node)
            sources.append(src)
    display = sum(_code_lines(sources[i], stmts[i].lineno, stmts[i].end_lineno) for i in _display_statements(stmts))
    return {"notebook": path.stem, "code": code, "plumbing": plumbing, "share": plumbing / code if code else 0.0,
            "display": display, "display_share": display / code if code else 0.0}


def counts(root: Path = ROOT) -> list[dict]:
    return [count(p) for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))]


def main() -> int:
    rows = counts()
    total = {"notebook": "all", **{k: sum(r[k] for r in rows) for k in ("code", "plumbing", "display")}}
    total["share"], total["display_share"] = total["plumbing"] / total["code"], total["display"] / total["code"]
    for r in rows + [total]:
        print(f"{r['notebook']:<34} {r['code']:>5} code lines {r['plumbing']:>4} reporting ({r['share']:.1%}) "
              f"{r['display']:>4} display ({r['display_share']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
