"""What a check's verdict is worth: its power on two controls whose answer is known, as rows a record keeps.

A check of notebooks 01, 02, 03, 05, 07, 10 and 11 runs on populations of positive controls, where the mechanism it
looks for is there, and of negative controls, where it is absent (:mod:`helpers.core.controls.population`: five
independently trained checkpoints of each recipe, on 2 and on 4 layers; the runs: :mod:`helpers.protocols.power`).
A replicate is one checkpoint with sequences of its own seed, so the intervals count training runs, not sequence
draws from one checkpoint. **Sensitivity** is the share of the positive checkpoints' replicates whose verdict is
"replicates"; **specificity** the share of the negative ones' whose verdict is anything else. Each carries its exact
95% binomial interval (Clopper-Pearson) over the replicates. The depth checks (:data:`DEPTH_CHECKS`) read the
4-layer populations alone. The reading (:func:`reading`), fixed before any run:

- sensitivity: *sees it* when the interval's lower end is at or above 0.5, *misses it* when its upper end is
  below 0.5, *unsure* otherwise; specificity: *silent* / *fires* / *unsure* by the same rule;
- a check is **informative** when it sees it and stays silent; one that misses it or fires is
  **uninformative**, and its verdicts on the language models say so (:func:`annotate`); otherwise its power is
  *unsure*.

**Which control claim measures which check** (:data:`CHECKS`): a check of notebooks 01-07 is the same claim key on
the controls (notebook 09 grades the controls with those notebooks' functions); notebook 10's position classes
are measured by the controls' label-word checks (isolation and flows against content tokens: the controls have no
forerunner or template tokens, but the check is the same), its head rankings by the same claims as on the models
(the ranking's top head against as many random heads, with the controls' four labels and swap-averaged on their
two-way sequences). Checks the controls cannot measure say why (:data:`NOT_MEASURED`); ``tests/test_power.py``
holds every claim of those notebooks to one of the two.

**Every claim has a kind** (:data:`KINDS`, :func:`claim_kind`), and the kind decides how power reads it:

- a *detector* claims that a mechanism is present; its check's power reads as above;
- a *reference* is a baseline another check is read against (the "barely matters" rows of notebook 02, true on any
  model that ignores the isolated positions): it shows "reference for <check>", never "uninformative";
- a *premise* is a fact about a model (an accuracy, the mapping control), which the mechanism's checks presuppose;
- an *outcome* is an application's measured effect (an accuracy gain, a speed-up, a bias reduction), read on its own
  interval: it is not a check for a mechanism.

**Verdicts read power** (:func:`power_word`, :func:`account_verdict`), by rules fixed before any run: a claim's
verdict is shown with its check's power in a few words ("replicates (uninformative check)"), and an account's verdict
(notebooks 10 and 11) counts only its informative checks: "supported" when every informative check holds, "partly"
when some do, "not supported" when every one fails, "inconclusive" otherwise, and "no informative check" when none
of its checks is informative (whatever they say). So "supported" and "partly" always rest on at least one check
that sees the mechanism on the positive controls and stays silent on the negative ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from helpers.study.stats import Interval

__all__ = ["POSITIVE", "NEGATIVE", "POSITIVES", "NEGATIVES", "DEEP_PAIR", "DEPTH_CHECKS", "SPECIFICITY_ONLY", "CHECKS", "NOT_MEASURED", "NOTEBOOKS", "checked_keys", "clopper_pearson", "Power",
           "power_rows", "population_split", "DEPTH_OF", "reading", "annotate", "power_frame", "power_by_key", "account_power", "power_markdown",
           "power_summary", "current_power", "as_power_map", "PowerRows", "KIND_NAMES", "KINDS", "REFERENCE_FOR", "SPECIFIC_FORM", "specific_form_note", "claim_kind", "power_word", "informative",
           "account_verdict", "account_reading", "informative_count", "NO_INFORMATIVE", "NOT_RECORDED"]

POSITIVE, NEGATIVE = "control-wide", "control-negative"  # the named controls of each kind (seed 0 of each population)
# the control populations (helpers.core.controls.population) a power measurement pools: a replicate is one checkpoint
# (one training run) with sequences of its own seed, so the intervals count training runs. Sensitivity pools the
# positive populations of both depths, specificity the negative ones; a depth check (DEPTH_CHECKS) reads the 4-layer
# pair alone, since on 2 layers its criterion is vacuous
POSITIVES, NEGATIVES = ("wide", "deep"), ("negative", "deep-negative")
DEEP_PAIR = ("deep", "deep-negative")
DEPTH_OF = {"wide": "2-layer", "deep": "4-layer", "negative": "2-layer", "deep-negative": "4-layer"}
DEPTH_CHECKS = ("03.peak_layer", "03.r_crossing")

# ----------------------------------------------------------------- which control claim measures which check

# {claim key on the language models: claim key on the controls that measures its check}
CHECKS: dict[str, str] = {
    **{k: k for k in ("01.shallow_wp_dominant", "01.deep_pq_dominant", "01.label_flows_above_ww",
                      "02.label_first_hurts_most", "02.label_last_barely_matters", "02.random_first_barely_matters",
                      "02.random_last_barely_matters", "03.peak_aucroc",
                      "05.hidden_anchor_label_loyalty", "05.anchor_minus_Text_anchor_label_loyalty",
                      "05.anchor_minus_Hidden_random_label_loyalty", "07.foobar_icl", "07.ablation_at_q",
                      "07.ablation_all", "07.value_output", "07.two_towers",
                      "10.incontext_heads_ablation", "10.induction_heads_ablation", "10.fv_heads_ablation",
                      "10.incontext_heads_foobar", "10.induction_heads_foobar", "10.fv_heads_foobar")},
    # Hidden_random-top keeps random tokens among those q attends to most; on the controls every demonstration is
    # one item, so its draw is Hidden_random's
    "05.anchor_minus_Hidden_random-top_label_loyalty": "05.anchor_minus_Hidden_random_label_loyalty",
    # the position classes: isolation and flows of a class against as many content tokens; the controls have the
    # label words and content only, and the check is the same
    **{f"10.{c}_isolation": "10.control_label_isolation" for c in ("label", "forerunner", "template")},
    **{f"10.{c}_gathers": "10.control_label_gathers" for c in ("forerunner", "template")},
    **{f"10.{c}_is_read": "10.control_label_is_read" for c in ("forerunner", "template")},
    # the causal form of "q reads the label words in the deep layers" (helpers.protocols.label_reading)
    "10.label_read_causal": "10.control_label_read_causal",
    # the causal form of "the label words gather their demonstrations" (helpers.protocols.label_gathering)
    "10.label_gathers_causal": "10.control_label_gathers_causal",
    # the anchors' specific checks (helpers.protocols.compression_specific): Hidden_anchor against relabelled
    # anchors and against anchors built with the text hidden in place
    "10.anchors_carry_mapping": "10.control_anchors_carry_mapping",
    "10.anchors_carry_text": "10.control_anchors_carry_text",
    # notebook 11: the flipped-label checks run on the controls' sequences with their label tokens permuted (the
    # semantic-anchors claim itself is not measured: NOT_MEASURED says why)
    **{k: k for k in ("11.flipped_shallow_wp_dominant", "11.flipped_deep_pq_dominant",
                      "11.flipped_label_flows_above_ww", "11.flipped_label_isolation", "11.two_stages",
                      "11.previous_token_heads_separability", "11.induction_heads_alignment",
                      "11.dissociation_separability", "11.dissociation_alignment",
                      # the positive controls read the label words at q; the negative ones do not
                      "11.aggregation_upper", "11.aggregation_upper_later",
                      # the flipped flows' specific forms (helpers.protocols.flipped_specific)
                      "11.flipped_label_read_causal", "11.flipped_label_gathers_causal")},
}
_WORDS = ("the controls can only say one of their four labels, so word loyalty (the overlap of the top-5 words) "
          "is label loyalty's ranking of four labels, not a measure of its own")
# the depth checks: on 2 layers "at or above layer L // 3" is layer 0, which any crossing passes, and "the deep half"
# is the last layer alone, so they are measured on the 4-layer populations only (DEPTH_CHECKS)
CHECKS.update({k: k for k in DEPTH_CHECKS})
NOT_MEASURED: dict[str, str] = {
    "11.semantic_anchors": "no control has semantic anchors to see (a model that reads its context yet keeps a "
                           "meaning it knows): the positive ones follow any mapping (11.control_override), the "
                           "negative ones read none; and the override rate needs zero-shot answers, which the "
                           "controls cannot give (their positions never held a query without its context)",
    "05.hidden_anchor_word_loyalty": _WORDS, "05.anchor_minus_Text_anchor_word_loyalty": _WORDS,
    "05.anchor_minus_Hidden_random_word_loyalty": _WORDS, "05.anchor_minus_Hidden_random-top_word_loyalty": _WORDS,
    "05.hidden_anchor_accuracy": "Hidden_anchor's accuracy is the premise's accuracy times its loyalty; its check is "
                                 "the label loyalty's, measured above",
    **{f"05.speedup_{t}": "a timing, not a check for a mechanism" for t in ("sst2", "trec", "agnews", "tweet_emotion",
                                                                           "own")},
    "07.majority_reduction": "re-weighting learns one bias per demonstration slot of one fixed demonstration set; "
                             "every control sequence has a context of its own",
    "07.recency_reduction": "re-weighting learns one bias per demonstration slot of one fixed demonstration set; "
                            "every control sequence has a context of its own",
    "07.unrelated_regime": "reads the model's regime across pretrained label words; the controls' labels have no "
                           "meaning to unlearn",
    "07.regime_ablation": "reads the model's regime across pretrained label words; the controls' labels have no "
                          "meaning to unlearn",
    "10.fv_over_induction": "compares two rankings against each other: the controls know which heads carry the "
                            "answer, not which of two rankings' heads should cost more",
    "10.span_isolation": "the controls' labels are one token each: there are no later tokens of a label",
    "10.span_aucroc": "the controls' labels are one token each: there are no later tokens of a label",
    "10.span_hidden_anchor": "the controls' labels are one token each: there are no later tokens of a label",
}
# checks whose mechanism no control has: every population is a negative for them, so their specificity is measured
# on all of them and their sensitivity cannot be (no control builds its label words from the earlier
# demonstrations: the positive ones copy each item into the label after it). Such a check is never "informative";
# one that fires on a control is "uninformative"
SPECIFICITY_ONLY = ("11.label_reads_earlier_labels", "11.label_reads_earlier_text", "11.context_knockout",
                    "11.context_labels_lower", "11.context_text_lower", "11.context_lower_first")
CHECKS.update({k: k for k in SPECIFICITY_ONLY})
NOTEBOOKS = ("01", "02", "03", "05", "07", "10", "11")  # the notebooks whose every check has a row

# {a paper's check: the project's specific forms of it}: checks that cannot tell on the controls (they fire on a model
# which reads no mapping, or miss the mechanism where it is), each with a discriminating check of the same claim
# (measured on the controls like every other); the tables name them beside the paper's check, so a reader of an
# uninformative row finds the row that can tell
SPECIFIC_FORM: dict[str, tuple[str, ...]] = {
    "01.deep_pq_dominant": ("10.label_read_causal",),
    "01.shallow_wp_dominant": ("10.label_gathers_causal",),
    "05.hidden_anchor_label_loyalty": ("10.anchors_carry_mapping", "10.anchors_carry_text"),
    "05.anchor_minus_Text_anchor_label_loyalty": ("10.anchors_carry_text",),
    "05.anchor_minus_Hidden_random_label_loyalty": ("10.anchors_carry_mapping",),
    "05.anchor_minus_Hidden_random-top_label_loyalty": ("10.anchors_carry_mapping",),
    "11.flipped_deep_pq_dominant": ("11.flipped_label_read_causal",),
    "11.flipped_shallow_wp_dominant": ("11.flipped_label_gathers_causal",),
}


# ----------------------------------------------------------------- what kind of claim each is (module docstring)

KIND_NAMES = ("detector", "reference", "premise", "outcome")
# {reference claim: the check it is a baseline for}
REFERENCE_FOR: dict[str, str] = {
    "02.label_last_barely_matters": "02.label_first_hurts_most",
    "02.random_first_barely_matters": "02.label_first_hurts_most",
    "02.random_last_barely_matters": "02.label_first_hurts_most",
}
_PREMISES = ("00.vanilla_1shot", "00.vanilla_5shot", "00.more_demos_no_help", "04.accuracy_1shot",
             "04.accuracy_5shot", "04.accuracy_reweighting", "07.foobar_icl", "07.unrelated_regime",
             "08.accuracy_above_chance", "09.icl_accuracy", "09.heldout_accuracy", "09.label_swap",
             "09.wide_label_swap", "09.negative_accuracy", "09.negative_ignores_swap", "09.negative_heldout",
             "09.population_positive_accuracy", "09.population_negative_accuracy",
             "09.population_negative_keeps_answer", "09.population_negative_heldout")
_OUTCOMES = ("04.gain_over_1shot", "04.gain_over_5shot", "05.hidden_anchor_accuracy",
             *(f"05.speedup_{t}" for t in ("sst2", "trec", "agnews", "tweet_emotion", "own")),
             "06.confusion_agreement", "07.majority_reduction", "07.recency_reduction")
_DETECTORS = ("01.shallow_wp_dominant", "01.deep_pq_dominant", "01.label_flows_above_ww",
              "02.label_first_hurts_most", "03.peak_aucroc", "03.peak_layer", "03.r_crossing",
              *(f"05.{m}_{w}_loyalty" for m in ("hidden_anchor", "anchor_minus_Text_anchor",
                                                 "anchor_minus_Hidden_random", "anchor_minus_Hidden_random-top")
                for w in ("label", "word")),
              "07.ablation_at_q", "07.ablation_all", "07.value_output", "07.two_towers", "07.regime_ablation",
              "08.saliency_two_stages", "08.isolation_first_hurts", "08.aucroc_deep",
              *(f"10.{c}_{d}" for c in ("forerunner", "template") for d in ("gathers", "is_read")),
              *(f"10.{c}_isolation" for c in ("label", "forerunner", "template")),
              *(f"10.{h}_heads_{a}" for h in ("incontext", "induction", "fv") for a in ("ablation", "foobar")),
              "10.fv_over_induction", "10.span_isolation", "10.span_aucroc", "10.span_hidden_anchor",
              "10.control_label_isolation", "10.control_label_gathers", "10.control_label_is_read",
              "10.label_read_causal", "10.control_label_read_causal", "10.label_gathers_causal",
              "10.control_label_gathers_causal", "10.anchors_carry_mapping", "10.control_anchors_carry_mapping",
              "10.anchors_carry_text", "10.control_anchors_carry_text",
              "11.semantic_anchors", "11.control_override", "11.flipped_shallow_wp_dominant",
              "11.flipped_deep_pq_dominant", "11.flipped_label_flows_above_ww", "11.flipped_label_isolation",
              "11.flipped_label_read_causal", "11.flipped_label_gathers_causal",
              "11.label_reads_earlier_labels", "11.label_reads_earlier_text", "11.context_knockout",
              "11.context_labels_lower", "11.context_text_lower", "11.context_lower_first", "11.aggregation_upper",
              "11.aggregation_upper_later", "11.two_stages", "11.previous_token_heads_separability",
              "11.induction_heads_alignment", "11.dissociation_separability", "11.dissociation_alignment")
KINDS: dict[str, str] = {**{k: "detector" for k in _DETECTORS}, **{k: "reference" for k in REFERENCE_FOR},
                         **{k: "premise" for k in _PREMISES}, **{k: "outcome" for k in _OUTCOMES}}


def claim_kind(key: str) -> str:
    """The kind of the claim ``key`` (:data:`KIND_NAMES`; module docstring)."""
    try:
        return KINDS[key]
    except KeyError:
        raise KeyError(f"claim {key!r} has no kind: add it to the detectors, references (REFERENCE_FOR), premises "
                       "or outcomes in helpers/study/power_report.py") from None


NO_INFORMATIVE = "no informative check"


def informative(key: str, power: dict[str, Power] | None) -> bool:
    """Whether the check of the detector ``key`` sees the mechanism on the positive control and stays silent on the
    negative one, by its power row in ``power`` (``{claim key: Power}``); False for any other kind, and for a check
    without a row or not measured."""
    p = (power or {}).get(key)
    return claim_kind(key) == "detector" and p is not None and not p.why and reading(p)["power"] == "informative"


def specific_form_note(key: str, power: dict[str, Power] | None) -> str:
    """``"; its specific form: 10.anchors_carry_text (informative)"`` for a check with a specific form
    (:data:`SPECIFIC_FORM`), each named with its own power's reading; ``""`` for any other check."""
    forms = SPECIFIC_FORM.get(key, ())
    if not forms:
        return ""
    said = []
    for f in forms:
        p = (power or {}).get(f)
        said.append(f"`{f}` ({reading(p)['power'] if p is not None and not p.why else 'power not recorded'})")
    return "; its specific form: " + ", ".join(said)


