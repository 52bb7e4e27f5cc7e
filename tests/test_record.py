"""One answer everywhere: the result tables of README.md and docs/ are generated from the committed run records
(docs/record/), no result is typed outside them, and no notebook's markdown states a result (its reading is
rendered from its own run's claims)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers.study import record as rec
from helpers.study import report
from helpers.study.claims import report_claims
from helpers.study.report import record_run
from helpers.study.stats import Interval

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
sys.path.insert(0, str(ROOT / "scripts"))

import record as record_script  # noqa: E402  (scripts/record.py: make record, make tables)


def _notebook_markdown(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


# ------------------------------------------------------------------ the repository as committed


def test_readme_and_docs_tables_are_what_the_records_give():
    blocks = record_script.blocks(rec.load_records())
    found = {m.group("name") for p in PAGES for m in rec._BLOCK.finditer(p.read_text())}
    assert {"front", "control"} <= found, "README.md must carry the generated front and control tables"
    problems = [x for p in PAGES for x in rec.check_blocks(p.read_text(), blocks, p.name)]
    assert not problems, problems


def test_the_control_checks_agree_across_the_records():
    """Every run of notebook 10 checks the same positive-control sequences, and the README's verdict block shows the
    first record's: the records of one profile that hold those claims must agree on every one of them."""
    for profile in {r.profile for r in rec.load_records()}:
        seen = [{c.key: (c.ours_text(3), c.verdict) for c in r.claims if c.key.startswith("10.control_")}
                for r in rec.load_records() if r.profile == profile]
        seen = [s for s in seen if s]
        assert all(s == seen[0] for s in seen), f"profile {profile}: the control's claims differ between records"


def test_no_result_is_typed_outside_a_generated_block():
    problems = [x for p in PAGES for x in rec.stray_results(p.read_text(), p.name)]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        md = _notebook_markdown(nb)
        problems += rec.stray_results(md, nb.name)
        problems += [f"{nb.name}: record block in a notebook" for _ in rec._BLOCK.finditer(md)]
    assert not problems, problems


def test_one_changed_digit_anywhere_fails():
    """What the two tests above exist for: change one digit of a result in the README's table, in docs/, or type
    a result into a notebook's markdown, and the check fails."""
    blocks = record_script.blocks(rec.load_records())
    readme = (ROOT / "README.md").read_text()
    body = next(m for m in rec._BLOCK.finditer(readme) if m.group("name") == "front")
    digit = re.search(r"\d(?=\.\d+ \[)", body.group(0))
    if digit is None:
        pytest.skip("no recorded result in the README yet")
    at = body.start() + digit.start()
    changed = readme[:at] + str((int(readme[at]) + 1) % 10) + readme[at + 1:]
    assert rec.check_blocks(changed, blocks, "README.md") and not rec.check_blocks(readme, blocks, "README.md")
    page = (ROOT / "docs" / "results.md").read_text() + "\nOn Gemma the peak is 0.76 [0.73, 0.80]: **partly**.\n"
    assert len(rec.stray_results(page, "results.md")) == 2
    md = _notebook_markdown(ROOT / "notebooks" / "02_shallow_isolation.ipynb") + "\nlabel loyalty 62.0% [55.8, 68.1]"
    assert rec.stray_results(md, "02")


# ------------------------------------------------------------------ making a record, on a run made here


def _iv(x, lo, hi):
    return Interval(x, lo, hi, 5, 1280)


def _run(tmp_path, monkeypatch, model="google/gemma-3-270m", profile="default"):
    from helpers.study.claims import claim
    from helpers.study.results import model_slug, results_dir, run_key

    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path / "results"))
    claims = [claim("03.peak_aucroc", _iv(0.7612, 0.731, 0.802), "partly", "peak at or above 0.75"),
              claim("03.r_crossing", None, "inconclusive", "R passes 0.5 after the first third",
                    missing="R_l never passes 0.5")]
    report_claims("03_deep_aucroc", claims, show=False, model_name=model, profile=profile)
    report_claims("02_shallow_isolation",
                  [claim("02.label_first_hurts_most", _iv(62.04, 55.8, 68.1), "replicates", "drops above 0",
                         unit="%")], show=False, model_name=model, profile=profile)
    folder = results_dir(model, profile)
    for nb, s in (("02_shallow_isolation", 900.0), ("03_deep_aucroc", 120.0)):
        record_run(folder, nb, {"status": "ok", "seconds": s, "commit": "abc1234def"})
    return tmp_path / "results", folder, run_key(profile), model_slug(model)


