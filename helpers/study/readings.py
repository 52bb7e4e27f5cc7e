"""What each verdict of each claim means, one sentence per verdict, as the reading under each notebook's results shows
it (:func:`helpers.study.claims.show_reading`).

A notebook's reading prints, for every claim its run reported, this run's value and verdict and the sentence kept
here for that verdict: the prose is written once, before any run, and the run chooses which sentence applies. The
same claim can read differently in two notebooks (notebook 09 runs notebook 01's checks on a control), so the
sentences are kept per notebook. Presentation only: editing a sentence keeps every stored step and record.
"""

from __future__ import annotations

__all__ = ["READINGS", "readings_for"]

# notebook 08: the same reading for each of its checks on your task (a small run)
_SMALL_RUN = {
    "replicates": "Every check held on its whole 95% interval even at this size: the effect is large on your "
                  "task, for this model, these demonstration draws and this test sample.",
    "partly": "Some checks held; on a run this small that mostly means wide intervals. Rerun with "
              "`ICL_PROFILE=paper` before reading it as a failure.",
    "inconclusive": "The intervals are too wide to tell; rerun with `ICL_PROFILE=paper` (5 seeds and the "
                    "full test pool) and see which side they narrow around.",
    "does not replicate": "An interval lies wholly on the other side: the one verdict a small run gives with "
                          "some force. Check the prompt first (a label word split or merged, or a model at "
                          "chance on the task).",
}

