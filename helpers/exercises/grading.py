"""How an exercise's check grades a reader's function: what it raises, and how it names a typical mistake.

- :class:`CheckFailed`: the reader's function ran but its result differs from the reference; the message says
  what differs and, where it matches a typical wrong version, its likely cause. In Jupyter it shows in a few lines.
- :class:`YourFunctionRaised`: the reader's function itself raised; in Jupyter it shows the exception and the
  reader's own line, without the frames of the check.
- :func:`grader`: the decorator every ``check_*`` function wears; it calls the reader's function through a
  wrapper that turns an exception raised inside it into :class:`YourFunctionRaised`.
- :func:`likely_mistake`: the message of the first typical wrong version a result equals;
  :func:`compare_to_reference`: a tensor compared with the reference, the differences (and the likely mistake)
  in the error.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import torch

from helpers.core.checks import ArgumentError

__all__ = ["CheckFailed", "YourFunctionRaised", "grader", "likely_mistake", "compare_to_reference"]


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


# frames that are not the learner's: the package's own (helpers/), installed packages and Python's library
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
    got = torch.as_tensor(got).detach().float().cpu()
    for message, compute in variants:
        try:
            want = torch.as_tensor(compute()).detach().float().cpu()
        except Exception:  # noqa: BLE001 - a wrong version that cannot be computed here is simply not it
            continue
        if want.shape == got.shape and torch.allclose(got, want, atol=atol, rtol=rtol):
            return message
    return None


def compare_to_reference(got, want: torch.Tensor, what: str, hint: str, atol: float = 1e-4, rtol: float = 1e-4,
                         mistakes=None) -> None:
    """Raise :class:`CheckFailed` saying what differs (shape, or values and the largest difference) when a
    reader's result ``got`` does not match the reference ``want``; ``what`` names the case, ``hint`` says what to
    look at; ``mistakes()`` gives typical wrong versions (``(message, compute)`` pairs, :func:`likely_mistake`):
    the one ``got`` equals is named first."""
    if got is None:
        raise CheckFailed(f"{what}: your function returned None; return a tensor")
    got = torch.as_tensor(got).detach().float().cpu()
    want = want.detach().float().cpu()
    if got.shape != want.shape:
        raise CheckFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}. {hint}")
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        diff = float((got - want).abs().max())
        found = likely_mistake(got, mistakes(), atol=atol, rtol=rtol) if mistakes else None
        hint = f"{found} ({hint})" if found else hint
        raise CheckFailed(f"{what}: got {[round(x, 4) for x in got.flatten().tolist()[:6]]}, reference "
                          f"{[round(x, 4) for x in want.flatten().tolist()[:6]]} (largest difference {diff:.3g}). "
                          f"{hint}")
