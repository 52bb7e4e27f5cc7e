"""The profiles (``smoke``, ``default``, ``paper``), every method's run sizes per profile, and the tasks a run studies.

:data:`PROFILES` holds each profile's shared numbers (seeds, test inputs, saliency inputs, the batch size, ...);
:data:`RUN_SIZES` is the one table of run sizes, a row per method and a column per profile, whose cells are numbers
or one of the profile's own numbers by name (:class:`Own`) or a slice of its seeds (:class:`Seeds`). Every
``*_sizes(profile)`` function reads its method's cell through :func:`run_sizes`, so no code below this table
branches on a profile's name (``tests/test_run_sizes.py`` holds every size to its recorded value).
:func:`helpers.study.profiles.get_profile` picks a profile after checking the settings
(:mod:`helpers.study.config`); those checks read :data:`PROFILES` and :func:`current_tasks` here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from helpers.core.sizing import CONTROL_BATCH, CONTROL_HEAVY_BATCH
from helpers.core.tasks import TASKS, SpecError, TemplateError, UnknownTaskError, get_task, registered_tasks

__all__ = ["Profile", "PROFILES", "PAPER_SEEDS", "OFFLINE_TASKS", "current_tasks", "Own", "Seeds", "RUN_SIZES",
           "run_sizes", "per_task"]

PAPER_SEEDS = (42, 43, 44, 45, 46)
OFFLINE_TASKS = ("sst2", "trec", "agnews", "tweet_emotion")


@dataclass(frozen=True)
class Profile:
    name: str
    seeds: tuple[int, ...]
    n_test: int  # test inputs per task and seed (accuracy, loyalty, AUC-ROC, compression)
    n_saliency: int  # inputs per task and seed for the gradient saliency
    reweight_epochs: int  # anchor re-weighting epochs (paper: 10)
    reweight_train_per_class: int  # paper: 4
    random_top_draws: int  # Hidden_random-top: best of this many draws (paper: 20)
    n_diagnosis: int  # test inputs for the error-diagnosis PCA / AUC
    # notebook 02's random-word control: its first inputs per task and seed (the label conditions keep n_test).
    # The control follows the authors' draw, a fresh set of random positions per input and per layer, so it cannot
    # share the demonstrations' pass (helpers.core.prefix) and runs every input's full prompt.
    n_random_control: int
    batch_size: int
    tasks: tuple[str, ...] = field(default=OFFLINE_TASKS)
    # seconds one notebook cell may run under `make run` before the notebook counts as failed (a guard against
    # a hung kernel, not a budget); ICL_CELL_TIMEOUT or `make run CELL_TIMEOUT=...` overrides it
    cell_timeout: int = 3600

    def with_(self, **kw) -> Profile:
        return replace(self, **kw)


PROFILES = {
    # smoke: 2 random-control inputs of the 4 (2 on AGNews) that notebook 02 runs, so CI covers the subset's pairing
    "smoke": Profile("smoke", seeds=(42,), n_test=8, n_saliency=4, reweight_epochs=1,
                     reweight_train_per_class=4, random_top_draws=2, n_diagnosis=24, n_random_control=2,
                     batch_size=8),
    # The paper's protocol on every (task, seed) of the sizes it fixes per cell: re-weighting trains 10 epochs,
    # Hidden_random-top is the best of 20 draws, notebook 02's random-word control runs on all 64 inputs of every
    # (task, seed) (the authors' draw: random positions per input and per layer, so every input runs its whole
    # prompt in the isolated layers; the last-k runs share the layers below, helpers.experiments.isolation), and
    # the saliency runs 32 inputs per task and seed (AGNews too), each with its own demonstrations and a backward
    # pass. Every headline cell (vanilla 1-/5-shot, Figure 4's four isolation conditions, AUCROC, Table 1,
    # Table 2, notebook 07's accuracy and ablation) has 64 test inputs per (task, seed) and all 5 seeds, against
    # the paper's 1000; the shared-prefix engine (helpers.core.prefix) runs each demonstration set once, and
    # one-token training steps of a task's seeds run together (reweighting.train_reweighting_many), which is what
    # makes this fit on a CPU. Still smaller than the paper's on purpose: the inputs per cell (64, paper 1000),
    # the isolation k-sweep (16 inputs, first seed: a curve over 12 extra conditions) and error diagnosis (one
    # seed, 120 inputs). `make run ACCOUNT=1` writes what each step costs (docs/performance.md). Measured on 2
    # CPU cores (Gemma 3 270M alone, two threads): 79.7 min of notebooks, of which 05 takes 26 min (20 of its 23
    # evaluations of each input are Hidden_random-top's draws), 07 16 min, 02 15 min and 01 10 min.
    # That is 1.35 times the earlier default's time (58.3 min, same machine, notebooks 00-07): these sizes do
    # not fit half of it, the goal of the speed work (docs/results.md, 'Run sizes'); 2 draws instead of 20 would save about
    # 20 of the 26 minutes of 05 (estimated from the accounting, not measured).
    # Its cell limit is 2 h: 05's Table 2 cell takes 25 min with two threads, more with one thread per model when
    # both offline models run in parallel; the limit stops a hung kernel, it is not a budget.
    "default": Profile("default", seeds=PAPER_SEEDS, n_test=64, n_saliency=32, reweight_epochs=10,
                       reweight_train_per_class=4, random_top_draws=20, n_diagnosis=120, n_random_control=64,
                       batch_size=16, cell_timeout=2 * 3600),
    # A paper cell runs one experiment over 4 tasks x 5 seeds x 1000 inputs: about 16 times the default's inputs,
    # up to 70 times its work in notebook 05 (20 Hidden_random draws). The default's longest cell (05's Table 2) takes
    # about 25 minutes on two CPU cores with a 270M model, so a paper cell can take hours even on a GPU with GPT2-XL or GPT-J; 24 h stops
    # only a kernel that hangs. Finished steps are cached on disk, so a rerun resumes after a timeout.
    "paper": Profile("paper", seeds=PAPER_SEEDS, n_test=1000, n_saliency=1000, reweight_epochs=10,
                     reweight_train_per_class=4, random_top_draws=20, n_diagnosis=1000, n_random_control=1000,
                     batch_size=16, cell_timeout=24 * 3600),
}


@dataclass(frozen=True)
class Own:
    """A cell of :data:`RUN_SIZES` that is the profile's own number ``field`` (``Own("n_test")``), times ``times``."""

    field: str
    times: int = 1


