"""Execute every notebook for each model and profile, then write the results report.

    python scripts/run_all.py --profile default --models google/gemma-3-270m smollm2

Executed notebooks go to results/<model>/<run key>/notebooks/, figures and
metrics to results/<model>/<run key>/{figures,metrics}/, and the summary to
results/RESULTS-<run key>.md (+ .html); the run key is the profile, plus the task
set when it is not the profile's (helpers.study.results.run_key). A failing
notebook is recorded and the run goes on; the exit code is non-zero if any failed.

Settings come from the same ICL_* variables the notebooks read (docs/your-own.md,
'Settings'; --profile, --models and --out take precedence over ICL_PROFILE,
ICL_MODEL and ICL_RESULTS_DIR); one that cannot be honoured stops the run before
it starts (exit 2). SIGTERM or SIGINT stops the run: the running notebook's kernel
is shut down, the report is written with what finished, exit 128 + the signal.

While it runs, each model prints progress lines prefixed ``[<model>/<profile>]``:
the notebook starting (its code cells), which cell is running (at most one line
every ``--progress-every`` seconds), notebooks done / total, elapsed time and an
estimate of what is left (scripts/timing.py: the durations earlier runs recorded
in results/<model>/<profile>/durations.json, else a built-in estimate). A cell
that fails is named at once: its number and the first line of the error.

With several models, ``--jobs N`` (default: one per model, at most one per CPU
core) runs the models in parallel processes, each with its share of the cores
as torch threads: two single-threaded workers use two cores better than one
two-threaded worker. Every step is cached on disk (helpers.core.store.cached), so
an interrupted run resumes where it stopped.

``--executor slurm`` runs each (model, notebook) as a job of its own, submitted through submitit as one job
array per model (``--cluster local``: separate processes on this machine, without Slurm). Each job runs its
notebook as above (:func:`run_notebook_job`); this process polls the jobs, prints a line as each is queued,
runs and ends, then writes the report once, names every failed job with its log, and exits non-zero if any
failed. A rerun submits only the notebooks whose last run (runs.json) is not ok (``--resubmit-all``: all).
``--slurm-gpus``, ``--slurm-time-min``, ``--slurm-mem-gb``, ``--slurm-cpus`` and ``--slurm-partition`` size the
jobs (docs/gpu.md, 'On a cluster').
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import timing  # noqa: E402  (scripts/timing.py)

_PRINT_LOCK = threading.RLock()  # re-entrant: the signal handler prints, maybe while the main thread prints


def say(line: str) -> None:
    """Print one whole line at once and flush: parallel workers share the terminal."""
    with _PRINT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(argv=None) -> int:
    from helpers.study.config import check_environment, option

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="run size (default: $ICL_PROFILE, else default)")
    ap.add_argument("--models", nargs="+", help="models (default: $ICL_MODEL, else google/gemma-3-270m)")
    ap.add_argument("--notebooks", nargs="*", help="subset, e.g. 00 03")
    ap.add_argument("--out", type=Path, help="results folder (default: $ICL_RESULTS_DIR, else results/)")
    ap.add_argument("--timeout", type=int, default=None,
                    help="seconds one notebook cell may run (default: $ICL_CELL_TIMEOUT, else the profile's: "
                         "smoke 3600, default 7200, paper 86400)")
    ap.add_argument("--jobs", type=timing.jobs_arg, default=0,
                    help="models run in parallel processes (0: one per model, at most one per CPU core)")
    ap.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS",
                    help="a progress line per model at most this often while a notebook runs (default 60)")
    ap.add_argument("--account", action="store_true",
                    help="count each notebook's work (positions, FLOPs, time per stored step, share of this CPU's "
                         "matmul peak) into results/<model>/<run key>/accounting.md (helpers.core.accounting)")
    ap.add_argument("--executor", choices=("local", "slurm"), default="local",
                    help="local: notebooks run here (default); slurm: one submitit job per model and notebook, "
                         "submitted as a job array (see 'On a cluster' in docs/gpu.md)")
    ap.add_argument("--cluster", choices=("slurm", "local"), default=None,
                    help="with --executor slurm: slurm (default) submits to Slurm with sbatch; local runs each job "
                         "as a separate process on this machine through submitit, without Slurm (to try it out)")
    ap.add_argument("--slurm-partition", help="Slurm partition of the jobs (default: the cluster's default)")
    ap.add_argument("--slurm-gpus", type=int, default=None,
                    help="GPUs per job (default: 1 with --profile paper, else 0)")
    ap.add_argument("--slurm-time-min", type=int, default=None,
                    help="time limit of each job in minutes (default: two cell timeouts, at most 48 h)")
    ap.add_argument("--slurm-mem-gb", type=int, default=None,
                    help="memory of each job in GB (default: preflight's RAM estimate for the job's model)")
    ap.add_argument("--slurm-cpus", type=int, default=None,
                    help="CPU cores of each job (default: 4; the notebook's torch threads)")
    ap.add_argument("--resubmit-all", action="store_true",
                    help="with --executor slurm: run every notebook again, also those whose last run is ok")
    ap.add_argument("--notebooks-dir", type=Path, default=ROOT / "notebooks", help=argparse.SUPPRESS)
    ap.add_argument("--runs-json", type=Path, help=argparse.SUPPRESS)  # worker mode: write runs, no report
    a = ap.parse_args(argv)
    _check_executor_args(ap, a)
    # the arguments are checked first: what loads models and writes reports imports torch, seconds a refusal need
    # not wait for
    from helpers.core.model_loading import ModelLoadError
    from helpers.core.models import resolve_name
    from helpers.study.report import build_report

    a.profile, profile_note = option(a.profile, "ICL_PROFILE", "default", "--profile")
    a.models, models_note = option(a.models, "ICL_MODEL", ["google/gemma-3-270m"], "--models")
    a.out, _ = option(a.out, "ICL_RESULTS_DIR", ROOT / "results", "--out")
    a.out = Path(a.out).expanduser().resolve()
    if a.runs_json is None:
        for note in (profile_note, models_note):
            if note:
                say(f"note: {note}")
    # the notebooks read what this run uses (ICL_MODEL is set per model); every other ICL_* variable they read
    # as it is, so a value they could not honour is refused now, before anything runs
    os.environ.update(ICL_PROFILE=a.profile, ICL_RESULTS_DIR=str(a.out))
    problems = check_environment()
    from helpers.study.profiles import cell_timeout
    from helpers.study.results import unwritable

    if a.runs_json is None and (why := unwritable(a.out)):  # before a notebook fails on it, with a traceback
        problems.append(f"the results folder: {why}")

    try:
        a.timeout = cell_timeout(a.profile, a.timeout)
    except ValueError as e:
        problems.append(str(e))
    models = []
    for m in a.models:
        try:
            models.append(resolve_name(m))
        except ModelLoadError as e:
            problems.append(str(e))
    if problems:
        for p in problems:
            say(f"run_all: {p}")
        say("run_all: nothing was run (docs/your-own.md, 'Settings'; `make preflight` checks everything before a run)")
        return 2
    t_start = time.perf_counter()
    for sig in (signal.SIGTERM, signal.SIGINT):  # kill <pid> or Ctrl-C: stop, shut the kernels down, report
        signal.signal(sig, _interrupt)
    _stop_with_parent()
    if a.runs_json is None:
        models = _with_own_models(a, models)
    if a.executor == "slurm":
        _prepare_notary()
        return _run_cluster(a, models, t_start)
    cores = os.cpu_count() or 1
    jobs = timing.parallel_jobs(len(models), a.jobs, cores) if a.runs_json is None else 1
    if a.runs_json is None:
        _announce(a, models, jobs, cores)
        _prepare_notary()
    if jobs > 1:
        runs, failed = _parallel(a, models, jobs, cores)
    else:
        runs, failed = _serial(a, models)
    if a.runs_json is not None:
        a.runs_json.write_text(json.dumps({"runs": runs, "failed": failed, "stopped": STOP["signal"]}))
        if STOP["signal"]:
            # stopped: leave at once. The kernel is already shut down (_stop_kernel), and the interpreter's exit
            # handlers (nbclient's kernel cleanup, the kernel channels' sockets) could hold this worker past the
            # parent's 60 s wait for it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(_exit_code(failed))
        return _exit_code(failed)
    total = time.perf_counter() - t_start
    own = [m for m in models if m in OWN_MODEL.values()]
    note = (f"{len(models) - len(own)} model(s){''.join(f' and the {m}' for m in own)}, {jobs} parallel job(s) on "
            f"{cores} CPU core(s); wall time {total / 60:.1f} min")
    if STOP["signal"]:
        note += f"; stopped by {STOP['signal']}"
    report = build_report(a.out, a.profile, models, runs, note=note)
    print(f"{note}\nreport: {report}")
    if STOP["signal"]:
        _stopped_summary(a, models, runs)
    return _exit_code(failed)


STOP: dict = {"signal": None}  # the signal that stopped the run, once one has


def _exit_code(failed: int) -> int:
    if STOP["signal"]:
        return 128 + getattr(signal, STOP["signal"]).value
    return 1 if failed else 0


def _stopped_summary(a, models: list[str], runs: dict) -> None:
    """What a stopped run finished, and how to go on."""
    for m in models:
        stems = [p.stem for p in _notebooks(a, m)]
        done = [nb for nb, info in runs.get(m, {}).items() if info["status"] == "ok"]
        cut = [nb for nb, info in runs.get(m, {}).items() if info["status"].startswith("stopped")]
        rest = [nb for nb in stems if nb not in runs.get(m, {})]
        say(f"stopped: {m}: {len(done)}/{len(stems)} notebooks finished ({', '.join(done) or 'none'})"
            + (f"; stopped in {', '.join(cut)}" if cut else "") + (f"; not started: {', '.join(rest)}" if rest else ""))
    say("stopped: rerun the same command to go on; every finished step is read from the store "
        "(ICL_RESULTS_CACHE), so the notebooks that finished take seconds")


OWN_MODEL = timing.OWN_MODEL  # notebooks with their own model run once, as that model


def _with_own_models(a, models: list[str]) -> list[str]:
    """``models`` plus the own model of every selected notebook that has one (it runs once, as that model)."""
    own = [m for m in dict.fromkeys(OWN_MODEL.values())
           if m not in models and any(OWN_MODEL.get(p.name[:2]) == m for p in _notebooks(a))]
    return list(models) + own


def _notebooks(a, model: str | None = None) -> list[Path]:
    """The notebooks to run (``model`` given: those that run for it; :data:`OWN_MODEL`)."""
    nbs = sorted(a.notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if a.notebooks:
        nbs = [p for p in nbs if p.name[:2] in a.notebooks]
    if model is not None:
        own = model if model in OWN_MODEL.values() else None
        nbs = [p for p in nbs if OWN_MODEL.get(p.name[:2]) == own]
    return nbs


def _tasks() -> tuple[str, ...] | None:
    """``$ICL_TASKS`` as the notebooks will read it (None: the profile's tasks, or names they will reject)."""
    from helpers.study.profile_table import current_tasks

    try:
        return current_tasks() if os.environ.get("ICL_TASKS") else None
    except ValueError:
        return None


def _announce(a, models: list[str], jobs: int, cores: int) -> None:
    """One line before anything runs: how much, and about how long."""
    threads = timing.worker_threads(jobs, cores)
    per_model = [sum(s for s, _ in timing.notebook_estimates(a.out, m, a.profile, [p.stem for p in _notebooks(a, m)],
                                                             _tasks(), threads).values())
                 + (timing.first_load_seconds(m) if _notebooks(a, m) else 0.0) for m in models]
    counts = [len(_notebooks(a, m)) for m in models]
    own = [m for m, n in zip(models, counts) if m in OWN_MODEL.values()]
    offline = [n for m, n in zip(models, counts) if m not in OWN_MODEL.values()]
    what = (f"{len(offline)} model(s) x {offline[0]} notebook(s)" if len(set(offline)) == 1 else
            " + ".join(f"{n} notebook(s) of {m}" for m, n in zip(models, counts) if m not in own))
    what = " + ".join([what] * bool(what) + [f"{n} notebook(s) of the {m}" for m, n in zip(models, counts)
                                             if m in own and n])
    say(f"run: {what} ({sum(counts)} in all), profile {a.profile}, {jobs} parallel job(s) "
        f"of {threads} thread(s); about {timing.fmt_duration(timing.wall_seconds(per_model, jobs))} in all")


def _stop_with_parent() -> None:
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


def _prepare_notary() -> None:
    """Create this user's notebook-signing key now, if there is none yet, before parallel workers sign their first
    notebooks: two workers each creating a key would leave one worker's signatures made with a key that the other
    overwrote."""
    try:
        default_notary().secret  # noqa: B018  (reading it writes a new key if there is none)
    except Exception as e:
        say(f"notebook signing unavailable ({type(e).__name__}: {e}); executed notebooks will open untrusted")


def _kernel_config(tmp: str):
    """Notebook kernels talk to this process over IPC, not TCP: no ``Kernel is running over TCP without encryption``.

    ipykernel warns on every kernel started on TCP ports without CurveZMQ keys. Here the kernel always runs on
    this machine, so IPC (Unix socket files) is the natural transport: the files live in ``tmp``, a fresh folder
    only this user can open (``tempfile.mkdtemp``), no port is opened, and two workers starting kernels at once
    cannot race for the same free port. Lowering the kernel's log level would hide its real warnings too, and
    CurveZMQ needs a libsodium build of pyzmq and a kernelspec that declares it. Off POSIX systems (not
    supported here) kernels stay on TCP.
    """
    from traitlets.config import Config

    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "connection_file": str(Path(tmp) / "kernel.json")}})