# {notebook: {claim key: {verdict: sentence}}}
READINGS: dict[str, dict[str, dict[str, str]]] = {
    "00_icl_setting": {
        "00.more_demos_no_help": {
            "replicates": "More demonstrations make this model worse on average, as in the paper: the paired "
                          "difference lies wholly below zero.",
            "inconclusive": "The estimate's sign can be read, but its interval reaches zero: this run cannot tell "
                            "\"5-shot no better\" from \"5-shot slightly better\". That is not evidence that more "
                            "demonstrations help.",
            "does not replicate": "On this model more demonstrations help: the paired difference lies wholly above "
                                  "zero, unlike the paper's GPT2-XL.",
        },
    },
    "01_saliency_flow": {
        "01.shallow_wp_dominant": {
            "replicates": "The first stage is there on every task: demonstrations flow into their label words first.",
            "partly": "The first stage shows on some tasks only: \"shallow\" is not the same share of depth on every "
                      "task (see where $S_{pq}$ first exceeds $S_{wp}$ in the table above).",
            "does not replicate": "The shallow layers are not dominated by the text-to-label flow on this model.",
            "inconclusive": "The shallow contrast straddles zero on too many tasks to tell.",
        },
        "01.deep_pq_dominant": {
            "replicates": "The second stage is there on every task: the target reads from the label words in deep "
                          "layers (partly structural, question 2).",
            "*": "The deep contrast does not hold on every task; the per-task tally is in the note.",
        },
    },
    "02_shallow_isolation": {
        "02.label_first_hurts_most": {
            "replicates": "Every paired drop from label-first lies above zero: the shallow label words are where the "
                          "demonstrations' information gathers, as the paper says.",
            "inconclusive": "Label-first is lowest in estimate, but at least one paired drop (in the note) reaches "
                            "zero, often the random-first control, which rests on its own inputs: this run cannot "
                            "separate the label words from any shallow isolation.",
            "does not replicate": "Another condition hurts more than label-first: the anchors are not where this "
                                  "model gathers the demonstrations.",
        },
        "02.random_first_barely_matters": {
            "replicates": "Random words isolated in the same layers keep most predictions: the effect is about the "
                          "label words, not about blocking any shallow attention.",
            "*": "Random words isolated in the same layers also move the predictions, so part of the label-first "
                 "effect may be any shallow blocking.",
        },
    },
    "03_deep_aucroc": {
        "03.peak_aucroc": {
            "replicates": "The attention from q to the label words predicts the output as well as in the paper.",
            "inconclusive": "The interval holds both the paper's value and the threshold: with these inputs per task "
                            "and seed a peak of this size cannot be told from one slightly smaller.",
            "does not replicate": "The peak stays below the threshold: the deep attention to the anchors predicts "
                                  "the output less well on this model than in the paper.",
        },
    },
    "04_anchor_reweighting": {
        "04.gain_over_1shot": {
            "replicates": "Re-weighting the anchors' attention helps beyond the 1-shot prompt on this model.",
            "*": "The gain over 1-shot is not established on this run: its interval reaches zero or below.",
        },
        "04.gain_over_5shot": {
            "replicates": "It also beats showing the same examples in the prompt: the attention at $q$ is a better "
                          "place for them than the context.",
            "*": "Against showing the same examples in the prompt, the gain is not established on this run.",
        },
    },
    "06_error_diagnosis": {
        "06.confusion_agreement": {
            "replicates": "The anchors' key distances rank the confusions as the paper's heatmaps suggest.",
            "partly": "The key distances rank the confusions better than chance, short of the agreement the "
                      "criterion asks for.",
            "inconclusive": "At the preset layer the key distances show no reliable agreement with the confusions.",
            "does not replicate": "The key distances rank the confusions the wrong way round at the preset layer.",
        },
    },
    "07_incontext_heads": {
        "07.foobar_icl": {
            "replicates": "The model follows the foo/bar mapping in its context, so the ablation below tests paper "
                          "B's claim.",
            "*": "The premise fails on this model: it does not read the foo/bar mapping from its context, so the "
                 "ablation below has nothing to remove and says nothing against the paper. Notebook 09 runs the same "
                 "methods on a model that certainly learns in context.",
        },
        "07.ablation_at_q": {
            "replicates": "Ablating the in-context heads at q costs more than as many random heads.",
            "partly": "Ablating the in-context heads at q costs more than as many random heads, but the drop from "
                      "the plain accuracy is short of what the criterion asks for.",
            "inconclusive": "Ablating the in-context heads at q is not told apart from ablating random heads on this "
                            "run.",
            "does not replicate": "Random heads cost more than the in-context heads on this run.",
        },
        "07.two_towers": {
            "replicates": "The prediction follows the heads' attention on the label positions far more than their "
                          "value outputs: the heads read their context as the two towers describe.",
            "partly": "The prediction follows the attention, though the criterion's margin over the value outputs is "
                      "not clear on its whole interval.",
            "*": "The two-towers pattern is not established on this run.",
        },
        "07.majority_reduction": {
            "inconclusive": "There is no measurable majority bias before the reduction, hence nothing to reduce.",
        },
        "07.recency_reduction": {
            "inconclusive": "There is no measurable recency bias before the reduction, hence nothing to reduce.",
        },
        "07.unrelated_regime": {
            "*": "Section 2.7's table above gives every regime: a regime counts only when its interval lies above "
                 "0.5, and a first-pass regime is counted only if it clears again on fresh seeds.",
        },
    },
    "08_your_own_task": {key: _SMALL_RUN for key in ("08.saliency_two_stages", "08.isolation_first_hurts",
                                                      "08.aucroc_deep")},
    "09_a_model_that_learns_in_context": {
        "09.icl_accuracy": {
            "replicates": "The premise holds: the control reads the mapping from its context.",
            "*": "The premise does not hold on this checkpoint: retrain it (`make control`).",
        },
        "09.wide_label_swap": {
            "replicates": "The wide control reads the mapping too: its power runs stand on a mechanism that is "
                          "there.",
            "*": "The wide control does not read the mapping reliably: its sensitivities mean little.",
        },
        "09.negative_ignores_swap": {
            "replicates": "The negative control's answer stays put when the labels move: it does not read the "
                          "mapping, so its specificities stand on a mechanism that is absent.",
            "*": "The negative control moves with the labels more than it should: its specificities mean little.",
        },
        "01.shallow_wp_dominant": {
            "replicates": "Saliency sees the first-layer copy.",
            "*": "Saliency misses the first-layer copy on a model whose layer 0 certainly makes it. The cause is the "
                 "measure: S_wp is a mean over *every* position before each label, while the copy here runs through "
                 "one edge (the item just before the label), so a mean over positions reads a one-edge mechanism as "
                 "weak: a finding about the method.",
        },
        "07.ablation_all": {
            "replicates": "Ablating the in-context head everywhere costs more than random heads.",
            "inconclusive": "At every position the contrast with random heads is not clear: a random draw can hit "
                            "the copying head of layer 0, which gain and drop at q do not rank (section 3.4). Paper "
                            "B's ranking cannot see a head that acts at the label positions.",
        },
    },
    "10_anchors_and_challengers": {
        "10.label_isolation": {
            "replicates": "Isolating the label words in the first layers moves the prediction more than isolating as "
                          "many content tokens, as paper A found with their first token.",
            "inconclusive": "These inputs cannot tell isolating the label words from isolating as many content "
                            "tokens.",
            "does not replicate": "Isolating the label words moves the prediction less than isolating content "
                                  "tokens.",
        },
        "10.forerunner_isolation": {
            "replicates": "The forerunner tokens matter causally too: isolating them moves the prediction more than "
                          "isolating content.",
            "inconclusive": "Isolating the forerunner tokens cannot be told from isolating content here.",
            "does not replicate": "Isolating the forerunner tokens moves the prediction less than isolating content.",
        },
        "10.template_isolation": {
            "replicates": "The template tokens matter causally: isolating them moves the prediction more than "
                          "isolating content.",
            "inconclusive": "Isolating the template tokens cannot be told from isolating content here.",
            "does not replicate": "Isolating the template tokens moves the prediction less than isolating content.",
        },
        "10.span_isolation": {
            "replicates": "On the phrase labels, isolating every token of each label word moves the prediction more "
                          "than isolating its first token, beyond what as many content tokens do: the later tokens "
                          "hold part of the anchor.",
            "inconclusive": "On the phrase labels, isolating the whole label word cannot be told from isolating its "
                            "first token.",
            "does not replicate": "On the phrase labels, isolating the first token moves the prediction more than "
                                  "isolating the whole word.",
        },
        "10.span_aucroc": {
            "replicates": "q's attention to the whole label word predicts the output better than its attention to "
                          "the first token.",
            "inconclusive": "q's attention to the whole label word and to its first token predict the output alike, "
                            "within the interval.",
            "does not replicate": "q's attention to the first token predicts the output better than to the whole "
                                  "word.",
        },
        "10.span_hidden_anchor": {
            "replicates": "Hidden_anchor needs the label words' later tokens: keeping only the first ones costs "
                          "accuracy.",
            "inconclusive": "Keeping the label words' first tokens only cannot be told from keeping all of them.",
            "does not replicate": "Hidden_anchor is more accurate with the first tokens only.",
        },
    },
    "11_after_the_anchors": {
        "11.semantic_anchors": {
            "replicates": "The model reads its context, yet with the labels flipped it does not follow the flipped "
                          "mapping on inputs whose meaning it knows: an override rate near 0, as arXiv 2511.21038 "
                          "found on larger models.",
            "inconclusive": "These inputs cannot say whether the flipped mapping overrides what the model knows: "
                            "either it does not read its context enough for an override rate of 0 to mean anything, "
                            "or the rate's interval holds the bound (the claim's note says which).",
            "does not replicate": "The model reads its context and, with the labels flipped, follows the flipped "
                                  "mapping on inputs whose meaning it knows: a semantic override the paper did not "
                                  "see.",
            "not comparable": "No input was right both without demonstrations and with the natural labels.",
        },
        "11.flipped_label_isolation": {
            "replicates": "Even when their meaning contradicts the mapping, isolating the label words in the first "
                          "layers moves the prediction more than isolating as many random words.",
            "inconclusive": "On flipped prompts, isolating the label words cannot be told from isolating random "
                            "words.",
            "does not replicate": "On flipped prompts, isolating the label words moves the prediction less than "
                                  "isolating random words.",
        },
        "11.flipped_label_read_causal": {
            "replicates": "On flipped labels, q still reads the mapping from the label words in the deep layers: the "
                          "answer moves with their keys and values more than with as many content positions'.",
            "inconclusive": "On flipped labels, patching the label positions cannot be told from patching as many "
                            "content positions.",
            "does not replicate": "On flipped labels, the answer moves less with the label positions than with as "
                                  "many content positions.",
        },
        "11.context_knockout": {
            "replicates": "Blocking the label words' view of the earlier demonstrations moves the prediction more "
                          "than blocking a text token's: the label words draw on the earlier demonstrations.",
            "inconclusive": "Blocking the label words' view of the earlier demonstrations cannot be told from "
                            "blocking a text token's.",
            "does not replicate": "Blocking a text token's view of the earlier demonstrations moves the prediction "
                                  "more than blocking the label words'.",
        },
        "11.context_lower_first": {
            "replicates": "Blocking the label words' links to the earlier demonstrations costs more in the lower "
                          "half of the layers than in the upper: contextualisation, if any, is early.",
            "inconclusive": "Where blocking the label words' links to the earlier demonstrations costs more cannot "
                            "be told on these inputs.",
            "does not replicate": "Blocking the label words' links to the earlier demonstrations costs more in the "
                                  "upper half of the layers than in the lower.",
        },
        "11.aggregation_upper_later": {
            "replicates": "Blocking q's links to the label words costs more in the upper half of the layers than in "
                          "the lower: the aggregation is late, as the account orders it.",
            "inconclusive": "Where blocking q's links to the label words costs more cannot be told on these inputs.",
            "does not replicate": "Blocking q's links to the label words costs more in the lower half of the layers "
                                  "than in the upper.",
        },
        "11.two_stages": {
            "replicates": "The same probe finds the class in the query's whole state layers before it finds it in "
                          "the state's label-word logits: separability first, then alignment.",
            "inconclusive": "Where the two probes' accuracy rises cannot be told apart on these inputs.",
            "does not replicate": "The probe finds the class in the label-word logits no later than in the whole "
                                  "state.",
            "not comparable": "No task had enough inputs of every class for a probe.",
        },
        "11.dissociation_alignment": {
            "replicates": "Induction heads lower alignment more than previous-token heads do and leave separability "
                          "nearly intact: the alignment half of the double dissociation.",
            "inconclusive": "These inputs cannot say whether induction heads carry alignment apart from "
                            "separability.",
            "does not replicate": "Induction heads do not lower alignment more than previous-token heads, or they "
                                  "lower separability too: no dissociation on this half.",
            "not comparable": "No task had enough inputs of every class for a probe.",
        },
    },
}


def readings_for(section: str) -> dict[str, dict[str, str]]:
    """The sentences of notebook ``section`` (``"01_saliency_flow"``; a section that names a variant or a task after
    the notebook's name, ``"08_your_own_task_sst2"``, reads its notebook's), or none."""
    for name in sorted(READINGS, key=len, reverse=True):
        if section == name or section.startswith(name + "_"):
            return READINGS[name]
    return {}
