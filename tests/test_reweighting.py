"""Anchor re-weighting: identity at beta=0, the hand-computed multiplier, gradients only on beta, training helps."""

from __future__ import annotations

import pytest
import torch

from helpers.core.predict import logits_at, predict
from helpers.core.prompts import Demo, build_prompt, class_draws, sample_demos
from helpers.core.tasks import label_token_ids, load_split
from helpers.experiments.reweighting import (
    reweight_factory,
    reweight_hooks,
    reweight_train_demos,
    train_reweighting,
    vanilla_5shot_demos,
)

DEMOS = [Demo("a truly great film", 1), Demo("dull and far too long", 0)]
TRAIN = [Demo("wonderful", 1), Demo("awful, simply awful", 0), Demo("I smiled all the way", 1), Demo("boring", 0)]


def prompts(model, rows=TRAIN):
    return [build_prompt(model, "sst2", DEMOS, d) for d in rows]


def test_beta_zero_is_identity(tiny_model):
    ps = prompts(tiny_model)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    beta = torch.zeros(tiny_model.cfg.n_layers, tiny_model.cfg.n_heads, 2)
    a = predict(tiny_model, ps, lid, batch_size=4)
    b = predict(tiny_model, ps, lid, batch_size=4, hooks=reweight_factory(beta))
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-5)


def test_multiplier_hand_computed(tiny_model):
    """The pattern at (q, p_i) is multiplied by exp(beta), every other entry unchanged, no renormalisation."""
    ps = prompts(tiny_model)[:2]  # different lengths -> padded batch
    L, H = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    beta = torch.randn(L, H, 2, generator=torch.Generator().manual_seed(0))
    from helpers.core.prompts import pad_batch

    tokens, q = pad_batch(ps, 0)
    name = "blocks.1.attn.hook_pattern"
    seen = {}
    hooks = reweight_hooks(beta, ps) + [(name, lambda x, hook: seen.setdefault("new", x.clone()))]
    with torch.inference_mode():
        logits_at(tiny_model, tokens, q, hooks)
    new = seen["new"]
    # layer 1's input differs after layer 0 was re-weighted, so compare the multiplier on the new run's own pattern
    with torch.inference_mode():
        seen2 = {}
        pre = reweight_hooks(beta, ps)[:1] + [(name, lambda x, hook: seen2.setdefault("old", x.clone()))]
        logits_at(tiny_model, tokens, q, pre)
    base = seen2["old"]
    expect = base.clone()
    for b, p in enumerate(ps):
        for i, pos in enumerate(p.label_pos):
            expect[b, :, p.q, pos] *= torch.exp(beta[1, :, i])
    torch.testing.assert_close(new, expect)
    rows = torch.arange(2)
    assert not torch.allclose(new[rows, :, q].sum(-1), torch.ones(2, H))  # not renormalised


def test_batched_equals_one_by_one(tiny_model):
    ps = prompts(tiny_model)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    cfg = tiny_model.cfg
    beta = 0.5 * torch.randn(cfg.n_layers, cfg.n_heads, 2, generator=torch.Generator().manual_seed(1))
    a = predict(tiny_model, ps, lid, batch_size=4, hooks=reweight_factory(beta))
    b = predict(tiny_model, ps, lid, batch_size=1, hooks=reweight_factory(beta))
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-5)
    c = predict(tiny_model, ps, lid, batch_size=1)
    assert not torch.allclose(a.label_logits, c.label_logits)


def test_only_beta_gets_gradient_and_flags_restored(tiny_model):
    ps = prompts(tiny_model)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    flags = [p.requires_grad for p in tiny_model.parameters()]
    for p in tiny_model.parameters():
        p.grad = None
    res = train_reweighting(tiny_model, ps, lid, epochs=1, lr=0.01, seed=0)
    assert all(p.grad is None for p in tiny_model.parameters())
    assert [p.requires_grad for p in tiny_model.parameters()] == flags
    assert res.beta.shape == (tiny_model.cfg.n_layers, tiny_model.cfg.n_heads, 2)
    assert res.beta.abs().sum() > 0 and len(res.losses) == len(ps)


