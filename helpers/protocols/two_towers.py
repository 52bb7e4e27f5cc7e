"""The protocol of paper B's value-output vectors and its two towers (notebook 07): its run sizes, its runs over tasks x
seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.two_towers`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from helpers.core.grid import model_label, run_grid
from helpers.core.heads import Head
from helpers.core.store import pins_weights
from helpers.core.tasks import label_token_ids
from helpers.core.unrelated import (
    EvalSizes,
    UnrelatedTask,
    cached_eval_runs,
    check_sizes,
    fresh_demo_prompts,
    unrelated_args,
)
from helpers.protocols.evaluation import eval_sizes
from helpers.study.claims import Claim, claim
from helpers.study.profile_table import run_sizes
from helpers.study.stats import Interval, bootstrap_means, bootstrap_statistic

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer
from helpers.experiments.two_towers import (
    ValueOutputs,
    label_carrying_rows,
    pearson,
    towers_seed,
    two_towers,
    value_outputs,
)

__all__ = ["label_carrying_interval", "value_output_interval_part", "two_towers_intervals", "two_towers_interval_part",
           "two_towers_claims", "TowersSizes", "two_towers_sizes", "value_output_runs", "towers_runs"]


def label_carrying_interval(runs: dict[tuple[str, int], ValueOutputs]) -> Interval:
    """95% interval of the label-carrying rate over :func:`value_output_runs` results (seeds, then inputs, per
    task; mean over tasks)."""
    return bootstrap_means({key: label_carrying_rows(vo) for key, vo in runs.items()})


def value_output_interval_part(carrying: Interval, high: float = 0.75, fair: float = 0.60) -> str:
    """The value-output claim from the 95% interval of the label-carrying rate (criteria fixed before the
    run): "replicates" if it lies at or above ``high``; "partly" if at or above ``fair``; "does not
    replicate" if it lies below ``fair``; "inconclusive" otherwise."""
    if carrying.low >= high:
        return "replicates"
    if carrying.low >= fair:
        return "partly"
    if carrying.high < fair:
        return "does not replicate"
    return "inconclusive"


def two_towers_intervals(towers: dict[str, ValueOutputs], n_boot: int = 1000) -> dict[str, Interval | None]:
    """95% intervals (bootstrap over the inputs of each task) of the two-towers statistics, each the mean over
    tasks of its per-task value: ``corr_attn`` = corr(d_attn, logit minus), ``abs_corr_vo`` = |corr(d_vo, logit
    minus)|, ``difference`` = the first minus the second (the contrast the verdict reads). None where a
    statistic is undefined in too many resamples (e.g. no variation in the logit minus)."""
    if not towers:
        raise ValueError("no two-towers runs to summarise")
    tt = {t: two_towers(vo) for t, vo in towers.items()}
    out_lm = {t: np.asarray(vo.out_lm, float) for t, vo in towers.items()}
    cols = {t: (np.asarray(tt[t]["d_attn"], float), np.asarray(tt[t]["d_vo"], float)) for t in towers}

    def statistic(sample):
        (_, idx), = sample
        ca = [pearson(cols[t][0][i], out_lm[t][i]) for t, i in idx.items()]
        cv = [abs(pearson(cols[t][1][i], out_lm[t][i])) for t, i in idx.items()]
        a, v = float(np.mean(ca)), float(np.mean(cv))
        return {"corr_attn": a, "abs_corr_vo": v, "difference": a - v}

    return bootstrap_statistic({0: {t: len(out_lm[t]) for t in towers}}, statistic, n_boot=n_boot)


