"""Notebook 07's overall verdict, printed lines and saved metrics (paper B, arXiv 2402.02872).

The claims themselves are built by the experiment modules from their intervals (``*_claims``); what is here
reads them, or the run's numbers, and never calls an experiment:

- :func:`heads_overall` / :func:`overall_of_claims`: the overall verdict of paper B's claims about heads
  (ablation, value outputs, two towers, biases). The premise claims (does the model read the foo/bar mapping,
  :mod:`helpers.experiments.mapping_control`) are not among them: they say whether the claims about heads can
  be tested, not whether they hold.
- :func:`heads_verdict`: per-part and overall verdicts from point numbers, with any part already graded from
  intervals used as given.
- the ``*_text`` builders: the lines notebook 07 prints under its tables and figures.
- :func:`heads_report_metrics`: what notebook 07 saves beside its claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

from helpers.study.claims import Claim

__all__ = ["heads_verdict", "heads_overall", "overall_of_claims", "notebook_sizes", "heads_setup_text",
           "by_hand_vo_text", "incontext_heads_text", "label_carrying_text", "two_towers_text", "regime_outcome_text",
           "regime_excess_text", "heads_overall_text", "heads_report_metrics"]


# ------------------------------------------------------------------ the overall verdict


def heads_verdict(acc_before: float, acc_ablated: float, acc_random: float, carrying: float, corr_attn: float,
                  corr_vo: float, majority_red: float, majority_bias: float, recency_red: float, recency_bias: float,
                  ablation: str | None = None, value_output: str | None = None, **graded: str) -> tuple[str, dict]:
    """Per-claim and overall verdicts of notebook 07, from numbers (it calls no other experiment).

    - ablation: replicates if the in-context heads drop accuracy by >= 0.20 and by >= 2x the random heads'
      drop; partly if by >= 0.05 and more than the random heads; else does not replicate.
    - value-output: replicates if label-carrying rate >= 0.75; partly if >= 0.60.
    - two towers: replicates if corr(attention diff, logit minus) >= 0.5 and exceeds |corr(VO diff, logit
      minus)| by >= 0.2; partly if it exceeds it at all.
    - each bias reduction: "no measurable bias" if the bias is < 0.05; replicates if the reduction is >= 10%;
      partly if > 0; else does not replicate.
    Overall: "replicates" if every measurable claim replicates, "does not replicate" if none does even
    partly, else "partly". ``ablation``: the ablation part already graded from intervals
    (:func:`helpers.protocols.head_ablation.ablation_interval_part`), and ``value_output``
    (:func:`helpers.protocols.two_towers.value_output_interval_part`), used instead of the point rules;
    ``**graded``: any other part graded from intervals (``two_towers``, ``majority``, ``recency``, or an extra
    part such as ``ablation_all``), used as given. Overall "inconclusive" when no part replicates even partly
    and some part is inconclusive.
    """
    def grade(ok, part):
        return "replicates" if ok else ("partly" if part else "does not replicate")

    d_heads, d_rand = acc_before - acc_ablated, acc_before - acc_random
    parts = {
        "ablation": grade(d_heads >= 0.20 and d_heads >= 2 * max(d_rand, 0), d_heads >= 0.05 and d_heads > d_rand),
        "value_output": grade(carrying >= 0.75, carrying >= 0.60),
        "two_towers": grade(corr_attn >= 0.5 and corr_attn - abs(corr_vo) >= 0.2, corr_attn > abs(corr_vo)),
    }
    if ablation is not None:
        parts["ablation"] = ablation
    if value_output is not None:
        parts["value_output"] = value_output
    for name, red, b in (("majority", majority_red, majority_bias), ("recency", recency_red, recency_bias)):
        parts[name] = "no measurable bias" if not abs(b) >= 0.05 else grade(red >= 10, red > 0)
    parts.update(graded)
    return heads_overall(parts), parts


def heads_overall(parts: dict[str, str]) -> str:
    """The overall verdict from graded parts: "replicates" if every measurable part replicates, "partly" if some
    part replicates at least partly, "inconclusive" if none does and some part is inconclusive, else "does not
    replicate" (parts with "no measurable bias" are not measurable)."""
    graded = [v for v in parts.values() if v != "no measurable bias"]
    if graded and all(v == "replicates" for v in graded):
        return "replicates"
    if any(v in ("replicates", "partly") for v in graded):
        return "partly"
    if "inconclusive" in graded:
        return "inconclusive"
    return "does not replicate"

def overall_of_claims(head_claims: Sequence[Claim]) -> str:
    """:func:`heads_overall` of claims about heads, each graded by its ``part`` where the claim keeps one (a bias
    reduction's "no measurable bias"), else by its verdict."""
    return heads_overall({c.key: c.extra.get("part", c.verdict) for c in head_claims})


# ------------------------------------------------------------------ printed lines


def _head_name(head) -> str:
    l, h = head
    return f"L{l}H{h}"


