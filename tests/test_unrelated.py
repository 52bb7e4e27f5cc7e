"""Tests of helpers.core.unrelated: paper B's tasks with unrelated label words, and their prompt sets."""

from __future__ import annotations

import pytest
from heads_common import _set

from helpers.core import unrelated as U
from helpers.experiments import head_biases as HB
from helpers.experiments import incontext_heads as IH
from helpers.experiments import two_towers as TT
from helpers.study.profile_table import PROFILES


@pytest.fixture(scope="module")
def ag():
    return U.unrelated_task("trec", (0, 1), ("foo", "bar"))


def test_unrelated_task_relabels_and_filters(ut, ag):
    from helpers.core.tasks import load_split

    assert ut.task.label_words == ("foo", "bar")
    assert ut.task.input_prefix == "" and ut.task.label_prefix == " :"
    assert set(ut.train["label"]) == {0, 1}
    # a multi-class source (TREC Abbreviation/Entity): exactly the rows of classes 0 and 1, relabelled
    src = load_split("trec", "test")
    assert len(ag.test) == sum(1 for lbl in src["label"] if lbl in (0, 1))
    assert set(ag.test["label"]) == {0, 1}
    real = U.unrelated_task("agnews", (1, 3), None, paper_shape=False)
    assert real.task.label_words == ("Sports", "Technology") and real.task.input_prefix == "Article: "
    with pytest.raises(ValueError, match="two distinct"):
        U.unrelated_task("sst2", (0, 0))


def test_prompt_shape_and_positions(tiny_model, ut):
    ps = _set(tiny_model, ut, n=2, k=2)
    p = ps.prompts[0]
    assert " : foo" in p.text or " : bar" in p.text
    assert p.text.endswith(" :")
    assert [p.tokens[i].item() for i in p.label_pos] == [ps.label_ids[c] for c in p.label_class]


def test_sizes_of_notebook_07():
    """Each experiment's sizes add its own keys to the shared evaluation sizes; together they are notebook 07's."""
    want = {
        "smoke": {"n_attr": 6, "n_eval": 8, "n_towers": 8, "seeds": (42,), "k_per_class": 2, "bias_tasks": ("sst2",)},
        "default": {"n_attr": 16, "n_eval": 64, "n_towers": 32, "seeds": PROFILES["default"].seeds, "k_per_class": 2,
                    "bias_tasks": ("sst2",)},
        "paper": {"n_attr": 64, "n_eval": 1000, "n_towers": 200, "seeds": PROFILES["paper"].seeds, "k_per_class": 2,
                  "bias_tasks": ("sst2", "agnews")},
    }
    for name, sizes in want.items():
        profile = PROFILES[name]
        parts = [IH.incontext_heads_sizes(profile), TT.two_towers_sizes(profile), HB.head_biases_sizes(profile)]
        assert {k: v for part in parts for k, v in part.items()} == sizes
        assert all({k: part[k] for k in U.eval_sizes(profile)} == U.eval_sizes(profile) for part in parts)
