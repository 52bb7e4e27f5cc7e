"""Saliency (§2.1): batched == one-by-one, finite-difference check, hand-computed S_* means, intervals and verdict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import logits_at
from helpers.core.prompts import Prompt
from helpers.experiments.saliency import (
    first_layer_pq_exceeds_wp,
    flow_masks,
    flow_scores,
    relative_flow,
    saliency_batch,
    saliency_flow,
    saliency_matrices,
    saliency_prompts,
)


def test_batched_equals_one_by_one(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    assert len({len(p) for p in prompts}) > 1  # real padding happens
    batched = saliency_matrices(model, prompts, lids, batch_size=4)
    for p, m in zip(prompts, batched):
        one = saliency_batch(model, [p], lids)[0]
        assert m.shape == (model.cfg.n_layers, len(p), len(p))
        torch.testing.assert_close(m, one, atol=1e-5, rtol=1e-4)
    flows_b = saliency_flow(model, prompts, lids, batch_size=4)
    flows_1 = saliency_flow(model, prompts, lids, batch_size=1)
    torch.testing.assert_close(flows_b, flows_1, atol=1e-6, rtol=1e-4)


def test_padding_zero_and_no_param_grads(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    sal = saliency_batch(model, prompts, lids)
    for b, p in enumerate(prompts):
        assert sal[b, :, len(p):, :].abs().sum() == 0 and sal[b, :, :, len(p):].abs().sum() == 0
        # causal: nothing above the diagonal
        assert torch.triu(sal[b], diagonal=1).abs().sum() == 0
    assert all(p.grad is None for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())  # restored


def test_last_layer_only_row_q(tiny_sst2_set):
    """In the last layer only row q reaches the loss: every other row of I is 0, so S_wp is 0 and S_pq is not."""
    model, prompts, lids = tiny_sst2_set
    sal = saliency_batch(model, prompts, lids)
    for b, p in enumerate(prompts):
        assert sal[b, -1, : p.q].abs().sum() == 0 and sal[b, -1, p.q].abs().sum() > 0
    flows = saliency_flow(model, prompts, lids)
    assert torch.all(flows[:, -1, 0] == 0) and torch.all(flows[:, -1, 1] > 0)


def _loss(model, prompt, lids, hooks=()):
    logits = logits_at(model, prompt.tokens[None], torch.tensor([prompt.q]), hooks)[:, lids]
    return torch.nn.functional.cross_entropy(logits.double(), torch.tensor([prompt.gold]))


def test_finite_difference(tiny_sst2_set):
    """|sum_h A*dL/dA| at (i, j) equals |dL/d eps| when A[:, :, i, j] is scaled by (1 + eps) in all heads."""
    model, prompts, lids = tiny_sst2_set
    p = prompts[0]
    sal = saliency_batch(model, [p], lids)[0]
    checked = 0
    for layer in range(model.cfg.n_layers):
        # the largest entry of the layer and the q -> p_0 entry
        flat = int(sal[layer].argmax())
        for i, j in [(flat // len(p), flat % len(p)), (p.q, p.label_pos[0])]:
            eps = 1e-2

            def scaled(e):
                def fn(pattern, hook):
                    pattern = pattern.clone()
                    pattern[:, :, i, j] *= 1 + e
                    return pattern
                return [(f"blocks.{layer}.attn.hook_pattern", fn)]

            with torch.no_grad():
                fd = (_loss(model, p, lids, scaled(eps)) - _loss(model, p, lids, scaled(-eps))) / (2 * eps)
            if sal[layer, i, j] > 1e-4:
                assert abs(abs(float(fd)) - float(sal[layer, i, j])) <= 2e-3 * max(1.0, float(sal[layer, i, j])) + 2e-4
                checked += 1
    assert checked >= model.cfg.n_layers


def _fake_prompt(n=6, label_pos=(2, 4)):
    return Prompt(tokens=torch.arange(n), text="", label_pos=list(label_pos), label_class=[0, 1],
                  label_spans=[(a, a + 1) for a in label_pos], format_pos=[], text_spans=[], query_span=(n - 1, n - 1),
                  q=n - 1, bos=False, gold=0)


def test_flow_scores_hand_computed():
    p = _fake_prompt()
    I = torch.arange(36, dtype=torch.float32).reshape(6, 6)  # I[i, j] = 6 i + j
    sal = torch.stack([I, 2 * I])[None]  # [1, 2 layers, 6, 6]
    wp = [(2, 0), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)]
    pq = [(5, 2), (5, 4)]
    ww = [(i, j) for i in range(6) for j in range(i) if (i, j) not in wp + pq]
    mean = lambda pairs: sum(6 * i + j for i, j in pairs) / len(pairs)  # noqa: E731
    want = torch.tensor([mean(wp), mean(pq), mean(ww)])
    got = flow_scores(sal, [p])[0]
    torch.testing.assert_close(got[0], want)
    torch.testing.assert_close(got[1], 2 * want)
    # padding to a longer batch changes nothing
    pad = torch.zeros(1, 2, 9, 9)
    pad[:, :, :6, :6] = sal
    torch.testing.assert_close(flow_scores(pad, [p])[0], got)
    m = flow_masks(p)
    assert m.sum(dim=(1, 2)).tolist() == [6, 2, 7] and not (m[0] & m[2]).any()
    rel = relative_flow(flow_scores(sal, [p]))
    torch.testing.assert_close(rel.sum(-1), torch.ones(2))


def test_first_layer_pq_exceeds_wp():
    rel = torch.tensor([[0.7, 0.1, 0.2], [0.4, 0.5, 0.1], [0.1, 0.8, 0.1]])
    assert first_layer_pq_exceeds_wp(rel) == 1
    assert first_layer_pq_exceeds_wp(rel[:1]) is None


def test_saliency_prompts_fresh_demos_and_reproducible(tiny_model):
    a, lids = saliency_prompts(tiny_model, "sst2", seed=42, n=3)
    b, _ = saliency_prompts(tiny_model, "sst2", seed=42, n=3)
    assert [p.text for p in a] == [p.text for p in b]
    demo_texts = [p.text.rsplit("Review:", 1)[0] for p in a]
    assert len(set(demo_texts)) == 3  # fresh demonstrations per input
    assert all(p.gold is not None for p in a)


@pytest.mark.slow
def test_gemma_batched_equals_one_by_one(gemma):
    prompts, lids = saliency_prompts(gemma, "sst2", seed=42, n=2)
    both = saliency_flow(gemma, prompts, lids, batch_size=2)
    ones = saliency_flow(gemma, prompts, lids, batch_size=1)
    torch.testing.assert_close(both, ones, atol=1e-6, rtol=2e-3)


def test_memory_cap_splits_batches_without_changing_results(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    capped = saliency_flow(model, prompts, lids, batch_size=4, max_pattern_mb=1e-6)  # forces one prompt per batch
    torch.testing.assert_close(capped, saliency_flow(model, prompts, lids, batch_size=4), atol=1e-6, rtol=1e-4)


# --- 95% intervals and the interval verdict -------------------------------------------------------------------

# raw flows of one input, per layer (S_wp, S_pq, S_ww): relative sizes [.6 .2 .2], [.25 .5 .25], [.2 .6 .2]
_RAW = [[3.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 3.0, 1.0]]


def test_layer_ranges():
    from helpers.experiments.saliency import layer_ranges

    assert layer_ranges(18) == {"shallow": slice(0, 6), "deep": slice(9, 18), "all": slice(0, 18)}
    assert layer_ranges(2) == {"shallow": slice(0, 1), "deep": slice(1, 2), "all": slice(0, 2)}
    with pytest.raises(ValueError):
        layer_ranges(0)


def test_flow_statistics_hand_computed():
    from helpers.protocols.saliency import CROSSING, flow_statistics

    rel = relative_flow(torch.tensor([_RAW]))
    st = flow_statistics(rel)
    assert st[("curve", 1, "S_pq")] == pytest.approx(0.5)
    # 3 layers: shallow = layer 0, deep = layers 1-2
    assert st[("shallow", "S_wp - S_pq")] == pytest.approx(0.4) and st[("shallow", "S_wp - S_ww")] == pytest.approx(0.4)
    assert st[("deep", "S_pq")] == pytest.approx(0.55) and st[("deep", "S_wp")] == pytest.approx(0.225)
    assert st[("deep", "S_pq - S_wp")] == pytest.approx(0.325) and st[("deep", "S_pq - S_ww")] == pytest.approx(0.325)
    assert st[("all", "S_wp - S_ww")] == pytest.approx(0.35 - 0.65 / 3)
    assert st[("all", "S_pq - S_ww")] == pytest.approx(1.3 / 3 - 0.65 / 3)
    assert st[(CROSSING,)] == 1
    assert np.isnan(flow_statistics(torch.tensor([[0.6, 0.2, 0.2]]))[(CROSSING,)])  # never crosses
    with pytest.raises(ValueError):
        flow_statistics(torch.zeros(3, 2))


def test_flow_intervals_identical_inputs_give_points_and_the_verdict_agrees():
    from helpers.protocols.saliency import MEAN_OVER_TASKS, flow_intervals, saliency_verdict

    runs = {(t, s): torch.tensor([_RAW] * 4) for t in ("a", "b") for s in (1, 2)}
    ivs = flow_intervals(runs, n_boot=50)
    for key in [("a", "shallow", "S_wp - S_pq"), ("b", "deep", "S_pq - S_wp"), (MEAN_OVER_TASKS, "all", "S_pq - S_ww")]:
        iv = ivs[key]
        assert iv.low == pytest.approx(iv.estimate) and iv.high == pytest.approx(iv.estimate)
        assert (iv.n_seeds, iv.n_inputs) == (2, 16 if key[0] == MEAN_OVER_TASKS else 8)  # a task's own inputs
    assert ivs[("a", "shallow", "S_wp - S_pq")].estimate == pytest.approx(0.4)
    assert ivs[("a", "curve", 2, "S_pq")].estimate == pytest.approx(0.6)
    assert saliency_verdict(ivs, ["a", "b"])[0] == "replicates"
    # the layers reversed: S_pq dominates early, S_wp late -> the shallow and deep checks fail on their intervals
    back = {k: v.flip(1) for k, v in runs.items()}
    verdict, checks = saliency_verdict(flow_intervals(back, n_boot=50), ["a", "b"])
    assert checks[("a", "shallow: S_wp dominant")] == checks[("a", "deep: S_pq dominant")] == "fails"
    assert verdict == "does not replicate"


def test_flow_intervals_estimate_is_the_plotted_curve():
    """A seed's curve is a ratio of means over inputs (relative_flow), then the seeds are averaged."""
    from helpers.protocols.saliency import flow_intervals

    a = [[1.0, 0.0, 1.0]]  # relative [.5, 0, .5]
    b = [[3.0, 2.0, 3.0]]  # relative [.375, .25, .375]; their mean flows [2, 1, 2] -> [.4, .2, .4]
    runs = {("t", 1): torch.tensor([a, b]), ("t", 2): torch.tensor([[[1.0, 1.0, 2.0]]])}  # seed 2: [.25 .25 .5]
    ivs = flow_intervals(runs, n_boot=200)
    assert ivs[("t", "curve", 0, "S_wp")].estimate == pytest.approx((0.4 + 0.25) / 2)
    assert ivs[("t", "curve", 0, "S_pq")].estimate == pytest.approx((0.2 + 0.25) / 2)
    iv = ivs[("t", "curve", 0, "S_wp")]
    assert iv.low < iv.estimate < iv.high  # seeds and inputs differ: a real interval
    assert flow_intervals(runs, n_boot=200) == ivs  # deterministic


