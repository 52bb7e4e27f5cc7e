"""The protocol of the knockouts of arXiv 2504.00132 (notebook 11). The method is
:mod:`helpers.experiments.isolation_context`.

- **The knockout** (``11.context_knockout``): each label word's links to the earlier demonstrations blocked in the
  first ``k`` layers, against the same links blocked for a text token of each demonstration, scored by loyalty.
- **Both steps, layer by layer** (:func:`layered_knockout_runs`): the lower and the upper half of the layers
  (:func:`~helpers.experiments.isolation_context.layer_windows`), and in each: the label words' links to the
  earlier demonstrations' label words (``labels``) and to their texts (``text``), each against the same links
  blocked for a text token of each demonstration; and q's links to the label words (``aggregation``) against q's
  links to as many content tokens. Scored on the gold class's probability among the label words (loyalty beside
  it). An *effect* is the control's gold probability minus the knockout's, per input.

Criteria, fixed before any run (each: the 95% interval above 0 "replicates", below 0 "does not replicate",
containing 0 "inconclusive"):

- ``11.context_labels_lower``, ``11.context_text_lower``: the effect of blocking the label words' links to the
  earlier label words (texts) in the lower window;
- ``11.context_lower_first``: the contextualisation's effect (labels plus text) in the lower window minus in the
  upper one;
- ``11.aggregation_upper``: the effect of blocking q's links to the label words in the upper window;
- ``11.aggregation_upper_later``: the aggregation's effect in the upper window minus in the lower one.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from helpers.core.edges import run_edge_knockout
from helpers.core.grid import run_grid
from helpers.core.loyalty import label_loyalty_rows
from helpers.core.positions import earlier_demo_pairs
from helpers.core.prefix_runs import shared_cache, vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, run_args
from helpers.experiments.isolation_context import (
    WINDOWS,
    content_rows,
    layer_windows,
    q_content_cols,
    q_label_pairs,
    run_context_knockout,
)
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profiles import AfterSizes
from helpers.study.stats import Interval, bootstrap_means, paired_differences

__all__ = ["context_knockout_runs", "context_knockout_intervals", "context_knockout_claim", "knockout_cell",
           "STEPS", "layered_cell", "layered_knockout_runs", "layered_intervals", "layered_claims"]

ROWS = ("label", "control")  # whose links to the earlier demonstrations are blocked: the label words, text tokens


def knockout_cell(model, prompts, label_ids, base_pred, layers, batch_size: int, seed: int) -> dict:
    """``{"label": loyalty, "control": loyalty}`` of one set of prompts: per input, 1 where the prediction with the
    label words' (a text token's, drawn with ``seed``) links to the earlier demonstrations blocked in ``layers`` is
    ``base_pred``."""
    out = {}
    for rows, control in zip(ROWS, (None, seed)):
        pred = run_context_knockout(model, prompts, label_ids, layers, batch_size=batch_size, top_k=0,
                                    control_seed=control)
        out[rows] = torch.as_tensor(label_loyalty_rows(pred.label_logits.argmax(-1), base_pred))
    return out


@pins_weights
def context_knockout_runs(model, tasks: Sequence[str], sizes: AfterSizes, progress: bool = True) -> dict:
    """``{(task, seed): {"label": loyalty, "control": loyalty}}``: per input, 1 where the prediction with the links
    blocked (every earlier-demonstration position, the first ``sizes.k`` layers) is the unmodified one, on
    ``sizes.n`` inputs of one demonstration set per (task, seed), stored on disk. The control's text tokens are
    drawn with the run's seed."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    layers = list(range(sizes.k))

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, sizes.n)
        base = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size, top_k=0)
        return knockout_cell(model, s.prompts, s.label_ids, base.label_logits.argmax(-1), layers, sizes.batch_size,
                             seed)

    return run_grid("context_knockout", model, tasks, seeds, run, {"n": sizes.n, "k": sizes.k},
                    progress=progress and "context knockout")


