"""The run record: what the README and docs/results.md say about results, and where it comes from.

A record is one JSON file per model and run under ``docs/record/`` (``<model slug>-<run key>.json``), written by
``make record`` from a finished ``make run`` (:func:`make_record`): the model, the profile, the commit and date
of the run, every notebook's claims exactly as the notebook reported them (:func:`helpers.study.claims.report_claims`)
and each notebook's run time. It is committed, so a reader can see which run a number comes from.

The result tables of README.md and docs/results.md are *generated* from the records (:func:`render_blocks`):
each sits between ``<!-- record:<name> -->`` and ``<!-- /record:<name> -->`` and is rewritten by
``make tables``. ``tests/test_record.py`` fails when a block differs from what the records give, and when a
result (an interval such as ``0.76 [0.73, 0.80]``, or a verdict in bold) appears in README.md, docs/ or a
notebook's markdown outside a block. So no result number or verdict is typed by hand, and a reader never meets
two answers to one question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from helpers.study.claims import VERDICTS, Claim, shown_digits
from helpers.study.power_report import (
    Power,
    annotate,
    checked_keys,
    claim_kind,
    informative,
    power_by_key,
    power_markdown,
    power_word,
    specific_form_note,
)
from helpers.study.record_code import run_methods, stale_methods
from helpers.study.record_file import (
    CONTROL,
    RECORD_DIR,
    Record,
    RecordError,
    load_records,
    missing_records,
    read_record,
    record_problems,
)
from helpers.study.report import recorded_runs
from helpers.study.results import model_slug

__all__ = ["RECORD_DIR", "Record", "minutes", "model_label", "RecordError", "make_record", "supersede", "load_records",
           "read_record", "record_problems", "unclosed_blocks", "missing_records",
           "merged",
           "render_blocks", "apply_blocks",
           "check_blocks", "stray_results", "README_CLAIMS",
           "CONTROL"]

ROOT = Path(__file__).resolve().parent.parent.parent

# The claims the README's front table shows, in order (docs/results.md shows every claim of every notebook).
README_CLAIMS = ("00.more_demos_no_help", "01.shallow_wp_dominant", "01.deep_pq_dominant",
                 "02.label_first_hurts_most", "02.random_first_barely_matters", "03.peak_aucroc", "03.r_crossing",
                 "04.gain_over_1shot", "04.gain_over_5shot", "05.hidden_anchor_label_loyalty",
                 "05.anchor_minus_Text_anchor_label_loyalty", "05.anchor_minus_Hidden_random-top_label_loyalty",
                 # the specific forms of the paper's checks that fire on the negative controls (SPECIFIC_FORM)
                 "10.label_gathers_causal", "10.label_read_causal", "10.anchors_carry_mapping", "10.anchors_carry_text",
                 "06.confusion_agreement", "07.foobar_icl", "07.ablation_at_q", "07.value_output", "07.two_towers",
                 "07.majority_reduction", "07.recency_reduction")

_BLOCK = re.compile(r"<!-- record:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /record:(?P=name) -->", re.S)
# a result as a reader sees it: "estimate [low, high]" (any sign, unicode minus, optional % or unit), or a verdict
# in bold
_NUM = r"[−+-]?\d+(?:\.\d+)?%?"
INTERVAL = re.compile(rf"{_NUM}\s*\[{_NUM},\s*{_NUM}\]")
BOLD_VERDICT = re.compile(r"\*\*(" + "|".join(re.escape(v) for v in VERDICTS) + r")\*\*", re.I)


def make_record(results: Path, model: str, key: str, commit: str | None = None, out_dir: Path = RECORD_DIR,
                note: str = "", notebooks: Sequence[str] = ()) -> Path:
    """Write the record of ``results/<model slug>/<key>`` (a finished ``make run``) to ``out_dir``; returns its path.

    Every notebook's claims are taken as saved (``metrics/<notebook>.json``); the run's date is the last
    notebook's finish in ``runs.json``, its commit the one ``make run`` recorded there (else ``commit``). Refuses a
    folder with no claims, a notebook that did not finish ok, notebooks of different commits, and a run whose commit
    is unknown or had uncommitted changes.

    ``notebooks`` (numbers, e.g. ``["10"]``): record only those notebooks, as a *part* of the model's record
    (``<slug>-<key>-nb10.json``, :attr:`Record.part`), beside its record of the other notebooks made at another
    commit: the tables show a model's records as one column (:func:`merged`), each run named with its commit."""
    slug = CONTROL if model == CONTROL else model_slug(model)
    folder = Path(results) / slug / key
    profile = key.split("-")[0]
    if key != profile:
        raise RecordError(f"{folder}: a run on other or own tasks (run key {key!r}) is not recorded into the shipped "
                          f"records, which hold the {profile} profile's tasks; its report is "
                          f"{Path(results) / f'RESULTS-{key}.md'}. Unset ICL_TASKS and ICL_OWN_TASK to record the "
                          "profile's own run")
    if not folder.is_dir():
        found = sorted(p.parent.name for p in Path(results).glob(f"*/{key}") if p.is_dir())
        raise RecordError(f"no run of {model!r} at {folder}: MODELS takes a model's full name, as `make run` does "
                          f"({', '.join(found) or 'no model'} ran the {key} profile under {results}); run "
                          f"`make run PROFILE={profile}` first")
    wanted = [str(n).zfill(2) for n in notebooks]
    metrics = [p for p in sorted((folder / "metrics").glob("*.json")) if not wanted or p.stem[:2] in wanted]
    if not metrics:
        raise RecordError(f"no claims in {folder / 'metrics'}{f' of notebooks {wanted}' if wanted else ''}: run "
                          f"`make run PROFILE={key.split('-')[0]}` for {model} first, then `make record` with the same "
                          "PROFILE, MODELS (and NOTEBOOKS)")
    runs = {nb: info for nb, info in recorded_runs(folder).items() if not wanted or nb[:2] in wanted}
    missing = [n for n in wanted if not any(nb[:2] == n for nb in runs)]
    if missing:
        raise RecordError(f"{folder}: notebooks {missing} have no finished run there; run them (`make run "
                          f"NOTEBOOKS=...`) before recording them")
    failed = sorted(nb for nb, info in runs.items() if info.get("status") != "ok")
    if failed:
        raise RecordError(f"{folder}: notebooks {failed} did not finish ok in the last run; rerun them "
                          f"(`make run NOTEBOOKS=...`) before recording")
    commits = {info.get("commit") for info in runs.values()} - {None}
    if len(commits) > 1:
        raise RecordError(f"{folder}: its notebooks ran at different commits {sorted(commits)}; rerun them at one "
                          f"commit before recording")
    commit = next(iter(commits), None) or commit
    if not commit or commit == "unknown":
        raise RecordError(f"{folder}: the run's commit is unknown; pass --commit with the commit that ran it")
    if commit.endswith("-dirty"):
        raise RecordError(f"{folder}: the notebooks ran with uncommitted changes ({commit}), which no one can check "
                          f"out again; commit them and rerun before recording")
    claims = {}
    for p in metrics:
        d = json.loads(p.read_text())
        if d.get("claims"):
            power = (d.get("metrics") or {}).get("power")
            claims[p.stem] = {"claims": d["claims"], **({"power": power} if power else {})}
    date = max((info.get("finished", "") for info in runs.values()), default="") or "unknown"
    part = "+".join(wanted)
    rec = {"model": model, "slug": slug, "profile": key.split("-")[0], "run_key": key, "commit": commit, "date": date,
           "seconds": {nb: info.get("seconds") for nb, info in sorted(runs.items())}, "note": note,
           **({"part": part} if part else {}), "methods": run_methods(list(claims), commit), "notebooks": claims}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / Record.from_json(rec).file_name
    path.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    return path