def power_word(key: str, power: dict[str, Power] | None) -> str:
    """What the verdict of claim ``key`` is worth, in a few words to stand beside it: for a detector "informative
    check", "uninformative check", "check's power unsure", "power not measured" or "power not recorded" (no row,
    or no power at all); "reference for <check>"; "premise"; "outcome"."""
    kind = claim_kind(key)
    if kind == "reference":
        return f"reference for {REFERENCE_FOR[key]}"
    if kind != "detector":
        return kind
    p = (power or {}).get(key)
    if p is None:
        return "power not recorded"
    if p.why:
        return "power not measured"
    return {"informative": "informative check", "uninformative": "uninformative check",
            "specificity only": "check silent on every control; sensitivity not measurable"}.get(
        reading(p)["power"], "check's power unsure")


NOT_RECORDED = "power not recorded"


def as_power_map(power: PowerRows) -> dict[str, Power]:
    """``power`` as ``{claim key: Power}`` read as the code reads it now (:func:`current_power`): the one place the
    tables and verdicts turn what they are given (a record's rows, a run's, or such a map) into a lookup."""
    return current_power((power or {}).values() if isinstance(power, dict) else (power or ()))


def _counts(checks: Sequence[tuple[str, Sequence[str]]], by: dict[str, Power]) -> list[tuple[str, bool]]:
    """``[(verdict, informative?)]``: a check counts when every claim it rests on is :func:`informative`."""
    return [(v, bool(keys) and all(informative(k, by) for k in keys)) for v, keys in checks]


