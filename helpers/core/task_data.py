"""The data files of tasks: where they are, their rows (every row checked) and their checksums.

A data file is JSON lines with a non-empty string ``text`` and an integer ``label`` per row. The shipped tasks'
files are ``data/<task>/{train,test}.jsonl`` under :func:`data_dir`, recorded in ``data/checksums.json``; a spec
task's files and checksums come from its spec (:mod:`helpers.core.tasks`). :func:`read_rows` reads and checks a
file's rows; :func:`helpers.core.tasks.load_split` loads a task's split after checking its sha256. A file that is
missing, corrupt or edited raises :class:`CorruptDataError` naming the file and the line.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

__all__ = ["CorruptDataError", "data_dir", "file_sha256", "read_rows",
           "make_dataset", "parse_rows", "read_checksums", "read_hashed"]


class CorruptDataError(RuntimeError):
    pass



def data_dir() -> Path:
    """``$ICL_ANCHORS_DATA`` or the repository's ``data/`` folder."""
    env = os.environ.get("ICL_ANCHORS_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@cache
def read_checksums(root: str) -> dict:
    path = Path(root) / "checksums.json"
    if not path.exists():
        raise CorruptDataError(f"{path} is missing. Rebuild the data: python scripts/build_data.py")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptDataError(f"{path} is not valid JSON ({e}); restore it with `git checkout -- data/` or "
                               "rebuild the data: python scripts/build_data.py") from None


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


_PARSED: dict[tuple[str, str], tuple] = {}  # (path, sha256 of its bytes) -> (texts, labels, line numbers)


def read_hashed(path: Path) -> tuple[str, bytes]:
    """``(sha256, bytes)`` of a data file, read once."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptDataError(f"{path} cannot be read ({e.strerror or e})") from e
    return hashlib.sha256(data).hexdigest(), data


def parse_rows(path: Path, sha: str, data: bytes) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """``(texts, labels, line numbers)`` of the bytes ``data`` of a JSON-lines file, every row checked; parsed once
    per content (keyed by its sha256)."""
    key = (str(path), sha)
    if key not in _PARSED:
        if len(_PARSED) >= 32:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = _parse_rows(path, data)
    return _PARSED[key]


def _parse_rows(path: Path, data: bytes) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    fix = ("; each line must be one JSON object with a non-empty string 'text' and an integer 'label' "
           '(the class id: 0 for the first label word), e.g. {"text": "a fine film", "label": 1}')
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptDataError(f"{path}, line {_line_of(data, e.start)}: not UTF-8 text (byte 0x{data[e.start]:02x} "
                               f"at byte {e.start}); save the file as UTF-8") from None
    texts, labels, lines = [], [], []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorruptDataError(f"{where}: not valid JSON ({e.msg}, column {e.colno}){fix}") from None
        if not isinstance(row, dict):
            raise CorruptDataError(f"{where}: a JSON {type(row).__name__}, not an object{fix}")
        if "text" not in row:
            raise CorruptDataError(f"{where}: no 'text' field (fields: {sorted(row)}){fix}")
        t = row["text"]
        if not isinstance(t, str) or not t.strip():
            raise CorruptDataError(f"{where}: 'text' must be a non-empty string, got {t!r}{fix}")
        if "label" not in row:
            raise CorruptDataError(f"{where}: no 'label' field (fields: {sorted(row)}){fix}")
        lab = row["label"]
        if isinstance(lab, bool) or not isinstance(lab, int):
            raise CorruptDataError(f"{where}: 'label' must be an integer class id, got {lab!r}{fix}")
        texts.append(t)
        labels.append(lab)
        lines.append(n)
    if not texts:
        raise CorruptDataError(f"{path} holds no rows{fix}")
    return tuple(texts), tuple(labels), tuple(lines)


def read_rows(path: str | Path, n_classes: int | None = None):
    """The rows of a JSON-lines data file as a ``datasets.Dataset`` (``text``, ``label``), every row checked.

    A row must be one JSON object per line with a non-empty string ``text`` and an integer ``label`` in
    ``0..n_classes - 1`` (when ``n_classes`` is given); other fields are ignored and blank lines skipped.
    The file must be UTF-8 and hold at least one row. Anything else raises :class:`CorruptDataError`
    naming the file and the line. No checksum is checked here (:func:`load_split` checks it first).
    """
    path = Path(path)
    if not path.is_file():
        raise CorruptDataError(f"{path} does not exist")
    return make_dataset(path, *parse_rows(path, *read_hashed(path)), n_classes)


def make_dataset(path: Path, texts, labels, lines, n_classes: int | None):
    import datasets  # lazy: datasets takes seconds to import

    if n_classes is not None:
        bad = next((i for i, lab in enumerate(labels) if not 0 <= lab < n_classes), None)
        if bad is not None:
            n_bad = sum(not 0 <= lab < n_classes for lab in labels)
            raise CorruptDataError(
                f"{path}, line {lines[bad]}: label {labels[bad]} is outside 0..{n_classes - 1} (the task has "
                f"{n_classes} label words; {n_bad} row(s) out of range): fix the label, or add the label word")
    datasets.disable_progress_bars()
    return datasets.Dataset.from_dict({"text": list(texts), "label": list(labels)})
