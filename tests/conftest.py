"""Shared fixtures: tiny random HookedTransformers of three architectures, and the real offline model."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from helpers.exercises.tiny import TINY_KINDS, make_tiny_model

os.environ.setdefault("ICL_PROFILE", "smoke")
# results stored on disk (helpers.core.store.cached) go to a fresh folder: tests never pass on old results
os.environ.setdefault("ICL_RESULTS_CACHE", tempfile.mkdtemp(prefix="icl-test-results-"))
warnings.filterwarnings("ignore", category=UserWarning, module="transformer_lens")


@pytest.fixture(autouse=True)
def _close_figures():
    """No test leaves a matplotlib figure open for the next one (the figures of the plots helpers, shown or not)."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def helpers_mirror(tmp_path, monkeypatch):
    """A stand-in for helpers/ that a test may add modules to: every file a link to the real one, the store's
    ``HELPERS`` pointed at it, and each package's import path extended to it. Tests that walk the real tree (ruff,
    the import graph, the layers) run beside such a test in other workers, so nothing is ever written into it."""
    import importlib

    import helpers.core.store as store

    root = tmp_path / "helpers"
    for f in store.HELPERS.rglob("*.py"):
        (root / f.relative_to(store.HELPERS)).parent.mkdir(parents=True, exist_ok=True)
        (root / f.relative_to(store.HELPERS)).symlink_to(f)
    before = set(sys.modules)
    for init in root.rglob("__init__.py"):
        pkg = importlib.import_module(".".join(("helpers", *init.parent.relative_to(root).parts)))
        monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(init.parent)])
    monkeypatch.setattr(store, "HELPERS", root)
    caches = (store.module_imports, store.dependencies, store.code_digest)
    for f in caches:
        f.cache_clear()
    yield root
    for f in caches:
        f.cache_clear()
    for name in set(sys.modules) - before:  # the probe modules, imported from the stand-in
        if name.startswith("helpers.") and "_probe" in name:
            del sys.modules[name]


@pytest.fixture(scope="session", params=TINY_KINDS)
def tiny_model(request):
    """A tiny random model: learned positions (gpt2), rotary, and grouped-query rotary."""
    torch.manual_seed(0)
    return make_tiny_model(request.param, seed=0)


@pytest.fixture(scope="session")
def tiny_models():
    return {k: make_tiny_model(k, seed=0) for k in TINY_KINDS}


@pytest.fixture(scope="session")
def gemma():
    """The default offline model (slow: ~10 s once cached, ~1 min the first time)."""
    from helpers.core.models import load_model

    return load_model("google/gemma-3-270m", verbose=False)


@pytest.fixture(scope="session")
def smollm2():
    from helpers.core.models import load_model

    return load_model("smollm2", verbose=False)


@pytest.fixture(scope="module")
def tiny_sst2_set(tiny_model):
    """(model, prompts, label_ids): 4 SST-2 test prompts of seed 42 on each tiny architecture."""
    from helpers.core.prompts import make_icl_set

    ps = make_icl_set(tiny_model, "sst2", seed=42, n_test=4)
    return tiny_model, ps.prompts, ps.label_ids


@pytest.fixture
def prefix_runs(monkeypatch):
    """Call it to start counting :func:`helpers.core.prefix.run_prefix` calls; returns the list of calls."""
    def start():
        import helpers.core.prefix as prefix

        calls = []
        real = prefix.run_prefix

        def counting(*a, **k):
            calls.append(1)
            return real(*a, **k)

        # every loaded helpers module that imported run_prefix holds its own name for it
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("helpers.") and getattr(module, "run_prefix", None) is real:
                monkeypatch.setattr(module, "run_prefix", counting)
        return calls

    return start


@pytest.fixture
def mixed_demo_prompts(tiny_model):
    """Two SST-2 prompts with different demonstrations (no shared prefix), on each tiny architecture."""
    from helpers.core.prompts import Demo, build_prompt

    return [build_prompt(tiny_model, "sst2", [Demo("a truly great film", 1), Demo("dull", 0)], Demo("wonderful", 1)),
            build_prompt(tiny_model, "sst2", [Demo("dull and far too long", 0), Demo("fun", 1)], Demo("awful", 0))]


@pytest.fixture(scope="session")
def ut():
    """Paper B's SST-2 with foo/bar labels (helpers.core.unrelated), on small slices of the pools (fast)."""
    from helpers.core.unrelated import UnrelatedTask, unrelated_task

    full = unrelated_task("sst2", (0, 1), ("foo", "bar"))
    return UnrelatedTask(full.task, full.train.select(range(300)), full.test.select(range(60)), "sst2", (0, 1))


