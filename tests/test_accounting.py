"""helpers.core.accounting: FLOPs counted from shapes equal torch's FLOP counter; work lands on the right step."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers.core import accounting
from helpers.core.store import cached


def _torch_flops(fn) -> float:
    mode = FlopCounterMode(display=False)
    with mode:
        fn()
    return float(mode.get_total_flops())


def _ours(fn) -> accounting.Ledger:
    with accounting.recording() as led:
        fn()
    return led


def _flops(led: accounting.Ledger) -> float:
    return sum(e.flops + e.backward_flops for e in led.entries.values())


def _tokens(model, batch=3, n=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, 5000, (batch, n), generator=g)


@pytest.mark.parametrize("kw", [{}, {"stop_at_layer": 2}, {"return_type": None}])
def test_forward_flops_equal_torch_counter(tiny_model, kw):
    toks = _tokens(tiny_model)
    with torch.inference_mode():
        run = lambda: tiny_model(toks, **kw)  # noqa: E731
        assert _flops(_ours(run)) == pytest.approx(_torch_flops(run), rel=1e-9)


def test_counted_forward_changes_nothing(tiny_model):
    toks = _tokens(tiny_model)
    with torch.inference_mode():
        plain = tiny_model(toks)
        with accounting.recording():
            counted = tiny_model(toks)
    assert torch.equal(plain, counted)


def test_start_at_layer_and_past_cache_equal_torch_counter(tiny_model):
    """The shared-prefix engine's forwards: a suffix after a cached prefix, and upper layers from a residual."""
    from helpers.core.prefix import run_prefix, suffix_forward

    prefix, suffix = _tokens(tiny_model, 1, 17)[0], _tokens(tiny_model, 4, 6, seed=1)
    with torch.inference_mode():
        cache = run_prefix(tiny_model, prefix)
        run = lambda: suffix_forward(tiny_model, cache, suffix)  # noqa: E731
        assert _flops(_ours(run)) == pytest.approx(_torch_flops(run), rel=1e-9)
        resid = tiny_model(suffix, stop_at_layer=1)
        upper = lambda: tiny_model(resid, start_at_layer=1)  # noqa: E731
        assert _flops(_ours(upper)) == pytest.approx(_torch_flops(upper), rel=1e-9)


def test_label_unembedding_counted(tiny_model):
    from helpers.core.predict import unembed_at

    resid = torch.randn(5, 3, tiny_model.cfg.d_model)
    q = torch.tensor([0, 1, 2, 2, 0])
    vocab = torch.tensor([11, 12, 13])
    for cols in (None, vocab):
        run = lambda: unembed_at(tiny_model, resid, q, cols)  # noqa: E731
        assert _flops(_ours(run)) == pytest.approx(_torch_flops(run), rel=1e-9)


def test_backward_charged_once_per_forward_that_needs_a_gradient(tiny_models):
    """Activations only (weights frozen): the backward pass costs about one forward; torch's counter agrees
    within the matmuls whose gradient nothing needs."""
    model = tiny_models["gpt2"]
    toks = _tokens(model, 2, 9)
    frozen = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        scale = torch.ones(1, requires_grad=True)

        def run():
            with model.hooks(fwd_hooks=[("blocks.0.hook_resid_post", lambda x, hook: x * scale)]):
                out = model(toks, stop_at_layer=model.cfg.n_layers)
            out.sum().backward()

        led = _ours(run)
        e = led.entries[accounting.OUTSIDE]
        assert e.backward_positions == e.positions == 18
        assert e.backward_flops == e.flops
        # torch counts the backward through the layers above block 0 only: ours is an upper bound
        assert _torch_flops(run) <= e.flops + e.backward_flops
    finally:
        for p, r in zip(model.parameters(), frozen):
            p.requires_grad_(r)


def test_steps_charge_the_innermost_and_hits_cost_nothing(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    model = tiny_models["rotary"]
    toks = _tokens(model, 2, 7)

    def inner():
        with torch.inference_mode():
            return model(toks, stop_at_layer=1)

    def outer():
        with torch.inference_mode():
            model(toks)
        return cached("acct-inner", {"n": 7}, inner)

    with accounting.recording() as led:
        cached("acct-outer", {"n": 7}, outer)
        cached("acct-outer", {"n": 7}, outer)  # read back: no work
    one_layer = accounting.forward_flops(model.cfg, 2, 7, layers=1, unembed=False)
    assert led.entries["acct-inner"].flops == one_layer
    assert led.entries["acct-outer"].flops == accounting.forward_flops(model.cfg, 2, 7)
    assert led.entries["acct-outer"].computed == 1 and led.entries["acct-outer"].hits == 1
    assert led.entries["acct-inner"].positions == 14 and led.entries["acct-inner"].forwards == 1
    assert all(e.seconds >= 0 for e in led.entries.values())


def test_off_by_default_counts_nothing(tiny_model):
    assert accounting.active() is None
    with torch.inference_mode():
        tiny_model(_tokens(tiny_model))
    assert accounting.active() is None


def test_ledger_file_peak_and_table(tiny_models, tmp_path):
    model = tiny_models["gqa"]
    led = accounting.Ledger(path=str(tmp_path / "acct" / "07_x.json"))
    with accounting.recording(led):
        with accounting.step("heads"):
            with torch.inference_mode():
                model(_tokens(model, 4, 12))
    data = json.loads((tmp_path / "acct" / "07_x.json").read_text())
    assert data["peak"]["gflops"] > 0 and data["entries"]["heads"]["positions"] == 48
    rows = accounting.summarise(accounting.read_ledgers(tmp_path / "acct"), walls={"07_x": 9.0})
    heads = next(r for r in rows if r["step"] == "heads")
    total = next(r for r in rows if r["step"] == "total")
    assert heads["tflop"] == pytest.approx(accounting.forward_flops(model.cfg, 4, 12) / 1e12)
    assert total["wall_s"] == 9.0 and total["pct_peak"] is not None


def test_matmul_peak_measures_each_shape():
    out = accounting.matmul_peak([(32, 64), (64, 32)], rows=64, seconds=0.01)
    assert len(out["shapes"]) == 2 and out["gflops"] == max(out["shapes"].values()) > 0
