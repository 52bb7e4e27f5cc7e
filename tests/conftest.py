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
# make test runs in pytest-xdist workers with --dist worksteal: worker i first gets the i-th contiguous share of the
# collected items, and a worker that runs dry takes half of another's queue. Collected as written, the notebooks
# come last and the longest (notebook 10, minutes) can start when the other worker has almost nothing left, which
# leaves a core idle to the end. So the items are reordered, the same way in every worker: the longest first, each
# dealt to the share with the least work so far (longest processing time first), the short ones filling each share
# to its size, by the seconds of an earlier run (tests/durations.json; refreshed with
# TEST_DURATIONS_OUT=tests/durations.json make test). Only the order changes, never which tests run; an item the file
# does not know counts as short.
DURATIONS = Path(__file__).resolve().parent / "durations.json"
LONG_SECONDS = 5.0  # items at least this long are dealt out; shorter ones fill the shares in collection order


def _share_sizes(n: int, workers: int) -> list[int]:
    """How many items worksteal's first distribution gives each worker (as xdist's WorkStealingScheduling does)."""
    sizes, left = [], n
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def balanced_order(items: list, seconds: dict[str, float], workers: int) -> list:
    """``items`` reordered so each worker's first share starts with its long items and the shares' known seconds are
    as even as longest-first dealing makes them (see above). One worker, or nothing known: unchanged."""
    if workers < 2 or not seconds:
        return list(items)
    sizes = _share_sizes(len(items), workers)
    long = sorted((it for it in items if seconds.get(it.nodeid, 0.0) >= LONG_SECONDS),
                  key=lambda it: -seconds[it.nodeid])
    shares: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for it in long:
        open_ = [i for i in range(workers) if len(shares[i]) < sizes[i]]
        i = min(open_, key=lambda j: load[j])
        shares[i].append(it)
        load[i] += seconds[it.nodeid]
    dealt = {id(it) for it in long}
    short = iter(it for it in items if id(it) not in dealt)
    for i in range(workers):
        shares[i].extend(next(short) for _ in range(sizes[i] - len(shares[i])))
    return [it for share in shares for it in share]


class _Order:
    """The reordering as a plugin of its own: its hook runs last, after ``-m`` has deselected (a module holds one
    ``pytest_collection_modifyitems``, the tiers' above, which must run first)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        if workers > 1 and DURATIONS.is_file():
            import json

            items[:] = balanced_order(items, json.loads(DURATIONS.read_text()), workers)


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
