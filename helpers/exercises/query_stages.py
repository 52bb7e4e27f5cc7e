"""The exercise of notebook 11's third section: a curve's half-rise stage, checked against
:func:`helpers.protocols.query_stages.half_rise` on curves built to tell the typical mistakes apart, and on the
separability and alignment curves of a tiny random model (:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from helpers.core.prompts import make_icl_set
from helpers.exercises.grading import CheckFailed, compare_to_reference, grader
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.query_stages import label_readout, query_states
from helpers.protocols.query_stages import half_rise

__all__ = ["check_half_rise"]


def _rise_mistakes(c: np.ndarray):
    lo, hi = c.min(), c.max()
    return [
        ("This is the stage of the highest value (argmax): the half-rise stage is the first to reach half of the way "
         "from the lowest value to the highest.", lambda: torch.tensor(float(np.argmax(c)))),
        ("Half of the highest value is not half of the way: the curve starts at its lowest value, so the threshold "
         "is lo + (hi - lo) / 2.", lambda: torch.tensor(float(np.argmax(c >= hi / 2)))),
        ("This is the last stage below the threshold, not the first that reaches it.",
         lambda: torch.tensor(float(np.argmax(c >= lo + (hi - lo) / 2)) - 1)),
    ]


@grader
def check_half_rise(fn: Callable) -> None:
    """Run ``fn(curve)`` (a 1-d numpy array, one value per stage) on built curves (one rising late, one falling,
    one with a dip, one flat: NaN) and on the read-out curve of each tiny model's SST-2 prompts, against
    :func:`helpers.protocols.query_stages.half_rise`."""
    curves = {"a late rise": np.array([0.5, 0.5, 0.52, 0.6, 0.9, 1.0]), "a fall": np.array([0.9, 0.8, 0.3, 0.2]),
              "a dip, then a rise": np.array([0.6, 0.4, 0.5, 0.9, 0.7]), "a flat curve": np.array([0.5, 0.5, 0.5])}
    for kind in TINY_KINDS:
        model = tiny_model(kind)
        icl = make_icl_set(model, "sst2", 42, 8)
        states = query_states(model, icl.prompts)
        gold = torch.tensor([p.gold for p in icl.prompts])
        curves[f"{kind} model's read-out"] = (label_readout(model, states, icl.label_ids) == gold[:, None]).float().mean(0).numpy()
    for name, c in curves.items():
        got = fn(c.copy())
        if got is None:
            raise CheckFailed(f"{name}: your function returned None; return a float (NaN for a flat curve)")
        want = half_rise(c)
        if np.isnan(want):
            if not np.isnan(float(got)):
                raise CheckFailed(f"{name} {c.tolist()}: got {got}; a flat curve never rises: return float('nan')")
            continue
        compare_to_reference(torch.tensor(float(got)), torch.tensor(want), f"{name} {np.round(c, 3).tolist()}",
                             "the first stage whose value reaches lo + (hi - lo) / 2", mistakes=lambda c=c: _rise_mistakes(c))
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on {len(curves)} curves, three of "
          "them from tiny models (learned positions, rotary, grouped-query)")
