"""The protocol of paper B's search for the in-context heads (notebook 07): its run sizes, its runs over tasks x seeds
(each stored by content), its intervals, the criteria written before any run, and its claims. The method it runs (a
model and prompts in, tensors out) is :mod:`helpers.experiments.incontext_heads`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from helpers.core.grid import model_label, run_grid
from helpers.core.store import pins_weights
from helpers.core.unrelated import (
    EvalSizes,
    UnrelatedTask,
    check_sizes,
    make_set,
    unrelated_args,
)

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer
from helpers.experiments.incontext_heads import HeadScores, attribution_seed, head_attribution
from helpers.protocols.evaluation import eval_sizes
from helpers.study.profile_table import run_sizes

__all__ = ["HeadsSizes", "incontext_heads_sizes", "heads_sizes_at", "attribution_runs"]


@dataclass(frozen=True)
class HeadsSizes(EvalSizes):
    """The evaluation sizes (:class:`helpers.core.unrelated.EvalSizes`) and ``n_attr``, the prompts head attribution
    scores (each label word is ranked on the prompts whose gold label it is, about half of them)."""

    n_attr: int


def incontext_heads_sizes(profile) -> HeadsSizes:
    """Run sizes of the attribution step of notebook 07 (and of its accuracy and ablation steps, which read the
    evaluation sizes): :func:`helpers.protocols.evaluation.eval_sizes` and ``n_attr``."""
    return HeadsSizes(**asdict(eval_sizes(profile)), **run_sizes("incontext_heads", profile))


def heads_sizes_at(sizes: HeadsSizes, evaluation: EvalSizes) -> HeadsSizes:
    """``sizes``' attribution prompts (``n_attr``) with the queries, seeds and demonstrations per class of
    ``evaluation`` (e.g. one regime of :func:`helpers.protocols.mapping_control.regime_sizes`)."""
    check_sizes(sizes, HeadsSizes, "incontext_heads_sizes(profile)")
    check_sizes(evaluation)
    return HeadsSizes(n_eval=evaluation.n_eval, seeds=evaluation.seeds, k_per_class=evaluation.k_per_class,
                      batch_size=evaluation.batch_size, n_attr=sizes.n_attr)


@pins_weights
def attribution_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], sizes: HeadsSizes,
                     model_name: str | None = None, progress: bool | str = False) -> dict[str, HeadScores]:
    """:func:`head_attribution` (zero ablation) per task on ``sizes.n_attr`` prompts of
    :func:`attribution_seed` (cache kind ``"heads_attr"``). Returns ``{task: HeadScores}``."""
    check_sizes(sizes, HeadsSizes, "incontext_heads_sizes(profile)")
    name, K, seed = model_label(model, model_name), sizes.k_per_class, attribution_seed(sizes)
    unrelated_args(uts)

    def compute(t, seed):
        ps = make_set(model, uts[t], seed, sizes.n_attr, K)
        return head_attribution(model, ps.prompts, ps.label_ids, batch_size=sizes.batch_size, progress=progress)

    runs = run_grid("heads_attr", model, list(uts), [seed], compute,
                    {"k": K, "n": sizes.n_attr, "def": "final-resid-v2-per-label"}, model_name=name)
    return {t: runs[(t, seed)] for t in uts}
