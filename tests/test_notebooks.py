"""Notebook hygiene: every .py has its paired .ipynb, in sync, committed without outputs.

(nbmake executes the notebooks themselves: `make test` passes `notebooks --nbmake`.)
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

NB = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(NB.glob("[0-9][0-9]_*.py"))


def test_there_are_notebooks():
    assert SOURCES, "no notebooks found"
    assert SOURCES[0].name.startswith("00_")


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_paired_and_in_sync(src):
    ipynb = src.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run `jupytext --sync {src}`"
    py_nb = jupytext.read(src)
    ip_nb = jupytext.read(ipynb)
    assert "ipynb,py:percent" in py_nb.metadata.get("jupytext", {}).get("formats", ""), "not paired"
    a = [(c.cell_type, c.source.strip()) for c in py_nb.cells]
    b = [(c.cell_type, c.source.strip()) for c in ip_nb.cells]
    assert a == b, f"{src.name} and {ipynb.name} differ: run `jupytext --sync {src}`"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_committed_without_outputs(src):
    nb = nbformat.read(src.with_suffix(".ipynb"), as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None, f"{src.stem}: clear outputs before committing"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_reads_profile_and_model_from_environment(src):
    text = src.read_text()
    if src.stem.startswith("09_"):  # the positive control: its own model, run once (scripts/run_all.py OWN_MODEL)
        assert "notebook.start()" in text and 'MODEL = "control"' in text and "load_model(MODEL)" in text
        return
    assert "notebook.start()" in text and "current_model_name()" in text


SHORT_SETUP = ("01", "07", "10", "11")  # notebooks whose setup cell holds only the imports, the model and the run sizes
SETUP_LINES = 15


@pytest.mark.parametrize("number", SHORT_SETUP)
def test_setup_cell_is_short(number):
    """The first code cell loads the model and sizes; what a section needs is imported and built in that section."""
    src = next(NB.glob(f"{number}_*.py"))
    first = next(c for c in jupytext.read(src).cells if c.cell_type == "code")
    n = len(first.source.splitlines())
    assert n <= SETUP_LINES, f"{src.name}: setup cell of {n} lines (at most {SETUP_LINES}): move section code there"
