"""The papers' reported numbers (arXiv 2305.14160 and 2402.02872), in one place for notebooks and the report.

Task keys follow helpers.core.tasks; the paper's EmoC column is keyed ``emoc`` and
is compared with our ``tweet_emotion`` substitute only with that said aloud.
Accuracies are fractions (0-1).
"""

from __future__ import annotations

from helpers.study.paper_controls import CLAIMS_09

TASK_ORDER = ("sst2", "trec", "agnews", "emoc")
# our offline task standing in for each paper column
OURS_FOR = {"sst2": "sst2", "trec": "trec", "agnews": "agnews", "emoc": "tweet_emotion"}


NOT_IN_PAPER = "not in the paper (its tables cover SST-2, TREC, AGNews and EmoC)"


def paper_column(task: str) -> str | None:
    """The paper's column for one of our tasks, or None for a task the paper did not study (a task of your own):
    its paper cells then say :data:`NOT_IN_PAPER` instead of failing."""
    inverse = {ours: key for key, ours in OURS_FOR.items()}
    return inverse.get(task, task if task in TASK_ORDER else None)


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
_T1 = TABLE1_GPT2XL
CLAIMS_00: dict[str, dict] = {
    "00.vanilla_1shot": {
        "statement": "Vanilla ICL accuracy, 1 demonstration per class, mean over the tasks run",
        "source": "arXiv 2305.14160 §3.1, Table 1 (Vanilla In-Context Learning, 1-shot per class)",
        "paper": f"{100 * _T1['vanilla 1-shot']['average']:.1f}% (GPT2-XL, mean of its 4 tasks)"},
    "00.vanilla_5shot": {
        "statement": "Vanilla ICL accuracy, 5 demonstrations per class, mean over the tasks run",
        "source": "arXiv 2305.14160 §3.1, Table 1 (Vanilla In-Context Learning, 5-shot per class)",
        "paper": f"{100 * _T1['vanilla 5-shot']['average']:.1f}% (GPT2-XL, mean of its 4 tasks; 3 per class on AGNews)"},
    "00.more_demos_no_help": {
        "statement": "More demonstrations do not help: 5-shot minus 1-shot accuracy, mean over the tasks run",
        "source": "arXiv 2305.14160 §3.1, Table 1 (vanilla rows)",
        "paper": f"{100 * (_T1['vanilla 5-shot']['average'] - _T1['vanilla 1-shot']['average']):+.1f} points "
                 "(GPT2-XL)"},
}
# end of notebook 00

# notebook 01
CLAIMS_01: dict[str, dict] = {
    "01.shallow_wp_dominant": {
        "statement": "In shallow layers the text-to-label-word flow S_wp is the largest flow",
        "source": "arXiv 2305.14160 §2.1, Fig. 3",
        "paper": "S_wp high and S_pq low in shallow layers (curves; GPT2-XL, GPT-J)"},
    "01.deep_pq_dominant": {
        "statement": "In deep layers the label-word-to-target flow S_pq is the largest flow",
        "source": "arXiv 2305.14160 §2.1, Fig. 3",
        "paper": "S_pq dominant in deep layers (curves; GPT2-XL, GPT-J)"},
    "01.label_flows_above_ww": {
        "statement": "Flows through the label words (S_wp, S_pq) exceed the flow between other tokens (S_ww)",
        "source": "arXiv 2305.14160 §2.1, Fig. 3",
        "paper": "S_wp and S_pq usually above S_ww (curves)"},
}
# end of notebook 01

