"""helpers.core.sizing: batches and memory caps follow the model's device; a CPU keeps today's values.

A GPU is simulated: a model config of GPT2-XL's shape whose device is ``cuda:0``, and the free-memory query
monkeypatched to a small (16 GiB) and a large (80 GiB) card. Nothing here needs CUDA.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from helpers.core import sizing as sz

GIB = 2**30


class FakeModel:
    """What the sizing reads of a model: its config, and parameters (none: the device is ``cfg.device``)."""

    def __init__(self, device="cuda:0", dtype=torch.float32):
        self.cfg = SimpleNamespace(n_layers=48, d_model=1600, n_heads=25, d_head=64, d_mlp=6400, d_vocab=50257,
                                   dtype=dtype, gated_mlp=False, device=device)

    def parameters(self):
        return iter(())


@pytest.fixture
def card(monkeypatch):
    """``card(gib)``: the simulated GPU has ``gib`` GiB free."""
    monkeypatch.delenv("ICL_BATCH_TOKENS", raising=False)

    def set_free(gib):
        monkeypatch.setattr(sz, "free_bytes", lambda device: int(gib * GIB))

    monkeypatch.setattr(sz, "_measured_pass_tokens", lambda model: sz.CPU_PASS_TOKENS)  # no timing on a fake card
    return set_free


def test_a_cpu_model_gets_todays_values(tiny_model, monkeypatch):
    monkeypatch.delenv("ICL_BATCH_TOKENS", raising=False)
    monkeypatch.setattr(sz, "free_bytes", lambda device: pytest.fail("a CPU model must not query GPU memory"))
    for kw in ({}, {"grad": True, "patterns": True}, {"keys": 900}):
        s = sz.sizing(tiny_model, 440, 16, **kw)
        assert (s.batch_size, s.max_tokens, s.max_pattern_mb, s.device) == (16, 1024, 256, "cpu")
    assert sz.sizing(tiny_model, 50, 3, max_pattern_mb=64).max_pattern_mb == 64
    monkeypatch.setenv("ICL_BATCH_TOKENS", "300")
    assert sz.sizing(tiny_model, 50, 16).max_tokens == 300
    # today's constants: predict's token budget and saliency's pattern cap
    from helpers.core.predict import batch_token_budget
    from helpers.experiments.saliency import saliency_flow

    monkeypatch.delenv("ICL_BATCH_TOKENS")
    assert batch_token_budget() == batch_token_budget(tiny_model) == sz.CPU_BATCH_TOKENS == 1024
    assert saliency_flow.__defaults__[-1] == sz.CPU_PATTERN_MB == 256


def test_fake_cpu_model_of_gpt2xl_shape_splits_saliency_into_slivers(monkeypatch):
    """The cap sized for a CPU: one AGNews-length prompt per batch for GPT2-XL's 48 x 25 patterns."""
    from helpers.experiments.saliency import _batches

    monkeypatch.delenv("ICL_BATCH_TOKENS", raising=False)
    prompts = [[0] * 440] * 8
    assert [len(b) for b in _batches(FakeModel("cpu"), prompts, 8, sz.CPU_PATTERN_MB)] == [1] * 8


@pytest.mark.parametrize("work", [dict(tokens=200), dict(tokens=440, grad=True, patterns=True),
                                  dict(tokens=40, keys=440), dict(tokens=200, grad=True)])
def test_the_batch_grows_with_memory_and_stays_within_it(card, work):
    model = FakeModel()
    tokens = work["tokens"]
    keys = work.get("keys", tokens)
    per_token = sz.bytes_per_token(model.cfg, keys, grad=work.get("grad", False), patterns=work.get("patterns", False))
    got = {}
    for gib in (16, 80):
        card(gib)
        s = got[gib] = sz.sizing(model, batch_size=4096, **work)
        assert s.device == "cuda:0" and s.usable_bytes == int(sz.SAFETY * gib * GIB) - sz.RESERVE_BYTES
        assert s.batch_size >= 1
        assert s.batch_size * tokens * per_token <= s.usable_bytes  # the batch fits what it may take
        assert s.max_tokens * per_token <= s.usable_bytes
        assert (s.batch_size + 1) * tokens * per_token > s.usable_bytes or s.batch_size == 4096  # and no more fits
    assert got[80].batch_size > got[16].batch_size and got[80].max_tokens > got[16].max_tokens