@pytest.mark.parametrize("bad", [
    {},
    {("t", 1): torch.zeros(0, 3, 3)},  # no inputs
    {("t", 1): torch.ones(2, 3, 2)},  # two flows, not three
    {("t", 1): torch.ones(2, 3)},  # not per input
    {("t", 1): torch.ones(2, 3, 3), ("t", 2): torch.ones(2, 4, 3)},  # two models' layer counts
    {("t", 1): torch.ones(2, 3, 3), ("u", 2): torch.ones(2, 3, 3)},  # a task without a seed
    {1: torch.ones(2, 3, 3)},  # key is not (task, seed)
])
def test_flow_intervals_refuses_bad_input(bad):
    from helpers.protocols.saliency import flow_intervals

    with pytest.raises(ValueError):
        flow_intervals(bad, n_boot=10)


def _contrasts(tasks, by_check):
    """Intervals for every contrast: ``by_check[check]`` is (low, high) or a list of one (low, high) per contrast."""
    from helpers.experiments.saliency import contrast_name
    from helpers.protocols.saliency import FLOW_CHECKS
    from helpers.study.stats import Interval

    out = {}
    for t in tasks:
        for check, contrasts in FLOW_CHECKS.items():
            spec = by_check[t][check] if isinstance(by_check.get(t), dict) else by_check[check]
            spec = spec if isinstance(spec, list) else [spec] * len(contrasts)
            for (r, a, b), (lo, hi) in zip(contrasts, spec):
                out[(t, r, contrast_name(a, b))] = Interval((lo + hi) / 2, lo, hi, 5, 320)
    return out


