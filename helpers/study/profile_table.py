"""The profiles (``smoke``, ``default``, ``paper``: run sizes from one place) and the tasks a run studies.

:func:`helpers.study.profiles.get_profile` picks a profile after checking the settings
(:mod:`helpers.study.config`); those checks read :data:`PROFILES` and :func:`current_tasks` here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from helpers.core.tasks import TASKS, SpecError, TemplateError, UnknownTaskError, get_task, registered_tasks

__all__ = ["Profile", "PROFILES", "PAPER_SEEDS", "OFFLINE_TASKS", "current_tasks"]

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