@dataclass(frozen=True)
class Seeds:
    """A cell of :data:`RUN_SIZES` that is the profile's seeds ``[start:stop]`` (``Seeds()``: every seed,
    ``Seeds(2)``: the first two)."""

    stop: int | None = None
    start: int = 0


ALL, BATCH = Seeds(), Own("batch_size")


def _same(cell: dict) -> dict[str, dict]:
    return {name: cell for name in PROFILES}


# {method: {profile: {size: cell}}}: every method's run sizes, each cell a number, a tuple, Own (the profile's own
# number), Seeds (a slice of its seeds), None (the method's own rule: every checkpoint, no sweep subset), or
# {task: number, "*": number} (per task, "*" for the others; helpers.study.profile_table.per_task). The methods'
# sizes functions read their row (run_sizes) and say in their docstrings what each size is for.
RUN_SIZES: dict[str, dict[str, dict]] = {
    # notebook 00: vanilla 1-/5-shot accuracy
    "setting": _same({"seeds": ALL, "n_test": Own("n_test"), "batch_size": BATCH}),
    # notebook 01: a backward pass per input, batches split further by the attention patterns' memory
    "saliency": _same({"seeds": ALL, "n": Own("n_saliency"), "batch_size": 16}),
    # notebook 02: the four k=5 conditions, the k sweep on a subset, the random control on its first inputs
    "isolation": {
        "smoke": {"seeds": ALL, "n": {"agnews": 2, "*": 4}, "sweep_seeds": Seeds(1), "sweep_n": None, "k_sweep": (1,)},
        "default": {"seeds": ALL, "n": Own("n_test"), "sweep_seeds": Seeds(1), "sweep_n": 16, "k_sweep": (1, 3, 7)},
        "paper": {"seeds": ALL, "n": Own("n_test"), "sweep_seeds": ALL, "sweep_n": None, "k_sweep": (1, 3, 7)}},
    # notebook 03: one forward pass per input
    "aucroc": _same({"seeds": ALL, "n": Own("n_test"), "batch_size": BATCH}),
    # notebook 04: beta trained on a few examples per class
    "reweighting": _same({"seeds": ALL, "n_test": Own("n_test"), "epochs": Own("reweight_epochs"),
                          "per_class": Own("reweight_train_per_class"), "batch_size": BATCH}),
    # notebook 05: Table 2, and Table 3's timing (timed inputs per task x timings of each)
    "compression": {name: {"seeds": Seeds(1) if name == "smoke" else ALL, "n_test": Own("n_test"),
                           "random_top_draws": Own("random_top_draws"), "batch_size": BATCH,
                           "timed_inputs": timed, "timing_repeats": reps}
                    for name, (timed, reps) in {"smoke": (4, 1), "default": (8, 2), "paper": (16, 3)}.items()},
    # notebook 06: the error diagnosis
    "diagnosis": {name: {"seeds": ALL if name == "paper" else Seeds(1), "n": Own("n_diagnosis"),
                         "batch_size": BATCH} for name in ("smoke", "default", "paper")},
    # notebook 07 (and 10's head rankings): the shared evaluation sizes, and each step's own
    # (16 prompts per forward on every profile: one forward costs about the same for 1 or 16 short prompts on a CPU)
    "eval": {"smoke": {"n_eval": 8, "seeds": Seeds(1), "k_per_class": 2, "batch_size": 16},
             "default": {"n_eval": Own("n_test"), "seeds": ALL, "k_per_class": 2, "batch_size": 16},
             "paper": {"n_eval": Own("n_test"), "seeds": ALL, "k_per_class": 2, "batch_size": 16}},
    "incontext_heads": {"smoke": {"n_attr": 6}, "default": {"n_attr": 16}, "paper": {"n_attr": 64}},
    "two_towers": {"smoke": {"n_towers": 8}, "default": {"n_towers": 32}, "paper": {"n_towers": 200}},
    "head_biases": {"smoke": {"bias_tasks": ("sst2",)}, "default": {"bias_tasks": ("sst2",)},
                    "paper": {"bias_tasks": ("sst2", "agnews")}},
    # notebook 07's regime step: demonstrations per class (ks), queries, tasks, and the confirmation's fresh seeds
    # ("fresh": seeds no other step uses, helpers.protocols.mapping_control)
    "regime": {"smoke": {"ks": (1, 2), "n_eval": 4, "seeds": Seeds(1), "tasks": ("sst2",), "confirm_seeds": "fresh",
                         "batch_size": 16},
               "default": {"ks": "all", "n_eval": 32, "seeds": Seeds(2), "tasks": ("sst2", "agnews"),
                           "confirm_seeds": Seeds(4, 2), "batch_size": 16},
               "paper": {"ks": "all", "n_eval": Own("n_test"), "seeds": ALL, "tasks": ("sst2", "agnews"),
                         "confirm_seeds": "fresh", "batch_size": 16}},
    # notebook 08: notebooks 00-03 in small form on one task
    "own_task": {"smoke": {"seeds": Seeds(3), "n_test": 8, "n_saliency": 4, "random_n": 2, "batch_size": BATCH},
                 "default": {"seeds": Seeds(3), "n_test": 32, "n_saliency": 16, "random_n": 8, "batch_size": BATCH},
                 "paper": {"seeds": ALL, "n_test": Own("n_test"), "n_saliency": Own("n_saliency"),
                           "random_n": Own("n_random_control"), "batch_size": BATCH}},
    # notebook 09: per seed, evaluation sequences, head attribution and saliency (a control costs about a thousandth
    # of an offline model per input); the power runs: replicates per population (None: every checkpoint)
    "control": _same({"seeds": ALL, "n": Own("n_test", 4), "n_attr": Own("n_test", 2),
                      "n_saliency": Own("n_saliency", 4), "batch_size": CONTROL_BATCH,
                      "flow_batch_size": CONTROL_HEAVY_BATCH}),
    "power": {"smoke": {"replicates": 2}, "default": {"replicates": None}, "paper": {"replicates": None}},
    # notebook 10: the tasks, the head rankings, and the flows and isolation of each class of position
    "study_tasks": {"smoke": {"tasks": 2}, "default": {"tasks": None}, "paper": {"tasks": None}},
    "head_scores": {"smoke": {"seeds": Seeds(1), "n_eval": 4, "n_attr": 4, "frac": 0.02, "batch_size": BATCH},
                    "default": {"seeds": Seeds(2), "n_eval": 32, "n_attr": 16, "frac": 0.02, "batch_size": BATCH},
                    "paper": {"seeds": ALL, "n_eval": Own("n_test"), "n_attr": 64, "frac": 0.02,
                              "batch_size": BATCH}},
    "class_saliency": {"smoke": {"seeds": Seeds(1), "n": 2, "batch_size": 2},
                       "default": {"seeds": Seeds(2), "n": 16, "batch_size": 8},
                       "paper": {"seeds": ALL, "n": Own("n_saliency"), "batch_size": 8}},
    "class_isolation": {"smoke": {"seeds": Seeds(1), "n": 4, "random_n": 2, "k": 1, "batch_size": BATCH},
                        "default": {"seeds": Seeds(2), "n": 32, "random_n": 16, "k": 5, "batch_size": BATCH},
                        "paper": {"seeds": ALL, "n": Own("n_test"), "random_n": Own("n_random_control"), "k": 5,
                                  "batch_size": BATCH}},
    "label_span": {"smoke": {"seeds": Seeds(1), "n": 4, "random_n": 2, "k": 1, "batch_size": BATCH},
                   "default": {"seeds": Seeds(2), "n": 32, "random_n": 16, "k": 5, "batch_size": BATCH},
                   "paper": {"seeds": ALL, "n": Own("n_test"), "random_n": Own("n_random_control"), "k": 5,
                             "batch_size": BATCH}},
    # notebook 11: the tasks, and per (task, seed) inputs, those with saliency flows (at most n), random control, k,
    # probe folds, heads
    "after_tasks": {"smoke": {"tasks": 1}, "default": {"tasks": None}, "paper": {"tasks": None}},
    "after": {"smoke": {"seeds": Seeds(1), "n": 12, "n_flow": 2, "random_n": 2, "k": 1, "folds": 2,
                        "frac": 0.02, "batch_size": BATCH},
              "default": {"seeds": Seeds(2), "n": 64, "n_flow": 8, "random_n": 16, "k": 5, "folds": 5,
                          "frac": 0.02, "batch_size": BATCH},
              "paper": {"seeds": ALL, "n": Own("n_test"), "n_flow": Own("n_saliency"),
                        "random_n": Own("n_random_control"), "k": 5, "folds": 5, "frac": 0.02, "batch_size": BATCH}},
}