def account_reading(checks: Sequence[tuple[str, Sequence[str]]], power: PowerRows) -> str:
    """An account's verdict (:func:`account_verdict`) from its checks, ``[(verdict, the claim keys the check rests
    on)]``, and the power rows: a check counts when every claim it rests on is :func:`informative`. Without any
    power row, :data:`NOT_RECORDED` (no verdict can be read)."""
    by = as_power_map(power)
    return account_verdict(_counts(checks, by)) if by else NOT_RECORDED


def informative_count(checks: Sequence[tuple[str, Sequence[str]]], power: PowerRows) -> str:
    """How many of an account's checks (as :func:`account_reading` takes them) count: ``"1 of 2"``."""
    return f"{sum(ok for _, ok in _counts(checks, as_power_map(power)))} of {len(checks)}"


def account_verdict(checks: Sequence[tuple[str, bool]]) -> str:
    """An account's verdict from its checks, ``[(verdict, informative?)]`` (module docstring): only the informative
    checks count. Each verdict is the check's own: "replicates" (or "holds") when it holds, "does not replicate"
    (or "fails") when it fails the other way, anything else inconclusive."""
    counted = [v for v, ok in checks if ok]
    if not counted:
        return NO_INFORMATIVE
    held = sum(v in ("replicates", "holds") for v in counted)
    if held == len(counted):
        return "supported"
    if held:
        return "partly"
    return "not supported" if all(v in ("does not replicate", "fails") for v in counted) else "inconclusive"


