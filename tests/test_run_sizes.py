"""Every run size (and the tasks each study runs) of every profile, held to the values recorded in tests/data/run_sizes.json.

A run's sizes (seeds, inputs, batch sizes, layers) decide its numbers, so they change only on purpose: each
``*_sizes(profile)`` function of ``helpers`` (found by name, so a new one joins by itself) is called on the three
profiles and compared, field by field, with the recorded table. A refactor of where sizes live must leave this
table as it is; a deliberate change of a size rewrites it (``ICL_WRITE_RUN_SIZES=1 pytest tests/test_run_sizes.py``)
and shows in the diff beside the records it stales.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import os
from pathlib import Path

from helpers.study.profile_table import PROFILES

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "run_sizes.json"


def sizes_functions() -> dict[str, object]:
    """``{function name: function}`` for every module-level ``*_sizes(profile)`` and ``*_tasks(profile)`` (the tasks
    a study runs) function of ``helpers`` (by name
    alone, so that a function may move to another module and keep its recorded sizes)."""
    out = {}
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        names = [n.name for n in ast.parse(path.read_text()).body
                 if isinstance(n, ast.FunctionDef) and n.name.endswith(("_sizes", "_tasks")) and not n.name.startswith("_")
                 and [a.arg for a in n.args.args] == ["profile"]
                 and "str" not in ast.unparse(n.args.args[0].annotation or ast.Constant(None))]  # a Profile, not a name
        if names:
            mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = importlib.import_module(mod)
            for n in names:
                if n in out:
                    raise AssertionError(f"two sizes functions named {n}: {out[n].__module__} and {mod}")
                out[n] = getattr(module, n)
    return out


def plain(x):
    """A sizes value as JSON: dataclasses as their fields, tuples as lists, mapping keys as strings."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def current() -> dict:
    return {f"{spec} {name}": plain(fn(profile)) for spec, fn in sizes_functions().items()
            for name, profile in PROFILES.items()}


def test_every_profiles_run_sizes_are_the_recorded_ones():
    now = current()
    if os.environ.get("ICL_WRITE_RUN_SIZES") == "1":
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(now) == sorted(recorded), ("sizes functions added or removed: "
                                             f"{sorted(set(now) ^ set(recorded))}; rewrite the table on purpose "
                                             "(ICL_WRITE_RUN_SIZES=1)")
    differ = {k: (recorded[k], now[k]) for k in now if now[k] != recorded[k]}
    assert not differ, f"run sizes changed (recorded, now): {differ}"


def test_the_sizes_functions_are_found_and_take_a_profile():
    found = sizes_functions()
    assert "saliency_sizes" in found and "after_sizes" in found and "eval_sizes" in found
    assert all(list(inspect.signature(f).parameters) == ["profile"] for f in found.values())
    assert len(found) >= 20  # every protocol with run sizes, the study's own and core's evaluation sizes


def _is_name(node) -> bool:
    """A profile's name as code reads it: ``x.name``, or a variable called ``name``/``profile``."""
    return ((isinstance(node, ast.Attribute) and node.attr == "name")
            or (isinstance(node, ast.Name) and node.id in ("name", "profile", "profile_name")))


def _branches_on_name(node, names: set[str]) -> bool:
    """``profile.name == "smoke"`` (or ``in ("smoke", ...)``), or ``{"smoke": ...}.get(profile.name, ...)``."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        consts = sides + [e for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
        return (any(_is_name(x) for x in sides)
                and any(isinstance(c, ast.Constant) and c.value in names for c in consts))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Dict) and node.args and _is_name(node.args[0])):
        return any(isinstance(k, ast.Constant) and k.value in names for k in node.func.value.keys)
    return False


def _name_branches(root: Path) -> list[str]:
    """``file:line`` of every comparison with a profile's name (``"smoke"``, ``"default"``, ``"paper"``) or lookup
    keyed by one in ``helpers``, outside the table (helpers/study/profile_table.py) and the modules that only
    present results (a report's wording may name the profile it reports)."""
    from helpers.core.store import PRESENTATION

    names = {"smoke", "default", "paper"}
    out = []
    for path in sorted((root / "helpers").rglob("*.py")):
        mod = ".".join(path.relative_to(root).with_suffix("").parts)
        if path.name == "profile_table.py" or any(mod == p or mod.startswith(p + ".") for p in PRESENTATION):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if _branches_on_name(node, names):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_no_code_below_the_table_branches_on_a_profiles_name(tmp_path):
    """Sizes are data: a method reads its row of RUN_SIZES (helpers/study/profile_table.py), never the name of the
    profile it runs under."""
    assert _name_branches(ROOT) == []
    (tmp_path / "helpers" / "protocols").mkdir(parents=True)
    (tmp_path / "helpers" / "protocols" / "x.py").write_text(
        'def sizes(profile):\n    n = {"smoke": 2}.get(profile.name, 8)\n    return 4 if profile.name == "paper" else n\n')
    assert _name_branches(tmp_path) == ["helpers/protocols/x.py:2", "helpers/protocols/x.py:3"]


# training batches are a method's hyperparameters, not how its passes are cut: the paper's re-weighting trains one
# example per step, the controls' training batch is part of their definition (helpers/core/controls/training.py)
TRAINING_BATCHES = {("helpers/experiments/reweighting.py", "batch_size"), ("helpers/protocols/reweighting.py", "batch"),
                    ("helpers/core/controls/training.py", "batch")}


def _batch_literals(root: Path) -> list[str]:
    """``file:line name=value`` of every batch size written as a number in ``helpers`` (a parameter's default or a
    call's keyword) outside the table (helpers/study/profile_table.py) and the engine's caps (helpers/core/sizing.py).
    A batch of one prompt (``batch_size=1`` beside a one-prompt list) is not a size; neither is a training batch."""
    out = []
    for path in sorted((root / "helpers").rglob("*.py")):
        rel = str(path.relative_to(root))
        if path.name in ("profile_table.py", "sizing.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                positional = a.posonlyargs + a.args
                pairs += list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
                pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
                pairs = [(arg.arg, d) for arg, d in pairs]
            elif isinstance(node, ast.Call):
                pairs = [(k.arg, k.value) for k in node.keywords if k.arg]
            for name, value in pairs:
                if ("batch" in name and isinstance(value, ast.Constant) and isinstance(value.value, int)
                        and value.value != 1 and (rel, name) not in TRAINING_BATCHES):
                    out.append(f"{rel}:{value.lineno} {name}={value.value}")
    return out


def test_no_batch_size_is_written_below_the_table(tmp_path):
    """A batch size is decided once: a study's protocols read theirs from RUN_SIZES, every other function defaults
    to one of the engine's named caps (helpers.core.sizing.FORWARD_BATCH, HEAVY_BATCH, CONTROL_BATCH,
    CONTROL_HEAVY_BATCH), which sizing() lowers to what fits a GPU."""
    assert _batch_literals(ROOT) == []
    (tmp_path / "helpers" / "experiments").mkdir(parents=True)
    (tmp_path / "helpers" / "experiments" / "x.py").write_text(
        "def f(model, batch_size=16, *, eval_batch_size: int = 8):\n    return g(model, [p], batch_size=1)\n\n\n"
        "def h(model):\n    return g(model, ps, batch_size=64)\n")
    assert _batch_literals(tmp_path) == ["helpers/experiments/x.py:1 batch_size=16",
                                         "helpers/experiments/x.py:1 eval_batch_size=8",
                                         "helpers/experiments/x.py:6 batch_size=64"]
