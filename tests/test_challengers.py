"""The pieces that test the anchors against their challengers: position classes, class saliency, class isolation,
and the induction and function-vector head scores, on tiny random models of three architectures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.core.heads import ablated_last_logprobs, repeated_random_tokens
from helpers.core.positions import CLASSES, class_positions, position_classes
from helpers.core.predict import predict
from helpers.core.prompts import make_icl_set
from helpers.exercises.tiny import TINY_KINDS
from helpers.experiments.head_scores import (
    fv_scores,
    induction_scores,
    mean_z_at_q,
    overlap,
    shuffled_demos,
    shuffled_label_set,
    top_heads,
)
from helpers.experiments.isolation import layer_range, run_isolation
from helpers.experiments.isolation_classes import class_conditions, class_rows, content_draw, run_class_isolation
from helpers.experiments.saliency import flow_scores, saliency_matrices
from helpers.experiments.saliency_classes import FLOW_CLASSES, class_flow_masks, class_flow_scores, class_flows

# ------------------------------------------------------------------------------------------------ classes


def test_classes_partition_the_demonstrations_by_token_kind(tiny_sst2_set):
    model, prompts, _ = tiny_sst2_set
    for p in prompts:
        pos = position_classes(p)
        flat = [i for c in CLASSES for i in pos[c]]
        assert len(flat) == len(set(flat)), "a position in two classes"
        end = p.demo_end if p.demo_end is not None else p.label_spans[-1][1]
        assert sorted(flat) == list(range(1 if p.bos else 0, end))  # every demonstration position but BOS
        assert all(p.kinds[i] == "text" for i in pos["content"])
        assert all(p.kinds[i] == "label" for i in pos["label"])
        assert all(p.kinds[i] == "format" for i in pos["forerunner"] + pos["template"])
        assert pos["label_first"] == sorted(p.label_pos) and set(pos["label_first"]) <= set(pos["label"])
        assert pos["forerunner"] == [a - 1 for a, _ in p.label_spans]  # SST-2's template: "Sentiment:" before each


def test_classes_hand_case():
    """SST-2 on the GPT-2 tokenizer: ``Review: <text>\\nSentiment: <label>\\n`` per demonstration; the ":" before
    each label is its forerunner, the other template tokens are "Review", ":", newlines, "Sent", "iment"."""
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2")
    p = make_icl_set(model, "sst2", 42, 1).prompts[0]
    toks = model.to_str_tokens(p.tokens)
    pos = position_classes(p)
    assert [toks[i] for i in pos["forerunner"]] == [":", ":"]
    assert [toks[i] for i in pos["label_first"]] == [toks[a] for a, _ in p.label_spans]
    assert {toks[i] for i in pos["template"]} <= {"Review", ":", "\n", "Sent", "iment"}
    assert toks[pos["content"][0]] != "Review" and p.q not in sum(pos.values(), [])


def test_class_positions_refuses_unknown_class(tiny_sst2_set):
    _, prompts, _ = tiny_sst2_set
    with pytest.raises(ValueError, match="cls must be one of"):
        class_positions(prompts, "stopwords")
    with pytest.raises(TypeError, match="Prompt"):
        position_classes("Review: good")


# ------------------------------------------------------------------------------------------------ saliency


def test_class_flow_masks_hand_case(tiny_sst2_set):
    _, prompts, _ = tiny_sst2_set
    p = prompts[0]
    m = class_flow_masks(p)
    pos = position_classes(p)
    for c, cls in enumerate(FLOW_CLASSES):
        into = {(int(i), int(j)) for i, j in m[0, c].nonzero()}
        assert into == {(i, j) for i in pos[cls] for j in pos["content"] if j < i}
        to_q = {(int(i), int(j)) for i, j in m[1, c].nonzero()}
        assert to_q == {(p.q, i) for i in pos[cls]}


def test_label_first_to_q_is_s_pq(tiny_sst2_set):
    """The generalised flow into q of the labels' first tokens is §2.1's S_pq itself."""
    model, prompts, lids = tiny_sst2_set
    mats = saliency_matrices(model, prompts[:2], lids)
    seq = max(m.shape[-1] for m in mats)
    sal = torch.zeros(2, model.cfg.n_layers, seq, seq)
    for b, m in enumerate(mats):
        sal[b, :, : m.shape[1], : m.shape[2]] = m
    ours = class_flow_scores(sal, prompts[:2])[:, :, 1, FLOW_CLASSES.index("label_first")]
    torch.testing.assert_close(ours, flow_scores(sal, prompts[:2])[:, :, 1])
    # batched (two prompts a batch) equals one by one
    one = torch.cat([class_flows(model, [p], lids, batch_size=1) for p in prompts[:2]])
    torch.testing.assert_close(class_flows(model, prompts[:2], lids, batch_size=2), one, atol=1e-6, rtol=1e-4)


def test_class_flow_scores_hand_values():
    """A hand-built 1-layer saliency: each mean is the mean of the cells its mask selects; an empty class is NaN."""
    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2")
    p = make_icl_set(model, "sst2", 42, 1).prompts[0]
    n = len(p)
    sal = torch.arange(n * n, dtype=torch.float32).view(1, 1, n, n)
    got = class_flow_scores(sal, [p])[0, 0]
    pos = position_classes(p)
    for c, cls in enumerate(FLOW_CLASSES):
        cells = [float(sal[0, 0, i, j]) for i in pos[cls] for j in pos["content"] if j < i]
        assert got[0, c].item() == pytest.approx(np.mean(cells))
        assert got[1, c].item() == pytest.approx(np.mean([float(sal[0, 0, p.q, i]) for i in pos[cls]]))
    p.format_pos = [i for i in p.format_pos if i + 1 not in [a for a, _ in p.label_spans]]  # no forerunner left
    p.kinds = list(p.kinds)
    assert torch.isnan(class_flow_scores(sal, [p])[0, 0, :, FLOW_CLASSES.index("forerunner")]).all()


# ------------------------------------------------------------------------------------------------ isolation


def test_label_first_isolation_is_section_2_2s_label_condition(tiny_sst2_set):
    """Isolating the labels' first tokens is notebook 02's label condition (which isolates label_pos)."""
    model, prompts, lids = tiny_sst2_set
    for where in ("first", "last"):
        a = run_class_isolation(model, prompts, lids, "label_first", where, 2, batch_size=4)
        b = run_isolation(model, prompts, lids, "label", where, 2, batch_size=4)
        torch.testing.assert_close(a.label_logits, b.label_logits)


@pytest.mark.parametrize("condition", ["forerunner", "template", "random:forerunner", "random:template"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_class_isolation_shared_equals_full_prompts(tiny_sst2_set, condition, where):
    model, prompts, lids = tiny_sst2_set
    shared = run_class_isolation(model, prompts, lids, condition, where, 2, seed=5, batch_size=4)
    full = run_class_isolation(model, prompts, lids, condition, where, 2, seed=5, batch_size=4, shared=False)
    torch.testing.assert_close(shared.label_logits, full.label_logits, atol=1e-4, rtol=1e-4)
    one = torch.cat([run_class_isolation(model, prompts, lids, condition, where, 2, seed=5, batch_size=1,
                                         shared=False).label_logits])
    torch.testing.assert_close(full.label_logits, one, atol=1e-5, rtol=1e-4)  # batched == one by one


def test_class_isolation_blocks_exactly_its_rows(tiny_sst2_set):
    """Against a hand-built mask on the attention scores: rows of the class see only themselves."""
    model, prompts, lids = tiny_sst2_set
    layers = layer_range(model, "first", 2)
    for cond in ("forerunner", "random:template"):
        rows = class_rows(prompts, cond, layers, seed=1)
        got = run_class_isolation(model, prompts, lids, cond, "first", 2, seed=1, shared=False)
        for i, p in enumerate(prompts):
            def hook(scores, hook, i=i):
                l = int(hook.name.split(".")[1])
                scores = scores.clone()
                for r in rows[i][l]:
                    scores[0, :, r, :r] = float("-inf")
                return scores

            want = predict(model, [p], lids, batch_size=1, hooks=lambda b, t, offset=0, hook=hook: [
                (f"blocks.{l}.attn.hook_attn_scores", hook) for l in layers])
            torch.testing.assert_close(got.label_logits[i:i + 1], want.label_logits, atol=1e-5, rtol=1e-4)


def test_random_content_draw_matches_count_and_seed(tiny_sst2_set):
    _, prompts, _ = tiny_sst2_set
    p = prompts[0]
    d = content_draw(p, [0, 1], seed=3, index=2, count=2)
    assert all(len(v) == 2 and set(v) <= set(position_classes(p)["content"]) for v in d.values())
    assert d == content_draw(p, [0, 1], seed=3, index=2, count=2) and d != content_draw(p, [0, 1], 3, 3, 2)
    rows = class_rows(prompts, "random:template", [0], seed=0)
    assert [len(r[0]) for r in rows] == [len(position_classes(q)["template"]) for q in prompts]
    assert class_conditions(["label"]) == ["label", "random:label"]
    with pytest.raises(ValueError, match="must be one of"):
        class_conditions(["content"])


def test_no_layers_isolated_is_the_plain_run(tiny_sst2_set):
    model, prompts, lids = tiny_sst2_set
    plain = predict(model, prompts, lids, batch_size=4)
    got = run_class_isolation(model, prompts, lids, "template", "first", 0, batch_size=4)
    torch.testing.assert_close(got.label_logits, plain.label_logits, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------------------ heads


def test_induction_score_finds_a_hand_built_induction_head():
    """A 2-layer attention-only model: layer 0 head 0 attends to the previous token (a previous-token head),
    layer 1 head 0's query matches the key a previous-token head wrote (an induction head). Built by hand: the
    score of the induction head is near 1 and every other head's near chance."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    V, L = 64, 12
    cfg = HookedTransformerConfig(n_layers=2, d_model=3 * V, n_ctx=64, d_head=V, n_heads=2, d_vocab=V,
                                  attn_only=True, normalization_type=None, positional_embedding_type="standard",
                                  seed=0, device="cpu", act_fn=None)
    m = HookedTransformer(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        big = 40.0
        a0, a1 = m.blocks[0].attn, m.blocks[1].attn  # model.W_Q etc. are stacked copies
        # residual = [token one-hot | position one-hot (mod V) | previous token one-hot (written by layer 0)]
        m.embed.W_E[:, :V] = torch.eye(V)
        m.pos_embed.W_pos[:, V:2 * V] = torch.eye(V)[torch.arange(cfg.n_ctx) % V]
        # layer 0 head 0: query = position p, key = position p+1 -> attends to p-1; copies its token to the 3rd block
        a0.W_Q[0][V:2 * V] = torch.eye(V) * big
        a0.W_K[0][V:2 * V] = torch.roll(torch.eye(V), -1, dims=0) * big  # key of position j matches query j+1
        a0.W_V[0][:V] = torch.eye(V)
        a0.W_O[0][:, 2 * V:] = torch.eye(V)
        # layer 1 head 0: query = current token, key = previous token of that position -> attends to the token after
        a1.W_Q[0][:V] = torch.eye(V) * big
        a1.W_K[0][2 * V:] = torch.eye(V) * big
        m.unembed.W_U[:V] = torch.eye(V)

    assert m.tokenizer is None  # no tokenizer: no BOS before the sequences
    s = induction_scores(m, length=L, n=8, seed=0)
    # By hand. The induction head splits its attention equally between every key whose previous token is the
    # current token (position 0 copies its own token: it has no earlier one), one of them the target; the
    # zero-weight heads attend uniformly; the previous-token head never looks L - 1 back.
    toks = repeated_random_tokens(m, L, 8, seed=0)
    rows = range(L, 2 * L - 1)
    want_ind, want_uniform = [], []
    for t in toks.tolist():
        prev = [t[0]] + t[:-1]
        for r in rows:
            matches = [j for j in range(r + 1) if prev[j] == t[r]]
            want_ind.append(1 / len(matches) if r - L + 1 in matches else 0.0)
            want_uniform.append(1 / (r + 1))
    assert s[1, 0].item() == pytest.approx(np.mean(want_ind), abs=1e-3) and s[1, 0] > 0.8
    assert s[0, 1].item() == pytest.approx(np.mean(want_uniform), abs=1e-5)
    assert s[1, 1].item() == pytest.approx(np.mean(want_uniform), abs=1e-5)
    assert s[0, 0].item() < 1e-3


def test_repeated_tokens_layout(tiny_model):
    t = repeated_random_tokens(tiny_model, 5, 3, seed=1)
    off = t.shape[1] - 10
    assert off == (1 if tiny_model.cfg.default_prepend_bos else 0)
    assert torch.equal(t[:, off:off + 5], t[:, off + 5:])
    assert torch.equal(t, repeated_random_tokens(tiny_model, 5, 3, seed=1))
    s = induction_scores(tiny_model, length=6, n=4, batch_size=3)
    assert s.shape == (tiny_model.cfg.n_layers, tiny_model.cfg.n_heads) and (s >= 0).all() and (s <= 1).all()
    torch.testing.assert_close(s, induction_scores(tiny_model, length=6, n=4, batch_size=4))  # batching


def test_shuffled_demos_break_the_mapping():
    from helpers.core.prompts import Demo

    demos = [Demo("a", 0), Demo("b", 1), Demo("c", 0), Demo("d", 1)]
    out = shuffled_demos(demos, seed=0)
    assert [d.text for d in out] == list("abcd") and sorted(d.label for d in out) == [0, 0, 1, 1]
    assert [d.label for d in out] != [0, 1, 0, 1]
    assert shuffled_demos([Demo("a", 1), Demo("b", 1)], 0) == [Demo("a", 1), Demo("b", 1)]


def test_fv_score_equals_a_by_hand_patching_loop(tiny_sst2_set):
    """Every head's score against a loop that patches one head's z at q with its clean mean in a full forward."""
    model, prompts, lids = tiny_sst2_set
    clean = make_icl_set(model, "sst2", 42, 4)
    bad = shuffled_label_set(model, clean, seed=0)
    assert [p.gold for p in bad.prompts] == [p.gold for p in clean.prompts]
    got = fv_scores(model, clean.prompts, bad.prompts, lids)
    mean = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head)
    for p in clean.prompts:
        _, c = model.run_with_cache(p.tokens[None], names_filter=lambda n: n.endswith("hook_z"))
        mean += torch.stack([c[f"blocks.{l}.attn.hook_z"][0, p.q] for l in range(model.cfg.n_layers)])
    mean /= len(clean.prompts)
    torch.testing.assert_close(mean_z_at_q(model, clean.prompts), mean, atol=1e-5, rtol=1e-4)
    for i, p in enumerate(bad.prompts[:2]):
        y = lids[p.gold]
        base = model(p.tokens[None])[0, p.q].softmax(-1)[y]
        for l in range(model.cfg.n_layers):
            for h in range(model.cfg.n_heads):
                def patch(z, hook, l=l, h=h):
                    z = z.clone()
                    z[0, p.q, h] = mean[l, h]
                    return z
                with model.hooks(fwd_hooks=[(f"blocks.{l}.attn.hook_z", patch)]):
                    pr = model(p.tokens[None])[0, p.q].softmax(-1)[y]
                assert got[i, l, h].item() == pytest.approx((pr - base).item(), abs=1e-5)
    # the shared-prefix path equals full prompts
    torch.testing.assert_close(fv_scores(model, clean.prompts, bad.prompts, lids, shared=False), got,
                               atol=1e-5, rtol=1e-4)