def checked_keys(keys: Iterable[str]) -> list[str]:
    """The claim keys among ``keys`` that belong to the power table (notebooks :data:`NOTEBOOKS`; notebook 10's
    and 11's own control claims are the measurements, not checks of a model)."""
    return [k for k in keys if k[:2] in NOTEBOOKS and not k.startswith(("10.control_", "11.control_"))]


# ----------------------------------------------------------------- the power rows


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of ``k`` successes in ``n`` trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"k must lie in 0..n and n be positive, got k={k}, n={n}")
    from scipy.stats import beta  # lazy: scipy.stats takes a second to import, and every run script imports this module

    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return low, high


def _rate(k: int, n: int) -> Interval | None:
    if n == 0:
        return None
    low, high = clopper_pearson(k, n)
    return Interval(k / n, low, high, 1, n)


@dataclass(frozen=True)
class Power:
    """A check's power: ``key`` the claim on the language models, ``measured_by`` the claim on the controls (empty
    with ``why`` when the controls cannot measure it), the verdict counts over each control's replicates, and
    sensitivity / specificity with their Clopper-Pearson intervals."""

    key: str
    measured_by: str = ""
    why: str = ""
    positive: dict = field(default_factory=dict)  # {verdict: replicates}
    negative: dict = field(default_factory=dict)
    sensitivity: Interval | None = None
    specificity: Interval | None = None
    # {population: {verdict: replicates}} of the populations pooled above (empty for runs of the named controls, and
    # in records made before populations were kept apart)
    by_population: dict = field(default_factory=dict)

    @property
    def reading(self) -> dict[str, str]:
        return reading(self)

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("sensitivity", "specificity"):
            d[k] = None if getattr(self, k) is None else asdict(getattr(self, k))
        return d

    @classmethod
    def from_json(cls, d: dict) -> Power:
        return cls(**{**d, **{k: None if d.get(k) is None else Interval(**d[k]) for k in ("sensitivity",
                                                                                         "specificity")}})


