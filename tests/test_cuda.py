"""On a CUDA GPU: the same results as on the CPU (predictions, the prefix engine, the exercise solutions), bfloat16, loading and timing.

Every test here needs CUDA and is skipped without it (pytest lists them as skipped). Tiny random models and a
small model saved to a temporary folder: nothing is downloaded.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from helpers.core.predict import predict
from helpers.core.prefix_runs import predict_shared
from helpers.core.prompts import make_icl_set
from helpers.exercises.tiny import TINY_KINDS

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


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_predict_on_cuda_equals_cpu(tiny_models, kind):
    cpu = tiny_models[kind]
    s = make_icl_set(cpu, "sst2", seed=42, n_test=6)
    a = predict(cpu, s.prompts, s.label_ids, batch_size=4)
    b = predict(_on_cuda(cpu), s.prompts, s.label_ids, batch_size=4)
    _close(a, b)
    assert torch.equal(a.pred.cpu(), b.pred.cpu())


@pytest.mark.parametrize("kind", TINY_KINDS)
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

    from helpers.core.models import load_model
    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=512, n_layer=4,
                                     n_head=8)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cpu = load_model(str(tmp_path / "m"), device="cpu", verbose=False)
    weights = sum(p.numel() * p.element_size() for p in cpu.parameters())
    # start CUDA first (its context and libraries take hundreds of MB of host memory once per process), so the
    # measurement holds whether or not earlier tests in the file started it: run alone, it measures the load only
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
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
    from helpers.protocols.compression import time_icl_vs_anchor

    model = _on_cuda(tiny_models["rotary"])
    s = make_icl_set(model, "sst2", seed=42, n_test=3)
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device) or real(device))
    r = time_icl_vs_anchor(model, s, n_inputs=3, repeats=2, warmup=1)
    assert calls and r["t_full"] > 0 and r["t_anchor"] > 0


@functools.cache
def _notebook_solutions(stem: str) -> dict:
    """The namespace of notebook ``stem``'s solution cells, run in order after the imports of its other cells."""
    import ast
    from pathlib import Path

    import jupytext

    nb = jupytext.read(Path(__file__).resolve().parents[1] / "notebooks" / f"{stem}.py")
    ns: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse("\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        if "solution" not in cell.metadata.get("tags", []):
            tree = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], [])
        exec(compile(tree, stem, "exec"), ns)  # noqa: S102 - the project's own notebooks
    return ns


def _cpu_beta(model, prompt):
    """A re-weighting beta ``[layer, head, demo]`` made on the CPU, as notebook 04's by-hand cell makes it."""
    L, H, n = model.cfg.n_layers, model.cfg.n_heads, prompt.n_demos
    return torch.linspace(-1.0, 1.0, L * H * n).reshape(L, H, n)


def _solution_cases(model, s):
    """(notebook, function, arguments) for every exercise solution that runs the model, on ``s``'s first prompt;
    tensors the learner would build (beta) are on the CPU, as in the notebooks' by-hand cells."""
    from helpers.experiments.compression import anchor_keep

    p, lids, L = s.prompts[0], s.label_ids, model.cfg.n_layers
    return [("00_icl_setting", "label_logits", (p, lids)),
            ("01_saliency_flow", "attention_patterns", (p.tokens,)),
            ("01_saliency_flow", "pattern_saliency", (p, lids)),
            ("02_shallow_isolation", "isolated_label_logits", (p, lids, [0, L - 1])),
            ("03_deep_aucroc", "label_attention_at_q", (p, len(lids))),
            ("04_anchor_reweighting", "reweighted_label_logits", (p, _cpu_beta(model, p), lids)),
            ("05_context_compression", "hidden_anchor_logits", (p, anchor_keep(p), lids)),
            ("06_error_diagnosis", "anchor_key_projections", (p, L - 1, len(lids))),
            ("07_incontext_heads", "head_ablation_drop", (p.tokens, L - 1, 0, lids))]


@pytest.mark.parametrize("kind", ["gpt2", "gqa"])
def test_notebook_solutions_on_cuda_equal_the_cpu(tiny_models, kind):
    """Every exercise solution of notebooks 00-07 runs with the model on the GPU (tensors it builds itself, and a
    beta made on the CPU, meet the model's) and gives the CPU's result; so do the helpers the by-hand cells
    compare them with (re-weighting with a CPU beta)."""
    from helpers.experiments.reweighting import reweighted_label_logits_reference

    cpu = tiny_models[kind]
    gpu = _on_cuda(cpu)
    s = make_icl_set(cpu, "sst2", seed=42, n_test=1)
    for stem, name, args in _solution_cases(cpu, s):
        fn = _notebook_solutions(stem)[name]
        want = fn(cpu, *args)
        got = fn(gpu, *args)
        want, got = (x.detach().float().cpu() for x in (want, got))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    beta = _cpu_beta(cpu, s.prompts[0])
    torch.testing.assert_close(reweighted_label_logits_reference(gpu, s.prompts[0], beta, s.label_ids).float().cpu(),
                               reweighted_label_logits_reference(cpu, s.prompts[0], beta, s.label_ids).float().cpu(),
                               atol=1e-4, rtol=1e-4)


def test_mean_ablation_attribution_on_cuda_equals_cpu(tiny_models):
    """head_attribution(ablation="mean"): its fill (the mean head outputs) is gathered on the CPU and meets the
    model's z on the GPU."""
    from helpers.experiments.incontext_heads import head_attribution

    cpu = tiny_models["rotary"]
    s = make_icl_set(cpu, "sst2", seed=42, n_test=4)
    a = head_attribution(cpu, s.prompts, s.label_ids, batch_size=2, ablation="mean")
    b = head_attribution(_on_cuda(cpu), s.prompts, s.label_ids, batch_size=2, ablation="mean")
    for field in ("gain", "drop"):
        torch.testing.assert_close(getattr(b, field).float().cpu(), getattr(a, field).float().cpu(), atol=1e-4,
                                   rtol=1e-4)
