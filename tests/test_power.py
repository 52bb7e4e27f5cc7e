"""The checks' power on the two controls (helpers/protocols/power.py, helpers/study/power_report.py): the interval,
the reading rule, the rows from hand-made replicates, every check of notebooks 01-03, 05, 07 and 10 with a row, the
replicate runs on both controls, the records and the tables they render."""

from __future__ import annotations

import json

import pytest

from helpers.study.claims import claim
from helpers.study.paper import CLAIMS
from helpers.study.power_report import (
    CHECKS,
    NEGATIVE,
    NOT_MEASURED,
    POSITIVE,
    Power,
    account_power,
    annotate,
    checked_keys,
    clopper_pearson,
    population_split,
    power_markdown,
    power_rows,
    reading,
)
from helpers.study.stats import Interval

IV = Interval(0.1, 0.05, 0.2, 1, 4)


def _runs(pos: dict[str, list[str]], neg: dict[str, list[str]]) -> dict:
    """Hand-made replicates: ``{control claim key: [verdict of replicate r]}`` per control."""
    def reps(by):
        n = len(next(iter(by.values())))
        return [{k: v[r] for k, v in by.items()} for r in range(n)]

    return {POSITIVE: reps(pos), NEGATIVE: reps(neg)}


def test_clopper_pearson_hand_cases():
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0
    low, high = clopper_pearson(5, 10)
    assert (low, high) == pytest.approx((0.1871, 0.8129), abs=1e-4)  # the textbook value
    assert clopper_pearson(16, 16)[0] == pytest.approx(0.025 ** (1 / 16))  # k = n: (alpha / 2) ** (1 / n)
    assert clopper_pearson(0, 16)[1] == pytest.approx(1 - 0.025 ** (1 / 16))
    for bad in ((3, 2), (-1, 4), (0, 0)):
        with pytest.raises(ValueError, match="k must lie"):
            clopper_pearson(*bad)


def test_rows_count_the_replicates_verdicts_through_the_checks_map():
    pos = {"02.label_first_hurts_most": ["replicates"] * 16, "10.control_label_isolation": ["replicates"] * 15 + ["inconclusive"],
           "07.ablation_at_q": ["inconclusive"] * 16}
    neg = {"02.label_first_hurts_most": ["inconclusive"] * 16, "10.control_label_isolation": ["inconclusive"] * 16,
           "07.ablation_at_q": ["replicates"] * 16}
    keys = ["02.label_first_hurts_most", "10.template_isolation", "07.ablation_at_q", "10.span_aucroc"]
    rows = {p.key: p for p in power_rows(_runs(pos, neg), keys)}
    first = rows["02.label_first_hurts_most"]
    assert first.measured_by == "02.label_first_hurts_most" and first.positive == {"replicates": 16}
    assert first.sensitivity.estimate == 1 and first.sensitivity.n_inputs == 16
    assert first.specificity.estimate == 1 and reading(first) == {"positive": "sees it", "negative": "silent",
                                                                  "power": "informative"}
    tmpl = rows["10.template_isolation"]  # the template's isolation check is measured with the label words
    assert tmpl.measured_by == "10.control_label_isolation" and tmpl.sensitivity.estimate == pytest.approx(15 / 16)
    q = rows["07.ablation_at_q"]
    assert reading(q) == {"positive": "misses it", "negative": "fires", "power": "uninformative"}
    assert annotate(q).startswith("uninformative: check misses it on the positive controls (seen in 0/16), "
                                  "fires on the negative ones (silent in 0/16)")
    assert rows["10.span_aucroc"].why and reading(rows["10.span_aucroc"])["power"] == "not measured"
    assert annotate(None) == "no power row"
    with pytest.raises(KeyError, match="neither measured"):
        power_rows(_runs(pos, neg), ["02.no_such_check"])
    # a check whose control claim no replicate holds is left out (a run of one group of checks)
    assert power_rows(_runs(pos, neg), ["01.shallow_wp_dominant"]) == []