def supersede(new: Path) -> list[str]:
    """Take the notebooks of the record ``new`` out of the same model's other records of the same run key beside it
    (``make record NOTEBOOKS=02`` after a rerun of notebook 02: the newer run replaces the older one's claims, digest
    and time of those notebooks). A record that keeps other notebooks becomes a part holding them (its file renamed;
    its commit, date and note are its run's, as before); one left with none is deleted. Returns a line per change."""
    got = json.loads(new.read_text())
    taken = {sec[:2] for sec in (*got["notebooks"], *got["seconds"])}
    said = []
    for path in sorted(new.parent.glob("*.json")):
        d = json.loads(path.read_text())
        if path == new or (d["model"], d["run_key"]) != (got["model"], got["run_key"]):
            continue
        gone = sorted({sec[:2] for part in ("notebooks", "seconds", "methods") for sec in d.get(part, {})} & taken)
        if not gone:
            continue
        for part in ("notebooks", "seconds", "methods"):
            d[part] = {sec: v for sec, v in d.get(part, {}).items() if sec[:2] not in taken}
        left = sorted({sec[:2] for sec in (*d["notebooks"], *d["seconds"])})
        path.unlink()
        if not left:
            said.append(f"{path.name}: removed, {new.name} holds all its notebooks")
            continue
        d["part"] = "+".join(left)
        out = path.parent / Record.from_json(d).file_name
        out.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
        said.append(f"{path.name} -> {out.name}: notebooks {', '.join(gone)} taken out ({new.name} holds them now)")
    return said


