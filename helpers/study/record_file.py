"""A run record as a file: what one is (:class:`Record`), how it is read and checked before anything renders it.

A record is one JSON file per model and run under ``docs/record/`` (``<model slug>-<run key>.json``;
:mod:`helpers.study.record` writes them and renders the tables). :func:`read_record` reads one and checks it against
:func:`record_problems` (its fields, a clean commit, the profile's own tasks, every claim's key, verdict and interval,
every power row) and its file name; a broken record is a :class:`RecordError` that names the file and what is wrong,
never a table cell. :func:`missing_records` names the records git tracks that are gone from the working tree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers.study.claims import VERDICTS, Claim
from helpers.study.power_report import Power
from helpers.study.results import model_slug

__all__ = ["RECORD_DIR", "CONTROL", "RecordError", "Record", "record_problems", "read_record", "load_records",
           "missing_records"]

ROOT = Path(__file__).resolve().parent.parent.parent
RECORD_DIR = ROOT / "docs" / "record"
CONTROL = "control"


class RecordError(RuntimeError):
    """A record that cannot be made or read as asked; the message says what to do."""


@dataclass(frozen=True)
class Record:
    """One model's run: ``claims`` in the order the notebooks reported them (notebook 09's under the control)."""

    model: str
    slug: str
    profile: str
    run_key: str
    commit: str
    date: str
    seconds: dict
    claims: tuple[Claim, ...]
    note: str = ""  # what a reader should know about the run (e.g. the machine was shared), given to make record
    part: str = ""  # the notebooks of a run recorded on its own ("10"), beside the model's record of the others
    power: tuple[Power, ...] = ()  # the checks' power on the controls, where the run measured it (notebook 09)
    methods: dict = field(default_factory=dict)  # {notebook: method_digest} of the code the run computed with

    def by_key(self) -> dict[str, Claim]:
        return {c.key: c for c in self.claims}

    @property
    def file_name(self) -> str:
        """``<slug>-<run key>.json``; a part: ``<slug>-<run key>-nb<part>.json``."""
        return f"{self.slug}-{self.run_key}{f'-nb{self.part}' if self.part else ''}.json"

    @classmethod
    def from_json(cls, d: dict) -> Record:
        return cls(model=d["model"], slug=d["slug"], profile=d["profile"], run_key=d["run_key"], commit=d["commit"],
                   date=d["date"], seconds=d.get("seconds", {}), note=d.get("note", ""), part=d.get("part", ""),
                   claims=tuple(Claim.from_json(c) for sec in d["notebooks"].values() for c in sec["claims"]),
                   power=tuple(Power.from_json(p) for sec in d["notebooks"].values() for p in sec.get("power", [])),
                   methods=d.get("methods", {}))


_FIELDS = {"model": str, "slug": str, "profile": str, "run_key": str, "commit": str, "date": str, "notebooks": dict}
_SHA = re.compile(r"[0-9a-f]{7,40}")
_SECTION = re.compile(r"\d\d_\w+")
_KEY = re.compile(r"\d\d\.[\w.+-]+")


def _number(x) -> bool:
    import math

    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def record_problems(d) -> list[str]:
    """What is wrong with a record's JSON ``d`` (empty: nothing): the fields a record has and their types, a commit
    that is a clean sha, a profile its run key starts with and no run on other tasks (``<profile>-tasks-..`` or
    ``-own-..``), the slug of its model, and every claim: a ``NN.name`` key, a known verdict, an interval of finite
    numbers with low <= estimate <= high, counts that are whole and not negative; every power row readable."""
    if not isinstance(d, dict):
        return [f"a record is a JSON object, got {type(d).__name__}"]
    out = [f"field {k!r} is missing" for k in _FIELDS if k not in d]
    out += [f"field {k!r} should be {t.__name__}, got {type(d[k]).__name__}" for k, t in _FIELDS.items()
            if k in d and not isinstance(d[k], t)]
    if out:
        return out
    if not _SHA.fullmatch(d["commit"]):
        out.append(f"commit {d['commit']!r} is not a clean commit sha (a run with uncommitted changes is not recorded)")
    if d["run_key"] != d["profile"]:
        out.append(f"run key {d['run_key']!r} is not the profile {d['profile']!r}: a run on other or own tasks is not "
                   "one of the shipped records (its RESULTS page is its report)")
    want = CONTROL if d["model"] == CONTROL else model_slug(d["model"])
    if d["slug"] != want:
        out.append(f"slug {d['slug']!r} is not model {d['model']!r}'s ({want!r})")
    for name in ("seconds", "methods"):
        if not isinstance(d.get(name, {}), dict):
            out.append(f"field {name!r} should be an object")
    for nb, sec in d["notebooks"].items():
        if not _SECTION.fullmatch(nb) or not isinstance(sec, dict) or not isinstance(sec.get("claims"), list):
            out.append(f"notebook {nb!r}: expected a name like '01_saliency_flow' holding a list of claims")
            continue
        for i, c in enumerate(sec["claims"]):
            where = f"notebook {nb}, claim {i}" + (f" {c.get('key')!r}" if isinstance(c, dict) else "")
            if not isinstance(c, dict) or not isinstance(c.get("key"), str) or not _KEY.fullmatch(c["key"]):
                out.append(f"{where}: a claim is an object with a key like '01.deep_pq_dominant'")
                continue
            if c.get("verdict") not in VERDICTS:
                out.append(f"{where}: verdict {c.get('verdict')!r} is not one of {list(VERDICTS)}")
            iv = c.get("ours")
            if iv is not None:
                if not isinstance(iv, dict) or not all(_number(iv.get(k)) for k in ("estimate", "low", "high")):
                    out.append(f"{where}: its interval needs finite numbers estimate, low and high")
                elif not iv["low"] <= iv["estimate"] <= iv["high"]:
                    out.append(f"{where}: its interval has low <= estimate <= high broken "
                               f"({iv['low']}, {iv['estimate']}, {iv['high']})")
                elif not all(isinstance(iv.get(k), int) and iv[k] >= 0 for k in ("n_seeds", "n_inputs")):
                    out.append(f"{where}: n_seeds and n_inputs must be whole numbers, not negative")
            try:
                Claim.from_json(c)
            except (TypeError, ValueError) as e:
                out.append(f"{where}: not a claim ({e})")
        for i, row in enumerate(sec.get("power", [])):
            try:
                Power.from_json(row)
            except (TypeError, ValueError, KeyError) as e:
                out.append(f"notebook {nb}, power row {i}: not a power row ({e})")
    return out


def read_record(path: Path) -> Record:
    """The record in ``path``, checked (:func:`record_problems`, and a file name that is the record's own): a
    :class:`RecordError` names the file and what is wrong, never a number rendered from a broken record."""
    path = Path(path)
    fix = f"restore it (`git checkout -- {path.name}` in docs/record) or make it again (`make record`)"
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: cannot be read as a record ({e}); {fix}") from None
    problems = record_problems(d)
    if problems:
        raise RecordError(f"{path}: " + "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                                                                 if len(problems) > 5 else "") + f"; {fix}")
    r = Record.from_json(d)
    if path.name != r.file_name:
        raise RecordError(f"{path}: its content is the record {r.file_name}, under another name (a copy, or a "
                          f"renamed file); keep one file per record, named as `make record` names it")
    return r


def missing_records(record_dir: Path = RECORD_DIR) -> list[str]:
    """The records git tracks under ``record_dir`` that are gone from the working tree (empty outside git): their
    cells would silently read "not run"."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(record_dir), "ls-files", "--deleted", "--", "."], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted(line.strip() for line in out.splitlines() if line.strip().endswith(".json"))


def load_records(record_dir: Path = RECORD_DIR) -> list[Record]:
    """Every record under ``record_dir`` (each checked, :func:`read_record`): the offline models in name order, the
    control last."""
    recs = [read_record(p) for p in sorted(Path(record_dir).glob("*.json"))]
    return sorted(recs, key=lambda r: (r.slug == CONTROL, r.slug, r.part))
