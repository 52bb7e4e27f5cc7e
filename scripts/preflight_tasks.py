"""preflight.py's checks of the run's settings and data: the profile, the tasks and their data files, the label
words under a tokenizer, notebook 08's task, the notebooks asked for (scripts/preflight.py runs them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))



class PreflightError(Exception):
    """A reason the run cannot start; the message says what to do."""


def check_profile(name: str):
    from helpers.study.profile_table import PROFILES

    if name not in PROFILES:
        raise PreflightError(f"Unknown profile {name!r}; choose one of {sorted(PROFILES)} (PROFILE=... for make).")
    return PROFILES[name]


def check_tasks(profile, env: str | None = None) -> tuple[str, ...]:
    """Tasks the notebooks will run (``$ICL_TASKS`` or the profile's); each must have its data files.

    Only names and files here; :func:`check_task_data` reads every row.
    """
    from helpers.core.task_data import data_dir
    from helpers.core.tasks import get_task, task_files
    from helpers.study.profile_table import current_tasks

    env = os.environ.get("ICL_TASKS") if env is None else env
    if env:
        saved = os.environ.get("ICL_TASKS")
        os.environ["ICL_TASKS"] = env
        try:
            tasks = current_tasks()
        except UnicodeDecodeError as e:  # a spec file that is not UTF-8 (the loader names no file)
            raise PreflightError(f"ICL_TASKS={env!r}: a spec file is not UTF-8 ({e}); save it as UTF-8.") from None
        except ValueError as e:
            raise PreflightError(f"{e}.") from e
        finally:
            if saved is None:
                os.environ.pop("ICL_TASKS")
            else:
                os.environ["ICL_TASKS"] = saved
    else:
        tasks = tuple(profile.tasks)
    missing = []
    for t in tasks:
        for s, f in task_files(t).items():
            if not f.exists():
                missing.append(f"{t}/{s}.jsonl" if not get_task(t).files else str(f))
    if missing:
        hint = " EmoC needs the hub: python scripts/build_data.py --source hub." if any("emoc" in m for m in missing) else ""
        raise PreflightError(f"Data files missing under {data_dir()}: {missing}. Restore them (git checkout -- data/) "
                             f"or run scripts/build_data.py.{hint}")
    return tasks


def check_own_task(env: str | None = None) -> str:
    """The task notebook 08 studies (``$ICL_OWN_TASK`` or the shipped example), by name; PreflightError if its spec
    cannot be read."""
    from helpers.core.tasks import SpecError, TemplateError, UnknownTaskError, get_task
    from helpers.study.profiles import OWN_TASK_EXAMPLE

    raw = (os.environ.get("ICL_OWN_TASK") if env is None else env) or OWN_TASK_EXAMPLE
    try:
        return get_task(raw).name
    except UnicodeDecodeError as e:
        raise PreflightError(f"ICL_OWN_TASK={raw!r}: the spec file is not UTF-8 ({e}); save it as UTF-8.") from None
    except (SpecError, TemplateError, UnknownTaskError, ValueError) as e:
        raise PreflightError(f"ICL_OWN_TASK={raw!r}: {e}") from None


def _fix_hint(task) -> str:
    """How to repair a task's data file: restore a shipped one, re-record a spec task's checksums."""
    if task.spec_path:
        return (f"Fix the file, then record its checksum again: python -m helpers.core.tasks --checksums "
                f"{task.spec_path}")
    return "Restore it with `git checkout -- data/` or rebuild it with `python scripts/build_data.py`."


def scan_rows(path: Path, n_classes: int) -> tuple[int, dict[int, int], str | None]:
    """(rows, {label: count}, problem) of a JSON-lines data file, every row read by the project's one row reader
    (``helpers.core.task_data.read_rows``, what a notebook's loader meets too).

    ``problem`` is None or its message, naming the file and line: bytes that are not UTF-8, a line that is not a
    JSON object, ``text`` missing or not a non-empty string, ``label`` missing, not an integer, or outside
    ``0..n_classes - 1``, or no rows at all.
    """
    from helpers.core.task_data import CorruptDataError, read_rows

    try:
        labels = read_rows(path, n_classes)["label"]
    except CorruptDataError as e:
        return 0, {}, str(e)
    counts: dict[int, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return len(labels), counts, None


def expected_sha256(task, split: str) -> str | None:
    """The sha256 a task's data file is checked against when it loads (None: none recorded, or an unreadable
    checksums.json, which the loader's own check then names): ``helpers.core.tasks.recorded_sha256``."""
    from helpers.core.task_data import CorruptDataError
    from helpers.core.tasks import recorded_sha256

    try:
        return recorded_sha256(task, split)
    except (CorruptDataError, OSError):
        return None


def check_task_data(name: str) -> list[str]:
    """Every problem a notebook would meet reading task ``name``'s data, before any model loads.

    For each split: the checksum recorded for it (a shipped task's in data/checksums.json, a spec task's in its
    spec or checksums.json), every row (:func:`scan_rows`), then the project's own loader
    (``helpers.core.tasks.load_split``), whose checks a notebook meets too. One problem per file at most.
    """
    from helpers.core.task_data import file_sha256
    from helpers.core.tasks import get_task, load_split, task_files

    task = get_task(name)
    problems = []
    for split, path in task_files(task).items():
        where = f"{task.name} ({split})"
        if not path.is_file():
            problems.append(f"{where}: {path} is missing. {_fix_hint(task)}")
            continue
        expected = expected_sha256(task, split)
        if expected is None:
            problems.append(f"{where}: no checksum is recorded for {path}. {_fix_hint(task)}")
            continue
        _, counts, problem = scan_rows(path, task.n_classes)
        if problem:
            problems.append(f"{where}: {problem}. {_fix_hint(task)}")
            continue
        missing = [c for c in range(task.n_classes) if not counts.get(c)] if split == "train" else []
        if missing:  # every prompt needs a demonstration of every class
            words = ", ".join(f"{c} ({task.label_words[c]!r})" for c in missing)
            problems.append(f"{where}: {path} has no rows of class {words}: every prompt shows a demonstration of "
                            "each class, so add rows of it to that file (then record its checksums again)")
            continue
        actual = file_sha256(path)
        if actual != expected:
            problems.append(f"{where}: {path} does not match its recorded checksum (sha256 {actual[:12]}..., "
                            f"expected {expected[:12]}...): the file is corrupt or was edited. {_fix_hint(task)}")
            continue
        try:
            load_split(task, split)
        except Exception as e:  # the loader's own checks (CorruptDataError, ValueError...): its message says why
            problems.append(f"{where}: {e}")
    return problems


def check_label_words(tokenizer, tasks) -> list[str]:
    """Label words of ``tasks`` whose first tokens collide under ``tokenizer`` (the prediction could not tell
    them apart), one sentence per task."""
    import warnings

    from helpers.core.tasks import LabelCollisionError, LabelWordWarning, label_token_ids

    problems = []
    for t in tasks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            try:
                label_token_ids(tokenizer, t)
            except LabelCollisionError as e:
                problems.append(str(e))
    return problems


def check_notebooks(asked: list[str] | None, notebooks_dir: Path) -> str | None:
    """Why ``NOTEBOOKS`` (``asked``: two-digit numbers) cannot be run, or None: each must be the number of a notebook
    of ``notebooks_dir``, as ``make run`` takes them (``00``-``11``), so a typo never runs nothing and passes."""
    if asked is None:
        return None
    have = sorted({p.name[:2] for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb")})
    if not asked:
        return f"NOTEBOOKS names no notebook; leave it unset for all of them, or name some of {' '.join(have)}"
    bad = [n for n in asked if n not in have]
    if bad:
        return (f"NOTEBOOKS={' '.join(asked)}: {', '.join(repr(n) for n in bad)} is not a notebook here; use the "
                f"two-digit numbers {' '.join(have)} (e.g. NOTEBOOKS=\"01 03\")")
    return None