def test_patching_a_heads_own_mean_into_the_clean_prompt_of_one_changes_nothing(tiny_sst2_set):
    """Identity: with one clean prompt, its own z at q is the mean; patching it back into itself is a no-op."""
    model, prompts, lids = tiny_sst2_set
    got = fv_scores(model, prompts[:1], prompts[:1], lids)
    assert got.abs().max() < 1e-5
    L, H = model.cfg.n_layers, model.cfg.n_heads
    lp = ablated_last_logprobs(model, prompts[0].tokens, torch.zeros(1, L, H), None)
    assert lp.shape == (1, model.cfg.d_vocab)


def test_top_heads_and_overlap():
    s = torch.tensor([[0.1, 0.9], [0.5, 0.9]])
    assert top_heads(s, 3) == [(0, 1), (1, 1), (1, 0)]
    o = overlap([(0, 1), (1, 1)], [(1, 1), (1, 0)], n_heads=4)
    assert o["shared"] == [(1, 1)] and o["n_shared"] == 1 and o["jaccard"] == pytest.approx(1 / 3)
    assert o["chance"] == 1.0  # two random pairs among 4 heads share 2 * 2 / 4 on average
    with pytest.raises(ValueError, match="heads"):
        top_heads(s, 5)


# ------------------------------------------------------------------------------------------------ at scale


