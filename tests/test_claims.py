"""Claim objects: the paper's side from one registry, our interval, a verdict from a fixed vocabulary, and the
report a notebook saves."""

from __future__ import annotations

import json

import pytest

from helpers.study import paper
from helpers.study.claims import Claim, claim, claims_frame, report_claims
from helpers.study.stats import Interval

IV = Interval(61.0, 55.5, 66.0, 5, 320)


def _claim(**kw):
    d = dict(key="99.probe", statement="Label words anchor", source="arXiv 2305.14160 §2.2", paper="about 60%",
             criterion="interval above 50%", ours=IV, verdict="replicates", unit="%")
    return Claim(**{**d, **kw})


def test_sentence_and_row_carry_paper_ours_and_verdict():
    c = _claim(context="Gemma 3 270M")
    s = c.sentence()
    assert "Paper: about 60%" in s and "61.0% [55.5, 66.0] (95% CI; 5 seed(s), 320 inputs)" in s
    assert s.endswith("Verdict: replicates.") and "on Gemma 3 270M" in s
    row = c.row()
    assert row["verdict"] == "replicates" and row["criterion (fixed before the run)"] == "interval above 50%"
    assert list(claims_frame([c]).index) == ["Label words anchor"]


def test_bad_verdict_and_bad_value_are_refused():
    with pytest.raises(ValueError, match="not one of"):
        _claim(verdict="looks fine")
    with pytest.raises(TypeError, match="must be an Interval"):
        _claim(ours=0.61)
    assert "undefined" not in _claim(ours=None, verdict="inconclusive").ours_text()
    assert _claim(ours=None, verdict="inconclusive", missing="no bias measured").ours_text() == "no bias measured"
    # a reduction of a bias that is not there: its interval means nothing, and the cell says why
    assert _claim(verdict="inconclusive", extra={"part": "no measurable bias"}).ours_text().startswith(
        "no measurable bias before the reduction")


def test_claim_takes_the_paper_side_from_the_registry(monkeypatch):
    monkeypatch.setitem(paper.CLAIMS, "99.probe", {"statement": "S", "source": "Fig. 9", "paper": "0.8"})
    c = claim("99.probe", IV, "partly", "interval above 0.7")
    assert (c.statement, c.source, c.paper, c.section) == ("S", "Fig. 9", "0.8", "99")
    assert claim("99.probe", IV, "partly", "x", paper="0.9").paper == "0.9"
    with pytest.raises(KeyError, match="helpers.study.paper.CLAIMS"):
        claim("99.nothing", IV, "partly", "x")


def test_report_saves_claims_and_warns_under_smoke(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda x: shown.append(x))
    report_claims("99_probe", [_claim()], metrics={"n": 3}, model_name="google/gemma-3-270m", profile="smoke")
    assert "not evidence" in shown[0].data
    saved = json.loads(next(tmp_path.rglob("99_probe.json")).read_text())
    assert saved["claims"][0]["verdict"] == "replicates" and saved["metrics"] == {"n": 3}
    assert saved["summary"][0]["ours"].startswith("61.0%") and "Verdict: replicates" in capsys.readouterr().out
    with pytest.raises(ValueError, match="repeat"):
        report_claims("99_probe", [_claim(), _claim()], show=False, model_name="m", profile="smoke")


def test_a_claim_reported_by_another_notebook_joins_its_home_row(tmp_path, monkeypatch):
    """Notebook 09 grades the control with notebook 01's claims: in RESULTS' summary the control's number stands in
    01's row, beside the offline model's, not in a row of its own; its own claims keep 09's rows."""
    from helpers.study.report import summary_rows

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    premise = _claim(key="09.premise", statement="The control learns in context")
    report_claims("01_probe", [_claim(key="01.probe")], model_name="google/gemma-3-270m", profile="smoke", show=False)
    report_claims("09_control", [_claim(key="01.probe", ours=Interval(0.9, 0.8, 1.0, 5, 100), unit=""), premise],
                  model_name="control", profile="smoke", show=False)
    sections = {}
    for p in tmp_path.rglob("*_probe.json"):
        sections.setdefault(p.stem, {})["google/gemma-3-270m"] = json.loads(p.read_text())
    for p in tmp_path.rglob("09_control.json"):
        sections.setdefault(p.stem, {})["control"] = json.loads(p.read_text())
    rows = summary_rows(sections, ["google/gemma-3-270m", "control"])
    assert [(r["section"], r["claim"]) for r in rows] == [("01_probe", "01 Label words anchor"),
                                                          ("09_control", "09 The control learns in context")]
    assert rows[0]["gemma-3-270m"].startswith("61.0%") and rows[0]["control"].startswith("0.9 [0.8, 1.0]")
    assert "gemma-3-270m" not in rows[1] and rows[1]["control"].startswith("61.0%")


