"""Run sizes from one place.

Every notebook calls :func:`get_profile`; the environment variable
``ICL_PROFILE`` picks ``smoke`` (CI: seconds per notebook), ``default`` (a
laptop CPU: minutes per notebook) or ``paper`` (the paper's full setting, for
a GPU). ``ICL_MODEL`` picks the model and ``ICL_TASKS`` (comma separated)
restricts the tasks: names, or paths of task spec files (your own task, see
:func:`helpers.core.tasks.load_task_spec`). The profiles themselves and the task list are
:mod:`helpers.study.profile_table`; :func:`get_profile` checks every ``ICL_*`` setting first
(:mod:`helpers.study.config`, whose checks read that table).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache

from helpers.core.checks import ArgumentError, is_int, positive_int, seed_arg
from helpers.core.grid import run_grid
from helpers.core.models import DEFAULT_MODEL
from helpers.core.prompts import make_icl_set
from helpers.core.tasks import LabelWordWarning, get_task, run_args
from helpers.study.config import check_environment
from helpers.study.profile_table import PROFILES, Profile, current_tasks, run_sizes

__all__ = ["get_profile", "current_model_name", "cell_timeout", "RunSizes", "OwnTaskSizes", "own_task_sizes", "current_own_task", "OWN_TASK_EXAMPLE",
           "SPAN_TASK", "LabelSpanSizes", "label_span_sizes", "label_span_runs", "study_tasks",
           "AfterSizes", "after_sizes", "after_tasks",
           "Profile"]

@dataclass(frozen=True)
class RunSizes:
    """The run sizes of one notebook, derived from a :class:`Profile` by its experiment module's ``*_sizes(profile)``
    (e.g. :func:`helpers.protocols.isolation.isolation_sizes`): one typed field per size, read as ``sizes.seeds``."""

    def as_dict(self) -> dict:
        """The sizes as a plain dict in field order (what a notebook records beside its claims)."""
        return asdict(self)


def get_profile(name: str | None = None) -> Profile:
    """The profile named by ``name`` or ``$ICL_PROFILE`` (default ``"default"``).

    Every notebook calls it first, so it also refuses, with one message, every ``ICL_*`` setting that cannot
    be honoured (:func:`helpers.study.config.check_environment`: a misspelt name, a value of the wrong kind),
    as the scripts do, instead of a notebook falling back to a default or failing deep inside a helper.
    """
    # ICL_PROFILE and ICL_TASKS are checked below, with their own messages
    _check_settings(tuple(sorted((k, v) for k, v in os.environ.items()
                                 if k.startswith("ICL_") and k not in ("ICL_PROFILE", "ICL_TASKS"))))
    name = name or os.environ.get("ICL_PROFILE") or "default"
    if name not in PROFILES:
        raise ValueError(f"Unknown profile {name!r}; choose one of {sorted(PROFILES)} (set ICL_PROFILE).")
    prof = PROFILES[name]
    tasks = current_tasks(prof.tasks)
    return prof.with_(tasks=tasks)


@lru_cache(maxsize=8)
def _check_settings(settings: tuple[tuple[str, str], ...]) -> None:
    problems = check_environment(dict(settings))
    if problems:
        raise ValueError("Settings that cannot be honoured (docs/your-own.md, 'Settings'):\n- " + "\n- ".join(problems))


OWN_TASK_EXAMPLE = "rotten_tomatoes"  # data/rotten_tomatoes/task.json


def current_own_task(default: str = OWN_TASK_EXAMPLE) -> str:
    """The task notebook 08 studies: ``$ICL_OWN_TASK`` (a spec path or a task name), else the shipped example.

    A spec is loaded and registered; its name is returned.
    """
    return get_task(os.environ.get("ICL_OWN_TASK") or default).name


@dataclass(frozen=True)
class OwnTaskSizes(RunSizes):
    """Run sizes of notebook 08 (:func:`own_task_sizes`)."""

    seeds: tuple[int, ...]
    n_test: int  # test inputs per seed: accuracy, isolation, AUCROC
    n_saliency: int  # saliency inputs per seed
    random_n: int  # the random-word control of isolation runs on the first this many inputs per seed
    batch_size: int


def own_task_sizes(profile: Profile) -> OwnTaskSizes:
    """Run sizes of notebook 08 (notebooks 00-03 in small form, on one task).

    ``paper``: the profile's full sizes. Otherwise the first 3 seeds (``smoke``: its one seed), at most
    32 test inputs per seed for accuracy, isolation and AUCROC, half the saliency inputs (at least 4),
    and the random-word control of isolation (every input's full prompt) on at most 8 inputs per seed:
    a few minutes per model on a CPU with ``default``.
    """
    return OwnTaskSizes(**run_sizes("own_task", profile))


def study_tasks(profile: Profile) -> tuple[str, ...]:
    """The tasks of the per-task studies of notebooks 07 (paper B's, on the binary ones among them) and 10 (every
    class of position, the head rankings): the profile's tasks; under ``smoke`` its first two (SST-2 and TREC of
    the shipped four: two classes and six, one-token and multi-token label words, every code path of those
    studies). Each study runs a demonstrations' prefix per (task, condition), so a smoke run's cost grows with its
    tasks, not with its handful of inputs; its numbers test that the code runs and are not evidence. Claims made on
    fewer tasks than the run's name them (:func:`helpers.study.claims.measured_on`)."""
    return tuple(profile.tasks[: run_sizes("study_tasks", profile)["tasks"]])


SPAN_TASK = "agnews_phrases"  # data/agnews_phrases/task.json: every label word two or three tokens long


