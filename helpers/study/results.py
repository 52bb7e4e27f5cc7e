"""Where a notebook's results go: ``results_dir()`` is ``$ICL_RESULTS_DIR`` (default ``results/``) /
``<model slug>/<run key>`` (the profile, plus the task set when it is not the profile's: :func:`run_key`); notebooks write figures (PNG) and metrics (JSON) there through
:func:`save_figure` and :func:`save_metrics`. Expensive steps are stored by content in
:mod:`helpers.core.store`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from helpers.core.models import model_identity
from helpers.core.store import atomic_write_bytes, jsonable, task_identity
from helpers.core.tasks import get_task
from helpers.study.profile_table import PROFILES, current_tasks
from helpers.study.profiles import OWN_TASK_EXAMPLE, current_model_name, current_own_task, get_profile
from helpers.study.stats import Interval

__all__ = ["ResultsFolderError", "unwritable", "results_dir", "run_key", "run_tasks", "studies_tasks", "save_metrics", "load_metrics", "save_figure", "model_slug", "summary_row", "mean_std"]

ROOT = Path(__file__).resolve().parent.parent.parent

def model_slug(name: str) -> str:
    """The results folder of a model: the last part of its name, lower case. A local model directory gives
    ``local-<folder name>-<hash of its path>``, and a dtype other than float32 (``$ICL_DTYPE``, or the
    ``@dtype`` of a recorded name) is appended (:func:`helpers.core.models.model_identity`), so two folders with
    the same name, or two dtypes, never share results."""
    return model_identity(name).split("/")[-1].lower().replace(":", "-").replace("@", "-")


def run_tasks(profile: str | None = None) -> tuple[tuple[str, ...], str]:
    """``(tasks, own task)`` a run works on: ``$ICL_TASKS`` (else the profile's) and notebook 08's
    ``$ICL_OWN_TASK`` (else the shipped example), as task names."""
    default = PROFILES[profile].tasks if profile in PROFILES else PROFILES["default"].tasks
    return current_tasks(default), current_own_task()


def run_key(profile: str | None = None, tasks: tuple[str, ...] | None = None, own_task: str | None = None) -> str:
    """The results folder of a run below its model's: the profile, and the task set when it is not the
    profile's (``smoke-tasks-fp`` for ``ICL_TASKS=fp``; ``-own-<task>`` when notebook 08 studies another task
    than the shipped example), so a run on other tasks never overwrites the metrics of another. A task of a spec
    file is named with the start of its digest (``three_way.1a2b3c4d``: template, label words, separator, data),
    so two specs with one name but different content never share a folder or a report. ``tasks`` and
    ``own_task`` default to :func:`run_tasks`. Also the suffix of ``RESULTS-<key>.md``.
    """
    profile = profile or get_profile().name
    if tasks is None or own_task is None:
        t, o = run_tasks(profile)
        tasks, own_task = (t if tasks is None else tuple(tasks)), (o if own_task is None else own_task)
    default = PROFILES[profile].tasks if profile in PROFILES else PROFILES["default"].tasks
    def named(t: str) -> str:  # a task of a spec carries its digest: two specs with one name never share a folder
        digest = task_identity(t)
        return f"{t}.{digest[:8]}" if digest else t

    key = profile
    if tuple(tasks) != tuple(default):
        names = "+".join(named(t) for t in tasks)
        if len(names) > 48:  # a long list: its start, and a hash of all of it
            names = f"{names[:36]}-{hashlib.sha256(names.encode()).hexdigest()[:8]}"
        key += f"-tasks-{names}"
    if own_task != OWN_TASK_EXAMPLE:
        key += f"-own-{named(own_task)}"
    return key


def studies_tasks(tasks, why: str) -> tuple[str, ...]:
    """Say that this notebook studies ``tasks`` whatever ``$ICL_TASKS`` selects (``why``: e.g. "the paper's task for
    §3.3"), and key its results by them: when they are not among the selected tasks, ``$ICL_TASKS`` is set to
    ``tasks`` in this kernel, so :func:`results_dir` (and the run's RESULTS) file them under the run of the tasks
    that ran, never under another task set's. Returns ``tasks``."""
    tasks = tuple(tasks)
    selected = get_profile().tasks
    if not set(tasks) <= set(selected):
        print(f"This notebook studies {', '.join(get_task(t).display for t in tasks)} ({why}), not the selected "
              f"{', '.join(get_task(t).display for t in selected)}; its results are saved under the run of "
              f"{'+'.join(tasks)} (results folder {run_key(tasks=tasks)}).")
        os.environ["ICL_TASKS"] = ",".join(tasks)
    return tasks


def results_dir(model_name: str | None = None, profile: str | None = None) -> Path:
    """``$ICL_RESULTS_DIR/<model slug>/<run key>`` (:func:`model_slug`, :func:`run_key`): model, dtype, profile
    and, when not the default, the task set."""
    model_name = model_name or current_model_name()
    profile = profile or get_profile().name
    base = Path(os.environ.get("ICL_RESULTS_DIR") or ROOT / "results")
    d = base / model_slug(model_name) / run_key(profile)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ResultsFolderError(unwritable(d) or f"{d} cannot be created ({e.strerror or e})") from None
    return d


class ResultsFolderError(OSError):
    """The results folder cannot be written; the message names the folder and the fix."""


def unwritable(folder: Path) -> str | None:
    """Why nothing can be written under ``folder``, or None. Creates nothing: an existing folder gets a temporary
    file written and removed; a missing one is judged by its nearest existing parent."""
    import tempfile  # lazy: only when a folder is checked

    fix = ("point it at a folder you can write (ICL_RESULTS_DIR for results, ICL_RESULTS_CACHE for the store), or "
           "fix its permissions")
    folder = Path(folder)
    if folder.is_dir():
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".preflight-"):
                pass
        except OSError as e:
            return f"{folder} is not writable ({e.strerror or e}): {fix}"
        return None
    parent = next((p for p in folder.absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{folder} cannot be created: {parent} is not a writable folder; {fix}"
    return None




def save_metrics(section: str, metrics: dict, model_name: str | None = None, profile: str | None = None) -> Path:
    """Write ``metrics`` as ``metrics/<section>.json`` in the results folder."""
    try:
        path = results_dir(model_name, profile) / "metrics" / f"{section}.json"
        atomic_write_bytes(path, json.dumps(jsonable(metrics), indent=1).encode())
    except OSError as e:
        raise OSError(f"cannot write the results folder ({e.strerror or e}: {e.filename}): point ICL_RESULTS_DIR at "
                      f"a folder you can write (`make preflight` checks this before a run)") from None
    return path


def load_metrics(section: str, model_name: str | None = None, profile: str | None = None) -> dict | None:
    path = results_dir(model_name, profile) / "metrics" / f"{section}.json"
    return json.loads(path.read_text()) if path.exists() else None


def save_figure(fig, name: str, model_name: str | None = None, profile: str | None = None) -> Path:
    path = results_dir(model_name, profile) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def mean_std(values) -> str:
    """``"0.612 ± 0.034 (5 seeds)"``; a single value prints without std."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return "n/a"
    if v.size == 1:
        return f"{v[0]:.3f} (1 seed)"
    return f"{v.mean():.3f} ± {v.std(ddof=0):.3f} ({v.size} seeds)"


def summary_row(claim: str, paper, ours, verdict: str) -> dict:
    """One line of the report's summary: the paper's value, ours, and a computed verdict.

    ``ours``: a :class:`helpers.study.stats.Interval` (rendered "estimate [low, high] (95% CI; seeds, inputs)"),
    a list of per-seed values (rendered mean ± std) or a ready string.
    Notebooks save a list of these as ``save_metrics(section, {"summary": [...], ...})``.
    """
    if isinstance(ours, Interval):
        ours = f"{ours:.3f} (95% CI; {ours.n_seeds} seed(s), {ours.n_inputs} inputs)"
    elif not isinstance(ours, str):
        ours = mean_std(list(ours))
    if isinstance(paper, float):
        paper = f"{paper:.3f}"
    return {"claim": claim, "paper": "" if paper is None else str(paper), "ours": ours, "verdict": verdict}
