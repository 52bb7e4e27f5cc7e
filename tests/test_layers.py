"""The package's five layers, and the linter.

- ``helpers.core``: models, tasks, prompts, forward passes and their hooks, the shared-prefix cache, the
  content-addressed result store. It imports nothing from the other layers.
- ``helpers.experiments``: one module per paper idea, the method only: tensors and prompts in, tensors out, with
  no run sizes, intervals, verdicts or claims. Each imports only ``core`` (and the modules of its own method), so a
  reader can open one file and find the whole method.
- ``helpers.study``: profiles, results folders, claims, run records, report, plots. It imports only ``core``.
- ``helpers.protocols``: one module per method with its protocol (run sizes, the runs over tasks x seeds, intervals,
  criteria written before any run, claims), and what runs several methods together (the checks' power on the
  controls, :mod:`helpers.protocols.power`). It imports ``core``, ``experiments`` and ``study``.
- ``helpers.exercises``: the notebooks' exercises, one module per method (its ``check_*`` functions and the typical
  mistakes they name), beside ``grading`` and ``tiny`` (the one definition of the tiny random models). It imports
  any lower layer; nothing imports it, and no exercise module imports another method's.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"


def _imports(path: Path) -> set[str]:
    """Absolute ``helpers`` module names a file imports, at its top and inside functions (relative imports resolved
    against its package; :func:`_import_sites`)."""
    return {name for name, _, _ in _import_sites(path, ROOT)}


def _layer_files(layer: str) -> list[Path]:
    return sorted((HELPERS / layer).rglob("*.py"))


LAYERS = ("core", "experiments", "study", "protocols", "exercises")  # bottom to top


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


def _method(name: str, modules: set[str]) -> str:
    """The method a module belongs to: the longest other module whose name plus ``_`` starts its name
    (``isolation_classes`` and ``isolation_context`` belong to ``isolation``), else its own name."""
    bases = [b for b in modules if name.startswith(b + "_")]
    return max(bases, key=len) if bases else name


def _same_method(a: str, b: str, modules: set[str]) -> bool:
    return _method(a, modules) == _method(b, modules)


def test_no_experiment_imports_another():
    """A method's modules may import each other (``isolation_classes`` runs the hooks of ``isolation``; a module
    belongs to the method whose module name, plus ``_``, starts its own); one method
    never imports another's: what two methods share lives in helpers/core."""
    mods = {p.stem for p in _layer_files("experiments") if p.stem != "__init__"}
    bad = {}
    for p in _layer_files("experiments"):
        other = {m.split(".")[2] for m in _imports(p) if m.startswith("helpers.experiments.")} - {p.stem}
        other = {m for m in other & mods if not _same_method(p.stem, m, mods)}
        if other:
            bad[p.stem] = sorted(other)
    assert not bad, f"experiment modules importing other methods' modules: {bad}"


PROTOCOL_NAMES = re.compile(r"(Sizes|_sizes|_runs|_intervals?|_verdict|_claims?)$")


def test_methods_hold_no_protocol():
    """Run sizes, the runs over tasks x seeds, intervals, verdicts and claims live in helpers/protocols, beside
    the method they run; a method module defines none of them at its top level."""
    bad = [f"{p.relative_to(ROOT)}: {node.name}" for p in _layer_files("experiments")
           for node in ast.parse(p.read_text()).body
           if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and PROTOCOL_NAMES.search(node.name)]
    assert not bad, f"protocol code in method modules (move it to helpers/protocols): {bad}"
    methods = {p.stem for p in _layer_files("experiments")} - {"__init__"}
    protocols = {p.stem for p in _layer_files("protocols")} - {"__init__"}
    assert PROTOCOL_NAMES.search("saliency_runs") and PROTOCOL_NAMES.search("SaliencySizes")
    assert not PROTOCOL_NAMES.search("run_isolation") and not PROTOCOL_NAMES.search("aucroc_per_layer")
    for p in _layer_files("protocols"):  # a protocol named after a method runs that method
        method = HELPERS / "experiments" / f"{p.stem}.py"
        if p.stem in methods and any(not name.endswith("_reference") for name, _ in _defined(method)
                                     if not name.startswith("_") and name != "__all__"):
            assert f"helpers.experiments.{p.stem}" in _imports(p), p.stem
    assert {"saliency", "isolation", "aucroc", "reweighting", "compression", "diagnosis"} <= protocols


