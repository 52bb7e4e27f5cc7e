"""The specific forms of notebook 11's flipped-label flow checks (and the controls' power): notebook 10's causal label
reading and gathering (:mod:`helpers.experiments.label_reading`, :mod:`helpers.experiments.label_gathering`), run on
the flipped prompts.

§2.1's flows fire on a model that reads no mapping (the power table: ``11.flipped_deep_pq_dominant`` fires on the
negative controls) or miss it where it is (``11.flipped_shallow_wp_dominant`` on the positive ones), so on flipped
labels, as on natural ones, each has a discriminating form of the same claim:

- ``11.flipped_label_read_causal`` (the specific form of S_pq): on the flipped prompts, the deep layers' keys and
  values at the label positions taken from the same flipped prompt relabelled again by
  :func:`helpers.core.relabelled.shift`, against as many content positions;
- ``11.flipped_label_gathers_causal`` (the specific form of S_wp): on the flipped prompts, each label word's links to
  its own demonstration's text blocked in the first ``k`` layers, against as many content-to-content links. Its
  score is prompt alignment (the prediction is the flipped class, ``flip[gold]``): on flipped labels the answer the
  demonstrations carry is the flipped one.

**Criteria (fixed before any run), notebook 10's:** the reading's score per input is 1 where the answer moved to
``shift[answer]`` with the label positions patched, minus the same with as many content positions patched; the
gathering's is aligned with the flipped mapping with as many content links blocked, minus with the label words'
own-text links blocked. Each claim replicates when the 95% interval of its mean (two-level bootstrap over seeds and
inputs) lies above 0, does not replicate when it lies below 0, and is inconclusive otherwise. ``k`` is notebook 11's
(5 layers; 1 on the controls).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace

from helpers.core.controls.model import ControlPrompts, relabel
from helpers.core.grid import run_grid
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.relabelled import relabelled_prompts, shift
from helpers.core.sizing import CONTROL_BATCH
from helpers.core.tasks import LabelWordWarning, get_task, run_args
from helpers.experiments.flipped_labels import flip_permutation, flipped_icl_set
from helpers.experiments.label_gathering import gathering
from helpers.experiments.label_reading import label_reading
from helpers.protocols import label_gathering as lg
from helpers.protocols import label_reading as lr
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profiles import AfterSizes
from helpers.study.stats import Interval

__all__ = ["SPECIFIC_KEYS", "flipped_specific_runs", "flipped_specific_intervals", "flipped_specific_claims",
           "control_flipped_specific"]

SPECIFIC_KEYS = ("11.flipped_label_read_causal", "11.flipped_label_gathers_causal")


def flipped_specific_runs(model, tasks: Sequence[str], sizes: AfterSizes, progress: bool = True) -> dict:
    """``{(task, seed): {"reading": label_reading(...), "gathering": gathering(...)}}`` on the flipped prompts of
    :func:`~helpers.experiments.flipped_labels.flipped_icl_set` (``sizes.n`` inputs of one demonstration set per
    (task, seed)): the reading's donor is each flipped prompt with every label moved again by :func:`shift`; the
    gathering blocks the first ``sizes.k`` layers and scores alignment with the flipped mapping; stored on disk."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    bs = sizes.batch_size

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: every token is patched or a row
            _, flipped = flipped_icl_set(model, task, seed, sizes.n)
            perm = shift(len(flipped.label_ids))
            # a donor over the context length: the prompt itself, which moves nothing (aligned, scored 0 - 0)
            donors = [d if d is not None else p for d, p in zip(relabelled_prompts(model, flipped, perm),
                                                                 flipped.prompts)]
        flip = flip_permutation(get_task(task).n_classes)
        base = vanilla_predictions(model, flipped.prompts, flipped.label_ids, batch_size=bs, top_k=0).pred
        aligned = [replace(p, gold=flip[p.gold]) for p in flipped.prompts]  # the flipped mapping's answer
        return {"reading": label_reading(model, flipped.prompts, donors, perm, flipped.label_ids, seed,
                                         batch_size=bs, pred=base),
                "gathering": gathering(model, aligned, flipped.label_ids, range(sizes.k), seed, batch_size=bs)}

    return run_grid("flipped_specific", model, tasks, seeds, run, {"n": sizes.n, "k": sizes.k},
                    progress=progress and "flipped labels: specific forms")


def flipped_specific_intervals(runs: dict) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs; mean over tasks): ``reading`` (answers moved with the label positions
    patched minus with content positions patched), the reading's two shares (``moved, label positions`` and
    ``moved, content positions``), ``gathering`` (alignment with content links blocked minus with the label words'
    own-text links blocked) and its two alignments (``aligned, label links blocked``, ``aligned, content links
    blocked``)."""
    reading = {c: r["reading"] for c, r in runs.items()}
    shares = lr.reading_shares(reading)
    gathers = lg.gathering_intervals({c: r["gathering"] for c, r in runs.items()})
    return {"reading": lr.reading_interval(reading),
            "moved, label positions": shares["label positions"],
            "moved, content positions": shares["as many content positions"],
            "gathering": gathers["drop"], "aligned, label links blocked": gathers["label"],
            "aligned, content links blocked": gathers["control"]}


def flipped_specific_claims(ivs: dict[str, Interval], k: int, context: str = "") -> list[Claim]:
    """``11.flipped_label_read_causal`` and ``11.flipped_label_gathers_causal`` from
    :func:`flipped_specific_intervals` (criteria: module docstring)."""
    reading = lr.reading_claim(ivs["reading"], SPECIFIC_KEYS[0], context, note=(
        f"answers moved with the labels: label positions patched {ivs['moved, label positions']:.3f}, as many "
        f"content positions {ivs['moved, content positions']:.3f}; flipped prompts"))
    iv = ivs["gathering"]
    gathers = claim(SPECIFIC_KEYS[1], iv, above_zero(iv),
                    "95% interval of the alignment with the flipped mapping with as many content-to-content links "
                    f"blocked minus with the label words' links to their own text blocked, first {k} layer(s), "
                    "flipped prompts, above 0", context=context,
                    note=f"aligned with the flipped mapping: label words' own-text links blocked "
                         f"{ivs['aligned, label links blocked']:.3f}, content links "
                         f"{ivs['aligned, content links blocked']:.3f}")
    return [reading, gathers]


def control_flipped_specific(model, cp: ControlPrompts, seed: int, batch_size: int = CONTROL_BATCH,
                             context: str = "") -> list[Claim]:
    """The two checks on a control's sequences ``cp`` with every label token moved by
    :func:`~helpers.experiments.flipped_labels.flip_permutation` (the right answer under the context's mapping moves
    with it, so the gathering's accuracy is alignment with the permuted mapping), first layer, every sequence run
    whole."""
    flipped, key = relabel(cp, flip_permutation(len(cp.label_ids))), ("control", seed)
    runs = {key: {"reading": lr.control_reading(model, flipped, seed, batch_size),
                  "gathering": gathering(model, flipped.prompts, flipped.label_ids, [0], seed, batch_size=batch_size,
                                         shared=False)}}
    return flipped_specific_claims(flipped_specific_intervals(runs), 1, context)