# notebook 02
CLAIMS_02: dict[str, dict] = {
    "02.label_first_hurts_most": {
        "statement": "Isolating the label words in the first 5 layers changes the prediction most",
        "source": "arXiv 2305.14160 §2.2, Fig. 4",
        "paper": "lowest label and word loyalty of the four conditions (bars; GPT2-XL, GPT-J)"},
    "02.label_last_barely_matters": {
        "statement": "Isolating the label words in the last 5 layers barely matters",
        "source": "arXiv 2305.14160 §2.2, Fig. 4",
        "paper": "loyalty high, near the unmodified run (bars)"},
    "02.random_first_barely_matters": {
        "statement": "Isolating as many random non-label words in the first 5 layers barely matters",
        "source": "arXiv 2305.14160 §2.2, Fig. 4",
        "paper": "loyalty high (bars)"},
    "02.random_last_barely_matters": {
        "statement": "Isolating as many random non-label words in the last 5 layers barely matters",
        "source": "arXiv 2305.14160 §2.2, Fig. 4",
        "paper": "loyalty high (bars)"},
}
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
_T2 = TABLE2["GPT2-XL"]
_T2_METRICS = {"label_loyalty": ("label loyalty", 0), "word_loyalty": ("word loyalty", 1), "accuracy": ("accuracy", 2)}
CLAIMS_05: dict[str, dict] = {
    **{f"05.hidden_anchor_{m}": {
        "statement": f"Hidden_anchor (only the anchors' keys and values kept): {name} (%)",
        "source": "arXiv 2305.14160 §3.2, Table 2",
        "paper": f"{_T2['Hidden_anchor'][i]:.2f} (GPT2-XL, mean of 4 tasks; GPT-J {TABLE2['GPT-J']['Hidden_anchor'][i]:.2f})"
                 + (f"; full ICL {_T2['ICL'][2]:.2f}" if m == "accuracy" else "")}
       for m, (name, i) in _T2_METRICS.items()},
    **{f"05.anchor_minus_{o}_{m}": {
        "statement": f"Hidden_anchor minus {o}: {_T2_METRICS[m][0]} (points)",
        "source": "arXiv 2305.14160 §3.2, Table 2",
        "paper": f"{_T2['Hidden_anchor'][_T2_METRICS[m][1]] - _T2[o][_T2_METRICS[m][1]]:+.2f} (GPT2-XL)"}
       for o in ("Text_anchor", "Hidden_random", "Hidden_random-top") for m in ("label_loyalty", "word_loyalty")},
    **{f"05.speedup_{ours}": {
        "statement": f"Hidden_anchor speed-up over full ICL, {ours} (x)",
        "source": "arXiv 2305.14160 §3.2, Table 3",
        "paper": f"{TABLE3_SPEEDUP['GPT2-XL'][key]}x (GPT2-XL; GPT-J {TABLE3_SPEEDUP['GPT-J'][key]}x)"
                 + (" on EmoC" if key == "emoc" else "")}
       for key, ours in OURS_FOR.items()},
    # the template of a task the paper did not study (a task of your own): reported as 05.speedup_<task>
    "05.speedup_own": {"statement": "Hidden_anchor speed-up over full ICL, a task of your own (x)",
                       "source": "arXiv 2305.14160 §3.2, Table 3", "paper": NOT_IN_PAPER},
}
# end of notebook 05

# notebook 06
CLAIMS_06: dict[str, dict] = {
    "06.confusion_agreement": {
        "statement": "Distances between the anchors' keys, seen through the queries at q, predict the confusion "
                     "matrix (Spearman over the 15 TREC class pairs, preset deep layer)",
        "source": "arXiv 2305.14160 §3.3, Fig. 6",
        "paper": "predicted and actual heatmaps agree qualitatively (no number); Description–Entity the most "
                 "confused pair (GPT2-XL, TREC, layer 32 of 48)"},
}
# end of notebook 06

