"""Property-based tests (hypothesis) of what users pass in: task specs, data rows, settings and the arguments of the
public helpers. Every generated input either works or raises one of the project's own errors with a message; no
AttributeError, IndexError, bare KeyError or TypeError, or numpy error escapes from inside.

``make test`` runs a bounded number of examples (the ``bounded`` profile, seconds); ``make fuzz`` runs the same
properties with many more (``HYPOTHESIS_PROFILE=long``)."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.core import task_data, tasks
from helpers.core.checks import ArgumentError
from helpers.core.prompts import Demo, PromptError, build_prompt, make_icl_set
from helpers.core.task_data import CorruptDataError
from helpers.core.tasks import LabelCollisionError, SpecError, TemplateError, UnknownTaskError
from helpers.experiments.aucroc import auc_roc
from helpers.experiments.saliency import relative_flow
from helpers.study.config import check_environment

# make test: the same 25 examples on every run (derandomize), so a run's outcome and time do not depend on which
# inputs a fresh clone happens to draw; make fuzz draws 1000 new ones each time
settings.register_profile("bounded", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("long", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bounded"))

# the project's own error types: each carries a message that says what to do
OURS = (ArgumentError, PromptError, UnknownTaskError, SpecError, TemplateError, CorruptDataError, LabelCollisionError)


def works_or_says_why(fn, *extra: type[BaseException]):
    """Run ``fn``: a result, or one of the project's errors (or ``extra``, raised by the project with a message)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn()
        except OURS + extra as e:
            assert str(e).strip(), f"{type(e).__name__} without a message"
            return e


# ------------------------------------------------------------------ task specs and data rows

_text = st.text(min_size=0, max_size=20)
_words = st.lists(st.text(min_size=0, max_size=8), min_size=0, max_size=4)
_templates = st.one_of(_text, st.sampled_from(["Review: {text}\nSentiment: {label}", "{text} => {label}",
                                               "{label} {text}", "Q: {text}\nA:{label}", "{text}{{x}} {label}"]))
_spec = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.text(max_size=12), st.integers(), st.none()),
    "template": st.one_of(_templates, st.integers(), st.none()),
    "label_words": st.one_of(_words, st.text(max_size=5), st.none()),
    "separator": st.one_of(_text, st.integers()),
    "display": st.one_of(_text, st.none()),
})


@given(spec=_spec)
def test_a_task_spec_loads_or_says_why(spec, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spec")
    rows = "".join(json.dumps({"text": t, "label": i % 2}) + "\n" for i, t in enumerate(["good", "bad", "fine", "meh"]))
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(rows)
    (folder / "task.json").write_text(json.dumps(spec))
    works_or_says_why(lambda: tasks.load_split(tasks.load_task_spec(folder / "task.json"), "test"))


_row = st.one_of(
    st.fixed_dictionaries({"text": st.one_of(_text, st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
                           "label": st.one_of(st.integers(-3, 5), st.floats(allow_nan=True), st.text(max_size=3),
                                              st.booleans(), st.none())}),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=10))


@given(rows=st.lists(_row, max_size=5), raw=st.binary(max_size=30))
def test_data_rows_load_or_name_their_line(rows, raw, tmp_path_factory):
    path = tmp_path_factory.mktemp("rows") / "test.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\n" for r in rows).encode() + raw)
    works_or_says_why(lambda: task_data.read_rows(path, n_classes=2))


@given(env=st.dictionaries(st.sampled_from(["ICL_PROFILE", "ICL_MODEL", "ICL_TASKS", "ICL_DTYPE", "ICL_RECOMPUTE",
                                            "ICL_CELL_TIMEOUT", "ICL_OWN_TASK", "ICL_ACCOUNT", "ICL_TYPO"]),
                           st.text(max_size=12), max_size=4))
def test_settings_are_checked_without_raising(env):
    problems = check_environment(env)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)


# ------------------------------------------------------------------ the public helpers' arguments

_anything = st.one_of(st.none(), st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=6), st.booleans(), st.lists(st.integers(0, 50), max_size=3))


@given(task=st.one_of(st.sampled_from(["sst2", "trec", "nope"]), _anything), seed=_anything,
       n_test=_anything, k=_anything)
def test_make_icl_set_works_or_says_why(tiny_models, task, seed, n_test, k):
    works_or_says_why(lambda: make_icl_set(tiny_models["gpt2"], task, seed, n_test, k))


_demo = st.one_of(st.builds(Demo, st.text(min_size=1, max_size=10), st.one_of(st.integers(-2, 3), st.booleans())),
                  st.tuples(st.text(max_size=5), st.integers(0, 1)), st.text(max_size=5), st.none())


@given(demos=st.one_of(st.lists(_demo, max_size=4), _demo), query=_demo)
def test_build_prompt_works_or_says_why(tiny_models, demos, query):
    works_or_says_why(lambda: build_prompt(tiny_models["gpt2"], "sst2", demos, query))


