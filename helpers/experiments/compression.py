"""Anchor-only context compression (paper A, §3.2).

Hidden_anchor runs the demonstrations once, keeps at every layer the keys and
values of the anchor positions only (label tokens, the demonstrations'
formatting tokens and BOS: :attr:`helpers.core.prompts.Prompt.anchor_pos`), and runs
each test input alone (``Review: x\nSentiment:``) with that pruned cache
prepended. The cache is :mod:`helpers.core.prefix`'s, built with ``keep=``: kept
rows keep their original positions and the query continues at P0, where it
stands in the full prompt (tests: a pruned cache equals the full prompt with
attention from the query to the dropped positions blocked, on learned-position,
rotary, grouped-query and sliding-window models). Full ICL, the reference every
method is scored against, runs on the same engine with every position kept.

Baselines: Text_anchor (demonstration texts removed from the prompt string),
Hidden_random (formatting + BOS + one random text position per demonstration
instead of the label token; seeded) and Hidden_random-top (best of N seeded
Hidden_random draws by label loyalty against full ICL, selected on the same
test inputs as the paper does).

Query positions (``query_positions``, the methods with a cache: Hidden_anchor,
Hidden_random, Hidden_random-top). ``"original"`` (default, the method above):
the test input continues at P0, where it stands in the full prompt.
``"restart"``: its tokens get positions ``0..len-1``, as if no context preceded
them, while they still attend to the kept keys and values, whose positions were
fixed when the demonstrations ran (learned positions: ``W_pos[0:len]``; rotary:
the input's queries and its own keys rotated at ``0..len-1``). That is what the
released GPT-2 code of arXiv 2305.14160 (§3.2) runs: with the cached keys and
values it passes position ids ``0..len-1`` plus an offset that it sets only for
GPT-J (to the position after the last kept token, i.e. P0), so its GPT2-XL
Table 2 restarts the input at position 0 while its GPT-J Table 2 keeps the
original positions. ``"restart"`` exists to set a run beside the GPT2-XL
numbers; Text_anchor and full ICL have no cache and are the same in both modes.
Results of the two modes are stored under different keys
(:func:`cached_compression`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from helpers.core.loyalty import label_loyalty, label_loyalty_rows, word_loyalty, word_loyalty_rows
from helpers.core.predict import Predictions, logits_at
from helpers.core.prefix import (
    PrefixCache,
    demo_prefix_len,
    keep_rows,
    restart_positions,
    run_prefix,
    suffix_logits,
    suffix_tokens,
)
from helpers.core.prefix_runs import predict_shared, predict_with_cache, shared_cache, vanilla_predictions
from helpers.core.prompts import Demo, Prompt, build_prompts, label_span_arg
from helpers.core.seeds import stream_seed
from helpers.core.store import pins_weights, result_types
from helpers.core.tasks import get_task
from helpers.study import paper as PA
from helpers.study.claims import claim
from helpers.study.profiles import RunSizes
from helpers.study.stats import Interval, bootstrap_of_means

__all__ = [
    "CompressionSizes",
    "compression_sizes",
    "compression_set",
    "prefix_len",
    "anchor_keep",
    "random_keep",
    "QUERY_POSITIONS",
    "query_positions_arg",
    "build_cache",
    "predict_cached",
    "compression_runs",
    "text_anchor_demos",
    "text_anchor_prompts",
    "token_counts",
    "CompressionResult",
    "run_compression",
    "cached_compression",
    "METHODS",
    "table2_verdict",
    "method_cells",
    "speed_verdict",
    "time_icl_vs_anchor",
    "hidden_anchor_reference",
    "gap_verdict",
    "compression_claims",
]

prefix_len = demo_prefix_len  # P0: one past the newline that ends the last demonstration

QUERY_POSITIONS = ("original", "restart")  # where a test input run after a cache starts (module doc)


def query_positions_arg(query_positions: str) -> str:
    """``query_positions`` if it is one of :data:`QUERY_POSITIONS`, else a ValueError naming them."""
    if not isinstance(query_positions, str) or query_positions not in QUERY_POSITIONS:
        raise ValueError(f"query_positions must be one of {', '.join(map(repr, QUERY_POSITIONS))}; "
                         f"got {query_positions!r}")
    return query_positions


def anchor_keep(prompt: Prompt, span: str = "all") -> list[int]:
    """Hidden_anchor's kept positions: label tokens + demonstration formatting + BOS (before P0). ``span="all"``
    (the authors' code) keeps every token of a multi-token label word; ``"first"`` only its first token (notebook
    10's comparison of the two anchors)."""
    label_span_arg(span)
    p0 = prefix_len(prompt)
    drop = set() if span == "all" else {i for a, b in prompt.label_spans for i in range(a + 1, b)}
    return [p for p in prompt.anchor_pos if p < p0 and p not in drop]


def random_keep(prompt: Prompt, seed: int) -> list[int]:
    """Hidden_random: Hidden_anchor's positions without the label words' first tokens (the ones the labels are
    read from), plus one random text position per demonstration. As in the authors' code, the rest of the
    label line stays: formatting, BOS, the continuation tokens of a multi-token label word and the newline."""
    rng = np.random.default_rng(seed)
    keep = set(anchor_keep(prompt)) - set(prompt.label_pos)
    for (s, e), lp in zip(prompt.text_spans, prompt.label_pos):
        cand = [i for i in range(s, e) if i not in prompt.label_pos]
        keep.add(int(rng.choice(cand)) if cand else lp)
    return sorted(keep)


def build_cache(model, prompt: Prompt, keep: Sequence[int] | None = None,
                query_positions: str = "original", demos: PrefixCache | None = None) -> PrefixCache:
    """Run ``prompt``'s demonstrations (tokens before P0) once and keep the positions ``keep``.

    ``keep=None`` keeps the Hidden_anchor positions (:func:`anchor_keep`);
    ``keep=range(P0)`` keeps everything (then the cached run is plain ICL).
    ``query_positions``: ``"original"`` (inputs run after the cache continue at
    P0) or ``"restart"`` (they start at position 0; module doc).
    ``demos``: the demonstrations' keep-everything cache, already run: pruned instead of run again
    (:func:`helpers.core.prefix.keep_rows`; Hidden_anchor and every Hidden_random draw share one pass).
    """
    query_positions_arg(query_positions)
    p0 = prefix_len(prompt)
    keep = anchor_keep(prompt) if keep is None else keep
    if demos is not None:
        if not torch.equal(demos.tokens, prompt.tokens[:p0].cpu()):
            raise ValueError("demos is the cache of other demonstrations than this prompt's")
        cache = keep_rows(demos, keep, note="anchor cache")
    else:
        cache = run_prefix(model, prompt.tokens[:p0], keep, note="anchor cache")
    return restart_positions(cache) if query_positions == "restart" else cache


def predict_cached(model, cache: PrefixCache, prompts: Sequence[Prompt], label_ids: Sequence[int],
                   batch_size: int = 16, top_k: int = 5, progress: bool | str = False) -> Predictions:
    """:func:`helpers.core.predict.predict`, but each prompt's demonstrations are replaced by ``cache``."""
    return predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, cache=cache,
                          progress=progress)