# notebook 07
_B = "arXiv 2402.02872"
CLAIMS_07: dict[str, dict] = {
    "07.foobar_icl": {
        "statement": "With semantically unrelated labels (foo/bar) the model learns the label mapping in context",
        "source": f"{_B}, abstract and task setting; arXiv 2305.14160 App. F.2",
        "paper": f"{PAPER_B['icl_acc_before']:.1%} foo/bar ICL accuracy (paper B, larger models); GPT2-XL and "
                 "GPT-J-6B at chance with unrelated labels (paper A)"},
    "07.ablation_at_q": {
        "statement": "Ablating the ~1% in-context heads at the last position costs more accuracy than ablating as "
                     "many random heads",
        "source": f"{_B}, abstract and the in-context heads experiment",
        "paper": f"{PAPER_B['icl_acc_before']:.1%} -> {PAPER_B['icl_acc_after_ablating_heads']:.1%} with "
                 f"{PAPER_B['fraction_of_heads']:.0%} of the heads (an intervention on the heads; random heads not "
                 "reported)"},
    "07.ablation_all": {
        "statement": "Ablating the in-context heads at every position costs more accuracy than ablating as many "
                     "random heads",
        "source": f"{_B}, abstract and the in-context heads experiment",
        "paper": f"{PAPER_B['icl_acc_before']:.1%} -> {PAPER_B['icl_acc_after_ablating_heads']:.1%} (an "
                 "intervention on the heads)"},
    "07.value_output": {
        "statement": "In the in-context heads the value-output vector at each label position carries that label",
        "source": f"{_B}, abstract and the value-output analysis",
        "paper": "qualitative: the label positions' value-output vectors project to their own label"},
    "07.two_towers": {
        "statement": "The prediction follows the in-context heads' attention on foo vs bar positions (query and key "
                     "as two towers), not changes in the value-output vectors",
        "source": f"{_B}, abstract and the two-towers hypothesis",
        "paper": "qualitative: the attention scores at the foo and bar positions move with the prediction"},
    "07.majority_reduction": {
        "statement": "Re-weighting the in-context heads' attention reduces the majority-label bias",
        "source": f"{_B}, abstract and the bias-reduction experiments",
        "paper": f"{PAPER_B['majority_bias_reduction']:.0%} reduction on the paper's own measure (not defined in "
                 "full; this project's measure is another quantity)"},
    "07.recency_reduction": {
        "statement": "Re-weighting the in-context heads' attention reduces the recency bias",
        "source": f"{_B}, abstract and the bias-reduction experiments",
        "paper": f"{PAPER_B['recency_bias_reduction']:.0%} reduction on the paper's own measure (not defined in "
                 "full; this project's measure is another quantity)"},
    "07.unrelated_regime": {
        "statement": "With 1 to 16 demonstrations per class and foo/bar or A/B labels, some regime in which the model "
                     "follows an unrelated label mapping in context",
        "source": f"{_B}, task setting; arXiv 2305.14160 App. F.2",
        "paper": f"{PAPER_B['icl_acc_before']:.1%} foo/bar ICL accuracy (paper B, larger models); 83.0% on SST-2 "
                 "with A/B labels at 8 per class for LLaMA-33B, GPT2-XL and GPT-J-6B at chance (paper A)"},
    "07.regime_ablation": {
        "statement": "Where the model follows the mapping, ablating its in-context heads at q costs more accuracy "
                     "than ablating as many random heads",
        "source": f"{_B}, abstract and the in-context heads experiment",
        "paper": f"{PAPER_B['icl_acc_before']:.1%} -> {PAPER_B['icl_acc_after_ablating_heads']:.1%} with "
                 f"{PAPER_B['fraction_of_heads']:.0%} of the heads"},
}
# end of notebook 07