def _claim(key, verdict):
    from helpers.study.claims import claim
    from helpers.study.stats import Interval

    return claim(key, Interval(0.1, 0.0, 0.2, 1, 4), verdict, "test")


def test_account_verdicts_hand_cases():
    from helpers.study.challengers_report import account_checks, account_table

    def run(iso, flows):  # iso: {class: verdict}; flows: {(class, "gathers"/"is_read"): verdict}
        return account_checks([_claim(f"10.{c}_isolation", v) for c, v in iso.items()]
                              + [_claim(f"10.{c}_{d}", v) for (c, d), v in flows.items()])

    label_wins = {(c, d): "does not replicate" for c in ("forerunner", "template") for d in ("gathers", "is_read")}
    got = run({"label": "replicates", "forerunner": "inconclusive", "template": "does not replicate"}, label_wins)
    assert got["label"] == {"isolation": "replicates", "flows": "holds", "causal": "not tested",
                            "checks": "supported", "account": "power not recorded", "counted": "0 of 2"}
    assert got["forerunner"]["flows"] == "fails" and got["forerunner"]["checks"] == "inconclusive"
    assert got["template"]["checks"] == "not supported"
    mixed = {**label_wins, ("template", "gathers"): "replicates", ("template", "is_read"): "replicates"}
    got = run({"label": "replicates", "forerunner": "replicates", "template": "replicates"}, mixed)
    assert got["label"]["flows"] == "fails" and got["label"]["checks"] == "partly"
    assert got["template"]["checks"] == "supported" and got["forerunner"]["checks"] == "partly"
    columns = list(account_table([_claim(f"10.{c}_isolation", "replicates") for c in ("label", "forerunner", "template")]
                                 + [_claim(f"10.{c}_{d}", v) for (c, d), v in mixed.items()]).columns)
    assert columns[-3:] == ["the paper's checks' verdict", "informative checks", "verdict (informative checks only)"]
    with pytest.raises(ValueError, match="lack"):
        account_checks([_claim("10.label_isolation", "replicates")])
    # the causal check counts in the label words' verdict when it is informative, never in the paper's checks' verdict
    from helpers.study.power_report import Power
    from helpers.study.stats import Interval

    sure = Interval(1.0, 0.7, 1.0, 1, 10)
    power = {k: Power(k, k, "", {}, {}, sure, sure) for k in ("10.label_isolation", "10.label_read_causal")}
    claims = ([_claim(f"10.{c}_isolation", "replicates") for c in ("label", "forerunner", "template")]
              + [_claim(f"10.{c}_{d}", v) for (c, d), v in label_wins.items()])
    got = account_checks(claims + [_claim("10.label_read_causal", "does not replicate")], power)["label"]
    assert got["causal"] == "label_read_causal: does not replicate" and got["checks"] == "supported"
    assert got["account"] == "partly" and got["counted"] == "2 of 3"
    # the gathering check too, each counted on its own power
    power["10.label_gathers_causal"] = Power("10.label_gathers_causal", "", "", {}, {}, sure, sure)
    both = claims + [_claim("10.label_read_causal", "does not replicate"), _claim("10.label_gathers_causal", "replicates")]
    got = account_checks(both, power)["label"]
    assert got["causal"] == "label_read_causal: does not replicate; label_gathers_causal: replicates"
    assert got["account"] == "partly" and got["counted"] == "3 of 4"


def test_class_flow_intervals_pair_the_differences():
    """Synthetic flows: a challenger exactly 1 above the label words on every input gives a difference of exactly 1."""
    from helpers.experiments.saliency_classes import DIRECTIONS
    from helpers.protocols.saliency_classes import class_flow_intervals

    n, L = 6, 6
    x = torch.rand(n, L, len(DIRECTIONS), len(FLOW_CLASSES))
    x[..., FLOW_CLASSES.index("forerunner")] = x[..., FLOW_CLASSES.index("label")] + 1
    runs = {("sst2", 1): x, ("sst2", 2): x.clone()}
    ivs = class_flow_intervals(runs, L)
    for d in DIRECTIONS:
        iv = ivs[(d, "forerunner - label")]
        assert (iv.estimate, iv.low, iv.high) == pytest.approx((1.0, 1.0, 1.0))
    x[0, :, :, FLOW_CLASSES.index("template")] = float("nan")  # a prompt without the class: left out, not 0
    assert ivs[("to_q", "template")].n_inputs == 12 and class_flow_intervals(runs, L)[("to_q", "template")].n_inputs == 11


def test_class_loyalty_intervals_hand_case():
    from helpers.core.predict import Predictions
    from helpers.protocols.isolation_classes import class_loyalty_intervals

    def pred(labels):
        logits = torch.nn.functional.one_hot(torch.tensor(labels), 2).float()
        return Predictions(logits, torch.zeros(len(labels), 1, dtype=torch.long), torch.tensor(labels))

    res = {"base": pred([0, 1, 0, 1]),
           ("label", "first"): pred([1, 1, 0, 1]), ("random:label", "first"): pred([0, 1]),  # controls: 2 inputs
           ("template", "first"): pred([0, 1, 0, 1]), ("random:template", "first"): pred([1, 0])}
    ivs = class_loyalty_intervals({("sst2", 1): res})
    assert ivs[("label", "first")].estimate == pytest.approx(0.75)
    assert ivs[("random:template", "first")].estimate == 0.0
    assert ivs[("drop", "label", "first")].estimate == pytest.approx(0.5)  # inputs 0, 1: (1 - 0 + 1 - 1) / 2
    assert ivs[("drop", "template", "first")].estimate == pytest.approx(-1.0)
    assert ivs[("vs label", "template", "first")].estimate == pytest.approx(-0.25)  # label 0.75 - template 1.0


