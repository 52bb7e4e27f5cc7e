"""Tasks: templates, label words, and the stored datasets.

Templates follow the paper (arXiv 2305.14160, Table 1 setting): one demonstration is
``{input_prefix}{text}{label_prefix} {label word}`` (the label word has a
leading space, nothing trails it), demonstrations are joined by ``"\\n"``, and
the query ends right after the colon of ``label_prefix``.

EmoC (SemEval-2019 task 3) is not available offline; the offline fourth task
is **TweetEval emotion** (``tweet_emotion``: anger / joy / optimism / sadness),
a substitute named as such in every table. ``emoc`` itself is defined for the
hub path (``scripts/build_data.py --source hub``).

Data files are ``data/<task>/{train,test}.jsonl`` with ``text`` and ``label``
columns, verified against ``data/checksums.json`` before loading (reading and checking them:
:mod:`helpers.core.task_data`).

**Your own task** is a small spec file (JSON, or TOML on Python 3.11+) beside its data::

    {"name": "rotten_tomatoes", "display": "Rotten Tomatoes",
     "template": "Review: {text}\nSentiment: {label}", "label_words": ["Negative", "Positive"],
     "separator": "\n", "note": "..."}

with ``train.jsonl`` and ``test.jsonl`` next to it (or ``"data": {"train": ..., "test": ...}``,
relative to the spec) and their sha256 in the spec (``"checksums": {"train": ..., "test": ...}``),
in a ``checksums.json`` beside it, or in the ``checksums.json`` of the folder above (the layout of
``data/``). :func:`load_task_spec` reads and registers it; :func:`get_task` also accepts the spec's
path, a registered name, or the name of a folder ``data/<name>/`` holding a ``task.json``. Spaces
right before ``{label}`` belong to the label word (BPE and SentencePiece tokenizers attach them to
it); the query ends right before them, as the shipped tasks' query ends right after the colon.
``python -m helpers.core.tasks --checksums spec.json`` writes the data files' ``checksums.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import string
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from helpers.core.checks import ArgumentError, seed_list, sizes_per_task
from helpers.core.task_data import (
    CorruptDataError,
    data_dir,
    file_sha256,
    make_dataset,
    parse_rows,
    read_checksums,
    read_hashed,
    read_rows,
)

__all__ = [
    "Task",
    "TASKS",
    "get_task",
    "UnknownTaskError",
    "recorded_sha256",
    "LabelCollisionError",
    "LabelWordWarning",
    "load_split",
    "label_token_ids",
    "TemplateError",
    "SpecError",
    "register_task",
    "load_task_spec",
    "task_from_spec",
    "registered_tasks",
    "task_files",
    "task_digest",
    "record_checksums",
    "task_list",
    "run_args",
]


class UnknownTaskError(KeyError, ValueError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class LabelCollisionError(ValueError):
    pass


class LabelWordWarning(UserWarning):
    pass


class TemplateError(ValueError):
    """A template without exactly one ``{text}`` followed by one ``{label}``, or with another placeholder."""


class SpecError(ValueError):
    """A task spec file that cannot be used as it is; the message says what to change."""


@lru_cache(maxsize=256)
def split_template(template: str) -> tuple[str, str, str, str]:
    """``(before, between, lead, after)`` of a template ``before{text}between lead{label}after``.

    ``lead`` is the run of spaces right before ``{label}``: it belongs to the label word (tokenizers
    attach a leading space to the word), so the query ends after ``between``. ``{{`` and ``}}`` are
    literal braces.
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise TemplateError(f"template {template!r} cannot be parsed ({e}); write literal braces as {{{{ and }}}}") from e
    literals, fields = [""], []
    for lit, fld, spec, conv in parsed:
        literals[-1] += lit
        if fld is None:
            continue
        if fld not in ("text", "label") or spec or conv:
            raise TemplateError(f"template {template!r} has the placeholder {{{fld}{'!' + conv if conv else ''}"
                                f"{':' + spec if spec else ''}}}; only {{text}} and {{label}} are allowed "
                                "(write literal braces as {{ and }})")
        fields.append(fld)
        literals.append("")
    if fields != ["text", "label"]:
        missing = [f for f in ("text", "label") if f not in fields]
        why = (f"has no {{{missing[0]}}}" if missing else
               "must hold {text} once and then {label} once" if len(fields) != 2 else "has {label} before {text}")
        raise TemplateError(f"template {template!r} {why}: a demonstration is rendered as "
                            "'<...>{text}<...>{label}<...>' and the query ends right before {label}")
    before, between, after = literals
    mid = between.rstrip(" ")
    return before, mid, between[len(mid):], after