# notebook 08 (a user's own task: the paper did not run it, so its side is what it found on its four tasks)
CLAIMS_08: dict[str, dict] = {
    "08.accuracy_above_chance": {
        "statement": "ICL works on the task: vanilla 1-shot accuracy above chance",
        "source": "arXiv 2305.14160 §2 (setting), Table 1",
        "paper": f"above chance on its tasks (GPT2-XL 1-shot average {100 * TABLE1_GPT2XL['vanilla 1-shot']['average']:.1f}%)"},
    "08.saliency_two_stages": {
        "statement": "Saliency: S_wp dominates the shallow layers, S_pq the deep layers",
        "source": "arXiv 2305.14160 §2.1, Fig. 3",
        "paper": "two stages on every task"},
    "08.isolation_first_hurts": {
        "statement": "Isolating the label words in the first layers changes the prediction most",
        "source": "arXiv 2305.14160 §2.2, Fig. 4",
        "paper": "label-first loyalty lowest; the other three conditions barely matter"},
    "08.aucroc_deep": {
        "statement": "Attention from q to the label words predicts the output in deep layers",
        "source": "arXiv 2305.14160 §2.3, Fig. 5",
        "paper": f"peak AUCROC_l about {FIG5_PEAK_AUCROC}; R_l grows in middle and late layers"},
}
# end of notebook 08

# notebook 09: helpers.study.paper_controls (the controls are this project's models)

