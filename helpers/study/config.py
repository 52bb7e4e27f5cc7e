"""The project's settings: every ``ICL_*`` environment variable, in one table, and one check of them all.

One rule for configuration: the notebooks, ``scripts/run_all.py``, ``scripts/preflight.py`` and the
Makefile read the same variables (the "Settings" table of docs/your-own.md is :data:`VARIABLES`). A command-line
option of a script (``--profile``, ``--models``, ``--out``, ``--timeout``) or a Makefile variable
(``PROFILE``, ``MODELS``) takes precedence over the variable, and the script says so when the two
disagree. A variable that is set but cannot be honoured (a value of the wrong kind, or a name that is not
one of these, e.g. ``ICL_MODEL`` misspelt with an s) is refused with a message by :func:`check_environment`,
which the scripts call before anything runs; nothing falls back to a default in silence.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from helpers.core.checks import DTYPE_NAMES
from helpers.core.tasks import get_task
from helpers.study.profile_table import PROFILES, current_tasks

__all__ = ["Variable", "VARIABLES", "check_environment", "check_variable", "settings_table",
           "option"]


@dataclass(frozen=True)
class Variable:
    """One setting: its name, what it does, its default, and who reads it."""

    name: str
    meaning: str
    default: str
    read_by: str


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("ICL_MODEL", "the model: `google/gemma-3-270m` (alias `gemma`), `HuggingFaceTB/SmolLM2-135M-Instruct` "
             "(alias `smollm2`), the path of a local model folder (see below), or any TransformerLens name with a "
             "network: `gpt2-xl`, `EleutherAI/gpt-j-6B`, ...", "`google/gemma-3-270m`",
             "notebooks; run_all, preflight and make as their `--models` / `MODELS`"),
    Variable("ICL_DTYPE", "`float32`, `bfloat16`, `float16`; part of the results folder's name when not float32",
             "`float32`", "notebooks, run_all, preflight"),
    Variable("ICL_BACKEND", "`hooked` (TransformerLens 3.9's HookedTransformer) or `bridge` (TransformerLens 4's "
             "TransformerBridge); refused when the installed TransformerLens is the other (see "
             "[TransformerLens 4](transformerlens4.md))", "the installed version's", "notebooks (helpers.core.backend)"),
    Variable("ICL_TF32", "`1`: float32 matmuls on CUDA use TF32 tensor cores (faster, less exact; a CPU ignores it; "
             "see [GPU](gpu.md#precision))", "`0`", "notebooks (helpers.core.precision)"),
    Variable("ICL_PROFILE", "`smoke` (CI, 1 seed, 8 inputs), `default` (a laptop CPU: 5 seeds and 64 inputs per task "
             "and seed in every headline cell, the paper's 10 re-weighting epochs, 20 random draws and full random "
             "control; see `helpers/study/profiles.py` for the few smaller sweeps), `paper` (the paper's full setting: 5 seeds, 1000 inputs, for a GPU)", "`default`",
             "notebooks; run_all, preflight and make as their `--profile` / `PROFILE`"),
    Variable("ICL_TASKS", "comma-separated task names (`sst2,trec,agnews,tweet_emotion`, or `rotten_tomatoes`) or "
             "paths of task spec files (see [Your own task](#your-own-task)); another task set gets a results "
             "folder of its own", "the four", "notebooks (08 reads `ICL_OWN_TASK`), run_all, preflight"),
    Variable("ICL_OWN_TASK", "the task of notebook 08: a spec path or a task name; another task than the example "
             "gets a results folder of its own", "`rotten_tomatoes`", "notebook 08, run_all, preflight"),
    Variable("ICL_RESULTS_DIR", "where executed notebooks, figures, metrics and RESULTS-*.md go "
             "(`--out` of the scripts)", "`results/`", "notebooks, run_all, preflight"),
    Variable("ICL_RESULTS_CACHE", "the store of computed steps (a rerun reads them instead of recomputing)",
             "`<ICL_ANCHORS_CACHE>/results`", "notebooks (helpers.core.store)"),
    Variable("ICL_ANCHORS_CACHE", "the cache folder: dequantised weights, the GPT-2 tokenizer, SmolLM2's GGUF, "
             "the store", "the user cache folder (`~/.cache/icl-anchors`)", "notebooks, preflight"),
    Variable("ICL_ANCHORS_DATA", "the data folder of the shipped tasks (with its checksums.json)", "`data/`",
             "notebooks, preflight"),
    Variable("ICL_RECOMPUTE", "`1`: recompute every step and refresh the store; `0` or unset: read the store",
             "`0`", "notebooks (helpers.core.store)"),
    Variable("ICL_ACCOUNT", "a JSON file: count the work of every forward (positions, FLOPs, time per stored step) "
             "into it; `make run ACCOUNT=1` sets one per notebook", "unset (off)", "notebooks (helpers.core.accounting)"),
    Variable("ICL_BATCH_TOKENS", "padded tokens per forward batch at most (`0`: no cap)",
             "1024 on a CPU; on CUDA what the GPU's free memory holds (helpers.core.sizing)",
             "notebooks (helpers.core.sizing)"),
    Variable("ICL_CELL_TIMEOUT", "seconds one notebook cell may run under run_all before its notebook counts as "
             "failed (`--timeout`, `make run CELL_TIMEOUT=`)", "the profile's: `smoke` 3600, `default` 7200, `paper` 86400",
             "run_all, make"),
    Variable("ICL_HUB_TIMEOUT", "seconds to wait for a silent Hugging Face hub before a hub model counts as "
             "offline", "15", "notebooks (helpers.core.hub), preflight"),
)}


def settings_table() -> str:
    """The table of settings in docs/your-own.md (markdown)."""
    rows = ["| variable | what it sets | default | read by |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.meaning} | {v.default} | {v.read_by} |" for v in VARIABLES.values()]
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------------------------ checks

def _profile(raw: str) -> None:
    if raw not in PROFILES:
        raise ValueError(f"unknown profile; choose one of {', '.join(sorted(PROFILES))}")


def _dtype(raw: str) -> None:
    if raw.strip().lower().removeprefix("torch.") not in DTYPE_NAMES:
        raise ValueError(f"not a supported dtype; choose one of {', '.join(DTYPE_NAMES)} (default float32)")


def _tasks(raw: str) -> None:
    saved = os.environ.get("ICL_TASKS")
    os.environ["ICL_TASKS"] = raw
    try:
        current_tasks()
    finally:
        if saved is None:
            os.environ.pop("ICL_TASKS")
        else:
            os.environ["ICL_TASKS"] = saved


def _own_task(raw: str) -> None:
    get_task(raw)


def _whole(lowest: int) -> Callable[[str], None]:
    def check(raw: str) -> None:
        try:
            value = int(raw)
        except ValueError:
            value = lowest - 1
        if value < lowest:
            raise ValueError(f"give a whole number of {lowest} or more")
    return check


def _seconds(raw: str) -> None:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError("give a positive number of seconds")


def _switch(raw: str) -> None:
    if raw not in ("0", "1"):
        raise ValueError("give 1 (recompute) or 0 (read the store)")


def _tf32(raw: str) -> None:
    if raw not in ("0", "1"):
        raise ValueError("give 1 (TF32 matmuls on CUDA) or 0 (float32 matmuls, the default)")


def _folder(raw: str) -> None:
    p = Path(raw).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError("is a file, not a folder")


def _file(raw: str) -> None:
    if Path(raw).expanduser().is_dir():
        raise ValueError("is a folder; give the path of a JSON file to write")


def _data_folder(raw: str) -> None:
    p = Path(raw).expanduser()
    if not p.is_dir():
        raise ValueError("no such folder; point it at a data folder like data/ (with checksums.json)")


def _backend(raw: str) -> None:
    if raw.strip().lower() not in ("hooked", "bridge"):
        raise ValueError("give hooked (TransformerLens 3.9) or bridge (TransformerLens 4), or unset it")


def _model(raw: str) -> None:
    if not raw.strip():
        raise ValueError("empty; give a model name or a local model folder, or unset it")


CHECKS: dict[str, Callable[[str], None]] = {
    "ICL_PROFILE": _profile, "ICL_MODEL": _model, "ICL_BACKEND": _backend, "ICL_DTYPE": _dtype, "ICL_TF32": _tf32, "ICL_TASKS": _tasks,
    "ICL_OWN_TASK": _own_task, "ICL_RESULTS_DIR": _folder, "ICL_RESULTS_CACHE": _folder,
    "ICL_ANCHORS_CACHE": _folder, "ICL_ANCHORS_DATA": _data_folder, "ICL_RECOMPUTE": _switch,
    "ICL_ACCOUNT": _file, "ICL_BATCH_TOKENS": _whole(0), "ICL_CELL_TIMEOUT": _whole(1), "ICL_HUB_TIMEOUT": _seconds,
}


def check_variable(name: str, raw: str) -> str | None:
    """The problem with ``name=raw`` as one sentence, or None if it can be honoured."""
    if name not in VARIABLES:
        near = difflib.get_close_matches(name, VARIABLES, n=1, cutoff=0.75)  # a misspelling, not any ICL_ name
        hint = f" (did you mean {near[0]}?)" if near else ""
        return (f"{name} is not a setting of this project{hint}; unset it. Settings: {', '.join(VARIABLES)} "
                "(docs/your-own.md, 'Settings').")
    try:
        CHECKS[name](raw)
    except Exception as e:  # SpecError, TemplateError, UnknownTaskError, ValueError: their text says why
        text = str(e).removeprefix(f"{name}: ").rstrip(".")
        if text.startswith(name):  # the message names the variable already
            return f"{text}."
        return f"{name}={raw!r}: {text}."
    return None


def check_environment(env: Mapping[str, str] | None = None) -> list[str]:
    """Every problem with the ``ICL_*`` variables set in ``env`` (default ``os.environ``), one sentence each.

    An empty value counts as unset (as everywhere in the project).
    """
    env = os.environ if env is None else env
    problems = []
    for name in sorted(k for k in env if k.startswith("ICL_")):
        if env[name] == "" and name in VARIABLES:
            continue
        problem = check_variable(name, env[name])
        if problem:
            problems.append(problem)
    return problems


def option(given, variable: str, default, flag: str):
    """``(value, note)`` of a script option that a variable also sets: the command line's ``given`` if any, else
    ``$variable`` (empty counts as unset), else ``default``. ``note`` says so when both are set and differ (the
    command line wins), else None. ``--models`` takes ``ICL_MODEL`` as a one-model list."""
    raw = os.environ.get(variable) or None
    env = None if raw is None else ([raw] if isinstance(default, list) else raw)
    if given is None:
        return (env if env is not None else default), None
    note = None
    if env is not None and env != given:
        shown = " ".join(given) if isinstance(given, list) else given
        note = f"{flag} {shown} is used; {variable}={raw!r} is not (the command line takes precedence)"
    return given, note