def test_training_lowers_loss(tiny_model):
    ps = prompts(tiny_model)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    res = train_reweighting(tiny_model, ps, lid, epochs=15, lr=0.1, batch_size=4, seed=0)
    assert res.epoch_losses[-1] < res.epoch_losses[0] - 1e-3
    # same seed -> same beta
    res2 = train_reweighting(tiny_model, ps, lid, epochs=15, lr=0.1, batch_size=4, seed=0)
    torch.testing.assert_close(res.beta, res2.beta)


def test_training_data_disjoint_and_5shot():
    train = load_split("agnews", "train")
    demos, extra = reweight_train_demos(train, "agnews", seed=42, per_class=4)
    assert len(demos) == 4 and len(extra) == 16
    assert not {d.idx for d in demos} & {d.idx for d in extra}
    assert sorted(d.label for d in extra) == sorted([c for c in range(4) for _ in range(4)])
    draws = class_draws(train, "agnews", 5, 42)
    assert {d.idx for d in demos} | {d.idx for d in extra} == {i for per in draws for i in per}
    five = vanilla_5shot_demos(train, "agnews", 5, 42)
    assert sorted(d.idx for d in five) == sorted(d.idx for d in demos + extra)
    assert five == sample_demos(train, "agnews", 5, 42)  # notebook 00's 5-shot demonstrations, same order


def test_fast_training_equals_full_run(tiny_model):
    """The KV-cached single-token training step is the same function of beta as the full run."""
    ps = prompts(tiny_model)
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    a = train_reweighting(tiny_model, ps, lid, epochs=3, lr=0.05, seed=0, fast=True)
    b = train_reweighting(tiny_model, ps, lid, epochs=3, lr=0.05, seed=0, fast=False)
    torch.testing.assert_close(torch.tensor(a.losses), torch.tensor(b.losses), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.beta, b.beta, atol=1e-4, rtol=1e-3)


def test_table1_interval_verdict():
    from helpers.protocols.reweighting import table1_verdict
    from helpers.study.stats import Interval

    up, down, zero = Interval(5, 1, 9, 5, 320), Interval(-5, -9, -1, 5, 320), Interval(1, -2, 4, 5, 320)
    assert table1_verdict(up, up) == "replicates"
    assert table1_verdict(up, zero) == "partly"
    assert table1_verdict(up, down) == "partly"
    assert table1_verdict(zero, up) == "inconclusive"
    assert table1_verdict(down, up) == "does not replicate"


def test_run_table1_keeps_per_input_results(tiny_model):
    from helpers.experiments.reweighting import run_table1

    r = run_table1(tiny_model, "sst2", 42, n_test=6, epochs=1, per_class=2, eval_batch_size=4)
    assert len(r.correct_1shot) == len(r.correct_5shot) == len(r.correct_reweight) == len(r.idx) == r.n_test
    assert sum(r.correct_1shot) / r.n_test == pytest.approx(r.acc_1shot)
    assert sum(r.correct_5shot) / r.n_test == pytest.approx(r.acc_5shot)
    assert sum(r.correct_reweight) / r.n_test == pytest.approx(r.acc_reweight)


def _by_hand(model, prompt, beta, label_ids, renormalise=False, q_shift=0, layers=None, no_exp=False):
    """The notebook's by-hand re-weighting, with the mistakes a reader might make as options."""
    scale = beta if no_exp else torch.exp(beta)

    def reweight(pattern, hook):
        pattern[0, :, prompt.q + q_shift, prompt.label_pos] *= scale[hook.layer()]
        if renormalise:
            pattern[0, :, prompt.q + q_shift] /= pattern[0, :, prompt.q + q_shift].sum(-1, keepdim=True)
        return pattern

    layers = range(model.cfg.n_layers) if layers is None else layers
    with torch.inference_mode():
        logits = model.run_with_hooks(prompt.tokens[None],
                                      fwd_hooks=[(f"blocks.{layer}.attn.hook_pattern", reweight) for layer in layers])
    return logits[0, prompt.q, list(label_ids)]


