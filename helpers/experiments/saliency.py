"""§2.1 Saliency: how information flows between tokens, layer by layer.

For each layer l the saliency matrix is

    I_l = | sum_h A_{h,l} * dL/dA_{h,l} |        (elementwise; heads summed, then abs)

where ``A`` is the post-softmax attention pattern (``hook_pattern``) and ``L``
the cross-entropy of the label-restricted logits at q against the gold label.
One forward and one backward pass give every layer at once. A batch's loss is
the *sum* of the per-input losses, so each row's gradient is exactly the
gradient of its own loss (rows never interact under causal attention with right
padding), and the batched result equals the one-by-one result.

The gradient is taken with :func:`torch.autograd.grad` with respect to the
pattern tensors only; the model's parameters are switched to
``requires_grad=False`` for the duration (restored afterwards), so nothing is
accumulated into ``.grad``.

Three means per layer (the diagonal is always excluded), from the position record:

- ``S_wp``: mean of ``I_l(p_k, j)`` over ``j < p_k`` and all k (text -> label words);
- ``S_pq``: mean of ``I_l(q, p_k)`` over k (label words -> target position);
- ``S_ww``: mean of ``I_l(i, j)``, ``j < i``, over all other pairs.

BOS (when the model uses one) is an ordinary earlier position here, as in the
paper's definition ("every j < p_k").

Intervals. The plotted quantity of one (task, seed) run is :func:`relative_flow`:
each flow's mean over the inputs, divided per layer by the sum of the three;
a task's curve is the mean of its seeds' curves. :func:`flow_intervals` gives
every point of those curves, their means over the layer ranges of the checks
(:func:`layer_ranges`) and the paired contrasts between flows (e.g. shallow
S_wp minus S_pq) a 95% interval from the two-level bootstrap of
:func:`helpers.study.stats.bootstrap_statistic` (seeds, then the inputs within each
(task, seed)); the three flows of a resampled input stay together, so every
contrast is paired. :func:`saliency_verdict` restates the checks of
:func:`saliency_verdict` on the intervals of the contrasts.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from helpers.core.checks import ArgumentError, positive_int
from helpers.core.grid import run_grid
from helpers.core.predict import length_batches, logits_at
from helpers.core.prompts import Prompt, build_prompt, check_prompts, pad_batch, sample_demos, sample_test
from helpers.core.seeds import stream_seed
from helpers.core.sizing import sizing
from helpers.core.store import pins_weights
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split, run_args
from helpers.core.tl_patches import frozen_params
from helpers.study.claims import claim
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_statistic

__all__ = [
    "FLOWS",
    "frozen_params",
    "saliency_batch",
    "saliency_matrices",
    "flow_masks",
    "flow_scores",
    "saliency_flow",
    "relative_flow",
    "first_layer_pq_exceeds_wp",
    "saliency_prompts",
    "SaliencySizes",
    "saliency_sizes",
    "saliency_runs",
    "flow_frame",
    "saliency_verdict",
    "layer_ranges",
    "FLOW_CHECKS",
    "MEAN_OVER_TASKS",
    "CROSSING",
    "contrast_name",
    "flow_statistics",
    "flow_intervals",
    "flow_interval_table",
    "saliency_claims",
]

FLOWS = ("S_wp", "S_pq", "S_ww")


def _pad_id(model) -> int:
    return model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0


def saliency_batch(model, prompts: Sequence[Prompt], label_ids: Sequence[int]
                   ) -> Float[torch.Tensor, "batch layer seq seq"]:
    """``I_l`` for every layer of every prompt, from one forward + backward pass.

    Prompts must carry a gold label (built from a :class:`Demo` query). Rows are
    right-padded to the longest prompt; entries involving padded positions are
    set to 0 (they never influence real positions under causal attention).
    """
    if not prompts:
        raise ValueError("no prompts")
    if any(p.gold is None for p in prompts):
        raise ValueError("saliency needs the gold label: build prompts from Demo queries (prompts.sample_test)")
    tokens, q = pad_batch(prompts, _pad_id(model))
    tokens = tokens.to(model.cfg.device)
    ids = torch.tensor(list(label_ids), device=model.cfg.device)
    gold = torch.tensor([p.gold for p in prompts], device=model.cfg.device)
    patterns: list[torch.Tensor] = []

    def keep(pattern, hook):
        if not pattern.requires_grad:  # layer 0 with frozen parameters: make it a leaf
            pattern = pattern.detach().requires_grad_(True)
        patterns.append(pattern)
        return pattern

    hooks = [(f"blocks.{l}.attn.hook_pattern", keep) for l in range(model.cfg.n_layers)]
    with torch.enable_grad(), frozen_params(model):
        logits = logits_at(model, tokens, q, hooks)[:, ids]
        loss = torch.nn.functional.cross_entropy(logits.float(), gold, reduction="sum")
        grads = torch.autograd.grad(loss, patterns)
    with torch.no_grad():
        # per layer (keeps the peak memory at one layer's [batch, head, seq, seq]): heads summed, then abs
        sal = torch.stack([(a.detach() * g).sum(dim=1).abs().float() for a, g in zip(patterns, grads)], dim=1)
        patterns.clear()  # the patterns and their gradients are freed before the masking below
        del grads
        lens = torch.tensor([len(p) for p in prompts], device=sal.device)
        pos = torch.arange(tokens.shape[1], device=sal.device)
        valid = pos[None, :] < lens[:, None]  # [batch, seq]
        sal = sal * (valid[:, None, :, None] & valid[:, None, None, :])
    return sal.cpu()


def _batches(model, prompts: Sequence[Prompt], batch_size: int, max_pattern_mb: float) -> list[list[int]]:
    """Length-grouped batches, split further so one batch's attention patterns stay under ``max_pattern_mb``.

    Both caps go through :func:`helpers.core.sizing.sizing` (a backward pass through every layer's patterns):
    on a CPU they are the caller's, on CUDA what the GPU's free memory holds.
    """
    per_pos = model.cfg.n_layers * model.cfg.n_heads * 4 / 2**20  # MB per (query, key) pair, float32
    longest = max((len(p) for p in prompts), default=1)
    sized = sizing(model, longest, batch_size, grad=True, patterns=True, max_pattern_mb=max_pattern_mb)
    out = []
    for idx in length_batches(prompts, sized.batch_size, sized.max_tokens):
        T = max(len(prompts[i]) for i in idx)
        cap = max(1, int(sized.max_pattern_mb // (per_pos * T * T)))
        out += [idx[i:i + cap] for i in range(0, len(idx), cap)]
    return out


def saliency_matrices(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                      progress: bool | str = False, max_pattern_mb: float = 256
                      ) -> list[Float[torch.Tensor, "layer seq seq"]]:
    """Per-prompt ``I`` (``[layer, len, len]``, unpadded), in input order. Memory grows with len^2: use for few prompts."""
    check_prompts(model, prompts, "compute saliency for", label_ids)
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for idx in tqdm(_batches(model, prompts, batch_size, max_pattern_mb), disable=not progress, leave=False,
                    desc=progress if isinstance(progress, str) else "saliency"):
        sal = saliency_batch(model, [prompts[i] for i in idx], label_ids)
        for b, i in enumerate(idx):
            n = len(prompts[i])
            out[i] = sal[b, :, :n, :n].clone()
    return out  # type: ignore[return-value]


def flow_masks(prompt: Prompt, seq: int | None = None) -> Bool[torch.Tensor, "3 seq seq"]:
    """Boolean masks of the (row=to, column=from) pairs averaged into S_wp, S_pq, S_ww.

    ``seq`` pads the masks (with False) to a longer batch length.
    """
    n = len(prompt)
    seq = seq or n
    if seq < n:
        raise ValueError(f"seq={seq} is shorter than the prompt ({n} tokens)")
    pos = torch.arange(seq)
    lower = (pos[None, :] < pos[:, None]) & (pos[:, None] < n)  # j < i, real rows; diagonal excluded
    rows = torch.zeros(seq, dtype=torch.bool)
    rows[prompt.label_pos] = True
    wp = lower & rows[:, None]
    pq = torch.zeros(seq, seq, dtype=torch.bool)
    pq[prompt.q, prompt.label_pos] = True
    ww = lower & ~wp & ~pq
    return torch.stack([wp, pq, ww])


def flow_scores(sal: Float[torch.Tensor, "batch layer seq seq"], prompts: Sequence[Prompt]
                ) -> Float[torch.Tensor, "batch layer 3"]:
    """``(S_wp, S_pq, S_ww)`` per prompt and layer from (padded) saliency matrices."""
    if sal.shape[0] != len(prompts):
        raise ValueError(f"{sal.shape[0]} saliency rows but {len(prompts)} prompts")
    masks = torch.stack([flow_masks(p, sal.shape[-1]) for p in prompts]).to(sal.dtype)  # [batch, 3, seq, seq]
    sums = torch.einsum("blij,bfij->blf", sal, masks)
    counts = masks.sum(dim=(-1, -2))  # [batch, 3]
    counts = counts[:, None, :].expand_as(sums)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, torch.nan))


def saliency_flow(model, prompts: Sequence[Prompt], label_ids: Sequence[int], batch_size: int = 8,
                  progress: bool | str = False, max_pattern_mb: float = 256) -> Float[torch.Tensor, "n layer 3"]:
    """``(S_wp, S_pq, S_ww)`` for every prompt (input order) and layer, batched by length.

    Batches hold at most ``batch_size`` prompts and are split further so that one
    batch's attention patterns (all layers and heads, float32) stay under
    ``max_pattern_mb`` (the backward pass keeps a few times that alive). Both are a CPU's values: for a
    model on CUDA, :func:`helpers.core.sizing.sizing` sizes them from the GPU's free memory.
    """
    check_prompts(model, prompts, "compute saliency flows for", label_ids)
    out = torch.empty(len(prompts), model.cfg.n_layers, 3)
    for idx in tqdm(_batches(model, prompts, batch_size, max_pattern_mb), disable=not progress, leave=False,
                    desc=progress if isinstance(progress, str) else "saliency"):
        batch = [prompts[i] for i in idx]
        out[idx] = flow_scores(saliency_batch(model, batch, label_ids), batch)
    return out


def relative_flow(scores: Float[torch.Tensor, "n layer 3"]) -> Float[torch.Tensor, "layer 3"]:
    """The paper's plotted quantity: mean over inputs, then each layer's three values divided by their sum."""
    if not isinstance(scores, torch.Tensor) or scores.ndim != 3 or scores.shape[-1] != 3:
        shape = tuple(scores.shape) if hasattr(scores, "shape") else type(scores).__name__
        raise ArgumentError(f"scores must be a tensor [n, layer, 3] (S_wp, S_pq, S_ww per input and layer, as "
                            f"saliency_flow returns), got {shape}")
    if scores.shape[0] == 0:
        raise ValueError("no saliency scores to average: run saliency_flow on at least one prompt")
    if (scores < 0).any():
        raise ArgumentError("scores must be 0 or more (saliency is a sum of absolute values): these hold negative "
                            "values, so they are not saliency_flow's output")
    mean = torch.nanmean(scores, dim=0)
    total = mean.sum(-1, keepdim=True)
    empty = [int(layer) for layer in (total[:, 0] == 0).nonzero().flatten()]
    if empty:
        raise ValueError(f"layer(s) {empty} carry no flow at all (S_wp, S_pq and S_ww are all 0), so their relative "
                         "sizes are undefined: saliency_flow gives 0 only where the loss has no gradient through "
                         "attention there; check the prompts' label positions and that the model was not run "
                         "without gradients")
    return mean / total


def first_layer_pq_exceeds_wp(rel: Float[torch.Tensor, "layer 3"]) -> int | None:
    """First layer index (0-based) where relative S_pq > S_wp, or None if it never does."""
    hit = torch.nonzero(rel[:, 1] > rel[:, 0]).flatten()
    return int(hit[0]) if len(hit) else None


def saliency_prompts(model, task, seed: int, n: int, k_per_class: int = 1, max_len: int | None = None
                     ) -> tuple[list[Prompt], list[int]]:
    """``n`` test queries, each with its own freshly drawn demonstrations (the paper's saliency setting).

    Queries: the test split shuffled with ``seed`` (first ``n``, over-long ones skipped).
    Demonstrations of the i-th query: :func:`sample_demos` with seed ``stream_seed("query_demos", seed, i)`` (``seed * 100003 + i``),
    so every input is reproducible on its own.
    """
    task = get_task(task)
    train, test = load_split(task, "train"), load_split(task, "test")
    lids = label_token_ids(model.tokenizer, task)
    max_len = max_len or model.cfg.n_ctx
    prompts: list[Prompt] = []
    for i, qd in enumerate(sample_test(test, len(test), seed)):
        if len(prompts) >= n:
            break
        demos = sample_demos(train, task, k_per_class, stream_seed("query_demos", seed, i))
        p = build_prompt(model, task, demos, qd, label_ids=lids)
        if len(p) <= max_len:
            prompts.append(p)
    return prompts, lids


@dataclass(frozen=True)
class SaliencySizes(RunSizes):
    """Run sizes of notebook 01 (:func:`saliency_sizes`)."""

    seeds: tuple[int, ...]
    n: Mapping[str, int]  # inputs per (task, seed), per task
    batch_size: int


def saliency_sizes(profile) -> SaliencySizes:
    """Run size of notebook 01: ``profile.n_saliency`` inputs per task and seed (every task, AGNews too: its
    prompts are ~6x longer than SST-2's and its backward passes the costliest), all of the profile's seeds,
    batches of 16 inputs split further by the attention patterns' memory (:func:`saliency_flow`)."""
    n = int(profile.n_saliency)
    return SaliencySizes(seeds=tuple(profile.seeds), n={t: n for t in profile.tasks}, batch_size=16)


@pins_weights
def saliency_runs(model, tasks: Sequence[str], seeds: Sequence[int], n: dict | int, batch_size: int = 4,
                  profile: str = "", progress: bool = True):
    """Per-input ``(S_wp, S_pq, S_ww)`` for every (task, seed), cached on disk.

    Returns ``{(task, seed): Float[Tensor, "n layer 3"]}`` (raw, not relative).
    ``n``: inputs per task and seed (an int or a per-task dict, e.g. ``saliency_sizes(profile).n``).
    """
    tasks, seeds = run_args(tasks, seeds, n=n)
    batch_size = positive_int("batch_size", batch_size)  # refused before the store is read, not only on a miss
    def count(task):
        return n[task] if isinstance(n, dict) else int(n)

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            prompts, lids = saliency_prompts(model, task, seed, count(task))
        return saliency_flow(model, prompts, lids, batch_size=batch_size)

    return run_grid("saliency_flow", model, tasks, seeds, run, lambda task, _: {"n": count(task), "profile": profile},
                    progress=progress and "saliency")


def flow_frame(runs: dict):
    """Long ``pandas.DataFrame`` (task, seed, layer, flow, value) of the relative sizes per (task, seed)."""
    import pandas as pd  # lazy: pandas takes a second to import

    rows = []
    for (task, seed), scores in runs.items():
        rel = relative_flow(scores)
        for layer in range(rel.shape[0]):
            for f, name in enumerate(FLOWS):
                rows.append({"task": task, "seed": seed, "layer": layer, "flow": name, "value": float(rel[layer, f])})
    return pd.DataFrame(rows)


# the checks of the §2.1 claim: each names the contrasts (layer range, larger flow, smaller flow) that the paper
# expects above zero
FLOW_CHECKS = {
    "shallow: S_wp dominant": (("shallow", "S_wp", "S_pq"), ("shallow", "S_wp", "S_ww")),
    "deep: S_pq dominant": (("deep", "S_pq", "S_wp"), ("deep", "S_pq", "S_ww")),
    "S_wp and S_pq above S_ww": (("all", "S_wp", "S_ww"), ("all", "S_pq", "S_ww")),
}
MEAN_OVER_TASKS = "mean over tasks"
CROSSING = "first layer S_pq > S_wp"


def layer_ranges(n_layers: int) -> dict[str, slice]:
    """The layer ranges of the checks: ``shallow`` (the first third, at least one layer), ``deep`` (the last
    half), ``all``."""
    if int(n_layers) < 1:
        raise ValueError(f"need at least one layer, got {n_layers}")
    L = int(n_layers)
    return {"shallow": slice(0, max(1, L // 3)), "deep": slice(L // 2, L), "all": slice(0, L)}


def contrast_name(a: str, b: str) -> str:
    return f"{a} - {b}"


def flow_statistics(rel) -> dict[tuple, float]:
    """Point summaries of one relative-flow curve ``[layer, 3]`` (e.g. a task's seed-averaged curve).

    Keys: ``("curve", layer, flow)``; ``(range, flow)``: the flow's mean over a :func:`layer_ranges`
    range; ``(range, "S_a - S_b")`` for every contrast of :data:`FLOW_CHECKS`; ``(CROSSING,)``: the
    first layer where S_pq exceeds S_wp (NaN when it never does).
    """
    rel = np.asarray(rel, dtype=np.float64)
    if rel.ndim != 2 or rel.shape[1] != len(FLOWS) or rel.shape[0] < 1:
        raise ValueError(f"a relative-flow curve is [layer, {len(FLOWS)}], got shape {rel.shape}")
    out: dict[tuple, float] = {}
    for layer in range(rel.shape[0]):
        for f, name in enumerate(FLOWS):
            out[("curve", layer, name)] = float(rel[layer, f])
    means = {r: rel[sl].mean(0) for r, sl in layer_ranges(rel.shape[0]).items()}
    for r, m in means.items():
        for f, name in enumerate(FLOWS):
            out[(r, name)] = float(m[f])
    for contrasts in FLOW_CHECKS.values():
        for r, a, b in contrasts:
            out[(r, contrast_name(a, b))] = float(means[r][FLOWS.index(a)] - means[r][FLOWS.index(b)])
    hit = np.flatnonzero(rel[:, 1] > rel[:, 0])
    out[(CROSSING,)] = float(hit[0]) if len(hit) else float("nan")
    return out


def _relative(scores: np.ndarray) -> np.ndarray:
    """:func:`relative_flow` in numpy: mean over inputs, then each layer divided by its three flows' sum."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column stays NaN, as in relative_flow
        mean = np.nanmean(scores, axis=0)
    return mean / mean.sum(-1, keepdims=True)


def flow_intervals(runs: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """95% intervals of every :func:`flow_statistics` of each task's seed-averaged relative curve, and of the
    curve averaged over tasks (task :data:`MEAN_OVER_TASKS`).

    ``runs``: ``{(task, seed): per-input raw flows [n, layer, 3]}`` (:func:`saliency_runs`); every task needs
    every seed. Returns ``{(task, *key): Interval}`` (None where a statistic, e.g. the crossing layer, is
    undefined in more than 10% of the resamples). Two-level bootstrap
    (:func:`helpers.study.stats.bootstrap_statistic`): the seeds (the same draw for every task), then the inputs
    within each (task, seed). The estimates are those of the full data: a task's curve is the mean over
    seeds of :func:`relative_flow`.
    """
    if not isinstance(runs, dict) or not runs:
        raise ValueError("pass the per-input flows as {(task, seed): [n, layer, 3]}, with at least one cell")
    cells = {}
    for key, v in runs.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"cell keys must be (task, seed), got {key!r}")
        arr = np.asarray(v.float() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
        if arr.ndim != 3 or arr.shape[2] != len(FLOWS) or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(f"cell {key}: per-input flows must be [n >= 1, layer, {len(FLOWS)}], got {arr.shape}")
        cells[key] = arr
    layers = {a.shape[1] for a in cells.values()}
    if len(layers) > 1:
        raise ValueError(f"all cells must come from one model (same number of layers), got {sorted(layers)}")
    tasks = list(dict.fromkeys(t for t, _ in cells))
    seeds = sorted({s for _, s in cells}, key=str)
    missing = [(t, s) for t in tasks for s in seeds if (t, s) not in cells]
    if missing:
        raise ValueError(f"every task needs every seed; missing cells {missing[:4]}")
    sizes = {s: {t: cells[t, s].shape[0] for t in tasks} for s in seeds}

    def stat(sample):
        curves = {t: np.mean([_relative(cells[t, s][idx[t]]) for s, idx in sample], axis=0) for t in tasks}
        out = {}
        for t, rel in curves.items():
            out.update({(t, *k): v for k, v in flow_statistics(rel).items()})
        mean = np.mean(list(curves.values()), axis=0)
        out.update({(MEAN_OVER_TASKS, *k): v for k, v in flow_statistics(mean).items()})
        return out

    out = bootstrap_statistic(sizes, stat, n_boot, seed=seed)
    per_task = {t: sum(cells[t, s].shape[0] for s in seeds) for t in tasks}  # a task's interval rests on its inputs
    return {k: iv if iv is None or k[0] not in per_task else dataclasses.replace(iv, n_inputs=per_task[k[0]])
            for k, iv in out.items()}


def saliency_verdict(intervals: dict, tasks: Sequence[str]) -> tuple[str, dict]:
    """Verdict on the §2.1 claim from the 95% intervals of the paired contrasts (criteria fixed before the run).

    ``intervals[(task, range, "S_a - S_b")]``: :class:`helpers.study.stats.Interval` of each contrast of
    :data:`FLOW_CHECKS` (e.g. :func:`flow_intervals`' output; None counts as straddling zero). The checks of
    :func:`saliency_verdict`, per task:
      1. shallow (first third of the layers): S_wp - S_pq > 0 and S_wp - S_ww > 0;
      2. deep (last half): S_pq - S_wp > 0 and S_pq - S_ww > 0;
      3. all layers: S_wp - S_ww > 0 and S_pq - S_ww > 0.
    A (task, check) "holds" when both intervals lie above zero, "fails" when one lies below zero, and is
    "inconclusive" otherwise. Verdict: "replicates" if every check holds; "partly" if at least half hold;
    "does not replicate" if more than half fail; otherwise "inconclusive".
    """
    if not tasks:
        raise ValueError("no tasks to judge")
    checks = {}
    for task in tasks:
        for check, contrasts in FLOW_CHECKS.items():
            ivs = []
            for r, a, b in contrasts:
                key = (task, r, contrast_name(a, b))
                if key not in intervals:
                    raise ValueError(f"no interval for {key}: pass flow_intervals' output")
                ivs.append(intervals[key])
            if all(iv is not None and iv.low > 0 for iv in ivs):
                checks[(task, check)] = "holds"
            elif any(iv is not None and iv.high < 0 for iv in ivs):
                checks[(task, check)] = "fails"
            else:
                checks[(task, check)] = "inconclusive"
    n = len(checks)
    held = sum(v == "holds" for v in checks.values())
    failed = sum(v == "fails" for v in checks.values())
    if held == n:
        return "replicates", checks
    if held >= n / 2:
        return "partly", checks
    if n - failed < n / 2:
        return "does not replicate", checks
    return "inconclusive", checks


def flow_interval_table(intervals: dict, tasks: Sequence[str], labels: dict | None = None, digits: int = 3):
    """One row per task (and the mean over tasks): the flows over the check ranges, the contrasts and the
    first layer where S_pq > S_wp, each as "estimate [low, high]" (95% interval; "n/a" when undefined).

    ``labels``: display names of the tasks.
    """
    import pandas as pd  # lazy: pandas takes a second to import

    def fmt(iv, spec):
        return "n/a" if iv is None else format(iv, spec)

    cols = [("shallow", "S_wp"), ("shallow", "S_pq"), ("shallow", "S_ww"), ("deep", "S_pq"), ("deep", "S_wp"),
            ("deep", "S_ww"), ("all", "S_ww")]
    names = {"shallow": "shallow third", "deep": "deep half", "all": "all layers"}
    rows = []
    for task in [*tasks, MEAN_OVER_TASKS]:
        row = {"task": (labels or {}).get(task, task)}
        for r, f in cols:
            row[f"{f} {names[r]}"] = fmt(intervals.get((task, r, f)), f".{digits}f")
        for contrasts in FLOW_CHECKS.values():
            for r, a, b in contrasts:
                row[f"{names[r]}: {a} - {b}"] = fmt(intervals.get((task, r, contrast_name(a, b))), f"+.{digits}f")
        row[CROSSING] = fmt(intervals.get((task, CROSSING)), ".1f")
        rows.append(row)
    return pd.DataFrame(rows)


# --- paper vs ours ---

CLAIM_KEYS = {"shallow: S_wp dominant": "01.shallow_wp_dominant", "deep: S_pq dominant": "01.deep_pq_dominant",
              "S_wp and S_pq above S_ww": "01.label_flows_above_ww"}
_RANGE_TEXT = {"shallow": "the first third of the layers", "deep": "the last half", "all": "all layers"}


def _tally_verdict(results: Sequence[str]) -> str:
    """A claim's verdict from its per-task check results, with :func:`saliency_verdict`'s thresholds."""
    n, held, failed = len(results), results.count("holds"), results.count("fails")
    if held == n:
        return "replicates"
    if held >= n / 2:
        return "partly"
    if n - failed < n / 2:
        return "does not replicate"
    return "inconclusive"


def saliency_claims(intervals: dict, tasks: Sequence[str], context: str = "") -> list:
    """The §2.1 claims (:data:`helpers.study.paper.CLAIMS_01`), one per check of :data:`FLOW_CHECKS`.

    ``ours``: the first contrast of the check on the curve averaged over tasks (relative flows); the note gives
    the second contrast and how many tasks the check holds on. Verdict: from the per-task results of
    :func:`saliency_verdict` (every task holds: replicates; at least half: partly; more than half fail: does
    not replicate; otherwise inconclusive).
    """
    _, checks = saliency_verdict(intervals, tasks)
    out = []
    for check, contrasts in FLOW_CHECKS.items():
        (r1, a1, b1), (r2, a2, b2) = contrasts
        results = [checks[(t, check)] for t in tasks]
        second = intervals.get((MEAN_OVER_TASKS, r2, contrast_name(a2, b2)))
        tally = ", ".join(f"{results.count(v)} {v}" for v in ("holds", "fails", "inconclusive") if results.count(v))
        pair = (f"{a1} - {b1} and of {a2} - {b2} over {_RANGE_TEXT[r1]}" if r1 == r2 else
                f"{a1} - {b1} over {_RANGE_TEXT[r1]} and of {a2} - {b2} over {_RANGE_TEXT[r2]}")
        criterion = f"on every task the 95% intervals of {pair} lie above 0 (relative flows)"
        note = (f"{a2} - {b2} over {_RANGE_TEXT[r2]}: {'n/a' if second is None else format(second, '+.3f')}; "
                f"per task ({len(tasks)}): {tally}.")
        out.append(claim(CLAIM_KEYS[check], intervals.get((MEAN_OVER_TASKS, r1, contrast_name(a1, b1))),
                         _tally_verdict(results), criterion, context=context, note=note))
    return out
