"""``make run`` on this machine: one worker process per model (``--jobs`` at a time, each with its share of the
cores), or the models one after another in this process (scripts/run_all.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_common import OWN_MODEL, ROOT, STOP, say, selected_notebooks, selected_tasks, timing
from run_notebook import Progress, execute


def announce(a, models: list[str], jobs: int, cores: int) -> None:
    """One line before anything runs: how much, and about how long."""
    threads = timing.worker_threads(jobs, cores)
    per_model = [sum(s for s, _ in timing.notebook_estimates(a.out, m, a.profile, [p.stem for p in selected_notebooks(a, m)],
                                                             selected_tasks(), threads).values())
                 + (timing.first_load_seconds(m) if selected_notebooks(a, m) else 0.0) for m in models]
    counts = [len(selected_notebooks(a, m)) for m in models]
    own = [m for m, n in zip(models, counts) if m in OWN_MODEL.values()]
    offline = [n for m, n in zip(models, counts) if m not in OWN_MODEL.values()]
    what = (f"{len(offline)} model(s) x {offline[0]} notebook(s)" if len(set(offline)) == 1 else
            " + ".join(f"{n} notebook(s) of {m}" for m, n in zip(models, counts) if m not in own))
    what = " + ".join([what] * bool(what) + [f"{n} notebook(s) of the {m}" for m, n in zip(models, counts)
                                             if m in own and n])
    say(f"run: {what} ({sum(counts)} in all), profile {a.profile}, {jobs} parallel job(s) "
        f"of {threads} thread(s); about {timing.fmt_duration(timing.wall_seconds(per_model, jobs))} in all")

def parallel(a, models: list[str], jobs: int, cores: int) -> tuple[dict, int]:
    """One worker process per model (``jobs`` at a time), each with cores // jobs torch threads.

    Interrupted (Ctrl-C, SIGTERM), it stops its workers, which stop their notebook kernels.
    """
    threads = str(timing.worker_threads(jobs, cores))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    runs: dict[str, dict] = {}

    with tempfile.TemporaryDirectory() as tmp:
        pending = list(models)
        active: list[tuple[str, subprocess.Popen, Path]] = []
        try:
            _dispatch(a, pending, active, jobs, threads, env, tmp, runs)
        except KeyboardInterrupt:  # stopped: the workers stop too (each stops its notebook kernel) and say what
            pass                   # they finished
        finally:
            for _, proc, _ in active:
                if proc.poll() is None:
                    proc.terminate()
            for _, proc, out in active:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                if out.exists():
                    runs.update(json.loads(out.read_text())["runs"])
    failed = sum(1 for d in runs.values() for info in d.values() if info["status"] != "ok")
    return {m: runs[m] for m in models if m in runs}, failed

def _dispatch(a, pending, active, jobs, threads, env, tmp, runs) -> None:
    from helpers.study.results import model_slug

    while pending or active:
        while pending and len(active) < jobs:
            m = pending.pop(0)
            out = Path(tmp) / f"{len(pending)}.json"
            env = {**env, "ICL_MODEL": m}  # the worker's model, as the notebooks will read it
            cmd = [sys.executable, str(ROOT / "scripts" / "run_all.py"), "--profile", a.profile, "--models", m, "--out", str(a.out),
                   "--timeout", str(a.timeout), "--runs-json", str(out), "--notebooks-dir", str(a.notebooks_dir),
                   "--progress-every", str(a.progress_every)]
            if a.account:
                cmd.append("--account")
            if a.notebooks:
                cmd += ["--notebooks", *a.notebooks]
            say(f"worker for {m}: {threads} thread(s)")
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
                say(f"[{model_slug(m)}/{a.profile}] FAILED: worker exited with {proc.returncode}")

def serial(a, models: list[str]) -> tuple[dict, int]:
    from helpers.core import accounting
    from helpers.study.report import ACCOUNTING_DIR, record_run, write_accounting
    from helpers.study.results import model_slug, run_key

    tasks = selected_tasks()
    key = run_key(a.profile)
    runs: dict[str, dict] = {}
    failed = 0
    for m in models:
        if STOP["signal"]:
            break
        nbs = selected_notebooks(a, m)
        runs[m] = {}
        folder = a.out / model_slug(m) / key
        outdir = folder / "notebooks"
        outdir.mkdir(parents=True, exist_ok=True)
        os.environ.update(ICL_MODEL=m, ICL_PROFILE=a.profile, ICL_RESULTS_DIR=str(a.out))
        progress = Progress(f"[{model_slug(m)}/{key}]",
                            timing.notebook_estimates(a.out, m, a.profile, [p.stem for p in nbs], tasks),
                            a.progress_every)
        progress.start()
        if a.account:  # ledgers of this run only
            shutil.rmtree(folder / ACCOUNTING_DIR, ignore_errors=True)
        try:
            for nb_path in nbs:
                if a.account:
                    os.environ[accounting.ENV] = str(folder / ACCOUNTING_DIR / f"{nb_path.stem}.json")
                status, dt = execute(a, nb_path, outdir, progress, folder)
                failed += status != "ok" and not STOP["signal"]
                runs[m][nb_path.stem] = {"status": status, "seconds": round(dt, 1)}
                record_run(folder, nb_path.stem, runs[m][nb_path.stem])
                if status == "ok":
                    timing.record_duration(a.out, m, a.profile, nb_path.stem, dt, tasks)
                progress.finished(nb_path.stem, status, dt)
                if STOP["signal"]:
                    break
        except KeyboardInterrupt:  # a signal between two notebooks
            pass
        finally:
            os.environ.pop(accounting.ENV, None)
            progress.close()
            if a.account:
                walls = {nb: info["seconds"] for nb, info in runs[m].items()}
                table = write_accounting(folder, walls, f"Accounting: {m}, {key}")
                if table:
                    say(f"{progress.tag} accounting: {table}")
    return runs, failed
