"""On a CUDA GPU: the same results as on the CPU, the prefix engine, bfloat16, loading and timing.

Every test here needs CUDA and is skipped without it (pytest lists them as skipped). Tiny random models and a
small model saved to a temporary folder: nothing is downloaded.
"""

from __future__ import annotations

import copy

import pytest
import torch

from helpers.core.predict import predict
from helpers.core.prefix import predict_shared
from helpers.core.prompts import make_icl_set

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")]


def _on_cuda(model, dtype=None):
    m = copy.deepcopy(model).to("cuda")
    if dtype is not None:
        m = m.to(dtype)
    assert str(m.cfg.device).startswith("cuda") and next(m.parameters()).is_cuda
    return m


def _close(a, b, tol=1e-4):
    torch.testing.assert_close(a.label_logits.float().cpu(), b.label_logits.float().cpu(), atol=tol, rtol=tol)


@pytest.mark.parametrize("kind", ["gpt2", "rotary", "gqa"])
def test_predict_on_cuda_equals_cpu(tiny_models, kind):
    cpu = tiny_models[kind]
    s = make_icl_set(cpu, "sst2", seed=42, n_test=6)
    a = predict(cpu, s.prompts, s.label_ids, batch_size=4)
    b = predict(_on_cuda(cpu), s.prompts, s.label_ids, batch_size=4)
    _close(a, b)
    assert torch.equal(a.pred.cpu(), b.pred.cpu())


@pytest.mark.parametrize("kind", ["gpt2", "rotary", "gqa"])
def test_prefix_cache_on_cuda_equals_full_prompts(tiny_models, kind):
    model = _on_cuda(tiny_models[kind])
    s = make_icl_set(model, "sst2", seed=42, n_test=6)
    full = predict(model, s.prompts, s.label_ids, batch_size=4)
    shared = predict_shared(model, s.prompts, s.label_ids, batch_size=4)
    _close(full, shared)
    assert torch.equal(full.pred.cpu(), shared.pred.cpu())


def test_bfloat16_on_cuda_within_tolerance(tiny_models):
    cpu = tiny_models["gqa"]
    s = make_icl_set(cpu, "sst2", seed=42, n_test=6)
    ref = predict(cpu, s.prompts, s.label_ids, batch_size=4)
    bf = predict(_on_cuda(cpu, torch.bfloat16), s.prompts, s.label_ids, batch_size=4)
    scale = ref.label_logits.abs().max().item()
    assert (bf.label_logits.float().cpu() - ref.label_logits).abs().max().item() <= 0.05 * scale


def test_local_folder_loads_onto_cuda_without_a_host_copy(tmp_path):
    """load_model(folder, device="cuda"): parameters and buffers on the GPU, same logits as on the CPU, and the
    host's resident set grows by far less than the weights."""
    import resource

    import transformers as tr

    from helpers.core.models import gpt2_tokenizer, load_model

    tok = gpt2_tokenizer()
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=512, n_layer=4,
                                     n_head=8)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cpu = load_model(str(tmp_path / "m"), device="cpu", verbose=False)
    weights = sum(p.numel() * p.element_size() for p in cpu.parameters())
    peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gpu = load_model(str(tmp_path / "m"), device="cuda", verbose=False)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak0
    assert all(p.is_cuda for p in gpu.parameters()) and all(b.is_cuda for b in gpu.buffers())
    ids = torch.tensor([tok("Review: fine\nSentiment:")["input_ids"]])
    with torch.inference_mode():
        torch.testing.assert_close(gpu(ids.cuda()).cpu(), cpu(ids), atol=1e-4, rtol=1e-4)
    assert grew < 0.5 * weights + 200 * 2**20, (grew, weights)


def test_timing_synchronises_on_cuda(tiny_models, monkeypatch):
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.compression import time_icl_vs_anchor

    model = _on_cuda(tiny_models["rotary"])
    s = make_icl_set(model, "sst2", seed=42, n_test=3)
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device) or real(device))
    r = time_icl_vs_anchor(model, s, n_inputs=3, repeats=2, warmup=1)
    assert calls and r["t_full"] > 0 and r["t_anchor"] > 0