PowerRows = dict[str, Power] | Iterable[Power] | None  # power rows by claim key, or as a run reports them


def _replicates(runs: dict[str, list[dict[str, str]]], populations: Sequence[str], named: str) -> list[dict]:
    """The replicates of ``populations`` in ``runs``; those of the named control ``named`` when the runs hold no
    population (runs of the named controls alone, keyed by their names)."""
    if any(p in runs for p in POSITIVES + NEGATIVES):
        return [v for p in populations for v in runs.get(p, [])]
    return list(runs.get(named, []))


def power_rows(runs: dict[str, list[dict[str, str]]], keys: Iterable[str] | None = None) -> list[Power]:
    """A :class:`Power` per check (``keys``: the claim keys on the language models; default every key of
    :data:`CHECKS` and :data:`NOT_MEASURED`), from the replicates' verdicts of the positive and the negative
    populations (``{population: [{claim key: verdict} per replicate]}``, :func:`helpers.protocols.power.power_runs`;
    :data:`POSITIVES` pooled for sensitivity, :data:`NEGATIVES` for specificity, the 4-layer pair alone for
    :data:`DEPTH_CHECKS`), or of the two named controls when the runs are keyed by their names."""
    keys = list(keys) if keys is not None else list(CHECKS) + list(NOT_MEASURED)
    verdicts = runs
    out = []
    for key in keys:
        if key in NOT_MEASURED:
            out.append(Power(key, why=NOT_MEASURED[key]))
            continue
        if key not in CHECKS:
            raise KeyError(f"{key!r} is neither measured on the controls (CHECKS) nor said to be unmeasurable "
                           "(NOT_MEASURED) in helpers/protocols/power.py: add it to one of them")
        by = CHECKS[key]
        pos = [v[by] for v in _replicates(verdicts, DEEP_PAIR[:1] if key in DEPTH_CHECKS else POSITIVES, POSITIVE)
               if by in v]
        neg = [v[by] for v in _replicates(verdicts, DEEP_PAIR[1:] if key in DEPTH_CHECKS else NEGATIVES, NEGATIVE)
               if by in v]
        if key in SPECIFICITY_ONLY:  # every control lacks the mechanism: all are negatives, none a positive
            neg, pos = pos + neg, []
        if not pos and not neg:
            continue  # not run (e.g. notebook 10's group in a run of notebook 09's checks only)
        out.append(Power(key, by, "", dict(Counter(pos)), dict(Counter(neg)),
                         _rate(sum(v == "replicates" for v in pos), len(pos)),
                         _rate(sum(v != "replicates" for v in neg), len(neg)),
                         _by_population(verdicts, by, key)))
    return out