def test_gpu_saliency_batches_hold_the_prompts_a_large_card_fits(card):
    """GPT2-XL's saliency of 8 prompts of 440 tokens: one batch of 8 on 80 GiB (one prompt per batch under the
    CPU's cap); a 16 GiB card takes fewer per batch, every batch's patterns within the lifted cap."""
    from helpers.experiments.saliency import _batches

    model, prompts = FakeModel(), [[0] * 440] * 8
    card(80)
    assert [len(b) for b in _batches(model, prompts, 8, sz.CPU_PATTERN_MB)] == [8]
    card(16)
    small = sz.sizing(model, 440, 8, grad=True, patterns=True)
    batches = _batches(model, prompts, 8, sz.CPU_PATTERN_MB)
    assert 1 <= max(len(b) for b in batches) == small.batch_size < 8 and sum(map(len, batches)) == 8
    pattern_mb = 48 * 25 * 4 * 440 * 440 / 2**20
    assert small.batch_size * pattern_mb <= small.max_pattern_mb + 1e-6


def test_the_callers_batch_size_is_an_upper_bound_and_bfloat16_fits_more(card):
    card(80)
    assert sz.sizing(FakeModel(), 200, 16).batch_size == 16
    f32 = sz.sizing(FakeModel(), 440, 4096, grad=True)
    bf16 = sz.sizing(FakeModel(dtype=torch.bfloat16), 440, 4096, grad=True)
    assert bf16.batch_size > f32.batch_size


def test_icl_batch_tokens_still_caps_a_gpu(card, monkeypatch):
    card(80)
    monkeypatch.setenv("ICL_BATCH_TOKENS", "2048")
    assert sz.sizing(FakeModel(), 200, 16).max_tokens == 2048


def test_a_card_with_no_room_still_runs_one_prompt(card):
    card(0.5)
    s = sz.sizing(FakeModel(), 440, 16, grad=True, patterns=True)
    assert s.batch_size == 1 and s.usable_bytes == 0


def test_bad_batch_size_is_refused(tiny_model):
    with pytest.raises(Exception, match="batch_size"):
        sz.sizing(tiny_model, 10, 0)