def test_saliency_interval_verdict():
    from helpers.protocols.saliency import FLOW_CHECKS, saliency_verdict

    names = list(FLOW_CHECKS)
    above, below, straddle = (0.05, 0.15), (-0.15, -0.05), (-0.05, 0.05)
    tasks = ["a", "b"]
    assert saliency_verdict(_contrasts(tasks, dict.fromkeys(names, above)), tasks)[0] == "replicates"
    assert saliency_verdict(_contrasts(tasks, dict.fromkeys(names, below)), tasks)[0] == "does not replicate"
    verdict, checks = saliency_verdict(_contrasts(tasks, dict.fromkeys(names, straddle)), tasks)
    assert verdict == "inconclusive" and set(checks.values()) == {"inconclusive"}
    # one contrast of a check straddling zero leaves the check inconclusive; one below zero fails it
    mixed = {names[0]: [above, straddle], names[1]: [above, below], names[2]: above}
    _, checks = saliency_verdict(_contrasts(["a"], mixed), ["a"])
    assert [checks[("a", c)] for c in names] == ["inconclusive", "fails", "holds"]
    # task a holds everywhere, task b straddles: 3 of 6 checks hold -> partly
    half = {"a": dict.fromkeys(names, above), "b": dict.fromkeys(names, straddle)}
    assert saliency_verdict(_contrasts(tasks, half), tasks)[0] == "partly"
    # 2 hold, 2 fail, 2 undecided: could still reach half -> inconclusive; 1 hold, 5 fail -> does not replicate
    two = {"a": {names[0]: above, names[1]: above, names[2]: below},
           "b": {names[0]: below, names[1]: straddle, names[2]: straddle}}
    assert saliency_verdict(_contrasts(tasks, two), tasks)[0] == "inconclusive"
    one = {"a": {names[0]: above, names[1]: below, names[2]: below}, "b": dict.fromkeys(names, below)}
    assert saliency_verdict(_contrasts(tasks, one), tasks)[0] == "does not replicate"
    # an undefined interval counts as straddling
    undefined = {k: None for k in _contrasts(["a"], dict.fromkeys(names, above))}
    assert saliency_verdict(undefined, ["a"])[0] == "inconclusive"
    with pytest.raises(ValueError):
        saliency_verdict(_contrasts(["a"], dict.fromkeys(names, above)), ["a", "b"])  # b missing
    with pytest.raises(ValueError):
        saliency_verdict({}, [])