def test_reading_is_unsure_between_the_bounds_and_the_json_round_trip():
    p = Power("03.peak_aucroc", "03.peak_aucroc", "", {"replicates": 2, "inconclusive": 1}, {"inconclusive": 3},
              Interval(2 / 3, *clopper_pearson(2, 3), 1, 3), Interval(1.0, *clopper_pearson(3, 3), 1, 3))
    assert reading(p) == {"positive": "unsure", "negative": "unsure", "power": "unsure"}
    assert Power.from_json(json.loads(json.dumps(p.to_json()))) == p


def test_every_check_of_the_notebooks_has_a_power_row():
    """A claim of notebooks 01, 02, 03, 05, 07 or 10 (the paper's table of claims, and every record's) is measured on
    the controls or says why it cannot be; every measuring claim is one the replicate runs report."""
    from helpers.study.record import load_records

    keys = set(checked_keys(CLAIMS)) | {c.key for r in load_records() for c in r.claims if checked_keys([c.key])}
    missing = sorted(k for k in keys if k not in CHECKS and k not in NOT_MEASURED)
    assert not missing, f"checks without a power row: {missing} (helpers/study/power_report.py CHECKS or NOT_MEASURED)"
    assert not set(CHECKS) & set(NOT_MEASURED)
    assert all(v in CLAIMS for v in CHECKS.values())


@pytest.fixture(scope="module")
def controls():
    from helpers.core.models import load_model

    return [load_model(POSITIVE, verbose=False), load_model(NEGATIVE, verbose=False)]


def test_replicates_on_both_controls_report_every_measuring_claim(controls):
    """One small replicate of both groups on each control: every claim the checks map to comes back, graded; the
    stored copy reads back the same claims; the two controls see the same sequences."""
    from helpers.core.controls.model import control_task
    from helpers.protocols.power import PowerSizes, power_runs, replicate_claims, replicate_verdicts

    sizes = PowerSizes(replicates=1, n=16, n_saliency=8, n_attr=16, batch_size=64, flow_batch_size=64)
    runs = power_runs(controls, sizes, progress=False)
    for name, reps in runs.items():
        assert set(CHECKS.values()) <= set(reps[0]), (name, sorted(set(CHECKS.values()) - set(reps[0])))
        model = controls[0] if name == POSITIVE else controls[1]
        stored = replicate_verdicts(model, 70_000, sizes, "09")  # read back from the store
        fresh = {c.key: c.verdict for c in replicate_claims(model, 70_000, sizes, "09")}
        assert stored == fresh == {k: v for k, v in reps[0].items() if k in fresh}
    rows = power_rows(runs)
    assert {p.key for p in rows} == set(CHECKS) | set(NOT_MEASURED)
    from helpers.core.controls.model import exemplar_table
    from helpers.protocols.power import _prompt_task

    a, b = (control_task(m) for m in controls)
    assert (exemplar_table(a) == exemplar_table(b)).all()  # a token is the same item in both controls
    assert _prompt_task(controls[0]) == _prompt_task(controls[1])  # and the replicates' prompts are the same


def test_replicates_refuse_a_model_that_is_not_a_control(tiny_model):
    from helpers.protocols.power import PowerSizes, replicate_claims

    with pytest.raises(ValueError, match="controls only"):
        replicate_claims(tiny_model, 0, PowerSizes(1, 4, 4, 4, 4, 4), "09")