@dataclass(frozen=True)
class Task:
    """A task: label words and a template; the shipped tasks give it as ``input_prefix`` and ``label_prefix``.

    With ``template`` empty the demonstration is ``{input_prefix}{text}{label_prefix} {label}``; a task
    from a spec file sets ``template`` (and its data files, checksums and ``digest``) instead.
    """

    name: str
    display: str  # what tables print
    input_prefix: str  # "Review: "
    label_prefix: str  # "\nSentiment:"
    label_words: tuple[str, ...]  # in class order, without the leading space
    hub: str = ""  # the paper's source on the hub
    note: str = ""  # substitution / provenance note shown in tables
    template: str = ""  # "Review: {text}\nSentiment: {label}"; "" = built from the two prefixes
    separator: str = "\n"  # between demonstrations (and before the query)
    files: tuple[tuple[str, str], ...] = ()  # (split, path) of a spec task's data
    checksums: tuple[tuple[str, str], ...] = ()  # (split, sha256) of a spec task's data
    spec_path: str = ""  # the spec file a task was loaded from
    digest: str = ""  # a spec task's identity: template, label words, separator and data checksums

    @property
    def n_classes(self) -> int:
        return len(self.label_words)

    @property
    def full_template(self) -> str:
        if self.template:
            return self.template
        esc = lambda s: s.replace("{", "{{").replace("}", "}}")  # noqa: E731
        return f"{esc(self.input_prefix)}{{text}}{esc(self.label_prefix)} {{label}}"

    @property
    def parts(self) -> tuple[str, str, str, str]:
        """``(before text, between text and label, spaces leading the label word, after label)``."""
        return split_template(self.full_template)

    def label_text(self, label: int) -> str:
        """The label word as the prompt writes it: with the template's leading space(s), if any."""
        return self.parts[2] + self.label_words[label]

    def render_demo(self, text: str, label: int) -> str:
        before, mid, _, after = self.parts
        return f"{before}{text}{mid}{self.label_text(label)}{after}"

    def render_query(self, text: str) -> str:
        before, mid, _, _ = self.parts
        return f"{before}{text}{mid}"


TASKS: dict[str, Task] = {
    "sst2": Task("sst2", "SST-2", "Review: ", "\nSentiment:", ("Negative", "Positive"), "glue/sst2"),
    "trec": Task(
        "trec", "TREC", "Question: ", "\nAnswer Type:",
        ("Abbreviation", "Entity", "Description", "Person", "Location", "Number"), "trec (coarse_label)",
    ),
    "agnews": Task("agnews", "AGNews", "Article: ", "\nAnswer:", ("World", "Sports", "Business", "Technology"), "ag_news"),
    "tweet_emotion": Task(
        "tweet_emotion", "TweetEval-emotion (EmoC substitute)", "Tweet: ", "\nEmotion:",
        ("Anger", "Joy", "Optimism", "Sadness"), "tweet_eval/emotion",
        note="EmoC is not available offline; TweetEval emotion (4 classes) stands in for it.",
    ),
    "emoc": Task("emoc", "EmoC", "Dialogue: ", "\nEmotion:", ("Others", "Happy", "Sad", "Angry"), "emo"),
}


