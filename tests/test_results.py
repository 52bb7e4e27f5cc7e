"""The on-disk results store never serves a result computed by other code or for other parameters."""

from __future__ import annotations

import helpers.core.store as R


def test_cached_recomputes_for_other_params_and_other_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    assert R.cached("probe", {"seed": 1}, compute) == {"value": 1}
    assert R.cached("probe", {"seed": 1}, compute) == {"value": 1} and len(calls) == 1  # stored
    assert R.cached("probe", {"seed": 2}, compute) == {"value": 2}  # other parameters
    monkeypatch.setattr(R, "code_digest", lambda *modules: "another version of helpers")
    assert R.cached("probe", {"seed": 1}, compute) == {"value": 3}  # other code: recomputed, not served


def test_code_text_keeps_code_and_drops_comments_and_docstrings():
    """What a stored step's key reads of a module: rewording a docstring or a comment keeps it; any change to the code
    (a constant, a string that is not a docstring) does not."""
    src = '''"""Module."""\n\nX = 1  # one\n\n\ndef f(a):\n    """Doc."""\n    return "text" + a\n\n\nclass C:\n    """C."""\n'''
    same = src.replace("Module.", "Reworded.").replace("# one", "# a note").replace("Doc.", "Other.")
    same = same.replace('"""C."""', '"""A class."""')
    assert R.code_text(src) == R.code_text(same)
    for changed in (src.replace("X = 1", "X = 2"), src.replace('"text"', '"other"'), src.replace("return", "print(a)\n    return")):
        assert R.code_text(changed) != R.code_text(src)
    assert R.code_text('''def f():\n    """Only a docstring."""\n''') == R.code_text("def f():\n    pass\n")
    # a module's __all__ names what others may import; no computing module star-imports, so naming more keeps it
    named = '__all__ = ["f"]\n\n' + src
    assert R.code_text(named) == R.code_text(src) == R.code_text(named.replace('["f"]', '["f", "C"]'))
    assert R.code_text(src + '__all__ += ["C"]\n') == R.code_text(src + '__all__: list = ["C"]\n') == R.code_text(src)
    assert R.code_text(src + 'other = ["C"]\n') != R.code_text(src)
    assert R.code_text("def f():\n    __all__ = 1\n") != R.code_text("def f():\n    pass\n")  # only the module's


def test_code_digest_covers_the_helpers_source():
    R.code_digest.cache_clear()
    d = R.code_digest()
    assert len(d) == 16 and d == R.code_digest()
    files = sorted(R.HELPERS.rglob("*.py"))
    assert R.HELPERS / "core" / "prefix.py" in files and R.HELPERS / "study" / "results.py" in files


def test_a_step_depends_on_its_methods_imports_and_the_engine_not_on_presentation():
    deps = R.dependencies(frozenset({"helpers.protocols.saliency"}))  # a protocol asks the store for its runs
    assert {"helpers.protocols.saliency", "helpers.experiments.saliency", "helpers.study.stats"} <= set(deps)
    assert set(R.ENGINE) <= set(deps)  # how a loaded model computes, always
    assert not set(R.KEEPING) & set(deps)  # the store itself keeps results, it computes none
    assert not any(d.startswith(("helpers.study.plots", "helpers.study.claims", "helpers.study.paper",
                                 "helpers.study.report", "helpers.study.record")) for d in deps)
    assert not any(d.endswith(".isolation") for d in deps)  # another method
    assert "helpers.study.claims" in R.module_imports("helpers.protocols.saliency")  # imported, yet not followed
    assert R.step_modules() == frozenset()  # called from a test: no helpers module asked
    core = {f"helpers.core.{f.stem}" for f in (R.HELPERS / "core").glob("*.py") if f.stem != "__init__"}
    assert set(R.dependencies(frozenset())) >= core - set(R.KEEPING)  # then every core module keys the step
    from helpers.study.profiles import label_span_runs

    def run():  # a closure over a function of another module, as label_span_runs builds
        return label_span_runs

    assert R.step_modules(run) == {"helpers.study.profiles"}

    def cell(task, seed):  # a grid's cell two closures deep: the lambda run_grid hands the store calls this
        return run()

    assert R.step_modules(lambda: cell("sst2", 42)) == {"helpers.study.profiles"}  # followed to any depth