def test_flow_interval_table_formats_intervals():
    from helpers.protocols.saliency import CROSSING, MEAN_OVER_TASKS, flow_interval_table, flow_intervals

    runs = {(t, 1): torch.tensor([_RAW] * 2) for t in ("a", "b")}
    table = flow_interval_table(flow_intervals(runs, n_boot=20), ["a", "b"], labels={"a": "A"})
    assert table["task"].tolist() == ["A", "b", MEAN_OVER_TASKS]
    assert table.loc[0, "shallow third: S_wp - S_pq"] == "+0.400 [+0.400, +0.400]"
    assert table.loc[0, CROSSING] == "1.0 [1.0, 1.0]"


# --- the by-hand exercise of notebook 01: its check passes on the solution and fails on wrong functions ---

def _by_hand_saliency(model, prompt, label_ids, heads_then_abs=True, grad_only=False, no_abs=False, vocab=False):
    import einops
    import torch.nn.functional as F

    patterns = []

    def keep(pattern, hook):
        pattern.retain_grad()
        patterns.append(pattern)

    hooks = [(f"blocks.{l}.attn.hook_pattern", keep) for l in range(model.cfg.n_layers)]
    with torch.enable_grad():
        logits = model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q]
        if vocab:  # wrong: the loss over the whole vocabulary
            F.cross_entropy(logits[None], torch.tensor([label_ids[prompt.gold]])).backward()
        else:
            F.cross_entropy(logits[label_ids][None], torch.tensor([prompt.gold])).backward()
    model.zero_grad(set_to_none=True)
    A = torch.stack([p[0] for p in patterns]).detach()
    grad = torch.stack([p.grad[0] for p in patterns])
    x = grad if grad_only else A * grad
    if no_abs:
        return einops.reduce(x, "layer head i j -> layer i j", "sum")
    if heads_then_abs:
        return einops.reduce(x, "layer head i j -> layer i j", "sum").abs()
    return einops.reduce(x.abs(), "layer head i j -> layer i j", "sum")


def _by_hand_flows(I, prompt, shift=0, keep_diagonal=False, reduce="mean"):
    n = I.shape[-1]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(0 if keep_diagonal else -1)
    rows = [p + shift for p in prompt.label_pos]
    wp = torch.zeros(n, n, dtype=torch.bool)
    wp[rows] = earlier[rows]
    pq = torch.zeros(n, n, dtype=torch.bool)
    pq[prompt.q, rows] = True
    ww = earlier & ~wp & ~pq
    return torch.stack([I[:, m].mean(-1) if reduce == "mean" else I[:, m].sum(-1) for m in (wp, pq, ww)], dim=-1)


