"""Isolation (§2.2): identity, one-hot label rows, unchanged other rows, the random control."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.predict import Predictions, predict
from helpers.core.prefix import PrefixError, predict_shared_split, run_prefix
from helpers.core.prompts import pad_batch
from helpers.experiments.isolation import (
    authors_positions,
    block_rows,
    isolated_rows,
    isolation_experiment,
    label_isolation,
    layer_range,
    loyalty_rows,
    per_layer_hooks,
    random_isolation,
    random_positions,
    run_isolation,
    run_isolation_last,
)


def test_no_layers_is_identity(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    plain = predict(model, prompts, lids, batch_size=4)
    none = predict(model, prompts, lids, batch_size=4, hooks=label_isolation([]))
    torch.testing.assert_close(none.label_logits, plain.label_logits, atol=0, rtol=0)
    iso = run_isolation(model, prompts, lids, "label", "first", 0)
    torch.testing.assert_close(iso.label_logits, plain.label_logits, atol=1e-6, rtol=1e-5)
    changed = run_isolation(model, prompts, lids, "label", "first", 1)
    assert not torch.allclose(changed.label_logits, plain.label_logits)


def _patterns(model, tokens, layer, hooks=()):
    store = {}

    def grab(pattern, hook):
        store["p"] = pattern.detach().clone()

    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks) + [(f"blocks.{layer}.attn.hook_pattern", grab)]):
        model(tokens, stop_at_layer=layer + 1)
    return store["p"]


@pytest.mark.parametrize("layer", [0, 1])
def test_label_rows_one_hot_other_rows_unchanged(tiny_sst2_set, layer):
    model, prompts, lids = tiny_sst2_set
    tokens, _ = pad_batch(prompts, model.tokenizer.pad_token_id)
    hooks = label_isolation([layer])(prompts, tokens)
    before = _patterns(model, tokens, layer)
    after = _patterns(model, tokens, layer, hooks)
    for b, p in enumerate(prompts):
        rows = torch.zeros(tokens.shape[1], dtype=torch.bool)
        rows[p.label_pos] = True
        for r in p.label_pos:
            want = torch.zeros(model.cfg.n_heads, tokens.shape[1])
            want[:, r] = 1.0
            torch.testing.assert_close(after[b, :, r], want)
        torch.testing.assert_close(after[b][:, ~rows], before[b][:, ~rows], atol=0, rtol=0)


def test_block_rows_hand_case():
    scores = torch.zeros(1, 2, 4, 4).masked_fill(torch.triu(torch.ones(4, 4, dtype=torch.bool), 1), float("-inf"))
    rows = torch.tensor([[False, False, True, False]])
    out = block_rows(scores, rows).softmax(-1)
    torch.testing.assert_close(out[0, :, 2], torch.tensor([[0.0, 0, 1, 0]] * 2))
    torch.testing.assert_close(out[0, :, 3], torch.full((2, 4), 0.25))
    torch.testing.assert_close(out[0, :, 1], torch.tensor([[0.5, 0.5, 0, 0]] * 2))


def _label_tokens(p):
    return {j for a, b in p.label_spans for j in range(a, b)} | set(p.label_pos)


def test_random_positions(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    for i, p in enumerate(prompts):
        for seed in range(20):
            pos = random_positions(p, p.n_demos, [seed, i])
            assert len(pos) == len(set(pos)) == p.n_demos
            assert not set(pos) & _label_tokens(p) and all(0 < j < p.q - 1 for j in pos)
        assert random_positions(p, 2, [7, i]) == random_positions(p, 2, [7, i])
    assert len({tuple(random_positions(prompts[0], 2, s)) for s in range(10)}) > 1
    with pytest.raises(ValueError):
        random_positions(prompts[0], 10_000, 0)


def _authors_draw_by_hand(p, i, layer, seed):
    """The authors' rule written out again: n_demos positions of 1..q-2 (0 excluded by our rule), none a label
    token, drawn with numpy's default_rng([seed, input index, layer])."""
    label_tokens = {j for a, b in p.label_spans for j in range(a, b)}
    pool = [j for j in range(1, p.q - 1) if j not in label_tokens]
    return sorted(int(j) for j in np.random.default_rng([seed, i, layer]).choice(pool, p.n_demos, replace=False))