_REGISTERED: dict[str, Task] = {}
SPEC_NAMES = ("task.json", "task.toml")
SPEC_KEYS = {"name", "display", "template", "label_words", "separator", "note", "data", "checksums"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _looks_like_path(name: str) -> bool:
    return name.endswith((".json", ".toml")) or "/" in name or os.sep in name


def get_task(name: str | Task) -> Task:
    """A task by name (shipped, registered, or ``data/<name>/task.json``), or by the path of its spec file."""
    if isinstance(name, Task):
        return name
    if not isinstance(name, str):
        raise UnknownTaskError(f"a task is a task name such as 'sst2' or the path of a task spec, got {name!r} "
                               f"({type(name).__name__}); known tasks: {sorted(set(TASKS) | set(_REGISTERED))}")
    if name in TASKS:
        return TASKS[name]
    if name in _REGISTERED:
        return _REGISTERED[name]
    if _looks_like_path(name):
        return load_task_spec(name)
    if _NAME.match(name):
        for spec in SPEC_NAMES:
            if (data_dir() / name / spec).is_file():
                return load_task_spec(data_dir() / name / spec)
    shipped = sorted(set(TASKS) | {p.parent.name for n in SPEC_NAMES for p in data_dir().glob(f"*/{n}")})
    raise UnknownTaskError(
        f"Unknown task {name!r}. Known tasks: {shipped}, registered: {sorted(_REGISTERED)} "
        "(offline data: sst2, trec, agnews, tweet_emotion; 'emoc' needs the hub, see data/README.md). "
        "Your own task: pass the path of its spec file (see docs/your-own.md, 'Your own task')."
    )


def registered_tasks() -> dict[str, Task]:
    """The tasks registered at run time (:func:`register_task`, :func:`load_task_spec`), by name."""
    return dict(_REGISTERED)


def _read_spec(path: Path) -> dict:
    if not path.is_file():
        raise SpecError(f"task spec {path} does not exist")
    if path.suffix == ".toml":
        if sys.version_info < (3, 11):
            raise SpecError(f"{path}: TOML specs need Python 3.11 or later (tomllib); write the spec as JSON")
        import tomllib  # Python 3.11+ only (checked above)

        try:
            return tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path} is not valid TOML: {e}") from e
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SpecError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(spec, dict):
        raise SpecError(f"{path} must hold one JSON object (the task spec), not {type(spec).__name__}")
    return spec


def _sha_of(entry) -> str | None:
    if isinstance(entry, dict):
        entry = entry.get("sha256")
    return entry if isinstance(entry, str) and re.fullmatch(r"[0-9a-f]{64}", entry) else None


def _find_checksum(split: str, path: Path, spec: dict, base: Path | None) -> str | None:
    """The recorded sha256 of a data file: in the spec, in a checksums.json beside the spec, or in the
    checksums.json of the folder above the data file's (the layout of ``data/``)."""
    own = spec.get("checksums") or {}
    for key in (split, path.name):
        if _sha_of(own.get(key)):
            return _sha_of(own[key])
    places = []
    if base is not None:
        places.append((base / "checksums.json", [path.name, os.path.relpath(path, base)]))
    places.append((path.parent.parent / "checksums.json", [f"{path.parent.name}/{path.name}"]))
    for sums_path, keys in places:
        if sums_path.is_file():
            sums = _read_json_object(sums_path)
            for key in keys:
                if _sha_of(sums.get(key)):
                    return _sha_of(sums[key])
    return None


def _read_json_object(path: Path) -> dict:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SpecError(f"{path} is not valid JSON ({e}); fix it, or delete it and record the checksums again "
                        "with python -m helpers.core.tasks --checksums <spec>") from None
    if not isinstance(out, dict):
        raise SpecError(f"{path} must hold one JSON object (file name -> sha256), not {type(out).__name__}")
    return out