@dataclass(frozen=True)
class LabelSpanSizes(RunSizes):
    """Run sizes of notebook 10's comparison of a label word's first token with all of its tokens
    (:func:`label_span_sizes`)."""

    task: str  # a task whose label words span several tokens, fixed before the run (SPAN_TASK)
    seeds: tuple[int, ...]
    n: int  # test inputs per seed: isolation, AUCROC, Hidden_anchor
    random_n: int  # isolation's random control runs on the first this many inputs per seed
    k: int  # layers isolated
    batch_size: int


def label_span_sizes(profile: Profile) -> LabelSpanSizes:
    """``paper``: every seed, ``n_test`` inputs, the random control on ``n_random_control``; ``default``: the first
    two seeds, 32 inputs, the control on 16; ``smoke``: one seed, 4 inputs, 2 controls. k = 5 as in notebook 02
    (smoke: 1). The task: :data:`SPAN_TASK`, AGNews with a phrase per class."""
    return LabelSpanSizes(SPAN_TASK, **run_sizes("label_span", profile))


def label_span_runs(kind: str, model, sizes: LabelSpanSizes, compute) -> dict[int, object]:
    """``{seed: compute(prompt_set)}`` on ``sizes.n`` inputs of one demonstration set per seed of ``sizes.task``
    (:func:`helpers.core.prompts.make_icl_set`; its multi-token label words are the point, so their
    :class:`~helpers.core.tasks.LabelWordWarning` is silenced), each stored on disk under ``kind`` by model, task,
    seed and n: the loop of notebook 10's label-span runs (:mod:`helpers.protocols.aucroc_span`,
    :mod:`helpers.protocols.compression_span`)."""
    if not isinstance(sizes, LabelSpanSizes):
        raise TypeError(f"sizes must be the LabelSpanSizes of label_span_sizes(profile), got {type(sizes).__name__}")
    (task,), seeds = run_args([sizes.task], sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # every label word is several tokens, by design
            return compute(make_icl_set(model, task, seed, sizes.n))

    return {seed: out for (_, seed), out in run_grid(kind, model, [task], seeds, run, {"n": sizes.n}).items()}


@dataclass(frozen=True)
class AfterSizes(RunSizes):
    """Run sizes of notebook 11, the accounts after the anchors (:func:`after_sizes`)."""

    seeds: tuple[int, ...]  # one demonstration set per (task, seed)
    n: int  # inputs per (task, seed): natural, flipped and zero-shot predictions, the knockout, the query's states
    n_flow: int  # the first this many inputs also get the saliency flows, natural and flipped
    random_n: int  # isolation's random control runs on the first this many inputs
    k: int  # layers isolated or knocked out (the first k)
    folds: int  # the probe's cross-validation folds (fewer where a class has fewer inputs)
    frac: float  # the share of all heads in each ablated set (at least 4 heads)
    batch_size: int

    def __post_init__(self):
        # a k of 0 would knock out nothing and claim "inconclusive"; 2.5 is no number of layers
        for name in ("n", "n_flow", "random_n", "k", "batch_size"):
            positive_int(name, getattr(self, name))
        if not is_int(self.folds) or self.folds < 2:
            raise ArgumentError(f"folds must be a whole number of 2 or more (a probe needs a held-out fold), got "
                                f"{self.folds!r}")
        if not self.seeds:
            raise ArgumentError("seeds is empty: notebook 11 needs at least one demonstration set, e.g. seeds=(42,)")
        for s in self.seeds:
            seed_arg(s, "each seed")
        if isinstance(self.frac, bool) or not isinstance(self.frac, (int, float)) or not 0 < self.frac <= 1:
            raise ArgumentError(f"frac is the share of all heads in each ablated set, in (0, 1], got {self.frac!r}")


def after_sizes(profile: Profile) -> AfterSizes:
    """``paper``: every seed, ``n_test`` inputs (the saliency on ``n_saliency``, the random control on
    ``n_random_control``); ``default``: the first two seeds, 64 inputs (so that a 6-class task has inputs of every
    class in most folds), the saliency on the first 8, the random control on 16; ``smoke``: one seed, 12 inputs, 2,
    2. k = 5 as in notebook 02 (smoke: 1); a 5-fold probe (smoke: 2); the top 2% of heads, as notebook 10."""
    s = run_sizes("after", profile)
    return AfterSizes(**{**s, "n_flow": min(s["n_flow"], s["n"])})


def after_tasks(profile: Profile) -> tuple[str, ...]:
    """The tasks of notebook 11: the profile's; under ``smoke`` its first (SST-2 of the shipped four), since every
    step runs its own demonstration sets per task and a smoke run only tests that the code runs (the six-class
    paths, a flip that is a cycle and the probe's folds, are tested on the tiny models). Claims made on fewer tasks
    than the run's name them (:func:`helpers.study.claims.measured_on`)."""
    return tuple(profile.tasks[: run_sizes("after_tasks", profile)["tasks"]])


def current_model_name(default: str | None = None) -> str:
    """``$ICL_MODEL`` or the offline default model."""
    return os.environ.get("ICL_MODEL") or default or DEFAULT_MODEL


def cell_timeout(profile: str, given: int | None = None) -> int:
    """Seconds a notebook cell may run: ``given`` (``--timeout``), else ``$ICL_CELL_TIMEOUT``, else the profile's."""
    source, raw = "--timeout", given
    if raw is None:
        source, raw = "ICL_CELL_TIMEOUT", os.environ.get("ICL_CELL_TIMEOUT", "").strip() or None
    if raw is None:
        return PROFILES[profile].cell_timeout if profile in PROFILES else PROFILES["default"].cell_timeout
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise ValueError(f"{source}={raw!r}: give a positive whole number of seconds per notebook cell.")
    return value