def text_anchor_demos(demos: Sequence[Demo]) -> list[Demo]:
    """Demonstrations with their text removed (formatting and label words stay as plain text)."""
    return [Demo("", d.label, d.idx) for d in demos]


def text_anchor_prompts(model, task, demos: Sequence[Demo], queries: Sequence[Demo]) -> list[Prompt]:
    """Text_anchor prompts, e.g. ``"Review: \\nSentiment: Negative\\nReview: <x>\\nSentiment:"``."""
    prompts, dropped = build_prompts(model, task, text_anchor_demos(demos), queries)
    if dropped:
        raise ValueError(f"{dropped} Text_anchor prompts exceed the context")
    return prompts


def token_counts(prompts: Sequence[Prompt], cache: PrefixCache) -> dict:
    """L_demo (mean tokens per demonstration), L_x (mean query tokens), L_anchor (cache length), the bound.

    bound = (P0 + L_x) / (L_anchor + L_x): the ratio of attended tokens, an
    upper bound of the speed-up when cost is linear in tokens.
    """
    p0 = cache.prefix_len
    n_demos = prompts[0].n_demos
    bos = 1 if prompts[0].bos else 0
    lx = float(np.mean([len(p) - p0 for p in prompts]))
    return dict(L_demo=(p0 - bos) / n_demos, L_context=p0, L_x=lx, L_anchor=len(cache),
                bound=(p0 + lx) / (len(cache) + lx))


