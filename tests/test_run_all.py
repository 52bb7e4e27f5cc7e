"""scripts/run_all.py: models in parallel workers, one report with both models side by side."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent

CELL = """
import os
from helpers.study.results import save_metrics, summary_row
threads = os.environ.get("OMP_NUM_THREADS")
save_metrics("99_probe", {"summary": [summary_row("probe claim", 1.0, os.environ["ICL_MODEL"], "replicates")],
                          "threads": threads, "model": os.environ["ICL_MODEL"], "profile": os.environ["ICL_PROFILE"]})
"""


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_run_all_writes_one_report_for_both_models(tmp_path, jobs):
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nb_dir / "99_probe.ipynb")
    out = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data")}
    env.pop("OMP_NUM_THREADS", None)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_all.py"), "--profile", "smoke", "--models",
                        "gemma", "smollm2", "--out", str(out), "--notebooks-dir", str(nb_dir), "--jobs", str(jobs)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    report = (out / "RESULTS-smoke.md").read_text()
    assert "probe claim" in report and f"{jobs} parallel job(s)" in report
    for slug, name in (("gemma-3-270m", "google/gemma-3-270m"), ("smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")):
        met = json.loads((out / slug / "smoke" / "metrics" / "99_probe.json").read_text())
        assert met["model"] == name  # each worker ran with its own model
        assert (out / slug / "smoke" / "notebooks" / "99_probe.ipynb").exists()
        if jobs == 2:  # each worker gets its share of the cores as torch threads
            assert met["threads"] == str(max(1, (os.cpu_count() or 1) // 2))
    # both models side by side in the summary table
    row = next(line for line in report.splitlines() if "probe claim" in line)
    assert "google/gemma-3-270m" in row and "SmolLM2" in row


# ----------------------------------------------------------------------------------- progress while running

def _write_nb(path: Path, sources: list[str]) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("a markdown cell is not counted"))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _run_all_streaming(args: list[str], timeout: float = 300, data_dir: Path | None = None
                       ) -> tuple[int, list[tuple[float, str]], str]:
    """Run scripts/run_all.py, collecting stdout lines with the time each arrived.

    ``data_dir``: the Jupyter data directory, where run_all signs the notebooks it writes (default: a fresh
    temporary one, so tests never touch this user's signature database)."""
    import tempfile
    import threading
    import time

    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="icl-test-jupyter-data-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_DATA_DIR": str(data_dir)}
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run_all.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    err: list[str] = []
    t_err = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t_err.start()
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    rc = proc.wait(timeout=timeout)
    t_err.join(timeout=10)
    return rc, lines, "".join(err)