def context_knockout_intervals(runs: dict) -> dict[str, Interval]:
    """95% intervals (seeds, then inputs; mean over tasks) of each loyalty (:data:`ROWS`) and of ``drop``: the
    control's loyalty minus the label words', paired per input."""
    loyal = {rows: {c: r[rows].numpy() for c, r in runs.items()} for rows in ROWS}
    return {**{rows: bootstrap_means(v) for rows, v in loyal.items()},
            "drop": bootstrap_means(paired_differences(loyal["control"], loyal["label"]))}


def context_knockout_claim(ivs: dict[str, Interval], k: int, context: str = "",
                           isolation: Interval | None = None) -> Claim:
    """``11.context_knockout``: the loyalty with a text token's links to the earlier demonstrations blocked minus
    with the label word's, first ``k`` layers: above 0 "replicates" (the label words draw on the earlier
    demonstrations more than other tokens do), below 0 "does not replicate", containing 0 "inconclusive".
    ``isolation``: §2.2's loyalty with the label words fully isolated on the same task and seeds, for scale."""
    iv = ivs["drop"]
    note = (f"label loyalty: label words' links blocked {ivs['label']:.3f}, text tokens' {ivs['control']:.3f}"
            + ("" if isolation is None else f"; §2.2's full isolation of the label words {isolation:.3f}"))
    return claim("11.context_knockout", iv, above_zero(iv), "95% interval of the loyalty with a text token's links to "
                 "the earlier demonstrations blocked minus with the label word's, per demonstration, first "
                 f"{k} layer(s), above 0", context=context, note=note)


STEPS = ("labels", "text", "aggregation")  # whose edges the layered knockout blocks (module docstring)


def _edges(step: str, control: bool, seed: int):
    """``pairs(prompt, seq)`` of ``step``'s edges, or of its control (drawn with ``seed``)."""
    if step == "aggregation":
        return lambda p, seq=None: q_label_pairs(p, seq, q_content_cols(p, seed) if control else None)
    links = "label" if step == "labels" else "text"
    return lambda p, seq=None: earlier_demo_pairs(p, seq, links, content_rows(p, seed) if control else None)


def layered_cell(model, prompts, label_ids, base_pred, batch_size: int, seed: int, shared: bool = True) -> dict:
    """``{(step, rows, window): {"gold_prob", "loyal"}}`` for every step of :data:`STEPS`, rows ``label`` (the
    step's edges) or ``control`` (drawn with ``seed``) and window of
    :func:`~helpers.experiments.isolation_context.layer_windows`: per input, the gold class's probability among the
    label words with those edges blocked, and 1 where the prediction is ``base_pred``."""
    gold = torch.tensor([p.gold for p in prompts])
    if (gold < 0).any():
        raise ValueError("the layered knockout scores the gold class: every prompt needs a gold label")
    out = {}
    plain = shared_cache(model, prompts, shared)  # the aggregation's edges lie in q's row: its 4 runs share it
    for window, layers in layer_windows(model.cfg.n_layers).items():
        for step in STEPS:
            for rows in ("label", "control"):
                pred = run_edge_knockout(model, prompts, label_ids, layers, _edges(step, rows == "control", seed),
                                         batch_size=batch_size, shared=shared, plain=plain)
                out[(step, rows, window)] = {
                    "gold_prob": pred.label_probs.float()[torch.arange(len(gold)), gold],
                    "loyal": torch.as_tensor(label_loyalty_rows(pred.label_logits.argmax(-1), base_pred))}
    return out


