"""One object per paper claim: the paper's value and where it is stated, the check fixed before the run,
our value with its interval, the verdict, and the sentence that says it.

An experiment module builds its notebook's claims from its intervals (``<experiment>_claims(...)``), taking
the paper's side from :data:`helpers.study.paper.CLAIMS`, so the papers' numbers live in one place. A
notebook then reports in one line::

    report_claims("02_shallow_isolation", claims)

which shows the table (paper | ours | criterion | verdict), prints the sentences, and saves them in the
notebook's metrics, from which ``make run`` writes RESULTS (:mod:`helpers.study.report`).

Verdicts are the project's fixed vocabulary (:data:`VERDICTS`). Under the smoke profile the run is too small
for any verdict to be evidence; the table says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from helpers.study.paper import CLAIMS
from helpers.study.profiles import current_model_name, get_profile
from helpers.study.results import load_metrics, save_metrics
from helpers.study.stats import Interval

__all__ = ["Claim", "VERDICTS", "above_zero", "shown_digits", "claim", "measured_on", "claims_frame", "report_claims", "reported_claim", "quote_claim",
           "reported_claims", "reading_markdown", "show_reading", "run_power"]

VERDICTS = ("replicates", "partly", "does not replicate", "inconclusive", "not comparable")


def above_zero(iv: Interval) -> str:
    """The verdict of a contrast whose claim is "above 0": the 95% interval above 0 "replicates", below 0 "does not
    replicate", containing 0 "inconclusive"."""
    return "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"


def shown_digits(iv: Interval, digits: int) -> int:
    """``digits``, or more where the whole interval would read as zeros at ``digits`` decimals: then two significant
    figures of its largest bound (a flow difference of -0.00027 reads -0.00027, not -0.00)."""
    m = max(abs(iv.estimate), abs(iv.low), abs(iv.high))
    return 1 - math.floor(math.log10(m)) if 0 < m < 0.5 * 10 ** -digits else digits


@dataclass(frozen=True)
class Claim:
    """A paper claim beside our measurement.

    ``key``: ``"<notebook>.<name>"``, e.g. ``"02.label_first_hurts_most"``. ``paper``: the paper's value as it
    states it (a number, or a phrase for a figure). ``criterion``: the check on ``ours``, written before the
    run. ``ours``: an :class:`~helpers.study.stats.Interval` in ``unit`` (or ``None`` when the model gives no
    value, e.g. an undefined ratio). ``context``: what the number rests on (model, profile, sizes).
    ``missing``: what a missing ``ours`` means, in words (e.g. "no bias measured, so none to reduce"); shown in
    its place. ``tasks``: the tasks it was measured on when the notebook fixes them rather than the run's
    selection (notebook 10's label spans run on :data:`helpers.study.profiles.SPAN_TASK`); a run's report labels
    such a claim when those are not the run's tasks. Empty: the run's tasks.
    """

    key: str
    statement: str
    source: str
    paper: str
    criterion: str
    ours: Interval | None
    verdict: str
    unit: str = ""
    context: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)
    missing: str = ""
    tasks: tuple[str, ...] = ()  # the tasks it was measured on when the notebook fixes them, whatever the run selects

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} of claim {self.key!r} is not one of {VERDICTS}")
        if self.ours is not None and not isinstance(self.ours, Interval):
            raise TypeError(f"claim {self.key!r}: ours must be an Interval (helpers.study.stats) or None, "
                            f"got {type(self.ours).__name__}; compute it with bootstrap_means or bootstrap_statistic")

    @classmethod
    def from_json(cls, d: dict) -> Claim:
        """The claim :meth:`to_json` saved (its ``sentence`` is derived, so dropped)."""
        fields = {k: v for k, v in d.items() if k != "sentence"}
        fields["ours"] = None if d.get("ours") is None else Interval(**d["ours"])
        fields["tasks"] = tuple(d.get("tasks") or ())
        return cls(**fields)

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    def ours_text(self, digits: int = 1) -> str:
        if self.extra.get("part") == "no measurable bias":  # a reduction of nothing: its interval means nothing
            return "no measurable bias before the reduction, so nothing to reduce"
        if self.ours is None:
            return self.missing or "no value: the statistic has no estimate on this run (see the note)"
        unit = f" {self.unit}" if self.unit and self.unit != "%" else self.unit
        iv = self.ours
        f = f".{shown_digits(iv, digits)}f"
        return (f"{iv.estimate:{f}}{unit} [{iv.low:{f}}, {iv.high:{f}}] (95% CI; {iv.n_seeds} seed(s), "
                f"{iv.n_inputs} inputs)")

    def sentence(self, digits: int = 1) -> str:
        """``"<statement> (<source>): the paper reports <paper>; we measure <ours>. Check: <criterion>. Verdict: v."``"""
        ctx = f" on {self.context}" if self.context else ""
        note = f" {self.note}" if self.note else ""
        return (f"{self.statement} ({self.source}). Paper: {self.paper}. Ours{ctx}: {self.ours_text(digits)}. "
                f"Check: {self.criterion}. Verdict: {self.verdict}.{note}")

    def row(self, digits: int = 1) -> dict:
        """One row of the notebook's table and of RESULTS."""
        return {"claim": self.statement, "source": self.source, "paper": self.paper,
                "ours [95% CI]": self.ours_text(digits), "criterion (fixed before the run)": self.criterion,
                "verdict": self.verdict}

    def to_json(self, digits: int = 1) -> dict:
        d = asdict(self)
        d["ours"] = None if self.ours is None else asdict(self.ours)
        d["sentence"] = self.sentence(digits)
        return d


