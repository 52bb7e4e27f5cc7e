"""Loading keeps the weights once in memory: the HookedTransformer's parameters are the converted tensors.

Peak host memory of a load is measured by ``benchmarks/bench_load_memory.py`` (a fresh process per load), not
here: a test process's peak resident memory already holds everything the session loaded before."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import transformers as tr

    from helpers.core.offline_models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("local") / "small-gpt2"
    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=64, n_layer=2,
                                     n_head=4)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_parameters_are_the_transformers_weights_not_copies(folder):
    from helpers.core.models import load_model

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

    from helpers.core import model_loading, models, offline_models

    hf = AutoModelForCausalLM.from_pretrained(folder)
    cfg = models._local_tl_config(folder, models.local_config(folder), hf.config.to_dict(), False, "cpu",
                                  torch.float32)
    state = loading.get_pretrained_state_dict(str(folder), cfg, hf)
    del state["blocks.0.attn.b_Q"], state["blocks.1.ln2.w"]
    model = model_loading.hooked_from_state(cfg, state, offline_models.gpt2_tokenizer())
    assert torch.equal(model.blocks[0].attn.b_Q, torch.zeros_like(model.blocks[0].attn.b_Q))
    assert torch.equal(model.blocks[1].ln2.w, torch.ones_like(model.blocks[1].ln2.w))
