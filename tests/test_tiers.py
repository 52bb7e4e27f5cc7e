"""Every test is in exactly one tier (tests/conftest.py, 'tiers'), so that `make test-<tier>` together run all
of `make test`: each collected test gets one tier marker, and each tier has tests of the kind it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TIERS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiers(request, tmp_path_factory) -> dict[str, str]:
    """{node id: tier} of a collection of the whole suite, notebooks included (as `make test` collects it): this
    session's own when it collected that (make test: every worker collects everything), else a collection run
    for it."""
    items = request.session.items
    if {"notebooks", "tests"} <= {i.nodeid.split("/", 1)[0] for i in items} and len(items) > 500:
        return {i.nodeid: next(m.name for m in i.iter_markers() if m.name in TIERS) for i in items}
    out = tmp_path_factory.mktemp("tiers") / "tiers.json"
    env = {**os.environ, "ICL_TIER_DUMP": str(out), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "tests", "notebooks", "--nbmake", "--collect-only", "-q",
                        "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


def test_every_test_has_one_known_tier(tiers):
    assert tiers and set(tiers.values()) <= set(TIERS), sorted(set(tiers.values()) - set(TIERS))
    assert len(tiers) == len(set(tiers)), "a test was collected twice"


def test_each_tier_holds_what_it_names(tiers):
    def tier(prefix: str) -> set[str]:
        return {t for node, t in tiers.items() if node.startswith(prefix)}

    assert tier("notebooks/") == {"notebooks"}, "every notebook run is in the notebooks tier"
    assert tier("tests/test_lock.py") == {"infra"} and tier("tests/test_site.py") == {"infra"}
    assert tier("tests/test_stats.py") == {"unit"}, "tests on small inputs are unit tests"
    assert "models" in tier("tests/test_models.py"), "tests that load an offline model are in the models tier"
    assert "unit" in tier("tests/test_saliency.py") and "models" in tier("tests/test_saliency.py")
    assert all(any(t == name for t in tiers.values()) for name in TIERS), "a tier without tests"


def test_a_tier_marker_selects_its_tests():
    """`-m unit` selects what the marker says (the marks are added before pytest's own -m deselection)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "tests/test_stats.py", "tests/test_lock.py", "--collect-only",
                        "-q", "-m", "unit", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    selected = [line for line in r.stdout.splitlines() if "::" in line]
    assert selected and all(line.startswith("tests/test_stats.py") for line in selected), r.stdout[-2000:]


def test_the_order_sends_the_longest_files_first_and_keeps_each_file_together():
    from types import SimpleNamespace

    from conftest import longest_files_first

    ids = ["tests/test_a.py::t1", "tests/test_b.py::t1", "tests/test_a.py::t2", "notebooks/10_x.ipynb::10_x.ipynb",
           "tests/test_c.py::t1", "tests/test_b.py::t2", "tests/test_d.py::t1"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    seconds = {"tests/test_a.py::t1": 30.0, "tests/test_a.py::t2": 40.0, "tests/test_b.py::t2": 100.0,
               "notebooks/10_x.ipynb::10_x.ipynb": 200.0, "tests/test_c.py::t1": 0.5}
    out = [it.nodeid for it in longest_files_first(items, seconds)]
    assert sorted(out) == sorted(ids)  # only the order changes
    assert out == ["notebooks/10_x.ipynb::10_x.ipynb", "tests/test_b.py::t1", "tests/test_b.py::t2",
                   "tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_c.py::t1", "tests/test_d.py::t1"]
    assert longest_files_first(items, {}) == items


def test_make_test_deals_whole_files_in_the_order_given():
    """The Makefile's xdist mode is the one the order above is written for: loadfile, and xdist's own reordering of
    files by their number of tests turned off."""
    text = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    xdist = next(line for line in text.splitlines() if line.startswith("XDIST ="))
    assert "--dist loadfile" in xdist and "--no-loadscope-reorder" in xdist, xdist


def test_the_durations_file_setting_is_not_refused_as_a_project_setting():
    """`TEST_DURATIONS_OUT=<file> make test` rewrites tests/durations.json; every process of the run sees it, and
    the project refuses any ICL_* name it does not know, so the test setting must not be one."""
    from helpers.study.config import check_environment

    assert not check_environment({"TEST_DURATIONS_OUT": "tests/durations.json"})
    assert check_environment({"ICL_DURATIONS_OUT": "x"})  # what it was called once: every notebook refused it