def test_run_all_prints_progress_and_names_a_failure_at_once(tmp_path):
    """Two models in parallel workers on tiny notebooks (no model is loaded): per-model progress lines with the
    running notebook and cell, notebooks done / total, elapsed and time left; a failing cell is named (cell number
    and the error's first line) before the next notebook starts; whole prefixed lines; no kernel TCP warning."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    _write_nb(nb_dir / "00_slow.ipynb", ["import time; time.sleep(1.5)", "time.sleep(1.5)", "time.sleep(1.5)"])
    _write_nb(nb_dir / "01_broken.ipynb", ["x = 1", "raise ValueError('boom in the probe\\nsecond line')", "y = 2"])
    _write_nb(nb_dir / "02_quick.ipynb", ["z = 3"])
    out = tmp_path / "results"
    rc, lines, err = _run_all_streaming(["--profile", "smoke", "--models", "gemma", "smollm2", "--out", str(out),
                                         "--notebooks-dir", str(nb_dir), "--jobs", "2", "--progress-every", "0.5"])
    text = "\n".join(line for _, line in lines)
    assert rc == 1, text + err  # one notebook failed per model
    assert "without encryption" not in text + err
    for slug in ("gemma-3-270m", "smollm2-135m-instruct"):
        tag = f"[{slug}/smoke]"
        mine = [line for _, line in lines if line.startswith(tag)]
        # the plan: notebooks and an estimate of the whole model's run
        assert any("3 notebooks" in line and "about" in line for line in mine), text
        # a notebook starting: its code cells, notebooks done / total, elapsed and what is left
        start = next(i for i, line in enumerate(mine) if "00_slow: started" in line)
        assert "3 cells" in mine[start] and "0/3 notebooks done" in mine[start], mine[start]
        assert "elapsed" in mine[start] and "left" in mine[start], mine[start]
        # while it runs: which cell of how many
        assert any(re.search(r"00_slow: cell [123]/3 \(running ", line) and "0/3 notebooks done" in line
                   and "elapsed" in line and "left" in line for line in mine), text
        # finished notebooks: the old status line, then the count
        done = re.escape(tag) + r" 00_slow: ok \(\d+s\) \| 1/3 notebooks done"
        assert any(re.match(done, line) for line in mine), text
        # the failure, named at once: cell 2 of 3 and the error's first line, before the next notebook starts
        fail = next(i for i, line in enumerate(mine) if "01_broken: FAILED in cell 2/3" in line)
        assert mine[fail].endswith(": ValueError: boom in the probe"), mine[fail]  # the error's first line only
        assert "raise ValueError" in mine[fail]  # the cell's first line, to find it
        nxt = next(i for i, line in enumerate(mine) if "02_quick: started" in line)
        assert fail < nxt
        assert any(re.match(re.escape(tag) + r" 02_quick: ok \(\d+s\) \| 3/3 notebooks done", line) for line in mine)
        assert any("finished: 2 of 3 notebooks ok, 1 failed, in" in line for line in mine), text
        # durations of the notebooks that succeeded, for the next run's estimate
        rec = json.loads((out / slug / "smoke" / "durations.json").read_text())
        assert set(next(iter(rec.values()))) == {"00_slow", "02_quick"}
    # two workers printing at once: every line whole and prefixed
    for _, line in lines:
        assert re.match(r"(\[(gemma-3-270m|smollm2-135m-instruct)/smoke\] |worker for |run: |2 model\(s\)|report: )",
                        line), line
    # the report and its runs table as before
    report = (out / "RESULTS-smoke.md").read_text()
    assert "| google/gemma-3-270m | 01_broken | FAILED: CellExecutionError" in report
    assert "| google/gemma-3-270m | 00_slow | ok |" in report


def test_cell_timeout_comes_from_the_environment(tmp_path, monkeypatch):
    """ICL_CELL_TIMEOUT (as `make run CELL_TIMEOUT=...`) bounds each cell: a cell that runs longer fails its
    notebook, and the next notebook still runs."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    _write_nb(nb_dir / "00_hangs.ipynb", ["import time", "time.sleep(60)"])
    _write_nb(nb_dir / "01_quick.ipynb", ["z = 3"])
    monkeypatch.setenv("ICL_CELL_TIMEOUT", "3")
    rc, lines, err = _run_all_streaming(["--profile", "smoke", "--models", "gemma", "--out", str(tmp_path / "r"),
                                         "--notebooks-dir", str(nb_dir), "--jobs", "1"], timeout=120)
    text = "\n".join(line for _, line in lines)
    assert rc == 1, text + err
    assert re.search(r"00_hangs: FAILED .*(timed out|Timeout)", text, re.I), text
    assert "01_quick: ok" in text, text


def test_cell_timeout_setting(monkeypatch):
    """--timeout, else ICL_CELL_TIMEOUT, else the profile's; the paper profile's is longer than a whole notebook."""
    from helpers.study.profile_table import PROFILES
    from helpers.study.profiles import cell_timeout

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from timing import builtin_seconds

    monkeypatch.delenv("ICL_CELL_TIMEOUT", raising=False)
    assert cell_timeout("default") == 7200 and cell_timeout("smoke") == 3600
    # a paper cell must not be cut off: its default exceeds the built-in estimate of a whole paper notebook
    longest = max(builtin_seconds(m, "paper", nb) for m in ("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")
                  for nb in ("00_icl_setting", "01_saliency_flow", "02_shallow_isolation", "03_deep_aucroc",
                             "04_anchor_reweighting", "05_context_compression", "07_incontext_heads"))
    assert cell_timeout("paper") == PROFILES["paper"].cell_timeout >= longest
    monkeypatch.setenv("ICL_CELL_TIMEOUT", "120")
    assert cell_timeout("paper") == 120 and cell_timeout("paper", 30) == 30  # --timeout wins over the env
    for bad in ("0", "-5", "soon", "1.5"):
        monkeypatch.setenv("ICL_CELL_TIMEOUT", bad)
        with pytest.raises(ValueError, match="ICL_CELL_TIMEOUT"):
            cell_timeout("default")


