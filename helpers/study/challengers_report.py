"""Notebook 10's verdict table: each account of where the demonstrations' information sits, judged from the claims.

Three accounts name a carrier: the label words (paper A, arXiv 2305.14160), the forerunner token before each
label (Cho et al., arXiv 2410.04468) and the template tokens (Bai et al., arXiv 2401.11323). Each is judged by two
checks, with criteria fixed before the run:

- **isolation** (causal): the claim ``10.<class>_isolation``; isolating the class in the first layers moves the
  prediction more than isolating as many content tokens.
- **flows** (saliency): for a challenger, both of its claims against the label words (``10.<class>_gathers`` in the
  shallow layers, ``10.<class>_is_read`` in the deep ones) replicate: per pair, it carries more than the label
  words; for the label words, both challengers' claims fail the other way (``does not replicate``): per pair,
  the label words carry more than each.

An account is **supported** when both checks hold, **partly** when one holds, **not supported** when the
isolation check does not replicate and the flows check fails, and **inconclusive** otherwise.

Three accounts name the heads that carry in-context learning: paper B's in-context heads (arXiv 2402.02872),
induction heads (Crosbie & Shutova, arXiv 2407.07011) and function-vector heads (Todd et al., arXiv 2310.15213;
Yin & Steinhardt, arXiv 2502.14010). Each is judged by two checks: ablating the ranking's top heads at every
position costs more accuracy than ablating as many random heads, with the tasks' ordinary label words
(``10.<set>_heads_ablation``) and on paper B's foo/bar labels, swap-averaged (``10.<set>_heads_foobar``). As for
the position classes: **supported** when both replicate, **partly** when one does, **not supported** when both do
not replicate, **inconclusive** otherwise (one check alone, when the claims hold only it: its verdict).
:func:`heads_table` adds Yin & Steinhardt's comparison, ``10.fv_over_induction``.

**Only informative checks count** (:func:`helpers.study.power_report.account_reading`, fixed before any run): the
verdict above is the *paper's checks' verdict*, which every table shows beside the account's verdict; the
account's verdict applies the same rule to its informative checks only, those that see the mechanism on the
positive controls and stay silent on the negative ones (notebook 09; :mod:`helpers.study.power_report`). A check
counts when every claim it rests on (:data:`ACCOUNT_CLAIMS`) is informative; an account none of whose checks is
informative reads "no informative check", whatever its checks say.

**Discriminating checks beside the paper's** (:data:`CAUSAL`): the label-word account also has a causal form of
"q reads the label words in the deep layers" (:mod:`helpers.protocols.label_reading`: the deep keys and values of the
label positions taken from the same prompt relabelled, against as many content positions) and of "the label words
gather their demonstrations in the shallow layers" (:mod:`helpers.protocols.label_gathering`: each label word's links
to its own text blocked, against as many content-to-content links), and two of paper A's Hidden_anchor compression
(:mod:`helpers.protocols.compression_specific`: Hidden_anchor against anchors built from relabelled demonstrations,
and against anchors built with the demonstrations' text hidden in place). They are not the paper's checks, so the paper's
checks' verdict does not read them; the account's verdict counts each with the others when it is informative.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from helpers.study.claims import Claim
from helpers.study.power_report import PowerRows, account_power, account_reading, as_power_map, informative_count

__all__ = ["ACCOUNTS", "CHALLENGERS", "HEAD_ACCOUNTS", "ACCOUNT_CLAIMS", "account_checks", "account_table",
           "heads_table", "verdicts", "checks_verdict"]


ACCOUNTS = {"label": "label words (arXiv 2305.14160)", "forerunner": "forerunner tokens (arXiv 2410.04468)",
            "template": "template tokens (arXiv 2401.11323)"}
CHALLENGERS = ("forerunner", "template")
HEAD_ACCOUNTS = {"incontext": "in-context heads (arXiv 2402.02872)", "induction": "induction heads (arXiv 2407.07011)",
                 "fv": "function-vector heads (arXiv 2310.15213)"}


FV_OVER_INDUCTION = "function-vector over induction heads (arXiv 2502.14010)"
# the causal checks of the label words' read-out (helpers.protocols.label_reading) and gathering
# (helpers.protocols.label_gathering), and the anchors' specific checks (helpers.protocols.compression_specific): beside the paper's two checks of the label-word account, each counted in its
# verdict when informative; the paper's checks' verdict does not read them
CAUSAL = ("10.label_read_causal", "10.label_gathers_causal", "10.anchors_carry_mapping", "10.anchors_carry_text")
# the claims each account's verdict rests on (module docstring), whose checks' power on the controls the tables
# show beside the verdict (helpers.study.power_report)
ACCOUNT_CLAIMS = {
    ACCOUNTS["label"]: ("10.label_isolation", *(f"10.{c}_{d}" for c in CHALLENGERS for d in ("gathers", "is_read")),
                        *CAUSAL),
    **{ACCOUNTS[c]: (f"10.{c}_isolation", f"10.{c}_gathers", f"10.{c}_is_read") for c in CHALLENGERS},
    **{name: (f"10.{k}_heads_ablation", f"10.{k}_heads_foobar") for k, name in HEAD_ACCOUNTS.items()},
    FV_OVER_INDUCTION: ("10.fv_over_induction",),
}


def _verdicts(claims: Sequence[Claim]) -> dict[str, str]:
    return {c.key: c.verdict for c in claims}


def _flows(cls: str, v: dict[str, str]) -> str:
    """"holds", "fails" or "inconclusive": the flows check of ``cls``'s account (module docstring)."""
    if cls == "label":
        got = [v[f"10.{c}_{d}"] for c in CHALLENGERS for d in ("gathers", "is_read")]
        if all(g == "does not replicate" for g in got):
            return "holds"
        return "fails" if any(g == "replicates" for g in got) else "inconclusive"
    got = [v[f"10.{cls}_{d}"] for d in ("gathers", "is_read")]
    if all(g == "replicates" for g in got):
        return "holds"
    return "fails" if any(g == "does not replicate" for g in got) else "inconclusive"