def test_runs_at_smoke_sizes_on_a_tiny_model(tiny_model, tmp_path, monkeypatch):
    from helpers.protocols.isolation_classes import ClassIsolationSizes, class_isolation_runs
    from helpers.protocols.saliency_classes import ClassSaliencySizes, class_saliency_runs
    from helpers.study.profile_table import PROFILES

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    fl = class_saliency_runs(tiny_model, ["sst2"], ClassSaliencySizes(seeds=(42,), n=2, batch_size=2), progress=False)
    assert fl[("sst2", 42)].shape == (2, tiny_model.cfg.n_layers, 2, len(FLOW_CLASSES))
    sizes = ClassIsolationSizes(seeds=(42,), n=3, random_n=2, k=1, batch_size=4)
    iso = class_isolation_runs(tiny_model, ["sst2"], sizes, classes=("label", "template"), progress=False)
    r = iso[("sst2", 42)]
    assert r[("label", "first")].label_logits.shape[0] == 3 and r[("random:template", "last")].label_logits.shape[0] == 2
    again = class_isolation_runs(tiny_model, ["sst2"], sizes, classes=("label", "template"), progress=False)
    torch.testing.assert_close(again[("sst2", 42)][("template", "last")].label_logits, r[("template", "last")].label_logits)
    with pytest.raises(TypeError, match="class_isolation_sizes"):
        class_isolation_runs(tiny_model, ["sst2"], {"n": 3})
    from helpers.protocols.isolation_classes import class_isolation_sizes
    from helpers.protocols.saliency_classes import class_saliency_sizes

    assert class_isolation_sizes(PROFILES["default"]).seeds == PROFILES["default"].seeds[:2]
    assert class_saliency_sizes(PROFILES["paper"]).n == PROFILES["paper"].n_saliency


def test_fv_runs_score_apart_from_the_ablation_seeds(tiny_model, tmp_path, monkeypatch):
    from helpers.experiments.head_scores import top_share
    from helpers.protocols.head_scores import HeadScoreSizes, fv_runs, head_score_sizes, scoring_seed
    from helpers.study.profile_table import PROFILES

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sizes = HeadScoreSizes(seeds=(42, 43), n_eval=2, n_attr=2, frac=0.02, batch_size=2)
    assert scoring_seed(sizes) not in sizes.seeds
    got = fv_runs(tiny_model, ["sst2"], sizes)["sst2"]
    assert got.shape == (tiny_model.cfg.n_layers, tiny_model.cfg.n_heads)
    torch.testing.assert_close(fv_runs(tiny_model, ["sst2"], sizes)["sst2"], got)  # from the store
    assert top_share(tiny_model, 0.02) == 4 and top_share(tiny_model, 0.5) == 6  # 12 heads
    assert head_score_sizes(PROFILES["smoke"]).seeds == PROFILES["smoke"].seeds[:1]


def test_head_set_intervals_and_claims_hand_case():
    from helpers.protocols.head_scores import head_set_claims, head_set_intervals

    plain = {("sst2", 1): [1, 1, 1, 1]}
    cells = {"fv": {"plain": plain, "set": {("sst2", 1): [0, 0, 0, 0]}, "random": {("sst2", 1): [1, 1, 1, 1]}},
             "induction": {"plain": plain, "set": {("sst2", 1): [1, 1, 1, 1]}, "random": {("sst2", 1): [1, 1, 1, 1]}}}
    ivs = head_set_intervals(cells)
    assert ivs[("fv", "excess")].estimate == 1.0 and ivs[("induction", "excess")].estimate == 0.0
    assert ivs[("fv - induction", "excess")].estimate == 1.0  # induction-ablated 1.0 minus FV-ablated 0.0
    claims = head_set_claims(ivs, 4)
    got = {c.key: c.verdict for c in claims}
    assert got == {"10.fv_heads_ablation": "replicates", "10.induction_heads_ablation": "inconclusive",
                   "10.fv_over_induction": "replicates"}
    from helpers.study.challengers_report import heads_table

    table = heads_table(claims)
    assert list(table["the paper's checks' verdict"]) == ["inconclusive", "supported", "supported"]  # induction, FV, FV over induction
    assert table.index[0].startswith("induction") and table.index[1].startswith("function-vector heads")
    # the foo/bar check, swap-averaged: FV's excess is 0.5 there (half credit per input), induction's below 0
    half = {("sst2", 1): [0.5, 0.5, 0.5, 0.5]}
    foobar = head_set_intervals({"fv": {"plain": plain, "set": half, "random": plain},
                                 "induction": {"plain": plain, "set": plain, "random": {("sst2", 1): [0, 0, 0, 0]}}})
    assert foobar[("fv", "excess")].estimate == 0.5 and foobar[("induction", "excess")].estimate == -1.0
    claims = head_set_claims(ivs, 4, foobar=foobar)
    got = {c.key: c.verdict for c in claims}
    assert got["10.fv_heads_foobar"] == "replicates" and got["10.induction_heads_foobar"] == "does not replicate"
    table = heads_table(claims)
    assert list(table["the paper's checks' verdict"]) == ["inconclusive", "supported", "supported"]  # induction: inconclusive + fails
    assert table.loc[table.index[0], "foo/bar, swap-averaged: vs as many random heads"] == "does not replicate"


def test_head_verdicts_from_two_checks():
    from helpers.study.challengers_report import checks_verdict

    r, n, i = "replicates", "does not replicate", "inconclusive"
    assert [checks_verdict(c) for c in ([r, r], [r, i], [r, n], [n, n], [n, i], [i, i], [r], [n], [i])] == [
        "supported", "partly", "partly", "not supported", "inconclusive", "inconclusive", "supported",
        "not supported", "inconclusive"]


def test_head_set_intervals_at_q():
    from helpers.protocols.head_scores import head_set_intervals

    one, zero = {("t", 1): [1, 1, 1]}, {("t", 1): [0, 0, 0]}
    ivs = head_set_intervals({"fv": {"plain": one, "set": one, "random": one, "set@q": zero, "random@q": one}})
    assert ivs[("fv", "excess@q")].estimate == 1.0 and ivs[("fv", "excess")].estimate == 0.0
    assert ("fv - induction", "excess") not in ivs


# ------------------------------------------------------------------------------------------------ head sets ablated


def test_several_sets_ablated_together_equal_each_set_ablated_alone(tiny_sst2_set):
    """sets_ablation_conditions shares the plain run across sets: every set's conditions are those of
    ablation_conditions for that set alone (same random draw, same inputs), and the plain run is the same."""
    from helpers.experiments.head_ablation import ALL_POSITIONS, ablation_conditions, sets_ablation_conditions

    model, prompts, label_ids = tiny_sst2_set
    sets = {"a": [(0, 0), (1, 1)], "b": [(model.cfg.n_layers - 1, 0)]}
    together = sets_ablation_conditions(model, prompts, label_ids, sets, seed=3, batch_size=3)
    for name, heads in sets.items():
        alone = ablation_conditions(model, prompts, label_ids, heads, seed=3, batch_size=2)
        assert together["random_heads"][name] == alone["random_heads"]
        c = alone["correct"]
        assert together["correct"]["plain"] == c["plain"]
        assert together["correct"][(name, "set")] == c["in-context heads ablated" + ALL_POSITIONS]
        assert together["correct"][(name, "random")] == c["random heads ablated" + ALL_POSITIONS]
        assert together["correct"][(name, "set@q")] == c["in-context heads ablated"]
        assert together["correct"][(name, "random@q")] == c["random heads ablated"]
    with pytest.raises(ValueError, match="non-empty dict"):
        sets_ablation_conditions(model, prompts, label_ids, {}, seed=3)