def two_towers_interval_part(corr_attn: Interval | None, difference: Interval | None) -> str:
    """The two-towers claim from 95% intervals (criteria fixed before the run): "replicates" if the
    attention correlation's interval lies at or above 0.5 and that of (attention correlation - |VO
    correlation|) at or above 0.2; "partly" if the difference's interval lies above 0; "does not replicate" if
    it lies below 0; "inconclusive" otherwise (or when an interval is undefined)."""
    if corr_attn is None or difference is None:
        return "inconclusive"
    if difference.low > 0:
        return "replicates" if corr_attn.low >= 0.5 and difference.low >= 0.2 else "partly"
    if difference.high < 0:
        return "does not replicate"
    return "inconclusive"


def two_towers_claims(carrying: Interval, towers: dict[str, Interval | None], context: str = "") -> list[Claim]:
    """Notebook 07's claims about value-output vectors and the two towers, from :func:`label_carrying_interval`
    and :func:`two_towers_intervals`, graded with the criteria above (:func:`value_output_interval_part`,
    :func:`two_towers_interval_part`)."""
    def fmt(iv):
        return "undefined" if iv is None else f"{iv:.3f}"

    return [
        claim("07.value_output", carrying, value_output_interval_part(carrying),
              "label-carrying rate at or above 0.75 (replicates), at or above 0.60 (partly); below 0.60: does not "
              "replicate", context=context),
        claim("07.two_towers", towers["corr_attn"], two_towers_interval_part(towers["corr_attn"], towers["difference"]),
              "corr(attention difference, logit minus) at or above 0.5 and exceeding |corr(VO difference, logit "
              "minus)| by at least 0.2 (replicates); exceeding it at all (partly); below it: does not replicate",
              context=context, note=f"|corr(VO difference, logit minus)| {fmt(towers['abs_corr_vo'])}; difference "
                                    f"{fmt(towers['difference'])}."),
    ]


@dataclass(frozen=True)
class TowersSizes(EvalSizes):
    """The evaluation sizes (:class:`helpers.core.unrelated.EvalSizes`) and ``n_towers``, the prompts with their own
    demonstrations for the two-towers analysis."""

    n_towers: int


def two_towers_sizes(profile) -> TowersSizes:
    """Run sizes of the value-output and two-towers steps of notebook 07: the shared evaluation sizes
    (:func:`helpers.protocols.evaluation.eval_sizes`) and ``n_towers``."""
    return TowersSizes(**asdict(eval_sizes(profile)), **run_sizes("two_towers", profile))


def value_output_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                      sizes: EvalSizes, seeds: Sequence[int] | None = None,
                      model_name: str | None = None) -> dict[tuple[str, int], ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on the evaluation prompts, per (task, seed) (cache kind
    ``"heads_vo"``). Returns ``{(task, seed): ValueOutputs}``."""
    def run(ps, hs, _seed):
        return value_outputs(model, ps.prompts, ps.label_ids, hs, sizes.batch_size)

    return cached_eval_runs("heads_vo", model, uts, sizes, seeds, model_name, run, heads=heads)


@pins_weights
def towers_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                sizes: TowersSizes, model_name: str | None = None) -> dict[str, ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on ``sizes.n_towers`` prompts that each have their own
    demonstrations (:func:`helpers.core.unrelated.fresh_demo_prompts`, seed :func:`towers_seed`), per task
    (cache kind ``"heads_towers"``); :func:`two_towers` reads them. Returns ``{task: ValueOutputs}``."""
    check_sizes(sizes, TowersSizes, "two_towers_sizes(profile)")
    name, K, seed = model_label(model, model_name), sizes.k_per_class, towers_seed(sizes)
    unrelated_args(uts)

    def compute(t, seed):
        prompts = fresh_demo_prompts(model, uts[t], seed, sizes.n_towers, K)
        return value_outputs(model, prompts, label_token_ids(model.tokenizer, uts[t].task), heads[t], sizes.batch_size)

    runs = run_grid("heads_towers", model, list(uts), [seed], compute,
                    lambda t, _: {"k": K, "n": sizes.n_towers, "heads": heads[t]}, model_name=name)
    return {t: runs[(t, seed)] for t in uts}
