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
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the parts, by job (as submitit splits itself): what they share, one notebook's execution, the local workers, the
# Slurm jobs; their names are re-exported here, where the tests and docs find them
from run_common import (  # noqa: E402
    OWN_MODEL,
    ROOT,
    STOP,
    add_run_arguments,
    exit_code,
    interrupt,
    say,
    selected_notebooks,
    stop_with_parent,
    stopped_summary,
    timing,
    with_own_models,
)
from run_local import announce, parallel, serial  # noqa: E402
from run_notebook import Progress, default_notary, execute, prepare_notary, sign_notebook  # noqa: E402
from run_slurm import (  # noqa: E402
    check_executor_args,
    make_executor,
    run_cluster,
    run_notebook_job,
    slurm_mem_gb,
    slurm_parameters,
    slurm_time_min,
)

__all__ = ["main", "OWN_MODEL", "Progress", "execute", "sign_notebook", "default_notary", "selected_notebooks",
           "with_own_models", "stop_with_parent", "make_executor", "run_notebook_job", "slurm_parameters",
           "slurm_time_min", "slurm_mem_gb"]


def main(argv=None) -> int:
    from helpers.study.config import check_environment, option

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)  # --profile, --models, --notebooks, --out, --jobs: as preflight.py takes them
    ap.add_argument("--timeout", type=int, default=None,
                    help="seconds one notebook cell may run (default: $ICL_CELL_TIMEOUT, else the profile's: "
                         "smoke 3600, default 7200, paper 86400)")
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
    ap.add_argument("--runs-json", type=Path, help=argparse.SUPPRESS)  # worker mode: write runs, no report
    a = ap.parse_args(argv)
    check_executor_args(ap, a)
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
        signal.signal(sig, interrupt)
    stop_with_parent()
    if a.runs_json is None:
        models = with_own_models(a, models)
    if a.executor == "slurm":
        prepare_notary()
        return run_cluster(a, models, t_start)
    cores = os.cpu_count() or 1
    jobs = timing.parallel_jobs(len(models), a.jobs, cores) if a.runs_json is None else 1
    if a.runs_json is None:
        announce(a, models, jobs, cores)
        prepare_notary()
    if jobs > 1:
        runs, failed = parallel(a, models, jobs, cores)
    else:
        runs, failed = serial(a, models)
    if a.runs_json is not None:
        a.runs_json.write_text(json.dumps({"runs": runs, "failed": failed, "stopped": STOP["signal"]}))
        if STOP["signal"]:
            # stopped: leave at once. The kernel is already shut down (_stop_kernel), and the interpreter's exit
            # handlers (nbclient's kernel cleanup, the kernel channels' sockets) could hold this worker past the
            # parent's 60 s wait for it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code(failed))
        return exit_code(failed)
    total = time.perf_counter() - t_start
    own = [m for m in models if m in OWN_MODEL.values()]
    note = (f"{len(models) - len(own)} model(s){''.join(f' and the {m}' for m in own)}, {jobs} parallel job(s) on "
            f"{cores} CPU core(s); wall time {total / 60:.1f} min")
    if STOP["signal"]:
        note += f"; stopped by {STOP['signal']}"
    report = build_report(a.out, a.profile, models, runs, note=note)
    print(f"{note}\nreport: {report}")
    if STOP["signal"]:
        stopped_summary(a, models, runs)
    return exit_code(failed)


if __name__ == "__main__":
    sys.exit(main())
