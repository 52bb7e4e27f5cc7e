"""Three rankings of the heads side by side: paper B's in-context score, the induction score and the
function-vector score (notebook 10, and the controls' power runs).

Each ranking is one method's (:mod:`helpers.experiments.incontext_heads`, :mod:`helpers.experiments.head_scores`);
putting them side by side is a protocol: the same prompts score every head three ways, and each ranking's top
heads are then ablated against as many random heads. :class:`HeadRankings` holds the scores and the top sets, so
a notebook reads ``rankings.top["fv"]`` instead of rebuilding them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers.core.controls.model import ControlPrompts, shuffled_labels
from helpers.core.heads import Head
from helpers.experiments import incontext_heads as ih
from helpers.experiments.head_scores import SETS, fv_scores, induction_scores, top_heads, top_share
from helpers.protocols import head_scores as hs

__all__ = ["RANKINGS", "HeadRankings", "head_rankings", "control_head_rankings"]

RANKINGS = ("incontext", "induction", "fv")  # the keys of HeadRankings.scores and .top, in this order


@dataclass(frozen=True)
class HeadRankings:
    """``scores[ranking]``: a score per head (``[layer, head]``); ``top[ranking]``: its top ``n_top`` heads. The
    in-context score shown is the mean of gain and drop at q; its top set is paper B's own ranking
    (:func:`helpers.experiments.incontext_heads.rank_heads`), which ranks each label's heads."""

    scores: dict[str, torch.Tensor]
    top: dict[str, list[Head]]
    n_top: int

    @property
    def names(self) -> dict[str, str]:
        """A short name per ranking, for figure panels and table rows ("in-context heads", ...)."""
        return {k: SETS[k].split(" (")[0] for k in self.scores}


def _rankings(pooled: ih.HeadScores, induction: torch.Tensor, fv: torch.Tensor, n_top: int) -> HeadRankings:
    return HeadRankings(scores={"incontext": (pooled.mean_gain + pooled.mean_drop) / 2, "induction": induction,
                                "fv": fv},
                        top={"incontext": ih.rank_heads(pooled)[:n_top], "induction": top_heads(induction, n_top),
                             "fv": top_heads(fv, n_top)},
                        n_top=n_top)


def head_rankings(model, tasks: Sequence[str], sizes: hs.HeadScoreSizes) -> HeadRankings:
    """The three rankings on a language model: attribution pooled over every task's scoring prompts
    (:func:`helpers.protocols.head_scores.scoring_set`), the induction score on repeated random tokens, and the
    function-vector score averaged over the tasks (stored per task, :func:`helpers.protocols.head_scores.fv_runs`);
    the top :func:`helpers.experiments.head_scores.top_share` heads of each."""
    attribution = [ih.head_attribution(model, s.prompts, s.label_ids, batch_size=sizes.batch_size)
                   for s in (hs.scoring_set(model, t, sizes) for t in tasks)]
    pooled = ih.HeadScores(*(torch.cat([getattr(a, f) for a in attribution]) for f in ("gain", "drop", "pred")),
                           attribution[0].ablation)
    fv = torch.stack(list(hs.fv_runs(model, tasks, sizes).values())).mean(0)
    return _rankings(pooled, induction_scores(model), fv, top_share(model, sizes.frac))


def control_head_rankings(model, attr: ControlPrompts, n_top: int = 1) -> HeadRankings:
    """The three rankings on a control, on the sequences ``attr``: the induction score at the control's context
    length, the function-vector score against each sequence's labels shuffled among its demonstrations, and the
    top ``n_top`` heads of each (one, as notebook 09 fixed before its first run)."""
    pooled = ih.head_attribution(model, attr.prompts, attr.label_ids, shared=False)
    fv = fv_scores(model, attr.prompts, shuffled_labels(attr, attr.seed).prompts, attr.label_ids, shared=False)
    return _rankings(pooled, induction_scores(model, length=(model.cfg.n_ctx - 1) // 2), fv.mean(0), n_top)
