"""The package's four layers, and the linter.

- ``helpers.core``: models, tasks, prompts, forward passes and their hooks, the shared-prefix cache, the
  content-addressed result store. It imports nothing from the other layers.
- ``helpers.study``: profiles, results folders, intervals, claims, run records, report, plots. It imports only
  ``core``.
- ``helpers.experiments``: one module per paper idea, the method only. Each imports ``core`` and ``study``, never
  another experiment module, so a reader can open one file and find the whole method.
- ``helpers.exercises``: the notebooks' exercises, one module per method (its ``check_*`` functions and the typical
  mistakes they name), beside ``grading`` and ``tiny`` (the one definition of the tiny random models). It imports
  any lower layer; nothing imports it, and no exercise module imports another method's.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("helpers")}


def _layer_files(layer: str) -> list[Path]:
    return sorted((HELPERS / layer).rglob("*.py"))


LAYERS = ("core", "study", "experiments", "exercises")  # bottom to top


def test_every_module_is_in_a_layer():
    loose = [p.name for p in HELPERS.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside {', '.join(f'helpers/{layer}' for layer in LAYERS)}: {loose}"
    packages = sorted(p.name for p in HELPERS.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))
    assert packages == sorted(LAYERS), f"packages of helpers/ that are not a layer of tests/test_layers.py: {packages}"


@pytest.mark.parametrize("layer,forbidden", [(layer, tuple(f"helpers.{up}" for up in LAYERS[i + 1:]))
                                             for i, layer in enumerate(LAYERS[:-1])])
def test_lower_layers_do_not_import_upper(layer, forbidden):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m.startswith(forbidden))
           for p in _layer_files(layer)}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_no_experiment_imports_another():
    mods = {p.stem for p in _layer_files("experiments") if p.stem != "__init__"}
    bad = {}
    for p in _layer_files("experiments"):
        other = {m.split(".")[2] for m in _imports(p) if m.startswith("helpers.experiments.")} - {p.stem}
        if other & mods:
            bad[p.stem] = sorted(other & mods)
    assert not bad, f"experiment modules importing other experiment modules: {bad}"


def test_no_exercise_module_imports_another_methods():
    shared = {"grading", "tiny"}
    bad = {}
    for p in _layer_files("exercises"):
        other = {m.split(".")[2] for m in _imports(p) if m.startswith("helpers.exercises.")} - shared - {p.stem}
        if other:
            bad[p.stem] = sorted(other)
    assert not bad, f"exercise modules importing other methods' exercise modules: {bad}"


def _defined(path: Path) -> list[tuple[str, int]]:
    """``(name, line)`` of every function, class and assigned name a file defines, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, node.lineno))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out += [(t.id, node.lineno) for t in targets if isinstance(t, ast.Name)]
    return out


GRADING = {"CheckFailed", "YourFunctionRaised", "grader", "likely_mistake", "compare_to_reference"}


def _is_mistake_builder(name: str) -> bool:
    """A builder (or table) of an exercise's typical wrong versions: ``_*_mistake``, ``_*_mistakes``, ``*_MISTAKES``."""
    return name.lower().rstrip("s").endswith("_mistake")


def test_checks_and_mistake_builders_live_in_helpers_exercises_only():
    """The method modules hold the method: no exercise check (``check_*``), builder of typical mistakes or grading
    machinery is defined under helpers/experiments, and none of the last two in core or study (whose ``check_*``
    functions, e.g. ``check_label_ids``, check a caller's input: they are not exercises)."""
    bad = [f"{p.relative_to(ROOT)}:{line} {name}" for layer in ("core", "study", "experiments")
           for p in _layer_files(layer) for name, line in _defined(p)
           if _is_mistake_builder(name) or name in GRADING or (layer == "experiments" and name.startswith("check_"))]
    assert not bad, f"exercise code outside helpers/exercises: {bad}"
    assert _is_mistake_builder("_isolation_mistake") and _is_mistake_builder("_flow_mistakes")
    assert _is_mistake_builder("_ISOLATION_MISTAKES") and not _is_mistake_builder("mistakes")
    graded = [name for p in _layer_files("exercises") for name, _ in _defined(p) if name.startswith("check_")]
    assert len(graded) >= 18, graded  # the checks are there: every notebook's exercises


def _is_fixture(node: ast.AST) -> bool:
    return any("fixture" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def test_the_tiny_models_are_defined_once():
    """The tiny kinds (``TINY_KINDS``) and the tiny-model builders (``make_tiny_model``, the cached ``tiny_model``)
    are defined in helpers/exercises/tiny.py and nowhere else: helpers, tests, benchmarks and scripts import them
    from there (a pytest fixture named ``tiny_model`` hands one to a test; it builds nothing of its own)."""
    from helpers.exercises.tiny import TINY_KINDS

    kinds, builders = {"TINY_KINDS", "_TINY_KINDS"}, {"make_tiny_model", "tiny_model", "_tiny_model"}
    where = {}
    for p in [*HELPERS.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
              *(ROOT / "scripts").rglob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in builders and not _is_fixture(node):
                where.setdefault(node.name, []).append(str(p.relative_to(ROOT)))
            elif isinstance(node, ast.Assign):
                for name in {t.id for t in node.targets if isinstance(t, ast.Name)} & kinds:
                    where.setdefault(name, []).append(str(p.relative_to(ROOT)))
            elif isinstance(node, (ast.Tuple, ast.List)) and tuple(getattr(e, "value", None) for e in node.elts) == \
                    TINY_KINDS:  # the kinds written out again, e.g. a test's parameters
                where.setdefault("the kinds spelt out", []).append(f"{p.relative_to(ROOT)}:{node.lineno}")
    tiny = "helpers/exercises/tiny.py"
    assert where == {"TINY_KINDS": [tiny], "make_tiny_model": [tiny], "tiny_model": [tiny],
                     "the kinds spelt out": [f"{tiny}:{_kinds_line(tiny)}"]}, where


def _kinds_line(path: str) -> int:
    return next(n for n, line in enumerate((ROOT / path).read_text().splitlines(), 1) if line.startswith("TINY_KINDS ="))


def test_the_import_check_sees_a_violation(tmp_path, monkeypatch):
    f = HELPERS / "experiments" / "_probe_tmp.py"
    assert not f.exists()
    try:
        f.write_text("from helpers.experiments.saliency import saliency_flow\nfrom .isolation import isolate\n")
        assert {"helpers.experiments.saliency", "helpers.experiments.isolation"} <= _imports(f)
    finally:
        f.unlink()


RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed beside this Python (make setup installs it)")
def test_ruff_is_clean():
    ruff = str(RUFF)
    r = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