def claim(key: str, ours: Interval | None, verdict: str, criterion: str, unit: str = "", context: str = "",
          note: str = "", paper: str | None = None, statement: str | None = None, missing: str = "",
          as_key: str | None = None, tasks=(), **extra) -> Claim:
    """A :class:`Claim` whose statement, source and paper value come from :data:`helpers.study.paper.CLAIMS`.

    ``paper`` overrides the stored value (e.g. the paper's number for the task at hand); ``statement`` the
    stored statement (e.g. one that names the tasks a mean is over); ``as_key`` the key it is reported under
    (e.g. ``05.speedup_<your task>`` from the template ``05.speedup_own``, for a task the paper did not study);
    ``tasks`` the tasks it was measured on when the notebook fixes them (:class:`Claim`).
    """
    if key not in CLAIMS:
        raise KeyError(f"no paper claim {key!r}; add its statement, source and value to helpers.study.paper.CLAIMS "
                       f"(known: {sorted(CLAIMS)[:8]}...)")
    spec = CLAIMS[key]
    return Claim(key=as_key or key, statement=spec["statement"] if statement is None else statement,
                 source=spec["source"],
                 paper=spec["paper"] if paper is None else paper, criterion=criterion, ours=ours, verdict=verdict,
                 unit=unit, context=context, note=note, extra=extra, missing=missing, tasks=tuple(tasks))


def measured_on(claims: Sequence[Claim], tasks: Sequence[str], run_tasks: Sequence[str]) -> list[Claim]:
    """``claims`` measured on ``tasks`` rather than on all of the run's ``run_tasks`` (notebook 10 under ``smoke``,
    :func:`helpers.study.profiles.study_tasks`): each claim without tasks of its own names them
    (:attr:`Claim.tasks`). Unchanged when ``tasks`` are the run's."""
    if tuple(tasks) == tuple(run_tasks):
        return list(claims)
    return [c if c.tasks else replace(c, tasks=tuple(tasks)) for c in claims]


def claims_frame(claims: Sequence[Claim], digits: int = 1):
    """A ``pandas.DataFrame``: one row per claim (paper | ours | criterion | verdict)."""
    import pandas as pd  # lazy: pandas takes a second to import

    return pd.DataFrame([c.row(digits) for c in claims]).set_index("claim")


def report_claims(section: str, claims: Sequence[Claim], metrics: dict | None = None, digits: int = 1,
                  show: bool = True, model_name: str | None = None, profile: str | None = None):
    """Show a notebook's claims and save them (with ``metrics``) as ``metrics/<section>.json``.

    Returns the claims' table. Under the smoke profile a line above the table says the verdicts are not
    evidence (a handful of inputs). The saved file holds ``claims`` (every field, with the sentence),
    ``summary`` (the rows RESULTS tabulates) and ``metrics``.
    """
    if not claims:
        raise ValueError(f"{section}: no claims to report; build them with the experiment's *_claims function")
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{section}: claim keys repeat: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    model_name = model_name or current_model_name()
    profile = profile or get_profile().name
    table = claims_frame(claims, digits)
    if show:
        from IPython.display import Markdown, display  # lazy: only inside a notebook

        head = (f"**{section} on {model_name}, profile `{profile}`.**"
                + (" Smoke profile: a handful of inputs per cell, so these verdicts are not evidence; "
                   "`make run` runs the default profile." if profile == "smoke" else ""))
        display(Markdown(head))
        display(table)
        for c in claims:
            print("-", c.sentence(digits))
    summary = [{"claim": f"{section[:2]} {c.statement}", "key": c.key, "paper": c.paper, "ours": c.ours_text(digits),
                "verdict": c.verdict, **({"tasks": list(c.tasks)} if c.tasks else {})} for c in claims]
    save_metrics(section, {"model": model_name, "profile": profile, "claims": [c.to_json(digits) for c in claims],
                           "summary": summary, "table": [c.row(digits) for c in claims],
                           "metrics": metrics or {}}, model_name=model_name, profile=profile)
    return table


def reported_claim(section: str, key: str, model_name: str | None = None, profile: str | None = None) -> Claim | None:
    """The claim ``key`` as notebook ``section`` reported it (:func:`report_claims`) for this model and profile, or
    None if that notebook has not reported it in this results folder.

    Another notebook that speaks of the same quantity quotes this object instead of restating its number, so the
    two always say the same thing about the same run.
    """
    saved = load_metrics(section, model_name, profile)
    for d in (saved or {}).get("claims", []):
        if d.get("key") == key:
            return Claim.from_json(d)
    return None


