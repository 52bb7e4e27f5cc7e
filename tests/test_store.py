"""The result store: keyed by every byte of the weights, and unable to run code from its files."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.core import store
from helpers.core.store import StoreError, cached, model_fingerprint, same_weights
from helpers.exercises.tiny import make_tiny_model


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    return tmp_path / "store"


def test_fingerprint_changes_with_any_value_of_any_parameter():
    model = make_tiny_model("gpt2", seed=0)
    ref = model_fingerprint(model)
    assert model_fingerprint(make_tiny_model("gpt2", seed=0)) == ref  # same weights, same fingerprint
    for name, q in model.named_parameters():  # one value mid-tensor moved, then put back exactly
        at = tuple(int(i) for i in np.unravel_index(q.numel() // 2, q.shape))
        old = q[at].clone()
        with torch.no_grad():
            q[at] += 1e-3
        assert model_fingerprint(model) != ref, name
        with torch.no_grad():
            q[at] = old
    assert model_fingerprint(model) == ref  # every value back: the first fingerprint again


def test_fingerprint_sees_edits_through_data_and_inside_same_weights():
    model = make_tiny_model("rotary", seed=0)
    ref = model_fingerprint(model)
    model.blocks[1].attn.W_O.data[2] = 0  # .data: no version counter moves
    edited = model_fingerprint(model)
    assert edited != ref
    with same_weights(model):
        assert model_fingerprint(model) == edited
        with torch.no_grad():
            model.blocks[0].attn.W_O[1] = 0  # an in-place edit inside the block is seen too
        assert model_fingerprint(model) != edited


def _run_all(model):
    """Every run helper that stores results of a model, on a tiny model and a handful of inputs."""
    from helpers.protocols.aucroc import AucrocSizes, aucroc_runs
    from helpers.protocols.isolation import IsolationSizes, isolation_runs
    from helpers.protocols.saliency import SaliencySizes, saliency_runs
    from helpers.protocols.setting import SettingSizes, vanilla_accuracy

    acc = vanilla_accuracy(model, ["sst2"], SettingSizes(seeds=(42,), n_test=3, batch_size=16), progress=False)
    sal = saliency_runs(model, ["sst2"], SaliencySizes(seeds=(42,), n=2, batch_size=4), progress=False)
    auc = aucroc_runs(model, ["sst2"], AucrocSizes(seeds=(42,), n=3, batch_size=16), progress=False)
    iso = isolation_runs(model, ["sst2"], IsolationSizes(seeds=(42,), n=2, sweep_seeds=(), k_main=1, k_sweep=(),
                                                         sweep_n=None, random_n=None, random_draw="authors",
                                                         batch_size=16), progress=False)
    return acc, sal, auc, iso


def test_zeroing_one_heads_W_O_rows_recomputes_every_stored_result(results):
    model = make_tiny_model("gpt2", seed=0)
    first = _run_all(model)
    stored = sorted(p.relative_to(results) for p in results.rglob("*.pt"))
    kinds = {p.parts[0] for p in stored}
    assert {"vanilla_accuracy", "saliency_flow", "aucroc", "isolation", "vanilla_run"} <= kinds
    _run_all(model)
    assert sorted(p.relative_to(results) for p in results.rglob("*.pt")) == stored  # served, nothing new
    with torch.no_grad():
        model.blocks[1].attn.W_O[2] = 0  # head 2 of layer 1 writes nothing
    second = _run_all(model)
    now = sorted(p.relative_to(results) for p in results.rglob("*.pt"))
    assert len(now) == 2 * len(stored)  # every result computed again, under new keys
    for kind in kinds:
        assert sum(p.parts[0] == kind for p in now) == 2 * sum(p.parts[0] == kind for p in stored), kind
    assert not torch.equal(first[1][("sst2", 42)], second[1][("sst2", 42)])  # the saliency did change


class _Boom:
    def __reduce__(self):
        return (Path.touch, (Path(MARKER),))


MARKER = ""


def test_a_planted_file_runs_no_code(results, tmp_path):
    global MARKER
    MARKER = str(tmp_path / "ran")
    cached("planted", {"x": 1}, lambda: {"v": 1})
    (path,) = (results / "planted").glob("*.pt")
    path.write_bytes(pickle.dumps({"v": _Boom()}, protocol=2))  # what someone could leave in the cache folder
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert cached("planted", {"x": 1}, lambda: {"v": 2}) == {"v": 2}  # recomputed, not read
    assert not Path(MARKER).exists()
    assert torch.load(path, weights_only=True) == {"v": 2}  # and replaced by the safe result


def test_results_of_registered_types_round_trip(results):
    from helpers.core.predict import Predictions

    pred = Predictions(torch.randn(3, 2), torch.zeros(3, 0, dtype=torch.long), torch.tensor([0, 1, -1]))
    cached("typed", {}, lambda: {"p": pred, "a": torch.arange(3).numpy(), "nan": float("nan")})
    out = cached("typed", {}, lambda: pytest.fail("served from the store, not computed"))
    assert isinstance(out["p"], Predictions) and torch.equal(out["p"].label_logits, pred.label_logits)


class Unregistered:
    pass


def test_a_result_of_an_unregistered_type_is_refused_when_stored(results):
    with pytest.raises(StoreError, match="register them with helpers.core.store.result_types"):
        cached("untyped", {}, lambda: {"x": Unregistered()})
    assert store._RESULT_TYPES  # the project's own result types are registered


def test_an_entry_edited_on_disk_is_detected_and_recomputed(results):
    """The store proves what it serves: 20 bytes of a stored result changed on disk (still a loadable file), a
    proof written for other inputs, or a missing proof, each recompute with a StoreMismatch warning."""
    import json

    first = {"accuracy": torch.tensor([0.25156])}
    assert cached("probe", {"task": "sst2", "n": 8}, lambda: first)["accuracy"].item() == pytest.approx(0.25156)
    (path,) = (results / "probe").glob("*.pt")
    proof = json.loads(path.with_suffix(".proof.json").read_text())
    assert proof["params"] == {"task": "sst2", "n": 8} and proof["key"] == path.stem
    # a parseable edit: the same structure with another number
    path.write_bytes(store._dump({"accuracy": torch.tensor([0.25625])}, "probe"))
    with pytest.warns(store.StoreMismatch, match="content changed after it was written"):
        again = cached("probe", {"task": "sst2", "n": 8}, lambda: first)
    assert again["accuracy"].item() == pytest.approx(0.25156)
    # served again without a warning once rewritten
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", store.StoreMismatch)
        assert cached("probe", {"task": "sst2", "n": 8}, lambda: {"x": 0})["accuracy"].item() == pytest.approx(0.25156)
    # a proof copied from another entry
    cached("probe", {"task": "trec", "n": 8}, lambda: {"accuracy": torch.tensor([0.5])})
    other = next(p for p in (results / "probe").glob("*.pt") if p != path)
    path.with_suffix(".proof.json").write_text(other.with_suffix(".proof.json").read_text())
    with pytest.warns(store.StoreMismatch, match="written for other inputs"):
        cached("probe", {"task": "sst2", "n": 8}, lambda: first)
    path.with_suffix(".proof.json").unlink()
    with pytest.warns(store.StoreMismatch, match="no proof"):
        cached("probe", {"task": "sst2", "n": 8}, lambda: first)


def test_a_control_loaded_again_has_the_same_fingerprint():
    """A control's config holds its checkpoint's metadata, a dict that safetensors returns in another key order on
    each read: the fingerprint reads the config in a canonical order, so every load of the same checkpoint finds the
    steps stored by the last."""
    from helpers.core.controls.model import load_control

    prints = {model_fingerprint(load_control("control-negative")) for _ in range(5)}
    assert len(prints) == 1, prints


def test_the_fingerprint_reads_a_dict_in_the_config_by_content_not_order():
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2", seed=0)
    prints = []
    for info in ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": 3, "c": 2}, "a": 1}, {"a": 1, "b": {"c": 2, "d": 4}}):
        model.cfg.icl_control_info = info
        prints.append(model_fingerprint(model))
    assert prints[0] == prints[1] != prints[2]
