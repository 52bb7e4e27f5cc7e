"""The readings' sentences (helpers/study/readings.py): each names a notebook, a claim the papers' table knows and a
verdict a claim can have, and a notebook's reading shows the one its run's verdict picks."""

from __future__ import annotations

from pathlib import Path

from helpers.study.claims import VERDICTS, claim, reading_markdown
from helpers.study.paper import CLAIMS
from helpers.study.readings import READINGS, readings_for

ROOT = Path(__file__).resolve().parent.parent


def test_every_sentence_names_a_notebook_a_known_claim_and_a_verdict():
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.py")}
    assert set(READINGS) <= notebooks, set(READINGS) - notebooks
    for section, says in READINGS.items():
        assert set(says) <= set(CLAIMS), (section, set(says) - set(CLAIMS))
        for key, by_verdict in says.items():
            assert set(by_verdict) <= set(VERDICTS) | {"*"}, (section, key, by_verdict.keys())
            assert all(isinstance(s, str) and s.strip() for s in by_verdict.values()), (section, key)


def test_a_notebook_reads_its_own_sentences():
    """A section named after its notebook, a variant or a task (notebook 08's ``08_your_own_task_<task>``), reads
    its notebook's sentences; another notebook's never."""
    assert readings_for("01_saliency_flow") is READINGS["01_saliency_flow"]
    assert readings_for("08_your_own_task_sst2") is READINGS["08_your_own_task"]
    assert readings_for("01_saliency_flowx") == {} and readings_for("12_nothing") == {}
    # notebook 09 reads notebook 01's claims on a control, in its own words
    shared = set(READINGS["01_saliency_flow"]) & set(READINGS["09_a_model_that_learns_in_context"])
    assert shared and any(READINGS["01_saliency_flow"][k] != READINGS["09_a_model_that_learns_in_context"][k]
                          for k in shared)


def test_the_runs_verdict_picks_the_sentence():
    from helpers.study.stats import Interval

    key = "00.more_demos_no_help"
    iv = Interval(-2.0, -3.0, -1.0, 5, 64)
    c = claim(key, iv, "replicates", "criterion", unit="points")
    md = reading_markdown([c], {key: READINGS["00_icl_setting"][key]})
    assert READINGS["00_icl_setting"][key]["replicates"] in md
    assert READINGS["00_icl_setting"][key]["inconclusive"] not in md