def _step_roots() -> list[str]:
    """Every module that may ask the store for a step (protocols, methods, study modules that compute)."""
    out = []
    for pkg in ("protocols", "experiments", "study"):
        out += [f"helpers.{pkg}.{f.stem}" for f in sorted((R.HELPERS / pkg).glob("*.py")) if f.stem != "__init__"]
    return [m for m in out if not R._skipped(m)]


def test_a_step_is_keyed_by_what_it_imports_not_by_all_of_core():
    """Editing the controls' training, the store or a figure keeps every stored step; editing the batched
    prediction misses every step whose method predicts; a language-model step does not hold the power study."""
    roots = _step_roots()
    assert len(roots) > 30
    deps = {m: set(R.dependencies(frozenset({m}))) for m in roots}
    for never in ("helpers.core.controls.training", "helpers.core.store", "helpers.core.accounting",
                  "helpers.study.plots", "helpers.study.claims"):
        assert not [m for m in roots if never in deps[m]], never
    for m in ("helpers.protocols.saliency", "helpers.protocols.isolation", "helpers.protocols.compression",
              "helpers.experiments.incontext_heads"):
        assert "helpers.core.predict" in deps[m] and "helpers.protocols.power" not in deps[m]
    assert sum("helpers.core.predict" in d for d in deps.values()) < len(roots)  # some steps never predict


def test_a_run_grid_cell_is_keyed_by_the_method_it_runs(tmp_path, monkeypatch, helpers_mirror):
    """run_grid asks the store from helpers/core; a cell's key still holds the method module whose function the
    cell calls, so editing that module recomputes the cell, and the cells are those of a by-hand loop."""
    import importlib

    from helpers.core.grid import run_grid
    from helpers.exercises.tiny import make_tiny_model

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    model = make_tiny_model("gpt2", seed=0)
    probe = helpers_mirror / "experiments" / "_probe_grid.py"
    method = "CALLS = []\n\n\ndef compute(task, seed):\n    CALLS.append(seed)\n    return len(task) * 1000 + seed\n"

    def grid():
        for f in (R.module_imports, R.dependencies, R.code_digest):
            f.cache_clear()
        mod = importlib.reload(importlib.import_module("helpers.experiments._probe_grid"))
        return run_grid("probe_grid", model, ["ab", "abc"], [1, 2], mod.compute, {"n": 4}), mod.CALLS

    probe.write_text(method)
    out, calls = grid()
    assert out == {("ab", 1): 2001, ("ab", 2): 2002, ("abc", 1): 3001, ("abc", 2): 3002} and len(calls) == 4
    assert grid()[1] == []  # all four served
    probe.write_text(method + "# a comment\n")
    assert grid()[1] == []  # a comment: still served
    probe.write_text(method.replace("1000", "1001"))
    assert len(grid()[1]) == 4  # the method changes: recomputed


