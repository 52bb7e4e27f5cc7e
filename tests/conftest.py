"""Shared fixtures: tiny random HookedTransformers of three architectures, and the real offline model."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import pytest
import torch

os.environ.setdefault("ICL_PROFILE", "smoke")
# results stored on disk (helpers.core.store.cached) go to a fresh folder: tests never pass on old results
os.environ.setdefault("ICL_RESULTS_CACHE", tempfile.mkdtemp(prefix="icl-test-results-"))
warnings.filterwarnings("ignore", category=UserWarning, module="transformer_lens")

TINY_KINDS = ("gpt2", "rotary", "gqa")


@pytest.fixture(autouse=True)
def _close_figures():
    """No test leaves a matplotlib figure open for the next one (the figures of the plots helpers, shown or not)."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(scope="session", params=TINY_KINDS)
def tiny_model(request):
    """A tiny random model: learned positions (gpt2), rotary, and grouped-query rotary."""
    from helpers.core.models import make_tiny_model

    torch.manual_seed(0)
    return make_tiny_model(request.param, seed=0)


@pytest.fixture(scope="session")
def tiny_models():
    from helpers.core.models import make_tiny_model

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