def _by_population(runs: dict[str, list[dict[str, str]]], by: str, key: str) -> dict[str, dict[str, int]]:
    """``{population: {verdict: replicates}}`` of the check's control claim ``by`` in each population ``power_rows``
    pooled for ``key`` (empty when the runs are keyed by the named controls)."""
    pools = DEEP_PAIR if key in DEPTH_CHECKS else POSITIVES + NEGATIVES
    return {p: dict(Counter(v[by] for v in runs[p] if by in v)) for p in pools
            if p in runs and any(by in v for v in runs[p])}


def population_split(p: Power, side: str) -> str:
    """Where the pooled count of ``side`` (``"positive"`` or ``"negative"``) comes from, when the populations behind
    it disagree: ``"2-layer 5/5, 4-layer 0/8"`` (replicates seen on the positive side, silent on the negative side);
    ``""`` when every population gave the same share, or the row keeps no populations."""
    pools = POSITIVES if side == "positive" else NEGATIVES
    if p.key in SPECIFICITY_ONLY:  # every control is a negative there
        pools = () if side == "positive" else POSITIVES + NEGATIVES
    counts = {q: p.by_population[q] for q in pools if p.by_population.get(q)}
    hit = {q: (sum(n for v, n in c.items() if (v == "replicates") == (side == "positive")), sum(c.values()))
           for q, c in counts.items()}
    if len(hit) < 2 or len({k / n for k, n in hit.values()}) < 2:
        return ""
    return ", ".join(f"{DEPTH_OF[q]} {k}/{n}" for q, (k, n) in hit.items())


def _said(iv: Interval | None, yes: str, no: str) -> str:
    if iv is None:
        return "not run"
    return yes if iv.low >= 0.5 else no if iv.high < 0.5 else "unsure"