def notebook_sizes(*sizes) -> dict:
    """The run sizes of notebook 07's steps (each a sizes dataclass, e.g. ``HeadsSizes``, ``TowersSizes``,
    ``BiasSizes``) as one dict, fields in order, a later object's field replacing an earlier one's of the same
    name (the evaluation sizes they all share)."""
    out = {}
    for s in sizes:
        out.update(asdict(s))
    return out


def heads_setup_text(profile_name: str, model_name: str, sizes: dict, cfg, n_incontext: int) -> str:
    """The run's line: profile, model, sizes (:func:`notebook_sizes`), and how many of the model's heads
    (``cfg.n_layers * cfg.n_heads``) count as in-context heads."""
    return f"{profile_name} {model_name} {sizes} {cfg.n_layers * cfg.n_heads} heads -> {n_incontext} in-context heads"


def by_hand_vo_text(head: tuple[int, int], words: Sequence[str], label_class: Sequence[int], vo_lm) -> str:
    """One head's value-output logit minus at each label position, named by the position's label word."""
    vals = ", ".join(f"{words[c]} {float(v):+.2f}" for c, v in zip(label_class, np.asarray(vo_lm, float).tolist()))
    return f"{_head_name(head)}, VO logit minus at each label position: {vals}"


def incontext_heads_text(title: str, heads: Sequence, per_word: dict, pooled: Sequence) -> str:
    """One task's in-context heads, the top heads for each label word, and the single ranking on the predicted
    label with how many heads it shares with the in-context heads."""
    return (f"{title}: in-context heads (layer, head) {heads}\n  top heads for each word {per_word}"
            f"\n  single ranking on the predicted label {pooled} ({len(set(pooled) & set(heads))} shared)")


def label_carrying_text(carrying, rates: dict) -> str:
    """The label-carrying rate's interval, and each task's rate on the first seed."""
    return f"label-carrying rate {carrying:.3f}; per task (first seed): {({t: round(r, 3) for t, r in rates.items()})}"


def two_towers_text(intervals: dict) -> str:
    """The two-towers intervals, 3 digits each ("no estimate" for None)."""
    return str({k: (f"{v:.3f}" if v is not None else "no estimate") for k, v in intervals.items()})


def regime_outcome_text(intervals: dict, clear: Sequence, sizes: dict, confirmation: dict | None = None,
                        heads: dict | None = None) -> str:
    """What came of the regimes: with ``clear`` regimes (:func:`~helpers.experiments.mapping_control.clear_regimes`,
    highest lower bound first), the first one's ``confirmation`` on fresh seeds (``sizes.confirm_seeds``), then
    the regimes and the in-context ``heads`` of the ablation in the first (its accuracies:
    :func:`helpers.study.plots.heads.regime_ablation_table`). Without, the regime with the highest lower bound and why the ablation is not
    run."""
    if not clear:
        best = max(intervals, key=lambda k: intervals[k]["swap_averaged"].low)
        return (f"No regime follows the mapping: every interval contains 0.5 or lies below it (highest lower bound: "
                f"{best[0]} at {best[1]} per class, {intervals[best]['swap_averaged']:.3f}). Head ablation is not "
                "run: there is no in-context mapping for it to remove (question 4).")
    return (f"{clear[0]} on fresh seeds {sizes.confirm_seeds}: swap-averaged accuracy "
            f"{confirmation['swap_averaged']:.3f} ({confirmation['reading']})\n"
            f"Regimes that follow the mapping: {list(clear)}. Ablation in {clear[0]}, in-context heads {heads}:")


def regime_excess_text(ablation: dict, all_positions: str = " (all positions)") -> str:
    """Random minus in-context heads ablated, at q and at every position."""
    return (f"random minus in-context heads ablated, at q: {ablation['excess']:.3f}; at every position: "
            f"{ablation['excess' + all_positions]:.3f}")


def heads_overall_text(overall: str, n_incontext: int, cfg) -> str:
    """The overall verdict, and the in-context heads' share of the model's heads beside the paper's ~1%."""
    total = cfg.n_layers * cfg.n_heads
    return (f"Overall: {overall}. In-context heads: {n_incontext} of {total} ({100 * n_incontext / total:.1f}%; "
            "paper: ~1%).")


# ------------------------------------------------------------------ saved metrics


def heads_report_metrics(overall: str, heads: dict, acc_iv: dict, ab_iv: dict, regime_iv: dict, sizes: dict) -> dict:
    """The metrics notebook 07 saves beside its claims (``report_claims(..., metrics=...)``): the overall verdict,
    the in-context heads per task, the accuracy [95% CI] per mapping, the A/B swap-averaged accuracy (``ab_iv``:
    :func:`~helpers.protocols.mapping_control.mapping_intervals` of A/B with B/A), the run sizes
    (:func:`notebook_sizes`) and each regime's swap-averaged accuracy, intervals written with 3 digits."""
    return {"overall": overall, "incontext_heads": heads, "accuracy": {m: f"{iv:.3f}" for m, iv in acc_iv.items()},
            "swap_averaged_A/B": f"{ab_iv['swap_averaged']:.3f}", "sizes": sizes,
            "regime": {f"{p} at {k} per class": f"{r['swap_averaged']:.3f}" for (p, k), r in regime_iv.items()}}
