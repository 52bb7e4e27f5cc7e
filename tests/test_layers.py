"""The package's three layers, and the linter.

- ``helpers.core``: models, tasks, prompts, forward passes and their hooks, the shared-prefix cache, the
  content-addressed result store. It imports nothing from the other layers.
- ``helpers.study``: profiles, results folders, intervals, claims, run records, report, plots. It imports only
  ``core``.
- ``helpers.experiments``: one module per paper idea, with the checks of its exercises. Each imports ``core`` and
  ``study``, never another experiment module, so a reader can open one file and find the whole method.
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


def test_every_module_is_in_a_layer():
    loose = [p.name for p in HELPERS.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside helpers/core, helpers/experiments, helpers/study: {loose}"


@pytest.mark.parametrize("layer,forbidden", [("core", ("helpers.study", "helpers.experiments")),
                                             ("study", ("helpers.experiments",))])
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