def test_same_method_is_a_name_prefix():
    mods = {"isolation", "isolation_rows", "isolation_classes", "saliency", "saliency_graph", "head_ablation",
            "head_biases", "isolationx"}
    assert _same_method("isolation", "isolation_rows", mods) and _same_method("isolation_rows", "isolation_classes", mods)
    assert _same_method("saliency_graph", "saliency", mods)
    assert not _same_method("head_ablation", "head_biases", mods) and not _same_method("isolation", "isolationx", mods)


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


def test_the_import_check_sees_a_violation(tmp_path):
    f = tmp_path / "helpers" / "experiments" / "_probe_tmp.py"  # never in the real tree: other tests walk it
    f.parent.mkdir(parents=True)
    f.write_text("from helpers.experiments.saliency import saliency_flow\nfrom .isolation import isolate\n")
    found = {name for name, _, _ in _import_sites(f, tmp_path)}
    assert {"helpers.experiments.saliency", "helpers.experiments.isolation"} <= found


RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed beside this Python (make setup installs it)")
def test_ruff_is_clean():
    ruff = str(RUFF)
    r = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


# ----------------------------------------------------------------------------------------- import cycles
#
# No module of ``helpers`` may import, directly or through others, a module that imports it back: a cycle only
# works while some of its imports wait inside functions, and then which import runs first decides whether a
# name exists yet. The imports counted are every ``import helpers...`` / ``from helpers... import ...`` of a
# module, at its top and inside its functions.

# Function-level imports of ``helpers`` modules inside helpers/core that are allowed: none. The tiny test models
# and the prompts built on them, once its exceptions, live in helpers/exercises. A new entry here is a new cycle
# waiting to happen; move the code instead.
FUNCTION_IMPORTS_ALLOWED: set[tuple[str, str, str]] = set()


def _allowed(rel: str, func: str | None, imported: str) -> bool:
    return any(rel == f and func == fn and (imported == m or imported.startswith(m + "."))
               for f, fn, m in FUNCTION_IMPORTS_ALLOWED)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_sites(path: Path, root: Path) -> list[tuple[str, str | None, int]]:
    """``(imported name, enclosing function or None, line)`` for every import of a ``helpers`` name in ``path``:
    ``from helpers.a import b`` gives ``helpers.a`` and ``helpers.a.b`` (``b`` may be a module)."""
    pkg = _module_name(path, root) if path.name == "__init__.py" else _module_name(path, root).rpartition(".")[0]
    out = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                names = [mod, *(f"{mod}.{a.name}" for a in child.names)]
            out.extend((n, func, child.lineno) for n in names if n == "helpers" or n.startswith("helpers."))
            visit(child, inner)

    visit(ast.parse(path.read_text()), None)
    return out


def _import_graph(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """``{module: {imported module: "file:line"}}`` over every module under ``root/helpers``, the allowed
    function-level imports left out."""
    files = sorted((root / "helpers").rglob("*.py"))
    modules = {_module_name(p, root): p for p in files}
    graph: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        rel = str(path.relative_to(root))
        edges = graph.setdefault(name, {})
        for imported, func, line in _import_sites(path, root):
            if imported in modules and imported != name and not _allowed(rel, func, imported):
                edges.setdefault(imported, f"{rel}:{line}")
    return graph


def _find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One import cycle ``[a, b, ..., a]`` of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node):
        state[node], _ = 1, path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        state[node], _ = 2, path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def _describe(cycle: list[str], graph: dict[str, dict[str, str]]) -> str:
    return " -> ".join(cycle) + " (" + "; ".join(f"{a} imports {b} at {graph[a][b]}" for a, b in
                                                zip(cycle, cycle[1:])) + ")"


def test_no_import_cycle():
    graph = _import_graph()
    cycle = _find_cycle(graph)
    assert cycle is None, f"import cycle: {_describe(cycle, graph)}"


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """A probe package whose cycle closes only through an import inside a function: the check names it."""
    core = tmp_path / "helpers" / "core"
    core.mkdir(parents=True)
    for f in (tmp_path / "helpers" / "__init__.py", core / "__init__.py"):
        f.write_text("")
    (core / "a.py").write_text("from helpers.core.b import B\n\nA = 1\n")
    (core / "b.py").write_text("B = 2\n\n\ndef c():\n    from .a import A\n\n    return A\n")
    (core / "d.py").write_text("from helpers.core import a\n")
    graph = _import_graph(tmp_path)
    assert graph["helpers.core.b"] == {"helpers.core.a": "helpers/core/b.py:5"}
    cycle = _find_cycle(graph)
    assert cycle == ["helpers.core.a", "helpers.core.b", "helpers.core.a"]
    assert "helpers.core.b imports helpers.core.a at helpers/core/b.py:5" in _describe(cycle, graph)
    (core / "b.py").write_text("B = 2\n")
    assert _find_cycle(_import_graph(tmp_path)) is None


