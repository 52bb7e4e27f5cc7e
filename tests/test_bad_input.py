"""Bad input gets a clear error that says what to do, never a silent NaN or a raw tensor-shape error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import predict
from helpers.core.prefix import predict_shared
from helpers.core.prompts import Demo, PromptError, build_prompt, make_icl_set
from helpers.core.tasks import label_token_ids
from helpers.experiments.aucroc import auc_roc, label_attention
from helpers.experiments.diagnosis import collect_qk
from helpers.experiments.saliency import relative_flow, saliency_flow, saliency_matrices

RUNS = {
    "predict": lambda m, ps, lids: predict(m, ps, lids),
    "predict_shared": lambda m, ps, lids: predict_shared(m, ps, lids),
    "label_attention": lambda m, ps, lids: label_attention(m, ps, lids),
    "collect_qk": lambda m, ps, lids: collect_qk(m, ps, lids),
    "saliency_flow": lambda m, ps, lids: saliency_flow(m, ps, lids),
    "saliency_matrices": lambda m, ps, lids: saliency_matrices(m, ps, lids),
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_empty_input_is_refused(tiny_model, run):
    lids = label_token_ids(tiny_model.tokenizer, "sst2")
    with pytest.raises(PromptError, match="no prompts"):
        RUNS[run](tiny_model, [], lids)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_prompt_longer_than_the_context_is_refused(tiny_model, run):
    lids = label_token_ids(tiny_model.tokenizer, "sst2")
    long = build_prompt(tiny_model, "sst2", [Demo("a fine film " * 40, d % 2) for d in range(6)], Demo("ok", 1))
    assert len(long) > tiny_model.cfg.n_ctx
    with pytest.raises(PromptError, match=rf"{len(long)} tokens.*n_ctx = {tiny_model.cfg.n_ctx}"):
        RUNS[run](tiny_model, [long], lids)


def test_prompt_set_with_every_prompt_dropped_says_so(tiny_model):
    with pytest.raises(PromptError, match="all 3 prompts are longer than 8 tokens"):
        make_icl_set(tiny_model, "sst2", seed=42, n_test=3, max_len=8)


def test_empty_scores_are_refused():
    with pytest.raises(ValueError, match="no inputs"):
        auc_roc(np.zeros((0, 2)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="at least one prompt"):
        relative_flow(torch.zeros(0, 3, 3))
