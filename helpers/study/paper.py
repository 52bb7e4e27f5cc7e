"""The papers' reported numbers (arXiv 2305.14160 and 2402.02872), in one place for notebooks and the report.

Task keys follow helpers.core.tasks; the paper's EmoC column is keyed ``emoc`` and
is compared with our ``tweet_emotion`` substitute only with that said aloud.
Accuracies are fractions (0-1).
"""

from __future__ import annotations

TASK_ORDER = ("sst2", "trec", "agnews", "emoc")
# our offline task standing in for each paper column
OURS_FOR = {"sst2": "sst2", "trec": "trec", "agnews": "agnews", "emoc": "tweet_emotion"}


def paper_key(task: str) -> str:
    """The paper's column for one of our tasks (``tweet_emotion`` -> ``emoc``, its stand-in)."""
    inverse = {ours: key for key, ours in OURS_FOR.items()}
    if task not in inverse and task not in TASK_ORDER:
        raise KeyError(f"{task!r} has no column in the paper's tables ({sorted(inverse)})")
    return inverse.get(task, task)


# Table 1 (GPT2-XL)
TABLE1_GPT2XL = {
    "vanilla 1-shot": {"sst2": 0.6128, "trec": 0.5756, "agnews": 0.7332, "emoc": 0.1544, "average": 0.5190},
    "vanilla 5-shot": {"sst2": 0.6475, "trec": 0.6040, "agnews": 0.5252, "emoc": 0.0980, "average": 0.4687},
    "anchor re-weighting": {"sst2": 0.9007, "trec": 0.6092, "agnews": 0.8194, "emoc": 0.4164, "average": 0.6864},
}

# Table 2: averages over the four tasks; label loyalty, word loyalty, accuracy (percent)
TABLE2 = {
    "GPT2-XL": {
        "ICL": (100.0, 100.0, 51.90), "Text_anchor": (51.05, 36.65, 38.77), "Hidden_random": (48.96, 5.59, 39.96),
        "Hidden_random-top": (57.52, 4.49, 41.72), "Hidden_anchor": (79.47, 62.17, 45.04),
    },
    "GPT-J": {
        "ICL": (100.0, 100.0, 56.82), "Text_anchor": (53.45, 43.85, 40.83), "Hidden_random": (49.03, 2.16, 31.51),
        "Hidden_random-top": (71.10, 11.36, 52.34), "Hidden_anchor": (89.06, 75.04, 55.59),
    },
}

# Table 3: speed-up of Hidden_anchor over full ICL, and token counts
TABLE3_SPEEDUP = {
    "GPT2-XL": {"sst2": 1.1, "trec": 1.5, "agnews": 2.5, "emoc": 1.4},
    "GPT-J": {"sst2": 1.5, "trec": 2.2, "agnews": 2.9, "emoc": 1.9},
}
TABLE3_LDEMO = {"sst2": 18, "trec": 61, "agnews": 151, "emoc": 53}
TABLE3_LX = {"sst2": 19, "trec": 7, "agnews": 37, "emoc": 12}

# Section 2 qualitative claims, stated as checkable expectations
FIG5_PEAK_AUCROC = 0.8  # "reaches about 0.8 in deep layers"

# Paper B
PAPER_B = {
    "icl_acc_before": 0.876, "icl_acc_after_ablating_heads": 0.244, "fraction_of_heads": 0.01,
    "majority_bias_reduction": 0.22, "recency_bias_reduction": 0.17,
}


# The papers' claims, one entry per claim a notebook checks: the statement, where the paper makes it, and
# its value as the paper states it. helpers.study.claims.claim() joins an entry with our interval and
# verdict. Keys are "<notebook>.<name>"; each notebook's claims stay in its own block.
# notebook 00
CLAIMS_00: dict[str, dict] = {}
# end of notebook 00

# notebook 01
CLAIMS_01: dict[str, dict] = {}
# end of notebook 01

# notebook 02
CLAIMS_02: dict[str, dict] = {}
# end of notebook 02

# notebook 03
CLAIMS_03: dict[str, dict] = {
    "03.peak_aucroc": {
        "statement": "Attention from q to the label words predicts the output: peak AUCROC_l",
        "source": "arXiv 2305.14160 §2.3, Fig. 5", "paper": f"about {FIG5_PEAK_AUCROC} in deep layers"},
    "03.peak_layer": {
        "statement": "AUCROC_l peaks in the deep layers: peak layer (0-based)",
        "source": "arXiv 2305.14160 §2.3, Fig. 5", "paper": "deep layers"},
    "03.r_crossing": {
        "statement": "R_l grows mainly in the middle and later layers: layer where R_l passes 0.5 (0-based)",
        "source": "arXiv 2305.14160 §2.3, Fig. 5", "paper": "middle / later layers"},
}
# end of notebook 03

# notebook 04
_T1 = {k: 100 * v["average"] for k, v in TABLE1_GPT2XL.items()}  # Table 1's averages over the four tasks, %
CLAIMS_04: dict[str, dict] = {
    "04.gain_over_1shot": {
        "statement": "Anchor re-weighting beats vanilla 1-shot ICL: average accuracy gain (points)",
        "source": "arXiv 2305.14160 §3.1, Table 1",
        "paper": f"+{_T1['anchor re-weighting'] - _T1['vanilla 1-shot']:.2f} points "
                 f"({_T1['vanilla 1-shot']:.2f} -> {_T1['anchor re-weighting']:.2f}, GPT2-XL)"},
    "04.gain_over_5shot": {
        "statement": "Anchor re-weighting beats putting its training examples in the prompt (vanilla 5-shot): "
                     "average accuracy gain (points)",
        "source": "arXiv 2305.14160 §3.1, Table 1",
        "paper": f"+{_T1['anchor re-weighting'] - _T1['vanilla 5-shot']:.2f} points "
                 f"({_T1['vanilla 5-shot']:.2f} -> {_T1['anchor re-weighting']:.2f}, GPT2-XL)"},
    **{f"04.accuracy_{key}": {
        "statement": f"Table 1 average accuracy, {setting} (%)", "source": "arXiv 2305.14160 §3.1, Table 1",
        "paper": f"{_T1[setting]:.2f} (GPT2-XL)"}
       for key, setting in (("1shot", "vanilla 1-shot"), ("5shot", "vanilla 5-shot"),
                            ("reweighting", "anchor re-weighting"))},
}
# end of notebook 04

# notebook 05
CLAIMS_05: dict[str, dict] = {}
# end of notebook 05

# notebook 06
CLAIMS_06: dict[str, dict] = {}
# end of notebook 06

# notebook 07
CLAIMS_07: dict[str, dict] = {}
# end of notebook 07

# notebook 08
CLAIMS_08: dict[str, dict] = {}
# end of notebook 08

CLAIMS = {**CLAIMS_00, **CLAIMS_01, **CLAIMS_02, **CLAIMS_03, **CLAIMS_04, **CLAIMS_05, **CLAIMS_06, **CLAIMS_07,
          **CLAIMS_08}