# notebook 10 (the anchors against their challengers: the claims of other work, tested with paper A's methods)
_FORERUNNER = "Cho et al., arXiv 2410.04468 (ICLR 2025)"
_TEMPLATE = "Bai et al., arXiv 2401.11323"
CLAIMS_10: dict[str, dict] = {
    "10.forerunner_gathers": {
        "statement": "In shallow layers the forerunner token before each label gathers more of the demonstration's "
                     "text than the label word does (flow per pair, forerunner minus label words)",
        "source": f"{_FORERUNNER}: the forerunner token carries the input's information; §2.1's measure",
        "paper": "qualitative: information flows to the forerunner token, then merges into the label token"},
    "10.forerunner_is_read": {
        "statement": "In deep layers q reads the forerunner tokens more than the label words (flow per pair, "
                     "forerunner minus label words)",
        "source": f"{_FORERUNNER}: retrieval reads the merged demonstrations; §2.1's measure",
        "paper": "qualitative: a bypass route through the forerunner tokens runs beside the label tokens"},
    "10.template_gathers": {
        "statement": "In shallow layers the template tokens gather more of the demonstrations' text than the label "
                     "words do (flow per pair, template minus label words)",
        "source": f"{_TEMPLATE}: template and stopword tokens aggregate the demonstrations; §2.1's measure",
        "paper": "qualitative: template tokens' representations carry the task (task-encoding tokens)"},
    "10.template_is_read": {
        "statement": "In deep layers q reads the template tokens more than the label words (flow per pair, "
                     "template minus label words)",
        "source": f"{_TEMPLATE}; §2.1's measure",
        "paper": "qualitative: template tokens, not content tokens, are performance-critical"},
    "10.label_isolation": {
        "statement": "Isolating the label words (every token) in the first layers moves the prediction more than "
                     "isolating as many content tokens (label loyalty, random minus label words)",
        "source": "arXiv 2305.14160 §2.2, Fig. 4 (the label words' first token there; notebook 02)",
        "paper": "label loyalty far lower with the label words isolated in the first 5 layers (GPT2-XL, GPT-J)"},
    "10.forerunner_isolation": {
        "statement": "Isolating the forerunner tokens in the first layers moves the prediction more than isolating "
                     "as many content tokens (label loyalty, random minus forerunner)",
        "source": f"{_FORERUNNER}; §2.2's protocol",
        "paper": "qualitative: the forerunner token is part of the route from input to label"},
    "10.template_isolation": {
        "statement": "Isolating the template tokens in the first layers moves the prediction more than isolating "
                     "as many content tokens (label loyalty, random minus template)",
        "source": f"{_TEMPLATE}: ablating template tokens' representations hurts far more than content tokens'; "
                  "§2.2's protocol",
        "paper": "accuracy falls most when template and stopword tokens are removed from the representations"},
    "10.incontext_heads_ablation": {
        "statement": "Ablating the top in-context heads (paper B's score) at every position costs more accuracy than "
                     "ablating as many random heads",
        "source": "arXiv 2402.02872 (the in-context heads experiment); notebook 07's ranking on ordinary labels",
        "paper": "87.6% -> 24.4% foo/bar accuracy with 1% of the heads ablated (larger models)"},
    "10.induction_heads_ablation": {
        "statement": "Ablating the top induction heads at every position costs more accuracy than ablating as many "
                     "random heads",
        "source": "Crosbie & Shutova, arXiv 2407.07011: ablating 1-3% induction heads",
        "paper": "few-shot ICL falls to about zero-shot with 1-3% of the heads ablated"},
    "10.fv_heads_ablation": {
        "statement": "Ablating the top function-vector heads at every position costs more accuracy than ablating as "
                     "many random heads",
        "source": "Todd et al., arXiv 2310.15213 (the FV score); Yin & Steinhardt, arXiv 2502.14010",
        "paper": "qualitative: ablating the FV heads hurts few-shot ICL more than ablating induction heads"},
    "10.incontext_heads_foobar": {
        "statement": "Ablating the top in-context heads at every position costs more swap-averaged foo/bar accuracy "
                     "than ablating as many random heads",
        "source": "arXiv 2402.02872 (the in-context heads experiment, foo/bar labels); notebook 07's swap control",
        "paper": "87.6% -> 24.4% foo/bar accuracy with 1% of the heads ablated (larger models)"},
    "10.induction_heads_foobar": {
        "statement": "Ablating the top induction heads at every position costs more swap-averaged foo/bar accuracy "
                     "than ablating as many random heads",
        "source": "Crosbie & Shutova, arXiv 2407.07011 (abstract labels among their settings)",
        "paper": "few-shot ICL falls to about zero-shot with 1-3% of the heads ablated"},
    "10.fv_heads_foobar": {
        "statement": "Ablating the top function-vector heads at every position costs more swap-averaged foo/bar "
                     "accuracy than ablating as many random heads",
        "source": "Todd et al., arXiv 2310.15213; Yin & Steinhardt, arXiv 2502.14010",
        "paper": "qualitative: FV heads carry the task that the demonstrations define"},
    "10.fv_over_induction": {
        "statement": "Ablating the function-vector heads costs more accuracy than ablating as many induction heads",
        "source": "Yin & Steinhardt, arXiv 2502.14010",
        "paper": "few-shot ICL depends mainly on FV heads, more than on induction heads"},
    "10.span_isolation": {
        "statement": "Isolating every token of each multi-token label word in the first layers moves the prediction "
                     "more than isolating its first token (each against as many content tokens)",
        "source": "arXiv 2305.14160 §2.2 takes a label word's first token (the authors' code; "
                  "lancopku/label-words-are-anchors issue #18); a task with phrase labels",
        "paper": "untested: the paper isolates the first token only"},
    "10.span_aucroc": {
        "statement": "In deep layers the attention from q to all of a label word's tokens predicts the output better "
                     "than the attention to its first token (AUCROC_l, all minus first)",
        "source": "arXiv 2305.14160 §2.3 (AUCROC_l on the first token in the authors' code); a task with phrase labels",
        "paper": "untested: the paper reads the first token only"},
    "10.span_hidden_anchor": {
        "statement": "Hidden_anchor keeping all of the label words' tokens is more accurate than keeping their first "
                     "tokens only",
        "source": "arXiv 2305.14160 §3.2 (Hidden_anchor keeps every label token in the authors' code); a task with "
                  "phrase labels",
        "paper": "untested: the paper keeps every token of the label word"},
    # the checks on the controls of notebook 09 (helpers.core.controls.model; their power: helpers.study.power_report)
    "10.control_label_isolation": {
        "statement": "On a model whose label positions certainly carry the context, isolating the label words in the "
                     "first layer moves the prediction more than isolating as many content tokens",
        "source": "arXiv 2305.14160 §2.2's check, on this project's positive control (notebook 09)",
        "paper": "the check's premise: isolating the anchors in shallow layers moves the prediction (§2.2)"},
    "10.control_label_gathers": {
        "statement": "On the positive control, the flow per pair from earlier content into the label words in the "
                     "shallow layers exceeds the flow into the content tokens",
        "source": "arXiv 2305.14160 §2.1's flows by class, on this project's positive control (notebook 09)",
        "paper": "the check's premise: the label words gather the demonstrations in shallow layers (§2.1)"},
    "10.control_label_is_read": {
        "statement": "On the positive control, the flow per pair from the label words into q in the deep layers "
                     "exceeds the flow from the content tokens",
        "source": "arXiv 2305.14160 §2.1's flows by class, on this project's positive control (notebook 09)",
        "paper": "the check's premise: q reads the label words in deep layers (§2.1)"},
    "10.label_read_causal": {
        "statement": "q reads the mapping from the label words in the deep layers: with the label positions' deep "
                     "keys and values taken from the same prompt relabelled, the answer moves with the labels more "
                     "often than with as many content positions patched",
        "source": "arXiv 2305.14160 §2.1's deep-layer claim, tested causally (a discriminating form of S_pq: "
                  "this project's check, measured on the controls before it is used)",
        "paper": "qualitative: in deep layers the model extracts the answer from the label words (§2.1, §2.3)"},
    "10.control_label_read_causal": {
        "statement": "On the positive control, with the label positions' deep keys and values taken from the same "
                     "sequence relabelled, the answer moves with the labels more often than with as many items "
                     "patched",
        "source": "the causal label-reading check of notebook 10, on this project's controls (notebook 09)",
        "paper": "the check's premise: q reads the mapping from the label words in deep layers (§2.1)"},
    "10.label_gathers_causal": {
        "statement": "The label words gather their demonstrations in the shallow layers: blocking each label word's "
                     "links to its own demonstration's text costs more accuracy than blocking as many "
                     "content-to-content links",
        "source": "arXiv 2305.14160 §2.1-2.2's shallow-layer claim, tested causally (a discriminating form of "
                  "S_wp: this project's check, measured on the controls before it is used)",
        "paper": "qualitative: in shallow layers the label words aggregate the demonstrations' information (§2.1, "
                 "§2.2)"},
    "10.control_label_gathers_causal": {
        "statement": "On the positive control, blocking each label token's link to its own item in the first layer "
                     "costs more accuracy than blocking as many item-to-item links",
        "source": "the causal gathering check of notebook 10, on this project's controls (notebook 09)",
        "paper": "the check's premise: the label words gather their demonstrations (§2.1)"},
    "10.anchors_carry_mapping": {
        "statement": "The anchors carry the demonstrations' mapping: with only the anchors' keys and values kept "
                     "(Hidden_anchor), building them from the demonstrations relabelled moves the prediction away "
                     "from the full prompt's more often than Hidden_anchor does",
        "source": "arXiv 2305.14160 §3.2's Hidden_anchor, against relabelled anchors (a discriminating form of "
                  "Hidden_anchor's label loyalty: this project's check, measured on the controls before it is used)",
        "paper": "79.47% label loyalty with the anchors alone (GPT2-XL, Table 2): the anchors hold what the "
                 "prediction needs"},
    "10.control_anchors_carry_mapping": {
        "statement": "On the positive control, Hidden_anchor's loyalty falls when the label tokens' keys and values "
                     "come from the sequence relabelled",
        "source": "the relabelled-anchors check of notebook 10, on this project's controls (notebook 09)",
        "paper": "the check's premise: the anchors carry the mapping (§3.2)"},
    "10.anchors_carry_text": {
        "statement": "The anchors carry the demonstrations' text: Hidden_anchor keeps more of the full prompt's "
                     "predictions than the same anchors built while the demonstrations' text is hidden from them, "
                     "every position kept",
        "source": "arXiv 2305.14160 §3.2's Hidden_anchor minus Text_anchor, with the text hidden in place rather "
                  "than deleted (a discriminating form: this project's check, measured on the controls before it "
                  "is used)",
        "paper": "+28.42 points of label loyalty over Text_anchor (GPT2-XL, Table 2)"},
    "10.control_anchors_carry_text": {
        "statement": "On the positive control, Hidden_anchor's loyalty falls when the label tokens are built "
                     "without seeing the items, every position kept",
        "source": "the text-hidden-in-place check of notebook 10, on this project's controls (notebook 09)",
        "paper": "the check's premise: the anchors gather the items (§3.2)"},
}
# end of notebook 10