class Progress:
    """Progress lines of one model: notebook started, cell running, done / failed, elapsed and time left."""

    def __init__(self, tag: str, estimates: dict[str, tuple[float, str]], every: float):
        self.tag, self.est, self.every = tag, estimates, every
        self.total = len(estimates)
        self.done = self.failed = self.ok = self.stopped = 0  # done: notebooks that ended, whatever their status
        self.t0 = time.monotonic()
        self.nb: str | None = None
        self.nb_t0 = 0.0
        self.cell = 0  # code cell running (1-based; 0: none yet)
        self.cell_t0 = 0.0
        self.n_cells = 0
        self.code_cells: dict[int, int] = {}  # notebook cell index -> code cell number
        self.reported = False  # this notebook's failure already printed
        self.last = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)

    # -- lines
    def _say(self, text: str) -> None:
        self.last = time.monotonic()
        say(f"{self.tag} {text}")

    def _left(self) -> str:
        now = time.monotonic()
        rest = 0.0
        over = False
        for stem in list(self.est)[self.done:]:  # notebooks run in this order
            s = self.est[stem][0]
            if stem == self.nb:
                spent = now - self.nb_t0
                over = spent > s
                s = max(s - spent, 0.0)
            rest += s
        tail = " after this notebook" if over else ""
        return (f"{self.done}/{self.total} notebooks done | elapsed {timing.fmt_duration(now - self.t0)}, "
                f"about {timing.fmt_duration(rest)} left{tail}")

    def start(self) -> None:
        total = sum(s for s, _ in self.est.values())
        sources = sorted({src for _, src in self.est.values()})
        self._say(f"{self.total} notebooks, about {timing.fmt_duration(total)} ({' and '.join(sources)} durations)")
        if self.every > 0:
            self.ticker.start()

    def notebook(self, stem: str, nb) -> None:
        with self.lock:
            self.nb, self.nb_t0, self.cell, self.reported = stem, time.monotonic(), 0, False
            self.code_cells = {}
            for i, c in enumerate(nb.cells):
                if c.cell_type == "code" and c.source.strip():
                    self.code_cells[i] = len(self.code_cells) + 1
            self.n_cells = len(self.code_cells)
            self._say(f"{stem}: started, {self.n_cells} cell{'s' * (self.n_cells != 1)} | {self._left()}")

    def cell_execute(self, cell, cell_index: int) -> None:
        with self.lock:
            self.cell, self.cell_t0 = self.code_cells.get(cell_index, self.cell), time.monotonic()

    def cell_error(self, cell, cell_index: int, execute_reply) -> None:
        if "raises-exception" in cell.metadata.get("tags", []):
            return  # an expected error: nbclient goes on
        c = execute_reply.get("content", {}) if execute_reply else {}
        self.fail(f"{c.get('ename', 'Error')}: {c.get('evalue', '')}", cell)

    def fail(self, error: str, cell=None) -> None:
        """Name the failing cell at once (once per notebook)."""
        with self.lock:
            if self.reported:
                return
            self.reported = True
            first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")[:200]
            where = f"in cell {self.cell}/{self.n_cells}" if self.cell else "before its first cell"
            src = ""
            if cell is not None:
                line = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
                src = f" ({line[:60]}{'...' if len(line) > 60 else ''})"
            self._say(f"{self.nb}: FAILED {where}{src}: {first}")

    def finished(self, stem: str, status: str, seconds: float) -> None:
        with self.lock:
            self.done += 1
            self.ok += status == "ok"
            self.stopped += status.startswith("stopped")
            self.failed += status != "ok" and not status.startswith("stopped")
            self.nb = None
            self._say(f"{stem}: {status} ({seconds:.0f}s) | {self._left()}")

    def close(self) -> None:
        self.stop.set()
        if self.ticker.is_alive():
            self.ticker.join(timeout=5)
        self._say(f"finished: {self.summary()}, in {timing.fmt_duration(time.monotonic() - self.t0)}")

    def summary(self) -> str:
        """What became of every notebook: ok, failed, stopped, not run (these add up to the total)."""
        parts = [f"{self.ok} of {self.total} notebooks ok", f"{self.failed} failed"]
        if self.stopped:
            parts.append(f"{self.stopped} stopped")
        if self.total - self.done:
            parts.append(f"{self.total - self.done} not run")
        return ", ".join(parts)

    def _tick(self) -> None:
        while not self.stop.wait(min(1.0, self.every / 4)):
            with self.lock:
                if self.nb is None or time.monotonic() - self.last < self.every:
                    continue
                running = timing.fmt_duration(time.monotonic() - self.cell_t0)
                cell = f"cell {self.cell}/{self.n_cells} (running {running})" if self.cell else "starting the kernel"
                self._say(f"{self.nb}: {cell} | {self._left()}")


