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

import functools
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["ArgumentError", "CheckFailed", "YourFunctionRaised", "grader", "likely_mistake", "seed_arg", "model_arg",
           "positive_int", "seed_list", "sizes_per_task"]


class ArgumentError(TypeError, ValueError):
    """An argument of the wrong type or value; the message says what to pass."""


class CheckFailed(AssertionError):
    """An exercise's function does not match the reference: the message says what differs and, where the
    result matches a typical wrong version, its likely cause.

    In Jupyter (IPython shows an exception's ``_render_traceback_`` instead of its traceback) it is these few
    lines only: the frames of the check, the reference and the tiny models say nothing a learner can act on.
    An error raised inside the learner's own function is not one of these, and keeps its full traceback.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mCheckFailed\x1b[0m: {self}",
                "(the check ran your function and the reference on tiny random models; fix it and run both cells "
                "again)"]


class YourFunctionRaised(RuntimeError):
    """An exception raised inside the learner's own function while an exercise's check ran it.

    In Jupyter it shows in a few lines: the exception, the line of the learner's function it came from, and where to
    look for help, without the frames of the check, the reference or torch. ``__cause__`` keeps the original
    exception with its whole traceback (``%debug`` or ``raise e.__cause__`` show it)."""

    def __init__(self, fn_name: str, exc: BaseException, where: str):
        self.fn_name, self.exc, self.where = fn_name, exc, where
        super().__init__(f"{fn_name} raised {type(exc).__name__}: {exc}" + (f" ({where})" if where else ""))

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self.exc).__name__}\x1b[0m in your function {self.fn_name}: {self.exc}",
                *([f"  {self.where}"] if self.where else []),
                "(the check called it on a tiny random model; the exercise's hint above says what it should do; "
                "fix it and run both cells again)"]


_NOT_YOURS = (str(Path(__file__).resolve().parent.parent), "site-packages", f"{os.sep}lib{os.sep}python")


def _your_line(exc: BaseException) -> str:
    """``"line 3 of your code: x = a @ b"``: the innermost frame of the traceback that is not the project's,
    torch's or Python's (a notebook cell, or a file of the learner's)."""
    import traceback

    mine = [f for f in traceback.extract_tb(exc.__traceback__) if not any(part in f.filename for part in _NOT_YOURS)]
    if not mine:
        return ""
    f = mine[-1]
    return f"line {f.lineno} of your code{f' ({f.name})' if f.name != '<module>' else ''}: {(f.line or '').strip()}"


def grader(check: Callable) -> Callable:
    """Decorator of an exercise's check ``check(fn, ...)``: ``fn``, the learner's function, is called through a
    wrapper that turns an exception raised inside it into :class:`YourFunctionRaised` (a few lines in Jupyter,
    naming the learner's line). :class:`CheckFailed` and errors of the check itself pass through unchanged."""

    @functools.wraps(check)
    def run(fn, *args, **kwargs):
        if not callable(fn):
            raise ArgumentError(f"{check.__name__} checks a function: pass the function itself (its name, without "
                                f"calling it), got {type(fn).__name__}")

        @functools.wraps(fn)
        def yours(*a, **kw):
            try:
                return fn(*a, **kw)
            except CheckFailed:
                raise
            except Exception as e:  # noqa: BLE001  (anything the learner's code raises)
                raise YourFunctionRaised(getattr(fn, "__name__", "your function"), e, _your_line(e)) from e

        return check(yours, *args, **kwargs)

    return run


def likely_mistake(got, variants, atol: float = 1e-4, rtol: float = 1e-4) -> str | None:
    """The message of the first typical wrong version that ``got`` equals, or None.

    ``variants``: ``(message, compute)`` pairs, ``compute()`` giving that wrong version's result (computed only
    when needed, in order; one that fails or has another shape is skipped).
    """
    import torch

    got = torch.as_tensor(got).detach().float().cpu()
    for message, compute in variants:
        try:
            want = torch.as_tensor(compute()).detach().float().cpu()
        except Exception:  # noqa: BLE001 - a wrong version that cannot be computed here is simply not it
            continue
        if want.shape == got.shape and torch.allclose(got, want, atol=atol, rtol=rtol):
            return message
    return None


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a whole number >= 1, else an :class:`ArgumentError` naming ``name``."""
    if not _is_int(value):
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
    if not _is_int(seed):
        raise ArgumentError(f"{name} must be an integer such as 42, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ArgumentError(f"{name} must be 0 or more (numpy's generators take no negative seed), got {seed}")
    return int(seed)


def model_arg(model, name: str = "model"):
    """``model`` if it is a loaded HookedTransformer, else an :class:`ArgumentError` that says how to load one."""
    from transformer_lens import HookedTransformer  # lazy: TransformerLens takes seconds to import

    if isinstance(model, HookedTransformer):
        return model
    if isinstance(model, str):
        raise ArgumentError(f"{name} must be a loaded model, got the name {model!r}: load it first, "
                            f"model = load_model({model!r}) (helpers.core.models)")
    raise ArgumentError(f"{name} must be a HookedTransformer (helpers.core.models.load_model(name)), got "
                        f"{type(model).__name__}")


def seed_list(seeds, name: str = "seeds") -> list[int]:
    """A non-empty list of distinct integer seeds, each 0 or more."""
    if _is_int(seeds):
        raise ArgumentError(f"{name} must be a list of integer seeds, got the single seed {seeds}: write [{seeds}]")
    if isinstance(seeds, (str, bytes, Mapping)) or not hasattr(seeds, "__iter__"):
        raise ArgumentError(f"{name} must be a list of integer seeds such as [42, 43], got {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ArgumentError(f"{name} is empty: pass at least one seed, e.g. [42]")
    bad = [s for s in seeds if not _is_int(s)]
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