def run_sizes(method: str, profile: Profile) -> dict:
    """``method``'s row of :data:`RUN_SIZES` at ``profile``, its cells resolved: :class:`Own` to the profile's number
    (times its factor), :class:`Seeds` to a tuple of the profile's seeds; other cells as they are."""
    if method not in RUN_SIZES:
        raise KeyError(f"no run sizes for {method!r}; the methods with sizes: {sorted(RUN_SIZES)}")
    row = RUN_SIZES[method].get(profile.name)
    if row is None:
        raise ValueError(f"profile {profile.name!r} has no run sizes for {method!r}: a profile is one of "
                         f"{sorted(RUN_SIZES[method])} (helpers/study/profile_table.py, RUN_SIZES)")
    out = {}
    for size, cell in row.items():
        if isinstance(cell, Own):
            cell = getattr(profile, cell.field) * cell.times
        elif isinstance(cell, Seeds):
            cell = tuple(profile.seeds[cell.start:cell.stop])
        out[size] = cell
    return out


def per_task(cell, tasks) -> dict[str, int]:
    """A per-task cell (``{task: number, "*": number}``) or one number, as ``{task: number}`` for ``tasks``."""
    if isinstance(cell, dict):
        return {t: cell.get(t, cell["*"]) for t in tasks}
    return {t: cell for t in tasks}


def current_tasks(default: tuple[str, ...] = OFFLINE_TASKS) -> tuple[str, ...]:
    """``$ICL_TASKS`` (comma separated) as task names, or ``default``.

    An entry is a task name or the path of a task spec file (absolute, or relative to the working
    directory or the repository); a spec is loaded and registered, and its name is returned.
    """
    env = os.environ.get("ICL_TASKS")
    if not env:
        return tuple(default)
    names, bad, seen = [], [], {}
    for entry in (t.strip() for t in env.split(",") if t.strip()):
        try:
            task = get_task(entry)
        except UnknownTaskError:
            bad.append(entry)
            continue
        except (SpecError, TemplateError) as e:
            raise ValueError(f"ICL_TASKS: {e}") from e
        if task.name in seen and seen[task.name] != task.digest:
            raise ValueError(f"ICL_TASKS names two different tasks called {task.name!r}; give one spec another 'name'")
        seen[task.name] = task.digest
        if task.name not in names:
            names.append(task.name)
    if bad:
        raise ValueError(f"ICL_TASKS names unknown tasks {bad}; known: {sorted(TASKS)}, registered: "
                         f"{sorted(registered_tasks())}; or give the path of a task spec file")
    return tuple(names)