def merged(records: Sequence[Record]) -> list[tuple[Record, dict[str, Claim], list[Record]]]:
    """One column per model: ``(its first record, the claims of all its records by key, those records)``, in the
    records' order. A model's part records (:attr:`Record.part`) hold other notebooks than its main record; a key
    two of them hold is an error (the same claim from two runs)."""
    out: dict[str, tuple[Record, dict[str, Claim], list[Record]]] = {}
    for r in records:
        first, by, group = out.setdefault(r.model, (r, {}, []))
        twice = sorted(set(by) & set(r.by_key()))
        if twice:
            raise RecordError(f"{r.model}: the records {[g.file_name for g in group]} and {r.file_name} both hold "
                              f"{twice[:3]}; keep one run's record of each notebook")
        by.update(r.by_key())
        group.append(r)
    return list(out.values())


# ------------------------------------------------------------------ rendering

def _digits(c: Claim) -> int:
    """Decimals a claim is shown with: 3 for relative flows and correlations near 1, 2 for AUCs, accuracies as
    fractions and correlations, 1 for percentages and points."""
    if c.ours is None:
        return 1
    if c.unit in ("%", "points"):
        return 1
    return 3 if c.key.startswith("01.") else 2


def cell(c: Claim | None, power: dict[str, Power] | None = None) -> str:
    """``"0.76 [0.73, 0.80]: **partly**"`` (a missing value in words); "not run" when the record has no such claim.
    With ``power`` (the recorded power rows by claim key, possibly empty), the verdict says what it is worth in a few
    words (:func:`helpers.study.power_report.power_word`): ``"0.886 [0.880, 0.890]: **replicates** (uninformative
    check)"``."""
    if c is None:
        return "not run"
    worth = "" if power is None else f" ({power_word(c.key, power)})"
    d = _digits(c)
    if c.ours is None or c.extra.get("part") == "no measurable bias":
        ours = c.ours_text()
    else:
        iv, unit = c.ours, {"%": "%", "x": "x"}.get(c.unit, "")
        d = shown_digits(iv, d)
        ours = f"{iv.estimate:.{d}f}{unit} [{iv.low:.{d}f}, {iv.high:.{d}f}]"
    return f"{ours}: **{c.verdict}**{worth}"