def _interrupt(signum, frame):
    """SIGTERM / SIGINT: remember it and unwind the main thread (notebooks run in a thread of their own)."""
    if STOP["signal"] is not None:  # a second signal: the stop is under way (the kernel is killed within 10 s)
        say(f"run_all: {signal.Signals(signum).name} received again: already stopping")
        return
    STOP["signal"] = signal.Signals(signum).name
    say(f"run_all: {STOP['signal']} received: stopping (the running notebook's kernel is shut down)")
    raise KeyboardInterrupt(STOP["signal"])


def _parallel(a, models: list[str], jobs: int, cores: int) -> tuple[dict, int]:
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
            cmd = [sys.executable, __file__, "--profile", a.profile, "--models", m, "--out", str(a.out),
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


def _serial(a, models: list[str]) -> tuple[dict, int]:
    from helpers.core import accounting
    from helpers.study.report import ACCOUNTING_DIR, record_run, write_accounting
    from helpers.study.results import model_slug, run_key

    tasks = _tasks()
    key = run_key(a.profile)
    runs: dict[str, dict] = {}
    failed = 0
    for m in models:
        if STOP["signal"]:
            break
        nbs = _notebooks(a, m)
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
                status, dt = _execute(a, nb_path, outdir, progress, folder)
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


# ------------------------------------------------------------------------ --executor slurm: one job per notebook

SLURM_LOG_DIR = "slurm-logs"  # under the results folder: submitit's pickles and each job's stdout and stderr
SLURM_CELLS_PER_JOB = 2  # a job's default time limit: two cell timeouts (its longest cell, and the rest) ...
SLURM_TIME_CAP_MIN = 48 * 60  # ... at most 48 h, a common partition limit (--slurm-time-min sets another)
SLURM_CPUS = 4  # CPU cores per job (the notebook's torch threads; tokenising, data)
SLURM_UNKNOWN_MEM_GB = 16  # a model whose size preflight cannot tell (e.g. notebook 09's own small model)
SLURM_FLAGS = ("slurm_partition", "slurm_gpus", "slurm_time_min", "slurm_mem_gb", "slurm_cpus", "resubmit_all")


def _check_executor_args(ap, a) -> None:
    """Refuse flags of the Slurm executor without ``--executor slurm``, and sizes that are not positive."""
    if a.executor != "slurm":
        given = [f"--{f.replace('_', '-')}" for f in ("cluster", *SLURM_FLAGS) if getattr(a, f) not in (None, False)]
        if given:
            ap.error(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only with --executor slurm: add --executor slurm (e.g. "
                     "`--executor slurm --cluster local`, or `make run EXECUTOR=slurm CLUSTER=local`, runs each "
                     "notebook as a separate job on this machine without Slurm), or leave them out")
    a.cluster = a.cluster or "slurm"
    for flag, least in (("slurm_gpus", 0), ("slurm_time_min", 1), ("slurm_mem_gb", 1), ("slurm_cpus", 1)):
        value = getattr(a, flag)
        if value is not None and value < least:
            ap.error(f"--{flag.replace('_', '-')}={value}: give a whole number of at least {least}")


def slurm_time_min(timeout_s: int) -> int:
    """A job's default time limit in minutes: :data:`SLURM_CELLS_PER_JOB` cell timeouts, at most
    :data:`SLURM_TIME_CAP_MIN` (2 h for smoke and default, 48 h for paper)."""
    return min(SLURM_CELLS_PER_JOB * math.ceil(timeout_s / 60), SLURM_TIME_CAP_MIN)


def slurm_mem_gb(model: str) -> int:
    """A job's default memory in GB: preflight's RAM estimate for ``model`` (scripts/preflight.py, ram_need)."""
    import preflight  # scripts/preflight.py

    need = preflight.ram_need(model)
    return SLURM_UNKNOWN_MEM_GB if need is None else max(4, math.ceil(need / preflight.GB))


def slurm_parameters(a, model: str) -> dict:
    """submitit.AutoExecutor parameters of ``model``'s jobs (the flags, else the defaults above)."""
    from helpers.study.results import model_slug

    gpus = a.slurm_gpus if a.slurm_gpus is not None else (1 if a.profile == "paper" else 0)
    params = {"name": f"icl-{model_slug(model)}", "timeout_min": a.slurm_time_min or slurm_time_min(a.timeout),
              "mem_gb": a.slurm_mem_gb or slurm_mem_gb(model), "cpus_per_task": a.slurm_cpus or SLURM_CPUS,
              # the jobs import this module and helpers by name, also where sbatch does not pass the environment on
              "slurm_setup": [f"export PYTHONPATH={shlex.quote(_job_pythonpath())}"]}
    if gpus:
        params["gpus_per_node"] = gpus
    if a.slurm_partition:
        params["slurm_partition"] = a.slurm_partition
    return params


def _job_pythonpath() -> str:
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([str(ROOT / "scripts"), str(ROOT), *old]))


def make_executor(a, model: str | None = None, cluster: str | None = None):
    """The submitit executor of this run (its folder: ``<out>/slurm-logs``), with ``model``'s parameters if given.
    ``cluster``: ``slurm`` (sbatch; needs srun on PATH) or ``local`` (separate processes here)."""
    import submitit

    os.environ["PYTHONPATH"] = _job_pythonpath()  # local jobs and sbatch inherit this process's environment
    ex = submitit.AutoExecutor(folder=Path(a.out) / SLURM_LOG_DIR, cluster=cluster or a.cluster)
    if model is not None:
        ex.update_parameters(**slurm_parameters(a, model))
    return ex


def run_notebook_job(spec: dict) -> dict:
    """One notebook of one model, as one submitit job (``--executor slurm``): module-level, so that submitit pickles
    it by reference. It runs the notebook as the local run does (:func:`_execute`, same progress lines in the job's
    log), records it in runs.json and its duration in durations.json, and returns ``{"status", "seconds"}``."""
    from helpers.core import accounting
    from helpers.study.report import record_run
    from helpers.study.results import model_slug, run_key

    for sig in (signal.SIGTERM, signal.SIGINT):  # scancel, or a cancelled local job: shut the kernel down
        signal.signal(sig, _interrupt)
    m, profile, out, nb_path = spec["model"], spec["profile"], Path(spec["out"]), Path(spec["notebook"])
    os.environ.update(spec["env"])  # the parent's ICL_* settings and torch threads
    os.environ.update(ICL_MODEL=m, ICL_PROFILE=profile, ICL_RESULTS_DIR=str(out))
    if spec.get("ledger"):
        os.environ[accounting.ENV] = spec["ledger"]
    else:
        os.environ.pop(accounting.ENV, None)
    tasks = _tasks()
    key = run_key(profile)
    folder = out / model_slug(m) / key
    outdir = folder / "notebooks"
    outdir.mkdir(parents=True, exist_ok=True)
    progress = Progress(f"[{model_slug(m)}/{key}]",
                        timing.notebook_estimates(out, m, profile, [nb_path.stem], tasks), spec["progress_every"])
    progress.start()
    try:
        status, dt = _execute(argparse.Namespace(timeout=spec["timeout"]), nb_path, outdir, progress, folder)
    except KeyboardInterrupt:  # a signal before the notebook started
        status, dt = f"stopped ({STOP['signal']})", 0.0
    info = {"status": status, "seconds": round(dt, 1)}
    record_run(folder, nb_path.stem, info)
    if status == "ok":
        timing.record_duration(out, m, profile, nb_path.stem, dt, tasks)
    progress.finished(nb_path.stem, status, dt)
    progress.close()
    if status != "ok":
        print(f"{progress.tag} {nb_path.stem}: {status}\nthe executed notebook, with the error: {outdir / nb_path.name}",
              file=sys.stderr, flush=True)
    return info


def _run_cluster(a, models: list[str], t_start: float) -> int:
    """``--executor slurm``: one submitit job per (model, notebook), one job array per model, polled until every job
    has ended; then the report, once. Notebooks whose last run is ok are kept, not resubmitted (unless
    ``--resubmit-all``). SIGINT / SIGTERM cancels the jobs and reports what finished."""
    import run_all as this  # the jobs call run_notebook_job by this module's name, not __main__'s

    from helpers.core import accounting
    from helpers.study.report import ACCOUNTING_DIR, build_report, record_run, recorded_runs, write_accounting
    from helpers.study.results import model_slug, run_key

    tasks, key = _tasks(), run_key(a.profile)
    plan: dict[str, tuple[Path, list[Path], dict]] = {}
    for m in models:
        folder = a.out / model_slug(m) / key
        earlier = recorded_runs(folder)
        nbs = _notebooks(a, m)
        kept = {} if a.resubmit_all else {p.stem: earlier[p.stem] for p in nbs
                                          if isinstance(earlier.get(p.stem), dict) and earlier[p.stem].get("status") == "ok"}
        plan[m] = (folder, [p for p in nbs if p.stem not in kept], kept)
    n_jobs = sum(len(todo) for _, todo, _ in plan.values())
    est = {m: timing.notebook_estimates(a.out, m, a.profile, [p.stem for p in todo], tasks)
           for m, (_, todo, _) in plan.items()}
    say(f"run: {len(models)} model(s) x {len(_notebooks(a))} notebook(s), profile {a.profile}, executor slurm on "
        f"cluster {a.cluster}: {n_jobs} job(s), about {timing.fmt_duration(sum(s for e in est.values() for s, _ in e.values()))} "
        f"of notebook time in all; logs in {a.out / SLURM_LOG_DIR}")
    # --cluster local: at most --jobs jobs at once (default one per CPU core), each with its share of the cores; all
    # at once would load the model once per notebook into this machine's memory together
    limit = max(1, a.jobs or (os.cpu_count() or 1)) if a.cluster == "local" else None
    threads = str(a.slurm_cpus or SLURM_CPUS) if a.cluster == "slurm" else str(timing.worker_threads(limit))
    env = {k: v for k, v in os.environ.items() if k.startswith("ICL_") and k != accounting.ENV}
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    entries: list[dict] = []
    runs: dict[str, dict] = {m: {} for m in models}
    try:
        executor = make_executor(a) if n_jobs else None
    except Exception as e:  # no srun here
        say(f"run_all: cannot submit to {a.cluster}: {type(e).__name__}: {e}")
        say("run_all: run it on the cluster's login node, or try it here with --cluster local "
            "(make run EXECUTOR=slurm CLUSTER=local); nothing was submitted")
        return 2
    try:
        for m, (folder, todo, kept) in plan.items():
            tag = f"[{model_slug(m)}/{key}]"
            if kept:
                say(f"{tag} not resubmitted, last run ok (runs.json): {', '.join(kept)}; --resubmit-all runs them again")
            if not todo:
                continue
            params = slurm_parameters(a, m)
            executor.update_parameters(**params)
            specs = []
            for p in todo:
                ledger = None
                if a.account:  # this notebook's ledger of this run only
                    ledger = str(folder / ACCOUNTING_DIR / f"{p.stem}.json")
                    Path(ledger).unlink(missing_ok=True)
                specs.append({"model": m, "profile": a.profile, "out": str(a.out), "notebook": str(p),
                              "timeout": a.timeout, "progress_every": a.progress_every, "env": env, "ledger": ledger})
            gpus = params.get("gpus_per_node", 0)
            if limit is None:  # Slurm queues them: one job array
                jobs = executor.map_array(this.run_notebook_job, specs)
                say(f"{tag} submitted {len(jobs)} job(s) ({jobs[0].job_id.split('_')[0]}): {gpus} GPU(s), "
                    f"{params['cpus_per_task']} CPU(s), {params['mem_gb']} GB, {params['timeout_min']} min each")
            else:  # local processes, started by _poll_jobs as slots free
                jobs = [None] * len(specs)
                say(f"{tag} {len(specs)} job(s) as local processes, at most {limit} at once, {threads} thread(s) each")
            for p, job, spec in zip(todo, jobs, specs):
                entries.append({"model": m, "stem": p.stem, "tag": tag, "job": job, "est": est[m][p.stem][0],
                                "phase": "queued", "t_run": None, "info": None, "spec": spec, "params": params})

        def submit(e):  # a local job, when a slot is free
            executor.update_parameters(**e["params"])
            e["job"] = executor.submit(this.run_notebook_job, e["spec"])

        _poll_jobs(a, entries, runs, submit if limit is not None else None, limit)
    except KeyboardInterrupt:  # stopped: cancel what has not ended, keep what finished
        _cancel_jobs(entries, runs)
    # once more, from this one process: jobs of one model that finish together may overwrite each other's line
    for m, (folder, _, kept) in plan.items():
        for stem, info in runs[m].items():
            record_run(folder, stem, info)
            if info["status"] == "ok":
                timing.record_duration(a.out, m, a.profile, stem, info["seconds"], tasks)
        if a.account and (runs[m] or kept):
            walls = {nb: info.get("seconds", 0) for nb, info in {**kept, **runs[m]}.items()}
            table = write_accounting(folder, walls, f"Accounting: {m}, {key}")
            if table:
                say(f"[{model_slug(m)}/{key}] accounting: {table}")
    # a job stopped by anything but this run's own stop (scancel, preemption) did not finish: it failed
    failed = [e for e in entries if e["info"] is not None and e["info"]["status"] != "ok"
              and not (STOP["signal"] and e["info"]["status"].startswith("stopped"))]
    n_kept = sum(len(kept) for _, _, kept in plan.values())
    note = (f"{len(models)} model(s), {len(entries)} submitit job(s) on {a.cluster}"
            + (f", {n_kept} notebook(s) kept from earlier runs" if n_kept else "")
            + f"; wall time {(time.perf_counter() - t_start) / 60:.1f} min")
    if STOP["signal"]:
        note += f"; stopped by {STOP['signal']}"
    report = build_report(a.out, a.profile, models, runs, note=note)
    print(f"{note}\nreport: {report}", flush=True)
    for e in failed:
        job = e["job"]
        say(f"failed: {e['model']} {e['stem']} (job {job.job_id}): {e['info']['status']}; log: {job.paths.stderr}")
    if failed:
        say(f"failed: {len(failed)} job(s); read the log, fix the cause and rerun the same command: only the notebooks "
            "without an ok run are submitted again, and every finished step is read from the store (ICL_RESULTS_CACHE)")
    if STOP["signal"]:
        _stopped_summary(a, models, {m: {**plan[m][2], **runs[m]} for m in models})
    return _exit_code(len(failed))


def _job_line(entries: list[dict]) -> str:
    """Jobs queued / running / done / failed, elapsed and notebook time left (scripts/timing.py estimates)."""
    now = time.monotonic()
    left = [e for e in entries if e["info"] is None]
    rest = [max(e["est"] - (now - e["t_run"] if e["t_run"] else 0.0), 0.0) for e in left]
    failed = sum(1 for e in entries if e["info"] is not None and e["info"]["status"] != "ok")
    running = sum(1 for e in left if e["phase"] == "running")
    t0 = min((e["t0"] for e in entries), default=now)
    return (f"{len(entries) - len(left)}/{len(entries)} jobs done ({failed} failed), {running} running, "
            f"{len(left) - running} queued | elapsed {timing.fmt_duration(now - t0)}, about "
            f"{timing.fmt_duration(sum(rest))} of notebook time left (longest job {timing.fmt_duration(max(rest, default=0))})")


def _poll_jobs(a, entries: list[dict], runs: dict, submit=None, limit: int | None = None) -> None:
    """Until every job has ended: a line when a job starts running or ends, and every ``--progress-every`` seconds
    one line per model with jobs running. ``submit(entry)`` starts an entry not yet submitted (local processes),
    at most ``limit`` unfinished at once."""
    t0 = time.monotonic()
    for e in entries:
        e["t0"] = t0
    last = t0
    poll_s = 1.0 if a.cluster == "local" else 10.0
    while any(e["info"] is None for e in entries):
        if submit is not None:
            for e in entries:
                if sum(1 for x in entries if x["job"] is not None and x["info"] is None) >= limit:
                    break
                if e["job"] is None and e["info"] is None:
                    submit(e)
        for e in entries:
            if e["info"] is not None or e["job"] is None:
                continue
            job = e["job"]
            if job.done():
                e["info"] = _job_result(e)
                runs[e["model"]][e["stem"]] = e["info"]
                say(f"{e['tag']} {e['stem']}: {e['info']['status']} ({e['info']['seconds']:.0f}s, job {job.job_id}) "
                    f"| {_job_line(entries)}")
            elif e["phase"] == "queued" and job.state == "RUNNING":
                e["phase"], e["t_run"] = "running", time.monotonic()
                say(f"{e['tag']} {e['stem']}: running (job {job.job_id}) | {_job_line(entries)}")
        if a.progress_every > 0 and time.monotonic() - last >= a.progress_every:
            last = time.monotonic()
            for tag in dict.fromkeys(e["tag"] for e in entries):
                mine = [e for e in entries if e["tag"] == tag and e["info"] is None]
                if mine:
                    running = [f"{e['stem']} ({timing.fmt_duration(last - e['t_run'])})" for e in mine if e["t_run"]]
                    queued = [e["stem"] for e in mine if not e["t_run"]]
                    say(f"{tag} running: {', '.join(running) or 'none'}; queued: {', '.join(queued) or 'none'} "
                        f"| {_job_line(entries)}")
        time.sleep(poll_s)


def _job_result(e: dict) -> dict:
    """The job's ``{"status", "seconds"}``, or a failure saying how it ended (killed, out of time or memory)."""
    try:
        info = e["job"].result()
        if isinstance(info, dict) and "status" in info:
            return info
        raise RuntimeError(f"unexpected result {info!r}")
    except Exception as ex:
        text = str(ex).strip()
        # submitit's first line says how the job ended (e.g. no output, state INTERRUPTED); the rest is its log
        last = text.splitlines()[0][:200] if text else type(ex).__name__
        seconds = time.monotonic() - e["t_run"] if e["t_run"] else 0.0
        return {"status": f"FAILED: job {e['job'].job_id} ended without a result ({e['job'].state}): {last}",
                "seconds": round(seconds, 1)}


def _cancel_jobs(entries: list[dict], runs: dict) -> None:
    """Cancel every job that has not ended; a job that was running counts as stopped, a queued one as not started."""
    pending = [e for e in entries if e["info"] is None and e["job"] is not None]  # unsubmitted: never started
    for e in pending:
        try:
            e["job"].cancel(check=False)
        except Exception as ex:  # already gone
            say(f"{e['tag']} {e['stem']}: cancel failed ({type(ex).__name__}: {ex})")
    deadline = time.monotonic() + 30  # a cancelled job stops its kernel and records itself
    for e in pending:
        while time.monotonic() < deadline:
            try:
                if e["job"].done():
                    break
            except Exception:
                break
            time.sleep(0.5)
        try:
            info = e["job"].result() if e["job"].done() else None
        except Exception:
            info = None
        if not (isinstance(info, dict) and "status" in info):
            if e["phase"] != "running":
                continue  # never started: not in the report's runs
            seconds = time.monotonic() - e["t_run"] if e["t_run"] else 0.0
            info = {"status": f"stopped ({STOP['signal']})", "seconds": round(seconds, 1)}
        e["info"] = info
        runs[e["model"]][e["stem"]] = info
        say(f"{e['tag']} {e['stem']}: {info['status']} (job {e['job'].job_id} cancelled)")


def _clear_old_results(folder: Path, stem: str) -> None:
    """Remove a notebook's metrics and figures before it runs: if it fails or is stopped, the report shows no
    numbers of an earlier run beside this run's status (every metrics file and figure of notebook NN starts
    with ``NN_``)."""
    for sub, pattern in (("metrics", f"{stem[:2]}_*.json"), ("figures", f"{stem[:2]}_*.png")):
        for f in (folder / sub).glob(pattern):
            f.unlink(missing_ok=True)


def _execute(a, nb_path: Path, outdir: Path, progress: Progress, folder: Path | None = None) -> tuple[str, float]:
    """Execute one notebook (written to ``outdir`` whatever happens); returns (status, seconds).

    The notebook runs in a thread of its own, so that SIGTERM and SIGINT reach this process's handler (nbclient
    would take them over in the main thread, shut the kernel down and report a failed cell, and the run would
    go on with the next notebook). Stopped, the kernel is shut down here and the status is ``stopped (SIGTERM)``.
    """
    import nbformat  # here, not at the top: importing it takes 2 s, which a refused command need not wait for
    from nbclient import NotebookClient

    if folder is not None:
        _clear_old_results(folder, nb_path.stem)
    nb = nbformat.read(nb_path, as_version=4)
    progress.notebook(nb_path.stem, nb)
    t0 = time.perf_counter()
    result: dict = {"status": "ok"}
    tmp = tempfile.mkdtemp(prefix="icl-kernel-")
    client = NotebookClient(nb, timeout=a.timeout, kernel_name="python3", config=_kernel_config(tmp),
                            resources={"metadata": {"path": str(nb_path.parent)}},
                            on_cell_execute=progress.cell_execute, on_cell_error=progress.cell_error)

    def run() -> None:
        try:
            client.execute()
        except Exception as e:  # record and go on
            first = str(e).strip().splitlines()[-1][:200] if str(e).strip() else ""
            result["status"] = f"FAILED: {type(e).__name__}: {first}"
            if not STOP["signal"]:  # timeouts and a dead kernel do not pass through on_cell_error
                progress.fail(f"{type(e).__name__}: {str(e).strip() or type(e).__name__}")

    worker = threading.Thread(target=run, name=f"notebook {nb_path.stem}", daemon=True)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(timeout=0.5)
    except KeyboardInterrupt:
        _stop_kernel(client)
        worker.join(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    status = f"stopped ({STOP['signal']})" if STOP["signal"] else result["status"]
    dt = time.perf_counter() - t0
    out = outdir / nb_path.name
    # an executed copy is a result, not a source: unpaired, so that saving it in JupyterLab writes no .py beside it
    # (jupytext.toml pairs every notebook without a pairing of its own)
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb"
    nbformat.write(nb, out)
    try:
        sign_notebook(out)
    except Exception as e:  # an untrusted copy is still a result: say so and go on
        say(f"{progress.tag} {nb_path.stem}: not signed ({type(e).__name__}: {e}); "
            f"run `jupyter trust {out}` to show its widgets and views")
    return status, dt


def _stop_kernel(client) -> None:
    """Shut down the kernel of a running NotebookClient from another thread: SIGTERM to the kernel's process
    (its own session, so a terminal's Ctrl-C never reached it), SIGKILL after 10 s. The client's thread then
    sees a dead kernel, cleans up and returns."""
    km = getattr(client, "km", None)
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def default_notary():
    """The notary `jupyter trust` and JupyterLab use: this user's key and signature database in the Jupyter data
    directory (``jupyter --data-dir``; ``$JUPYTER_DATA_DIR`` moves it)."""
    from nbformat.sign import NotebookNotary

    return NotebookNotary()


def sign_notebook(path: Path, notary=None) -> None:
    """Sign the notebook file at ``path`` as trusted, as `jupyter trust` does.

    JupyterLab shows a notebook's HTML and JavaScript outputs (circuitsvis views, tqdm bars, widgets) only if it is
    trusted: if this user signed exactly this content, or ran it in JupyterLab. An executed copy written here is the
    output of this user's own run, so it is signed as written (read back from disk, so the signature matches what
    JupyterLab reads). ``notary`` (an ``nbformat.sign.NotebookNotary``) defaults to :func:`default_notary`, the one
    JupyterLab checks.
    """
    import nbformat

    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    (notary or default_notary()).sign(nb)


if __name__ == "__main__":
    sys.exit(main())
