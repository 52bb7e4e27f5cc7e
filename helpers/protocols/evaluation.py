"""The evaluation sizes every step of notebook 07 shares (and notebook 10's head rankings on the foo/bar prompts).

Kept apart from the study's profiles so that only the steps that evaluate on notebook 07's unrelated-label prompts
hold :mod:`helpers.core.unrelated`'s code in their stored keys.
"""

from __future__ import annotations

from helpers.core.unrelated import EvalSizes
from helpers.study.profile_table import run_sizes

__all__ = ["eval_sizes"]


def eval_sizes(profile) -> EvalSizes:
    """The evaluation sizes every step of notebook 07 shares (and notebook 10's head rankings): ``n_eval`` queries per
    seed (the profile's ``n_test``; ``smoke``: 8), the ``seeds`` (``smoke``: its first), 2 demonstrations per
    class and the batch size (:data:`~helpers.study.profile_table.RUN_SIZES`, row ``eval``)."""
    return EvalSizes(**run_sizes("eval", profile))