def test_another_notebook_quotes_the_reported_claim_itself(tmp_path, monkeypatch):
    """A notebook that speaks of another notebook's quantity quotes the claim object that notebook reported (same
    interval, same verdict, same sentence), and says which notebook to run when there is none: never a number of
    another run or another model."""
    from helpers.study.claims import quote_claim, reported_claim

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    who = dict(model_name="google/gemma-3-270m", profile="smoke")
    assert reported_claim("00_probe", "00.probe", **who) is None
    assert "has not reported 00.probe" in quote_claim("00_probe", "00.probe", **who) and "run it first" in \
        quote_claim("00_probe", "00.probe", **who)
    c = _claim(key="00.probe", verdict="inconclusive", note="paired on the inputs", context="Gemma")
    report_claims("00_probe", [c, _claim(key="00.other", ours=None, verdict="inconclusive")], show=False, **who)
    assert reported_claim("00_probe", "00.probe", **who) == c
    assert reported_claim("00_probe", "00.other", **who).ours is None
    assert quote_claim("00_probe", "00.probe", **who) == f"From notebook 00_probe: {c.sentence()}"
    assert reported_claim("00_probe", "00.probe", model_name="HuggingFaceTB/SmolLM2-135M-Instruct",
                          profile="smoke") is None  # another model's folder: nothing to quote


def test_reading_renders_the_run_s_numbers_and_picks_the_sentence_by_verdict():
    from helpers.study.claims import reading_markdown

    says = {"99.probe": {"replicates": "The anchors carry the label.", "inconclusive": "Too few inputs to tell."},
            "99.other": {"*": "Whatever the verdict, read the note."}}
    md = reading_markdown([_claim(), _claim(key="99.other", verdict="inconclusive")], says)
    assert "61.0% [55.5, 66.0]" in md and "Verdict: *replicates*. The anchors carry the label." in md
    assert "Too few inputs" not in md.split("\n")[0]
    assert md.split("\n")[1].endswith("Verdict: *inconclusive*. Whatever the verdict, read the note.")
    with pytest.raises(KeyError, match="did not report"):
        reading_markdown([_claim()], {"99.typo": {"*": "x"}})


def test_show_reading_reads_what_the_notebook_reported(tmp_path, monkeypatch):
    from helpers.study.claims import reported_claims, show_reading

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    assert "has not reported" in show_reading("99_probe", model_name="m", profile="smoke")
    report_claims("99_probe", [_claim()], show=False, model_name="m", profile="smoke")
    assert [c.key for c in reported_claims("99_probe", "m", "smoke")] == ["99.probe"]
    md = show_reading("99_probe", {"99.probe": {"replicates": "Holds."}}, model_name="m", profile="smoke")
    assert "61.0% [55.5, 66.0]" in md and md.rstrip().endswith("Holds.") and "profile `smoke`" in md