def test_ablations_at_q_on_the_q_row_equal_whole_suffixes(tiny_sst2_set, monkeypatch):
    """The plain run and the ablations at q run as one token per prompt after its cache up to q; where a sliding
    window rules that out, each condition runs its whole suffixes. Both give the same logits, every condition."""
    import helpers.experiments.head_ablation as ha

    model, prompts, label_ids = tiny_sst2_set
    sets = {"a": [(0, 0), (1, 1)], "b": [(model.cfg.n_layers - 1, 0)]}
    fast, rnd = ha._sets_predictions(model, prompts, label_ids, sets, 3, 3, True)
    monkeypatch.setattr(ha, "q_row_fits", lambda *a: False)
    slow, rnd_slow = ha._sets_predictions(model, prompts, label_ids, sets, 3, 2, True)
    assert rnd == rnd_slow and list(fast) == list(slow)
    for key in fast:
        torch.testing.assert_close(fast[key].label_logits, slow[key].label_logits, atol=1e-4, rtol=1e-4)
        assert torch.equal(fast[key].pred, slow[key].pred)


def test_an_empty_set_changes_nothing_and_sets_cells_lists_every_condition(tiny_sst2_set):
    from helpers.experiments.head_ablation import SET_CONDITIONS, sets_ablation_conditions
    from helpers.protocols.head_ablation import sets_cells

    model, prompts, label_ids = tiny_sst2_set
    r = sets_ablation_conditions(model, prompts, label_ids, {"none": []}, seed=0, batch_size=4)
    plain = r["correct"]["plain"]
    assert all(r["correct"][("none", c)] == plain for c in SET_CONDITIONS)  # nothing ablated: the plain run
    cells = sets_cells({("sst2", 42): r})
    assert list(cells) == ["none"] and list(cells["none"]) == ["plain", *SET_CONDITIONS]
    assert cells["none"]["set"][("sst2", 42)] == plain


def test_swap_averaged_hand_case_and_mismatches():
    from helpers.experiments.head_ablation import swap_averaged

    a = {("sst2", 1): {"correct": {"plain": [1, 0, 1], ("fv", "set"): [0, 0, 1]}}}
    b = {("sst2", 1): {"correct": {"plain": [0, 0, 1], ("fv", "set"): [1, 1, 1]}}}
    got = swap_averaged(a, b)[("sst2", 1)]["correct"]
    assert got == {"plain": [0.5, 0.0, 1.0], ("fv", "set"): [0.5, 0.5, 1.0]}  # a word preference alone: 0.5
    with pytest.raises(ValueError, match="same \\(task, seed\\)"):
        swap_averaged(a, {("sst2", 2): b[("sst2", 1)]})
    with pytest.raises(ValueError, match="same conditions and inputs"):
        swap_averaged(a, {("sst2", 1): {"correct": {"plain": [0, 0], ("fv", "set"): [1, 1, 1]}}})


def test_head_sets_runs_are_stored_and_the_foobar_mappings_are_kept_apart(tiny_model, tmp_path, monkeypatch):
    """The ordinary-label runs come back from the store; the foo/bar mapping and its swap run the same queries
    with the label words exchanged and are stored apart (the store key names the words), so the swap's result is
    never the mapping's."""
    from helpers.core.prompts import make_icl_set as icl_set
    from helpers.core.unrelated import EvalSizes, eval_set, unrelated_task
    from helpers.experiments.head_ablation import sets_ablation_conditions
    from helpers.protocols.head_ablation import head_sets_foobar_runs, head_sets_runs

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sets = {"a": [(0, 0)]}
    first = head_sets_runs(tiny_model, ["sst2"], sets, EvalSizes(n_eval=3, seeds=[42], k_per_class=1, batch_size=3))
    assert head_sets_runs(tiny_model, ["sst2"], sets, EvalSizes(n_eval=3, seeds=[42], k_per_class=1, batch_size=2)) == first
    s = icl_set(tiny_model, "sst2", 42, 3)
    assert first[("sst2", 42)] == sets_ablation_conditions(tiny_model, s.prompts, s.label_ids, sets, 42, 3)
    sizes = EvalSizes(n_eval=3, seeds=[42], k_per_class=1, batch_size=3)
    runs = head_sets_foobar_runs(tiny_model, ["sst2", "trec"], sets, sizes)  # trec is not binary
    assert list(runs) == ["foo/bar", "bar/foo"] and list(runs["foo/bar"]) == [("sst2", 42)]
    for mapping, words in (("foo/bar", ("foo", "bar")), ("bar/foo", ("bar", "foo"))):
        ps = eval_set(tiny_model, unrelated_task("sst2", (0, 1), words), 42, sizes)
        assert runs[mapping][("sst2", 42)] == sets_ablation_conditions(tiny_model, ps.prompts, ps.label_ids, sets, 42, 3)
    fb = eval_set(tiny_model, unrelated_task("sst2", (0, 1), ("foo", "bar")), 42, sizes)
    bf = eval_set(tiny_model, unrelated_task("sst2", (0, 1), ("bar", "foo")), 42, sizes)
    assert [p.gold for p in fb.prompts] == [p.gold for p in bf.prompts] and fb.label_ids == bf.label_ids[::-1]
    stored = [p for p in tmp_path.rglob("*.pt") if p.parent.name == "head_sets_ablation"]
    assert len(stored) == 3  # the ordinary labels, foo/bar and bar/foo: three entries, none shared


def test_a_class_without_a_control_of_as_many_content_tokens_is_not_comparable(tiny_sst2_set):
    """A task of very short texts can hold fewer content tokens than template tokens: no control of as many exists,
    and the claim says so instead of drawing fewer."""
    from helpers.core.predict import Predictions
    from helpers.experiments.isolation_classes import control_possible
    from helpers.protocols.isolation_classes import class_isolation_claims, class_loyalty_intervals

    _, prompts, _ = tiny_sst2_set
    assert control_possible(prompts, "label")
    p = prompts[0]
    short = type(p)(**{**p.__dict__, "text_spans": []})
    short.kinds = ["format" if k == "text" else k for k in p.kinds]
    short.format_pos = sorted(set(p.format_pos) | {i for i, k in enumerate(p.kinds) if k == "text"})
    assert not control_possible([short], "template")

    def pred(labels):
        logits = torch.nn.functional.one_hot(torch.tensor(labels), 2).float()
        return Predictions(logits, torch.zeros(len(labels), 1, dtype=torch.long), torch.tensor(labels))

    res = {"base": pred([0, 1]), **{(c, w): pred([0, 1]) for c in ("label", "random:label", "forerunner",
                                                                    "random:forerunner", "template")
                                    for w in ("first", "last")}}
    claims = {c.key: c for c in class_isolation_claims(class_loyalty_intervals({("sst2", 1): res}), k=1)}
    assert claims["10.template_isolation"].verdict == "not comparable" and claims["10.template_isolation"].ours is None
    assert claims["10.label_isolation"].verdict == "inconclusive"  # 0 drop: the interval is [0, 0]


