"""§2.2's isolation, applied to every class of position instead of the label words alone.

Paper A (arXiv 2305.14160, §2.2) blocks the label words' attention to earlier positions in the first (or last)
k layers and finds that predictions move far more than when as many random words are isolated. If another
class carries the demonstrations' information (the forerunner token before each label, arXiv 2410.04468; the
template tokens, arXiv 2401.11323), isolating that class should move them as much or more. For each class of
:data:`helpers.core.positions.CLASSES` other than ``content`` (and ``label_first``, the first token of each label
word), :func:`run_class_isolation` isolates its positions with the hooks of
:mod:`helpers.experiments.isolation`, and ``random:<class>`` isolates as many content tokens, drawn as §2.2
draws its control (:func:`content_draw`): for every input and every isolated layer its own draw, seeded by
``[seed, input index, layer]``, so a draw never depends on batching or on how many inputs run.

The classes lie in the demonstrations, which the prompts of one set share, so a class runs once as an isolated
shared prefix (:func:`helpers.core.prefix_runs.predict_shared`); the random control isolates different rows in
every input and runs full prompts, or, isolated in the last k layers, shares the layers below
(:func:`helpers.experiments.isolation.random_isolation_last`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from helpers.core.positions import CLASSES, position_classes
from helpers.core.predict import Predictions, predict
from helpers.core.prefix import shared_prefix_len, shared_prefix_or_none
from helpers.core.prefix_runs import predict_shared
from helpers.core.prompts import Prompt
from helpers.core.sizing import FORWARD_BATCH
from helpers.experiments.isolation import layer_range, per_layer_hooks, random_isolation_last, rows_isolation

__all__ = ["ISOLATED_CLASSES", "class_conditions", "content_draw", "class_rows", "run_class_isolation", "control_possible",
           "WHERES"]

ISOLATED_CLASSES = tuple(c for c in CLASSES if c != "content") + ("label_first",)


def class_conditions(classes: Sequence[str] = ISOLATED_CLASSES) -> list[str]:
    """Every class and its random control, in pairs: ``["label", "random:label", "forerunner", ...]``."""
    out = []
    for c in classes:
        if c not in ISOLATED_CLASSES:
            raise ValueError(f"class must be one of {ISOLATED_CLASSES}, got {c!r}")
        out += [c, f"random:{c}"]
    return out


def content_draw(prompt: Prompt, layers: Iterable[int], seed: int, index: int, count: int) -> dict[int, list[int]]:
    """The control for a class of ``count`` positions in the ``index``-th input: for every layer its own ``count``
    content tokens of ``prompt`` (:func:`helpers.core.positions.position_classes`), sorted, drawn with
    ``numpy.random.default_rng([seed, index, layer])``."""
    pool = position_classes(prompt)["content"]
    if count > len(pool):
        raise ValueError(f"asked for {count} random content tokens but the demonstrations hold {len(pool)}")
    return {l: sorted(int(i) for i in np.random.default_rng([seed, index, l]).choice(pool, size=count, replace=False))
            for l in layers}


def class_rows(prompts: Sequence[Prompt], condition: str, layers: Sequence[int], seed: int) -> list[dict[int, list[int]]]:
    """Per prompt, ``{layer: rows isolated}`` under ``condition`` (a class, or ``random:<class>``)."""
    random = condition.startswith("random:")
    cls = condition.removeprefix("random:")
    if cls not in ISOLATED_CLASSES:
        raise ValueError(f"condition must be a class of {ISOLATED_CLASSES} or 'random:<class>', got {condition!r}")
    out = []
    for i, p in enumerate(prompts):
        rows = position_classes(p)[cls]
        out.append(content_draw(p, layers, seed, i, len(rows)) if random else {l: list(rows) for l in layers})
    return out


def control_possible(prompts: Sequence[Prompt], cls: str) -> bool:
    """Whether every prompt's demonstrations hold at least as many content tokens as class ``cls`` has positions
    (a task of very short texts may not: then no control of as many content tokens exists)."""
    return all(len(position_classes(p)["content"]) >= len(position_classes(p)[cls]) for p in prompts)


def run_class_isolation(model, prompts: Sequence[Prompt], label_ids: Sequence[int], condition: str, where: str,
                        k: int, seed: int = 0, batch_size: int = FORWARD_BATCH, top_k: int = 5, shared: bool = True
                        ) -> Predictions:
    """Predictions with ``condition``'s rows (:func:`class_rows`) isolated in the first or last ``k`` layers
    (``where``). A class shared by every prompt runs as an isolated shared prefix when ``shared`` (the same
    predictions as the full prompts, tests); the random control runs full prompts, sharing the layers below
    the isolated ones when ``where="last"``."""
    layers = layer_range(model, where, k)
    rows = class_rows(prompts, condition, layers, seed)
    common = shared and shared_prefix_or_none(model, prompts) is not None
    if common and not condition.startswith("random:") and all(r == rows[0] for r in rows):
        p0 = shared_prefix_len(prompts)
        if all(i < p0 for r in rows[0].values() for i in r):
            return predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=top_k,
                                  prefix_hooks=per_layer_hooks(rows[0], 1, p0))
    factory = rows_isolation(prompts, rows)
    if common and where == "last" and layers:
        return random_isolation_last(model, prompts, label_ids, layers, seed, batch_size, top_k, factory=factory)
    return predict(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, hooks=factory)


# ------------------------------------------------------------------------------------------- at scale


WHERES = ("first", "last")
