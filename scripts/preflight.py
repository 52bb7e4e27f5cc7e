"""Check, in seconds, that a run can start; `make run` calls it first.

    python scripts/preflight.py --profile default --models google/gemma-3-270m smollm2 --jobs 0

Checks the profile, the tasks (``$ICL_TASKS``) and their data files, every
model (name, weights installed or downloadable, the Hugging Face hub reachable
for hub models), the device, free RAM and disk against a rough need, and prints
the estimated run time (scripts/timing.py, the same estimate ``make run``
prints). Exit code 0 if the run can start, 1 with the reasons if not; nothing
is downloaded and no model is loaded.

The needs are rough: RAM about three float32 copies of the weights plus 2 GB
per model running at once (5.2 GB for Gemma-3-270m; the largest notebook
process of a default run of both offline models peaked at 5.3 GB), disk 1 GB
for results plus the weights not yet on disk.
``--ignore-resources`` turns RAM and disk shortfalls into warnings.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import timing  # noqa: E402  (scripts/timing.py)

# the checks, by kind (settings and data; models and the machine), re-exported here, where `make preflight`,
# run_all.py and the tests find them
from preflight_models import (  # noqa: E402
    DISK_BASE_GB,
    GB,
    LOCAL_CTX,
    LOCAL_LAYERS,
    LOCAL_PARAMS,
    PARAMS,
    RAM_BASE_GB,
    RAM_BYTES_PER_PARAM,
    WEIGHT_FILES,
    available_ram,
    check_context,
    check_depth,
    check_device,
    check_local_model,
    check_model,
    check_resources,
    disk_need,
    free_disk,
    hub_cached,
    hub_reachable,
    local_weight_files,
    n_params,
    offline_weights,
    pip_index_versions,
    ram_need,
    store_root,
    tokenizer_offline,
)
from preflight_tasks import (  # noqa: E402
    PreflightError,
    check_label_words,
    check_notebooks,
    check_own_task,
    check_profile,
    check_task_data,
    check_tasks,
    expected_sha256,
    scan_rows,
)

__all__ = ['main', 'estimate', 'PreflightError', 'check_profile', 'check_tasks', 'check_own_task', 'scan_rows', 'expected_sha256', 'check_task_data', 'check_label_words', 'check_notebooks', 'GB', 'PARAMS', 'RAM_BASE_GB', 'RAM_BYTES_PER_PARAM', 'DISK_BASE_GB', 'hub_reachable', 'hub_cached', 'pip_index_versions', 'offline_weights', 'tokenizer_offline', 'check_model', 'WEIGHT_FILES', 'local_weight_files', 'check_local_model', 'LOCAL_PARAMS', 'LOCAL_LAYERS', 'LOCAL_CTX', 'check_context', 'store_root', 'check_depth', 'n_params', 'check_device', 'ram_need', 'disk_need', 'available_ram', 'free_disk', 'check_resources']


def estimate(out: Path, models: list[str], profile: str, notebooks: list[str], jobs: int,
             tasks: tuple[str, ...] | None = None, threads: int | None = None) -> dict:
    """{"per_model": {model: seconds}, "sources": {model: {source: count}}, "wall": seconds}, each worker with
    ``threads`` torch threads (default: what run_all gives each of ``jobs`` workers on this machine); a model whose
    weights are not cached yet also pays its first load (:func:`timing.first_load_seconds`)."""
    per_model, sources = {}, {}
    threads = threads or timing.worker_threads(jobs)
    for m in models:
        est = timing.notebook_estimates(out, m, profile, notebooks, tasks, threads)
        first = timing.first_load_seconds(m) if notebooks else 0.0
        per_model[m] = sum(s for s, _ in est.values()) + first
        src: dict[str, int] = {}
        for _, where in est.values():
            src[where] = src.get(where, 0) + 1
        if first:
            src["first-load (weights not cached yet)"] = 1
        sources[m] = src
    return {"per_model": per_model, "sources": sources, "wall": timing.wall_seconds(list(per_model.values()), jobs)}


def main(argv=None) -> int:
    from run_common import add_run_arguments  # scripts/run_common.py: the arguments run_all.py takes too

    from helpers.study.config import check_environment, option

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)  # --profile, --models, --notebooks, --out, --jobs: as run_all.py takes them
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the Hugging Face hub")
    ap.add_argument("--ignore-resources", action="store_true", help="RAM and disk shortfalls only warn")
    a = ap.parse_args(argv)
    a.profile, profile_note = option(a.profile, "ICL_PROFILE", "default", "--profile")
    a.models, models_note = option(a.models, "ICL_MODEL", ["google/gemma-3-270m"], "--models")
    a.out, _ = option(a.out, "ICL_RESULTS_DIR", ROOT / "results", "--out")
    a.out = Path(a.out)

    problems: list[str] = []

    def ok(what: str, text: str) -> None:
        print(f"  ok    {what}: {text}", flush=True)

    def fail(what: str, text: str) -> None:
        problems.append(what)
        print(f"  FAIL  {what}: {text}", flush=True)

    def warn(what: str, text: str) -> None:
        print(f"  warn  {what}: {text}", flush=True)

    cores = os.cpu_count() or 1
    jobs = timing.parallel_jobs(len(a.models), a.jobs, cores)
    print(f"preflight: profile {a.profile}, models {' '.join(a.models)}, {jobs} parallel job(s) on {cores} core(s)",
          flush=True)
    for note in (profile_note, models_note):
        if note:
            warn("settings", note)
    # the variables the checks below cover get their own line (profile, tasks, notebook 08's task, models)
    covered = ("ICL_PROFILE", "ICL_TASKS", "ICL_OWN_TASK", "ICL_MODEL")
    env_problems = check_environment({k: v for k, v in os.environ.items() if k not in covered})
    for p in env_problems:
        fail("settings", p)
    if not env_problems:
        from helpers.core.models import dtype_name

        ok("settings", f"dtype {dtype_name()}" + "".join(
            f", {k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("ICL_") and os.environ[k]
            and k not in covered + ("ICL_DTYPE",)))
    profile = tasks = None
    try:
        profile = check_profile(a.profile)
        ok("profile", a.profile)
    except PreflightError as e:
        fail("profile", str(e))
    nbs = sorted(p.stem for p in a.notebooks_dir.glob("[0-9][0-9]_*.ipynb")
                 if not a.notebooks or p.name[:2] in a.notebooks)
    unknown = check_notebooks(a.notebooks, a.notebooks_dir)
    if unknown:
        fail("notebooks", unknown)
    try:
        from helpers.core.backend import BackendError, backend, tl_version

        ok("backend", f"{backend()} (TransformerLens {tl_version()})")
    except BackendError as e:
        fail("backend", str(e))
    own = None
    if profile is not None:
        try:
            tasks = check_tasks(profile)
            ok("tasks", ",".join(tasks))
        except PreflightError as e:
            fail("tasks", str(e))
        if any(nb.startswith("08") for nb in nbs):
            try:
                own = check_own_task()
            except PreflightError as e:
                fail("own task", str(e))
        for t in dict.fromkeys((*(tasks or ()), *((own,) if own else ()))):
            found = check_task_data(t)
            for p in found:
                fail(f"task {t}", p)
            if not found:
                ok(f"task {t}", "spec, checksums and every row of train and test"
                   + (" (notebook 08)" if t == own and t not in (tasks or ()) else ""))
    models = []
    for name in a.models:
        try:
            canon, where = check_model(name, a.timeout)
            models.append(canon)
            ok(f"model {canon}", where)
        except PreflightError as e:
            fail(f"model {name}", str(e))
            continue
        shallow = check_depth(canon, LOCAL_LAYERS.get(canon, 0), profile, nbs) if profile is not None else None
        if shallow:
            fail(f"model {canon}", shallow)
        all_tasks = tuple(dict.fromkeys((*(tasks or ()), *((own,) if own else ()))))
        if not all_tasks:
            continue
        tok, why = tokenizer_offline(canon)
        if tok is None:
            warn(f"label words {canon}", f"not checked before the run: {why}; the notebooks check them when the "
                 "model loads")
            continue
        clashes = check_label_words(tok, all_tasks)
        for c in clashes:
            fail(f"label words {canon}", c)
        for c in ([] if clashes else check_context(canon, LOCAL_CTX.get(canon, 0), tok, all_tasks)):
            fail(f"context {canon}", c)
        if not clashes:
            ok(f"label words {canon}", f"distinct first tokens in {len(all_tasks)} task(s)")
    from helpers.study.results import unwritable

    for what, folder in (("results folder", a.out), ("result store", store_root())):
        why = unwritable(folder)
        if why:
            fail(what, why)
        else:
            ok(what, f"{folder} is writable")
    if problems:  # stop before the slower checks: nothing could run anyway
        return _verdict(problems)
    device, device_warnings = check_device(a.profile, jobs)
    ok("device", device)
    for w in device_warnings:
        warn("device", w)
    lines, shortfalls = check_resources(models, jobs, a.out)
    for line in lines:
        ok(*line.split(": ", 1))
    for s in shortfalls:
        if a.ignore_resources:
            warn("resources", s)
        else:
            fail("resources", s + " (PREFLIGHT_ARGS=--ignore-resources to go on anyway)")
    own = [s for s in nbs if s[:2] in timing.OWN_MODEL]  # run once, as their own model (timing.OWN_MODEL)
    nbs = [s for s in nbs if s not in own]
    est = estimate(a.out, models, a.profile, nbs, jobs, tasks if os.environ.get("ICL_TASKS") else None)
    for m in models:
        src = ", ".join(f"{n} from {where} durations" if not where.startswith("first-load") else
                        "plus the first load: its weights are not unpacked yet"
                        for where, n in sorted(est["sources"][m].items()))
        print(f"  time  {m}: about {timing.fmt_duration(est['per_model'][m])} for {len(nbs)} notebooks ({src})")
    for s in own:
        sec = sum(t for t, _ in timing.notebook_estimates(a.out, timing.OWN_MODEL[s[:2]], a.profile, [s],
                                                          threads=timing.worker_threads(jobs, cores)).values())
        print(f"  time  {timing.OWN_MODEL[s[:2]]}: about {timing.fmt_duration(sec)} for {s} (its own model, run once)")
    print(f"estimated run time: about {timing.fmt_duration(est['wall'])} "
          f"({len(models)} model(s), {jobs} at a time)", flush=True)
    return _verdict(problems)


def _verdict(problems: list[str]) -> int:
    if problems:
        print(f"preflight failed ({', '.join(problems)}: see FAIL above); nothing was run", flush=True)
        return 1
    print("preflight passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