def reading(p: Power) -> dict[str, str]:
    """``{"positive": "sees it" / "misses it" / "unsure", "negative": "silent" / "fires" / "unsure", "power":
    "informative" / "uninformative" / "unsure" / "not measured"}`` by the rule of the module docstring (fixed before
    any run): an interval's lower end at or above 0.5 says yes, its upper end below 0.5 says no."""
    if p.why:
        return {"positive": "not measured", "negative": "not measured", "power": "not measured"}
    neg = _said(p.specificity, "silent", "fires")
    if p.sensitivity is None and p.key in SPECIFICITY_ONLY:  # no control has the mechanism: specificity only
        return {"positive": "cannot be measured", "negative": neg,
                "power": {"fires": "uninformative", "silent": "specificity only"}.get(neg, "unsure")}
    pos = _said(p.sensitivity, "sees it", "misses it")
    power = ("informative" if (pos, neg) == ("sees it", "silent") else
             "uninformative" if pos == "misses it" or neg == "fires" else "unsure")
    return {"positive": pos, "negative": neg, "power": power}


def annotate(p: Power | None) -> str:
    """What a verdict on a language model is worth, in words: ``"check sees it on the positive controls (seen in
    10/10), silent on the negative ones (silent in 10/10)"``; ``"uninformative: ..."`` before a check that misses it
    or fires (``"fires on the negative ones (silent in 0/10)"``: the count is always of the replicates seen, or
    silent; a replicate is a checkpoint)."""
    if p is None:
        return "no power row"
    if KINDS.get(p.key) == "reference":
        return (f"reference for {REFERENCE_FOR[p.key]}: a baseline that check is read against, true on any model "
                "that ignores the isolated positions, so it is not graded on the controls")
    if p.why:
        return f"power not measured: {p.why}"
    r = reading(p)

    def count(iv, what, side):  # the count of replicates that did `what`, whatever the reading: never "fires (0/16)"
        if iv is None:
            return "not run"
        split = population_split(p, side)
        return f"{what} in {round(iv.estimate * iv.n_inputs)}/{iv.n_inputs}" + (f": {split}" if split else "")

    if p.key in SPECIFICITY_ONLY and p.sensitivity is None:
        text = (f"no control has the mechanism, so its sensitivity cannot be measured; {r['negative']} on every "
                f"control ({count(p.specificity, 'silent', 'negative')})")
        return f"uninformative: {text}" if r["power"] == "uninformative" else text
    text = (f"check {r['positive']} on the positive controls ({count(p.sensitivity, 'seen', 'positive')}), "
            f"{r['negative']} on the negative ones ({count(p.specificity, 'silent', 'negative')})")
    return f"uninformative: {text}" if r["power"] == "uninformative" else text


def _power_reading(p: Power) -> str:
    """The power column's word: the reading, "not measured: <why>", or for a reference row (module docstring)
    "reference for <check>" (a baseline is not graded as a detector)."""
    if KINDS.get(p.key) == "reference":
        return f"reference for {REFERENCE_FOR[p.key]}"
    return reading(p)["power"] if not p.why else f"not measured: {p.why}"


def power_frame(rows: Sequence[Power], digits: int = 2):
    """A table, a row per check: the control claim that measures it, sensitivity and specificity with their
    intervals, the verdicts behind them and the reading."""
    import pandas as pd  # lazy: only when a table is shown

    def iv(x):
        return "" if x is None else f"{x.estimate:.{digits}f} [{x.low:.{digits}f}, {x.high:.{digits}f}]"

    def split(p, side):
        said = population_split(p, side)
        return f" ({said} {'seen' if side == 'positive' else 'silent'})" if said else ""

    def counts(d):
        return ", ".join(f"{v} {n}" for v, n in sorted(d.items(), key=lambda t: -t[1]))

    out = [{"check (claim)": p.key, "measured on the controls by": p.measured_by or "not measured",
            "sensitivity [95% CI]": iv(p.sensitivity), "specificity [95% CI]": iv(p.specificity),
            "positive checkpoints' verdicts": counts(p.positive) + split(p, "positive"),
            "negative checkpoints' verdicts": counts(p.negative) + split(p, "negative"),
            "power": _power_reading(p)} for p in rows]
    return pd.DataFrame(out).set_index("check (claim)")



def power_by_key(rows: Iterable[Power]) -> dict[str, Power]:
    return {p.key: p for p in rows}


