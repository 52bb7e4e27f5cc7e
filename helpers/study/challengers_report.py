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

**What each check can see** (:func:`power`): the same checks on the positive control (:mod:`helpers.core.control`,
notebook 09), a model whose answer certainly runs through its label positions (a previous-token head copies each
item into its label) and one matching head that reads them at q. A check that finds this there ("sees it") has the
power to see such a mechanism; one that misses it there says little when it finds nothing on the offline models.
The control's prompts have no template tokens, so only the label words' checks (against content) and the head
rankings apply to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from helpers.study.claims import Claim

__all__ = ["ACCOUNTS", "CHALLENGERS", "HEAD_ACCOUNTS", "account_checks", "account_table", "heads_table",
           "verdicts", "POWER_CHECKS", "power", "power_table"]

ACCOUNTS = {"label": "label words (arXiv 2305.14160)", "forerunner": "forerunner tokens (arXiv 2410.04468)",
            "template": "template tokens (arXiv 2401.11323)"}
CHALLENGERS = ("forerunner", "template")
HEAD_ACCOUNTS = {"incontext": "in-context heads (arXiv 2402.02872)", "induction": "induction heads (arXiv 2407.07011)",
                 "fv": "function-vector heads (arXiv 2310.15213)"}


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


def account_checks(claims: Sequence[Claim]) -> dict[str, dict[str, str]]:
    """``{class: {"isolation": verdict, "flows": holds/fails/inconclusive, "account": verdict}}`` (module
    docstring) from notebook 10's claims."""
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
        out[cls] = {"isolation": iso, "flows": flows, "account": account}
    return out


def account_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """:func:`account_checks` as a table, a row per account."""
    rows = [{"account": ACCOUNTS[c], "isolation (first layers) vs content tokens": r["isolation"],
             "flows vs the other classes": r["flows"], "verdict": r["account"]}
            for c, r in account_checks(claims).items()]
    return pd.DataFrame(rows).set_index("account")


def _heads_verdict(checks: Sequence[str]) -> str:
    """The verdict of a head account from its checks' verdicts (module docstring)."""
    held = sum(c == "replicates" for c in checks)
    if held == len(checks):
        return "supported"
    if held:
        return "partly"
    return "not supported" if all(c == "does not replicate" for c in checks) else "inconclusive"


def heads_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """A row per head account present in ``claims``: its two ablation checks and the verdict (module docstring),
    and a row for the function-vector heads against the induction heads when that claim is there."""
    v = _verdicts(claims)
    rows = []
    for k, name in HEAD_ACCOUNTS.items():
        if f"10.{k}_heads_ablation" not in v:
            continue
        checks = [v[f"10.{k}_heads_ablation"]] + ([v[f"10.{k}_heads_foobar"]] if f"10.{k}_heads_foobar" in v else [])
        rows.append({"account": name, "ordinary labels: vs as many random heads": checks[0],
                     "foo/bar, swap-averaged: vs as many random heads": checks[1] if len(checks) > 1 else "not run",
                     "verdict": _heads_verdict(checks)})
    if "10.fv_over_induction" in v:
        rows.append({"account": "function-vector over induction heads (arXiv 2502.14010)",
                     "ordinary labels: vs as many random heads": f"FV set costs more: {v['10.fv_over_induction']}",
                     "foo/bar, swap-averaged: vs as many random heads": "",
                     "verdict": _heads_verdict([v["10.fv_over_induction"]])})
    columns = ["account", "ordinary labels: vs as many random heads", "foo/bar, swap-averaged: vs as many random heads",
               "verdict"]
    return pd.DataFrame(rows, columns=columns).set_index("account")


# the checks run on the positive control (helpers.core.control), whose circuit is known: the label positions gather
# each item and q reads them through one matching head; a check that sees this there has the power to see it
POWER_CHECKS = {"isolation: label words vs as many content tokens": ("10.control_label_isolation",),
                "flows: label words vs content tokens, per pair": ("10.control_label_gathers",
                                                                    "10.control_label_is_read"),
                "in-context ranking: its top head ablated vs a random one": ("10.control_incontext_heads",),
                "induction ranking: its top head ablated vs a random one": ("10.control_induction_heads",),
                "function-vector ranking: its top head ablated vs a random one": ("10.control_fv_heads",)}
POWER = {"replicates": "sees it", "does not replicate": "misses it", "inconclusive": "cannot tell"}


def power(claims: Sequence[Claim]) -> dict[str, str]:
    """``{check: "sees it" / "misses it" / "cannot tell"}``: what each check of notebook 10 says on the positive
    control, where the answer is known (:data:`POWER_CHECKS`). A check with several claims sees it when all of them
    replicate, misses it when any does not replicate, and cannot tell otherwise. Checks whose claims are absent
    are left out."""
    v = _verdicts(claims)
    out = {}
    for check, keys in POWER_CHECKS.items():
        if not all(k in v for k in keys):
            continue
        got = [v[k] for k in keys]
        if all(g == "replicates" for g in got):
            out[check] = POWER["replicates"]
        elif any(g == "does not replicate" for g in got):
            out[check] = POWER["does not replicate"]
        else:
            out[check] = POWER["inconclusive"]
    return out


def power_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """:func:`power` as a table, a row per check: its claims' verdicts on the control and what they say."""
    v = _verdicts(claims)
    rows = [{"check": check, "on the control": ", ".join(v[k] for k in POWER_CHECKS[check]), "power": said}
            for check, said in power(claims).items()]
    return pd.DataFrame(rows, columns=["check", "on the control", "power"]).set_index("check")


def verdicts(claims: Sequence[Claim]) -> dict[str, str]:
    """``{account: verdict}`` for every account notebook 10's claims judge: the position classes
    (:func:`account_checks`, when all their claims are there) and the head rankings (:func:`heads_table`), in the
    tables' order; what RESULTS and the README's verdict table show."""
    out = {}
    try:
        out.update({ACCOUNTS[c]: r["account"] for c, r in account_checks(claims).items()})
    except ValueError:
        pass  # a run without the position classes' claims: the heads only
    table = heads_table(claims)
    return out | (dict(zip(table.index, table["verdict"])) if len(table) else {})