def test_make_record_keeps_every_claim_with_its_commit_date_and_times(tmp_path, monkeypatch):
    results, folder, key, slug = _run(tmp_path, monkeypatch)
    path = rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record")
    assert path.name == f"{slug}-{key}.json"
    r = rec.load_records(tmp_path / "record")[0]
    assert (r.commit, r.profile, r.seconds) == ("abc1234def", "default",
                                                {"02_shallow_isolation": 900.0, "03_deep_aucroc": 120.0})
    assert [c.key for c in r.claims] == ["02.label_first_hurts_most", "03.peak_aucroc", "03.r_crossing"]
    blocks = rec.render_blocks([r])
    assert "62.0% [55.8, 68.1]: **replicates**" in blocks["front"]
    assert "0.76 [0.73, 0.80]: **partly**" in blocks["front"]
    assert "R_l never passes 0.5: **inconclusive**" in blocks["front"]  # a missing value in words
    assert "| Gemma 3 270M |" in blocks["front"]
    assert "undefined" not in blocks["full"] and "nan" not in blocks["full"].lower()
    assert "at commit `abc1234`" in blocks["front"] and "17.0" in blocks["times"]  # 1020 s of notebooks


def test_make_record_refuses_what_it_cannot_vouch_for(tmp_path, monkeypatch):
    results, folder, key, _ = _run(tmp_path, monkeypatch)
    with pytest.raises(rec.RecordError, match="run `make run PROFILE=smoke`"):
        rec.make_record(results, "google/gemma-3-270m", "smoke", out_dir=tmp_path / "record")
    record_run(folder, "04_anchor_reweighting", {"status": "failed", "seconds": 3.0, "commit": "abc1234def"})
    with pytest.raises(rec.RecordError, match="did not finish ok"):
        rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record")
    record_run(folder, "04_anchor_reweighting", {"status": "ok", "seconds": 3.0, "commit": "fff0000"})
    with pytest.raises(rec.RecordError, match="different commits"):
        rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record")
    for nb in ("02_shallow_isolation", "03_deep_aucroc", "04_anchor_reweighting"):
        record_run(folder, nb, {"status": "ok", "seconds": 3.0, "commit": "abc1234def-dirty"})
    with pytest.raises(rec.RecordError, match="uncommitted changes"):
        rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record")