def current_power(rows: Iterable[Power]) -> dict[str, Power]:
    """``{claim key: Power}`` of ``rows`` (the first row of a key wins) as the code reads them now: a check that
    :data:`NOT_MEASURED` says the controls cannot measure reads so, whatever a run measured for it before that was
    known."""
    out: dict[str, Power] = {}
    for p in rows:
        if p.key not in out:
            out[p.key] = Power(p.key, why=NOT_MEASURED[p.key]) if p.key in NOT_MEASURED else p
    return out


def account_power(keys: Sequence[str], rows: dict[str, Power]) -> str:
    """What the checks behind one verdict (``keys``: the claim keys it rests on) are worth, one phrase per control
    measurement they share: ``"control_label_isolation: informative; control_label_gathers: uninformative (fires
    on the negative)"``."""
    said = {}
    for k in keys:
        p = rows.get(k)
        if p is None:
            said.setdefault(k, "no power row")
        elif p.why:
            said.setdefault(k, "not measured")
        else:
            r = reading(p)
            why = {"misses it": "misses it on the positive", "fires": "fires on the negative"}
            detail = [why[x] for x in (r["positive"], r["negative"]) if x in why]
            said.setdefault(p.measured_by, r["power"] + (f" ({', '.join(detail)})" if detail else ""))
    return "; ".join(f"{k.split('.', 1)[1]}: {v}" for k, v in said.items())


def power_markdown(rows: Sequence[Power], statements: dict[str, str] | None = None) -> str:
    """The power table as markdown, a row per check measured on the controls (then one line per reason a check is
    not measured): the claim, the control claim that measures it, sensitivity and specificity with their
    intervals and counts, and the reading."""
    statements = statements or {}

    def cell(iv, p, side):
        if iv is None:
            return "not run"
        split = population_split(p, side)
        return (f"{iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}] ({round(iv.estimate * iv.n_inputs)}/{iv.n_inputs}"
                f"{f'; {split}' if split else ''})")

    measured = [p for p in rows if not p.why]
    lines = ["| check (claim) | measured on the controls by | sensitivity: sees it on the positive checkpoints | "
             "specificity: silent on the negative checkpoints | power |", "|---|---|---|---|---|"]
    for p in measured:
        name = statements.get(p.key, "")
        r = reading(p)
        said = (f"reference for `{REFERENCE_FOR[p.key]}`" if KINDS.get(p.key) == "reference"
                else f"**{r['power']}**")
        lines.append(f"| `{p.key}`{f' {name}' if name else ''} | `{p.measured_by}` | "
                     f"{cell(p.sensitivity, p, 'positive')}, {r['positive']} | "
                     f"{cell(p.specificity, p, 'negative')}, {r['negative']} | {said} |")
    out = "\n".join(lines) + "\n"
    reasons: dict[str, list[str]] = {}
    for p in rows:
        if p.why:
            reasons.setdefault(p.why, []).append(p.key)
    if reasons:
        out += "\nNot measured on the controls:\n\n" + "\n".join(
            f"- {', '.join(f'`{k}`' for k in keys)}: {why}." for why, keys in reasons.items()) + "\n"
    return out


def power_summary(rows: Sequence[Power]) -> str:
    """The power table in a few lines of words, from the rows (a notebook's reading prints it, so no count is
    typed): the checks by reading, each with its sensitivity and specificity counts."""
    groups: dict[str, list[str]] = {}
    for p in rows:
        if KINDS.get(p.key) == "reference":
            groups.setdefault("reference", []).append(f"{p.key} (for {REFERENCE_FOR[p.key]})")
        elif not p.why:
            said = annotate(p).removeprefix("uninformative: ")
            groups.setdefault(reading(p)["power"], []).append(f"{p.key} ({said})")
    heads = {"informative": "Informative: sees the mechanism where it is there and stays silent where it is absent",
             "uninformative": "Uninformative: misses the mechanism where it is there, or fires where it is absent; "
                              "its verdicts on the language models say nothing about the mechanism",
             "unsure": "Unsure at this run size",
             "specificity only": "Specificity only: no control has the mechanism, so the check can only be seen to "
                                 "stay silent where it is absent",
             "reference": "References: baselines another check is read against, true on any model that ignores the "
                          "isolated positions, so not graded as detectors"}
    out = [f"{heads[k]}:\n" + "\n".join(f"  - {x}" for x in groups[k]) for k in heads if k in groups]
    return "\n".join(out) if out else "No check was measured on the controls."