def test_check_attention_patterns_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.saliency import check_attention_patterns

    def patterns(model, tokens, hook="pattern", batch=False, transpose=False, layers=None):
        _, cache = model.run_with_cache(tokens[None])
        out = torch.stack([cache[hook, l] if batch else cache[hook, l][0] for l in range(model.cfg.n_layers)])
        return out.transpose(-1, -2) if transpose else (out[0] if layers == "one" else out)

    check_attention_patterns(patterns)
    assert "✓ patterns matches the cached patterns" in capsys.readouterr().out
    for kw, says in ((dict(hook="attn_scores"), "before the softmax"), (dict(batch=True), "keeps the batch axis"),
                     (dict(transpose=True), "swapped"), (dict(layers="one"), "one layer's")):
        with pytest.raises(CheckFailed, match=says):
            check_attention_patterns(lambda m, t, kw=kw: patterns(m, t, **kw))


def test_check_pattern_saliency_passes_on_the_solution_and_fails_on_wrong_ones(capsys):
    from helpers.exercises.saliency import check_pattern_saliency

    check_pattern_saliency(_by_hand_saliency)
    assert "✓ _by_hand_saliency matches the reference" in capsys.readouterr().out

    def abs_before_head_sum(model, prompt, label_ids):
        return _by_hand_saliency(model, prompt, label_ids, heads_then_abs=False)

    def gradient_only(model, prompt, label_ids):
        return _by_hand_saliency(model, prompt, label_ids, grad_only=True)

    def one_layer_short(model, prompt, label_ids):
        return _by_hand_saliency(model, prompt, label_ids)[:-1]

    def no_abs(model, prompt, label_ids):
        return _by_hand_saliency(model, prompt, label_ids, heads_then_abs=False, no_abs=True)

    def full_vocabulary(model, prompt, label_ids):
        return _by_hand_saliency(model, prompt, label_ids, vocab=True)

    from helpers.exercises.grading import CheckFailed

    for wrong, match in ((abs_before_head_sum, "absolute value per head"), (gradient_only, "without the pattern"),
                         (no_abs, "No absolute value"), (full_vocabulary, "whole vocabulary"),
                         (one_layer_short, "shape")):
        with pytest.raises(CheckFailed, match=match):
            check_pattern_saliency(wrong)


def test_check_saliency_flows_passes_on_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.saliency import check_saliency_flows

    check_saliency_flows(_by_hand_flows)
    assert "matches the reference (flow_scores)" in capsys.readouterr().out
    wrong = {"one after": (lambda I, p: _by_hand_flows(I, p, shift=1), "one after the label words"),
             "diagonal": (lambda I, p: _by_hand_flows(I, p, keep_diagonal=True), "counted the diagonal"),
             "sums": (lambda I, p: _by_hand_flows(I, p, reduce="sum"), "These are sums"),
             "order": (lambda I, p: _by_hand_flows(I, p)[:, [1, 0, 2]], "another order")}
    for fn, says in wrong.values():
        with pytest.raises(CheckFailed, match=says):
            check_saliency_flows(fn)
    with pytest.raises(CheckFailed, match="largest difference at layer=.*flow"):
        check_saliency_flows(lambda I, p: _by_hand_flows(I, p) * 1.5)  # no typical mistake: where it differs


def test_saliency_claims_follow_the_per_task_checks():
    from helpers.protocols.saliency import FLOW_CHECKS, saliency_claims

    names = list(FLOW_CHECKS)
    above, below, straddle = (0.05, 0.15), (-0.15, -0.05), (-0.05, 0.05)
    ivs = _contrasts(["a", "b", "mean over tasks"], {"a": dict.fromkeys(names, above),
                                                     "b": {names[0]: above, names[1]: straddle, names[2]: below},
                                                     "mean over tasks": dict.fromkeys(names, above)})
    claims = saliency_claims(ivs, ["a", "b"], context="tiny")
    assert [c.key for c in claims] == ["01.shallow_wp_dominant", "01.deep_pq_dominant", "01.label_flows_above_ww"]
    assert [c.verdict for c in claims] == ["replicates", "partly", "partly"]
    assert claims[0].ours.low == pytest.approx(0.05) and "arXiv 2305.14160 §2.1" in claims[0].source
    assert "1 holds, 1 fails" in claims[2].note
    all_below = _contrasts(["a", "b", "mean over tasks"], dict.fromkeys(names, below))
    assert {c.verdict for c in saliency_claims(all_below, ["a", "b"])} == {"does not replicate"}
