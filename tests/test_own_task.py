"""A user's own task: a template spec loaded from a file, its data checksums, its prompts, its cache identity."""

from __future__ import annotations

import json

import pytest

import prompt_golden


@pytest.fixture(scope="module")
def golden():
    return json.loads(prompt_golden.GOLDEN.read_text())


@pytest.mark.parametrize("tok_name", ["gpt2", "gemma", "smollm2"])
def test_shipped_tasks_render_the_recorded_prompts(golden, tok_name):
    """Text, tokens and every position of the four shipped tasks are byte-identical to the recorded ones."""
    toks = prompt_golden.tokenizers()
    if tok_name not in toks:
        pytest.skip(f"{tok_name} tokenizer not cached")
    now = prompt_golden.cases(toks[tok_name])
    assert sorted(now) == sorted(golden[tok_name])
    for key, rec in golden[tok_name].items():
        assert now[key] == rec, key