# ----------------------------------------------------------------------------------- executed notebooks are trusted

def _run_all_module(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("run_all_under_test", ROOT / "scripts" / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sign_notebook_trusts_the_file_as_written(tmp_path, monkeypatch):
    """sign_notebook records the file's content in the notary's database, as `jupyter trust` does: the notebook read
    back from disk checks as trusted with that notary, not with another key, and not once its outputs change."""
    from nbformat.sign import NotebookNotary

    run_all = _run_all_module(monkeypatch)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("view")])
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<script>render()</script>"})]
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    mine = NotebookNotary(data_dir=str(tmp_path / "mine"), db_file=str(tmp_path / "mine.db"))
    (tmp_path / "mine").mkdir()
    assert not mine.check_signature(nbformat.read(path, as_version=4))
    run_all.sign_notebook(path, mine)
    assert mine.check_signature(nbformat.read(path, as_version=4))
    (tmp_path / "other").mkdir()
    other = NotebookNotary(data_dir=str(tmp_path / "other"), db_file=str(tmp_path / "other.db"))
    assert not other.check_signature(nbformat.read(path, as_version=4))
    changed = nbformat.read(path, as_version=4)
    changed.cells[0].outputs[0].data["text/html"] = "<script>other()</script>"
    assert not mine.check_signature(changed)


def test_run_all_signs_the_executed_notebooks(tmp_path):
    """make run writes executed notebooks that open trusted (circuitsvis views and tqdm bars shown): each copy is
    signed in the Jupyter data directory's notary, the one JupyterLab checks, failed notebooks included. The copies
    are not paired to a .py (jupytext.toml pairs every notebook that does not say otherwise)."""
    from nbformat.sign import NotebookNotary

    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    _write_nb(nb_dir / "00_html.ipynb", ["from IPython.display import HTML; HTML('<b>view</b>')"])
    _write_nb(nb_dir / "01_broken.ipynb", ["raise ValueError('boom')"])
    out, data = tmp_path / "results", tmp_path / "jupyter-data"
    rc, lines, err = _run_all_streaming(["--profile", "smoke", "--models", "gemma", "--out", str(out),
                                         "--notebooks-dir", str(nb_dir), "--jobs", "1"], data_dir=data)
    text = "\n".join(line for _, line in lines)
    assert rc == 1, text + err
    assert "not signed" not in text, text
    notary = NotebookNotary(data_dir=str(data))
    for name in ("00_html", "01_broken"):
        nb = nbformat.read(out / "gemma-3-270m" / "smoke" / "notebooks" / f"{name}.ipynb", as_version=4)
        assert nb.cells[0].outputs, name  # executed
        assert notary.check_signature(nb), f"{name} is not trusted"
        assert nb.metadata["jupytext"]["formats"] == "ipynb"  # a result: saving it writes no paired .py


def test_a_notebook_with_its_own_model_runs_once_as_that_model(tmp_path):
    """Notebook 09 studies the control trained here: it runs once, as the model "control", never per model."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "scripts" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    for name in ("00_setting.ipynb", "07_heads.ipynb", "09_control.ipynb"):
        (tmp_path / name).write_text("{}")
    a = argparse.Namespace(notebooks=None, notebooks_dir=tmp_path)
    names = lambda nbs: [p.name[:2] for p in nbs]
    assert names(run_all.selected_notebooks(a)) == ["00", "07", "09"]
    assert names(run_all.selected_notebooks(a, "google/gemma-3-270m")) == ["00", "07"]
    assert names(run_all.selected_notebooks(a, "control")) == ["09"]
    assert run_all.with_own_models(a, ["google/gemma-3-270m", "smollm2"]) == ["google/gemma-3-270m", "smollm2", "control"]
    a.notebooks = ["00", "07"]  # notebook 09 not selected: no control run
    assert run_all.with_own_models(a, ["google/gemma-3-270m"]) == ["google/gemma-3-270m"]


ACCOUNTED = """
import torch
from helpers.exercises.tiny import make_tiny_model
from helpers.core.store import cached
model = make_tiny_model("gpt2")
toks = torch.randint(100, 5000, (2, 9), generator=torch.Generator().manual_seed(0))
def step():
    with torch.inference_mode():
        return model(toks).sum()
