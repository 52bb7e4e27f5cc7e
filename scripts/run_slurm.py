"""``make run EXECUTOR=slurm``: one submitit job per (model, notebook), one job array per model (``--cluster local``:
separate processes here, without Slurm), polled until every job has ended; then the report, once."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from run_common import (
    ROOT,
    STOP,
    exit_code,
    interrupt,
    say,
    selected_notebooks,
    selected_tasks,
    stopped_summary,
    timing,
)
from run_notebook import Progress, execute

SLURM_LOG_DIR = "slurm-logs"  # under the results folder: submitit's pickles and each job's stdout and stderr

SLURM_CELLS_PER_JOB = 2  # a job's default time limit: two cell timeouts (its longest cell, and the rest) ...

SLURM_TIME_CAP_MIN = 48 * 60  # ... at most 48 h, a common partition limit (--slurm-time-min sets another)

SLURM_CPUS = 4  # CPU cores per job (the notebook's torch threads; tokenising, data)

SLURM_UNKNOWN_MEM_GB = 16  # a model whose size preflight cannot tell (e.g. notebook 09's own small model)

SLURM_FLAGS = ("slurm_partition", "slurm_gpus", "slurm_time_min", "slurm_mem_gb", "slurm_cpus", "resubmit_all")

def check_executor_args(ap, a) -> None:
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
    it by reference. It runs the notebook as the local run does (:func:`run_notebook.execute`, same progress lines in the job's
    log), records it in runs.json and its duration in durations.json, and returns ``{"status", "seconds"}``."""
    from helpers.core import accounting
    from helpers.study.report import record_run
    from helpers.study.results import model_slug, run_key

    for sig in (signal.SIGTERM, signal.SIGINT):  # scancel, or a cancelled local job: shut the kernel down
        signal.signal(sig, interrupt)
    m, profile, out, nb_path = spec["model"], spec["profile"], Path(spec["out"]), Path(spec["notebook"])
    os.environ.update(spec["env"])  # the parent's ICL_* settings and torch threads
    os.environ.update(ICL_MODEL=m, ICL_PROFILE=profile, ICL_RESULTS_DIR=str(out))
    if spec.get("ledger"):
        os.environ[accounting.ENV] = spec["ledger"]
    else:
        os.environ.pop(accounting.ENV, None)
    tasks = selected_tasks()
    key = run_key(profile)
    folder = out / model_slug(m) / key
    outdir = folder / "notebooks"
    outdir.mkdir(parents=True, exist_ok=True)
    progress = Progress(f"[{model_slug(m)}/{key}]",
                        timing.notebook_estimates(out, m, profile, [nb_path.stem], tasks), spec["progress_every"])
    progress.start()
    try:
        status, dt = execute(argparse.Namespace(timeout=spec["timeout"]), nb_path, outdir, progress, folder)
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

def run_cluster(a, models: list[str], t_start: float) -> int:
    """``--executor slurm``: one submitit job per (model, notebook), one job array per model, polled until every job
    has ended; then the report, once. Notebooks whose last run is ok are kept, not resubmitted (unless
    ``--resubmit-all``). SIGINT / SIGTERM cancels the jobs and reports what finished."""
    import run_slurm as this  # the jobs call run_notebook_job by this module's name, not __main__'s

    from helpers.core import accounting
    from helpers.study.report import ACCOUNTING_DIR, build_report, record_run, recorded_runs, write_accounting
    from helpers.study.results import model_slug, run_key

    tasks, key = selected_tasks(), run_key(a.profile)
    plan: dict[str, tuple[Path, list[Path], dict]] = {}
    for m in models:
        folder = a.out / model_slug(m) / key
        earlier = recorded_runs(folder)
        nbs = selected_notebooks(a, m)
        kept = {} if a.resubmit_all else {p.stem: earlier[p.stem] for p in nbs
                                          if isinstance(earlier.get(p.stem), dict) and earlier[p.stem].get("status") == "ok"}
        plan[m] = (folder, [p for p in nbs if p.stem not in kept], kept)
    n_jobs = sum(len(todo) for _, todo, _ in plan.values())
    est = {m: timing.notebook_estimates(a.out, m, a.profile, [p.stem for p in todo], tasks)
           for m, (_, todo, _) in plan.items()}
    say(f"run: {len(models)} model(s) x {len(selected_notebooks(a))} notebook(s), profile {a.profile}, executor slurm on "
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
        stopped_summary(a, models, {m: {**plan[m][2], **runs[m]} for m in models})
    return exit_code(len(failed))

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