def quote_claim(section: str, key: str, digits: int = 1, model_name: str | None = None,
                profile: str | None = None) -> str:
    """:meth:`Claim.sentence` of :func:`reported_claim`, prefixed with the notebook that reported it; if it has
    not been reported, a line that says which notebook to run first (never a number of another run)."""
    c = reported_claim(section, key, model_name, profile)
    if c is None:
        return (f"Notebook {section} has not reported {key} for this model and profile yet: run it first "
                f"(`make run` runs the notebooks in order).")
    return f"From notebook {section}: {c.sentence(digits)}"


def reported_claims(section: str, model_name: str | None = None, profile: str | None = None) -> list[Claim]:
    """Every claim notebook ``section`` reported (:func:`report_claims`) for this model and profile, in its order;
    empty when it has not reported in this results folder."""
    return [Claim.from_json(d) for d in (load_metrics(section, model_name, profile) or {}).get("claims", [])]


def run_power(section: str, model_name: str | None = None, profile: str | None = None) -> dict:
    """``{claim key: Power}``: the checks' power this results folder holds for ``section``'s reading: the rows
    notebook 09 measured on the controls at this profile, then those the notebook measured itself (notebook 11
    measures its own), read as the code reads them now (:func:`helpers.study.power_report.current_power`); empty
    when neither has run here."""
    from helpers.study.power_report import Power, as_power_map  # lazy: power_report is read only here

    rows = []
    for sec, model in (("09_a_model_that_learns_in_context", "control"), (section, model_name)):
        met = load_metrics(sec, model, profile) or {}
        rows += [Power.from_json(p) for p in (met.get("metrics") or {}).get("power") or []]
    return as_power_map(rows)


def reading_markdown(claims: Sequence[Claim], says: dict | None = None, digits: int = 1, heading: str = "",
                     power: dict | None = None) -> str:
    """The numbers and verdicts of a notebook's reading, from the claims its run reported, as markdown.

    One item per claim: what it states, the paper's value, ours with its 95% interval, the verdict, and, where
    ``says`` (``{claim key: {verdict: sentence}}``) has a sentence for the verdict this run computed, that
    sentence (``"*"`` answers any verdict without its own). The interpretation a notebook writes is therefore
    chosen by the run's verdict, never typed beside a number that a rerun can change. With ``power`` (``{claim
    key: Power}``, :func:`run_power`), each verdict says what its check is worth on the controls, in a few words
    (:func:`helpers.study.power_report.power_word`): "replicates (uninformative check)"."""
    from helpers.study.power_report import KINDS, power_word  # lazy: power_report is read only here

    says = says or {}
    unknown = set(says) - {c.key for c in claims}
    if unknown:
        raise KeyError(f"reading: says= names claims this run did not report: {sorted(unknown)}; "
                       f"reported: {[c.key for c in claims]}")
    lines = [heading] if heading else []
    for c in claims:
        text = says.get(c.key, {})
        then = text.get(c.verdict, text.get("*", ""))
        worth = f" ({power_word(c.key, power)})" if power is not None and c.key in KINDS else ""
        lines.append(f"- **{c.statement}** ({c.source}). Paper: {c.paper}. Ours: {c.ours_text(digits)}. "
                     f"Verdict: *{c.verdict}*{worth}." + (f" {then}" if then else ""))
    return "\n".join(lines) + "\n"


def show_reading(section: str, says: dict | None = None, digits: int = 1, model_name: str | None = None,
                 profile: str | None = None) -> str:
    """Show the reading's results (:func:`reading_markdown`) from the claims notebook ``section`` reported for this
    model and profile, under a line naming the run; returns the markdown. Each verdict's sentence comes from
    ``says``, by default the notebook's sentences in :data:`helpers.study.readings.READINGS` (those of the claims
    this run reported). When the notebook has not reported yet, says to run its claims cell first (never a number
    of another run)."""
    from IPython.display import Markdown, display  # lazy: only inside a notebook

    model_name = model_name or current_model_name()
    profile = profile or get_profile().name
    claims = reported_claims(section, model_name, profile)
    if says is None:
        from helpers.study.readings import readings_for  # lazy: read only here

        reported = {c.key for c in claims}
        says = {key: text for key, text in readings_for(section).items() if key in reported}
    if not claims:
        md = (f"Notebook {section} has not reported its claims for {model_name} (profile `{profile}`) yet: run the "
              f"claims cell above first.")
    else:
        power = run_power(section, model_name, profile)
        said = ("beside each, what its check is worth on the controls (notebook 09)" if power else
                "what each check is worth on the controls is not recorded in this results folder: run notebook 09")
        md = reading_markdown(claims, says, digits, heading=f"**What this run found** ({model_name}, profile "
                              f"`{profile}`; 95% intervals; verdicts by the criteria in the claims table; {said}):\n",
                              power=power)
    display(Markdown(md))
    return md
