"""The Makefile's setup and run targets, in a copy with a fake Python: nothing is installed."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

# Stands in for python3 and for .venv/bin/python: logs its arguments; `-m venv DIR` makes DIR/bin/python.
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$FAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
exit 0
"""


@pytest.fixture
def project(tmp_path):
    """A copy of the Makefile, pyproject.toml and the lock, a fake python3, and make(*args) returning the new log
    lines."""
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    fake = tmp_path / "fake-python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()

    def make(*args: str, dry: bool = False) -> list[str]:
        before = log.read_text().splitlines()
        env = {**os.environ, "FAKE_LOG": str(log)}
        r = subprocess.run(["make", "--no-print-directory", *(["-n"] if dry else []), f"PYTHON={fake}", *args],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        if dry:
            return [line for line in r.stdout.splitlines() if line.strip()]
        return log.read_text().splitlines()[len(before):]

    make.dir = tmp_path
    return make


def _pip_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if " -m pip install" in c and "--upgrade pip" not in c]


def test_run_calls_preflight_first(project):
    """`make run` runs scripts/preflight.py with the run's profile, models and jobs before run_all.py."""
    project("setup")
    lines = project("run", "PROFILE=paper", "MODELS=gpt2-xl", "JOBS=1", dry=True)
    pre = next(i for i, line in enumerate(lines) if "scripts/preflight.py" in line)
    run = next(i for i, line in enumerate(lines) if "scripts/run_all.py" in line)
    assert pre < run
    assert "--profile paper --models gpt2-xl --jobs 1" in lines[pre]
    assert project("preflight", "PREFLIGHT_ARGS=--ignore-resources", dry=True)[-1].endswith("--ignore-resources")


def test_setup_reinstalls_torch_when_TORCH_changes(project):
    """A CPU venv asked for another TORCH (e.g. the CUDA build) reinstalls torch, and only torch."""
    first = project("setup")
    assert any(" -m venv " in c for c in first)
    installs = _pip_installs(first)
    assert any("torch==2.13.0" in c for c in installs) and installs[-1].endswith('-e .[dev,lab]'), first
    assert not any("transformer-lens" in c for c in installs), first  # the lock's 3.9.0 needs no install of its own
    assert not [c for c in project("setup", dry=True) if "pip" in c]  # up to date: nothing to do

    second = project("setup", "TORCH=torch")
    assert _pip_installs(second), "TORCH changed but setup did nothing: the CPU build would stay"
    assert all(c.split()[-1] == "torch" for c in _pip_installs(second)), second  # torch only, not the project
    assert any("--force-reinstall" in c for c in second)  # an installed torch of another build is replaced
    assert not any(" -m venv " in c for c in second)
    assert project("setup", "TORCH=torch") == []  # same TORCH again: nothing
    assert not [c for c in project("setup", "TORCH=torch", dry=True) if "pip" in c]

    back = project("setup")  # the default again
    assert _pip_installs(back) and all("torch==2.13.0" in c for c in _pip_installs(back)), back

    # pyproject.toml or the lock changed: the lock and the project are reinstalled, torch is not
    for i, name in enumerate(("pyproject.toml", "requirements.lock")):
        later = time.time() + 5 * (i + 1)
        os.utime(project.dir / name, (later, later))
        again = project("setup")
        assert _pip_installs(again) and all("torch" not in c for c in _pip_installs(again)), again


def test_setup_installs_torch_then_the_lock_then_the_project_without_resolving(project):
    """torch from TORCH (its dependencies held to the lock), then the lock's exact versions and the project, both
    with --no-deps (nothing resolved: the lock is complete, and what it leaves out stays out), then pip check."""
    installs = _pip_installs(project("setup"))
    torch_i = next(i for i, c in enumerate(installs) if c.endswith(" torch==2.13.0") and "--no-deps" not in c)
    assert "-c requirements.lock" in installs[torch_i]
    lock_i = next(i for i, c in enumerate(installs) if c.endswith("-r requirements.lock"))
    project_i = next(i for i, c in enumerate(installs) if c.endswith("-e .[dev,lab]"))
    assert torch_i < lock_i < project_i == len(installs) - 1  # TL=3 is the lock's: no install of its own
    assert "--no-deps" in installs[lock_i].split() and "--no-deps" in installs[project_i].split()
    assert not [c for c in project("setup", dry=True) if "pip" in c]  # done: nothing to do


