"""One run grid: a method over tasks x seeds, each cell stored by content, with a progress bar.

Every experiment runs its method on each (task, seed) of a profile and keeps the results apart by what they were
computed from. :func:`run_grid` is that loop, written once: it asks the store (:func:`helpers.core.store.cached`)
for each cell under the step's name and the parameters that identify it (the model, the task, the seed, and what
the caller adds), so a rerun resumes where it stopped and a cell computed for other inputs is never returned. The
model's weights are hashed once for the whole grid (:func:`helpers.core.store.same_weights`). A draw that must
stay apart from the run's seeds takes its seed from a named stream of :mod:`helpers.core.seeds` inside
``compute``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tqdm.auto import tqdm

from helpers.core.checks import ArgumentError, seed_arg
from helpers.core.store import cached, same_weights

__all__ = ["run_grid", "model_label"]

T = TypeVar("T")


def model_label(model, model_name: str | None = None) -> str:
    """The name stored results file a model under: ``model_name`` when given, else the name it was loaded by
    (``cfg.icl_model_name``), else TransformerLens' ``cfg.model_name``."""
    return model_name if model_name is not None else getattr(model.cfg, "icl_model_name", model.cfg.model_name)


def run_grid(step: str, model, tasks: Sequence[str], seeds: Sequence[int], compute: Callable[[str, int], T],
             params: Callable[[str, int], dict] | dict | None = None, *, model_name: str | None = None,
             progress: bool | str = False) -> dict[tuple[str, int], T]:
    """``{(task, seed): compute(task, seed)}`` for every task and seed (tasks outer), each stored under ``step``
    with the parameters ``{"model", "task", "seed"}`` and ``params`` (a dict for every cell, or a function of
    ``(task, seed)``), and the model's weights. ``progress``: a progress bar, labelled by the string given or by
    ``step``."""
    if isinstance(tasks, str) or isinstance(seeds, (str, int)):
        raise TypeError("tasks and seeds must be sequences, e.g. tasks=['sst2'], seeds=[42]")
    seeds = [seed_arg(s) for s in seeds]  # "42" or 42.0 would be stored under another key than 42
    if not list(tasks) or not seeds:
        raise ArgumentError(f"run_grid({step!r}) got {'no task' if not list(tasks) else 'no seed'}: nothing would "
                            "run, and the claims built on it would rest on nothing; pass e.g. tasks=['sst2'], "
                            "seeds=[42]")
    if len(set(seeds)) != len(seeds):
        raise ArgumentError(f"run_grid({step!r}) got a seed twice ({seeds}): each cell is one (task, seed)")
    name = model_label(model, model_name)
    cells = [(t, s) for t in tasks for s in seeds]
    out: dict[tuple[str, int], Any] = {}
    with same_weights(model):
        for task, seed in tqdm(cells, desc=progress if isinstance(progress, str) else step, disable=not progress):
            extra = params(task, seed) if callable(params) else dict(params or {})
            out[(task, seed)] = cached(step, {"model": name, "task": task, "seed": seed, **extra},
                                       lambda task=task, seed=seed: compute(task, seed), model=model)
    return out