def test_authors_draw_per_input_and_per_layer(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    layers = list(range(model.cfg.n_layers))
    for seed in range(10):
        draws = [authors_positions(p, layers, seed, i) for i, p in enumerate(prompts)]
        for i, (p, d) in enumerate(zip(prompts, draws)):
            assert list(d) == layers
            for l, pos in d.items():
                assert len(pos) == len(set(pos)) == p.n_demos
                assert not set(pos) & _label_tokens(p)  # never a label token
                assert all(0 < j < p.q - 1 for j in pos)  # never 0, q, q-1 or later
                assert pos == _authors_draw_by_hand(p, i, l, seed)
            assert len({tuple(v) for v in d.values()}) > 1  # a fresh draw in every layer
            assert d == authors_positions(p, layers, seed, i)  # same seed, same draw
        # a fresh draw for every input (the prompts share their demonstrations, so the set draw would repeat)
        assert len({tuple(d[0]) for d in draws}) > 1
    # the whole draw changes with the seed
    assert authors_positions(prompts[0], layers, 0, 0) != authors_positions(prompts[0], layers, 1, 0)
    # some draws reach into the query text: the pool is everything before q-1, not only the demonstrations
    from helpers.core.prefix import shared_prefix_len

    p0 = shared_prefix_len(prompts)
    assert any(j >= p0 for s in range(10) for i, p in enumerate(prompts)
               for pos in authors_positions(p, layers, s, i).values() for j in pos)


def _hand_masked(model, prompts, lids, layers, seed):
    """Every prompt alone, its full prompt run with masks built here from the hand-written draw."""
    out = []
    for i, p in enumerate(prompts):
        def hook(scores, hook, i=i, p=p):
            layer = int(hook.name.split(".")[1])
            scores = scores.clone()
            for r in _authors_draw_by_hand(p, i, layer, seed):
                scores[0, :, r, :r] = float("-inf")
            return scores

        out.append(predict(model, [p], lids, batch_size=1,
                           hooks=lambda batch, tokens, offset=0, hook=hook: [
                               (f"blocks.{l}.attn.hook_attn_scores", hook) for l in layers]))
    return out


@pytest.mark.parametrize("where,k", [("first", 2), ("last", 2)])
def test_authors_draw_is_the_default_and_equals_hand_built_masks(tiny_sst2_set, where, k):
    model, prompts, lids = tiny_sst2_set
    layers = layer_range(model, where, k)
    got = run_isolation(model, prompts, lids, "random", where, k, seed=3, batch_size=4)
    for i, want in enumerate(_hand_masked(model, prompts, lids, layers, seed=3)):
        torch.testing.assert_close(got.label_logits[i:i + 1], want.label_logits, atol=1e-5, rtol=1e-4)
        assert torch.equal(got.topk[i:i + 1], want.topk)
    # the control changes the output (so the comparison could fail), and not as the set draw does
    assert not torch.allclose(got.label_logits, predict(model, prompts, lids, batch_size=4).label_logits)
    per_set = run_isolation(model, prompts, lids, "random", where, k, seed=3, batch_size=4, random_draw="set")
    assert not torch.allclose(got.label_logits, per_set.label_logits)
    exp = isolation_experiment(model, prompts, lids, ks=(k,), wheres=(where,), seed=3, batch_size=4)
    _same(exp[("random", where, k)], got)


def test_authors_hooks_block_exactly_the_drawn_rows_in_each_layer(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    layers = list(range(model.cfg.n_layers))
    tokens, _ = pad_batch(prompts, model.tokenizer.pad_token_id)
    hooks = random_isolation(prompts, layers, seed=11)(prompts, tokens)
    before, after = {}, {}

    def grab(store):
        def fn(scores, hook):
            store[hook.name] = scores.detach().clone()
        return fn

    names = [f"blocks.{l}.attn.hook_attn_scores" for l in layers]
    with torch.no_grad(), model.hooks(fwd_hooks=[(n, grab(before)) for n in names] + hooks
                                      + [(n, grab(after)) for n in names]):
        model(tokens)
    T = tokens.shape[1]
    drawn_per_layer = []
    for l, name in zip(layers, names):
        want = before[name].clone()
        drawn = []
        for i, p in enumerate(prompts):
            rows = _authors_draw_by_hand(p, i, l, seed=11)
            drawn.append(tuple(rows))
            for r in rows:
                want[i, :, r, :r] = float("-inf")
        torch.testing.assert_close(after[name], want, atol=0, rtol=0)
        blocked = (after[name] == float("-inf")) & (before[name] != float("-inf"))
        assert blocked.any(1).any(-1).sum() == sum(len(d) for d in drawn)  # no other row touched
        assert T > max(max(d) for d in drawn)
        drawn_per_layer.append(drawn)
    assert len({tuple(d) for d in drawn_per_layer}) > 1


def test_random_control_batching_and_subsets(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    # reproducible and independent of batching
    a = run_isolation(model, prompts, lids, "random", "first", 2, seed=3, batch_size=4)
    b = run_isolation(model, prompts, lids, "random", "first", 2, seed=3, batch_size=1)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-4)
    assert torch.equal(a.topk, b.topk)
    # the first inputs draw the same whether or not the others run
    c = run_isolation(model, prompts[:2], lids, "random", "first", 2, seed=3, batch_size=4)
    torch.testing.assert_close(c.label_logits, a.label_logits[:2], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="same object"):
        random_isolation([prompts[0], prompts[0]], [0], seed=0)
    with pytest.raises(ValueError, match="random_draw"):
        run_isolation(model, prompts, lids, "random", "first", 1, random_draw="input")


@pytest.mark.parametrize("draw", ["authors", "set"])
def test_random_subset_pairs_with_full_label_runs(tiny_sst2_set, draw):
    from helpers.protocols.isolation import condition_cells, condition_ids, loyalty_frame
    from helpers.study.stats import bootstrap_means, paired_differences

    model, prompts, lids = tiny_sst2_set
    full = isolation_experiment(model, prompts, lids, ks=(1,), seed=2, batch_size=4, random_draw=draw)
    sub = isolation_experiment(model, prompts, lids, ks=(1,), seed=2, batch_size=4, random_draw=draw, random_n=2)
    for key, pred in sub.items():
        if key != "base" and key[0] == "random":
            assert len(pred) == 2
            _same(pred, Predictions(*(t[:2] for t in (full[key].label_logits, full[key].topk, full[key].gold))))
        else:
            assert len(pred) == len(prompts)
            _same(pred, full[key])
    df = loyalty_frame({("sst2", 42): sub, ("sst2", 43): full})
    assert len(condition_cells(df, "random", "first", 1)[("sst2", 42)]) == 2
    assert list(condition_ids(df, "random", "first", 1)[("sst2", 42)]) == [0, 1]
    a, b = condition_cells(df, "random", "first", 1), condition_cells(df, "label", "first", 1)
    with pytest.raises(ValueError, match="ids"):
        paired_differences(a, b)
    d = paired_differences(a, b, condition_ids(df, "random", "first", 1), condition_ids(df, "label", "first", 1))
    assert len(d[("sst2", 42)]) == 2 and len(d[("sst2", 43)]) == len(prompts)
    np.testing.assert_array_equal(d[("sst2", 42)], np.asarray(a[("sst2", 42)]) - np.asarray(b[("sst2", 42)])[:2])
    bootstrap_means(d)
    bootstrap_means(a)


def test_budget_runs_the_random_control_on_every_input_but_in_smoke():
    from helpers.protocols.isolation import isolation_sizes
    from helpers.study.profiles import get_profile

    for name in ("smoke", "default", "paper"):
        prof = get_profile(name)
        b = isolation_sizes(prof)
        assert b.random_draw == "authors"
        assert b.random_n == min(prof.n_random_control, max(b.n.values()))
    assert isolation_sizes(get_profile("default")).random_n == get_profile("default").n_test  # the paper's
    assert isolation_sizes(get_profile("paper")).random_n == get_profile("paper").n_test
    smoke = isolation_sizes(get_profile("smoke"))
    assert smoke.random_n < max(smoke.n.values())  # CI runs the subset's pairing


def test_batched_equals_one_by_one(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    a = run_isolation(model, prompts, lids, "label", "last", 2, batch_size=4)
    b = run_isolation(model, prompts, lids, "label", "last", 2, batch_size=1)
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-5, rtol=1e-4)
    assert torch.equal(a.topk, b.topk)


def test_experiment_rows(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    runs = isolation_experiment(model, prompts, lids, ks=(1,), seed=0, batch_size=4)
    rows = loyalty_rows(runs)
    assert {(r["condition"], r["where"], r["k"]) for r in rows} == {
        ("label", "first", 1), ("label", "last", 1), ("random", "first", 1), ("random", "last", 1)}
    assert all(0 <= r["label_loyalty"] <= 1 and 0 <= r["word_loyalty"] <= 1 for r in rows)
    assert layer_range(model, "last", 2) == [model.cfg.n_layers - 2, model.cfg.n_layers - 1]
    with pytest.raises(ValueError):
        layer_range(model, "middle", 1)


def _same(a, b):
    torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(a.pred, b.pred) and torch.equal(a.topk, b.topk)


@pytest.mark.parametrize("k", [1, 2, 3])  # k = 3 = n_layers: nothing below the split is shared
def test_last_layer_conditions_together_equal_separate_and_full_prompts(tiny_sst2_set, k):
    model, prompts, lids = tiny_sst2_set
    together = run_isolation_last(model, prompts, lids, ("label", "random"), k, seed=3, batch_size=3)
    for c in ("label", "random"):
        alone = run_isolation(model, prompts, lids, c, "last", k, seed=3, batch_size=4, random_draw="set")
        full = run_isolation(model, prompts, lids, c, "last", k, seed=3, batch_size=4, shared=False,
                             random_draw="set")
        _same(together[c], alone)
        _same(together[c], full)


@pytest.mark.parametrize("draw", ["authors", "set"])
def test_experiment_shared_equals_full_prompts(tiny_sst2_set, draw):
    model, prompts, lids = tiny_sst2_set
    a = isolation_experiment(model, prompts, lids, ks=(1, 2), seed=5, batch_size=4, random_draw=draw)
    b = isolation_experiment(model, prompts, lids, ks=(1, 2), seed=5, batch_size=4, shared=False, random_draw=draw)
    assert list(a) == list(b)
    for key in a:
        _same(a[key], b[key])


def test_split_refuses_caches_that_differ_below_the_split(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    p0, rows = isolated_rows(prompts, "label", [0], 0)
    plain = run_prefix(model, prompts[0].tokens[:p0])
    first = run_prefix(model, prompts[0].tokens[:p0], hooks=per_layer_hooks(rows, 1, p0))
    # isolating layer 0 changes what the label rows write, so keys and values differ from layer 1 on
    with pytest.raises(PrefixError, match="layer 1"):
        predict_shared_split(model, prompts, lids, {"plain": plain, "first": first}, split_layer=2)
    # at split 0 nothing is shared, so the same caches are fine
    out = predict_shared_split(model, prompts, lids, {"plain": plain, "first": first}, split_layer=0)
    _same(out["first"], run_isolation(model, prompts, lids, "label", "first", 1))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_real_models_last_layer_conditions_together_equal_full_prompts(which, request):
    from helpers.core.prompts import make_icl_set

    model = request.getfixturevalue(which)
    s = make_icl_set(model, "sst2", seed=43, n_test=6)
    together = run_isolation_last(model, s.prompts, s.label_ids, ("label", "random"), 5, seed=43, batch_size=4)
    for c in ("label", "random"):
        _same(together[c], run_isolation(model, s.prompts, s.label_ids, c, "last", 5, seed=43, batch_size=4,
                                         shared=False, random_draw="set"))


def test_isolation_interval_verdict():
    from helpers.protocols.isolation import isolation_verdict
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    high = {("label", "first"): iv(0.4, 0.6), ("label", "last"): iv(0.9, 0.99), ("random", "first"): iv(0.85, 0.95),
            ("random", "last"): iv(0.95, 1.0)}
    above = {cw: iv(0.2, 0.4) for cw in [("label", "last"), ("random", "first"), ("random", "last")]}
    assert isolation_verdict(high, above)[0] == "replicates"
    low_random = {**high, ("random", "first"): iv(0.7, 0.9)}  # straddles 80%: check 3 fails
    assert isolation_verdict(low_random, above)[0] == "partly"
    straddle = {**above, ("random", "first"): iv(-0.05, 0.1)}
    assert isolation_verdict(high, straddle)[0] == "inconclusive"
    below = {**above, ("random", "first"): iv(-0.2, -0.05)}
    assert isolation_verdict(high, below)[0] == "does not replicate"


def test_loyalty_rows_carry_per_input_values(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    rows = loyalty_rows(isolation_experiment(model, prompts, lids, ks=(1,), seed=0, batch_size=4))
    for r in rows:
        assert len(r["label_loyal"]) == len(r["word_loyal"]) == r["n"]
        assert sum(r["label_loyal"]) / r["n"] == pytest.approx(r["label_loyalty"])
        assert sum(r["word_loyal"]) / r["n"] == pytest.approx(r["word_loyalty"])


def test_condition_cells(tiny_sst2_set):
    from helpers.protocols.isolation import condition_cells, loyalty_frame

    model, prompts, lids = tiny_sst2_set
    df = loyalty_frame({("sst2", 42): isolation_experiment(model, prompts, lids, ks=(1,), seed=0, batch_size=4)})
    cells = condition_cells(df, "label", "first", 1)
    assert list(cells) == [("sst2", 42)] and len(cells[("sst2", 42)]) == len(prompts)
    with pytest.raises(ValueError, match="no isolation runs"):
        condition_cells(df, "label", "first", 5)


# --- the by-hand exercise of notebook 02: its check passes on the solution and fails on wrong functions ---

def _run_edit(model, prompt, label_ids, layers, edit, point="attn_scores", rows=None):
    """The label logits at q with ``edit(tensor, p)`` applied at every label position p (or ``rows(prompt)``) in
    the ``hook_{point}`` of each layer of ``layers``: the by-hand isolation and its wrong versions."""
    def hook(x, hook):
        for p in (prompt.label_pos if rows is None else rows(prompt)):
            edit(x, p)
        return x

    hooks = [(f"blocks.{l}.attn.hook_{point}", hook) for l in layers]
    return model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q, label_ids]


def _by_hand_isolation(model, prompt, label_ids, layers, shift=0, rows=None):
    def block(s, p):
        s[:, :, p + shift, :p + shift] = float("-inf")
    return _run_edit(model, prompt, label_ids, layers, block, rows=rows)


def _by_hand_pattern(model, prompt, label_ids, layers):
    """A wrong version: the pattern zeroed after the softmax (rows no longer sum to 1)."""
    def zero(a, p):
        a[:, :, p, :p] = 0.0
    return _run_edit(model, prompt, label_ids, layers, zero, point="pattern")


def _by_hand_keys(model, prompt, label_ids, layers, keys):
    def block(s, p):
        s[:, :, p, keys(p)] = float("-inf")
    return _run_edit(model, prompt, label_ids, layers, block)


def _by_hand_column(model, prompt, label_ids, layers):
    """A wrong version: what later rows read from p (a column) blocked instead of what p reads."""
    def block(s, p):
        s[:, :, p + 1:, p] = float("-inf")
    return _run_edit(model, prompt, label_ids, layers, block)


def test_check_isolated_label_logits_passes_on_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.isolation import check_isolated_label_logits

    check_isolated_label_logits(_by_hand_isolation)
    assert "✓ _by_hand_isolation matches the reference" in capsys.readouterr().out
    wrong = {  # each typical wrong version, and the words of the cause the check must name
        "diagonal blocked": (lambda m, p, ids, ls: _by_hand_keys(m, p, ids, ls, lambda q: slice(0, q + 1)),
                             "blocked the diagonal too"),
        "one row late": (lambda m, p, ids, ls: _by_hand_isolation(m, p, ids, ls, shift=1), "from p + 1 on"),
        "one row early": (lambda m, p, ids, ls: _by_hand_isolation(m, p, ids, ls, shift=-1), "before the label"),
        "a column": (_by_hand_column, "attention to the label words"),
        "first label word only": (lambda m, p, ids, ls: _by_hand_isolation(m, p, ids, ls,
                                                                           rows=lambda pr: pr.label_pos[:1]),
                                  "Only some label words"),
        "every layer": (lambda m, p, ids, ls: _by_hand_isolation(m, p, ids, range(m.cfg.n_layers)),
                        "in every layer"),
        "after the softmax": (_by_hand_pattern, "after the softmax"),
        "nothing blocked": (lambda m, p, ids, ls: _by_hand_isolation(m, p, ids, []), "unmodified logits"),
    }
    for name, (fn, cause) in wrong.items():
        with pytest.raises(CheckFailed) as err:
            check_isolated_label_logits(fn)
        assert cause in str(err.value), (name, str(err.value))
    with pytest.raises(CheckFailed, match="shape"):
        check_isolated_label_logits(lambda m, p, ids, ls: m.run_with_hooks(p.tokens[None])[0, p.q])


def _block(scores, label_pos, keys=lambda p: slice(0, p), shift=0, first_only=False, column=False):
    for p in label_pos[:1] if first_only else label_pos:
        if column:
            scores[:, :, p + 1:, p] = float("-inf")
        else:
            scores[:, :, p + shift, keys(p + shift)] = float("-inf")
    return scores


def test_check_block_label_rows_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.isolation import check_block_label_rows

    check_block_label_rows(_block)
    check_block_label_rows(lambda s, lp: _block(s.clone(), lp))  # a copy is as good as an edit in place
    assert capsys.readouterr().out.count("✓") == 2
    wrong = {"diagonal": (dict(keys=lambda p: slice(0, p + 1)), "blocked the diagonal too"),
             "late": (dict(shift=1), "one after the label positions"),
             "early": (dict(shift=-1), "one before the label positions"),
             "column": (dict(column=True), "blocked a column"),
             "first only": (dict(first_only=True), "Only the first label position")}
    for kw, says in wrong.values():
        with pytest.raises(CheckFailed, match=says):
            check_block_label_rows(lambda s, lp, kw=kw: _block(s, lp, **kw))

    def first_head(s, lp):
        for p in lp:
            s[0, 0, p, :p] = float("-inf")
        return s

    with pytest.raises(CheckFailed, match="first head"):
        check_block_label_rows(first_head)
    with pytest.raises(CheckFailed, match="returned None"):
        check_block_label_rows(lambda s, lp: None)


def test_a_fully_blocked_row_reads_nothing_in_transformer_lens(tiny_models):
    """What notebook 02's hint says: a row of all -inf is not NaN after TransformerLens' softmax but zeros, so the
    position's attention output is zero and the logits stay finite."""
    for model in tiny_models.values():
        tokens = torch.arange(5, 12)[None]
        seen = {}

        def block_row(scores, hook):
            scores[:, :, 3, :] = float("-inf")
            return scores

        def keep(pattern, hook):
            seen["pattern"] = pattern.detach().clone()

        def keep_z(z, hook):
            seen["z"] = z.detach().clone()

        logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_attn_scores", block_row),
                                                         ("blocks.0.attn.hook_pattern", keep),
                                                         ("blocks.0.attn.hook_z", keep_z)])
        assert torch.isfinite(logits).all()
        assert (seen["pattern"][:, :, 3] == 0).all() and (seen["z"][:, 3] == 0).all()
        assert torch.allclose(seen["pattern"][:, :, 4].sum(-1), torch.ones(1))


def test_a_failed_check_shows_its_message_only_in_jupyter():
    """IPython shows an exception's _render_traceback_ instead of its traceback: a failed check is its message
    (red name, the cause) and one line on what to do, without the check's source."""
    from helpers.exercises.grading import CheckFailed

    err = CheckFailed("yours [1.0], reference [2.0]. You blocked the diagonal too")
    lines = err._render_traceback_()
    assert len(lines) == 2 and "You blocked the diagonal too" in lines[0] and "tiny random models" in lines[1]
    assert isinstance(err, AssertionError)  # pytest.raises(AssertionError) and plain Python still see it


def test_isolation_claims_one_per_check():
    from helpers.protocols.isolation import isolation_claims
    from helpers.study.stats import Interval

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 5, 320)

    loyalty = {("label", "first", "label_loyal"): iv(0.4, 0.6), ("label", "last", "label_loyal"): iv(0.9, 0.99),
               ("random", "first", "label_loyal"): iv(0.7, 0.9), ("random", "last", "label_loyal"): iv(0.5, 0.7)}
    drop = {("label", "last"): iv(0.2, 0.4), ("random", "first"): iv(-0.01, 0.3), ("random", "last"): iv(0.1, 0.2)}
    claims = isolation_claims(loyalty, drop, 5)
    assert [c.key for c in claims] == ["02.label_first_hurts_most", "02.label_last_barely_matters",
                                       "02.random_first_barely_matters", "02.random_last_barely_matters"]
    assert [c.verdict for c in claims] == ["inconclusive", "replicates", "inconclusive", "does not replicate"]
    assert claims[0].ours.estimate == pytest.approx(50.0) and claims[0].unit == "%"
    assert "random words first 5 minus label words first 5" in claims[0].note
    assert isolation_claims(loyalty, {**drop, ("random", "first"): iv(0.01, 0.3)})[0].verdict == "replicates"
    assert isolation_claims(loyalty, {**drop, ("random", "first"): iv(-0.3, -0.01)})[0].verdict == "does not replicate"


def test_random_control_in_the_last_layers_shares_the_lower_ones(tiny_model):
    """The authors' random control isolated in the last k layers: the demonstrations' lower layers run once and
    each input's own tokens after them (random_isolation_last); the same predictions and top-5 words as every
    full prompt run whole, and it differs from the unmodified run (the isolation acts)."""
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.isolation import run_isolation

    s = make_icl_set(tiny_model, "sst2", 42, 6)
    full = run_isolation(tiny_model, s.prompts, s.label_ids, "random", "last", 2, seed=42, batch_size=4, shared=False)
    lower_shared = run_isolation(tiny_model, s.prompts, s.label_ids, "random", "last", 2, seed=42, batch_size=4)
    torch.testing.assert_close(lower_shared.label_logits, full.label_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(lower_shared.topk, full.topk)
    base = predict(tiny_model, s.prompts, s.label_ids, 4)
    assert (lower_shared.label_logits - base.label_logits).abs().max() > 1e-3


def test_isolation_claims_state_the_layers_they_isolated():
    """The control isolates its first and last layer (k=1): its claims say "layer", not the paper's "5 layers"."""
    from helpers.experiments.isolation import MAIN_CONDITIONS
    from helpers.protocols.isolation import isolation_claims
    from helpers.study.stats import Interval

    iv = Interval(0.9, 0.85, 0.95, 5, 320)
    loyalty = {(*cw, "label_loyal"): iv for cw in MAIN_CONDITIONS}
    drop = {cw: Interval(0.1, 0.05, 0.15, 5, 320) for cw in MAIN_CONDITIONS[1:]}
    one = isolation_claims(loyalty, drop, k=1)
    assert one[0].statement == "Isolating the label words in the first layer changes the prediction most"
    assert all("5 layers" not in c.statement for c in one)
    assert all("5 layers" in c.statement for c in isolation_claims(loyalty, drop, k=5))