cached("probe_step", {"n": 9}, step, cache=False)
"""


def test_account_writes_the_table_per_notebook_and_step(tmp_path):
    """--account (make run ACCOUNT=1): each notebook's ledger counts its forwards under the stored step that ran
    them, and the run writes accounting.md with FLOPs, GFLOP/s and the share of the peak measured in the kernel;
    without --account nothing is counted."""
    from helpers.core.accounting import forward_flops
    from helpers.exercises.tiny import make_tiny_model

    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    _write_nb(nb_dir / "00_probe.ipynb", [ACCOUNTED])
    for flag, out in (([], tmp_path / "plain"), (["--account"], tmp_path / "counted")):
        rc, lines, err = _run_all_streaming(["--profile", "smoke", "--models", "gemma", "--out", str(out),
                                             "--notebooks-dir", str(nb_dir), "--jobs", "1", *flag], timeout=300)
        assert rc == 0, "\n".join(line for _, line in lines) + err
    folder = tmp_path / "counted" / "gemma-3-270m" / "smoke"
    assert not (tmp_path / "plain" / "gemma-3-270m" / "smoke" / "accounting").exists()
    rows = json.loads((folder / "accounting.json").read_text())
    probe = next(r for r in rows if r["step"] == "probe_step")
    expected = forward_flops(make_tiny_model("gpt2").cfg, 2, 9)
    assert probe["tflop"] * 1e12 == pytest.approx(expected) and probe["positions"] == 18
    total = next(r for r in rows if r["step"] == "total")
    assert total["wall_s"] > 0 and total["peak_gflop_s"] > 0
    assert "probe_step" in (folder / "accounting.md").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl PR_SET_PDEATHSIG is Linux's")
def test_a_killed_parent_takes_the_run_with_it(tmp_path):
    """`kill -9` of `make` cannot pass a signal on; run_all asks the kernel for SIGTERM when its parent dies, and
    its SIGTERM handler stops the run (here a marker stands for that handler)."""
    import signal
    import subprocess
    import time

    marker, ready = tmp_path / "stopped", tmp_path / "ready"
    child = (f"import signal, sys, time; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import run_all\n"
             f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').write('x'), sys.exit(0)))\n"
             f"run_all.stop_with_parent()\nopen({str(ready)!r}, 'w').write('x')\ntime.sleep(60)\n")
    parent = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent])
    for _ in range(600):  # until the child has imported run_all and asked for the signal
        if ready.exists():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(100):
        if marker.exists():
            break
        time.sleep(0.1)
    assert marker.exists(), "the run went on after its parent was killed"


def test_the_last_progress_line_counts_what_finished(monkeypatch, capsys):
    """The closing line adds up to the total: notebooks ok, failed, stopped and not run, never a notebook that
    ended in failure or was never started counted as finished (e.g. after the run's parent was killed)."""
    run_all = _run_all_module(monkeypatch)
    est = {stem: (1.0, "measured") for stem in ("00_a", "01_b", "02_c", "03_d")}
    p = run_all.Progress("[m/smoke]", est, 0)
    p.finished("00_a", "ok", 1.0)
    p.finished("01_b", "FAILED: DeadKernelError: Kernel died", 1.0)
    assert p.summary() == "1 of 4 notebooks ok, 1 failed, 2 not run"
    p.finished("02_c", "stopped (SIGTERM)", 1.0)
    assert p.summary() == "1 of 4 notebooks ok, 1 failed, 1 stopped, 1 not run"
    p.finished("03_d", "ok", 1.0)
    p.close()
    assert "[m/smoke] finished: 2 of 4 notebooks ok, 1 failed, 1 stopped, in " in capsys.readouterr().out