def test_editing_a_figure_keeps_a_stored_step_and_editing_the_method_or_its_imports_misses(tmp_path, monkeypatch,
                                                                                            helpers_mirror):
    """A method module (asking the store from inside, as every method does) that imports a helper module and a
    figure module: the stored step is served after the figure's module changes, recomputed after the method's or
    its helper's changes."""
    import importlib

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    probe = helpers_mirror / "protocols" / "_probe_method.py"  # a protocol module, a method and a figure
    probe_dep = helpers_mirror / "experiments" / "_probe_dep.py"
    probe_fig = helpers_mirror / "study" / "plots" / "_probe_fig.py"
    method = ("from helpers.core.store import cached\nfrom helpers.experiments import _probe_dep\n"
              "from helpers.study.plots import _probe_fig\n\n\ndef run(compute):\n"
              "    return cached('probe_deps', {'seed': 1}, compute)\n")
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    def run():
        for f in (R.module_imports, R.dependencies, R.code_digest):
            f.cache_clear()
        return importlib.import_module("helpers.protocols._probe_method").run(compute)

    probe_dep.write_text("VALUE = 1\n")
    probe_fig.write_text("COLOUR = 'red'\n")
    probe.write_text(method)
    assert run() == 1 and run() == 1  # computed, then served
    probe_fig.write_text("COLOUR = 'blue'\n")  # a figure changes: the step is served
    assert run() == 1
    probe_dep.write_text("VALUE = 2\n")  # what the method imports changes: recomputed
    assert run() == 2 and run() == 2
    probe.write_text('"""A docstring."""\n' + method + "# a comment in the method\n")  # prose: still served
    assert run() == 2
    probe.write_text(method.replace("'seed': 1", "'seed': 1, 'n': 2"))  # the method's code changes: recomputed
    assert run() == 3


def test_cached_recomputes_for_other_weights_under_the_same_name(tmp_path, monkeypatch):
    """Two checkpoints that share a name (a fine-tune, re-quantised weights) never share a stored result."""
    import torch

    from helpers.exercises.tiny import make_tiny_model

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    a = make_tiny_model("gpt2", seed=0)
    b = make_tiny_model("gpt2", seed=0)
    assert a.cfg.icl_model_name == b.cfg.icl_model_name
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    params = {"model": a.cfg.icl_model_name, "seed": 1}
    assert R.cached("probe", params, compute, model=a) == 1
    assert R.cached("probe", params, compute, model=b) == 1  # identical weights: served
    with torch.no_grad():
        b.W_U[0, 0] += 1.0  # one value of another checkpoint under the same name
    assert R.cached("probe", params, compute, model=b) == 2
    assert R.cached("probe", params, compute, model=a) == 1


def test_cached_recomputes_when_the_data_change(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    import json
    import shutil

    from helpers.core.task_data import data_dir

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(data_dir() / "checksums.json", data / "checksums.json")
    monkeypatch.setenv("ICL_ANCHORS_DATA", str(data))
    assert data_dir() == data
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    assert R.cached("probe", {"task": "sst2"}, compute) == 1
    assert R.cached("probe", {"task": "sst2"}, compute) == 1
    sums = json.loads((data / "checksums.json").read_text())
    first = next(iter(sums))
    sums[first]["sha256"] = "0" * 64  # a rebuilt data file has another checksum
    (data / "checksums.json").write_text(json.dumps(sums))
    assert R.cached("probe", {"task": "sst2"}, compute) == 2


def test_a_notebook_tied_to_a_task_keys_its_results_by_the_task_it_ran(tmp_path, monkeypatch, capsys):
    """Notebooks 06 (TREC) and 07 (SST-2, AGNews) study their own tasks: with another task selected they say so,
    and their results go to the run of the tasks that ran, not to the selected tasks' folder."""
    from helpers.study.results import results_dir, run_key, studies_tasks

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("ICL_PROFILE", "smoke")
    monkeypatch.setenv("ICL_TASKS", "rotten_tomatoes")
    assert studies_tasks(["trec"], "the paper's task") == ("trec",)
    assert "studies TREC" in capsys.readouterr().out
    assert run_key() == "smoke-tasks-trec" and results_dir("m").name == "smoke-tasks-trec"
    monkeypatch.setenv("ICL_TASKS", "sst2,trec")
    assert studies_tasks(["trec"], "the paper's task") == ("trec",)  # among the selected: nothing moves
    assert capsys.readouterr().out == "" and run_key() == "smoke-tasks-sst2+trec"
