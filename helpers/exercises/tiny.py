"""The tiny random models the exercises' checks (and the tests) run on, and their prompts.

Three architectures, so a reader's function is checked on each way a model can place and share its attention:
``"gpt2"`` (learned positions, LayerNorm, no BOS), ``"rotary"`` (rotary, RMSNorm, gated MLP, BOS) and ``"gqa"``
(rotary with grouped-query attention: 2 key/value heads for 4 query heads). Every one has the real GPT-2
tokenizer, so the prompts are the experiments' own.

- :data:`TINY_KINDS`, :func:`make_tiny_model`: the one definition of the kinds and of the builder;
  :func:`tiny_model`: the model of a kind with the default sizes and seed 0, built once per session.
- :func:`tiny_sst2_cases`: one SST-2 prompt on each kind; :func:`tiny_check_sets`: foo/bar prompt sets
  (paper B's setting, :mod:`helpers.core.unrelated`) on each kind.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from helpers.core.backend import backend, bridge_from_hf
from helpers.core.hub import hub_offline
from helpers.core.model_loading import quiet_loading
from helpers.core.offline_models import gpt2_tokenizer
from helpers.core.tl_patches import fast_attention, matmul_layout

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

    from helpers.core.prompts import Demo, PromptSet
    from helpers.core.unrelated import UnrelatedTask

__all__ = ["TINY_KINDS", "make_tiny_model", "tiny_model", "tiny_sst2_cases", "tiny_check_sets"]

TINY_KINDS = ("gpt2", "rotary", "gqa")


def make_tiny_model(kind: str = "gpt2", seed: int = 0, n_layers: int = 3, n_heads: int = 4, d_head: int = 8):
    """A tiny random HookedTransformer with the real GPT-2 tokenizer, for the exercises' checks and the tests.

    kind: ``"gpt2"`` (learned positions, LayerNorm, no BOS), ``"rotary"``
    (rotary, RMSNorm, gated MLP, BOS) or ``"gqa"`` (rotary + grouped-query
    attention with 2 key/value heads, BOS).
    """
    if kind not in TINY_KINDS:
        raise ValueError(f"kind must be one of {TINY_KINDS}, got {kind!r}")
    if backend() == "bridge":
        return _tiny_bridge(kind, seed, n_layers, n_heads, d_head)
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    common = dict(
        n_layers=n_layers, d_model=n_heads * d_head, d_head=d_head, n_heads=n_heads, n_ctx=512,
        d_vocab=50257, act_fn="gelu", seed=seed, dtype=torch.float32, device="cpu",
        init_weights=True, initializer_range=0.2,
    )
    if kind == "gpt2":
        cfg = HookedTransformerConfig(**common, d_mlp=4 * n_heads * d_head, normalization_type="LN",
                                      positional_embedding_type="standard", default_prepend_bos=False)
    else:
        cfg = HookedTransformerConfig(
            **common, d_mlp=2 * n_heads * d_head, normalization_type="RMS", positional_embedding_type="rotary",
            rotary_dim=d_head, gated_mlp=True, final_rms=True, default_prepend_bos=True,
            n_key_value_heads=2 if kind == "gqa" else None,
        )
    with quiet_loading():
        model = HookedTransformer(cfg, tokenizer=gpt2_tokenizer(), default_padding_side="right")
    model.cfg.default_prepend_bos = cfg.default_prepend_bos
    model.cfg.icl_model_name = f"tiny-{kind}"
    model.eval()
    matmul_layout(model)
    fast_attention(model)
    return model


def _tiny_bridge(kind: str, seed: int, n_layers: int, n_heads: int, d_head: int):
    """The same three kinds as transformers models of the same sizes, in a TransformerLens 4 bridge (random
    weights drawn by transformers from ``seed``, so not the HookedTransformer's)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tok = gpt2_tokenizer()
    d = n_heads * d_head
    torch.manual_seed(seed)
    if kind == "gpt2":
        hf = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=512, n_embd=d, n_layer=n_layers, n_head=n_heads,
                                        activation_function="gelu", initializer_range=0.2))
    else:
        hf = LlamaForCausalLM(LlamaConfig(
            vocab_size=50257, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=n_layers,
            num_attention_heads=n_heads, num_key_value_heads=2 if kind == "gqa" else n_heads, hidden_act="gelu",
            max_position_embeddings=512, initializer_range=0.2, bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id))
    hf.eval()
    with hub_offline():
        model = bridge_from_hf(hf, tok, f"tiny-{kind}")
    model.cfg.default_prepend_bos = kind != "gpt2"
    model.cfg.icl_model_name = f"tiny-{kind}"
    return model


@functools.cache
def tiny_model(kind: str) -> HookedTransformer:
    """``make_tiny_model(kind, seed=0)``, built once and shared by the checks that run on it."""
    return make_tiny_model(kind, seed=0)


def tiny_sst2_cases(demos: Sequence[Demo], query: str | Demo, kinds: Sequence[str] = TINY_KINDS):
    """``(kind, model, prompt, label ids)``: one SST-2 prompt of ``demos`` and ``query`` on a tiny random model
    of each architecture (a fresh :func:`make_tiny_model` of each kind, seed 0), for the checks that compare a
    reader's by-hand function with the reference."""
    from helpers.core.prompts import build_prompt
    from helpers.core.tasks import label_token_ids

    for kind in kinds:
        model = make_tiny_model(kind, seed=0)
        yield kind, model, build_prompt(model, "sst2", demos, query), label_token_ids(model.tokenizer, "sst2")


@functools.lru_cache(maxsize=1)
def _foobar_sst2_slice() -> UnrelatedTask:
    from helpers.core.unrelated import UnrelatedTask, unrelated_task

    full = unrelated_task("sst2", (0, 1), ("foo", "bar"))
    return UnrelatedTask(full.task, full.train.select(range(200)), full.test.select(range(40)), "sst2", (0, 1))


def tiny_check_sets(n: int = 2, k_per_class: int = 1, seed: int = 0) -> list[tuple[str, HookedTransformer, PromptSet]]:
    """``(kind, model, prompt set)`` for the three tiny random architectures (:func:`tiny_model`), each with ``n``
    SST-2 foo/bar prompts of ``k_per_class`` demonstrations per class (:func:`helpers.core.unrelated.make_set`):
    what paper B's ``check_*`` functions run a reader's code on."""
    from helpers.core.unrelated import make_set

    ut = _foobar_sst2_slice()
    return [(kind, tiny_model(kind), make_set(tiny_model(kind), ut, seed, n, k_per_class)) for kind in TINY_KINDS]
