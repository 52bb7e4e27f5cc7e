"""requirements.lock: consistent with pyproject.toml, the Makefile and environment.yml; installs from a fresh clone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as the lock

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"


def read_lock(text: str) -> dict[str, str]:
    """{canonical name: version} of a lock's ``name==version`` lines; anything else is an error."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;=<>!~]+)", line)
        assert m, f"not an exact pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{name} pinned twice"
        pins[name] = m.group(2)
    return pins


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return reqs + [Requirement(r) for r in project["optional-dependencies"]["dev"]]


def makefile_torch() -> str:
    m = re.search(r"^TORCH \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile sets no default TORCH"
    return m.group(1)


def test_every_project_dependency_is_pinned_within_its_range():
    pins = read_lock(LOCK.read_text())
    assert "torch" not in pins  # torch comes from TORCH, before the lock
    for req in project_requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        if name == "torch":
            version = Requirement(makefile_torch()).specifier
            (pinned,) = [Version(s.version) for s in version]
            assert req.specifier.contains(pinned, prereleases=True), f"TORCH {pinned} is outside {req}"
            continue
        assert name in pins, f"{req} is in pyproject.toml but not pinned in requirements.lock (run `make lock`)"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), \
            f"requirements.lock pins {name}=={pins[name]}, outside pyproject.toml's {req} (run `make lock`)"


def test_what_the_lock_leaves_out_is_optional_and_absent():
    """scripts/lock.py's LEFT_OUT: each has its reason, none is pinned, none is a requirement without an extra of an
    installed package (pip check would fail without it), and jsonschema, which can use it, imports without it."""
    import importlib.metadata as md
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from lock import LEFT_OUT
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    pins = read_lock(LOCK.read_text())
    for name, why in LEFT_OUT.items():
        assert why and canonicalize_name(name) not in pins, name
        for dist in md.distributions():
            for line in dist.requires or []:
                req = Requirement(line)
                if canonicalize_name(req.name) == canonicalize_name(name):
                    assert req.marker is not None and not req.marker.evaluate({"extra": ""}), (dist.metadata["Name"], line)
    r = subprocess.run([sys.executable, "-c", "import jsonschema, nbformat; nbformat.validate(nbformat.v4.new_notebook())"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_lock_says_how_it_was_made():
    head = LOCK.read_text().split("\n", 6)[:5]
    assert any("make lock" in line for line in head) and all(line.startswith("#") for line in head)


def test_lock_parser_rejects_ranges_and_duplicates():
    assert read_lock("# c\nNumPy==2.0  # x\n\nStaICC==0.1.1\n") == {"numpy": "2.0", "staicc": "0.1.1"}
    for bad in ("numpy>=2\n", "numpy\n", "numpy==2\nnumpy==2\n", "-e .\n"):
        with pytest.raises(AssertionError):
            read_lock(bad)


def test_environment_yml_installs_the_lock_and_the_makefiles_torch():
    text = (ROOT / "environment.yml").read_text()
    lines = [ln.strip().removeprefix("- ").strip() for ln in text.splitlines() if ln.strip().startswith("- ")]
    assert makefile_torch() in lines
    assert "-r requirements.lock" in lines
    assert lines.index(makefile_torch()) < lines.index("-r requirements.lock") < lines.index("-e .[dev,lab]")


def freeze_pins(python: Path) -> dict[str, str]:
    """``pip freeze`` of ``python``'s environment, setuptools included (torch needs it, so the lock pins it) and
    pip left out (setup upgrades it; it is not locked)."""
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--exclude-editable"], capture_output=True,
                         text=True, check=True).stdout
    pins = {canonicalize_name(n): v for n, _, v in (ln.partition("==") for ln in out.splitlines() if "==" in ln)}
    pins.pop("pip", None)
    return pins


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ICL_TEST_FRESH_INSTALL"),
                    reason="installs the whole lock into a new venv (minutes, needs the package index): "
                           "set ICL_TEST_FRESH_INSTALL=1")
def test_fresh_clone_setup_installs_exactly_the_lock(tmp_path):
    """`make setup` in a fresh clone of the committed state: pip freeze is the lock plus torch, nothing else."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    t0 = time.monotonic()
    r = subprocess.run(["make", "setup", f"PYTHON={os.environ.get('ICL_TEST_PYTHON', shutil.which('python3'))}"],
                       cwd=clone, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"make setup in a fresh clone: {seconds:.0f} s")
    frozen = freeze_pins(clone / ".venv" / "bin" / "python")
    torch_version = frozen.pop("torch")
    assert Version(torch_version).public == str(Requirement(makefile_torch()).specifier).lstrip("=")
    assert frozen == read_lock((clone / "requirements.lock").read_text())
