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
    monkeypatch.setattr(R, "code_digest", lambda: "another version of helpers")
    assert R.cached("probe", {"seed": 1}, compute) == {"value": 3}  # other code: recomputed, not served


def test_code_digest_covers_the_helpers_source():
    R.code_digest.cache_clear()
    d = R.code_digest()
    assert len(d) == 16 and d == R.code_digest()
    files = sorted(R.HELPERS.rglob("*.py"))
    assert R.HELPERS / "core" / "prefix.py" in files and R.HELPERS / "study" / "results.py" in files


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
