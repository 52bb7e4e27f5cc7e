"""Exercise notebooks are generated from the sources (scripts/make_exercises.py) and kept in sync; the
reporting plumbing of the notebooks stays small (scripts/notebook_lines.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mk = _load("make_exercises")
lines = _load("notebook_lines")

SOLUTION = '''import torch


def double(x: torch.Tensor) -> torch.Tensor:
    """Twice x."""
    y = x * 2
    return y


def halve(x):
    return x / 2
'''


def test_stub_keeps_signature_and_docstring_and_drops_the_body():
    out = mk.stub_source(SOLUTION, "probe")
    assert out.startswith("# EXERCISE\nimport torch\n")
    assert 'def double(x: torch.Tensor) -> torch.Tensor:\n    """Twice x."""\n    # Your code here' in out
    assert "y = x * 2" not in out and "x / 2" not in out
    assert out.count("raise NotImplementedError") == 2
    ns = {}
    exec(compile(out, "stub", "exec"), ns)  # the stub is valid Python; calling it says what to do
    with pytest.raises(NotImplementedError, match="write double"):
        ns["double"](1)


def test_solution_cell_with_other_statements_is_refused():
    with pytest.raises(mk.SolutionCellError, match="imports and function definitions only"):
        mk.stub_source("def f():\n    return 1\n\nx = f()\n", "probe")


def test_generated_notebook_replaces_only_solution_cells(tmp_path, monkeypatch):
    src = tmp_path / "notebooks" / "09_probe.py"
    src.parent.mkdir()
    src.write_text('# %% [markdown]\n# # Probe\n\n# %% tags=["solution"]\n' + SOLUTION
                   + '\n# %%\nprint(double(2))\n')
    nb = mk.exercise_notebook(src)
    kinds = [(c.cell_type, c.metadata.get("tags", [])) for c in nb.cells]
    assert kinds == [("markdown", []), ("markdown", []), ("code", ["exercise"]), ("code", [])]
    assert "Exercise version" in nb.cells[1].source and nb.cells[3].source == "print(double(2))"
    assert nb.metadata["exercises"] == 1


def test_every_notebook_has_an_exercise_and_exercises_are_in_sync():
    sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    missing = [p.stem for p in sources if 'tags=["solution"]' not in p.read_text()]
    assert not missing, f"notebooks without a solution cell (an exercise): {missing}"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_exercises.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_exercise_notebooks_are_valid_and_stubbed():
    for p in sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = jupytext.read(p)
        ex = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
        assert ex and all("raise NotImplementedError" in c.source for c in ex), p.name


def test_plumbing_counter_on_a_probe(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "00_probe.py").write_text(
        "# %%\nx = 1\n# a comment\ny = x + 1\n\n# %%\nsave_metrics('00', {\n    'x': x,\n})\n"
        "summary = f'{x}'\nsave_figure(fig, 'a')\n")
    (row,) = lines.counts(tmp_path)
    assert (row["code"], row["plumbing"]) == (7, 5)


def test_reporting_plumbing_is_under_5_percent_of_notebook_code():
    rows = lines.counts()
    code, plumbing = sum(r["code"] for r in rows), sum(r["plumbing"] for r in rows)
    table = ", ".join(f"{r['notebook']} {r['plumbing']}/{r['code']}" for r in rows)
    assert plumbing < 0.05 * code, f"reporting plumbing {plumbing}/{code} lines: {table}"