def test_a_part_record_holds_its_notebooks_only_and_the_tables_merge_it_into_the_models_column(tmp_path, monkeypatch):
    """``make record NOTEBOOKS=03``: notebook 03 alone, run at its own commit beside the record of the others, written
    as ``<slug>-<key>-nb03.json``; the tables show the model's records as one column, each run named; a notebook
    that did not run is refused, and two records holding one claim are an error."""
    import dataclasses

    results, folder, key, slug = _run(tmp_path, monkeypatch)
    record_run(folder, "03_deep_aucroc", {"status": "ok", "seconds": 120.0, "commit": "fff0000aaa"})  # a later rerun
    with pytest.raises(rec.RecordError, match="different commits"):
        rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record")
    part = rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record", notebooks=["3"])
    assert part.name == f"{slug}-{key}-nb03.json"
    main = rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record", notebooks=["02"])
    d = json.loads(main.read_text())  # as if 02 were the model's record of the others
    d.pop("part")
    (tmp_path / "record" / f"{slug}-{key}.json").write_text(json.dumps(d))
    main.unlink()
    r02, r03 = rec.load_records(tmp_path / "record")
    r02 = dataclasses.replace(r02, part="")
    assert (r03.part, r03.commit, list(r03.seconds)) == ("03", "fff0000aaa", ["03_deep_aucroc"])
    assert [c.key for c in r03.claims] == ["03.peak_aucroc", "03.r_crossing"]
    blocks = rec.render_blocks([r02, r03])
    assert blocks["front"].count("| Gemma 3 270M |") == 1 and "0.76 [0.73, 0.80]: **partly**" in blocks["front"]
    assert "at commit `abc1234`" in blocks["front"] and "at commit `fff0000`" in blocks["front"]
    assert f"`docs/record/{slug}-{key}-nb03.json`" in blocks["front"]
    assert "`make run PROFILE=default NOTEBOOKS=03`" in rec.runs_line([r03])  # the run line, as a shell takes it
    assert '`make run PROFILE=default NOTEBOOKS="02 03"`' in rec.runs_line([dataclasses.replace(r03, part="02+03")])
    assert "| 03_deep_aucroc | 2.0 |" in blocks["times"] and "| all | 17.0 |" in blocks["times"]
    with pytest.raises(rec.RecordError, match="no finished run"):
        rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record", notebooks=["02", "05"])
    with pytest.raises(rec.RecordError, match="both hold"):
        rec.merged([r03, dataclasses.replace(r03, part="x")])


def test_a_rerun_notebook_supersedes_its_older_record(tmp_path, monkeypatch):
    """``make record NOTEBOOKS=02`` after notebook 02 ran again: the model's older record gives up notebook 02 (its
    claims, time and digest) and keeps the others as a part; a record left with nothing is removed; another model's
    or profile's record is untouched; the tables then merge without two records holding one claim."""
    results, folder, key, slug = _run(tmp_path, monkeypatch)
    out = tmp_path / "record"
    old = rec.make_record(results, "google/gemma-3-270m", key, out_dir=out)
    other = out / f"smollm2-135m-instruct-{key}.json"
    other.write_text(old.read_text().replace("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")
                     .replace(f'"slug": "{slug}"', '"slug": "smollm2-135m-instruct"'))
    before = other.read_text()
    record_run(folder, "02_shallow_isolation", {"status": "ok", "seconds": 950.0, "commit": "fff0000aaa"})
    new = rec.make_record(results, "google/gemma-3-270m", key, out_dir=out, notebooks=["02"])
    assert rec.supersede(new) == [f"{slug}-{key}.json -> {slug}-{key}-nb03.json: notebooks 02 taken out "
                                  f"({new.name} holds them now)"]
    assert not old.exists() and other.read_text() == before
    gemma = {r.part: r for r in rec.load_records(out) if r.slug == slug}
    assert set(gemma) == {"02", "03"} and gemma["03"].commit == "abc1234def"
    assert list(gemma["03"].seconds) == ["03_deep_aucroc"] and set(gemma["03"].methods) <= {"03_deep_aucroc"}
    assert [c.key for c in gemma["03"].claims] == ["03.peak_aucroc", "03.r_crossing"]
    assert gemma["02"].commit == "fff0000aaa" and gemma["02"].seconds == {"02_shallow_isolation": 950.0}
    assert rec.merged(rec.load_records(out))  # one record per claim again
    record_run(folder, "03_deep_aucroc", {"status": "ok", "seconds": 100.0, "commit": "fff0000aaa"})
    both = rec.make_record(results, "google/gemma-3-270m", key, out_dir=out, notebooks=["02", "03"])
    assert sorted(rec.supersede(both)) == sorted([f"{slug}-{key}-nb02.json: removed, {both.name} holds all its "
                                                  "notebooks", f"{slug}-{key}-nb03.json: removed, {both.name} holds "
                                                  "all its notebooks"])
    assert sorted(p.name for p in out.glob("*.json")) == sorted([both.name, other.name])