def test_the_reading_carries_each_checks_power_from_this_results_folder(tmp_path, monkeypatch):
    """show_reading puts beside each verdict what its check is worth on the controls, from notebook 09's power rows
    in the same results folder (and the notebook's own): "(uninformative check)" for one that fires on the negative
    control, "(premise)" for a fact about the model; before notebook 09 has run it says so."""
    from helpers.study.claims import reading_markdown, run_power, show_reading
    from helpers.study.power_report import CHECKS, NEGATIVE, POSITIVE, power_rows

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    deep = claim("01.deep_pq_dominant", Interval(0.9, 0.85, 0.95, 1, 16), "replicates", "above 0")
    first = claim("02.label_first_hurts_most", Interval(62.0, 55.8, 68.1, 1, 16), "replicates", "above 0", unit="%")
    demos = claim("00.more_demos_no_help", Interval(-5.0, -9.0, -1.0, 1, 16), "inconclusive", "below 0", unit="points")
    report_claims("01_probe", [deep, first, demos], show=False, model_name="m", profile="smoke")
    md = show_reading("01_probe", model_name="m", profile="smoke")
    assert "run notebook 09" in md and "Verdict: *replicates* (power not recorded)." in md
    runs = {POSITIVE: [{CHECKS["01.deep_pq_dominant"]: "replicates", CHECKS["02.label_first_hurts_most"]: "replicates"}] * 16,
            NEGATIVE: [{CHECKS["01.deep_pq_dominant"]: "replicates", CHECKS["02.label_first_hurts_most"]: "inconclusive"}] * 16}
    rows = power_rows(runs, ["01.deep_pq_dominant", "02.label_first_hurts_most", "05.hidden_anchor_word_loyalty"])
    report_claims("09_a_model_that_learns_in_context", [claim("09.icl_accuracy", Interval(0.99, 0.98, 1.0, 1, 16),
                                                             "replicates", "above 0.9")],
                  show=False, model_name="control", profile="smoke", metrics={"power": [p.to_json() for p in rows]})
    got = run_power("01_probe", "m", "smoke")
    assert set(got) == {"01.deep_pq_dominant", "02.label_first_hurts_most", "05.hidden_anchor_word_loyalty"} and got["05.hidden_anchor_word_loyalty"].why
    md = show_reading("01_probe", model_name="m", profile="smoke")
    lines = md.splitlines()
    assert next(x for x in lines if "S_pq" in x).count("Verdict: *replicates* (uninformative check).") == 1
    assert "Verdict: *replicates* (informative check)." in next(x for x in lines if "Isolating" in x)
    assert "Verdict: *inconclusive* (premise)." in next(x for x in lines if "More demonstrations" in x)
    assert "(notebook 09)" in lines[0]
    assert "Verdict: *replicates*." in reading_markdown([deep], {})  # without power: the verdict alone


def test_an_interval_that_would_read_as_zeros_gets_two_significant_figures():
    """A flow difference of a few 1e-4 reads -0.00027 [-0.00035, -0.00018], not -0.00 [-0.00, -0.00]; intervals
    that read at the given decimals keep them."""
    from helpers.study.claims import shown_digits
    from helpers.study.record import cell

    small = Interval(-0.00027, -0.00035, -0.00018, 2, 128)
    assert shown_digits(small, 2) == 5 and shown_digits(small, 3) == 5
    assert shown_digits(Interval(0.21, -0.10, 0.52, 2, 64), 2) == 2
    assert shown_digits(Interval(0.004, 0.001, 0.006, 2, 64), 3) == 3  # 0.004 [0.001, 0.006] reads at 3
    assert shown_digits(Interval(0.0, 0.0, 0.0, 1, 4), 2) == 2  # exact zeros stay as they are
    c = claim("10.forerunner_gathers", small, "does not replicate", "above 0")
    assert cell(c) == "-0.00027 [-0.00035, -0.00018]: **does not replicate**"
    assert c.ours_text(3).startswith("-0.00027 [-0.00035, -0.00018] (95% CI")


def test_claims_measured_on_fewer_tasks_name_them_and_smoke_studies_two():
    """Notebook 10 under smoke runs its class and head studies on two tasks (study_tasks); its claims then name
    them, a claim with tasks of its own keeps them, and at the run's own tasks nothing changes."""
    from helpers.study.claims import measured_on
    from helpers.study.profile_table import PROFILES
    from helpers.study.profiles import study_tasks

    smoke, default = PROFILES["smoke"], PROFILES["default"]
    assert study_tasks(smoke) == smoke.tasks[:2] == ("sst2", "trec")
    assert study_tasks(default) == default.tasks and study_tasks(default.with_(tasks=("sst2",))) == ("sst2",)
    assert study_tasks(smoke.with_(tasks=("mine",))) == ("mine",)
    plain, own = _claim(), _claim(key="99.span", tasks=("agnews_phrases",))
    assert measured_on([plain, own], default.tasks, default.tasks) == [plain, own]
    fewer = measured_on([plain, own], ("sst2", "trec"), smoke.tasks)
    assert [c.tasks for c in fewer] == [("sst2", "trec"), ("agnews_phrases",)]
    assert fewer[0] == Claim(**{**plain.__dict__, "tasks": ("sst2", "trec")})