# notebook 11: the accounts after the anchors
_FLIP = "arXiv 2511.21038 (flipped labels)"
CLAIMS_11: dict[str, dict] = {
    "11.semantic_anchors": {
        "statement": "With the demonstrations' label words flipped, a model that reads its context does not follow "
                     "the flipped mapping on inputs whose meaning it knows (semantic override rate near 0)",
        "source": "arXiv 2511.21038, semantic override rate (correctness under flipped semantics)",
        "paper": "semantic override rate 0 on every model (1-12B), while prompt alignment rises"},
    "11.control_override": {
        "statement": "With the label tokens permuted, the control's prediction follows the context's mapping "
                     "(agreement with the permuted class minus with the query's class)",
        "source": "arXiv 2511.21038's measure on notebook 09's controls",
        "paper": "the positive control reads its context: it follows any mapping; the negative one does not"},
    **{f"11.flipped_{k[3:]}": {**CLAIMS_01[k], "statement": "On flipped labels: " + CLAIMS_01[k]["statement"],
                               "source": f"{_FLIP}, with {CLAIMS_01[k]['source']}"} for k in CLAIMS_01},
    "11.flipped_label_isolation": {
        "statement": "On flipped labels, isolating the label words in the first layers moves the prediction more "
                     "than isolating as many random words",
        "source": f"{_FLIP}, with arXiv 2305.14160 §2.2",
        "paper": "label words still aggregate the demonstrations (2511.21038); loyalty far lower (2305.14160 Fig. 4)"},
    "11.flipped_label_read_causal": {
        "statement": "On flipped labels, q reads the mapping from the label words in the deep layers: with the label "
                     "positions' deep keys and values taken from the flipped prompt relabelled again, the answer "
                     "moves with the labels more often than with as many content positions patched",
        "source": f"{_FLIP}, with notebook 10's causal label reading (the specific form of S_pq: this project's "
                  "check, measured on the controls before it is used)",
        "paper": "label words still anchor the flipped mapping (2511.21038); q extracts the answer from them in deep "
                 "layers (2305.14160 §2.1)"},
    "11.flipped_label_gathers_causal": {
        "statement": "On flipped labels, the label words gather their demonstrations in the shallow layers: blocking "
                     "each label word's links to its own demonstration's text costs more alignment with the flipped "
                     "mapping than blocking as many content-to-content links",
        "source": f"{_FLIP}, with notebook 10's causal gathering (the specific form of S_wp: this project's check, "
                  "measured on the controls before it is used)",
        "paper": "label words still aggregate the demonstrations (2511.21038); in shallow layers they gather them "
                 "(2305.14160 §2.1, §2.2)"},
    "11.label_reads_earlier_labels": {
        "statement": "In shallow layers, a label word reads the earlier demonstrations' label words (saliency per "
                     "pair) more than other words read each other (S_ww)",
        "source": "arXiv 2504.00132 (contextualise, then aggregate), with arXiv 2305.14160 §2.1",
        "paper": "label words are contextualised by the earlier demonstrations before q aggregates them"},
    "11.label_reads_earlier_text": {
        "statement": "In shallow layers, a label word reads the earlier demonstrations' input texts (saliency per "
                     "pair) more than other words read each other (S_ww)",
        "source": "arXiv 2504.00132, with arXiv 2305.14160 §2.1",
        "paper": "label words are contextualised by the earlier demonstrations before q aggregates them"},
    "11.context_knockout": {
        "statement": "Blocking each label word's links to the earlier demonstrations in the first layers moves the "
                     "prediction more than blocking the same links for a text token of each demonstration",
        "source": "arXiv 2504.00132, knockout in the style of arXiv 2305.14160 §2.2",
        "paper": "contextualisation by earlier demonstrations is needed (larger models, ambiguous demonstrations)"},
    "11.context_labels_lower": {
        "statement": "In the lower half of the layers, blocking each label word's links to the earlier "
                     "demonstrations' label words lowers the gold class's probability more than blocking the same "
                     "links of a text token",
        "source": "arXiv 2504.00132 (contextualise, then aggregate), knockout by layer window",
        "paper": "lower layers contextualise each demonstration with the earlier ones"},
    "11.context_text_lower": {
        "statement": "In the lower half of the layers, blocking each label word's links to the earlier "
                     "demonstrations' texts lowers the gold class's probability more than blocking the same links "
                     "of a text token",
        "source": "arXiv 2504.00132, knockout by layer window",
        "paper": "lower layers contextualise each demonstration with the earlier ones"},
    "11.context_lower_first": {
        "statement": "Blocking the label words' links to the earlier demonstrations matters more in the lower half "
                     "of the layers than in the upper half",
        "source": "arXiv 2504.00132, knockout by layer window",
        "paper": "contextualisation happens in lower layers, before aggregation"},
    "11.aggregation_upper": {
        "statement": "In the upper half of the layers, blocking q's links to the label words lowers the gold class's "
                     "probability more than blocking its links to as many content tokens",
        "source": "arXiv 2504.00132, knockout by layer window",
        "paper": "higher layers aggregate the demonstrations at the query"},
    "11.aggregation_upper_later": {
        "statement": "Blocking q's links to the label words matters more in the upper half of the layers than in the "
                     "lower half",
        "source": "arXiv 2504.00132, knockout by layer window",
        "paper": "aggregation happens in higher layers, after contextualisation"},
    "11.two_stages": {
        "statement": "The query's state separates the classes (a linear probe on the whole state) layers before the "
                     "same probe finds them in its label-word logits (half-rise layer of the second minus of the "
                     "first)",
        "source": "arXiv 2505.18752 (two stages of the query)",
        "paper": "separability rises in the early-middle layers, alignment in the later ones"},
    "11.previous_token_heads_separability": {
        "statement": "Ablating the top previous-token heads lowers the query's separability (probe accuracy at the "
                     "middle layer) more than ablating as many random heads of the same layers",
        "source": "arXiv 2505.18752",
        "paper": "previous-token heads drive separability"},
    "11.induction_heads_alignment": {
        "statement": "Ablating the top induction heads lowers the query's alignment with the label words (read-out "
                     "accuracy after the last layer) more than ablating as many random heads of the same layers",
        "source": "arXiv 2505.18752",
        "paper": "induction heads drive alignment"},
    "11.dissociation_separability": {
        "statement": "Previous-token heads lower separability more than induction heads do (each against as many "
                     "random heads of its layers)",
        "source": "arXiv 2505.18752, the double dissociation",
        "paper": "previous-token heads, not induction heads, drive separability"},
    "11.dissociation_alignment": {
        "statement": "Induction heads lower alignment more than previous-token heads do, while leaving separability "
                     "nearly intact",
        "source": "arXiv 2505.18752, the double dissociation",
        "paper": "induction heads, not previous-token heads, drive alignment"},
}
# end of notebook 11

CLAIMS = {**CLAIMS_00, **CLAIMS_01, **CLAIMS_02, **CLAIMS_03, **CLAIMS_04, **CLAIMS_05, **CLAIMS_06, **CLAIMS_07,
          **CLAIMS_08, **CLAIMS_09, **CLAIMS_10, **CLAIMS_11}
