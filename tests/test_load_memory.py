"""Loading keeps the weights once in memory: the HookedTransformer's parameters are the converted tensors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import transformers as tr

    from helpers.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("local") / "small-gpt2"
    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=64, n_layer=2,
                                     n_head=4)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_parameters_are_the_transformers_weights_not_copies(folder):
    from helpers.models import load_model

    model, hf = load_model(str(folder), device="cpu", return_hf=True, verbose=False)
    wte = hf.transformer.wte.weight
    assert model.embed.W_E.untyped_storage().data_ptr() == wte.untyped_storage().data_ptr()
    assert model.blocks[0].mlp.W_in.untyped_storage().data_ptr() == \
        hf.transformer.h[0].mlp.c_fc.weight.untyped_storage().data_ptr()
    assert not any(p.is_meta for p in model.parameters()) and not any(b.is_meta for b in model.buffers())
    assert all(p.requires_grad for p in model.parameters())  # as a HookedTransformer built the usual way
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())


def test_missing_keys_get_transformer_lens_defaults(folder):
    """A converted state without some biases and norm weights: zeros and ones, as TransformerLens fills them."""
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM

    from helpers import models

    hf = AutoModelForCausalLM.from_pretrained(folder)
    cfg = models._local_tl_config(folder, models._local_config(folder), hf.config.to_dict(), False, "cpu",
                                  torch.float32)
    state = loading.get_pretrained_state_dict(str(folder), cfg, hf)
    del state["blocks.0.attn.b_Q"], state["blocks.1.ln2.w"]
    model = models._hooked_from_state(cfg, state, models.gpt2_tokenizer())
    assert torch.equal(model.blocks[0].attn.b_Q, torch.zeros_like(model.blocks[0].attn.b_Q))
    assert torch.equal(model.blocks[1].ln2.w, torch.ones_like(model.blocks[1].ln2.w))


@pytest.mark.slow
def test_peak_host_memory_of_a_load_is_about_the_weights():
    """An 82M-parameter GPT-2-shaped folder (330 MB in float32), as a local folder and as a cached hub model:
    the load's peak resident memory stays within 1.2 x the weights + 200 MB (benchmarks/bench_load_memory.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_load_memory

    rows = bench_load_memory.run(modes=("load_model", "hub"))
    for r in rows:
        assert r["ok"], r
