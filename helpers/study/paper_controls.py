"""The claims of notebook 09's controls: models trained here, whose premises are stated on the side of the works that
describe their training (the collection's own checks, not a paper's numbers; :mod:`helpers.study.paper` merges them
into ``CLAIMS``)."""

from __future__ import annotations

__all__ = ["CLAIMS_09"]

_CONTROL = "Chan et al., arXiv 2205.05055; Reddy, arXiv 2312.03002"
CLAIMS_09: dict[str, dict] = {
    "09.icl_accuracy": {
        "statement": "A small attention-only model trained on bursty sequences learns in context: it reads a "
                     "class -> label mapping drawn afresh for every sequence",
        "source": f"{_CONTROL} (the task's design)",
        "paper": "near-perfect in-context accuracy after an abrupt transition (Reddy)"},
    "09.heldout_accuracy": {
        "statement": "The control classifies in context items of classes it never saw in training",
        "source": f"{_CONTROL} (in-context generalisation to novel classes)",
        "paper": "in-context accuracy on novel classes close to that on training classes (Reddy)"},
    "09.label_swap": {
        "statement": "The control's answer follows the mapping shown in its context (label-swap control)",
        "source": "this project's mapping control of notebook 07, on the control",
        "paper": "follows the mapping by construction of the task (the assignment is random per sequence)"},
    "09.wide_label_swap": {
        "statement": "The wide positive control (the same task on 2 layers x 8 heads) follows the mapping shown in "
                     "its context (label-swap control, swap-averaged accuracy)",
        "source": f"{_CONTROL} (the task's design), on this project's wide control",
        "paper": "follows the mapping by construction of the task (the assignment is random per sequence)"},
    "09.negative_accuracy": {
        "statement": "The negative control (one fixed class -> label mapping, training contexts without the query's "
                     "class) answers correctly with its training mapping",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning without bursty contexts)",
        "paper": "in-weights learning: high accuracy on the trained classes without reading the context"},
    "09.negative_ignores_swap": {
        "statement": "The negative control's answer does not follow a swapped mapping in its context (share of "
                     "answers that move with the labels)",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning), with notebook 07's label-swap control",
        "paper": "an in-weights learner answers from its weights, whatever the context shows"},
    "09.negative_heldout": {
        "statement": "On classes never seen in training the negative control is near chance (its weights hold no "
                     "label for them, and it does not read the context's)",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning does not transfer to novel classes)",
        "paper": "in-weights learning: near chance on novel classes"},
    "09.population_positive_accuracy": {
        "statement": "Every positive control of the populations (5 checkpoints on 2 layers, 8 on 4) answers in "
                     "context on the sequences the checks' replicates run",
        "source": f"{_CONTROL} (the task's design), trained from five seeds on 2 layers and eight on 4",
        "paper": "near-perfect in-context accuracy after an abrupt transition (Reddy)"},
    "09.population_negative_accuracy": {
        "statement": "Every negative control of the populations answers correctly with its training mapping on the "
                     "sequences the checks' replicates run",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning without bursty contexts)",
        "paper": "in-weights learning: high accuracy on the trained classes without reading the context"},
    "09.population_negative_keeps_answer": {
        "statement": "The negative controls keep their answer when every label of the context moves (share of "
                     "answers unchanged under a swapped mapping, on the replicates' sequences)",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning), with notebook 07's label-swap control",
        "paper": "an in-weights learner answers from its weights, whatever the context shows"},
    "09.population_negative_heldout": {
        "statement": "On classes never seen in training the negative controls are near chance (classes as the unit)",
        "source": "Chan et al., arXiv 2205.05055 (in-weights learning does not transfer to novel classes)",
        "paper": "in-weights learning: near chance on novel classes"},
}