def test_core_imports_helpers_only_at_module_top():
    """Inside helpers/core every import of a ``helpers`` module is at the top of its module, where a reader sees
    what the module depends on (lazy imports of heavy third-party packages may stay inside functions)."""
    inside = []
    for path in _layer_files("core"):
        rel = str(path.relative_to(ROOT))
        for imported, func, line in _import_sites(path, ROOT):
            if func is not None and not _allowed(rel, func, imported):
                inside.append(f"{rel}:{line} ({func}) imports {imported}")
    assert not inside, "imports of helpers modules inside functions: " + "; ".join(sorted(set(inside)))


def test_the_function_import_check_sees_one(tmp_path):
    core = tmp_path / "helpers" / "core"
    core.mkdir(parents=True)
    (core / "x.py").write_text("import json\n\n\ndef f():\n    from helpers.core.tasks import get_task\n\n    return get_task\n")
    sites = _import_sites(core / "x.py", tmp_path)
    assert ("helpers.core.tasks", "f", 5) in sites and all(func == "f" for _, func, _ in sites)


# ----------------------------------------------------------------------------------------- undefined names
#
# pyproject's ruff settings turn F821 (undefined name) off in helpers/core and helpers/experiments, because
# jaxtyping's one-word shape strings ("n", "batch") read as undefined forward references. That also hides a real
# undefined name, which fails only when its line runs. This check runs F821 there and drops the reports that lie
# inside a string (a shape), keeping every name used in code.


def _undefined_names(paths: list[Path]) -> list[str]:
    r = subprocess.run([str(RUFF), "check", "--select", "F821", "--config", "lint.per-file-ignores = {}",
                        "--output-format", "json", *map(str, paths)], cwd=ROOT, capture_output=True, text=True)
    found = []
    for d in json.loads(r.stdout or "[]"):
        path = Path(d["filename"])
        tree = ast.parse(path.read_text())
        row, col = d["location"]["row"], d["location"]["column"] - 1
        in_string = any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and (n.lineno, n.col_offset) <= (row, col) <= (n.end_lineno, n.end_col_offset)
                        for n in ast.walk(tree) if hasattr(n, "lineno"))
        if not in_string:
            found.append(f"{path.name}:{row}: {d['message']}")
    return found


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed beside this Python (make setup installs it)")
def test_no_undefined_name_in_helpers():
    found = _undefined_names([*_layer_files("core"), *_layer_files("experiments")])
    assert not found, "names used but never defined or imported: " + "; ".join(found)


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed beside this Python (make setup installs it)")
def test_the_undefined_name_check_sees_one(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('from __future__ import annotations\n\n\ndef f(x: "n") -> int:\n    return missing_name(x)\n')
    assert _undefined_names([f]) == ["m.py:5: Undefined name `missing_name`"]  # the shape "n" is not reported


MAX_MODULE_LINES = 600  # one job per module: a module past this is doing two, and is split by idea


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in HELPERS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by idea): {long}"


MAX_SCRIPT_LINES = 500  # a script that grows past this is split by job (run_all: run_common, run_local, run_slurm ...)


def test_no_script_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "scripts").glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_SCRIPT_LINES}
    assert not long, f"scripts over {MAX_SCRIPT_LINES} lines (split them by job): {long}"


PRODUCT = ("helpers", "scripts", "notebooks", "benchmarks")  # the code whose module walls hold (tests may reach in)


def _private_crossings(root: Path = ROOT) -> list[str]:
    """``file:line name`` for every private name (one leading ``_``) a file takes from another helpers module:
    ``from helpers.a import _b`` (relative imports too), or ``a._b`` on a module bound by an import."""
    out = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = str(path.relative_to(root))
            pkg = _module_name(path, root) if path.name == "__init__.py" else _module_name(path, root).rpartition(".")[0]
            tree = ast.parse(path.read_text())
            bound = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    mod = node.module or ""
                    if node.level:
                        base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                        mod = ".".join(base + ([node.module] if node.module else []))
                    if not mod.startswith("helpers"):
                        continue
                    for a in node.names:
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            out.append(f"{rel}:{node.lineno} {mod}.{a.name}")
                        else:
                            bound.add(a.asname or a.name)
                elif isinstance(node, ast.Import):
                    bound.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("helpers"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                        and node.attr.startswith("_") and not node.attr.startswith("__")):
                    out.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    return out