@pins_weights
def layered_knockout_runs(model, tasks: Sequence[str], sizes: AfterSizes, progress: bool = True) -> dict:
    """``{(task, seed): layered_cell}`` on ``sizes.n`` inputs of one demonstration set per (task, seed), the
    controls drawn with the run's seed, stored on disk."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            s = make_icl_set(model, task, seed, sizes.n)
        base = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=sizes.batch_size, top_k=0)
        return layered_cell(model, s.prompts, s.label_ids, base.label_logits.argmax(-1), sizes.batch_size, seed)

    return run_grid("layered_knockout", model, tasks, seeds, run,
                    {"n": sizes.n, "windows": "halves", "steps": list(STEPS)},
                    progress=progress and "layered knockout")


def layered_intervals(runs: dict) -> dict:
    """95% intervals (seeds, then inputs; mean over tasks): ``(step, window)`` the effect (control's gold
    probability minus the knockout's, paired per input), ``("context", window)`` the labels' plus the text's
    effect, ``"context_lower_first"`` and ``"aggregation_upper_later"`` (module docstring), and ``(step, rows,
    window, "loyal")`` the loyalties."""
    def col(step, rows, window, what="gold_prob"):
        return {c: r[(step, rows, window)][what].numpy().astype(float) for c, r in runs.items()}

    effect = {(step, w): paired_differences(col(step, "control", w), col(step, "label", w))
              for step in STEPS for w in WINDOWS}
    ctx = {w: {c: effect[("labels", w)][c] + effect[("text", w)][c] for c in runs} for w in WINDOWS}
    out = {k: bootstrap_means(v) for k, v in effect.items()}
    out.update({("context", w): bootstrap_means(ctx[w]) for w in WINDOWS})
    out["context_lower_first"] = bootstrap_means(paired_differences(ctx["lower"], ctx["upper"]))
    out["aggregation_upper_later"] = bootstrap_means(paired_differences(effect[("aggregation", "upper")],
                                                                        effect[("aggregation", "lower")]))
    for step in STEPS:
        for rows in ("label", "control"):
            for w in WINDOWS:
                out[(step, rows, w, "loyal")] = bootstrap_means(col(step, rows, w, "loyal"))
    return out


def layered_claims(ivs: dict, n_layers: int, context: str = "") -> list[Claim]:
    """The five claims of the layered knockout (module docstring)."""
    win = layer_windows(n_layers)
    span = {w: f"layers {ls[0]}-{ls[-1]}" if len(ls) > 1 else f"layer {ls[0]}" for w, ls in win.items()}

    def loyal(step, w):
        return (f"loyalty {ivs[(step, 'label', w, 'loyal')]:.3f} (control {ivs[(step, 'control', w, 'loyal')]:.3f})")

    what = {"labels": "the label words' links to the earlier demonstrations' label words",
            "text": "the label words' links to the earlier demonstrations' texts",
            "aggregation": "q's links to the label words"}
    control = {"labels": "the same links of a text token of each demonstration",
               "text": "the same links of a text token of each demonstration",
               "aggregation": "q's links to as many content tokens"}
    out = []
    for key, step, w in (("11.context_labels_lower", "labels", "lower"), ("11.context_text_lower", "text", "lower"),
                         ("11.aggregation_upper", "aggregation", "upper")):
        iv = ivs[(step, w)]
        other = "upper" if w == "lower" else "lower"
        out.append(claim(key, iv, above_zero(iv), f"95% interval of the gold class's probability with {control[step]} "
                         f"blocked minus with {what[step]} blocked, {w} window ({span[w]}), above 0",
                         context=context, note=f"{w}: {loyal(step, w)}; the same in the {other} window "
                                               f"({span[other]}): {ivs[(step, other)]:+.3f}, {loyal(step, other)}"))
    iv = ivs["context_lower_first"]
    out.append(claim("11.context_lower_first", iv, above_zero(iv), "95% interval of the contextualisation's effect "
                     "(label words' links to the earlier label words plus to their texts, each against its control) "
                     f"in the lower window ({span['lower']}) minus in the upper one ({span['upper']}), above 0",
                     context=context, note=f"effect: lower {ivs[('context', 'lower')]:+.3f}, upper "
                                           f"{ivs[('context', 'upper')]:+.3f}"))
    iv = ivs["aggregation_upper_later"]
    out.append(claim("11.aggregation_upper_later", iv, above_zero(iv), "95% interval of the aggregation's effect "
                     f"(q's links to the label words against as many content tokens) in the upper window "
                     f"({span['upper']}) minus in the lower one ({span['lower']}), above 0", context=context,
                     note=f"effect: upper {ivs[('aggregation', 'upper')]:+.3f}, lower "
                          f"{ivs[('aggregation', 'lower')]:+.3f}"))
    return out
