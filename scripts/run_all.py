"""Execute every notebook for each model and profile, then write the results report.

    python scripts/run_all.py --profile default --models google/gemma-3-270m smollm2

Executed notebooks go to results/<model>/<profile>/notebooks/, figures and
metrics to results/<model>/<profile>/{figures,metrics}/, and the summary to
results/RESULTS-<profile>.md (+ .html). A failing notebook is recorded and the
run goes on; the exit code is non-zero if any failed.

With several models, ``--jobs N`` (default: one per model, at most one per CPU
core) runs the models in parallel processes, each with its share of the cores
as torch threads: two single-threaded workers use two cores better than one
two-threaded worker. Every step is cached on disk (helpers.results.cached), so
an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from helpers.models import resolve_name
    from helpers.report import build_report

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=os.environ.get("ICL_PROFILE", "default"))
    ap.add_argument("--models", nargs="+", default=["google/gemma-3-270m"])
    ap.add_argument("--notebooks", nargs="*", help="subset, e.g. 00 03")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("ICL_RESULTS_DIR", ROOT / "results")))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    ap.add_argument("--jobs", type=int, default=0,
                    help="models run in parallel processes (0: one per model, at most one per CPU core)")
    ap.add_argument("--notebooks-dir", type=Path, default=ROOT / "notebooks", help=argparse.SUPPRESS)
    ap.add_argument("--runs-json", type=Path, help=argparse.SUPPRESS)  # worker mode: write runs, no report
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    signal.signal(signal.SIGTERM, _interrupt)  # kill <pid> stops workers and their notebook kernels too
    models = [resolve_name(m) for m in a.models]
    cores = os.cpu_count() or 1
    jobs = min(len(models), a.jobs or cores, cores) if a.runs_json is None else 1
    if jobs > 1:
        runs, failed = _parallel(a, models, jobs, cores)
    else:
        runs, failed = _serial(a, models)
    if a.runs_json is not None:
        a.runs_json.write_text(json.dumps({"runs": runs, "failed": failed}))
        return 1 if failed else 0
    total = time.perf_counter() - t_start
    note = (f"{len(models)} model(s), {jobs} parallel job(s) on {cores} CPU core(s); "
            f"wall time {total / 60:.1f} min")
    report = build_report(a.out, a.profile, models, runs, note=note)
    print(f"{note}\nreport: {report}")
    return 1 if failed else 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _parallel(a, models: list[str], jobs: int, cores: int) -> tuple[dict, int]:
    """One worker process per model (``jobs`` at a time), each with cores // jobs torch threads.

    Interrupted (Ctrl-C, SIGTERM), it stops its workers, which stop their notebook kernels.
    """
    threads = str(max(1, cores // jobs))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    runs: dict[str, dict] = {}

    with tempfile.TemporaryDirectory() as tmp:
        pending = list(models)
        active: list[tuple[str, subprocess.Popen, Path]] = []
        try:
            _dispatch(a, pending, active, jobs, threads, env, tmp, runs)
        finally:  # interrupted: stop the workers too (each stops its notebook kernel)
            for _, proc, _ in active:
                if proc.poll() is None:
                    proc.terminate()
            for _, proc, _ in active:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    failed = sum(1 for d in runs.values() for info in d.values() if info["status"] != "ok")
    return {m: runs[m] for m in models if m in runs}, failed


def _dispatch(a, pending, active, jobs, threads, env, tmp, runs) -> None:
    while pending or active:
        while pending and len(active) < jobs:
            m = pending.pop(0)
            out = Path(tmp) / f"{len(pending)}.json"
            cmd = [sys.executable, __file__, "--profile", a.profile, "--models", m, "--out", str(a.out),
                   "--timeout", str(a.timeout), "--runs-json", str(out), "--notebooks-dir", str(a.notebooks_dir)]
            if a.notebooks:
                cmd += ["--notebooks", *a.notebooks]
            print(f"worker for {m}: {threads} thread(s)", flush=True)
            active.append((m, subprocess.Popen(cmd, env=env), out))
        time.sleep(2)
        for item in list(active):
            m, proc, out = item
            if proc.poll() is None:
                continue
            active.remove(item)
            if out.exists():
                runs.update(json.loads(out.read_text())["runs"])
            else:
                runs[m] = {"worker": {"status": f"FAILED: worker exited with {proc.returncode}", "seconds": 0}}


def _serial(a, models: list[str]) -> tuple[dict, int]:
    from helpers.results import model_slug

    nbs = sorted(a.notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if a.notebooks:
        nbs = [p for p in nbs if p.name[:2] in a.notebooks]
    runs: dict[str, dict] = {}
    failed = 0
    for m in models:
        runs[m] = {}
        outdir = a.out / model_slug(m) / a.profile / "notebooks"
        outdir.mkdir(parents=True, exist_ok=True)
        os.environ.update(ICL_MODEL=m, ICL_PROFILE=a.profile, ICL_RESULTS_DIR=str(a.out))
        for nb_path in nbs:
            nb = nbformat.read(nb_path, as_version=4)
            t0 = time.perf_counter()
            status = "ok"
            try:
                NotebookClient(nb, timeout=a.timeout, kernel_name="python3",
                               resources={"metadata": {"path": str(nb_path.parent)}}).execute()
            except Exception as e:  # record and go on
                status = f"FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
                failed += 1
            dt = time.perf_counter() - t0
            nbformat.write(nb, outdir / nb_path.name)
            runs[m][nb_path.stem] = {"status": status, "seconds": round(dt, 1)}
            print(f"[{model_slug(m)}/{a.profile}] {nb_path.stem}: {status} ({dt:.0f}s)", flush=True)
    return runs, failed


if __name__ == "__main__":
    sys.exit(main())