# ------------------------------------------------------------------------------------------------ a label word's tokens


@pytest.fixture(scope="module")
def phrase_sets(tiny_models):
    """The phrase-label task (every label word two or three tokens) on each tiny model: 1 demonstration per class,
    3 inputs."""
    import warnings

    from helpers.core.tasks import LabelWordWarning
    from helpers.study.profiles import SPAN_TASK

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return {k: (m, make_icl_set(m, SPAN_TASK, 42, 3)) for k, m in tiny_models.items()}


def test_the_phrase_task_has_multi_token_label_words_with_distinct_first_tokens():
    from helpers.core.offline_models import gpt2_tokenizer
    from helpers.core.tasks import get_task, load_split
    from helpers.study.profiles import SPAN_TASK

    task, tok = get_task(SPAN_TASK), gpt2_tokenizer()
    ids = [tok(task.label_text(c), add_special_tokens=False)["input_ids"] for c in range(task.n_classes)]
    assert all(len(i) >= 2 for i in ids) and len({i[0] for i in ids}) == task.n_classes
    assert len(load_split(task, "test")) == len(load_split("agnews", "test"))  # AGNews's rows, checksummed


def test_label_onehot_all_marks_every_token_of_each_word_and_first_only_the_first(phrase_sets):
    from helpers.core.prompts import label_class_onehot

    _, s = phrase_sets["gpt2"]
    p = s.prompts[0]
    first, every = label_class_onehot([p], len(p), len(s.label_ids)), label_class_onehot([p], len(p), 4, "all")
    for (a, b), c in zip(p.label_spans, p.label_class):
        assert b - a >= 2 and every[0, a:b, c].tolist() == [1.0] * (b - a) and first[0, a:b, c].tolist() == [1.0] + [0.0] * (b - a - 1)
    assert every.sum() == sum(b - a for a, b in p.label_spans) and first.sum() == p.n_demos
    with pytest.raises(ValueError, match="span must be 'first'"):
        label_class_onehot([p], len(p), 4, "last")


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_label_attention_over_all_tokens_equals_the_hand_sum_shared_and_full(phrase_sets, kind):
    """span="all": the attention from q to every token of each class's label words, summed over heads, as read by
    hand from run_with_cache; the shared-prefix run equals full prompts; span="first" reads the first tokens."""
    from helpers.experiments.aucroc import label_attention

    model, s = phrase_sets[kind]
    every, pred = label_attention(model, s.prompts, s.label_ids, batch_size=2, span="all")
    full, pred_full = label_attention(model, s.prompts, s.label_ids, batch_size=3, span="all", shared=False)
    first, _ = label_attention(model, s.prompts, s.label_ids, batch_size=2)
    torch.testing.assert_close(every, full, atol=1e-5, rtol=1e-4)
    assert torch.equal(pred.pred, pred_full.pred)
    for i, p in enumerate(s.prompts):
        _, cache = model.run_with_cache(p.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
        for l in range(model.cfg.n_layers):
            row = cache["pattern", l][0, :, p.q].sum(0)  # [key]
            for c in range(len(s.label_ids)):
                spans = [(a, b) for (a, b), cc in zip(p.label_spans, p.label_class) if cc == c]
                torch.testing.assert_close(every[i, l, c], sum((row[a:b].sum() for a, b in spans), torch.tensor(0.0)),
                                           atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(first[i, l, c], sum((row[a] for a, _ in spans), torch.tensor(0.0)),
                                           atol=1e-5, rtol=1e-4)


def test_label_attention_all_equals_first_when_every_word_is_one_token(tiny_sst2_set):
    from helpers.experiments.aucroc import label_attention

    model, prompts, label_ids = tiny_sst2_set
    assert all(b - a == 1 for p in prompts for a, b in p.label_spans)
    every, _ = label_attention(model, prompts, label_ids, batch_size=4, span="all")
    first, _ = label_attention(model, prompts, label_ids, batch_size=4)
    torch.testing.assert_close(every, first, atol=1e-5, rtol=1e-4)


def test_anchor_keep_first_drops_exactly_the_later_tokens_of_each_label_word(phrase_sets, tiny_sst2_set):
    from helpers.experiments.compression import anchor_keep

    _, s = phrase_sets["gpt2"]
    p = s.prompts[0]
    later = {i for a, b in p.label_spans for i in range(a + 1, b)}
    assert later and set(anchor_keep(p)) - set(anchor_keep(p, "first")) == later
    assert set(anchor_keep(p, "first")) >= set(p.label_pos)
    _, prompts, _ = tiny_sst2_set
    assert anchor_keep(prompts[0], "first") == anchor_keep(prompts[0])  # one-token label words: nothing to drop


def test_span_runs_match_the_methods_they_extend_and_come_back_from_the_store(tiny_model, tmp_path, monkeypatch):
    """Hidden_anchor with all label tokens is notebook 05's Hidden_anchor; the AUCROC reads are label_attention's;
    both come back from the store; the intervals and claims have the documented keys."""
    import warnings

    from helpers.core.tasks import LabelWordWarning
    from helpers.experiments.aucroc import label_attention
    from helpers.experiments.compression import run_compression
    from helpers.protocols.aucroc_span import (
        span_aucroc_claim,
        span_aucroc_curves,
        span_aucroc_interval,
        span_aucroc_runs,
    )
    from helpers.protocols.compression_span import span_anchor_claim, span_anchor_intervals, span_anchor_runs
    from helpers.study.profiles import SPAN_TASK, LabelSpanSizes

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sizes = LabelSpanSizes(SPAN_TASK, (42,), 3, 2, 1, 3)
    runs = span_anchor_runs(tiny_model, sizes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        s = make_icl_set(tiny_model, SPAN_TASK, 42, 3)
        ref = run_compression(tiny_model, s, random_top_draws=1, batch_size=2)  # its Text_anchor prompts warn too
    assert runs[42]["correct"]["all"] == ref.per_input["Hidden_anchor"]["correct"]
    assert runs[42]["correct"]["ICL"] == ref.per_input["ICL"]["correct"]
    assert set(runs[42]["kept"]["all"]) - set(runs[42]["kept"]["first"]) == {
        i for a, b in s.prompts[0].label_spans for i in range(a + 1, b)}
    assert span_anchor_runs(tiny_model, sizes) == runs  # from the store
    ivs = span_anchor_intervals(runs)
    assert span_anchor_claim(ivs).key == "10.span_hidden_anchor"
    auc = span_aucroc_runs(tiny_model, sizes)
    every, pred = label_attention(tiny_model, s.prompts, s.label_ids, 3, span="all")
    torch.testing.assert_close(auc[42]["all"], every) and torch.testing.assert_close(auc[42]["pred"], pred.pred)
    assert set(span_aucroc_curves(auc)["span"]) == {"first", "all"}
    iv = span_aucroc_interval(auc, n_boot=50)
    c = span_aucroc_claim(iv)
    assert c.key == "10.span_aucroc" and (iv is not None or c.missing)
    with pytest.raises(TypeError, match="label_span_sizes"):
        span_anchor_runs(tiny_model, {"seeds": (42,)})


def test_span_aucroc_interval_hand_cases():
    from helpers.protocols.aucroc_span import span_aucroc_claim, span_aucroc_interval

    g = torch.Generator().manual_seed(0)
    scores = torch.rand(12, 4, 2, generator=g)
    pred = torch.tensor([0, 1] * 6)
    same = {1: {"first": scores, "all": scores.clone(), "pred": pred}}
    iv = span_aucroc_interval(same, n_boot=50)
    assert iv.estimate == iv.low == iv.high == 0.0
    perfect = scores.clone()
    perfect[:, :, 1] = pred[:, None].float()  # attention to class 1 exactly when class 1 is predicted: AUC 1
    better = span_aucroc_interval({1: {"first": scores, "all": perfect, "pred": pred}}, n_boot=50)
    assert better.low > 0 and span_aucroc_claim(better).verdict == "replicates"
    one_class = {1: {"first": scores, "all": scores, "pred": torch.zeros(12, dtype=torch.long)}}
    assert span_aucroc_interval(one_class, n_boot=50) is None
    assert span_aucroc_claim(None).verdict == "inconclusive" and span_aucroc_claim(None).ours is None


def test_span_isolation_drop_hand_case():
    """Per input: drop(all) = control loyalty - all-tokens loyalty; drop(first) likewise; the span drop is their
    difference, paired."""
    from helpers.core.predict import Predictions
    from helpers.protocols.isolation_classes import class_loyalty_intervals, span_isolation_claim

    def pred(labels):
        logits = torch.nn.functional.one_hot(torch.tensor(labels), 2).float()
        return Predictions(logits, torch.zeros(len(labels), 1, dtype=torch.long), torch.tensor(labels))

    base = [0, 1, 0, 1]
    res = {"base": pred(base)}
    for w in ("first", "last"):
        res[("label", w)] = pred([1, 0, 1, 0])  # all tokens isolated: every prediction moves
        res[("label_first", w)] = pred([0, 1, 0, 1])  # the first token isolated: none moves
        res[("random:label", w)] = pred([0, 1])  # controls, on the first 2 inputs: loyal
        res[("random:label_first", w)] = pred([0, 1])
    ivs = class_loyalty_intervals({("agnews_phrases", 1): res})
    assert ivs[("drop", "label", "first")].estimate == 1.0 and ivs[("drop", "label_first", "first")].estimate == 0.0
    assert ivs[("span drop", "first")].estimate == 1.0
    assert span_isolation_claim(ivs, 1).verdict == "replicates"
    assert span_isolation_claim({}, 1).verdict == "not comparable"


def test_label_first_reuses_label_only_when_every_label_word_is_one_token(tiny_model, tmp_path, monkeypatch):
    """With one-token label words the label_first conditions are the label ones (same rows, same draws); the
    reuse gives what running them gives. With phrase labels they run on their own and differ in rows."""
    from helpers.protocols.isolation_classes import ClassIsolationSizes, class_isolation_runs
    from helpers.study.profiles import SPAN_TASK

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sizes = ClassIsolationSizes(seeds=(42,), n=3, random_n=2, k=1, batch_size=3)
    s = make_icl_set(tiny_model, "sst2", 42, 3)
    got = class_isolation_runs(tiny_model, ["sst2"], sizes, classes=("label", "label_first"), progress=False)[("sst2", 42)]
    for c in ("label_first", "random:label_first"):
        for w in ("first", "last"):
            ps = s.prompts[:2] if c.startswith("random:") else s.prompts
            ref = run_class_isolation(tiny_model, ps, s.label_ids, c, w, 1, seed=42, batch_size=2)
            torch.testing.assert_close(got[(c, w)].label_logits, ref.label_logits, atol=1e-5, rtol=1e-4)
    spans = class_isolation_runs(tiny_model, [SPAN_TASK], sizes, classes=("label", "label_first"), progress=False)
    r = spans[(SPAN_TASK, 42)]
    assert r[("label", "first")] is not r[("label_first", "first")]


# ------------------------------------------------------------------------------------------------ the verdict table


def _claims_10(verdict: str) -> list:
    from helpers.study.claims import claim
    from helpers.study.paper import CLAIMS_10
    from helpers.study.stats import Interval

    iv = Interval(0.1, 0.05, 0.2, 1, 4)
    return [claim(k, iv, verdict, "criterion") for k in CLAIMS_10]


def test_verdicts_reach_results_and_the_readme_table(tmp_path):
    """Every account gets its verdict from the claims; RESULTS prints them under notebook 10 and the README's
    verdict block renders one column per record that ran notebook 10."""
    import json

    from helpers.study.challengers_report import ACCOUNTS, HEAD_ACCOUNTS, verdicts
    from helpers.study.record import Record, verdict_table
    from helpers.study.report import build_report

    found = verdicts(_claims_10("replicates"), which="checks")  # the paper's checks' verdict
    assert set(ACCOUNTS.values()) <= set(found) and set(HEAD_ACCOUNTS.values()) <= set(found)
    assert found[ACCOUNTS["template"]] == "supported" and found[HEAD_ACCOUNTS["fv"]] == "supported"
    assert found[ACCOUNTS["label"]] == "partly"  # its flows check needs both challengers to fail
    assert set(verdicts(_claims_10("replicates")).values()) == {"power not recorded"}  # no power, no verdict
    assert verdicts([]) == {}
    with pytest.raises(ValueError, match="which must be"):
        verdicts([], which="bogus")
    rec = Record("google/gemma-3-270m", "gemma-3-270m", "default", "default", "abc1234", "2026-11-27", {},
                 tuple(_claims_10("does not replicate")))
    table = verdict_table([rec])
    assert "| account (notebook 10) | Gemma 3 270M |" in table
    assert "**power not recorded** (0 of 2 checks informative; the paper's checks: not supported)" in table
    assert "No run of notebook 10" in verdict_table([])
    from helpers.study.results import run_key

    folder = tmp_path / "gemma-3-270m" / run_key("smoke", ("sst2",), "sst2") / "metrics"
    folder.mkdir(parents=True)
    (folder / "10_anchors_and_challengers.json").write_text(json.dumps(
        {"claims": [c.to_json(3) for c in _claims_10("replicates")]}))
    md = build_report(tmp_path, "smoke", ["google/gemma-3-270m"], tasks=("sst2",), own_task="sst2").read_text()
    assert "Verdict per account" in md and f"| {HEAD_ACCOUNTS['induction']} | power not recorded | supported |" in md
    assert "its checks on the controls" in md and "| not recorded |" in md  # notebook 09 has not run here


# ------------------------------------------------------------------------------------------------ the positive control


@pytest.fixture(scope="module")
def control_model():
    from helpers.core.models import load_model

    return load_model("control")


def test_shuffled_labels_permute_each_sequences_labels_and_keep_the_rest():
    from helpers.core.controls.model import ControlTask, control_prompts, shuffled_labels

    cp = control_prompts(ControlTask(), 16, 3)
    sh = shuffled_labels(cp, 7)
    assert shuffled_labels(cp, 7).prompts[0].tokens.tolist() == sh.prompts[0].tokens.tolist()  # seeded
    for a, b in zip(cp.prompts, sh.prompts):
        assert sorted(a.label_class) == sorted(b.label_class) and a.label_class != b.label_class
        assert b.tokens[b.label_pos].tolist() == [cp.label_ids[c] for c in b.label_class]
        keep = [i for i in range(len(a)) if i not in a.label_pos]
        assert a.tokens[keep].tolist() == b.tokens[keep].tolist()  # BOS, items and the query stay
        assert a.gold == b.gold and a.q == b.q and b.text.split(" ")[1] == f"L{b.label_class[0]}"
    assert cp.prompts[0].label_class != sh.prompts[0].label_class  # the input is not changed in place


def test_content_flows_hand_values_and_the_label_column_is_unchanged(tiny_sst2_set):
    """``classes=CONTROL_CLASSES``: content's ``into`` is the mean flow from earlier content into content, its
    ``to_q`` the mean flow from content into q (hand sums on an arange saliency); the label words' columns equal
    those of the default classes on a real backward pass (three architectures)."""
    from helpers.experiments.saliency_classes import CONTROL_CLASSES

    model, prompts, lids = tiny_sst2_set
    p = prompts[0]
    n = len(p)
    sal = torch.arange(n * n, dtype=torch.float32).view(1, 1, n, n)
    got = class_flow_scores(sal, [p], CONTROL_CLASSES)[0, 0]
    pos = position_classes(p)
    for c, cls in enumerate(CONTROL_CLASSES):
        cells = [float(sal[0, 0, i, j]) for i in pos[cls] for j in pos["content"] if j < i]
        assert got[0, c].item() == pytest.approx(np.mean(cells))
        assert got[1, c].item() == pytest.approx(np.mean([float(sal[0, 0, p.q, i]) for i in pos[cls]]))
    both = class_flows(model, prompts[:2], lids, batch_size=2, classes=CONTROL_CLASSES)
    default = class_flows(model, prompts[:2], lids, batch_size=1)
    torch.testing.assert_close(both[..., 0], default[..., FLOW_CLASSES.index("label")])


def test_control_flow_intervals_pair_label_and_content():
    from helpers.experiments.saliency_classes import CONTROL_CLASSES, DIRECTIONS
    from helpers.protocols.saliency_classes import control_flow_claims, control_flow_intervals

    x = torch.rand(5, 2, len(DIRECTIONS), len(CONTROL_CLASSES))
    x[..., 0] = x[..., 1] + 0.5  # the label words 0.5 above content on every input, layer and direction
    ivs = control_flow_intervals({("control", 1): x, ("control", 2): x.clone()}, 2)
    for d in DIRECTIONS:
        assert (ivs[d].estimate, ivs[d].low, ivs[d].high) == pytest.approx((0.5, 0.5, 0.5))
    claims = control_flow_claims(ivs, "hand")
    assert [c.key for c in claims] == ["10.control_label_gathers", "10.control_label_is_read"]
    assert {c.verdict for c in claims} == {"replicates"}


def test_control_isolation_runs_are_the_class_isolation_of_each_sequence(control_model):
    """On the control: the label condition is run_class_isolation's, one sequence at a time equals all at once, its
    control isolates as many content tokens (all 8 items: 8 labels, 8 items), and the claim follows the drop."""
    from helpers.core.controls.model import control_prompts, control_task
    from helpers.protocols.isolation_classes import (
        class_loyalty_intervals,
        control_isolation_claim,
        control_isolation_runs,
    )

    cp = control_prompts(control_task(control_model), 6, 0)
    runs = control_isolation_runs(control_model, {0: cp}, k=1)
    res = runs[("control", 0)]
    direct = run_class_isolation(control_model, cp.prompts, cp.label_ids, "label", "first", 1, seed=0)
    torch.testing.assert_close(res[("label", "first")].label_logits, direct.label_logits)
    one = torch.cat([run_class_isolation(control_model, [p], cp.label_ids, "label", "first", 1, seed=0).label_logits
                     for p in cp.prompts])
    torch.testing.assert_close(res[("label", "first")].label_logits, one)
    rows = class_rows(cp.prompts, "random:label", [0], 0)
    assert all(r[0] == position_classes(p)["content"] for r, p in zip(rows, cp.prompts))
    torch.testing.assert_close(res["base"].label_logits, predict(control_model, cp.prompts, cp.label_ids,
                                                                 top_k=0).label_logits)
    assert set(res) == {"base", ("label", "first"), ("label", "last"), ("random:label", "first"),
                        ("random:label", "last")}
    ivs = class_loyalty_intervals(runs)
    c = control_isolation_claim(ivs, 1, "hand")
    assert c.key == "10.control_label_isolation" and c.ours.estimate == pytest.approx(ivs[("drop", "label", "first")].estimate)


def test_an_own_task_report_labels_claims_from_other_tasks_and_says_where_06_and_07_went(tmp_path, monkeypatch):
    """A run on tasks of its own: notebook 10's label-span claims (on SPAN_TASK, whatever the run selects) say
    they are not on the run's tasks, in the summary and under notebook 10; a notebook that studies fixed tasks
    and ran ok names the results folder its claims went to instead of standing in the Runs table without them."""
    import json

    from helpers.protocols.aucroc_span import span_aucroc_claim
    from helpers.study.claims import Claim, report_claims
    from helpers.study.profiles import SPAN_TASK
    from helpers.study.report import build_report, other_tasks
    from helpers.study.results import run_key
    from helpers.study.stats import Interval

    span = span_aucroc_claim(Interval(0.02, -0.01, 0.05, 1, 4), context="tiny")
    assert span.tasks == (SPAN_TASK,) and Claim.from_json(span.to_json()).tasks == (SPAN_TASK,)
    assert other_tasks((SPAN_TASK,), ("sst2",)).startswith(" (on AGNews") and other_tasks((), ("sst2",)) == ""
    assert other_tasks(("sst2",), ("sst2", "trec")) == "" and other_tasks((SPAN_TASK,), None) == ""
    model = "google/gemma-3-270m"
    for name, value in (("ICL_RESULTS_DIR", str(tmp_path)), ("ICL_TASKS", "sst2"), ("ICL_OWN_TASK", "sst2")):
        monkeypatch.setenv(name, value)
    report_claims("10_anchors_and_challengers", [span], show=False, model_name=model, profile="smoke")
    elsewhere = tmp_path / "gemma-3-270m" / run_key("smoke", ("trec",), "sst2") / "metrics"
    elsewhere.mkdir(parents=True)
    (elsewhere / "06_error_diagnosis.json").write_text(json.dumps({"claims": []}))
    runs = {model: {"06_error_diagnosis": {"status": "ok", "seconds": 3.0},
                    "10_anchors_and_challengers": {"status": "ok", "seconds": 9.0}}}
    md = build_report(tmp_path, "smoke", [model], runs=runs, tasks=("sst2",), own_task="sst2").read_text()
    label = other_tasks((SPAN_TASK,), ("sst2",))
    assert md.count(label) == 2, md  # the summary row and the claim's sentence under notebook 10
    assert f"its results are under {run_key('smoke', ('trec',), 'sst2')}, the run of the tasks it studies" in md
    assert (tmp_path / "gemma-3-270m" / run_key("smoke", ("sst2",), "sst2") / "metrics" /
            "10_anchors_and_challengers.json").exists()


def test_the_foobar_rows_name_the_task_they_ran_on_when_no_task_of_the_run_is_binary():
    from helpers.protocols.head_ablation import foobar_measured_on, foobar_tasks
    from helpers.study.claims import claim
    from helpers.study.stats import Interval

    iv = Interval(0.1, 0.0, 0.2, 1, 8)
    claims = [claim("10.incontext_heads_foobar", iv, "inconclusive", "c"), claim("10.label_isolation", iv,
                                                                                 "inconclusive", "c")]
    assert foobar_tasks(["trec"]) == ["sst2"] and foobar_tasks(["sst2", "trec"]) == ["sst2"]
    got = foobar_measured_on(claims, ["trec"])  # an own task of six classes: foo/bar ran on SST-2
    assert got[0].tasks == ("sst2",) and not got[1].tasks
    assert foobar_measured_on(claims, ["sst2"]) == claims  # the run's own task: nothing to name