def test_no_private_name_crosses_a_module():
    """What two modules share is public in the module that owns it; a private name stays in its module."""
    bad = _private_crossings()
    assert not bad, "private names taken from another module (make them public where they are defined):\n" + "\n".join(bad)


def test_the_private_name_check_sees_one(tmp_path):
    (tmp_path / "helpers" / "core").mkdir(parents=True)
    (tmp_path / "helpers" / "core" / "a.py").write_text("def _b():\n    return 1\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "x.py").write_text("from helpers.core.a import _b\nimport helpers.core.a as a\na._b()\n")
    (tmp_path / "helpers" / "core" / "c.py").write_text("from .a import _b\n")
    assert sorted(_private_crossings(tmp_path)) == ["helpers/core/c.py:1 helpers.core.a._b",
                                                    "scripts/x.py:1 helpers.core.a._b", "scripts/x.py:3 a._b"]


def _module_all(path: Path) -> set[str] | None:
    """The names of a module's ``__all__`` (None when it has none, or not as a literal list or tuple)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _outside_all(root: Path = ROOT) -> list[str]:
    """``file:line module.name`` for every name a product file imports from a ``helpers`` module with an ``__all__``
    that does not list it (a submodule of a package is not a name of it), and ``file:line module.*`` for every star
    import of a ``helpers`` module outside the modules that only present results (``helpers.study.plots``): a
    module's ``__all__`` names what others may use, and the store's code digest leaves ``__all__`` out
    (:func:`helpers.core.store.code_text`), which holds only while no module that computes star-imports."""
    files = {_module_name(f, root): f for f in (root / "helpers").rglob("*.py")}
    out = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = str(path.relative_to(root))
            me = _module_name(path, root) if top == "helpers" else ""
            pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                mod = node.module or ""
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                if not mod.startswith("helpers") or mod not in files:
                    continue
                names = _module_all(files[mod])
                for a in node.names:
                    if a.name == "*":
                        if not me.startswith("helpers.study.plots"):
                            out.append(f"{rel}:{node.lineno} {mod}.*")
                    elif names is not None and a.name not in names and f"{mod}.{a.name}" not in files:
                        out.append(f"{rel}:{node.lineno} {mod}.{a.name}")
    return out


def test_every_imported_name_is_in_its_modules_all():
    """A module's ``__all__`` names what other modules, the notebooks and the scripts may import from it."""
    bad = _outside_all()
    assert not bad, ("names imported from a module whose __all__ leaves them out (add them to it, or keep them in "
                     "their module), or star imports outside helpers.study.plots:\n" + "\n".join(bad))


def test_the_all_check_sees_a_name_outside_all_and_a_star_import(tmp_path):
    (tmp_path / "helpers" / "core").mkdir(parents=True)
    (tmp_path / "helpers" / "core" / "a.py").write_text('__all__ = ["b"]\n\n\ndef b():\n    pass\n\n\ndef c():\n    pass\n')
    (tmp_path / "helpers" / "core" / "d.py").write_text("from .a import b, c\nfrom helpers.core.a import *\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "x.py").write_text("from helpers.core.a import c\nfrom helpers.core import a\n")
    assert sorted(_outside_all(tmp_path)) == ["helpers/core/d.py:1 helpers.core.a.c", "helpers/core/d.py:2 helpers.core.a.*",
                                              "scripts/x.py:1 helpers.core.a.c"]


def test_importing_helpers_changes_no_setting():
    """No import side effects: importing every ``helpers`` module leaves the warning filters, the environment and
    the display formatters as they were (a notebook asks for what it wants: helpers.study.notebook.start)."""
    script = r"""
import importlib, os, pkgutil, sys, warnings
# the libraries' own import-time filters first: only what helpers' modules do counts
for lib in ("torch", "numpy", "pandas", "scipy.stats", "sklearn.linear_model", "sklearn.metrics", "matplotlib.pyplot",
            "seaborn", "transformers", "jaxtyping", "einops", "tqdm.auto", "IPython"):
    importlib.import_module(lib)
import helpers
before = (list(warnings.filters), dict(os.environ))
bad = []
for m in pkgutil.walk_packages(helpers.__path__, "helpers."):
    importlib.import_module(m.name)
    if (list(warnings.filters), dict(os.environ)) != before:
        bad.append(m.name)
        before = (list(warnings.filters), dict(os.environ))
print("CHANGED:" + ",".join(bad))
"""
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("CHANGED:"), r.stdout[-500:]