@result_types
@dataclass
class CompressionResult:
    task: str
    seed: int
    metrics: dict  # method -> {"label_loyalty", "word_loyalty", "accuracy"} (fractions)
    counts: dict  # token_counts of Hidden_anchor
    random_top_draw: int  # which draw won Hidden_random-top
    n_test: int
    # method -> {"label_loyal": 0/1, "word_loyal": Jaccard, "correct": 0/1} per input (same inputs for every method)
    per_input: dict = field(default_factory=dict)
    query_positions: str = "original"  # positions of the inputs run after a cache (module doc)


METHODS = ("ICL", "Text_anchor", "Hidden_random", "Hidden_random-top", "Hidden_anchor")


def run_compression(model, icl_set, random_top_draws: int = 20, batch_size: int = 16,
                    progress: bool = False, query_positions: str = "original") -> CompressionResult:
    """Table 2 for one :class:`helpers.core.prompts.PromptSet` (1-shot, one seed): every method vs full ICL.

    ``query_positions`` applies to the cached methods (Hidden_anchor, Hidden_random, Hidden_random-top):
    ``"original"`` (default) or ``"restart"`` (module doc).
    """
    query_positions_arg(query_positions)
    prompts, lids, seed = icl_set.prompts, icl_set.label_ids, icl_set.seed
    ref = vanilla_predictions(model, prompts, lids, batch_size)  # full ICL (notebook 00's run, stored by content)

    per_input: dict = {}

    def score(pr: Predictions, name: str | None = None) -> dict:
        if name is not None:
            per_input[name] = {"label_loyal": label_loyalty_rows(pr.pred, ref.pred).tolist(),
                               "word_loyal": word_loyalty_rows(pr.topk, ref.topk, k=5).tolist(),
                               "correct": (pr.pred == pr.gold).int().tolist()}
        return dict(label_loyalty=label_loyalty(pr.pred, ref.pred),
                    word_loyalty=word_loyalty(pr.topk, ref.topk, k=5),
                    accuracy=pr.accuracy)

    out = {"ICL": score(ref, "ICL")}
    ta = text_anchor_prompts(model, icl_set.task, icl_set.demos, icl_set.test)
    ta_cache = shared_cache(model, ta)  # the text-less demonstrations, also run once where they are shared
    out["Text_anchor"] = score(predict_with_cache(model, ta, lids, batch_size, cache=ta_cache, top_k=5), "Text_anchor")
    demos = run_prefix(model, prompts[0].tokens[:prefix_len(prompts[0])])  # one pass, pruned per method and draw
    anchor = build_cache(model, prompts[0], query_positions=query_positions, demos=demos)
    out["Hidden_anchor"] = score(predict_cached(model, anchor, prompts, lids, batch_size), "Hidden_anchor")
    draws = []
    for d in tqdm(range(max(1, random_top_draws)), desc="random draws", disable=not progress, leave=False):
        c = build_cache(model, prompts[0], random_keep(prompts[0], seed=stream_seed("random_keep", seed, d)), query_positions,
                        demos=demos)
        draws.append(score(predict_cached(model, c, prompts, lids, batch_size), f"draw {d}"))
    out["Hidden_random"] = draws[0]
    best = int(np.argmax([s["label_loyalty"] for s in draws]))
    out["Hidden_random-top"] = draws[best]
    per_input["Hidden_random"], per_input["Hidden_random-top"] = per_input["draw 0"], per_input[f"draw {best}"]
    per_input = {m: per_input[m] for m in METHODS}
    return CompressionResult(icl_set.task.name, seed, {m: out[m] for m in METHODS}, token_counts(prompts, anchor),
                             best, len(prompts), per_input, query_positions)


