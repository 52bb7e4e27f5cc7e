"""The last bad-input rows of the core: control loading, model names and files, seed streams, the grid and notebook
11's sizes. Each ends as a clear error that says what to do (the project's own error types), never a raw traceback
from inside a library or a silently different result."""

from __future__ import annotations

import shutil

import pytest

from helpers.core.checks import ArgumentError
from helpers.core.controls.model import ControlError, load_control
from helpers.core.model_loading import LocalModelError, UnknownModelError


def test_load_control_of_nothing_says_what_to_pass():
    with pytest.raises(ControlError, match="control's name"):
        load_control(None)


def test_a_truncated_checkpoint_with_a_fresh_sha256_says_what_to_restore(tmp_path):
    from helpers.core.controls.model import control_spec
    from helpers.core.task_data import file_sha256

    src = control_spec("control-wide").path
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(src.read_bytes()[: 4000])
    bad.with_suffix(".sha256").write_text(file_sha256(bad))
    sha = list(tmp_path.glob("*.sha256"))
    assert sha, "the test writes the sha256 file where load_control reads it"
    with pytest.raises(ControlError, match="restore|retrain"):
        load_control(bad)


def test_unknown_names_list_the_controls_and_a_weights_file_points_to_load_control(tmp_path):
    from helpers.core.models import resolve_name

    with pytest.raises(UnknownModelError, match="control-negative"):
        resolve_name("control-bogus")
    f = tmp_path / "x.safetensors"
    shutil.copy(__file__, f)
    with pytest.raises(LocalModelError, match="load_control"):
        resolve_name(str(f))


@pytest.mark.parametrize("seed", [-1, 42.9, "42", True, None])
def test_a_seed_stream_refuses_what_is_not_a_seed(seed):
    from helpers.core.seeds import stream_seed

    with pytest.raises(ArgumentError):
        stream_seed("ranking", seed)


@pytest.mark.parametrize("seeds", [["42"], [42.0], [], [-1], [42, 42]])
def test_the_grid_refuses_bad_seeds_before_anything_runs(seeds):
    from helpers.core.grid import run_grid

    ran = []
    with pytest.raises(ArgumentError):
        run_grid("bad", None, ["sst2"], seeds, lambda t, s: ran.append(s))
    assert not ran


@pytest.mark.parametrize("change", [{"k": 0}, {"k": 2.5}, {"folds": 1}, {"frac": 0}, {"frac": 1.5}, {"seeds": ()},
                                    {"seeds": (-1,)}, {"n": 0}])
def test_notebook_11s_sizes_refuse_what_would_measure_nothing(change):
    from helpers.study.profiles import AfterSizes

    base = dict(seeds=(42,), n=8, n_flow=4, random_n=4, k=1, folds=2, frac=0.1, batch_size=8)
    AfterSizes(**base)
    with pytest.raises(ArgumentError):
        AfterSizes(**{**base, **change})