def _flows_keys(cls: str) -> tuple[str, ...]:
    """The claims the flows check of ``cls``'s account rests on."""
    if cls == "label":
        return tuple(f"10.{c}_{d}" for c in CHALLENGERS for d in ("gathers", "is_read"))
    return tuple(f"10.{cls}_{d}" for d in ("gathers", "is_read"))


def account_checks(claims: Sequence[Claim], power: PowerRows = None) -> dict[str, dict[str, str]]:
    """``{class: {"isolation": verdict, "flows": holds/fails/inconclusive, "checks": the paper's checks' verdict,
    "account": the verdict on the informative checks only}}`` (module docstring) from notebook 10's claims and the
    checks' power rows (``power``; without them the account reads "power not recorded")."""
    v = _verdicts(claims)
    missing = [f"10.{c}_isolation" for c in ACCOUNTS if f"10.{c}_isolation" not in v]
    missing += [f"10.{c}_{d}" for c in CHALLENGERS for d in ("gathers", "is_read") if f"10.{c}_{d}" not in v]
    if missing:
        raise ValueError(f"the claims lack {missing}: pass every claim of class_saliency_claims and "
                         "class_isolation_claims")
    out = {}
    for cls in ACCOUNTS:
        iso = v[f"10.{cls}_isolation"]
        flows = _flows(cls, v)
        held = (iso == "replicates") + (flows == "holds")
        if held == 2:
            account = "supported"
        elif held == 1:
            account = "partly"
        elif iso == "does not replicate" and flows == "fails":
            account = "not supported"
        else:
            account = "inconclusive"
        checks = [(iso, (f"10.{cls}_isolation",)), (flows, _flows_keys(cls))]
        causal = {k: v[k] for k in CAUSAL if k in v} if cls == "label" else {}
        for k, verdict in causal.items():  # the discriminating checks of the label words: counted when informative
            checks.append((verdict, (k,)))
        out[cls] = {"isolation": iso, "flows": flows,
                    "causal": "; ".join(f"{k[3:]}: {verdict}" for k, verdict in causal.items()) or "not tested",
                    "checks": account, "account": account_reading(checks, power),
                    "counted": informative_count(checks, power)}
    return out


def _with_power(table: pd.DataFrame, power: PowerRows) -> pd.DataFrame:
    """``table`` (a row per account) with a column saying what each verdict's checks are worth on the controls."""
    if power is not None:
        by = as_power_map(power)
        table["its checks on the controls"] = [account_power(ACCOUNT_CLAIMS.get(a, ()), by) for a in table.index]
    return table