def task_digest(task: Task) -> str:
    """Identity of a task's prompts and data: template, label words, separator, name and data checksums."""
    blob = json.dumps({"name": task.name, "template": task.full_template, "labels": list(task.label_words),
                       "separator": task.separator, "data": sorted(task.checksums)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def task_from_spec(spec: dict, base: str | Path | None = None, spec_path: str | Path | None = None,
                   need_checksums: bool = True) -> Task:
    """A :class:`Task` from a spec dict; relative data paths are relative to ``base`` (the spec's folder)."""
    where = f"task spec {spec_path}" if spec_path else "task spec"
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise SpecError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
    base = Path(base) if base is not None else None
    name = spec.get("name")
    if name is None and spec_path is not None:
        p = Path(spec_path)
        name = p.parent.name if p.name in SPEC_NAMES else p.stem
    if not isinstance(name, str) or not _NAME.match(name):
        raise SpecError(f"{where}: 'name' must be letters, digits, '_', '.' or '-' (got {name!r})")
    if name in TASKS:
        raise SpecError(f"{where}: {name!r} is a shipped task's name; choose another 'name'")
    shipped = next((data_dir() / name / n for n in SPEC_NAMES if (data_dir() / name / n).is_file()), None)
    if (shipped is not None and spec_path is not None and Path(spec_path).resolve() != shipped.resolve()
            and _read_spec(shipped) != spec):
        raise SpecError(f"{where}: {name!r} is the name of the shipped task in {shipped.parent}, and this spec "
                        "differs from it; a run would file its results under that task. Choose another 'name' "
                        "(and `python -m helpers.core.tasks --checksums` the spec again)")
    if "template" not in spec or not isinstance(spec["template"], str):
        raise SpecError(f"{where} needs a 'template' string with {{text}} and {{label}}, "
                        "e.g. \"Review: {text}\\nSentiment: {label}\"")
    template = spec["template"]
    split_template(template)  # TemplateError on a bad template
    words = spec.get("label_words")
    if (not isinstance(words, list) or len(words) < 2 or not all(isinstance(w, str) and w.strip() for w in words)
            or len(set(words)) != len(words)):
        raise SpecError(f"{where} needs 'label_words': a list of two or more distinct, non-empty words in class "
                        f"order (class 0 first), got {words!r}")
    sep = spec.get("separator", "\n")
    if not isinstance(sep, str):
        raise SpecError(f"{where}: 'separator' must be a string (default \"\\n\")")
    data = spec.get("data") or {}
    if set(data) - {"train", "test"}:
        raise SpecError(f"{where}: 'data' may only name 'train' and 'test' files")
    files, sums = [], []
    for split in ("train", "test"):
        path = Path(data.get(split, f"{split}.jsonl")).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        path = path.resolve()
        files.append((split, str(path)))
        sha = _find_checksum(split, path, spec, base)
        if sha is None and need_checksums and not path.is_file():
            raise SpecError(f"{where}: its {split} data file {path} does not exist: put the {split} rows there as "
                            f"JSON lines with 'text' and 'label', or point the spec's 'data' at them")
        if sha is None and need_checksums:
            hint = f"python -m helpers.core.tasks --checksums {spec_path}" if spec_path else "helpers.core.tasks.record_checksums"
            raise SpecError(f"{where}: no sha256 checksum is recorded for {path}. Check the file, then record its "
                            f"checksum ({hint} writes checksums.json beside the spec).")
        sums.append((split, sha or ""))
    task = Task(name, str(spec.get("display") or name), split_template(template)[0],
                split_template(template)[1], tuple(words), "", str(spec.get("note", "")), template=template,
                separator=sep, files=tuple(files), checksums=tuple(sums),
                spec_path=str(Path(spec_path).resolve()) if spec_path else "")
    return _with_digest(task)


def _with_digest(task: Task) -> Task:
    return replace(task, digest=task_digest(task))


def register_task(spec: dict | Task | str | Path, base: str | Path | None = None) -> Task:
    """Register a task at run time: a spec dict (data paths relative to ``base``), a :class:`Task`, or a spec path.

    The name then works everywhere a task name does (``ICL_TASKS``, :func:`get_task`, the run helpers).
    Registering a changed spec under the same name replaces the earlier one; its ``digest`` changes with it,
    and every cache key holds the digest, so no result of the old spec is served for the new one.
    """
    if isinstance(spec, (str, Path)):
        return load_task_spec(spec)
    task = spec if isinstance(spec, Task) else task_from_spec(spec, base=base)
    if task.name in TASKS:
        raise SpecError(f"{task.name!r} is a shipped task's name; choose another name")
    if not task.digest:
        task = _with_digest(task)
    _REGISTERED[task.name] = task
    return task


def load_task_spec(path: str | Path) -> Task:
    """Read a task spec file (JSON, or TOML on Python 3.11+), register its task and return it."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = next((p / n for n in SPEC_NAMES if (p / n).is_file()), p / SPEC_NAMES[0])
    if not p.is_absolute() and not p.exists():
        root = Path(__file__).resolve().parents[2]  # notebooks run in notebooks/: also try the repository root
        if (root / p).exists():
            p = root / p
    p = p.resolve()
    task = task_from_spec(_read_spec(p), base=p.parent, spec_path=p)
    return register_task(task)


def task_files(task: str | Task) -> dict[str, Path]:
    """The ``train`` and ``test`` data files of a task."""
    task = get_task(task)
    if task.files:
        return {s: Path(f) for s, f in task.files}
    return {s: data_dir() / task.name / f"{s}.jsonl" for s in ("train", "test")}


def record_checksums(spec_path: str | Path) -> Path:
    """Write the sha256, rows and label counts of a spec's data files to ``checksums.json`` beside the spec."""
    p = Path(spec_path).resolve()
    task = task_from_spec(_read_spec(p), base=p.parent, spec_path=p, need_checksums=False)
    out = p.parent / "checksums.json"
    sums = _read_json_object(out) if out.is_file() else {}
    for split, f in task.files:
        f = Path(f)
        if not f.is_file():
            raise SpecError(f"{f} does not exist: put the {split} rows there as JSON lines with 'text' and 'label'")
        labels: dict[str, int] = {}
        ds = read_rows(f, task.n_classes)  # every row checked: the file and line of a bad one
        rows = len(ds)
        for lab in ds["label"]:
            labels[str(lab)] = labels.get(str(lab), 0) + 1
        sums[os.path.relpath(f, p.parent)] = {"sha256": file_sha256(f), "rows": rows,
                                              "labels": dict(sorted(labels.items()))}
    out.write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
    return out


def recorded_sha256(task: str | Task, split: str) -> str | None:
    """The sha256 a task's ``split`` file is checked against when it loads (None: none recorded): a spec task's
    from its spec (or the checksums.json beside it), a shipped task's from ``data/checksums.json``."""
    task = get_task(task)
    if task.files:
        return dict(task.checksums).get(split) or None
    entry = read_checksums(str(data_dir())).get(f"{task.name}/{split}.jsonl")
    return entry.get("sha256") if isinstance(entry, dict) else None


def load_split(task: str | Task, split: str):
    """The ``datasets.Dataset`` of a task's ``train`` (demonstration pool) or ``test`` split."""
    task = get_task(task)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if task.files:
        return _load_spec_split(task, split)
    root = data_dir()
    rel = f"{task.name}/{split}.jsonl"
    path = root / rel
    sums = read_checksums(str(root))
    if rel not in sums:
        hint = " EmoC needs the hub: python scripts/build_data.py --source hub" if task.name == "emoc" else ""
        raise CorruptDataError(f"No data file {rel} is recorded in {root / 'checksums.json'}.{hint}")
    if not path.exists():
        raise CorruptDataError(f"{path} is missing. Restore it (git checkout -- data/) or run scripts/build_data.py.")
    actual, data = read_hashed(path)
    expected = sums[rel]["sha256"]
    if actual != expected:
        raise CorruptDataError(
            f"{path} does not match its checksum (sha256 {actual[:12]}..., expected {expected[:12]}...). "
            "The file is corrupt or was edited: restore it with `git checkout -- data/` or rebuild it "
            "with `python scripts/build_data.py`."
        )
    return make_dataset(path, *parse_rows(path, actual, data), task.n_classes)


def _load_spec_split(task: Task, split: str):
    path = Path(dict(task.files)[split])
    expected = dict(task.checksums).get(split)
    where = f" (task spec {task.spec_path})" if task.spec_path else ""
    if not path.is_file():
        raise CorruptDataError(f"{path} is missing{where}: put the {split} rows there as JSON lines with "
                               "'text' and 'label', or point the spec's 'data' at them.")
    if not expected:
        raise CorruptDataError(f"no checksum is recorded for {path}{where}; record it with "
                               f"python -m helpers.core.tasks --checksums {task.spec_path or '<spec>'}")
    actual, data = read_hashed(path)
    if actual != expected:
        raise CorruptDataError(
            f"{path} does not match its recorded checksum{where} (sha256 {actual[:12]}..., expected "
            f"{expected[:12]}...). The file is corrupt or was edited: restore it, or, if the edit is intended, "
            f"record the new checksum with python -m helpers.core.tasks --checksums {task.spec_path or '<spec>'}.")
    return make_dataset(path, *parse_rows(path, actual, data), task.n_classes)


def label_token_ids(tokenizer, task: str | Task) -> list[int]:
    """First token id of each label word (with the template's leading space), in class order.

    A label word that tokenizes to several tokens is represented by its first
    token (a :class:`LabelWordWarning` says so); two labels that share a first
    token raise :class:`LabelCollisionError`, since the prediction could not
    tell them apart.
    """
    task = get_task(task)
    if not callable(tokenizer) or hasattr(tokenizer, "cfg"):
        raise ArgumentError(f"tokenizer must be a tokenizer (a model's model.tokenizer), got {type(tokenizer).__name__}"
                            + (": pass model.tokenizer" if hasattr(tokenizer, "tokenizer") else ""))
    ids = []
    for c in range(len(task.label_words)):
        toks = tokenizer(task.label_text(c), add_special_tokens=False)["input_ids"]
        if len(toks) > 1:
            warnings.warn(
                f"{task.display}: label word {task.label_text(c)!r} is {len(toks)} tokens for this tokenizer; "
                "its first token stands for the class.",
                LabelWordWarning,
                stacklevel=2,
            )
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        seen: dict[int, str] = {}
        for c, i in enumerate(ids):
            word = task.label_text(c)
            if i in seen:
                piece = tokenizer.convert_ids_to_tokens(i) if hasattr(tokenizer, "convert_ids_to_tokens") else None
                shown = f"{i}" + (f", {piece!r}" if isinstance(piece, str) else "")
                space = ("; they differ only by leading whitespace, which the template's text before {label} "
                         "already supplies" if seen[i].strip() == word.strip() else "")
                raise LabelCollisionError(
                    f"{task.display}: label words {seen[i]!r} and {word!r} share their first token "
                    f"({shown}){space}; choose label words whose first tokens differ."
                )
            seen[i] = word
    return ids


# ------------------------------------------------------------ checks of the run helpers' task arguments


def task_list(tasks, name: str = "tasks") -> list[str]:
    """A non-empty list of distinct task names (or :class:`~helpers.core.tasks.Task`s), each a known task."""
    if isinstance(tasks, (str, Task)):
        shown = tasks if isinstance(tasks, str) else tasks.name
        raise ArgumentError(f"{name} must be a list of task names, got the single task {shown!r}: "
                            f"write [{shown!r}]")
    if isinstance(tasks, Mapping) or not isinstance(tasks, Sequence) and not hasattr(tasks, "__iter__"):
        raise ArgumentError(f"{name} must be a list of task names such as ['sst2', 'trec'], got "
                            f"{type(tasks).__name__}")
    tasks = list(tasks)
    if not tasks:
        raise ArgumentError(f"{name} is empty: pass at least one task, e.g. ['sst2'] (the profile's tasks: "
                            "helpers.study.profiles.get_profile().tasks)")
    for t in tasks:
        if not isinstance(t, (str, Task)):
            raise ArgumentError(f"{name} must hold task names (strings), got {t!r} ({type(t).__name__})")
        get_task(t)  # UnknownTaskError names the known tasks
    names = [t if isinstance(t, str) else t.name for t in tasks]
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise ArgumentError(f"{name} names {twice} more than once: each task would be run and counted again, "
                            f"doubling its inputs in the intervals; pass each task once")
    return tasks


def run_args(tasks, seeds, **sizes) -> tuple[list[str], list[int]]:
    """The checked ``(tasks, seeds)`` of a run helper; each size (an int, or a per-task dict) must be positive."""
    tasks, seeds = task_list(tasks), seed_list(seeds)
    for name, n in sizes.items():
        if n is not None:
            sizes_per_task(name, n, [t if isinstance(t, str) else t.name for t in tasks])
    return tasks, seeds


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Record the checksums of a task spec's data files.")
    ap.add_argument("--checksums", metavar="SPEC", required=True, help="the task spec file (JSON or TOML)")
    try:
        out = record_checksums(ap.parse_args().checksums)
    except (SpecError, TemplateError, CorruptDataError, LabelCollisionError) as e:  # a message, not a traceback
        sys.exit(f"error: {e}")
    print(f"wrote {out}")
