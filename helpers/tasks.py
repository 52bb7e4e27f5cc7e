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
columns, verified against ``data/checksums.json`` before loading.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = [
    "Task",
    "TASKS",
    "get_task",
    "UnknownTaskError",
    "CorruptDataError",
    "LabelCollisionError",
    "LabelWordWarning",
    "data_dir",
    "load_split",
    "label_token_ids",
    "file_sha256",
]


class UnknownTaskError(KeyError, ValueError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class CorruptDataError(RuntimeError):
    pass


class LabelCollisionError(ValueError):
    pass


class LabelWordWarning(UserWarning):
    pass


@dataclass(frozen=True)
class Task:
    name: str
    display: str  # what tables print
    input_prefix: str  # "Review: "
    label_prefix: str  # "\nSentiment:"
    label_words: tuple[str, ...]  # in class order, without the leading space
    hub: str  # the paper's source on the hub
    note: str = ""  # substitution / provenance note shown in tables

    @property
    def n_classes(self) -> int:
        return len(self.label_words)

    def render_demo(self, text: str, label: int) -> str:
        return f"{self.input_prefix}{text}{self.label_prefix} {self.label_words[label]}"

    def render_query(self, text: str) -> str:
        return f"{self.input_prefix}{text}{self.label_prefix}"


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


def get_task(name: str | Task) -> Task:
    if isinstance(name, Task):
        return name
    if name not in TASKS:
        raise UnknownTaskError(
            f"Unknown task {name!r}. Known tasks: {sorted(TASKS)} "
            "(offline data: sst2, trec, agnews, tweet_emotion; 'emoc' needs the hub, see data/README.md)."
        )
    return TASKS[name]


def data_dir() -> Path:
    """``$ICL_ANCHORS_DATA`` or the repository's ``data/`` folder."""
    env = os.environ.get("ICL_ANCHORS_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=None)
def _checksums(root: str) -> dict:
    path = Path(root) / "checksums.json"
    if not path.exists():
        raise CorruptDataError(f"{path} is missing. Rebuild the data: python scripts/build_data.py")
    return json.loads(path.read_text())


@lru_cache(maxsize=32)
def _load_verified(path_str: str, expected: str, mtime: float):
    import datasets

    path = Path(path_str)
    actual = file_sha256(path)
    if actual != expected:
        raise CorruptDataError(
            f"{path} does not match its checksum (sha256 {actual[:12]}..., expected {expected[:12]}...). "
            "The file is corrupt or was edited: restore it with `git checkout -- data/` or rebuild it "
            "with `python scripts/build_data.py`."
        )
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset("json", data_files=str(path), split="train", keep_in_memory=True)
    except Exception as e:  # malformed JSON that still matched a checksum cannot happen; be explicit anyway
        raise CorruptDataError(f"{path} could not be parsed ({e}). Rebuild with scripts/build_data.py.") from e
    return ds


def load_split(task: str | Task, split: str):
    """The ``datasets.Dataset`` of a task's ``train`` (demonstration pool) or ``test`` split."""
    task = get_task(task)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    root = data_dir()
    rel = f"{task.name}/{split}.jsonl"
    path = root / rel
    sums = _checksums(str(root))
    if rel not in sums:
        hint = " EmoC needs the hub: python scripts/build_data.py --source hub" if task.name == "emoc" else ""
        raise CorruptDataError(f"No data file {rel} is recorded in {root / 'checksums.json'}.{hint}")
    if not path.exists():
        raise CorruptDataError(f"{path} is missing. Restore it (git checkout -- data/) or run scripts/build_data.py.")
    ds = _load_verified(str(path), sums[rel]["sha256"], path.stat().st_mtime)
    bad = set(ds.unique("label")) - set(range(task.n_classes))
    if bad:
        raise CorruptDataError(f"{path} has labels {sorted(bad)} outside 0..{task.n_classes - 1}.")
    return ds


def label_token_ids(tokenizer, task: str | Task) -> list[int]:
    """First token id of each label word (with its leading space), in class order.

    A label word that tokenizes to several tokens is represented by its first
    token (a :class:`LabelWordWarning` says so); two labels that share a first
    token raise :class:`LabelCollisionError`, since the prediction could not
    tell them apart.
    """
    task = get_task(task)
    ids = []
    for word in task.label_words:
        toks = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if len(toks) > 1:
            warnings.warn(
                f"{task.display}: label word ' {word}' is {len(toks)} tokens for this tokenizer; "
                "its first token stands for the class.",
                LabelWordWarning,
                stacklevel=2,
            )
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        seen: dict[int, str] = {}
        for word, i in zip(task.label_words, ids):
            if i in seen:
                raise LabelCollisionError(
                    f"{task.display}: label words ' {seen[i]}' and ' {word}' share their first token "
                    f"({i}); choose label words whose first tokens differ."
                )
            seen[i] = word
    return ids
