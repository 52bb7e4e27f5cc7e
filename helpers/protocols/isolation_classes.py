"""The protocol of §2.2's isolation applied to every class of position (notebook 10): its run sizes, its runs over tasks
x seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.isolation_classes`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers.core.grid import run_grid
from helpers.core.loyalty import label_loyalty_rows
from helpers.core.positions import position_classes
from helpers.core.predict import Predictions, predict
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import Prompt, make_icl_set
from helpers.core.sizing import CONTROL_BATCH
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.isolation_classes import (
    ISOLATED_CLASSES,
    WHERES,
    class_conditions,
    control_possible,
    run_class_isolation,
)
from helpers.study.claims import claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import SPAN_TASK, LabelSpanSizes, RunSizes
from helpers.study.stats import Interval, bootstrap_means, paired_differences

__all__ = ["ClassIsolationSizes", "class_isolation_sizes", "class_isolation_runs", "class_loyalty_intervals",
           "class_isolation_claims", "span_isolation_runs", "span_isolation_claim", "control_isolation_runs",
           "control_isolation_claim"]


@dataclass(frozen=True)
class ClassIsolationSizes(RunSizes):
    """Run sizes of the class isolation of notebook 10 (:func:`class_isolation_sizes`)."""

    seeds: tuple[int, ...]
    n: int  # inputs per (task, seed): the classes (a shared prefix each)
    random_n: int  # the first this many inputs also run each class's random control (full prompts)
    k: int  # layers isolated (first k, last k)
    batch_size: int


def class_isolation_sizes(profile) -> ClassIsolationSizes:
    """``paper``: every seed, ``n_test`` inputs, the random controls on ``n_random_control``; ``default``: the first
    two seeds, 32 inputs, the controls on the first 16; ``smoke``: one seed, 4 inputs, 2 controls. k = 5, as in
    notebook 02 (smoke: 1)."""
    return ClassIsolationSizes(**run_sizes("class_isolation", profile))


def _isolation_cell(model, prompts: Sequence[Prompt], label_ids: Sequence[int], base: Predictions,
                    conditions: Sequence[str], sizes: ClassIsolationSizes, seed: int) -> dict:
    """One cell of :func:`class_isolation_runs`: ``{"base": base, (condition, where): Predictions}``."""
    res = {"base": base}
    # every label word one token: label_first isolates the same rows as label, and its control draws the same
    # content tokens (same count, same seeds), so its runs are label's
    one_token = all(position_classes(p)["label"] == position_classes(p)["label_first"] for p in prompts)
    for c in conditions:
        run_on = prompts[: sizes.random_n] if c.startswith("random:") else prompts
        if c.startswith("random:") and not control_possible(run_on, c.removeprefix("random:")):
            continue  # fewer content tokens than the class holds: no control of as many (claims: not comparable)
        same = c.replace("label_first", "label")
        if one_token and same != c and (same, WHERES[0]) in res:
            res.update({(c, w): res[(same, w)] for w in WHERES})
            continue
        for w in WHERES:
            res[(c, w)] = run_class_isolation(model, run_on, label_ids, c, w, sizes.k, seed=seed,
                                              batch_size=sizes.batch_size)
    return res


@pins_weights
def class_isolation_runs(model, tasks: Sequence[str], sizes: ClassIsolationSizes, classes=ISOLATED_CLASSES,
                         progress: bool = True) -> dict:
    """``{(task, seed): {"base": Predictions, (condition, where): Predictions}}`` for every condition of
    :func:`class_conditions` isolated in the first and the last ``sizes.k`` layers, on ``sizes.n`` inputs of one
    demonstration set per (task, seed) (the random controls on the first ``sizes.random_n``), stored on disk."""
    if not isinstance(sizes, ClassIsolationSizes):
        raise TypeError(f"sizes must be the ClassIsolationSizes of class_isolation_sizes(profile), got "
                        f"{type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    conditions = class_conditions(classes)
    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token labels: the classes hold every token
            s = make_icl_set(model, task, seed, sizes.n)
        base = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size)
        return _isolation_cell(model, s.prompts, s.label_ids, base, conditions, sizes, seed)

    return run_grid("class_isolation", model, tasks, seeds, run,
                    {"n": sizes.n, "random_n": sizes.random_n, "k": sizes.k, "conditions": conditions},
                    progress=progress and "class isolation")


def span_isolation_runs(model, sizes: LabelSpanSizes, progress: bool = True) -> dict:
    """:func:`class_isolation_runs` of the label words, all of their tokens (``label``) and their first tokens
    (``label_first``), each with its random control, on ``sizes.task`` (a task whose label words span several
    tokens) at ``sizes``."""
    if not isinstance(sizes, LabelSpanSizes):
        raise TypeError(f"sizes must be the LabelSpanSizes of label_span_sizes(profile), got {type(sizes).__name__}")
    iso = ClassIsolationSizes(seeds=sizes.seeds, n=sizes.n, random_n=sizes.random_n, k=sizes.k,
                              batch_size=sizes.batch_size)
    return class_isolation_runs(model, [sizes.task], iso, classes=("label", "label_first"), progress=progress)


def control_isolation_runs(model, sets: dict, k: int = 1, batch_size: int = CONTROL_BATCH) -> dict:
    """The label words against as many content tokens (the items) on the positive control
    (:mod:`helpers.core.controls.model`): ``{("control", seed): {"base": Predictions, (condition, where): Predictions}}``
    for ``label`` and ``random:label`` isolated in the first and the last ``k`` layers of every sequence of
    ``sets`` (``{seed: ControlPrompts}``). Every sequence has its own context, so each runs whole; the control's
    prompts have no template tokens, so the forerunner and template classes do not exist there."""
    out = {}
    for seed, cp in sets.items():
        n = len(cp.prompts)
        sizes = ClassIsolationSizes(seeds=(seed,), n=n, random_n=n, k=k, batch_size=batch_size)
        base = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0)
        out[("control", seed)] = _isolation_cell(model, cp.prompts, cp.label_ids, base, class_conditions(("label",)),
                                                 sizes, seed)
    return out


def _loyal(res: dict, key) -> np.ndarray:
    pred = res[key]
    n = pred.label_logits.shape[0]
    base = res["base"]
    return label_loyalty_rows(pred.label_logits.argmax(-1), base.label_logits[:n].argmax(-1))


def class_loyalty_intervals(runs: dict) -> dict:
    """95% intervals of label loyalty (the isolated run's label against the unmodified run's, per input) for every
    ``(condition, where)``, and of ``("drop", class, where)``: the random control's loyalty minus the class's, paired
    on the inputs both ran (paper A's contrast for the label words), and of ``("vs label", class, where)``: the
    label words' loyalty minus the class's (above 0: isolating the label words moves more), and of ``("span drop",
    where)``: the label words' drop (all tokens) minus ``label_first``'s drop, paired per input (above 0: isolating
    the whole words moves the prediction more, beyond what as many content tokens do)."""
    keys = [k for k in next(iter(runs.values())) if k != "base" and all(k in r for r in runs.values())]
    loyal = {k: {cell: _loyal(r, k) for cell, r in runs.items()} for k in keys}
    out = {k: bootstrap_means(v) for k, v in loyal.items()}
    drops = {}
    for c, w in keys:
        if c.startswith("random:") or (f"random:{c}", w) not in loyal:
            continue
        rnd = loyal[(f"random:{c}", w)]
        own = {cell: v[: len(rnd[cell])] for cell, v in loyal[(c, w)].items()}
        out[("drop", c, w)] = bootstrap_means(paired_differences(rnd, own))
        drops[(c, w)] = paired_differences(rnd, own)
        if c != "label" and ("label", w) in loyal:
            out[("vs label", c, w)] = bootstrap_means(paired_differences(loyal[("label", w)], loyal[(c, w)]))
    for w in WHERES:  # a label word's tokens against its first token, each against its own random control
        if ("label", w) in drops and ("label_first", w) in drops:
            out[("span drop", w)] = bootstrap_means(paired_differences(drops[("label", w)], drops[("label_first", w)]))
    return out


def class_isolation_claims(intervals: dict, k: int, context: str = "") -> list:
    """Per class (the label words included, as paper A's baseline): isolating it in the first ``k`` layers moves the
    prediction more than isolating as many content tokens, i.e. the 95% interval of the loyalty drop (random minus
    class) lies above 0 ("replicates"), below 0 ("does not replicate"), or contains 0 ("inconclusive"); "not
    comparable" when the demonstrations hold fewer content tokens than the class (:func:`control_possible`)."""
    out = []
    for cls in ("label", "forerunner", "template"):
        if ("drop", cls, "first") not in intervals:
            out.append(claim(f"10.{cls}_isolation", None, "not comparable", "a control of as many content tokens",
                             context=context, missing=f"the demonstrations hold fewer content tokens than {cls} "
                             "tokens: no control of as many content tokens exists"))
            continue
        iv: Interval = intervals[("drop", cls, "first")]
        verdict = "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"
        note = (f"label loyalty: {cls} isolated {intervals[(cls, 'first')]:.3f}, as many content tokens "
                f"{intervals[(f'random:{cls}', 'first')]:.3f}; last {k} layers: drop {intervals[('drop', cls, 'last')]:.3f}")
        out.append(claim(f"10.{cls}_isolation", iv, verdict, f"95% interval of the loyalty with as many content "
                         f"tokens isolated minus with the {cls} tokens isolated, first {k} layers, above 0",
                         context=context, note=note))
    return out


def span_isolation_claim(intervals: dict, k: int, context: str = ""):
    """``10.span_isolation``: on a task whose label words span several tokens, the loyalty drop (as many content
    tokens isolated minus the anchor isolated, first ``k`` layers) with every token of each label word isolated
    minus with its first token isolated: above 0 "replicates" (the later tokens hold part of the anchor), below 0
    "does not replicate", containing 0 "inconclusive"."""
    criterion = (f"95% interval of the loyalty drop with all of each label word's tokens isolated minus with its "
                 f"first token isolated (each against as many content tokens), first {k} layers, above 0")
    if ("span drop", "first") not in intervals:
        return claim("10.span_isolation", None, "not comparable", criterion, context=context, tasks=(SPAN_TASK,),
                     missing="the demonstrations hold fewer content tokens than label tokens: no random control")
    iv: Interval = intervals[("span drop", "first")]
    verdict = "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"
    note = (f"loyalty drop: all tokens {intervals[('drop', 'label', 'first')]:.3f}, first token "
            f"{intervals[('drop', 'label_first', 'first')]:.3f}; last {k} layers: {intervals[('span drop', 'last')]:.3f}")
    return claim("10.span_isolation", iv, verdict, criterion, context=context, tasks=(SPAN_TASK,), note=note)


def control_isolation_claim(intervals: dict, k: int, context: str = ""):
    """``10.control_label_isolation``: the power of the isolation check, on the positive control, whose label
    positions certainly carry the context (a previous-token head copies each item into its label; notebook 09):
    the loyalty with as many content tokens isolated minus with the label words isolated, first ``k`` layers, above
    0 "replicates" (the check sees the known anchor), below 0 "does not replicate", containing 0 "inconclusive".
    ``intervals``: :func:`class_loyalty_intervals` of :func:`control_isolation_runs`."""
    iv: Interval = intervals[("drop", "label", "first")]
    verdict = "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"
    note = (f"label loyalty: label words isolated {intervals[('label', 'first')]:.3f}, as many content tokens "
            f"{intervals[('random:label', 'first')]:.3f}")
    return claim("10.control_label_isolation", iv, verdict, f"95% interval of the loyalty with as many content tokens "
                 f"isolated minus with the label words isolated, first {k} layer(s) of the control, above 0",
                 context=context, note=note)