def test_check_reweighted_label_logits_passes_the_reference_and_fails_wrong_functions(capsys):
    from helpers.exercises.reweighting import check_reweighted_label_logits

    check_reweighted_label_logits(_by_hand)
    assert "match the reference on 3 tiny models" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="does not renormalise"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, b, ids, renormalise=True))
    with pytest.raises(AssertionError, match="You renormalised the row"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, b, ids, renormalise=True))
    with pytest.raises(AssertionError, match="row before q"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, b, ids, q_shift=-1))  # the row before q
    with pytest.raises(AssertionError, match="Only the first layer"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, b, ids, layers=[0]))  # one layer only
    with pytest.raises(AssertionError, match="by beta itself"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, b, ids, no_exp=True))
    with pytest.raises(AssertionError, match="equals the run without re-weighting"):
        check_reweighted_label_logits(lambda m, p, b, ids: _by_hand(m, p, torch.zeros_like(b), ids))


def _edit(pattern, q, label_pos, beta_l, no_exp=False, renorm=False, row_shift=0, every_row=False, inplace=True):
    out = pattern if inplace else pattern.clone()
    f = beta_l if no_exp else torch.exp(beta_l)
    if every_row:
        out[0, :, :, label_pos] *= f[:, None, :]
    else:
        out[0, :, q + row_shift, label_pos] *= f
    if renorm:
        out[0, :, q] /= out[0, :, q].sum(-1, keepdim=True)
    return out


def test_check_reweight_pattern_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.reweighting import check_reweight_pattern

    check_reweight_pattern(_edit)
    check_reweight_pattern(lambda *a: _edit(*a, inplace=False))
    assert capsys.readouterr().out.count("✓") == 2
    for kw, says in ((dict(no_exp=True), "by beta itself"), (dict(renorm=True), "renormalised"),
                     (dict(row_shift=-1), "row before q"), (dict(every_row=True), "every row")):
        with pytest.raises(CheckFailed, match=says):
            check_reweight_pattern(lambda *a, kw=kw: _edit(*a, **kw))
    with pytest.raises(CheckFailed, match="Nothing changed"):
        check_reweight_pattern(lambda p, q, lp, b: p.clone())


def _fake_rows():
    from helpers.experiments.reweighting import ReweightResult, Table1Row

    res = ReweightResult(torch.zeros(1, 1, 2), [], [])
    rows = {}
    for t in ("sst2", "trec"):
        for s in (42, 43):
            one, five, rw = [1, 0, 0, 1, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 1, 1, 0]
            rows[t, s] = Table1Row(t, s, sum(one) / 8, sum(five) / 8, sum(rw) / 8, res, 8, 0, one, five, rw,
                                   list(range(8)))
    return rows


def test_table1_intervals_frame_and_claims():
    from helpers.protocols.reweighting import table1_claims, table1_frame, table1_intervals

    accuracy, gains = table1_intervals(_fake_rows())
    assert accuracy["vanilla 1-shot"]["Average"].estimate == pytest.approx(37.5)
    assert accuracy["anchor re-weighting"]["SST-2"].estimate == pytest.approx(75.0)
    assert gains["vanilla 1-shot"].estimate == pytest.approx(37.5)
    assert gains["vanilla 5-shot"].estimate == pytest.approx(62.5)
    frame = table1_frame(accuracy, "google/gemma-3-270m")
    assert frame.loc[("GPT2-XL (paper)", "anchor re-weighting"), "Average"] == "68.64"
    assert frame.loc[("GPT2-XL (paper)", "vanilla 1-shot"), "SST-2"] == "61.28"
    assert frame.loc[("gemma-3-270m (ours)", "vanilla 1-shot"), "Average"].startswith("37.5")
    claims = table1_claims(accuracy, gains, context="tiny")
    assert [c.key for c in claims] == ["04.gain_over_1shot", "04.gain_over_5shot", "04.accuracy_1shot",
                                       "04.accuracy_5shot", "04.accuracy_reweighting"]
    assert [c.verdict for c in claims[:2]] == ["replicates", "replicates"]
    assert {c.verdict for c in claims[2:]} == {"not comparable"}
    assert claims[0].paper.startswith("+16.74 points") and "replicates" in claims[0].note