@pins_weights
def cached_compression(model, icl_set, random_top_draws: int = 20, batch_size: int = 16, progress: bool = False,
                       query_positions: str = "original") -> CompressionResult:
    """:func:`run_compression`, stored on disk (:func:`helpers.core.store.cached`).

    The key is the model's weights (:func:`helpers.core.store.model_fingerprint`),
    the task, seed and every prompt (:func:`helpers.core.store.prompts_digest`),
    the number of Hidden_random draws and ``query_positions``, so a stored
    result only serves a request for the same inputs, draws and positions
    (batch size is not part of it: batched and one-by-one runs agree).
    """
    from helpers.core.store import cached, model_fingerprint, prompts_digest

    query_positions_arg(query_positions)
    params = dict(model=model_fingerprint(model), task=icl_set.task.name, seed=int(icl_set.seed),
                  prompts=prompts_digest(icl_set.prompts, icl_set.label_ids), n_test=len(icl_set.prompts),
                  draws=int(random_top_draws), query_positions=query_positions)
    return cached("compression_table2", params,
                  lambda: run_compression(model, icl_set, random_top_draws, batch_size, progress, query_positions))


@pins_weights
def compression_set(model, task: str, seed: int, n_test: int):
    """The prompt set of one (task, seed) (:func:`helpers.core.prompts.make_icl_set`), without the warning that a
    multi-token label word (e.g. TREC's " Abbreviation") stands for its class by its first token: notebook 00's
    task table shows those words once, the runs would repeat it at every prompt set."""
    import warnings

    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, task, seed, n_test)


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


def speed_verdict(speedups: dict, bounds: dict, frac: float = 0.9) -> str:
    """Speed-up criterion: "meets the goal" if every task reaches ``frac`` of its token-ratio bound,
    "speeds up" if every task is faster than full ICL, else "no speed-up"."""
    if all(speedups[t] >= frac * bounds[t] for t in speedups):
        return "meets the goal"
    if all(speedups[t] > 1 for t in speedups):
        return "speeds up"
    return "no speed-up"


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
    seeds = tuple(profile.seeds[:1] if profile.name == "smoke" else profile.seeds)
    timed_inputs, timing_repeats = {"smoke": (4, 1), "default": (8, 2)}.get(profile.name, (16, 3))
    return CompressionSizes(seeds=seeds, n_test=profile.n_test, random_top_draws=profile.random_top_draws,
                            batch_size=profile.batch_size, timed_inputs=timed_inputs, timing_repeats=timing_repeats)


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
    speed-up over the timed inputs (paired). On CUDA every clock reading waits for the GPU first.
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


# ---- the reference on one prompt (notebook 05's exercise is checked against it) and the claims ----

def hidden_anchor_reference(model: HookedTransformer, prompt: Prompt, keep: Sequence[int],
                            label_ids: Sequence[int]) -> torch.Tensor:
    """The helper's Hidden_anchor label logits at q for one prompt: :func:`build_cache` keeping ``keep``, then
    the input run as a suffix against it (:func:`predict_cached`). ``[classes]``, float32 on the CPU."""
    cache = build_cache(model, prompt, keep=keep)
    with torch.inference_mode():
        return predict_cached(model, cache, [prompt], label_ids, batch_size=1).label_logits[0].float().cpu()


_SPEED_VERDICT = {"meets the goal": "replicates", "speeds up": "partly", "no speed-up": "does not replicate"}


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
    :func:`speed_verdict` on that task (meets the goal: replicates, speeds up: partly).
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
        v = _SPEED_VERDICT[speed_verdict({r["task"]: r["speedup"]}, {r["task"]: r["bound"]})]
        own = PA.paper_column(r["task"]) is None  # a task the paper did not study: no paper column to stand beside
        out.append(claim("05.speedup_own" if own else f"05.speedup_{r['task']}", iv, v,
                         "replicates if it reaches 90% of the token-ratio bound (L_context + L_x) / (L_anchor + L_x); "
                         "partly if faster than full ICL", unit="x", context=context,
                         note=f"Token-ratio bound here {r['bound']:.2f}x; timed on a shared CPU, one input at a time.",
                         **({"as_key": f"05.speedup_{r['task']}", "paper": PA.NOT_IN_PAPER,
                             "statement": f"Hidden_anchor speed-up over full ICL, {get_task(r['task']).display} (x)"}
                            if own else {})))
    return out