_arrays = st.one_of(
    st.builds(lambda n, c, s: np.random.default_rng(s).normal(size=(n, c)), st.integers(0, 5), st.integers(0, 4),
              st.integers(0, 9)),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6).map(np.array),
    st.lists(st.lists(st.floats(allow_nan=True), min_size=2, max_size=2), max_size=5).map(np.array))


@given(scores=_arrays, pred=st.one_of(st.lists(st.integers(-1, 4), max_size=6).map(np.array),
                                      st.lists(st.floats(allow_nan=True), max_size=4).map(np.array)))
def test_auc_roc_works_or_says_why(scores, pred):
    works_or_says_why(lambda: auc_roc(scores, pred), ValueError)


@given(shape=st.lists(st.integers(0, 4), max_size=4), sign=st.sampled_from([1.0, -1.0]), nan=st.booleans())
def test_relative_flow_works_or_says_why(shape, sign, nan):
    x = sign * torch.rand(shape) if shape else torch.tensor(1.0)
    if nan and x.numel():
        x.view(-1)[0] = float("nan")
    works_or_says_why(lambda: relative_flow(x), ValueError)


@pytest.mark.parametrize("fn", [test_make_icl_set_works_or_says_why, test_build_prompt_works_or_says_why])
def test_the_properties_are_hypothesis_tests(fn):
    assert hasattr(fn, "hypothesis")


# ------------------------------------------------------------------ seeds, the grid, and notebook 11's functions

def _a_seed(x) -> bool:
    """Whether ``x`` is a seed every entry point must take: a whole number of 0 or more (not a bool)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0


@given(name=st.sampled_from(["control_saliency", "ranking", "random_keep", "nope"]), seed=_anything,
       index=st.one_of(st.none(), _anything))
def test_a_seed_stream_takes_a_seed_or_says_why(name, seed, index):
    from helpers.core.seeds import stream_seed

    got = works_or_says_why(lambda: stream_seed(name, seed, index), KeyError, ValueError)
    if not isinstance(got, BaseException):  # a result only for a real seed: never another stream's draw
        assert _a_seed(seed) and isinstance(got, int) and got >= 0


@given(seeds=st.one_of(st.lists(_anything, max_size=4), _anything))
def test_the_grid_refuses_what_is_no_list_of_seeds_before_it_runs(seeds):
    from helpers.core.grid import run_grid

    ran = []
    got = works_or_says_why(lambda: run_grid("fuzz", None, ["sst2"], seeds, lambda t, s: ran.append(s)), TypeError,
                            ValueError, AttributeError)
    good = isinstance(seeds, list) and seeds and all(_a_seed(s) for s in seeds) and len(set(seeds)) == len(seeds)
    if not good:  # refused at the door, before a cell is stored or computed
        assert isinstance(got, (ArgumentError, TypeError)) and not ran


_small = st.one_of(st.integers(-3, 6), st.floats(-1, 7), st.just(float("nan")), st.none(), st.text(max_size=2))


@given(pred=st.lists(_small, max_size=5), gold=st.lists(_small, max_size=5),
       perm=st.lists(st.one_of(st.integers(-1, 3), st.floats(0, 2)), max_size=4),
       prior=st.one_of(st.none(), st.lists(_small, max_size=5)))
def test_notebook_11s_agreements_and_override_rate_work_or_say_why(pred, gold, perm, prior):
    from helpers.experiments.flipped_labels import agreements, override_rate

    got = works_or_says_why(lambda: agreements(pred, gold, perm, prior), ValueError)
    if not isinstance(got, BaseException):
        n = len(perm)
        assert sorted(perm) == list(range(n)) and all(isinstance(p, int) and 0 <= p < n for p in pred + gold)
    works_or_says_why(lambda: override_rate(pred, pred, prior if prior is not None else pred, gold, perm), ValueError)


@given(curve=st.one_of(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=5), _anything))
def test_notebook_11s_half_rise_works_or_says_why(curve):
    from helpers.protocols.query_stages import half_rise

    got = works_or_says_why(lambda: half_rise(curve), ValueError)
    if not isinstance(got, BaseException) and not np.isnan(got):
        c = np.asarray(curve, dtype=float)
        assert c.ndim == 1 and len(c) and np.isfinite(c).all() and 0 <= got < len(c)


@given(k=_anything, n=_anything, folds=_anything, frac=_anything, seeds=st.one_of(st.lists(_anything, max_size=3),
                                                                                  st.just([42])))
def test_notebook_11s_sizes_take_sizes_or_say_why(k, n, folds, frac, seeds):
    from helpers.study.profiles import AfterSizes

    got = works_or_says_why(lambda: AfterSizes(seeds=tuple(seeds), n=n, n_flow=4, random_n=4, k=k, folds=folds,
                                                frac=frac, batch_size=8))
    if not isinstance(got, BaseException):  # k = 0 would knock out nothing and still claim a verdict
        assert all(_a_seed(s) for s in seeds) and seeds and _a_seed(k) and k >= 1 and _a_seed(n) and n >= 1
        assert _a_seed(folds) and folds >= 2 and 0 < frac <= 1
