"""Tests of helpers.core.unrelated: paper B's tasks with unrelated label words, and their prompt sets."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from heads_common import _set

from helpers.core import unrelated as U
from helpers.protocols import head_biases as HB
from helpers.protocols import incontext_heads as IH
from helpers.protocols import two_towers as TT
from helpers.protocols.evaluation import eval_sizes
from helpers.study.heads_report import notebook_sizes
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
    """Each experiment's sizes extend the shared evaluation sizes with its own fields; together they are notebook
    07's (:func:`helpers.study.heads_report.notebook_sizes`)."""
    want = {
        "smoke": {"n_attr": 6, "n_eval": 8, "n_towers": 8, "seeds": (42,), "k_per_class": 2, "batch_size": 16,
                  "bias_tasks": ("sst2",)},
        "default": {"n_attr": 16, "n_eval": 64, "n_towers": 32, "seeds": PROFILES["default"].seeds, "k_per_class": 2,
                    "batch_size": 16, "bias_tasks": ("sst2",)},
        "paper": {"n_attr": 64, "n_eval": 1000, "n_towers": 200, "seeds": PROFILES["paper"].seeds, "k_per_class": 2,
                  "batch_size": 16, "bias_tasks": ("sst2", "agnews")},
    }
    for name, sizes in want.items():
        profile = PROFILES[name]
        parts = [IH.incontext_heads_sizes(profile), TT.two_towers_sizes(profile), HB.head_biases_sizes(profile)]
        assert notebook_sizes(*parts) == sizes
        assert list(notebook_sizes(*parts)) == ["n_eval", "seeds", "k_per_class", "batch_size", "n_attr", "n_towers",
                                               "bias_tasks"]
        shared = asdict(eval_sizes(profile))
        assert all(isinstance(part, U.EvalSizes) and {k: asdict(part)[k] for k in shared} == shared for part in parts)


def test_eval_set_takes_the_whole_pool_without_a_pool_size_warning(ut):
    """n_eval above the test pool (the paper profile asks 1000 of SST-2's 872) uses the whole pool; the
    PoolSizeWarning sample_test gives is silenced there, and only there."""
    import warnings

    from helpers.core.prompts import PoolSizeWarning, sample_test
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2", seed=0)
    sizes = U.EvalSizes(n_eval=len(ut.test) + 5, seeds=(1,), k_per_class=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoolSizeWarning)
        ps = U.eval_set(model, ut, 1, sizes)
    assert len(ps.prompts) + ps.n_dropped == len(ut.test)
    with pytest.warns(PoolSizeWarning, match="more inputs than the test pool"):
        sample_test(ut.test, len(ut.test) + 5, 1)
    with pytest.raises(TypeError, match="EvalSizes that eval_sizes"):
        U.eval_set(model, ut, 1, {"n_eval": 3, "k_per_class": 1})
