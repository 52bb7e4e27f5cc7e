"""Which code a recorded run computed with, and whether it is still the code here.

Each notebook of a record carries a digest of its method (:func:`method_digest`: the notebook's code cells and
the ``helpers`` modules it really imports, :func:`helpers.core.store.dependencies`); a record whose digest differs
from today's is stale (:func:`stale_methods`). :func:`restamp` rewrites the digests when the rule that makes them
changes but the code does not, comparing each file with the run's commit through git.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from helpers.core.store import code_digest, dependencies, file_imports, module_file
from helpers.study.record_file import Record

__all__ = ["NOTEBOOKS_DIR", "notebook_file", "method_files", "method_digest", "run_methods", "restamp",
           "stale_methods"]

ROOT = Path(__file__).resolve().parent.parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"


def notebook_file(section: str) -> Path | None:
    """The source of the notebook a metrics section belongs to (``08_your_own_task_rotten_tomatoes`` -> notebook
    08's ``.py``); None when there is none."""
    found = sorted(NOTEBOOKS_DIR.glob(f"{section[:2]}_*.py"))
    return found[0] if found else None


def method_files(section: str) -> list[Path]:
    """The files notebook ``section`` computes with: its source, and every ``helpers`` module it imports and theirs,
    with the modules that change how a model computes, without those that only keep or present results
    (:func:`helpers.core.store.dependencies`)."""
    path = notebook_file(section)
    if path is None:
        return []
    return [path] + [module_file(m) for m in dependencies(file_imports(path))]


def method_digest(section: str) -> str:
    """A digest of what notebook ``section`` computes with: its code cells (their syntax tree, so its prose and
    comments do not count) and :func:`method_files`' helpers modules (:func:`helpers.core.store.code_digest`)."""
    import ast
    import hashlib

    path = notebook_file(section)
    if path is None:
        return "no notebook"
    tree = ast.dump(ast.parse(path.read_text()))
    return hashlib.sha256((tree + code_digest(dependencies(file_imports(path)))).encode()).hexdigest()[:16]


def _changed_since(commit: str) -> set[str] | None:
    """Repository paths that differ between ``commit`` and the working tree under helpers/ and notebooks/; None
    when git cannot say."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only", commit, "--", "helpers", "notebooks"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {line.strip() for line in out.splitlines() if line.strip()}


def run_methods(sections: Sequence[str], commit: str) -> dict[str, str]:
    """``{section: method_digest}`` of the notebooks a run at ``commit`` computed with, for each notebook whose
    :func:`method_files` are the same in the working tree as at ``commit`` (the digest is made from the working
    tree); a notebook whose code changed since is left out, so no digest is ever credited to a run that did not use
    that code."""
    changed = _changed_since(commit)
    if changed is None:
        return {}
    out = {}
    for sec in sections:
        files = {str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f) for f in method_files(sec)}
        if files and not files & changed:
            out[sec] = method_digest(sec)
    return out


def _same_code_since(section: str, commit: str) -> bool:
    """Whether every file of :func:`method_files` holds the same code at ``commit`` as in the working tree: the
    notebook's syntax tree (its prose is comments), each module's :func:`helpers.core.store.code_text` (without
    comments and docstrings), as :func:`method_digest` reads them. False when git cannot say."""
    import ast
    import subprocess

    from helpers.core.store import code_text

    files = method_files(section)
    if not files:
        return False
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        try:
            then = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"], capture_output=True,
                                  text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return False
        now = f.read_text()
        same = (ast.dump(ast.parse(then)) == ast.dump(ast.parse(now)) if rel.startswith("notebooks/")
                else code_text(then) == code_text(now))
        if not same:
            return False
    return True


def restamp(path: Path) -> list[str]:
    """Rewrite the code digests of the record at ``path`` for the notebooks whose :func:`method_files` hold the same
    code in the working tree as at the run's commit (:func:`_same_code_since`), for when the digest's rule changes but not
    the code, or when only a notebook's prose changed between its run and its record: such a notebook's run is the run
    this code would make. A notebook whose files changed keeps its old
    digest, so it still reads as stale. Returns the notebooks restamped."""
    import json

    d = json.loads(path.read_text())
    old = d.get("methods", {})
    # every notebook the record ran, also one left without a digest when it was made (a prose edit to its notebook
    # between the run and `make record` leaves it out: :func:`run_methods` reads file names, not code)
    sections = list(dict.fromkeys([*old, *d.get("seconds", {})]))
    fresh = {sec: method_digest(sec) for sec in sections if _same_code_since(sec, d["commit"])}
    d["methods"] = {sec: fresh.get(sec, old.get(sec)) for sec in sections if sec in fresh or sec in old}
    path.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
    return sorted(sec for sec in fresh if fresh[sec] != old.get(sec))


def stale_methods(r: Record) -> list[str]:
    """The notebooks of ``r`` whose code (:func:`method_digest`) has changed since its run."""
    return sorted(sec for sec, d in r.methods.items() if method_digest(sec) != d)