def test_prediction_exercise_grades_the_form_and_reports_the_runs(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.positive_control import check_negative_prediction

    neg = {"02.label_first_hurts_most": ["inconclusive"] * 16, "07.ablation_at_q": ["replicates"] * 16}
    rows = power_rows(_runs({k: ["replicates"] * 16 for k in neg}, neg),
                      ["02.label_first_hurts_most", "07.ablation_at_q", "10.span_aucroc"])
    check_negative_prediction(lambda: {"02.label_first_hurts_most": "silent", "07.ablation_at_q": "silent"}, rows)
    out = capsys.readouterr().out
    assert "02.label_first_hurts_most: you said silent" in out and "as you predicted" in out
    assert "07.ablation_at_q: you said silent; it said 'replicates' in 16 of 16" in out and "not as you predicted" in out
    for bad, says in (({"02.label_first_hurts_most": "silent"}, "at least two"),
                      ({"02.label_first_hurts_most": "silent", "10.span_aucroc": "fires"}, "not a check"),
                      ({"02.label_first_hurts_most": "silent", "07.ablation_at_q": "maybe"}, "predict 'fires'")):
        with pytest.raises(CheckFailed, match=says):
            check_negative_prediction(lambda bad=bad: bad, rows)


def _record(tmp_path, power_json=None):
    from helpers.study.record import Record

    notebooks = {"09_a_model_that_learns_in_context": {"claims": [claim("09.icl_accuracy", IV, "replicates",
                                                                       "hand").to_json()],
                                                       **({"power": power_json} if power_json else {})}}
    d = {"model": "control", "slug": "control", "profile": "default", "run_key": "default", "commit": "abc1234",
         "date": "2026-11-27", "seconds": {}, "notebooks": notebooks}
    return Record.from_json(d)


def test_records_carry_the_power_and_the_tables_show_it(tmp_path):
    from helpers.study.record import Record, front_table, power_table, verdict_table

    pos = {"02.label_first_hurts_most": ["replicates"] * 16, "10.control_label_isolation": ["replicates"] * 16,
           "10.control_label_gathers": ["replicates"] * 16, "10.control_label_is_read": ["replicates"] * 16}
    neg = {"02.label_first_hurts_most": ["inconclusive"] * 16, "10.control_label_isolation": ["inconclusive"] * 16,
           "10.control_label_gathers": ["replicates"] * 16, "10.control_label_is_read": ["inconclusive"] * 16}
    rows = power_rows(_runs(pos, neg), ["02.label_first_hurts_most", "10.label_isolation", "10.forerunner_gathers",
                                        "10.forerunner_is_read", "10.template_gathers", "10.template_is_read",
                                        "10.span_aucroc"])
    ctrl = _record(tmp_path, [p.to_json() for p in rows])
    assert ctrl.power == tuple(rows)
    lm = Record("google/gemma-3-270m", "gemma-3-270m", "default", "default", "abc1234", "2026-11-27", {},
                (claim("02.label_first_hurts_most", IV, "inconclusive", "hand"),
                 claim("00.more_demos_no_help", IV, "inconclusive", "hand")))
    front = front_table([lm, ctrl])
    assert front.startswith("**What the informative checks show.**")
    assert "| the check on the controls |" in front.splitlines()[2]
    line = next(x for x in front.splitlines() if x.startswith("| Isolating the label words"))
    assert line.endswith("| check sees it on the positive controls (seen in 16/16), silent on the negative ones (silent in 16/16) |")
    assert "**inconclusive** (informative check)" in line
    demos = next(x for x in front.splitlines() if "More demonstrations" in x)
    assert "not a check of notebooks" in demos and "**inconclusive** (premise)" in demos
    # the informative check leads, the premise follows under its own heading
    assert front.index("| Isolating the label") < front.index("**Premises and outcomes.**") < front.index(demos)
    alone = front_table([lm])
    assert "No check of this table is informative on the controls (their power has not been recorded yet)." in alone
    assert "not recorded yet" in next(x for x in alone.splitlines() if x.startswith("| Isolating the label"))
    assert alone.index("**Checks the controls cannot vouch for.**") < alone.index("| Isolating the label")
    block = power_table([lm, ctrl])
    assert "`02.label_first_hurts_most`" in block and "1.00 [0.79, 1.00] (16/16), sees it" in block
    assert "**informative**" in block and "Not measured on the controls:" in block and "`10.span_aucroc`" in block
    assert "docs/record/control-default.json" in block
    assert "has not been recorded yet" in power_table([lm])
    # notebook 10's verdicts carry their checks' power (the label words' flows fire on this hand-made negative)
    from helpers.study.challengers_report import ACCOUNTS

    said = account_power(["10.label_isolation", "10.forerunner_gathers", "10.forerunner_is_read"],
                         {p.key: p for p in rows})
    assert said == ("control_label_isolation: informative; control_label_gathers: uninformative (fires on the "
                    "negative); control_label_is_read: informative")
    ten = [claim(f"10.{c}_isolation", IV, "replicates", "hand") for c in ("label", "forerunner", "template")]
    ten += [claim(f"10.{c}_{d}", IV, "does not replicate", "hand") for c in ("forerunner", "template")
            for d in ("gathers", "is_read")]
    lm10 = Record("google/gemma-3-270m", "gemma-3-270m", "default", "default", "abc1234", "2026-11-27", {},
                  tuple(ten), part="10")
    table = verdict_table([lm10, ctrl])
    row = next(x for x in table.splitlines() if x.startswith(f"| {ACCOUNTS['label']}"))
    # the flows check rests on a claim that fires on the negative: only the isolation counts
    assert "**supported** (1 of 2 checks informative; the paper's checks: supported)" in row
    assert "control_label_gathers: uninformative (fires on the negative)" in row
    # with the isolation firing too, nothing informative is left: the paper's checks' "supported" does not carry
    neg["10.control_label_isolation"] = ["replicates"] * 16
    fired = power_rows(_runs(pos, neg), [p.key for p in rows])
    table = verdict_table([lm10, _record(tmp_path, [p.to_json() for p in fired])])
    row = next(x for x in table.splitlines() if x.startswith(f"| {ACCOUNTS['label']}"))
    assert "**no informative check** (0 of 2 checks informative; the paper's checks: supported)" in row
    assert power_markdown([]).startswith("| check (claim)")


def test_make_record_keeps_the_power_of_notebook_09(tmp_path):
    from helpers.study.record import load_records, make_record

    folder = tmp_path / "results" / "control" / "default"
    (folder / "metrics").mkdir(parents=True)
    p = Power("02.label_first_hurts_most", "02.label_first_hurts_most", "", {"replicates": 2}, {"inconclusive": 2},
              Interval(1.0, *clopper_pearson(2, 2), 1, 2), Interval(1.0, *clopper_pearson(2, 2), 1, 2))
    (folder / "metrics" / "09_a_model_that_learns_in_context.json").write_text(json.dumps(
        {"claims": [claim("09.icl_accuracy", IV, "replicates", "hand").to_json()], "metrics": {"power": [p.to_json()]}}))
    (folder / "runs.json").write_text(json.dumps({"09_a_model_that_learns_in_context": {
        "status": "ok", "seconds": 30.0, "commit": "abc1234", "finished": "2026-11-27 15:00 UTC"}}))
    out = make_record(tmp_path / "results", "control", "default", out_dir=tmp_path / "record")
    rec = load_records(tmp_path / "record")[0]
    assert out.name == "control-default.json" and rec.power == (p,)


def test_results_summary_carries_each_checks_power():
    from helpers.study.report import summary_rows

    pos, neg = {"02.label_first_hurts_most": ["replicates"] * 16}, {"02.label_first_hurts_most": ["replicates"] * 16}
    power = {p.key: p for p in power_rows(_runs(pos, neg), ["02.label_first_hurts_most"])}
    summary = [{"claim": "02 Isolating the label words", "key": "02.label_first_hurts_most", "paper": "p", "ours": "o",
                "verdict": "inconclusive"},
               {"claim": "00 More demonstrations", "key": "00.more_demos_no_help", "paper": "p", "ours": "o",
                "verdict": "inconclusive"}]
    rows = summary_rows({"02_shallow_isolation": {"m": {"summary": summary[:1]}},
                         "00_icl_setting": {"m": {"summary": summary[1:]}}}, ["m"], power)
    assert [list(r)[-1] for r in rows] == ["the check on the controls"] * 2
    assert rows[0]["the check on the controls"] == "" and rows[1]["the check on the controls"].startswith(
        "uninformative: check sees it on the positive controls (seen in 16/16), fires on the negative ones (silent in 0/16)")
    assert "the check on the controls" not in summary_rows({"00_icl_setting": {"m": {"summary": summary[1:]}}}, ["m"])[0]


def test_every_claim_has_a_kind():
    """The paper's table of claims and every record's claims: each is a detector, a reference, a premise or an
    outcome; a reference names a detector it is read against; a key without a kind is refused by name."""
    from helpers.study.power_report import KIND_NAMES, KINDS, REFERENCE_FOR, claim_kind
    from helpers.study.record import load_records

    keys = set(CLAIMS) | {c.key for r in load_records() for c in r.claims}
    missing = sorted(k for k in keys if k not in KINDS)
    assert not missing, f"claims without a kind: {missing} (helpers/study/power_report.py)"
    assert set(KINDS.values()) <= set(KIND_NAMES) and not set(KINDS) - set(CLAIMS)
    assert all(KINDS[target] == "detector" for target in REFERENCE_FOR.values())
    assert claim_kind("02.random_first_barely_matters") == "reference"
    assert claim_kind("01.deep_pq_dominant") == "detector" and claim_kind("07.foobar_icl") == "premise"
    with pytest.raises(KeyError, match="has no kind: add it"):
        claim_kind("02.no_such_claim")


def _row(key: str, pos: list[str], neg: list[str]) -> Power:
    return power_rows({POSITIVE: [{CHECKS[key]: v} for v in pos], NEGATIVE: [{CHECKS[key]: v} for v in neg]},
                      [key])[0]


def test_power_word_reads_each_kind():
    from helpers.study.power_report import power_word

    good = _row("02.label_first_hurts_most", ["replicates"] * 16, ["inconclusive"] * 16)
    fires = _row("01.deep_pq_dominant", ["replicates"] * 16, ["replicates"] * 16)
    unsure = _row("03.peak_aucroc", ["replicates"] * 2 + ["inconclusive"], ["inconclusive"] * 3)
    power = {p.key: p for p in (good, fires, unsure)} | {
        "10.span_aucroc": Power("10.span_aucroc", why="no later tokens"),
        "02.random_first_barely_matters": _row("02.random_first_barely_matters", ["replicates"] * 16,
                                               ["replicates"] * 16)}
    assert power_word("02.label_first_hurts_most", power) == "informative check"
    assert power_word("01.deep_pq_dominant", power) == "uninformative check"
    assert power_word("03.peak_aucroc", power) == "check's power unsure"
    assert power_word("10.span_aucroc", power) == "power not measured"
    assert power_word("03.r_crossing", power) == "power not recorded"
    assert power_word("03.r_crossing", None) == "power not recorded"
    # a reference is never "uninformative", though it holds on the negative control too
    assert power_word("02.random_first_barely_matters", power) == "reference for 02.label_first_hurts_most"
    assert annotate(power["02.random_first_barely_matters"]).startswith("reference for 02.label_first_hurts_most")
    table = power_markdown(list(power.values()))
    ref = next(x for x in table.splitlines() if "`02.random_first_barely_matters`" in x)
    assert ref.endswith("| reference for `02.label_first_hurts_most` |") and "uninformative" not in ref
    assert power_word("04.gain_over_1shot", power) == "outcome" and power_word("00.vanilla_1shot", power) == "premise"


def test_an_account_reads_only_its_informative_checks():
    """Every combination of three checks' verdicts and power (synthetic): "supported" and "partly" need an informative
    check that replicates; with no informative check the account says so, whatever the checks say; and the verdict
    on the informative checks is the paper's rule applied to them alone."""
    import itertools

    from helpers.study.challengers_report import checks_verdict
    from helpers.study.power_report import NO_INFORMATIVE, account_reading, account_verdict

    words = ("replicates", "does not replicate", "inconclusive")
    for vs in itertools.product(words, repeat=3):
        for ok in itertools.product((True, False), repeat=3):
            got = account_verdict(list(zip(vs, ok)))
            counted = [v for v, o in zip(vs, ok) if o]
            if not counted:
                assert got == NO_INFORMATIVE
                continue
            assert got == checks_verdict(counted)
            if got in ("supported", "partly"):
                assert any(v == "replicates" and o for v, o in zip(vs, ok))
    assert account_verdict([("holds", True), ("fails", False)]) == "supported"
    assert account_verdict([("fails", True)]) == "not supported"
    # from the power rows: a check counts when every claim it rests on is informative
    good = _row("02.label_first_hurts_most", ["replicates"] * 16, ["inconclusive"] * 16)
    fires = _row("01.deep_pq_dominant", ["replicates"] * 16, ["replicates"] * 16)
    power = {good.key: good, fires.key: fires}
    assert account_reading([("replicates", ("01.deep_pq_dominant",))], power) == NO_INFORMATIVE
    assert account_reading([("replicates", ("02.label_first_hurts_most", "01.deep_pq_dominant"))], power) == NO_INFORMATIVE
    assert account_reading([("replicates", ("02.label_first_hurts_most",)),
                            ("does not replicate", ("01.deep_pq_dominant",))], power) == "supported"
    assert account_reading([("replicates", ("02.label_first_hurts_most",))], None) == "power not recorded"


def test_notebook_11s_accounts_count_only_informative_checks():
    from helpers.study.after_report import AFTER_ACCOUNTS, after_table, after_verdicts

    keys = [k for ks in AFTER_ACCOUNTS.values() for k in ks]
    claims = [claim(k, IV, "replicates" if k == "11.two_stages" else "inconclusive", "hand") for k in keys]
    stages = "two stages of the query (arXiv 2505.18752)"
    missed = [_row("11.two_stages", ["inconclusive"] * 16, ["inconclusive"] * 16)]  # misses it on the positive
    assert after_verdicts(claims, which="checks")[stages] == "partly"
    assert after_verdicts(claims, missed)[stages] == "no informative check"
    seen = [_row("11.two_stages", ["replicates"] * 16, ["inconclusive"] * 16)]
    assert after_verdicts(claims, seen)[stages] == "supported"
    table = after_table(claims, missed)
    assert table.loc[stages, "the paper's checks' verdict"] == "partly"
    assert table.loc[stages, "verdict (informative checks only)"] == "no informative check"
    with pytest.raises(ValueError, match="which must be"):
        after_verdicts(claims, which="bogus")


def test_on_the_power_runs_prompts_every_negative_checkpoint_keeps_its_answer_under_a_swap():
    """The negative controls' premise, on the exact sequences every power replicate runs (checkpoint r of each
    population on seed REPLICATE_SEED + r, the negative control's task, which every control runs): with the
    context's labels moved, each negative checkpoint of both depths keeps its answer on at least 90% of them, where
    each positive checkpoint, which reads the mapping, keeps it on at most 10%. A negative control that merely moved
    away from the swapped labels would fail the first; "follows a swapped mapping <= 0.10" alone would pass it."""
    from helpers.core.controls.model import control_prompts, control_spec
    from helpers.experiments.positive_control import label_swap
    from helpers.protocols.power import REPLICATE_SEED, population_models, power_sizes
    from helpers.study.power_report import NEGATIVES, POSITIVES
    from helpers.study.profile_table import PROFILES

    sizes = power_sizes(PROFILES["default"])
    task = control_spec(NEGATIVE).task
    pops = population_models(sizes)
    from helpers.core.controls.population import POPULATIONS

    assert sizes.replicates == 8 and all(len(pops[p]) == len(POPULATIONS[p].seeds) for p in POSITIVES + NEGATIVES)
    assert [len(pops[p]) for p in ("wide", "negative", "deep", "deep-negative")] == [5, 5, 8, 8]
    for names, keeps in ((NEGATIVES, lambda s: s >= 0.9), (POSITIVES, lambda s: s <= 0.1)):
        for name in names:
            same = [float(label_swap(m, control_prompts(task, sizes.n, REPLICATE_SEED + r))["same"].mean())
                    for r, m in enumerate(pops[name])]
            assert all(keeps(s) for s in same), (name, same)


def test_power_pools_the_populations_and_reads_depth_on_4_layers_only():
    """Sensitivity pools both positive populations, specificity both negative ones; a depth check reads the 4-layer
    pair alone; runs keyed by the two named controls (one checkpoint each) still read as before."""
    from helpers.study.power_report import DEPTH_CHECKS

    rep, no = "replicates", "does not replicate"
    runs = {"wide": [{"02.label_first_hurts_most": rep, "03.peak_layer": rep}] * 5,
            "deep": [{"02.label_first_hurts_most": no, "03.peak_layer": no}] * 5,
            "negative": [{"02.label_first_hurts_most": no, "03.peak_layer": rep}] * 5,
            "deep-negative": [{"02.label_first_hurts_most": no, "03.peak_layer": no}] * 5}
    rows = {p.key: p for p in power_rows(runs, ["02.label_first_hurts_most", "03.peak_layer"])}
    iso, depth = rows["02.label_first_hurts_most"], rows["03.peak_layer"]
    assert iso.sensitivity.n_inputs == 10 and iso.sensitivity.estimate == 0.5 and iso.specificity.estimate == 1.0
    assert "03.peak_layer" in DEPTH_CHECKS and depth.sensitivity.n_inputs == 5 and depth.sensitivity.estimate == 0
    assert depth.specificity.estimate == 1.0  # the 2-layer negative's vacuous "replicates" is not read
    named = power_rows({POSITIVE: runs["wide"], NEGATIVE: runs["negative"]}, ["03.peak_layer"])[0]
    assert named.sensitivity.estimate == 1.0 and named.specificity.estimate == 0.0
    assert named.by_population == {} and population_split(named, "positive") == ""


def test_power_keeps_each_population_and_says_where_a_pooled_count_comes_from():
    """Each population's verdicts are kept beside the pooled counts; where the populations disagree the count says
    which gave what (the 2-layer positives see it, the 4-layer ones miss it), in the annotation, the markdown table
    and the frame; where they agree, or a record predates the populations, nothing is added."""
    from helpers.study.power_report import power_frame

    rep, inc = "replicates", "inconclusive"
    runs = {"wide": [{"10.control_label_read_causal": rep, "02.label_first_hurts_most": rep}] * 5,
            "deep": [{"10.control_label_read_causal": inc, "02.label_first_hurts_most": rep}] * 8,
            "negative": [{"10.control_label_read_causal": inc, "02.label_first_hurts_most": inc}] * 5,
            "deep-negative": [{"10.control_label_read_causal": inc, "02.label_first_hurts_most": inc}] * 8}
    rows = {p.key: p for p in power_rows(runs, ["10.label_read_causal", "02.label_first_hurts_most"])}
    read, iso = rows["10.label_read_causal"], rows["02.label_first_hurts_most"]
    assert read.by_population == {"wide": {rep: 5}, "deep": {inc: 8}, "negative": {inc: 5}, "deep-negative": {inc: 8}}
    assert read.positive == {rep: 5, inc: 8} and read.reading["power"] == "unsure"
    assert population_split(read, "positive") == "2-layer 5/5, 4-layer 0/8"
    assert population_split(read, "negative") == "" and population_split(iso, "positive") == ""
    assert "(seen in 5/13: 2-layer 5/5, 4-layer 0/8)" in annotate(read)
    assert "(5/13; 2-layer 5/5, 4-layer 0/8), unsure" in power_markdown([read])
    assert power_frame([read]).loc["10.label_read_causal", "positive checkpoints' verdicts"] == (
        "inconclusive 8, replicates 5 (2-layer 5/5, 4-layer 0/8 seen)")
    assert Power.from_json(read.to_json()) == read
    old = {k: v for k, v in read.to_json().items() if k != "by_population"}  # a record made before
    assert Power.from_json(old).by_population == {} and "seen in 5/13)" in annotate(Power.from_json(old))


def test_a_population_member_is_checked_before_it_loads(tmp_path, monkeypatch):
    """A checkpoint whose bytes differ from the sha256 written in helpers/core/controls/population.py is refused with what to do;
    so is a seed that is not a population's, an unknown population, and more replicates than checkpoints."""
    import shutil

    import helpers.core.controls.population as cpop
    from helpers.core.controls.model import ControlError
    from helpers.protocols.power import PowerSizes, population_models

    m = cpop.load_member("negative", 1)
    assert m.cfg.icl_population == "negative" and m.cfg.icl_model_name == NEGATIVE and m.cfg.n_layers == 2
    assert cpop.load_member("deep", 0).cfg.n_layers == 4
    src = cpop.population("negative").path(1)
    for suffix in (".safetensors", ".sha256"):
        shutil.copyfile(src.with_suffix(suffix), tmp_path / src.with_suffix(suffix).name)
    data = bytearray((tmp_path / src.name).read_bytes())
    data[-1] ^= 1
    (tmp_path / src.name).write_bytes(bytes(data))
    monkeypatch.setattr(cpop, "POPULATION_DIR", tmp_path)
    with pytest.raises(ControlError, match="does not match the expected"):
        cpop.load_member("negative", 1)
    with pytest.raises(ControlError, match="has the seeds"):
        cpop.load_member("negative", 9)
    with pytest.raises(ControlError, match="the populations are"):
        cpop.population("bogus")
    monkeypatch.setattr(cpop, "POPULATION_DIR", src.parent)
    with pytest.raises(ValueError, match="a replicate is one checkpoint"):
        population_models(PowerSizes(replicates=9, n=4, n_saliency=2, n_attr=4, batch_size=8, flow_batch_size=8))


def test_population_premises_are_graded_by_hand_checked_rules():
    """Synthetic premises: positives always right, negatives right, keeping their answer 19 times in 20 and at chance
    on held-out classes: every premise replicates; a negative that follows the swap fails its keep-the-answer one."""
    import numpy as np

    from helpers.protocols.positive_control import population_claims

    good = {"correct": np.ones(64), "same": np.r_[np.ones(61), np.zeros(3)], "heldout_by_class": np.full(32, 0.25)}
    pos = {"correct": np.ones(64), "same": np.zeros(64), "heldout_by_class": np.ones(32)}
    premises = {"wide": [pos] * 5, "deep": [pos] * 5, "negative": [good] * 5, "deep-negative": [good] * 5}
    got = {c.key: c.verdict for c in population_claims(premises)}
    assert got == {k: "replicates" for k in ("09.population_positive_accuracy", "09.population_negative_accuracy",
                                             "09.population_negative_keeps_answer", "09.population_negative_heldout")}
    follows = {**good, "same": np.zeros(64)}
    got = {c.key: c.verdict for c in population_claims({**premises, "negative": [follows] * 5,
                                                        "deep-negative": [follows] * 5})}
    assert got["09.population_negative_keeps_answer"] == "does not replicate"


def test_replicate_premises_run_on_a_checkpoint_and_read_back(controls, tmp_path, monkeypatch):
    """The premises on a replicate's own sequences: per sequence correct/same/follows, per held-out class an
    accuracy; stored and read back the same."""
    from helpers.protocols.power import PowerSizes, replicate_premises

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    sizes = PowerSizes(replicates=1, n=32, n_saliency=8, n_attr=16, batch_size=64, flow_batch_size=64)
    got = replicate_premises(controls[1], 70_000, sizes)
    assert {len(got[k]) for k in ("correct", "same", "follows")} == {32}
    assert 0 < len(got["heldout_by_class"]) <= 32 and got["same"].mean() >= 0.9  # the negative keeps its answer
    again = replicate_premises(controls[1], 70_000, sizes)
    assert all((again[k] == got[k]).all() for k in got)


def test_a_check_no_control_can_see_reads_specificity_only_when_silent():
    """Every population is a negative for notebook 11's contextualisation checks: silent on (nearly) all of them
    reads "specificity only", firing reads "uninformative", anything between "unsure"; never "informative"."""
    from helpers.study.power_report import SPECIFICITY_ONLY

    key = SPECIFICITY_ONLY[0]
    def row(fires_in):
        runs = {p: [{key: "replicates" if p in fires_in else "inconclusive"}] * 5
                for p in ("wide", "deep", "negative", "deep-negative")}
        return power_rows(runs, [key])[0]

    assert row(()).reading["power"] == "specificity only" and row(()).sensitivity is None
    half = row(("wide", "deep"))
    assert half.reading["power"] == "unsure" and half.specificity.n_inputs == 20
    assert row(("wide", "deep", "negative", "deep-negative")).reading["power"] == "uninformative"


def test_every_specific_form_is_a_measured_detector_and_named_beside_its_check():
    from helpers.study.power_report import CHECKS, SPECIFIC_FORM, Power, claim_kind, specific_form_note
    from helpers.study.record import README_CLAIMS

    for check, forms in SPECIFIC_FORM.items():
        assert claim_kind(check) == "detector" and check in CHECKS, check
        for f in forms:
            assert claim_kind(f) == "detector" and f in CHECKS, f
            # a front-table check has its form in the front table too (notebook 11's rows are in docs/results.md)
            assert check not in README_CLAIMS or f in README_CLAIMS, (check, f)
    sure = Interval(1.0, 0.75, 1.0, 1, 13)
    power = {"10.anchors_carry_text": Power("10.anchors_carry_text", "10.control_anchors_carry_text", "", {}, {},
                                            sure, sure)}
    note = specific_form_note("05.hidden_anchor_label_loyalty", power)
    assert note == ("; its specific form: `10.anchors_carry_mapping` (power not recorded), "
                    "`10.anchors_carry_text` (informative)")
    assert specific_form_note("02.label_first_hurts_most", power) == ""