def test_the_control_on_the_cpu_keeps_its_capped_batch_when_cuda_exists(tiny_model, monkeypatch):
    """A model on the CPU on a machine with a GPU (notebook 09's control): the CPU's token cap, not the GPU's."""
    import helpers.core.predict as pr
    from helpers.core.prompts import make_icl_set

    monkeypatch.delenv("ICL_BATCH_TOKENS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sz, "free_bytes", lambda device: pytest.fail("a CPU model must not query GPU memory"))
    assert pr.batch_token_budget(tiny_model) == 1024
    seen = []
    real = pr.length_batches

    def spy(prompts, batch_size, max_tokens=None, fixed_tokens=sz.CPU_PASS_TOKENS):
        seen.append((batch_size, max_tokens, fixed_tokens))
        return real(prompts, batch_size, max_tokens, fixed_tokens)

    monkeypatch.setattr(pr, "length_batches", spy)
    s = make_icl_set(tiny_model, "sst2", seed=0, n_test=4)
    pr.predict(tiny_model, s.prompts, s.label_ids, batch_size=16, top_k=0)
    assert seen == [(16, 1024, 32)]


def test_tf32_is_opt_in_and_never_applied_to_a_cpu_model(tiny_model, monkeypatch):
    """ICL_TF32: off unless 1; a bad value is refused; on a CPU model the switch leaves torch and the model alone."""
    from helpers.core.precision import apply_matmul_precision, tf32_requested

    monkeypatch.delenv("ICL_TF32", raising=False)
    assert tf32_requested() is False
    monkeypatch.setenv("ICL_TF32", "yes")
    with pytest.raises(ValueError, match="give 1"):
        tf32_requested()
    monkeypatch.setenv("ICL_TF32", "1")
    before = torch.get_float32_matmul_precision()
    assert apply_matmul_precision(tiny_model) is False
    assert torch.get_float32_matmul_precision() == before and not hasattr(tiny_model.cfg, "icl_tf32")


def test_q_row_chunks_hold_the_caches_that_fit(card):
    """predict_q_row's chunk: three copies of each prompt's keys and values (2 x layers x keys x heads x d_head x
    4 bytes); GPT2-XL at 1000 keys is 1.72 GiB a prompt, one per chunk under the CPU's 2 GiB, more on a large card;
    a small model keeps the caller's batch size; never fewer than one."""
    per_prompt = 3 * 2 * 48 * 1000 * 25 * 64 * 4
    assert sz.cache_rows(FakeModel("cpu"), 1000, 16) == 1 == int(sz.CPU_CACHE_MB * 2**20 // per_prompt)
    assert sz.cache_rows(FakeModel("cpu"), 100, 16) == int(sz.CPU_CACHE_MB * 2**20 // (per_prompt // 10)) == 11
    assert sz.cache_rows(FakeModel("cpu"), 10, 16) == 16  # the caller's batch size is the upper bound
    assert sz.cache_rows(FakeModel("cpu"), 1000, 16, max_mb=1) == 1
    card(80)
    rows = sz.cache_rows(FakeModel(), 1000, 64)
    assert rows == (int(sz.SAFETY * 80 * GIB) - sz.RESERVE_BYTES) // per_prompt and 1 < rows < 64
    with pytest.raises(Exception, match="batch_size"):
        sz.cache_rows(FakeModel("cpu"), 10, 0)


def test_a_cpu_pass_costs_todays_tokens_and_is_never_timed(tiny_model, monkeypatch):
    monkeypatch.setattr(sz, "_timed", lambda model, rows: pytest.fail("a CPU model must not be timed"))
    assert sz.pass_tokens(tiny_model) == sz.CPU_PASS_TOKENS == sz.sizing(tiny_model, 10, 4).pass_tokens == 32


def test_the_pass_cost_is_the_fixed_time_over_the_time_per_token(monkeypatch):
    """time = a + b * tokens from a 1-row and an 8-row pass: pass_tokens = a / b, clamped; measured once per model."""
    a, b, calls = 0.150, 2e-5, []

    def timed(model, rows):
        calls.append(rows)
        return a + b * rows * sz.PROBE_TOKENS

    monkeypatch.setattr(sz, "_timed", timed)
    model = FakeModel()
    assert sz.pass_tokens(model) == round(a / b) == 7500
    assert sz.pass_tokens(model) == 7500 and calls == [1, 1, 8]  # a warm-up, then the two passes, once
    monkeypatch.setattr(sz, "_timed", lambda model, rows: 1.0)  # 8 rows cost no more than 1: launches dominate
    assert sz.pass_tokens(FakeModel()) == sz.MAX_PASS_TOKENS
    monkeypatch.setattr(sz, "_timed", lambda model, rows: 1e-6 * rows * sz.PROBE_TOKENS)  # no fixed cost
    assert sz.pass_tokens(FakeModel()) == sz.CPU_PASS_TOKENS


def test_an_expensive_pass_merges_the_batches(card, monkeypatch):
    """8 prompts of 40-320 tokens: a CPU's pass cost splits them by length; a device whose pass costs thousands of
    tokens' work (the H100's, from its launches) runs them in one or two batches."""
    from helpers.core.predict import length_batches

    lens = [40, 60, 90, 120, 160, 200, 260, 320]
    prompts = [[0] * n for n in lens]
    assert len(length_batches(prompts, 8, 0, sz.CPU_PASS_TOKENS)) >= 3
    card(80)
    monkeypatch.setattr(sz, "_measured_pass_tokens", lambda model: 6000)
    sized = sz.sizing(FakeModel(), max(lens), 8)
    assert sized.pass_tokens == 6000
    assert len(length_batches(prompts, sized.batch_size, sized.max_tokens, sized.pass_tokens)) <= 2