def test_setup_TL_4_swaps_transformerlens_only_and_setup_brings_3_9_back(project):
    """`make setup TL=4` installs transformer-lens 4.3.0 without dependencies and nothing else; `make setup` then
    installs the lock's 3.9.0 again; a reinstalled lock (pyproject.toml changed) makes the TL stamp again."""
    project("setup")
    four = _pip_installs(project("setup", "TL=4"))
    assert four == [c for c in four if c.endswith("--no-deps transformer-lens==4.3.0")] and len(four) == 1, four
    assert project("setup", "TL=4") == []  # done: nothing to do
    back = _pip_installs(project("setup"))
    assert len(back) == 1 and back[0].endswith("--no-deps transformer-lens==3.9.0"), back
    project("setup", "TL=4")
    later = time.time() + 5
    os.utime(project.dir / "pyproject.toml", (later, later))
    again = _pip_installs(project("setup", "TL=4"))
    assert again[0].endswith("-r requirements.lock") and again[-1].endswith("transformer-lens==4.3.0"), again


def test_setup_refuses_a_TransformerLens_it_does_not_know(project):
    """`make setup TL=5` stops before installing anything (it used to install 3.9 and stamp `.tl-5`)."""
    r = subprocess.run(["make", "--no-print-directory", "setup", "TL=5"], cwd=project.dir, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "FAKE_LOG": str(project.dir / "calls.log")})
    assert r.returncode != 0 and "TL=5: use TL=3" in r.stderr and "TL=4" in r.stderr, r.stderr
    assert (project.dir / "calls.log").read_text() == "" and not (project.dir / ".venv").exists()


def test_lock_resolves_the_project_then_writes_the_lock(project):
    """`make lock`: pip install -e .[dev,lab] with its dependencies in .venv, then scripts/lock.py into the lock."""
    project("setup")
    calls = project("lock")
    resolve = next(i for i, c in enumerate(calls) if c.endswith("-e .[dev,lab]"))
    assert "--no-deps" not in calls[resolve].split()
    assert any(c.endswith("scripts/lock.py") for c in calls[resolve + 1:]), calls
    assert (project.dir / "requirements.lock").exists() and not (project.dir / "requirements.lock.tmp").exists()


def test_run_passes_the_cell_timeout(project):
    """`make run CELL_TIMEOUT=...` or ICL_CELL_TIMEOUT in the environment reach run_all.py as --timeout; unset,
    run_all.py takes the profile's default."""
    project("setup")

    def run_line(*args, **env):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return next(ln for ln in project("run", *args, dry=True) if "scripts/run_all.py" in ln)
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)

    assert "--timeout" not in run_line()
    assert run_line("CELL_TIMEOUT=7200").endswith("--timeout 7200")
    assert run_line(ICL_CELL_TIMEOUT="900").endswith("--timeout 900")


def test_lab_installs_nothing_unpinned(project):
    """`make lab` starts the JupyterLab that `make setup` installed from the lock: no pip install of its own, and
    jupyterlab is pinned in requirements.lock."""
    project("setup")
    lines = project("lab", dry=True)
    assert not any("pip install" in line for line in lines), lines
    assert any("jupyter lab" in line for line in lines)
    assert any(line.startswith("jupyterlab==") for line in (ROOT / "requirements.lock").read_text().splitlines())


def test_run_selects_notebooks(project):
    """`make run NOTEBOOKS="00 01"` runs those (and preflight checks the same ones), instead of being ignored."""
    project("setup")
    lines = project("run", "NOTEBOOKS=00 01", dry=True)
    assert any("scripts/preflight.py" in line and line.rstrip().endswith("--notebooks 00 01") for line in lines), lines
    assert any("scripts/run_all.py" in line and "--notebooks 00 01" in line for line in lines), lines
    assert not any("--notebooks" in line for line in project("run", dry=True))
