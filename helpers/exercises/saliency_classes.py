"""The exercise of notebook 10: one class's saliency flow into q by hand, checked against
:func:`helpers.experiments.saliency_classes.class_flow_scores` on the tiny random models
(:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.core.positions import position_classes
from helpers.core.prompts import make_icl_set
from helpers.exercises.grading import CheckFailed, compare_to_reference, grader
from helpers.exercises.tiny import TINY_KINDS, tiny_model
from helpers.experiments.saliency import saliency_matrices
from helpers.experiments.saliency_classes import FLOW_CLASSES, class_flow_scores

__all__ = ["check_class_flow_to_q"]


def _flow_to_q_mistakes(sal: torch.Tensor, prompt, cls: str):
    pos = position_classes(prompt)
    rows = pos[cls]
    with_label = sorted(set(rows) | set(pos["label"])) if cls != "label" else rows
    return [
        ("This reads the flow out of q into the class, I[:, c, q] (row = the class): the flow into q is the row q, "
         "I[:, q, c].", lambda: sal[:, rows, prompt.q].mean(-1)),
        ("This is the sum over the class's positions: the flow is a mean per pair, so that classes of different "
         "sizes compare.", lambda: sal[:, prompt.q, rows].sum(-1)),
        ("The label words' positions are counted with the class: a class's positions are its own only "
         "(position_classes(prompt)[cls]).", lambda: sal[:, prompt.q, with_label].mean(-1)),
        ("This averages over every earlier position of q, not the class's: index the columns by the class's "
         "positions.", lambda: sal[:, prompt.q, : prompt.q].mean(-1)),
    ]


@grader
def check_class_flow_to_q(fn: Callable) -> None:
    """Run ``fn(sal, prompt, cls)`` (``sal``: one prompt's saliency matrices ``[layer, seq, seq]``; ``cls``: a class
    of :func:`helpers.core.positions.position_classes`) on one SST-2 prompt of each tiny model and every class of
    :data:`helpers.experiments.saliency_classes.FLOW_CLASSES`, against the reference's ``to_q`` flow; names a
    typical mistake when your result equals one."""
    n = 0
    for kind in TINY_KINDS:
        model = tiny_model(kind)
        icl = make_icl_set(model, "sst2", 42, 1)
        p = icl.prompts[0]
        sal = saliency_matrices(model, [p], icl.label_ids)[0]
        ref = class_flow_scores(sal[None], [p])[0, :, 1]  # [layer, classes]
        for c, cls in enumerate(FLOW_CLASSES):
            mine = fn(sal.clone(), p, cls)
            if mine is None:
                raise CheckFailed(f"{kind} model, class {cls}: your function returned None; return a tensor [layer]")
            compare_to_reference(mine, ref[:, c], f"{kind} model, class {cls!r} ({len(position_classes(p)[cls])} "
                                 f"positions, q = {p.q})", "the mean over the class's positions c of I_l(q, c), one "
                                 "value per layer", mistakes=lambda cls=cls: _flow_to_q_mistakes(sal, p, cls))
            n += 1
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on 3 tiny models (learned "
          f"positions, rotary, grouped-query), {n} (model, class) cases")
