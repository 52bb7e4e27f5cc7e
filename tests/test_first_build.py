"""First loads that cannot race (helpers.core.offline_models.first_build): several processes that build the same
cache entry at once on an empty cache build it once, and each reads a complete one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.core.offline_models import first_build

ROOT = Path(__file__).resolve().parent.parent

_WORKER = """
import sys, time
from pathlib import Path
from helpers.core.offline_models import first_build
out, log = Path(sys.argv[1]), Path(sys.argv[2])

def build(tmp):
    with open(log, "a") as f:
        f.write("built\\n")
    time.sleep(0.5)  # long enough for the others to arrive while it builds
    if out.suffix:
        tmp.write_text("whole")
    else:
        (tmp / "weights").write_text("whole")

complete = (lambda p: p.exists()) if out.suffix else (lambda p: (p / "weights").exists())
got = first_build(out, build, complete)
print((got if out.suffix else got / "weights").read_text())
"""


@pytest.mark.parametrize("name", ["model.gguf", "dequantised-folder"])
def test_processes_that_load_together_build_once_and_read_a_whole_entry(tmp_path, name):
    out, log = tmp_path / "cache" / name, tmp_path / "builds.log"
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(out), str(log)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outputs]
    assert [o.strip() for o, _ in outputs] == ["whole"] * 4
    assert log.read_text().count("built") == 1
    assert sorted(q.name for q in out.parent.iterdir()) == sorted([name, name + ".lock"])  # no temporary left


def test_a_failed_build_leaves_nothing_and_an_incomplete_folder_is_replaced(tmp_path):
    out = tmp_path / "entry"

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        first_build(out, broken, lambda p: (p / "weights").exists())
    assert not out.exists() and [q.name for q in tmp_path.iterdir()] == ["entry.lock"]
    out.mkdir()
    (out / "stale").write_text("from an older build")
    first_build(out, lambda tmp: (tmp / "weights").write_text("new"), lambda p: (p / "weights").exists())
    assert sorted(q.name for q in out.iterdir()) == ["weights"]
