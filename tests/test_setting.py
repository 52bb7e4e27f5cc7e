"""Notebook 00 / 08 helpers: the by-hand checks pass on the reference and fail on wrong functions; the claims."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from helpers.core.tasks import get_task
from helpers.exercises.setting import check_label_logits, check_render_prompt
from helpers.experiments.setting import label_logits_reference
from helpers.protocols.setting import own_task_claims, setting_claims
from helpers.study.claims import VERDICTS
from helpers.study.stats import Interval


def logits_at_q(model, prompt, label_ids):
    return model(prompt.tokens[None])[0, prompt.q, label_ids]


def test_label_logits_check_passes_on_the_reference(capsys):
    check_label_logits(logits_at_q)
    check_label_logits(label_logits_reference)
    assert capsys.readouterr().out.count("✓") == 2


@pytest.mark.parametrize("wrong, says", [  # each typical wrong version, and the cause the check names
    (lambda m, p, ids: m(p.tokens[None])[0, p.q - 1, ids], "logits at position"),  # off by one
    (lambda m, p, ids: m(p.tokens[None])[0, p.q, list(ids)[::-1]], "another order"),  # class order
    (lambda m, p, ids: m(p.tokens[None])[0, p.q], "shape"),  # not restricted to the label words
    (lambda m, p, ids: m(p.tokens[None, 1:])[0, p.q - 1, ids], "first token is missing"),  # BOS dropped
    (lambda m, p, ids: m(p.tokens[None])[0, p.q].softmax(-1)[ids], "probabilities over the whole vocabulary"),
    (lambda m, p, ids: m(p.tokens[None])[0, p.q].log_softmax(-1)[ids], "log-probabilities"),
    (lambda m, p, ids: m(p.tokens[None])[0, p.q, ids].softmax(-1), "label columns only"),
])
def test_label_logits_check_names_the_mistake(wrong, says):
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match=says):
        check_label_logits(wrong)


def render(task, demos, query_text):
    before, between, lead, after = task.parts
    shown = [f"{before}{d.text}{between}{lead}{task.label_words[d.label]}{after}" for d in demos]
    return task.separator.join(shown + [f"{before}{query_text}{between}"])


def test_render_check_passes_on_the_reference(capsys):
    check_render_prompt(render)
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, says", [
    (lambda t, d, q: render(t, d, q) + " ", "extra whitespace"),  # the query keeps the label word's space
    (lambda t, d, q: "\n".join(render(t, d, q).split(t.separator)), "separator"),  # separator ignored
    (lambda t, d, q: render(t, d, q).replace(t.parts[3], "") if t.parts[3] else render(t, d, q)[:-1],
     "differs from build_prompt"),  # no 'after' (SST-2, the first case, has none: a generic pointer)
])
def test_render_check_names_the_mistake(wrong, says):
    from helpers.exercises.grading import CheckFailed

    with pytest.raises(CheckFailed, match=says):
        check_render_prompt(wrong)


def test_render_check_names_a_missing_end_of_template():
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.setting import _render_cases

    task = _render_cases()[2]  # "Text: {text} | Verdict: {label}." : "." after the label
    with pytest.raises(CheckFailed, match="after each demonstration's label"):
        check_render_prompt(lambda t, d, q: render(t, d, q).replace(t.parts[3], "") if t.name == task.name
                            else render(t, d, q))


def _frame(correct_by_seed, shots):
    return pd.DataFrame([{"task": "sst2", "seed": s, "shots": shots, "n": len(c), "dropped": 0,
                          "accuracy": sum(c) / len(c), "idx": list(range(len(c))), "correct": c}
                         for s, c in correct_by_seed.items()])


def test_setting_claims_judge_the_paired_difference():
    one = _frame({42: [1] * 20 + [0] * 4, 43: [1] * 22 + [0] * 2}, 1)
    five = _frame({42: [0] * 20 + [1] * 4, 43: [0] * 22 + [1] * 2}, 5)
    c = {x.key: x for x in setting_claims(one, five)}
    assert c["00.more_demos_no_help"].verdict == "replicates" and c["00.more_demos_no_help"].ours.high < 0
    assert c["00.vanilla_1shot"].verdict == "not comparable" and c["00.vanilla_1shot"].ours.estimate > 80
    c = {x.key: x for x in setting_claims(five, one)}
    assert c["00.more_demos_no_help"].verdict == "does not replicate"
    assert "GPT2-XL" in c["00.more_demos_no_help"].paper


def test_own_task_claims_keep_the_experiments_verdicts():
    task = get_task("sst2")
    iv = Interval(0.62, 0.55, 0.70, 3, 96)
    sal = {("sst2", "shallow", "S_wp - S_pq"): Interval(0.3, 0.1, 0.5, 3, 12)}
    iso = {("label", "first", "label_loyal"): iv}
    claims = own_task_claims(task, iv, ("partly", sal), ("replicates", iso), ("undefined", {"peak": None}), k=5)
    v = {c.key: c.verdict for c in claims}
    assert v == {"08.accuracy_above_chance": "replicates", "08.saliency_two_stages": "partly",
                 "08.isolation_first_hurts": "replicates", "08.aucroc_deep": "inconclusive"}
    assert all(c.verdict in VERDICTS for c in claims) and claims[0].ours.estimate == pytest.approx(0.62)
    assert "one class" in claims[3].note
    assert claims[1].ours.estimate == 0.3 and claims[2].ours is iv and claims[3].ours is None
    low = own_task_claims(task, Interval(0.3, 0.2, 0.4, 3, 96), ("partly", {}), ("partly", iso), ("partly", {}), 5)
    assert low[0].verdict == "does not replicate"


def test_reference_is_the_batched_prediction():
    from helpers.core.predict import predict
    from helpers.core.prompts import Demo, build_prompt
    from helpers.core.tasks import label_token_ids
    from helpers.exercises.tiny import make_tiny_model

    m = make_tiny_model("rotary", seed=1)
    ids = label_token_ids(m.tokenizer, "sst2")
    ps = [build_prompt(m, "sst2", [Demo("good", 1), Demo("bad", 0)], Demo(t, 0)) for t in ("meh", "awful stuff")]
    batched = predict(m, ps, ids, top_k=0).label_logits
    torch.testing.assert_close(label_logits_reference(m, ps[1], ids), batched[1], atol=1e-4, rtol=1e-4)