def account_table(claims: Sequence[Claim], power: PowerRows = None) -> pd.DataFrame:
    """:func:`account_checks` as a table, a row per account; with ``power`` (the checks' power rows,
    :func:`helpers.study.power_report.power_rows`), what each verdict's checks are worth on the controls."""
    rows = [{"account": ACCOUNTS[c], "isolation (first layers) vs content tokens": r["isolation"],
             "flows vs the other classes": r["flows"], "read or gathered causally": r["causal"],
             "the paper's checks' verdict": r["checks"],
             "informative checks": r["counted"], "verdict (informative checks only)": r["account"]}
            for c, r in account_checks(claims, power).items()]
    return _with_power(pd.DataFrame(rows).set_index("account"), power)


def checks_verdict(checks: Sequence[str]) -> str:
    """An account's verdict from its checks' verdicts: "supported" when every one replicates, "partly" when some
    do, "not supported" when every one does not replicate, else "inconclusive" (the head accounts', and notebook
    11's, :mod:`helpers.study.after_report`)."""
    held = sum(c == "replicates" for c in checks)
    if held == len(checks):
        return "supported"
    if held:
        return "partly"
    return "not supported" if all(c == "does not replicate" for c in checks) else "inconclusive"


def heads_table(claims: Sequence[Claim], power: PowerRows = None) -> pd.DataFrame:
    """A row per head account present in ``claims``: its two ablation checks, the paper's checks' verdict and the
    verdict on the informative checks only (module docstring), and a row for the function-vector heads against the
    induction heads when that claim is there; with ``power``, what each verdict's checks are worth on the
    controls."""
    v = _verdicts(claims)
    rows = []
    for k, name in HEAD_ACCOUNTS.items():
        if f"10.{k}_heads_ablation" not in v:
            continue
        keys = [f"10.{k}_heads_ablation"] + ([f"10.{k}_heads_foobar"] if f"10.{k}_heads_foobar" in v else [])
        checks = [v[key] for key in keys]
        rows.append({"account": name, "ordinary labels: vs as many random heads": checks[0],
                     "foo/bar, swap-averaged: vs as many random heads": checks[1] if len(checks) > 1 else "not run",
                     "the paper's checks' verdict": checks_verdict(checks),
                     "informative checks": informative_count([(v[key], (key,)) for key in keys], power),
                     "verdict (informative checks only)": account_reading([(v[key], (key,)) for key in keys], power)})
    if "10.fv_over_induction" in v:
        fv = v["10.fv_over_induction"]
        rows.append({"account": FV_OVER_INDUCTION,
                     "ordinary labels: vs as many random heads": f"FV set costs more: {fv}",
                     "foo/bar, swap-averaged: vs as many random heads": "",
                     "the paper's checks' verdict": checks_verdict([fv]),
                     "informative checks": informative_count([(fv, ("10.fv_over_induction",))], power),
                     "verdict (informative checks only)": account_reading([(fv, ("10.fv_over_induction",))], power)})
    columns = ["account", "ordinary labels: vs as many random heads", "foo/bar, swap-averaged: vs as many random heads",
               "the paper's checks' verdict", "informative checks", "verdict (informative checks only)"]
    return _with_power(pd.DataFrame(rows, columns=columns).set_index("account"), power)


def verdicts(claims: Sequence[Claim], power: PowerRows = None, which: str = "account") -> dict[str, str]:
    """``{account: verdict}`` for every account notebook 10's claims judge: the position classes
    (:func:`account_checks`, when all their claims are there) and the head rankings (:func:`heads_table`), in the
    tables' order; what RESULTS and the README's verdict table show. ``which``: "account" the verdict on the
    informative checks only (by ``power``), "checks" the paper's checks' verdict, "counted" how many checks are
    informative ("1 of 2")."""
    if which not in ("account", "checks", "counted"):
        raise ValueError(f"which must be 'account', 'checks' or 'counted', got {which!r}")
    out = {}
    try:
        out.update({ACCOUNTS[c]: r[which] for c, r in account_checks(claims, power).items()})
    except ValueError:
        pass  # a run without the position classes' claims: the heads only
    table = heads_table(claims, power)
    column = {"account": "verdict (informative checks only)", "checks": "the paper's checks' verdict",
              "counted": "informative checks"}[which]
    return out | (dict(zip(table.index, table[column])) if len(table) else {})
