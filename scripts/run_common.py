"""What every part of ``make run`` shares (scripts/run_all.py and its parts): one-line output that parallel workers
do not interleave, the stop a signal asks for, the notebooks and tasks a run selects, and the arguments that
run_all.py and preflight.py both take."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import timing  # noqa: E402  (scripts/timing.py)


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The arguments run_all.py and preflight.py both take, with one meaning: the profile, the models, the
    notebooks, the results folder and the parallel jobs."""
    ap.add_argument("--profile", help="run size (default: $ICL_PROFILE, else default)")
    ap.add_argument("--models", nargs="+", help="models (default: $ICL_MODEL, else google/gemma-3-270m)")
    ap.add_argument("--notebooks", nargs="*", help="subset, e.g. 00 03")
    ap.add_argument("--out", type=Path, help="results folder (default: $ICL_RESULTS_DIR, else results/)")
    ap.add_argument("--jobs", type=timing.jobs_arg, default=0,
                    help="models run in parallel processes (0: one per model, at most one per CPU core)")
    ap.add_argument("--notebooks-dir", type=Path, default=ROOT / "notebooks", help=argparse.SUPPRESS)


_PRINT_LOCK = threading.RLock()  # re-entrant: the signal handler prints, maybe while the main thread prints

def say(line: str) -> None:
    """Print one whole line at once and flush: parallel workers share the terminal."""
    with _PRINT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

STOP: dict = {"signal": None}  # the signal that stopped the run, once one has

def exit_code(failed: int) -> int:
    if STOP["signal"]:
        return 128 + getattr(signal, STOP["signal"]).value
    return 1 if failed else 0

def interrupt(signum, frame):
    """SIGTERM / SIGINT: remember it and unwind the main thread (notebooks run in a thread of their own)."""
    if STOP["signal"] is not None:  # a second signal: the stop is under way (the kernel is killed within 10 s)
        say(f"run_all: {signal.Signals(signum).name} received again: already stopping")
        return
    STOP["signal"] = signal.Signals(signum).name
    say(f"run_all: {STOP['signal']} received: stopping (the running notebook's kernel is shut down)")
    raise KeyboardInterrupt(STOP["signal"])

def stopped_summary(a, models: list[str], runs: dict) -> None:
    """What a stopped run finished, and how to go on."""
    for m in models:
        stems = [p.stem for p in selected_notebooks(a, m)]
        done = [nb for nb, info in runs.get(m, {}).items() if info["status"] == "ok"]
        cut = [nb for nb, info in runs.get(m, {}).items() if info["status"].startswith("stopped")]
        rest = [nb for nb in stems if nb not in runs.get(m, {})]
        say(f"stopped: {m}: {len(done)}/{len(stems)} notebooks finished ({', '.join(done) or 'none'})"
            + (f"; stopped in {', '.join(cut)}" if cut else "") + (f"; not started: {', '.join(rest)}" if rest else ""))
    say("stopped: rerun the same command to go on; every finished step is read from the store "
        "(ICL_RESULTS_CACHE), so the notebooks that finished take seconds")

OWN_MODEL = timing.OWN_MODEL  # notebooks with their own model run once, as that model

def with_own_models(a, models: list[str]) -> list[str]:
    """``models`` plus the own model of every selected notebook that has one (it runs once, as that model)."""
    own = [m for m in dict.fromkeys(OWN_MODEL.values())
           if m not in models and any(OWN_MODEL.get(p.name[:2]) == m for p in selected_notebooks(a))]
    return list(models) + own

def selected_notebooks(a, model: str | None = None) -> list[Path]:
    """The notebooks to run (``model`` given: those that run for it; :data:`OWN_MODEL`)."""
    nbs = sorted(a.notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if a.notebooks:
        nbs = [p for p in nbs if p.name[:2] in a.notebooks]
    if model is not None:
        own = model if model in OWN_MODEL.values() else None
        nbs = [p for p in nbs if OWN_MODEL.get(p.name[:2]) == own]
    return nbs

def selected_tasks() -> tuple[str, ...] | None:
    """``$ICL_TASKS`` as the notebooks will read it (None: the profile's tasks, or names they will reject)."""
    from helpers.study.profile_table import current_tasks

    try:
        return current_tasks() if os.environ.get("ICL_TASKS") else None
    except ValueError:
        return None

def stop_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), so that `make run`
    killed with SIGKILL, which cannot pass the signal on, still takes its run with it: the handler above then shuts
    the kernels down and reports what finished. Elsewhere (macOS) a no-op."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
