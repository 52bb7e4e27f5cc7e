"""Checks of what a caller passes to the public functions of ``helpers``, done once where the call comes in.

Every check raises an error that names the argument, what it got and what to pass instead, so bad input never
turns into a number: sizes that are not positive, seeds that are not whole numbers, a model name where a loaded
model is expected, empty seed lists. The error is :class:`ArgumentError` (a ``TypeError`` and a ``ValueError``).

The checks here need nothing else of ``helpers``; those that need a task or a prompt live beside them:
:func:`helpers.core.tasks.task_list` and :func:`helpers.core.tasks.run_args` (lists of tasks and seeds, sizes per
task), :func:`helpers.core.prompts.prompt_list` and :func:`helpers.core.prompts.check_label_ids` (prompts and
label ids, raising :class:`helpers.core.prompts.PromptError`), :func:`helpers.core.unrelated.unrelated_args`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

from helpers.core import backend

__all__ = ["ArgumentError", "seed_arg", "model_arg",
           "positive_int", "seed_list", "sizes_per_task", "DTYPE_NAMES",
           "is_int", "sizes_arg"]

DTYPE_NAMES = ("float32", "bfloat16", "float16")  # the dtypes a model loads in (helpers.core.models.DTYPES)


class ArgumentError(TypeError, ValueError):
    """An argument of the wrong type or value; the message says what to pass."""


def is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a whole number >= 1, else an :class:`ArgumentError` naming ``name``."""
    if not is_int(value):
        raise ArgumentError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__}): "
                            "pass a whole number such as 8")
    if value < 1:
        raise ArgumentError(f"{name} must be a positive integer, got {value}: pass 1 or more")
    return int(value)


def seed_arg(seed, name: str = "seed") -> int:
    """``seed`` as an int if it is a whole number >= 0, else an :class:`ArgumentError`: a seed of None would draw
    unseeded, unrepeatable prompts, and numpy takes no negative seed."""
    if seed is None:
        raise ArgumentError(f"{name} is None, which would draw unseeded prompts that no rerun repeats: pass an integer "
                            f"seed such as 42")
    if not is_int(seed):
        raise ArgumentError(f"{name} must be an integer such as 42, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ArgumentError(f"{name} must be 0 or more (numpy's generators take no negative seed), got {seed}")
    return int(seed)


def model_arg(model, name: str = "model"):
    """``model`` if it is a loaded model (a HookedTransformer, or under TransformerLens 4 a TransformerBridge:
    :mod:`helpers.core.backend`), else an :class:`ArgumentError` that says how to load one."""
    if isinstance(model, backend.Model):  # TransformerLens is imported here, on first use
        return model
    if isinstance(model, str):
        raise ArgumentError(f"{name} must be a loaded model, got the name {model!r}: load it first, "
                            f"model = load_model({model!r}) (helpers.core.models)")
    raise ArgumentError(f"{name} must be a {backend.Model.__name__} (helpers.core.models.load_model(name)), got "
                        f"{type(model).__name__}")


def seed_list(seeds, name: str = "seeds") -> list[int]:
    """A non-empty list of distinct integer seeds, each 0 or more."""
    if is_int(seeds):
        raise ArgumentError(f"{name} must be a list of integer seeds, got the single seed {seeds}: write [{seeds}]")
    if isinstance(seeds, (str, bytes, Mapping)) or not hasattr(seeds, "__iter__"):
        raise ArgumentError(f"{name} must be a list of integer seeds such as [42, 43], got {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ArgumentError(f"{name} is empty: pass at least one seed, e.g. [42]")
    bad = [s for s in seeds if not is_int(s)]
    if bad:
        raise ArgumentError(f"{name} must be integers, got {bad[0]!r} ({type(bad[0]).__name__})")
    if any(s < 0 for s in seeds):
        raise ArgumentError(f"{name} must be 0 or more (numpy's generators take no negative seed), got "
                            f"{min(seeds)}: pass e.g. [42]")
    twice = sorted({int(s) for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ArgumentError(f"{name} repeat {twice}: a seed is one draw of demonstrations, and a repeat would count "
                            f"its inputs twice in the intervals; pass each seed once")
    return [int(s) for s in seeds]


def sizes_per_task(name: str, n, tasks: Sequence[str]) -> None:
    """``n`` is a positive int, or a dict giving a positive int for every task in ``tasks``."""
    if isinstance(n, Mapping):
        missing = [t for t in tasks if t not in n]
        if missing:
            raise ArgumentError(f"{name} is a dict without an entry for {missing}: give every task a size")
        for t in tasks:
            positive_int(f"{name}[{t!r}]", n[t])
    else:
        positive_int(name, n)


def sizes_arg(sizes, kind: type, where: str) -> None:
    """Raise a TypeError that says where sizes come from (``where``, e.g. ``"saliency_sizes(profile)"``) when ``sizes``
    is not a ``kind`` (a plain dict, or loose numbers where a study's sizes go)."""
    if not isinstance(sizes, kind):
        raise TypeError(f"sizes must be the {kind.__name__} that {where} returns, got {type(sizes).__name__}")
