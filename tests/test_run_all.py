"""scripts/run_all.py: models in parallel workers, one report with both models side by side."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent

CELL = """
import os
from helpers.results import save_metrics, summary_row
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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