def _three_seeds(model, per_class=2):
    from helpers.experiments.reweighting import table1_train_prompts

    return [table1_train_prompts(model, "sst2", seed, per_class) for seed in (42, 43, 44)]


def test_training_runs_together_equals_one_by_one(tiny_model):
    """train_reweighting_many (one forward and backward for every run's step) learns each run's own beta: the
    same betas and losses as separate train_reweighting runs."""
    from helpers.experiments.reweighting import train_reweighting_many

    sets, seeds = _three_seeds(tiny_model), [42, 43, 44]
    lid = label_token_ids(tiny_model.tokenizer, "sst2")
    alone = [train_reweighting(tiny_model, ps, lid, epochs=3, lr=0.05, seed=s) for ps, s in zip(sets, seeds)]
    flags = [p.requires_grad for p in tiny_model.parameters()]
    together = train_reweighting_many(tiny_model, sets, lid, seeds, epochs=3, lr=0.05)
    assert [p.requires_grad for p in tiny_model.parameters()] == flags  # frozen during training, then restored
    for a, b in zip(alone, together):
        torch.testing.assert_close(torch.tensor(a.losses), torch.tensor(b.losses), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.beta, b.beta, atol=1e-5, rtol=1e-4)
        assert a.epoch_losses == pytest.approx(b.epoch_losses, abs=1e-5) and a.demo_classes == b.demo_classes
    assert not torch.equal(together[0].beta, together[1].beta)  # each run its own beta


def test_training_runs_together_refuses_runs_that_differ():
    from helpers.exercises.tiny import make_tiny_model
    from helpers.experiments.reweighting import train_reweighting_many

    model = make_tiny_model("gpt2")
    sets = _three_seeds(model)
    lid = label_token_ids(model.tokenizer, "sst2")
    with pytest.raises(ValueError, match="as many training prompts"):
        train_reweighting_many(model, [sets[0], sets[1][:-1]], lid, [42, 43])
    with pytest.raises(ValueError, match="one seed per training set"):
        train_reweighting_many(model, sets, lid, [42])


def test_table1_runs_train_missing_seeds_together_and_store_each(tiny_model, tmp_path, monkeypatch):
    """table1_runs trains the seeds it has to compute in one lockstep run and stores each (task, seed): the rows
    equal run_table1's one by one, and a second call reads all of them back."""
    from helpers.core import accounting
    from helpers.experiments.reweighting import run_table1
    from helpers.protocols.reweighting import ReweightingSizes, table1_runs

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sizes = ReweightingSizes(seeds=(42, 43), n_test=6, epochs=2, per_class=2, batch_size=4)
    with accounting.recording() as led:
        rows = table1_runs(tiny_model, ["sst2"], sizes)
    assert led.entries["reweight_train"].computed == 1 and led.entries["reweight_table1"].computed == 2
    for seed in (42, 43):
        one = run_table1(tiny_model, "sst2", seed, n_test=6, epochs=2, per_class=2, eval_batch_size=4)
        torch.testing.assert_close(rows["sst2", seed].result.beta, one.result.beta, atol=1e-5, rtol=1e-4)
        assert rows["sst2", seed].correct_reweight == one.correct_reweight
    with accounting.recording() as led:
        table1_runs(tiny_model, ["sst2"], sizes)
    assert "reweight_train" not in led.entries and led.entries["reweight_table1"].hits == 2
