"""The protocol of Hidden_anchor context compression (paper A §3.2, notebook 05): its run sizes, its runs over tasks x
seeds (each stored by content), its intervals, the criteria written before any run, and its claims. The method it
runs (a model and prompts in, tensors out) is :mod:`helpers.experiments.compression`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from helpers.core.predict import logits_at
from helpers.core.prefix import (
    suffix_logits,
    suffix_tokens,
)
from helpers.core.tasks import get_task
from helpers.experiments.compression import (
    build_cache,
    cached_compression,
    compression_set,
    path_flops,
    token_counts,
)
from helpers.study import paper as PA
from helpers.study.claims import claim
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval, bootstrap_of_means

__all__ = ["CompressionSizes", "compression_sizes", "compression_runs", "table2_verdict", "method_cells",
           "speed_verdict", "engine_goal", "time_icl_vs_anchor", "gap_verdict", "compression_claims"]


def compression_runs(model, tasks: Sequence[str], sizes: CompressionSizes, query_positions: str = "original") -> dict:
    """:func:`cached_compression` for every task and every seed of ``sizes`` (:func:`compression_sizes`) on
    ``sizes.n_test`` inputs (the weights hashed once): ``{(task, seed): CompressionResult}``."""
    return {(task, seed): cached_compression(model, compression_set(model, task, seed, sizes.n_test),
                                             sizes.random_top_draws, sizes.batch_size, query_positions=query_positions)
            for task in tasks for seed in sizes.seeds}


def method_cells(results: dict, method: str, metric: str) -> dict:
    """``{(task, seed): per-input values}`` of one method over ``{(task, seed): CompressionResult}``
    (``metric``: ``label_loyal``, ``word_loyal`` or ``correct``), the input of :func:`helpers.study.stats.bootstrap_means`."""
    return {key: r.per_input[method][metric] for key, r in results.items()}


def table2_verdict(gaps: dict) -> tuple[str, dict]:
    """Verdict on §3.2 from 95% intervals (criteria fixed before the run).

    ``gaps[(other, metric)]``: the interval of Hidden_anchor minus ``other``
    (Text_anchor, Hidden_random, Hidden_random-top), paired per input, for
    ``metric`` in label_loyalty / word_loyalty (task-averaged).

    "replicates": all six intervals lie above zero (Hidden_anchor is the most
    loyal compressed method on both metrics); "partly": all three lie above zero
    for one metric, or the four against the hidden random baselines do;
    "does not replicate": on both metrics some method's interval lies below zero
    (Hidden_anchor clearly less loyal); otherwise "inconclusive".
    """
    others = ["Text_anchor", "Hidden_random", "Hidden_random-top"]
    metrics = ("label_loyalty", "word_loyalty")
    above = {k: iv.low > 0 for k, iv in gaps.items()}
    checks = {f"above all on {m}": all(above[(o, m)] for o in others) for m in metrics}
    checks["above the hidden random baselines on both"] = all(above[(o, m)] for o in others[1:] for m in metrics)
    if all(checks[f"above all on {m}"] for m in metrics):
        return "replicates", checks
    if any(checks.values()):
        return "partly", checks
    if all(any(gaps[(o, m)].high < 0 for o in others) for m in metrics):
        return "does not replicate", checks
    return "inconclusive", checks


def engine_goal(speedups: dict, bounds: dict, frac: float = 0.9) -> str:
    """The shared-prefix engine's goal in ``make bench`` (an engineering target, not a claim of the paper):
    "meets the goal" if every task reaches ``frac`` of its token-ratio bound, "speeds up" if every task is
    faster than full ICL, else "no speed-up"."""
    if all(speedups[t] >= frac * bounds[t] for t in speedups):
        return "meets the goal"
    if all(speedups[t] > 1 for t in speedups):
        return "speeds up"
    return "no speed-up"


def speed_verdict(iv: Interval) -> str:
    """Speed-up criterion (fixed before the run), on the 95% interval of the measured speed-up over the timed
    inputs: "faster" if it lies above 1, "slower" if below 1, else "cannot tell". The paper's claim is that
    Hidden_anchor speeds up inference (Table 3: 1.1x to 2.9x, each below its token-ratio bound); how close a
    measured speed-up comes to the bound depends on the machine and on what else runs on it (the fixed cost of
    each call does not shrink with the tokens), so the bound is reported beside the verdict, not in it."""
    if iv.low > 1:
        return "faster"
    if iv.high < 1:
        return "slower"
    return "cannot tell"


def _on_cuda(model) -> bool:
    return str(model.cfg.device).startswith("cuda")


def _clock(model):
    """``time.perf_counter``, after waiting for the GPU's queued work when the model is on CUDA.

    CUDA kernels run asynchronously: without the wait, a timer would read the clock when the work was queued,
    not when it finished.
    """
    if not _on_cuda(model):
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(model.cfg.device)
        return time.perf_counter()

    return clock


@dataclass(frozen=True)
class CompressionSizes(RunSizes):
    """Run sizes of notebook 05 (:func:`compression_sizes`)."""

    seeds: tuple[int, ...]  # Table 2's seeds; Table 3 times the first
    n_test: int  # test inputs per (task, seed)
    random_top_draws: int  # Hidden_random-top: the best of this many Hidden_random draws
    batch_size: int
    timed_inputs: int  # Table 3: inputs timed per task
    timing_repeats: int  # Table 3: timings of each input (the median is kept)


def compression_sizes(profile) -> CompressionSizes:
    """Run size of notebook 05. Table 2: every seed of the profile (``smoke``: its first), ``n_test`` inputs per
    (task, seed), Hidden_random-top the best of ``random_top_draws`` draws. Table 3's timing: a few timed inputs
    per task and timings of each on the CPU profiles (``smoke`` 4 x 1, ``default`` 8 x 2), 16 x 3 on ``paper``."""
    return CompressionSizes(**run_sizes("compression", profile))


def time_icl_vs_anchor(model, icl_set, n_inputs: int = 16, repeats: int = 3, warmup: int = 2,
                       label_only: bool = False) -> dict:
    """Inference time per input of full ICL vs Hidden_anchor, one input at a time, in the same run.

    Both paths compute full-vocabulary logits at q only (``label_only``: only
    the label words' logits, which removes the fixed cost of a large
    unembedding, e.g. Gemma's 262k x 640 matrix, from both paths). The anchor cache is
    built once (its time is reported separately, amortised over the test set
    as in the paper). Inputs alternate between the two paths so machine load
    affects both alike; the time per path is the mean over ``n_inputs`` inputs of
    each input's median over ``repeats``. ``speedup_low``/``speedup_high``: the 95% bootstrap interval of the
    speed-up over the timed inputs (paired). ``flop_speedup``: the same ratio in FLOPs counted from the shapes
    (:func:`helpers.experiments.compression.path_flops`), which no machine or load changes. On CUDA every clock
    reading waits for the GPU first.
    """
    clock = _clock(model)
    prompts = icl_set.prompts[:n_inputs]
    t0 = clock()
    cache = build_cache(model, prompts[0])
    t_build = clock() - t0
    qtok = suffix_tokens(cache, prompts)
    dev = model.cfg.device

    ids = torch.tensor(icl_set.label_ids, device=dev) if label_only else None

    def full(p):
        logits_at(model, p.tokens[None].to(dev), torch.tensor([p.q]), vocab=ids)

    def anchor(i):
        t = qtok[i][None]
        suffix_logits(model, cache, t, torch.tensor([t.shape[1] - 1]), vocab=ids)

    per_f, per_a = np.zeros((repeats, len(prompts))), np.zeros((repeats, len(prompts)))
    with torch.inference_mode():
        for i in range(min(warmup, len(prompts))):
            full(prompts[i]), anchor(i)
        for r in range(repeats):
            for i, p in enumerate(prompts):
                t = clock()
                full(p)
                per_f[r, i] = clock() - t
                t = clock()
                anchor(i)
                per_a[r, i] = clock() - t
    out = token_counts(prompts, cache)
    flops_full, flops_anchor = path_flops(model.cfg, prompts, cache, model.cfg.d_vocab if ids is None else len(ids))
    out["flop_speedup"] = float(flops_full.sum() / flops_anchor.sum())
    med_f, med_a = np.median(per_f, 0), np.median(per_a, 0)  # each input's median over the repeats
    t_full, t_anchor = float(med_f.mean()), float(med_a.mean())
    # 95% interval of the speed-up over the timed inputs: the ratio of the two mean times, bootstrapped with the
    # inputs paired (how much the inputs' lengths and the timing noise move the ratio on this machine, not how
    # another machine would time it)
    iv = bootstrap_of_means({"full": {(icl_set.task.name, 0): med_f}, "anchor": {(icl_set.task.name, 0): med_a}},
                            lambda m: m["full"] / m["anchor"]) if len(prompts) > 1 else None
    out.update(task=icl_set.task.name, label_only=label_only, t_full=t_full, t_anchor=t_anchor, t_build=t_build,
               speedup=t_full / t_anchor, n_inputs=len(prompts),
               speedup_low=float("nan") if iv is None else iv.low, speedup_high=float("nan") if iv is None else iv.high)
    out["speedup_over_bound"] = out["speedup"] / out["bound"]
    return out


_SPEED_VERDICT = {"faster": "replicates", "cannot tell": "inconclusive", "slower": "does not replicate"}


def gap_verdict(iv: Interval) -> str:
    """A Hidden_anchor gap's verdict (fixed before the run): above 0 replicates, below 0 does not, else
    inconclusive."""
    return "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"


def compression_claims(ivs: dict, gaps: dict, speed, context: str = "") -> list:
    """Notebook 05's claims (:class:`helpers.study.claims.Claim`) from its intervals.

    ``ivs[(method, metric)]``: Table 2 intervals in percent; ``gaps[(other, metric)]``: Hidden_anchor minus
    ``other`` in points (paired, :func:`table2_verdict`); ``speed``: the rows of :func:`time_icl_vs_anchor`
    (a DataFrame or a list of dicts). The Table 2 values carry the overall :func:`table2_verdict`; each gap its
    own interval's (above 0: replicates, below: does not replicate, else inconclusive); each task's speed-up
    :func:`speed_verdict` on that task's interval (faster: replicates, slower: does not replicate, else
    inconclusive).
    """
    verdict, _ = table2_verdict(gaps)
    crit2 = ("Hidden_anchor minus each other compressed method (paired, task-averaged): replicates if all six "
             "intervals (label and word loyalty) lie above 0; partly if the three of one metric, or the four against "
             "the hidden random baselines, do; does not replicate if on both metrics some method lies clearly above")
    out = [claim(f"05.hidden_anchor_{m}", ivs[("Hidden_anchor", m)], verdict, crit2, unit="%", context=context)
           for m in ("label_loyalty", "word_loyalty", "accuracy")]
    for (o, m), iv in gaps.items():
        out.append(claim(f"05.anchor_minus_{o}_{m}", iv, gap_verdict(iv), "interval above 0", unit="points",
                         context=context))
    rows = speed.to_dict(orient="records") if hasattr(speed, "to_dict") else list(speed)
    for r in rows:
        iv = Interval(r["speedup"], r["speedup_low"], r["speedup_high"], 1, int(r["n_inputs"]))
        v = _SPEED_VERDICT[speed_verdict(iv)]
        own = PA.paper_column(r["task"]) is None  # a task the paper did not study: no paper column to stand beside
        flops = f"FLOP speed-up {r['flop_speedup']:.2f}x, " if "flop_speedup" in r else ""
        out.append(claim("05.speedup_own" if own else f"05.speedup_{r['task']}", iv, v,
                         "replicates if the interval lies above 1 (faster than full ICL), does not replicate if "
                         "below 1, else inconclusive", unit="x", context=context,
                         note=f"{flops}token-ratio bound (L_context + L_x) / (L_anchor + L_x) {r['bound']:.2f}x; "
                              "timed one input at a time, both paths interleaved.",
                         **({"as_key": f"05.speedup_{r['task']}", "paper": PA.NOT_IN_PAPER,
                             "statement": f"Hidden_anchor speed-up over full ICL, {get_task(r['task']).display} (x)"}
                            if own else {})))
    return out
