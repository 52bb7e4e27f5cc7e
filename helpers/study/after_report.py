"""Notebook 11's verdict table: the three accounts that came after the anchors, each judged from its claims.

- **Semantic anchors** (Krishna Kumar, arXiv 2511.21038): with flipped labels a model that reads its context
  does not follow the flipped mapping on inputs whose meaning it knows (``11.semantic_anchors``, the override
  rate), and the label words still carry the demonstrations: §2.1's flows
  (``11.flipped_shallow_wp_dominant``, ``11.flipped_deep_pq_dominant``) and §2.2's isolation
  (``11.flipped_label_isolation``) hold on the flipped prompts, and so do the flows' specific forms, notebook 10's
  causal gathering and reading (``11.flipped_label_gathers_causal``, ``11.flipped_label_read_causal``,
  :mod:`helpers.protocols.flipped_specific`).
- **Contextualise, then aggregate** (Bakalova et al., arXiv 2504.00132): the label words read the earlier
  demonstrations' label words and texts (``11.label_reads_earlier_labels``, ``11.label_reads_earlier_text``),
  blocking those links moves the prediction (``11.context_knockout``), and layer by layer: blocking them matters in
  the lower half of the layers (``11.context_labels_lower``, ``11.context_text_lower``) more than in the upper
  (``11.context_lower_first``), and blocking q's links to the label words matters in the upper half
  (``11.aggregation_upper``) more than in the lower (``11.aggregation_upper_later``).
- **Two stages of the query** (Yang et al., arXiv 2505.18752): separability comes before alignment
  (``11.two_stages``), previous-token heads carry the first (``11.previous_token_heads_separability``), induction
  heads the second (``11.induction_heads_alignment``), and not the other way round: the double dissociation
  (``11.dissociation_separability``, ``11.dissociation_alignment``).

Each account, by the rule fixed before any run: **supported** when every check replicates, **partly** when some do,
**not supported** when every one does not replicate, **inconclusive** otherwise, counting **only the informative
checks**, those that see the mechanism on the positive controls and stay silent on the negative ones
(:func:`helpers.study.power_report.account_reading`); an account none of whose checks is informative reads "no
informative check". The table shows beside it the paper's checks' verdict (every check counted,
:func:`helpers.study.challengers_report.checks_verdict`) and what each check is worth on the controls (the power
rows, :mod:`helpers.study.power_report`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from helpers.study.challengers_report import checks_verdict
from helpers.study.claims import Claim
from helpers.study.power_report import Power, account_power, account_reading, informative_count, power_by_key

__all__ = ["AFTER_ACCOUNTS", "after_verdicts", "after_table"]

AFTER_ACCOUNTS: dict[str, tuple[str, ...]] = {
    "semantic anchors (arXiv 2511.21038)": ("11.semantic_anchors", "11.flipped_shallow_wp_dominant",
                                            "11.flipped_deep_pq_dominant", "11.flipped_label_isolation",
                                            "11.flipped_label_gathers_causal", "11.flipped_label_read_causal"),
    "contextualise, then aggregate (arXiv 2504.00132)": ("11.label_reads_earlier_labels",
                                                         "11.label_reads_earlier_text", "11.context_knockout",
                                                         "11.context_labels_lower", "11.context_text_lower",
                                                         "11.context_lower_first", "11.aggregation_upper",
                                                         "11.aggregation_upper_later"),
    "two stages of the query (arXiv 2505.18752)": ("11.two_stages", "11.previous_token_heads_separability",
                                                   "11.induction_heads_alignment", "11.dissociation_separability",
                                                   "11.dissociation_alignment"),
}


def after_verdicts(claims: Sequence[Claim], power: dict[str, Power] | Sequence[Power] | None = None,
                   which: str = "account") -> dict[str, str]:
    """``{account: verdict}`` for every account of :data:`AFTER_ACCOUNTS` whose claims are all in ``claims``:
    ``which`` "account" counts only the checks ``power`` finds informative (module docstring), "checks" every
    check (the paper's checks' verdict), "counted" says how many checks are informative ("1 of 3")."""
    read = {"checks": lambda keys: checks_verdict([v[k] for k in keys]),
            "account": lambda keys: account_reading([(v[k], (k,)) for k in keys], power),
            "counted": lambda keys: informative_count([(v[k], (k,)) for k in keys], power)}
    if which not in read:
        raise ValueError(f"which must be 'account', 'checks' or 'counted', got {which!r}")
    v = {c.key: c.verdict for c in claims}
    return {a: read[which](keys) for a, keys in AFTER_ACCOUNTS.items() if all(k in v for k in keys)}


def after_table(claims: Sequence[Claim], power: Sequence[Power] | None = None) -> pd.DataFrame:
    """A row per account: each of its checks' verdicts, the paper's checks' verdict, the verdict on the informative
    checks only and, with ``power``, what its checks are worth on the controls."""
    v = {c.key: c.verdict for c in claims}
    everything, counted = after_verdicts(claims, which="checks"), after_verdicts(claims, power)
    n = after_verdicts(claims, power, which="counted")
    rows = [{"account": a, "checks": "; ".join(f"{k[3:]}: {v[k]}" for k in keys),
             "the paper's checks' verdict": everything[a], "informative checks": n[a],
             "verdict (informative checks only)": counted[a]}
            for a, keys in AFTER_ACCOUNTS.items() if a in counted]
    table = pd.DataFrame(rows, columns=["account", "checks", "the paper's checks' verdict", "informative checks",
                                        "verdict (informative checks only)"]).set_index("account")
    if power is not None:
        by = power_by_key(power)
        table["its checks on the controls"] = [account_power(AFTER_ACCOUNTS[a], by) for a in table.index]
    return table