def _esc(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


OFFLINE = ("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")  # the models `make run` runs by default
LABELS = {"google/gemma-3-270m": "Gemma 3 270M", "HuggingFaceTB/SmolLM2-135M-Instruct": "SmolLM2-135M",
          CONTROL: "notebook 09's controls"}


def model_label(r: Record) -> str:
    """The model's name as the tables show it (its last path part for a model without a label here)."""
    return LABELS.get(r.model, r.model.split("/")[-1])


def minutes(r: Record) -> float:
    return sum(s or 0 for s in r.seconds.values()) / 60


def code_note(r: Record) -> str:
    """Whether the code a record's notebooks computed with is still the code here (:func:`stale_methods`)."""
    if not r.methods:
        return "the digest of the code it ran is not recorded, so a change to that code since cannot be told"
    stale = stale_methods(r)
    if stale:
        return (f"the code of notebook(s) {', '.join(s[:2] for s in stale)} has changed since this run: its numbers "
                "may differ at this commit until it is rerun")
    return "its notebooks' code is unchanged since"


def runs_line(records: Sequence[Record]) -> str:
    """One sentence per record: model, profile, commit, date and minutes of notebooks, and whether the code its
    notebooks computed with has changed since (:func:`code_note`)."""
    parts = []
    for r in records:
        nbs = r.part.replace("+", " ")
        only = "" if not r.part else f' NOTEBOOKS="{nbs}"' if " " in nbs else f" NOTEBOOKS={nbs}"  # as a shell takes it
        parts.append(f"{model_label(r)}: `make run PROFILE={r.profile}{only}` at commit `{r.commit[:7]}`, finished "
                     f"{r.date}, {minutes(r):.1f} min of notebooks{f' ({r.note})' if r.note else ''} (record "
                     f"`docs/record/{r.file_name}`; {code_note(r)})")
    return "Runs: " + "; ".join(parts) + "." if parts else "No run has been recorded yet (`make record`)."


def recorded_power(records: Sequence[Record]) -> tuple[dict[str, Power], list[Record]]:
    """The checks' power (``{claim key: Power}``) the records hold (notebook 09's record holds every check's but
    notebook 11's, whose run measures its own; for a key in several, the first record's), and the records it came
    from, in order. A check the code now says the controls cannot measure
    (:data:`helpers.study.power_report.NOT_MEASURED`) reads so, whatever an older record measured for it
    (:func:`helpers.study.power_report.current_power`)."""
    from helpers.study.power_report import as_power_map  # lazy: only for the tables

    out: dict[str, Power] = {}
    sources = []
    for r in records:
        new = {k: p for k, p in as_power_map(r.power).items() if k not in out}
        if new:
            out.update(new)
            sources.append(r)
    return out, sources


def _power_cell(key: str, power: dict[str, Power]) -> str:
    if not checked_keys([key]):
        return "not a check of notebooks 01-03, 05, 07, 10 or 11"
    return (annotate(power.get(key)) + specific_form_note(key, power)) if power else "not recorded yet"


FRONT_GROUPS = (
    ("informative", "**What the informative checks show.** Each of these checks sees its mechanism on the "
                    "positive controls and stays silent on the negative ones (notebook 09's populations), so its "
                    "verdict on a model is evidence about that mechanism:"),
    ("premise", "**Premises and outcomes.** Facts about the models that the checks presuppose (accuracies, the "
                "mapping control), and the applications' measured effects, each read on its own interval:"),
    ("other", "**Checks the controls cannot vouch for.** The paper's checks whose power on the controls is "
              "uninformative (they fire on a model that reads no mapping, or miss the mechanism where it is "
              "there), unsure or not measured, and the references other checks are read against: a "
              "\"replicates\" here is not evidence for the mechanism:"),
)


def _front_group(key: str, power: dict[str, Power]) -> str:
    """Which part of the front table the claim ``key`` belongs to (:data:`FRONT_GROUPS`)."""
    kind = claim_kind(key)
    if kind in ("premise", "outcome"):
        return "premise"
    return "informative" if informative(key, power) else "other"


def front_table(records: Sequence[Record], keys: Sequence[str] = README_CLAIMS) -> str:
    """The README's table: the claims of ``keys`` (those no record has are left out), one column per offline
    model, and what the check behind each is worth on the controls (:mod:`helpers.study.power_report`). It leads
    with the claims whose check is informative, then the premises and outcomes, then the checks the controls cannot
    vouch for and the references (:data:`FRONT_GROUPS`); each verdict carries its power in a few words."""
    cols = [m for m in merged([r for r in records if r.slug != CONTROL]) if set(m[1]) & set(keys)]
    if not cols:
        return "No run of an offline model has been recorded yet: `make run`, then `make record` and `make tables`.\n"
    models = [r for r, _, _ in cols]
    by = [b for _, b, _ in cols]
    power, _ = recorded_power(records)
    head = ["| paper claim (section) | paper | " + " | ".join(model_label(r) for r in models)
            + " | the check on the controls |", "|---|---|" + "---|" * len(models) + "---|"]
    groups: dict[str, list[str]] = {}
    for k in keys:
        cs = [b.get(k) for b in by]
        first = next((c for c in cs if c is not None), None)
        if first is None:
            continue
        groups.setdefault(_front_group(k, power), []).append(
            f"| {_esc(first.statement)} ({_esc(first.source)}) | {_esc(first.paper)} | "
            + " | ".join(_esc(cell(c, power)) for c in cs) + f" | {_esc(_power_cell(k, power))} |")
    parts = []
    for name, said in FRONT_GROUPS:
        rows = groups.get(name)
        if name == "informative" and not rows:
            parts.append(said.split(".**")[0] + ".** No check of this table is informative on the controls" + (
                "" if power else " (their power has not been recorded yet)") + ".")
        elif rows:
            parts.append(said + "\n\n" + "\n".join(head + rows))
    missing = [LABELS[m] for m in OFFLINE if m not in {r.model for r in models}]
    gap = (f" No {TABLE_PROFILE}-profile run of {', '.join(missing)} is recorded yet: its notebooks run in `make "
           f"run`, and `make record` after that run adds its column." if missing else "")
    shown = [g for _, _, group in cols for g in group if set(g.by_key()) & set(keys)]  # the runs the table quotes
    return "\n\n".join(parts) + "\n\n" + runs_line(shown) + gap + "\n"


def control_table(records: Sequence[Record]) -> str:
    """The positive control's claims (notebook 09 grades it with 01-03's and 07's claims too)."""
    ctrl = [r for r in records if r.slug == CONTROL]
    if not ctrl:
        return "The positive control has not been recorded yet: `make run`, then `make record`.\n"
    r = ctrl[0]
    lines = ["| claim, graded on the control (section) | paper | on the control |", "|---|---|---|"]
    for c in r.claims:
        lines.append(f"| {_esc(c.statement)} ({_esc(c.source)}) | {_esc(c.paper)} | {_esc(cell(c))} |")
    return "\n".join(lines) + "\n\n" + runs_line([r]) + "\n"


def full_table(records: Sequence[Record]) -> str:
    """Every claim of every offline model's record, by notebook, with its note (docs/results.md)."""
    cols = merged([r for r in records if r.slug != CONTROL])
    if not cols:
        return "No run of an offline model has been recorded yet.\n"
    models = [r for r, _, _ in cols]
    keys = list(dict.fromkeys(c.key for _, _, group in cols for r in group for c in r.claims))
    by = [b for _, b, _ in cols]
    power, _ = recorded_power(records)
    lines = ["| notebook | claim | paper | " + " | ".join(model_label(r) for r in models) + " |",
             "|---|---|---|" + "---|" * len(models)]
    for k in keys:
        cs = [b.get(k) for b in by]
        first = next(c for c in cs if c is not None)
        lines.append(f"| {k[:2]} | {_esc(first.statement)} | {_esc(first.paper)} | "
                     + " | ".join(_esc(cell(c, power)) for c in cs) + " |")
    return "\n".join(lines) + "\n\n" + runs_line([g for _, _, group in cols for g in group]) + "\n"


def run_times(records: Sequence[Record]) -> str:
    """Minutes per notebook of each recorded model and profile (measured by ``make run``; a model's part records
    fill in the notebooks they ran)."""
    if not records:
        return "No run has been recorded yet.\n"
    cols: dict[tuple[str, str], tuple[Record, dict]] = {}
    for r in records:
        cols.setdefault((r.model, r.profile), (r, {}))[1].update(r.seconds)
    nbs = sorted({nb for _, sec in cols.values() for nb in sec})
    lines = ["| notebook | " + " | ".join(f"{model_label(r)} ({r.profile})" for r, _ in cols.values()) + " |",
             "|---|" + "---|" * len(cols)]
    for nb in nbs:
        lines.append(f"| {nb} | " + " | ".join(
            "" if sec.get(nb) is None else f"{sec[nb] / 60:.1f}" for _, sec in cols.values()) + " |")
    lines.append("| all | " + " | ".join(f"{sum(v or 0 for v in sec.values()) / 60:.1f}" for _, sec in cols.values())
                 + " |")
    return "\n".join(lines) + "\n"


def _accounts_table(records: Sequence[Record], nn: str, verdicts_of, account_claims: dict) -> tuple[str, bool]:
    """A notebook's verdict per account (``verdicts_of(claims)``: ``{account: verdict}``), one column per recorded
    model that ran notebook ``nn``, and what the checks behind each verdict (``account_claims[account]``) are worth
    on the controls; and whether any record ran it."""
    from helpers.study.power_report import account_power  # lazy: only for the tables

    power, _ = recorded_power(records)
    ran = [(r, verdicts_of(cs, power), {a: (w, n) for (a, w), n in zip(verdicts_of(cs, power, which="checks").items(),
                                                                       verdicts_of(cs, power, which="counted").values())})
           for r in records for cs in [[c for c in r.claims if c.key.startswith(f"{nn}.")]]]
    ran = [x for x in ran if x[1]]
    if not ran:
        return (f"No run of notebook {nn} is recorded yet at the default profile: `make run`, then `make record` and "
                "`make tables` add its verdicts here.\n"), False
    accounts = list(dict.fromkeys(a for _, v, _ in ran for a in v))
    lines = [f"| account (notebook {nn}) | " + " | ".join(model_label(r) for r, _, _ in ran)
             + " | its checks on the controls |", "|---|" + "---|" * len(ran) + "---|"]
    for a in accounts:
        said = account_power(account_claims.get(a, ()), power) if power else "not recorded yet"
        lines.append(f"| {_esc(a)} | " + " | ".join(
            f"**{v[a]}** ({w[a][1]} checks informative; the paper's checks: {w[a][0]})" if a in v else ""
            for _, v, w in ran) + f" | {_esc(said)} |")
    return "\n".join(lines) + "\n\n" + runs_line([r for r, _, _ in ran]) + "\n", True


def verdict_table(records: Sequence[Record]) -> str:
    """Notebook 10's verdict per account (label words, forerunner and template tokens; in-context, induction and
    function-vector heads; :func:`helpers.study.challengers_report.verdicts`), one column per recorded model that
    ran it, and what the checks behind each verdict are worth on the controls
    (:func:`helpers.study.power_report.account_power`)."""
    from helpers.study.challengers_report import ACCOUNT_CLAIMS, verdicts  # lazy: pandas, only for the tables

    out, ran = _accounts_table(records, "10", verdicts, ACCOUNT_CLAIMS)
    keys = {k for ks in ACCOUNT_CLAIMS.values() for k in ks}
    sources = [r for r in recorded_power(records)[1] if keys & set(power_by_key(r.power))]  # those its rows come from
    if ran and sources:
        runs = ", ".join(f"{model_label(r)} (record `docs/record/{r.file_name}`)" for r in sources)
        out += (f"\nThe checks' power comes from the run{'s' if len(sources) > 1 else ''} of {runs}: the table under "
                "'The checks' power' has each check's sensitivity and specificity.\n")
    return out


def after_verdict_table(records: Sequence[Record]) -> str:
    """Notebook 11's verdict per account (:func:`helpers.study.after_report.after_verdicts`), one column per
    recorded model that ran it, and what the checks behind each verdict are worth on the controls (notebook 11
    measures them itself, power group "11")."""
    from helpers.study.after_report import AFTER_ACCOUNTS, after_verdicts  # lazy: pandas, only for the tables

    return _accounts_table(records, "11", after_verdicts, AFTER_ACCOUNTS)[0]


def power_table(records: Sequence[Record]) -> str:
    """Every check's sensitivity on the positive controls and specificity on the negative ones, with their
    intervals and reading (:func:`helpers.study.power_report.power_markdown`), from the records that hold them."""
    from helpers.study.paper import CLAIMS  # lazy: the claims' statements, only for the tables

    power, sources = recorded_power(records)
    if not sources:
        return ("The checks' power has not been recorded yet: `make run` (notebook 09 measures it on the controls), "
                "then `make record` and `make tables`.\n")
    rows = list(power.values())
    said = power_markdown(rows, {k: CLAIMS[k]["statement"] for k in power if k in CLAIMS})
    return said + "\n" + runs_line(sources) + "\n"


RENDERERS = {"front": front_table, "control": control_table, "full": full_table, "times": run_times,
             "verdicts": verdict_table, "after": after_verdict_table, "power": power_table}
TABLE_PROFILE = "default"  # the result tables show the records of this profile; the run times show every record


def render_blocks(records: Sequence[Record], extra: dict | None = None) -> dict[str, str]:
    """Every block's text: the result tables from the records of :data:`TABLE_PROFILE`, the run times from all;
    ``extra`` (``{name: fn(records)}``) adds blocks made elsewhere (scripts/record.py's run-time sentence)."""
    tables = [r for r in records if r.profile == TABLE_PROFILE]
    out = {name: fn(records if name == "times" else tables) for name, fn in RENDERERS.items()}
    return out | {name: fn(records) for name, fn in (extra or {}).items()}


_OPEN = re.compile(r"<!-- record:(?P<name>[\w-]+) -->")
_CLOSE = re.compile(r"<!-- /record:(?P<name>[\w-]+) -->")


def unclosed_blocks(text: str, where: str = "text") -> list[str]:
    """Record markers without their pair (an opening ``<!-- record:name -->`` with no closing one after it, or the
    other way round): the block would be left out of every rewrite and check."""
    paired = {m.start("name") for m in _BLOCK.finditer(text)}
    out = [f"{where}: `<!-- record:{m.group('name')} -->` has no `<!-- /record:{m.group('name')} -->` after it"
           for m in _OPEN.finditer(text) if m.start("name") not in paired]
    closed = {m.end() for m in _BLOCK.finditer(text)}
    out += [f"{where}: `<!-- /record:{m.group('name')} -->` closes no block" for m in _CLOSE.finditer(text)
            if m.end() not in closed]
    return out


def apply_blocks(text: str, blocks: dict[str, str], where: str = "text") -> str:
    """``text`` with the body of every ``<!-- record:name -->`` block replaced by ``blocks[name]``; a marker without
    its pair is a :class:`RecordError`."""
    bad = unclosed_blocks(text, where)
    if bad:
        raise RecordError("; ".join(bad) + ": close the block, or remove the marker")
    def rep(m: re.Match) -> str:
        name = m.group("name")
        if name not in blocks:
            raise RecordError(f"{where}: unknown record block {name!r}; known: {sorted(blocks)}")
        return f"<!-- record:{name} -->\n{blocks[name]}<!-- /record:{name} -->"

    return _BLOCK.sub(rep, text)


def check_blocks(text: str, blocks: dict[str, str], where: str = "text") -> list[str]:
    """The blocks of ``text`` whose body differs from what the records give, and markers without their pair (empty:
    all agree)."""
    return unclosed_blocks(text, where) + [
        f"{where}: block {m.group('name')!r} differs from the records (run `make tables`)"
        for m in _BLOCK.finditer(text) if blocks.get(m.group("name")) != m.group("body")]


def stray_results(text: str, where: str = "text") -> list[str]:
    """Results typed outside a record block: intervals and bold verdicts (empty: none)."""
    outside = _BLOCK.sub("", text)
    found = [f"{where}: interval {m.group(0)!r} outside a record block" for m in INTERVAL.finditer(outside)]
    found += [f"{where}: verdict {m.group(0)!r} outside a record block" for m in BOLD_VERDICT.finditer(outside)]
    return found
