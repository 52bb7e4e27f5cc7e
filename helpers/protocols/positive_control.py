"""The protocol of the analyses of the positive control, a model that certainly learns in context (notebook 09): its run
sizes, its runs over tasks x seeds (each stored by content), its intervals, the criteria written before any run, and
its claims. The method it runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.positive_control`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.core.controls.model import ControlPrompts
from helpers.core.predict import predict
from helpers.core.sizing import CONTROL_BATCH
from helpers.experiments.positive_control import label_swap
from helpers.study.claims import Claim, claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval

__all__ = ["ControlSizes", "control_sizes", "accuracy_cells", "swap_cells", "control_claims", "controls_claims", "premise_intervals",
           "premise_interval", "population_claims"]


@dataclass(frozen=True)
class ControlSizes(RunSizes):
    """Run sizes of notebook 09 (:func:`control_sizes`)."""

    seeds: tuple[int, ...]
    n: int  # evaluation sequences per seed
    n_attr: int  # sequences for head attribution (one draw, seed + 1000)
    n_saliency: int  # sequences per seed for saliency (a backward pass each)
    batch_size: int  # sequences per forward pass
    flow_batch_size: int  # sequences per saliency batch (a backward pass)


def control_sizes(profile) -> ControlSizes:
    """Run size of notebook 09: the profile's seeds, and per seed ``4 * n_test`` evaluation sequences (the control
    costs about a thousandth of the offline models per input), ``2 * n_test`` for head attribution (seed + 1000)
    and ``n_saliency * 4`` for saliency (a backward pass each)."""
    return ControlSizes(**run_sizes("control", profile))


def accuracy_cells(model, cps: dict[int, ControlPrompts], batch_size: int = CONTROL_BATCH) -> dict[tuple[str, int], np.ndarray]:
    """Per input 0/1 correctness, ``{("control", seed): [...]}`` (the input of ``bootstrap_means``)."""
    out = {}
    for seed, cp in cps.items():
        pred = predict(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
        out[("control", seed)] = (pred == cp.gold).numpy().astype(float)
    return out


def swap_cells(runs: dict[int, dict], key: str) -> dict[tuple[str, int], np.ndarray]:
    return {("control", seed): r[key] for seed, r in runs.items()}


def _above(iv: Interval, value: float) -> str:
    if iv.low >= value:
        return "replicates"
    return "does not replicate" if iv.high < value else "inconclusive"


def control_claims(acc: Interval, heldout: Interval, swap: Interval, follows: Interval, context: str = "") -> list[Claim]:
    """The control's own premise, graded before the run: in-context accuracy on fresh sequences at or above 0.90
    (training classes; and classes never seen in training), and the label-swap control's swap-averaged accuracy at
    or above 0.90 (a model that ignores the context's labels scores at most 0.5)."""
    return [
        claim("09.icl_accuracy", acc, _above(acc, 0.90), "whole 95% interval at or above 0.90 (chance 0.25)",
              context=context),
        claim("09.heldout_accuracy", heldout, _above(heldout, 0.90),
              "whole 95% interval at or above 0.90 on classes never seen in training (chance 0.25)", context=context),
        claim("09.label_swap", swap, _above(swap, 0.90),
              "swap-averaged accuracy's whole 95% interval at or above 0.90 (ignoring the labels scores at most 0.5)",
              context=context, note=f"Answers that move with the labels: {follows:.3f}."),
    ]


def premise_intervals(model, seeds, n: int) -> dict[str, dict[str, Interval]]:
    """A control's premises on ``n`` of its own sequences per seed, for training and held-out classes
    (``{"train" | "heldout": {key: Interval}}``): :func:`label_swap`'s ``correct``, ``swap_averaged``, ``follows``
    and ``same``, each bootstrapped over seeds and sequences."""
    from helpers.core.controls.model import control_prompts, control_task
    from helpers.study.stats import bootstrap_means

    out = {}
    for classes in ("train", "heldout"):
        runs = {s: label_swap(model, control_prompts(control_task(model), n, s, classes=classes)) for s in seeds}
        out[classes] = {k: bootstrap_means(swap_cells(runs, k)) for k in ("correct", "swap_averaged", "follows",
                                                                          "same")}
    return out


def _at_most(iv: Interval, value: float) -> str:
    if iv.high <= value:
        return "replicates"
    return "does not replicate" if iv.low > value else "inconclusive"


def controls_claims(wide_swap: Interval, neg_acc: Interval, neg_follows: Interval, neg_heldout: Interval,
                    context: str = "") -> list[Claim]:
    """The premises of the two controls every check's power rests on, graded before the run: the wide positive
    control's swap-averaged accuracy at or above 0.90 (it reads the mapping); the negative control's accuracy with
    its training mapping at or above 0.90, its share of answers that move with a swapped mapping at or below 0.10
    (it does not read the mapping), and its accuracy on classes never seen in training at or below 0.40 (chance
    0.25: its weights know no label for them)."""
    return _graded([
        ("09.wide_label_swap", wide_swap, _above, 0.90, "swap-averaged accuracy's whole 95% interval at or above 0.90"),
        ("09.negative_accuracy", neg_acc, _above, 0.90, "whole 95% interval at or above 0.90 (chance 0.25)"),
        ("09.negative_ignores_swap", neg_follows, _at_most, 0.10,
         "whole 95% interval of the share of answers that move with the labels at or below 0.10 (a model that reads "
         "the mapping: near 1)"),
        ("09.negative_heldout", neg_heldout, _at_most, 0.40,
         "whole 95% interval at or below 0.40 (chance 0.25; reading the context would give near 1)"),
    ], context)


def _graded(rows, context: str) -> list[Claim]:
    """A claim per ``(key, interval, rule, threshold, criterion)``, its verdict ``rule(interval, threshold)``."""
    return [claim(key, iv, rule(iv, value), criterion, context=context) for key, iv, rule, value, criterion in rows]


def premise_interval(premises: dict[str, list[dict]], populations, field: str):
    """The 95% interval of premise ``field`` over the checkpoints of ``populations`` (each checkpoint one unit,
    whatever its population: populations may hold different numbers of checkpoints) and, within one, its
    sequences (:func:`helpers.protocols.power.population_premises`)."""
    from helpers.study.stats import bootstrap_means

    if isinstance(populations, str):
        populations = (populations,)
    cells = {("checkpoints", f"{p}/{r}"): np.asarray(rep[field], float) for p in populations
             for r, rep in enumerate(premises.get(p, []))}
    if not cells:
        raise ValueError(f"no premises of populations {list(populations)} to read {field!r} from")
    return bootstrap_means(cells)


def population_claims(premises: dict[str, list[dict]], context: str = "") -> list[Claim]:
    """The premises of the control populations, on the exact sequences the checks' replicates run
    (:func:`helpers.protocols.power.population_premises`), graded before the run; each interval is a two-level
    bootstrap over checkpoints (the training runs) and, within one, sequences (held-out classes: classes).

    - ``09.population_positive_accuracy``: the positive checkpoints' accuracy, whole interval at or above 0.90;
    - ``09.population_negative_accuracy``: the negative checkpoints' accuracy with their training mapping, the same;
    - ``09.population_negative_keeps_answer``: the share of the negative checkpoints' answers that stay the same when
      every label of the context moves (an answer from the weights stays), whole interval at or above 0.90: a model
      that moved away from the swapped labels without reading them would pass "does not follow", not this;
    - ``09.population_negative_heldout``: their accuracy on classes never seen in training, with classes as the unit,
      whole interval at or below 0.40 (chance 0.25)."""
    from helpers.study.power_report import NEGATIVES, POSITIVES

    pos_acc, neg_acc = premise_interval(premises, POSITIVES, "correct"), premise_interval(premises, NEGATIVES, "correct")
    keeps, held = premise_interval(premises, NEGATIVES, "same"), premise_interval(premises, NEGATIVES, "heldout_by_class")
    return _graded([
        ("09.population_positive_accuracy", pos_acc, _above, 0.90, "whole 95% interval at or above 0.90 (chance 0.25)"),
        ("09.population_negative_accuracy", neg_acc, _above, 0.90, "whole 95% interval at or above 0.90 (chance 0.25)"),
        ("09.population_negative_keeps_answer", keeps, _above, 0.90,
         "whole 95% interval of the share of answers unchanged under a swapped mapping at or above 0.90"),
        ("09.population_negative_heldout", held, _at_most, 0.40,
         "whole 95% interval at or below 0.40, classes as the unit (chance 0.25)"),
    ], context)