def test_the_smoke_sentence_sums_a_models_parts_and_names_their_commits(tmp_path, monkeypatch):
    import dataclasses

    results, folder, key, slug = _run(tmp_path, monkeypatch, profile="smoke")
    r = rec.load_records(rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record").parent)[0]
    later = dataclasses.replace(r, part="04", commit="fff0000aaa", date="2099-01-01 00:00 UTC",
                                seconds={"04_anchor_reweighting": 60.0})
    said = record_script.how_long([r, later])
    assert "ran its notebooks in 18.0 min for Gemma 3 270M (measured, commits `abc1234`, `fff0000`)" in said


def test_the_readme_sums_each_models_default_runs_and_the_docs_list_each_run_with_its_note(tmp_path, monkeypatch):
    import dataclasses

    results, folder, key, slug = _run(tmp_path, monkeypatch)
    r = rec.load_records(rec.make_record(results, "google/gemma-3-270m", key, out_dir=tmp_path / "record").parent)[0]
    r = dataclasses.replace(r, note="the machine shared")
    part = dataclasses.replace(r, part="05", commit="fff0000aaa", note="", seconds={"05_context_compression": 600.0})
    said = record_script.how_long([r, part])
    assert "the recorded default runs took, their notebooks' minutes summed, 27 min for Gemma 3 270M (" in said
    assert "the machine shared" not in said and "docs/results.md#run-sizes" in said
    notes = record_script.run_notes([r, part])
    assert notes == ("- Gemma 3 270M alone took 17 min of notebooks (commit `abc1234`; the machine shared).\n"
                     "- Gemma 3 270M's notebook 05 took 10 min (commit `fff0000`).\n")
    assert record_script.run_notes([]) == "No default run is recorded yet.\n"


def test_tables_rewrite_only_the_blocks_and_check_names_what_differs():
    blocks = {"front": "| a | b |\n", "control": "none\n"}
    text = "intro\n<!-- record:front -->\nold 0.1 [0.0, 0.2]\n<!-- /record:front -->\nend\n"
    new = rec.apply_blocks(text, blocks)
    assert new == "intro\n<!-- record:front -->\n| a | b |\n<!-- /record:front -->\nend\n"
    assert rec.check_blocks(text, blocks, "p") == ["p: block 'front' differs from the records (run `make tables`)"]
    assert rec.check_blocks(new, blocks, "p") == [] and rec.stray_results(new, "p") == []
    with pytest.raises(rec.RecordError, match="unknown record block 'nope'"):
        rec.apply_blocks("<!-- record:nope -->\nx<!-- /record:nope -->", blocks)


def test_record_run_notes_the_commit(tmp_path):
    from helpers.study.report import recorded_runs

    record_run(tmp_path, "00_icl_setting", {"status": "ok", "seconds": 1.0})
    assert recorded_runs(tmp_path)["00_icl_setting"]["commit"] == report.git_commit()


def test_method_digests_follow_the_code_not_the_prose_and_say_when_a_run_is_stale(tmp_path, monkeypatch):
    """A notebook's method digest changes with its code cells and the helpers modules it imports, not with its
    markdown or comments; a record whose digest differs from today's says so beside its run, one without digests
    says that it cannot tell, and a notebook whose files changed since the run gets no digest at all."""
    import helpers.study.record as R
    import helpers.study.record_code as RC

    nb = tmp_path / "01_probe.py"
    nb.write_text("# %% [markdown]\n# The claim.\n\n# %%\nfrom helpers.experiments import saliency as sal\nx = 1\n")
    monkeypatch.setattr(RC, "NOTEBOOKS_DIR", tmp_path)
    first = RC.method_digest("01_probe")
    nb.write_text(nb.read_text().replace("# The claim.", "# The claim, reworded.") + "# a comment\n")
    assert RC.method_digest("01_probe") == first  # prose and comments do not count
    files = {str(f.relative_to(RC.ROOT)) for f in RC.method_files("01_probe")[1:]}
    assert "helpers/experiments/saliency.py" in files and "helpers/core/tl_patches.py" in files
    assert "helpers/core/store.py" not in files and "helpers/core/controls/training.py" not in files
    assert not any(f.startswith("helpers/study/plots") or f == "helpers/study/claims.py" for f in files)
    run = R.Record("m", "m", "default", "default", "abc1234", "d", {}, (), methods={"01_probe": first})
    assert RC.stale_methods(run) == [] and R.code_note(run) == "its notebooks' code is unchanged since"
    nb.write_text(nb.read_text().replace("x = 1", "x = 2"))
    assert RC.stale_methods(run) == ["01_probe"] and "notebook(s) 01 has changed since this run" in R.code_note(run)
    assert "not recorded" in R.code_note(R.Record("m", "m", "default", "default", "abc1234", "d", {}, ()))
    assert "not recorded" in R.runs_line([R.Record("m", "m", "default", "default", "abc1234", "d", {}, ())])
    monkeypatch.setattr(RC, "_changed_since", lambda commit: set())
    assert RC.run_methods(["01_probe"], "abc1234") == {"01_probe": RC.method_digest("01_probe")}
    monkeypatch.setattr(RC, "_changed_since", lambda commit: {"helpers/experiments/saliency.py"})
    assert RC.run_methods(["01_probe"], "abc1234") == {}  # its method changed after the run: no digest credited
    monkeypatch.setattr(RC, "_changed_since", lambda commit: None)
    assert RC.run_methods(["01_probe"], "abc1234") == {}
    # restamp: a new digest for a notebook whose code is the run's, the old one kept (so still stale) otherwise
    rec = tmp_path / "m-default.json"
    rec.write_text('{"commit": "abc1234", "methods": {"01_probe": "old", "02_probe": "old"}}')
    monkeypatch.setattr(RC, "method_digest", lambda sec: "new-" + sec[:2])
    monkeypatch.setattr(RC, "_same_code_since", lambda sec, commit: sec == "01_probe")
    assert RC.restamp(rec) == ["01_probe"]
    assert '"01_probe": "new-01"' in rec.read_text() and '"02_probe": "old"' in rec.read_text()
    assert RC.restamp(rec) == []  # already stamped
    # a notebook left without a digest when its record was made (its prose changed before `make record`): stamped
    # when its code is the run's, still without one when it is not
    rec.write_text('{"commit": "abc1234", "methods": {}, "seconds": {"01_probe": 1.0, "02_probe": 2.0}}')
    assert RC.restamp(rec) == ["01_probe"]
    assert json.loads(rec.read_text())["methods"] == {"01_probe": "new-01"}


def test_a_record_saved_between_runs_leaves_the_next_run_at_its_commit(tmp_path):
    """``make record`` writes docs/record/ after a run; a run started after it is still at the commit (no notebook
    reads a record), while any other uncommitted change to a tracked file marks the run ``-dirty``."""
    import subprocess

    from helpers.study.report import git_commit

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    (tmp_path / "docs" / "record").mkdir(parents=True)
    (tmp_path / "docs" / "record" / "m-default.json").write_text("{}\n")
    (tmp_path / "Makefile").write_text("all:\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    sha = git_commit(tmp_path)
    assert len(sha) == 40
    (tmp_path / "docs" / "record" / "m-default.json").write_text('{"a": 1}\n')
    assert git_commit(tmp_path) == sha
    (tmp_path / "Makefile").write_text("all: x\n")
    assert git_commit(tmp_path) == sha + "-dirty"


def test_every_papers_statement_is_a_claim_some_committed_record_holds():
    """helpers/study/paper.py's statements are what the tables print beside a claim: each is a claim of a committed
    record, a control claim that measures a check's power (power_report.CHECKS) or a template for your own task
    (``*_own``). One that is none of these is the statement of a check that no longer exists, and would sit unread."""
    from helpers.study.paper import CLAIMS
    from helpers.study.power_report import CHECKS, NOT_MEASURED

    held = {c.key for r in rec.load_records() for c in r.claims} | set(CHECKS.values())
    held |= {k for k in CLAIMS if any(k in why for why in NOT_MEASURED.values())}  # a measurement a reason quotes
    unread = sorted(k for k in set(CLAIMS) - held if not k.endswith("_own"))
    assert not unread, f"statements no committed record holds and no power row uses: {unread}"


def test_a_broken_record_stops_the_tables_with_its_file_and_what_is_wrong(tmp_path, monkeypatch):
    """A hand-edited, truncated, empty, commit-less or copied record is refused by name (never rendered, never a raw
    JSONDecodeError or KeyError); an own-task run or a model named by its short name is not recorded."""
    results, folder, key, slug = _run(tmp_path, monkeypatch)
    out = tmp_path / "record"
    path = rec.make_record(results, "google/gemma-3-270m", key, out_dir=out)
    good = json.loads(path.read_text())
    assert rec.record_problems(good) == []

    def refused(d, match, name=path.name):
        (out / name).write_text(d if isinstance(d, str) else json.dumps(d))
        with pytest.raises(rec.RecordError, match=match) as e:
            rec.load_records(out)
        assert name in str(e.value)
        path.write_text(json.dumps(good))

    bad = json.loads(json.dumps(good))
    bad["notebooks"]["02_shallow_isolation"]["claims"][0]["ours"].update(estimate=150.0, low=95.0, high=89.7)
    refused(bad, "low <= estimate <= high broken")
    bad = json.loads(json.dumps(good))
    bad["notebooks"]["03_deep_aucroc"]["claims"][0]["verdict"] = "replicates!"
    refused(bad, "is not one of")
    bad = json.loads(json.dumps(good))
    bad["notebooks"]["03_deep_aucroc"]["claims"][0]["ours"]["estimate"] = float("nan")
    refused(bad, "finite numbers")
    refused(path.read_text()[:100], "cannot be read as a record")
    refused("", "cannot be read as a record")
    refused({k: v for k, v in good.items() if k != "commit"}, "field 'commit' is missing")
    refused({**good, "commit": "abc1234-dirty"}, "not a clean commit sha")
    refused({**good, "run_key": "default-own-fp"}, "not the profile")
    refused([1, 2], "a JSON object")
    (out / "copy.json").write_text(json.dumps(good))
    with pytest.raises(rec.RecordError, match="copy.json: its content is the record"):
        rec.load_records(out)
    (out / "copy.json").unlink()
    # make record: a run on own tasks, and a model's short name
    with pytest.raises(rec.RecordError, match="not recorded into the shipped records"):
        rec.make_record(results, "google/gemma-3-270m", "default-own-fp", out_dir=out)
    with pytest.raises(rec.RecordError, match="MODELS takes a model's full name.*gemma-3-270m ran the default"):
        rec.make_record(results, "gemma", key, out_dir=out)


def test_an_unclosed_block_is_refused_and_a_deleted_record_is_named(tmp_path):
    import subprocess

    blocks = {"front": "| a | b |\n"}
    text = "intro\n<!-- record:front -->\nold\nend\n"
    with pytest.raises(rec.RecordError, match="has no `<!-- /record:front -->` after it"):
        rec.apply_blocks(text, blocks, "README.md")
    assert rec.check_blocks(text, blocks, "README.md")[0].startswith("README.md: `<!-- record:front -->` has no")
    assert "closes no block" in rec.unclosed_blocks("x\n<!-- /record:front -->\n")[0]
    assert rec.unclosed_blocks("<!-- record:front -->\nx<!-- /record:front -->") == []
    # a record git tracks, deleted from the working tree
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.json").write_text("{}")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.json"], check=True)
    assert rec.missing_records(tmp_path) == []
    (tmp_path / "a.json").unlink()
    assert rec.missing_records(tmp_path) == ["a.json"]


def test_tables_check_is_a_target_of_its_own():
    """`make tables --check` is read by make as its own option (--check-symlink-times) and rewrites the tables; the
    check is `make tables-check`, and no page quotes the other form."""
    assert "\ntables-check: setup\n\t$(PY) scripts/record.py tables --check\n" in (ROOT / "Makefile").read_text()
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "make tables --check" not in page.read_text(), page
