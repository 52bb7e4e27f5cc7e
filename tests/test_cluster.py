"""scripts/run_all.py --executor slurm: one submitit job per model and notebook.

The jobs run for real, as separate processes through submitit's local executor (``--cluster local``), on tiny
notebooks that load no model; the Slurm path is checked through the sbatch file submitit would submit, without
submitting anything.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os
from helpers.study.results import save_metrics, summary_row
name = "{name}"
if os.environ.get("SIDE_FILE"):
    with open(os.environ["SIDE_FILE"], "a") as f:
        f.write(name + "\\n")
save_metrics(name, {{"summary": [summary_row("claim of " + name, 1.0, os.environ["ICL_MODEL"], "replicates")],
                     "claims": [{{"sentence": name + " ran for " + os.environ["ICL_MODEL"]}}],
                     "profile": os.environ["ICL_PROFILE"], "runner": os.getppid()}})
"""


def _write_nb(path: Path, sources: list[str]) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _probe(nb_dir: Path, name: str, extra: list[str] = ()) -> None:
    _write_nb(nb_dir / f"{name}.ipynb", [PROBE.format(name=name), *extra])


def _env(tmp_path: Path, **extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"), **extra}
    env.pop("OMP_NUM_THREADS", None)
    return env


def _run_all(args: list[str], env: dict, timeout: float = 300) -> tuple[int, str, int]:
    """(exit code, stdout + stderr, the process id of run_all)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run_all.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out, proc.pid


def _report_content(path: Path) -> list[str]:
    """The report without what differs between two runs of the same notebooks: seconds, the run note."""
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("Run: "):
            continue
        cells = line.split(" | ")
        if len(cells) == 5 and re.fullmatch(r"\d\d_\w+", cells[1]):  # a runs-table row: model, notebook, status, s, run
            cells[3] = "<seconds>"
        lines.append(" | ".join(cells))
    return lines


SPAN = """
import os, time
with open(os.environ["SIDE_FILE"], "a") as f:
    f.write(f"start {time.time()}\\n")
time.sleep(1.5)
with open(os.environ["SIDE_FILE"], "a") as f:
    f.write(f"end {time.time()}\\n")
"""




@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One local run and one run of submitit jobs (``--cluster local --jobs 1``) of the same two notebooks, both with
    ``--account``: each notebook saves its metrics, spans a short sleep and counts one stored step. Three tests read
    these two runs (each run starts a kernel per notebook, the slow part)."""
    from test_run_all import ACCOUNTED

    tmp = tmp_path_factory.mktemp("cluster")
    nb_dir = tmp / "nbs"
    nb_dir.mkdir()
    for name in ("00_first", "01_second"):
        _write_nb(nb_dir / f"{name}.ipynb", [PROBE.format(name=name), SPAN, ACCOUNTED])
    base = ["--profile", "smoke", "--models", "gemma", "--notebooks-dir", str(nb_dir), "--progress-every", "2",
            "--account"]
    local = _run_all([*base, "--out", str(tmp / "local")], _env(tmp, SIDE_FILE=str(tmp / "local.txt")))
    jobs = _run_all([*base, "--out", str(tmp / "jobs"), "--executor", "slurm", "--cluster", "local", "--jobs", "1"],
                    _env(tmp, SIDE_FILE=str(tmp / "jobs.txt")))
    return tmp, local, jobs


@pytest.mark.slow
def test_slurm_executor_runs_each_notebook_as_its_own_job_and_reports_as_the_local_run(two_runs):
    """Two notebooks, two submitit jobs (separate processes, neither of them run_all), and the same report, runs
    and metrics as the local executor gives for the same notebooks."""
    tmp_path, (rc, text, local_pid), (rc_jobs, text_jobs, parent) = two_runs
    assert rc == 0, text
    rc, text = rc_jobs, text_jobs
    assert rc == 0, text
    assert "2 job(s) as local processes, at most" in text and "2/2 jobs done (0 failed)" in text, text
    assert re.search(r"\[gemma-3-270m/smoke\] 00_first: ok \(\d+s, job \d+\)", text), text
    folder = {k: tmp_path / k / "gemma-3-270m" / "smoke" for k in ("local", "jobs")}
    met = {k: {nb: json.loads((folder[k] / "metrics" / f"{nb}.json").read_text()) for nb in ("00_first", "01_second")}
           for k in folder}
    # each notebook's kernel was started by its own job process: not run_all, not the other job
    runners = [met["jobs"][nb].pop("runner") for nb in ("00_first", "01_second")]
    assert len(set(runners)) == 2 and parent not in runners, (runners, parent)
    assert {met["local"][nb].pop("runner") for nb in ("00_first", "01_second")} == {local_pid}  # for contrast
    assert met["jobs"] == met["local"]
    statuses = {k: {nb: info["status"] for nb, info in json.loads((folder[k] / "runs.json").read_text()).items()}
                for k in folder}
    assert statuses["jobs"] == statuses["local"] == {"00_first": "ok", "01_second": "ok"}
    assert _report_content(tmp_path / "jobs" / "RESULTS-smoke.md") == _report_content(tmp_path / "local" / "RESULTS-smoke.md")
    assert "submitit job(s) on local" in (tmp_path / "jobs" / "RESULTS-smoke.md").read_text()
    for k in folder:
        assert (folder[k] / "notebooks" / "01_second.ipynb").exists()
        assert set(json.loads((folder[k] / "durations.json").read_text()).popitem()[1]) == {"00_first", "01_second"}
    assert list((tmp_path / "jobs" / "slurm-logs").glob("*_log.out"))


@pytest.mark.slow
def test_a_failed_job_is_named_with_its_log_and_a_rerun_resubmits_only_it(tmp_path):
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    side = tmp_path / "ran.txt"
    _probe(nb_dir, "00_fine")
    _probe(nb_dir, "01_broken", ["raise ValueError('boom in the probe')"])
    args = ["--profile", "smoke", "--models", "gemma", "--notebooks-dir", str(nb_dir), "--out", str(tmp_path / "r"),
            "--executor", "slurm", "--cluster", "local", "--progress-every", "2"]
    rc, text, _ = _run_all(args, _env(tmp_path, SIDE_FILE=str(side)))
    assert rc == 1, text
    m = re.search(r"failed: google/gemma-3-270m 01_broken \(job \d+\): FAILED: .*boom in the probe.*; log: (\S+)", text)
    assert m, text
    assert Path(m.group(1)).exists() and "boom in the probe" in Path(m.group(1)).read_text()
    assert "failed: google/gemma-3-270m 00_fine" not in text
    report = (tmp_path / "r" / "RESULTS-smoke.md").read_text()
    assert "| google/gemma-3-270m | 00_fine | ok |" in report and "| google/gemma-3-270m | 01_broken | FAILED: " in report
    assert sorted(side.read_text().split()) == ["00_fine", "01_broken"]

    _probe(nb_dir, "01_broken")  # fixed
    rc, text, _ = _run_all(args, _env(tmp_path, SIDE_FILE=str(side)))
    assert rc == 0, text
    assert "not resubmitted, last run ok (runs.json): 00_fine" in text, text
    assert "1 job(s) as local processes" in text, text
    assert sorted(side.read_text().split()) == ["00_fine", "01_broken", "01_broken"]  # 00_fine did not run again
    runs = json.loads((tmp_path / "r" / "gemma-3-270m" / "smoke" / "runs.json").read_text())
    assert {nb: info["status"] for nb, info in runs.items()} == {"00_fine": "ok", "01_broken": "ok"}
    report = (tmp_path / "r" / "RESULTS-smoke.md").read_text()
    assert re.search(r"\| google/gemma-3-270m \| 00_fine \| ok \| [\d.]+ \| earlier \(", report), report
    assert re.search(r"\| google/gemma-3-270m \| 01_broken \| ok \| [\d.]+ \| this run \|", report), report
    assert "claim of 00_fine" in report and "claim of 01_broken" in report

    rc, text, _ = _run_all([*args, "--resubmit-all"], _env(tmp_path, SIDE_FILE=str(side)))
    assert rc == 0 and "2 job(s) as local processes" in text, text
    assert sorted(side.read_text().split()).count("00_fine") == 2


@pytest.mark.slow
def test_a_signal_cancels_the_jobs_and_reports_what_finished(tmp_path):
    """SIGTERM to run_all: the running job is cancelled and its kernel shut down, the finished notebook is in the
    report, exit 128 + SIGTERM."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    pid_file = tmp_path / "kernel.pid"
    _probe(nb_dir, "00_quick")
    _write_nb(nb_dir / "01_slow.ipynb", [f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))",
                                         "time.sleep(300)"])
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run_all.py"), "--profile", "smoke", "--models",
                             "gemma", "--notebooks-dir", str(nb_dir), "--out", str(out), "--executor", "slurm",
                             "--cluster", "local"], env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pid_file.exists(), proc.kill() or proc.communicate()[0]
    runs = out / "gemma-3-270m" / "smoke" / "runs.json"
    while not runs.exists() and time.monotonic() < deadline:  # the quick notebook has finished
        time.sleep(0.5)
    time.sleep(2)  # the parent has seen it end
    kernel = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM.value, text
    with pytest.raises(ProcessLookupError):  # the kernel is gone (not left running its 300 s cell)
        for _ in range(40):
            os.kill(kernel, 0)
            time.sleep(0.5)
    assert "run_all: SIGTERM received: stopping" in text
    assert "stopped: google/gemma-3-270m: 1/2 notebooks finished (00_quick); stopped in 01_slow" in text, text
    report = (out / "RESULTS-smoke.md").read_text()
    assert "| google/gemma-3-270m | 00_quick | ok |" in report and "| google/gemma-3-270m | 01_slow | stopped (" in report
    assert "stopped by SIGTERM" in report


def test_the_sbatch_file_asks_for_the_gpus_time_memory_and_partition(tmp_path, monkeypatch):
    """The sbatch script submitit writes for a model's jobs, made without submitting anything (a stand-in srun on
    PATH lets submitit's Slurm executor start): the flags, else the defaults from the profile's cell timeout and
    preflight's RAM estimate."""
    from helpers.study.profiles import cell_timeout

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # make_executor extends it
    monkeypatch.delenv("ICL_CELL_TIMEOUT", raising=False)
    from test_run_all import _run_all_module

    run_all = _run_all_module(monkeypatch)

    def sbatch(profile: str, model: str, **flags) -> list[str]:
        a = argparse.Namespace(profile=profile, timeout=cell_timeout(profile), out=tmp_path / "results",
                               cluster="slurm", **{f"slurm_{k}": None for k in ("partition", "gpus", "time_min",
                                                                                  "mem_gb", "cpus")})
        for k, v in flags.items():
            setattr(a, f"slurm_{k}", v)
        ex = run_all.make_executor(a, model)
        return ex._executor._make_submission_file_text("python -u -m submitit.core._submit x", "uid").splitlines()

    paper = sbatch("paper", "EleutherAI/gpt-j-6B", partition="gpu")
    assert "#SBATCH --gpus-per-node=1" in paper
    assert "#SBATCH --time=2880" in paper  # two 24 h cell timeouts, capped at 48 h
    assert "#SBATCH --mem=75GB" in paper  # preflight: 2 GB + 12 bytes per parameter
    assert "#SBATCH --partition=gpu" in paper
    assert "#SBATCH --cpus-per-task=4" in paper
    assert any(line.startswith("export PYTHONPATH=") and str(ROOT / "scripts") in line for line in paper)
    assert not list((tmp_path / "results" / "slurm-logs").glob("*.pkl"))  # nothing submitted

    given = sbatch("paper", "gpt2-xl", partition="a100", gpus=2, time_min=90, mem_gb=30, cpus=8)
    for line in ("#SBATCH --gpus-per-node=2", "#SBATCH --time=90", "#SBATCH --mem=30GB", "#SBATCH --partition=a100",
                 "#SBATCH --cpus-per-task=8"):
        assert line in given, given
    smoke = sbatch("smoke", "google/gemma-3-270m")
    assert "#SBATCH --time=120" in smoke and "#SBATCH --mem=6GB" in smoke  # two 1 h cell timeouts; 2 GB + 12 x 268M
    assert not any("gpus" in line or "--partition" in line for line in smoke)  # CPU profiles: no GPU, the default
    assert "#SBATCH --gpus-per-node=1" in sbatch("smoke", "gpt2-xl", gpus=1)


@pytest.mark.parametrize("args,message", [
    (["--executor", "bogus"], "argument --executor: invalid choice: 'bogus'"),
    (["--cluster", "local"], "--cluster applies only with --executor slurm: add --executor slurm"),
    (["--slurm-gpus", "1", "--resubmit-all"], "--slurm-gpus, --resubmit-all apply only with --executor slurm"),
    (["--executor", "slurm", "--slurm-mem-gb", "0"], "--slurm-mem-gb=0: give a whole number of at least 1"),
])
def test_executor_arguments_are_checked_before_anything_runs(tmp_path, args, message):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_all.py"), "--models", "gemma", "--out",
                        str(tmp_path / "r"), *args], env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_slurm_without_srun_says_where_to_run_it(tmp_path, monkeypatch):
    """--cluster slurm where there is no Slurm: exit 2 before anything is submitted, naming --cluster local."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    _probe(nb_dir, "00_probe")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "srun").exists())
    rc, text, _ = _run_all(["--profile", "smoke", "--models", "gemma", "--notebooks-dir", str(nb_dir), "--out",
                            str(tmp_path / "r"), "--executor", "slurm"], _env(tmp_path, PATH=path))
    assert rc == 2, text
    assert "cannot submit to slurm" in text and "--cluster local" in text and "nothing was submitted" in text


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_passes_the_executor_flags_only_when_set(tmp_path):
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)

    def run_line(*args: str) -> str:
        r = subprocess.run(["make", "--no-print-directory", "-n", "run", "PYTHON=python3", *args], cwd=tmp_path,
                           env={k: v for k, v in os.environ.items() if not k.startswith("ICL_")},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return next(line for line in r.stdout.splitlines() if "scripts/run_all.py" in line)

    assert run_line().endswith("--jobs 0")  # as before: no executor flags
    line = run_line("EXECUTOR=slurm", "CLUSTER=local", "PROFILE=smoke")
    assert line.endswith("--executor slurm --cluster local"), line
    line = run_line("EXECUTOR=slurm", "PROFILE=paper", "SLURM_PARTITION=gpu", "SLURM_GPUS=1", "SLURM_TIME_MIN=600",
                    "SLURM_MEM_GB=80")
    assert line.endswith("--executor slurm --slurm-partition gpu --slurm-gpus 1 --slurm-time-min 600 "
                         "--slurm-mem-gb 80"), line


@pytest.mark.slow
def test_account_under_slurm_counts_each_job_and_writes_one_table(two_runs):
    """--account with --executor slurm: each job counts its own notebook into its ledger, and run_all writes the
    accounting table of the model once every job has ended, as the local run does."""
    tmp_path, _, (rc, text, _) = two_runs
    assert rc == 0, text
    folder = tmp_path / "jobs" / "gemma-3-270m" / "smoke"
    assert "accounting: " in text and (folder / "accounting.md").exists(), text
    rows = json.loads((folder / "accounting.json").read_text())
    for nb in ("00_first", "01_second"):
        assert any(r["notebook"] == nb and r["step"] == "probe_step" and r["positions"] == 18 for r in rows), rows
        assert next(r for r in rows if r["notebook"] == nb and r["step"] == "total")["wall_s"] > 0


@pytest.mark.slow
def test_local_cluster_runs_at_most_jobs_processes_at_once(two_runs):
    """--cluster local starts jobs as slots free, --jobs at a time (default one per core): with --jobs 1 the
    notebooks never overlap (each would load a model; all at once could exhaust this machine's memory)."""
    tmp_path, _, (rc, text, _) = two_runs
    assert rc == 0 and "at most 1 at once" in text, text
    events = [(float(t), kind) for kind, t in (line.split() for line in (tmp_path / "jobs.txt").read_text().splitlines()
                                               if line.startswith(("start ", "end ")))]
    running = peak = 0
    for _, kind in sorted(events):
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 1 and len(events) == 4