# ---------------------------------------------------------------------------------------------------------- tiers
# Every test belongs to exactly one tier, a marker that `make test-<tier>` selects (`make test` runs all four):
#   unit       the science and the plumbing on tiny random models and small synthetic inputs (seconds each)
#   models     loads a real offline model, the positive control's checkpoint on a GPU, or a CUDA device
#   notebooks  executes a notebook (nbmake items, and tests marked ``notebooks``)
#   infra      the repository around the code: Makefile, lock, run scripts, records, site, layers, hygiene
TIERS = ("unit", "models", "notebooks", "infra")
INFRA_FILES = frozenset({
    "test_cluster.py", "test_exercises.py", "test_gpu_check.py", "test_gpu_hours.py", "test_jupyter_config.py", "test_layers.py",
    "test_lock.py", "test_makefile.py", "test_notebooks.py", "test_plots.py", "test_preflight.py",
    "test_record.py", "test_run_all.py", "test_site.py", "test_tiers.py",
})
REAL_MODEL_FIXTURES = frozenset({"gemma", "smollm2"})


def tier_of(item) -> str:
    """The tier of a collected test (see TIERS): by what it runs, then by its file."""
    if item.path.suffix == ".ipynb" or item.get_closest_marker("notebooks"):
        return "notebooks"
    if item.path.name in INFRA_FILES:
        return "infra"
    if (REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("slow") or item.get_closest_marker("cuda")):
        return "models"
    return "unit"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier before ``-m`` selects (tryfirst); ICL_TIER_DUMP=<file> writes them as JSON."""
    tiers = {}
    for item in items:
        tiers[item.nodeid] = tier_of(item)
        item.add_marker(getattr(pytest.mark, tiers[item.nodeid]))
    if os.environ.get("ICL_TIER_DUMP"):
        import json

        with open(os.environ["ICL_TIER_DUMP"], "w") as f:
            json.dump(tiers, f)


# -------------------------------------------------------------------------------------------------------- the order
# make test runs in pytest-xdist workers with --dist loadfile: each test file (each notebook) is one unit of work,
# sent whole to one worker, so a module's fixtures (a tiny model, two runs of run_all) are built once. xdist hands
# the units out in the order of the collection as workers free up (each worker holds at most about two ahead), so
# the files are reordered, the same way in every worker, by their seconds in an earlier run (tests/durations.json;
# refreshed with TEST_DURATIONS_OUT=tests/durations.json make test): the longest first (longest processing time
# first), so the last units to start are short and neither core idles long at the end. Within a file the tests
# keep their order. Only the order changes, never which tests run; a file the record does not know counts as short.
# (Under --dist worksteal, dealing single tests, a module's tests ended up apart and its module-scoped fixtures were
# built again for each: test_cluster's two runs three times.)
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def file_of(nodeid: str) -> str:
    """The file a test item belongs to: xdist's loadfile unit (``tests/test_x.py``, ``notebooks/NN_x.ipynb``)."""
    return nodeid.split("::", 1)[0]


def longest_files_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` grouped by file, the files in decreasing order of their known seconds (ties and unknown files in
    collection order), each file's items in their own order. Nothing known: unchanged."""
    if not seconds:
        return list(items)
    files: dict[str, list] = {}
    for it in items:
        files.setdefault(file_of(it.nodeid), []).append(it)
    order = sorted(files.values(), key=lambda group: -sum(seconds.get(it.nodeid, 0.0) for it in group))
    return [it for group in order for it in group]


class _Order:
    """The reordering as a plugin of its own: its hook runs last, after ``-m`` has deselected (a module holds one
    ``pytest_collection_modifyitems``, the tiers' above, which must run first)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        if workers > 1 and getattr(config.option, "dist", None) == "loadfile" and DURATIONS.is_file():
            import json

            items[:] = longest_files_first(items, json.loads(DURATIONS.read_text()))


def pytest_configure(config):
    config.pluginmanager.register(_Order(), "icl-balanced-order")


_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid] = _SECONDS.get(report.nodeid, 0.0) + report.duration


LAST_DURATIONS = Path(__file__).resolve().parent.parent / ".cache" / "test-durations.json"


def pytest_sessionfinish(session):
    """Each item's seconds (setup, call and teardown) of this run, as JSON (on the controller, which sees every
    worker's reports), into TEST_DURATIONS_OUT=<file> when set (``TEST_DURATIONS_OUT=tests/durations.json make test``
    refreshes the order above), and always into .cache/test-durations.json, so a measured run keeps where its time
    went (the slowest items also print at the end of ``make test``: ``--durations``)."""
    if hasattr(session.config, "workerinput") or not _SECONDS:
        return
    import json

    text = json.dumps({k: round(v, 1) for k, v in sorted(_SECONDS.items()) if v >= 1.0}, indent=0) + "\n"
    out = os.environ.get("TEST_DURATIONS_OUT")
    if out:
        Path(out).write_text(text)
    LAST_DURATIONS.parent.mkdir(parents=True, exist_ok=True)
    LAST_DURATIONS.write_text(text)
