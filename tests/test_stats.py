"""Two-level bootstrap intervals and interval verdicts: hand cases, pairing, coverage, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.study.stats import Interval, bootstrap_means, interval_verdict, paired_differences


def test_constant_values_give_a_point():
    iv = bootstrap_means({("a", 1): [0.5] * 10, ("a", 2): [0.5] * 7, ("b", 1): [1.0] * 3, ("b", 2): [1.0] * 4})
    assert iv.estimate == pytest.approx(0.75) and iv.low == pytest.approx(0.75) and iv.high == pytest.approx(0.75)
    assert (iv.n_seeds, iv.n_inputs) == (2, 24)


def test_estimate_is_mean_over_tasks_of_mean_over_seeds():
    cells = {("a", 1): [1, 1, 1, 0], ("a", 2): [0, 0], ("b", 1): [1], ("b", 2): [0, 1]}
    iv = bootstrap_means(cells)
    assert iv.estimate == pytest.approx(((0.75 + 0.0) / 2 + (1.0 + 0.5) / 2) / 2)
    assert iv.low <= iv.estimate <= iv.high


def test_one_seed_matches_the_normal_approximation():
    rng = np.random.default_rng(1)
    v = rng.integers(0, 2, 400)
    iv = bootstrap_means({42: v})
    se = v.std() / np.sqrt(v.size)
    assert iv.high - iv.low == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert iv.n_seeds == 1


def test_seed_variation_widens_the_interval():
    """Inputs identical within a seed but seeds far apart: the spread comes from the seed level."""
    same = bootstrap_means({s: [0.5] * 50 for s in range(5)})
    apart = bootstrap_means({s: [0.1 + 0.2 * s] * 50 for s in range(5)})
    assert same.high - same.low == pytest.approx(0)
    assert apart.high - apart.low > 0.2
    assert apart.estimate == pytest.approx(0.5)


def test_coverage_at_least_nominal():
    """95% intervals of a Bernoulli mean over 3 seeds x 40 inputs cover the truth at least ~95% of the time
    (conservative when the seeds agree: both levels carry the input noise)."""
    rng = np.random.default_rng(7)
    hits = 0
    for rep in range(200):
        cells = {s: rng.random(40) < 0.6 for s in range(3)}
        iv = bootstrap_means(cells, n_boot=800, seed=rep)
        hits += iv.low <= 0.6 <= iv.high
    assert hits / 200 >= 0.9


def test_deterministic_and_paired():
    a = {("t", s): np.arange(10) % 2 for s in (1, 2)}
    b = {("t", s): (np.arange(10) % 2) * 0.5 for s in (1, 2)}
    d = paired_differences(a, b)
    assert bootstrap_means(d, seed=3) == bootstrap_means(d, seed=3)
    # the pairing removes the shared input variation: the contrast's interval is narrower than either side's
    iv_d, iv_a = bootstrap_means(d), bootstrap_means(a)
    assert iv_d.high - iv_d.low < iv_a.high - iv_a.low
    with pytest.raises(ValueError, match="same inputs"):
        paired_differences(a, {k: v[:5] for k, v in b.items()})
    with pytest.raises(ValueError, match="same"):
        paired_differences(a, {("u", 1): [0]})


def test_verdicts_from_intervals():
    assert interval_verdict(Interval(0.3, 0.1, 0.5, 5, 320)) == "replicates"
    assert interval_verdict(Interval(0.3, 0.1, 0.5, 5, 320), direction=-1) == "opposite"
    assert interval_verdict(Interval(0.1, -0.1, 0.3, 5, 320)) == "inconclusive"
    assert interval_verdict(Interval(0.9, 0.82, 0.95, 5, 320), value=0.8) == "replicates"
    with pytest.raises(ValueError):
        interval_verdict(Interval(0, 0, 0, 1, 1), direction=0)


def test_formatting_and_scaling():
    iv = Interval(0.5, 0.4, 0.6, 5, 320)
    assert f"{iv}" == "0.500 [0.400, 0.600]"
    assert f"{iv.scaled(100):.1f}" == "50.0 [40.0, 60.0]"
    assert iv.scaled(-1).low == pytest.approx(-0.6)


@pytest.mark.parametrize("bad", [{}, {1: []}, {1: [0.1, float("nan")]}, {("a", 1): [1], ("b", 2): [1]}, [1, 2]])
def test_bad_input_is_refused(bad):
    with pytest.raises(ValueError):
        bootstrap_means(bad)


def test_pairing_by_ids_keeps_inputs_scored_on_both_sides():
    a = {("t", 1): [1, 0, 1, 1]}
    b = {("t", 1): [0, 0, 1]}
    d = paired_differences(a, b, {("t", 1): [10, 11, 12, 13]}, {("t", 1): [13, 10, 12]})
    np.testing.assert_array_equal(d[("t", 1)], [1 - 0, 1 - 1, 1 - 0])  # ids 10, 12, 13
    with pytest.raises(ValueError, match="no input"):
        paired_differences(a, b, {("t", 1): [1, 2, 3, 4]}, {("t", 1): [5, 6, 7]})


def test_summary_row_renders_an_interval():
    from helpers.study.results import summary_row

    row = summary_row("claim", 0.5, Interval(0.61, 0.55, 0.67, 5, 320), "replicates")
    assert row["ours"] == "0.610 [0.550, 0.670] (95% CI; 5 seed(s), 320 inputs)"


def test_bootstrap_statistic_matches_bootstrap_means_for_a_mean():
    from helpers.study.stats import bootstrap_statistic

    rng = np.random.default_rng(3)
    data = {s: rng.random(50) for s in (1, 2, 3)}

    def mean_stat(sample):
        return float(np.mean([data[s][idx].mean() for s, idx in sample]))

    a = bootstrap_statistic({s: 50 for s in data}, mean_stat, n_boot=2000)
    b = bootstrap_means(data, n_boot=2000)
    assert a.estimate == pytest.approx(b.estimate)
    assert a.low == pytest.approx(b.low, abs=0.02) and a.high == pytest.approx(b.high, abs=0.02)
    with pytest.raises(ValueError, match="undefined"):
        bootstrap_statistic({1: 5}, lambda sample: float("nan"), n_boot=50)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_statistic({}, mean_stat)


def test_bootstrap_statistic_several_statistics_share_resamples():
    from helpers.study.stats import bootstrap_statistic

    rng = np.random.default_rng(5)
    data = {s: rng.random(40) for s in (1, 2)}

    def stats(sample):
        m = float(np.mean([data[s][idx].mean() for s, idx in sample]))
        return {"mean": m, "twice": 2 * m, "never": float("nan")}

    out = bootstrap_statistic({s: 40 for s in data}, stats, n_boot=300)
    assert out["never"] is None
    assert out["twice"].low == pytest.approx(2 * out["mean"].low) and out["twice"].high == pytest.approx(2 * out["mean"].high)


def test_bootstrap_of_means_is_a_function_of_the_paired_means():
    from helpers.study.stats import bootstrap_of_means

    rng = np.random.default_rng(0)
    a = {("t", s): rng.normal(1.0, 0.3, 40) for s in range(4)}
    b = {k: v * 0.5 for k, v in a.items()}
    iv = bootstrap_of_means({"a": a, "b": b}, lambda m: m["b"] / m["a"], n_boot=300)
    # paired: b is exactly half of a input by input, so every resample gives exactly 0.5
    assert iv.estimate == pytest.approx(0.5) and iv.low == pytest.approx(0.5) and iv.high == pytest.approx(0.5)
    one = bootstrap_of_means({"a": a}, lambda m: m["a"], n_boot=2000)
    ref = bootstrap_means(a)
    assert one.estimate == pytest.approx(ref.estimate)
    assert abs(one.low - ref.low) < 0.05 and abs(one.high - ref.high) < 0.05
    with pytest.raises(ValueError, match="paired"):
        bootstrap_of_means({"a": a, "b": {k: v[:-1] for k, v in a.items()}}, lambda m: m["a"])
    with pytest.raises(ValueError, match="at least one group"):
        bootstrap_of_means({}, lambda m: 0.0)


def test_rank_auc_equals_roc_auc_score_with_ties():
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from helpers.core.ranks import rank_auc

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 50).astype(bool)
    s = rng.integers(0, 5, (50, 3)).astype(float)  # many ties
    got = rank_auc(y, s)
    assert np.allclose(got, [roc_auc_score(y, s[:, j]) for j in range(3)])
