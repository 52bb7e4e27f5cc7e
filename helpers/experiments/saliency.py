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
import functools
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from tqdm.auto import tqdm

from helpers.core.checks import ArgumentError, CheckFailed, grader, likely_mistake
from helpers.core.predict import length_batches, logits_at
from helpers.core.prompts import Prompt, build_prompt, check_prompts, pad_batch, sample_demos, sample_test
from helpers.core.store import cached, pins_weights
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split, run_args
from helpers.core.tl_patches import frozen_params
from helpers.study.claims import claim
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
    "check_attention_patterns",
    "check_pattern_saliency",
    "check_saliency_flows",
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
        del patterns, grads
        lens = torch.tensor([len(p) for p in prompts], device=sal.device)
        pos = torch.arange(tokens.shape[1], device=sal.device)
        valid = pos[None, :] < lens[:, None]  # [batch, seq]
        sal = sal * (valid[:, None, :, None] & valid[:, None, None, :])
    return sal.cpu()


def _batches(model, prompts: Sequence[Prompt], batch_size: int, max_pattern_mb: float) -> list[list[int]]:
    """Length-grouped batches, split further so one batch's attention patterns stay under ``max_pattern_mb``."""
    per_pos = model.cfg.n_layers * model.cfg.n_heads * 4 / 2**20  # MB per (query, key) pair, float32
    out = []
    for idx in length_batches(prompts, batch_size):
        T = max(len(prompts[i]) for i in idx)
        cap = max(1, int(max_pattern_mb // (per_pos * T * T)))
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
    ``max_pattern_mb`` (the backward pass keeps a few times that alive).
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
    return mean / mean.sum(-1, keepdim=True)


def first_layer_pq_exceeds_wp(rel: Float[torch.Tensor, "layer 3"]) -> int | None:
    """First layer index (0-based) where relative S_pq > S_wp, or None if it never does."""
    hit = torch.nonzero(rel[:, 1] > rel[:, 0]).flatten()
    return int(hit[0]) if len(hit) else None


def saliency_prompts(model, task, seed: int, n: int, k_per_class: int = 1, max_len: int | None = None
                     ) -> tuple[list[Prompt], list[int]]:
    """``n`` test queries, each with its own freshly drawn demonstrations (the paper's saliency setting).

    Queries: the test split shuffled with ``seed`` (first ``n``, over-long ones skipped).
    Demonstrations of the i-th query: :func:`sample_demos` with seed ``seed * 100_003 + i``,
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
        demos = sample_demos(train, task, k_per_class, seed * 100_003 + i)
        p = build_prompt(model, task, demos, qd, label_ids=lids)
        if len(p) <= max_len:
            prompts.append(p)
    return prompts, lids


def saliency_sizes(profile) -> dict:
    """Run size of notebook 01: ``profile.n_saliency`` inputs per task and seed (every task, AGNews too: its
    prompts are ~6x longer than SST-2's and its backward passes the costliest), all of the profile's seeds,
    batches of 16 inputs split further by the attention patterns' memory (:func:`saliency_flow`)."""
    n = int(profile.n_saliency)
    return {"seeds": tuple(profile.seeds), "n": {t: n for t in profile.tasks}, "batch_size": 16}


@pins_weights
def saliency_runs(model, tasks: Sequence[str], seeds: Sequence[int], n: dict | int, batch_size: int = 4,
                  profile: str = "", progress: bool = True):
    """Per-input ``(S_wp, S_pq, S_ww)`` for every (task, seed), cached on disk.

    Returns ``{(task, seed): Float[Tensor, "n layer 3"]}`` (raw, not relative).
    ``n``: inputs per task and seed (an int or a per-task dict, e.g. :func:`saliency_sizes`).
    """
    tasks, seeds = run_args(tasks, seeds, n=n)
    name = getattr(model.cfg, "icl_model_name", model.cfg.model_name)
    out = {}
    combos = [(t, s) for t in tasks for s in seeds]
    for task, seed in tqdm(combos, desc="saliency", disable=not progress):
        k = n[task] if isinstance(n, dict) else int(n)

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LabelWordWarning)
                prompts, lids = saliency_prompts(model, task, seed, k)
            return saliency_flow(model, prompts, lids, batch_size=batch_size)

        out[(task, seed)] = cached("saliency_flow", {"model": name, "task": task, "seed": seed, "n": k,
                                                     "profile": profile}, run, model=model)
    return out


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


# --- the mechanism by hand: checks of a reader's functions against the helpers, on tiny random models ---

TINY_KINDS = ("gpt2", "rotary", "gqa")


@functools.cache
def _tiny_model(kind: str):
    from helpers.core.models import make_tiny_model

    return make_tiny_model(kind, seed=0)


def _tiny_saliency_setups(n: int = 2):
    """``(kind, model, prompts, label_ids)`` for the three tiny architectures: ``n`` SST-2 prompts each, every
    prompt with its own demonstrations (as :func:`saliency_prompts` draws them)."""
    for kind in TINY_KINDS:
        model = _tiny_model(kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)
            prompts, lids = saliency_prompts(model, "sst2", seed=0, n=n)
        yield kind, model, prompts, lids


def _first_difference(mine: torch.Tensor, ref: torch.Tensor, names: Sequence[str]) -> str:
    """Where ``mine`` and ``ref`` differ most, as ``"name=i, ...: yours x, reference y"``."""
    idx = np.unravel_index(int((mine - ref).abs().argmax()), tuple(ref.shape))
    where = ", ".join(f"{n}={int(i)}" for n, i in zip(names, idx))
    return f"{where}: yours {float(mine[idx]):.4g}, reference {float(ref[idx]):.4g}"


def _assert_matches(mine, ref: torch.Tensor, what: str, names: Sequence[str], rtol: float = 1e-3,
                    mistakes=None) -> None:
    """Raise :class:`CheckFailed` saying what differs; ``mistakes()`` gives ``(message, compute)`` typical wrong
    versions (:func:`helpers.core.checks.likely_mistake`), tried only when the values differ."""
    if not isinstance(mine, torch.Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(mine).__name__}")
    mine = mine.detach().float().cpu()
    if tuple(mine.shape) != tuple(ref.shape):
        raise CheckFailed(f"{what}: shape {tuple(mine.shape)}, expected {tuple(ref.shape)} "
                             f"[{', '.join(names)}]")
    if torch.isnan(mine).any():
        raise CheckFailed(f"{what}: NaN at {_first_difference(torch.isnan(mine).float(), torch.zeros_like(ref), names)}")
    atol = 1e-4 * float(ref.abs().max()) + 1e-9
    if not torch.allclose(mine, ref, rtol=rtol, atol=atol):
        cause = likely_mistake(mine, mistakes(), atol=atol, rtol=rtol) if mistakes else None
        raise CheckFailed(f"{what} differs from the reference; largest difference at "
                          f"{_first_difference(mine, ref, names)}. " + (cause or "Compare your steps with the "
                                                                       "docstring, one at a time."))


def _pattern_saliency_mistakes(model, p, lids):
    """Typical wrong versions of the by-hand saliency of one prompt, each with its likely cause."""
    def parts(target: str = "gold", vocab: str = "labels"):
        patterns = []

        def keep(pattern, hook):
            pattern.retain_grad()
            patterns.append(pattern)

        with torch.enable_grad():
            logits = model.run_with_hooks(p.tokens[None], fwd_hooks=[(f"blocks.{l}.attn.hook_pattern", keep)
                                                                     for l in range(model.cfg.n_layers)])[0, p.q]
            cols = logits[list(lids)] if vocab == "labels" else logits
            gold = p.gold if vocab == "labels" else list(lids)[p.gold]
            y = int(cols.argmax()) if target == "pred" else gold
            torch.nn.functional.cross_entropy(cols[None], torch.tensor([y])).backward()
        model.zero_grad(set_to_none=True)
        return (torch.stack([a[0] for a in patterns]).detach(), torch.stack([a.grad[0] for a in patterns]))

    A, G = parts()
    n_heads = A.shape[1]
    return [
        ("You took the absolute value per head, then summed: sum over heads first, then abs.",
         lambda: (A * G).abs().sum(1)),
        ("No absolute value: I is |sum over heads of A * dL/dA|.", lambda: (A * G).sum(1)),
        ("You averaged over heads: sum them.", lambda: (A * G).sum(1).abs() / n_heads),
        ("This is |dL/dA| without the pattern: multiply by A (elementwise) before summing over heads.",
         lambda: G.sum(1).abs()),
        ("The loss is over the whole vocabulary: restrict the logits at q to label_ids first, then take the "
         "cross-entropy against the gold class.", lambda: (lambda a, g: (a * g).sum(1).abs())(*parts(vocab="full"))),
        ("The loss is against the predicted class: use the gold class, prompt.gold.",
         lambda: (lambda a, g: (a * g).sum(1).abs())(*parts(target="pred"))),
    ]


def _flow_mistakes(I: torch.Tensor, p):
    """Typical wrong versions of the three flows of one prompt's saliency matrices, each with its likely cause."""
    n = I.shape[-1]

    def flows(strict: bool = True, reduce: str = "mean", ww_rest: bool = False, shift: int = 0):
        earlier = torch.ones(n, n, dtype=torch.bool).tril(-1 if strict else 0)
        rows = [x + shift for x in p.label_pos]
        wp = torch.zeros(n, n, dtype=torch.bool)
        wp[rows] = earlier[rows]
        pq = torch.zeros(n, n, dtype=torch.bool)
        pq[p.q, rows] = True
        ww = earlier & ~wp & ~pq
        if ww_rest:
            ww = torch.ones(n, n, dtype=torch.bool).tril(-1) & ~wp & ~pq | ~torch.ones(n, n, dtype=torch.bool).tril()
        out = [I[:, m].mean(-1) if reduce == "mean" else I[:, m].sum(-1) for m in (wp, pq, ww)]
        return torch.stack(out, dim=-1)

    return [
        ("You counted the diagonal (j = i): the flows take only earlier positions, j < i.",
         lambda: flows(strict=False)),
        ("These are sums: the flows are means over their pairs.", lambda: flows(reduce="sum")),
        ("S_ww takes every other pair above the diagonal too: only pairs with j < i count (the rest of a causal "
         "saliency matrix is zero, and counting it lowers the mean).", lambda: flows(ww_rest=True)),
        ("Your label positions are one after the label words: use prompt.label_pos as it is.",
         lambda: flows(shift=1)),
        ("Your label positions are one before the label words: use prompt.label_pos as it is.",
         lambda: flows(shift=-1)),
        ("The three flows are in another order: return S_wp, S_pq, S_ww in that order.",
         lambda: flows()[:, [1, 0, 2]]),
    ]


@grader
def check_attention_patterns(fn) -> None:
    """Check a by-hand ``fn(model, tokens) -> [layer, head, query, key]`` (every layer's attention pattern of one
    sequence, from a cache) on the tiny models of the three architectures. Raises :class:`CheckFailed` naming the
    likely mistake, or prints one line."""
    name = getattr(fn, "__name__", "your function")
    for kind, model, prompts, _ in _tiny_saliency_setups(n=1):
        tokens = prompts[0].tokens
        with torch.inference_mode():
            _, cache = model.run_with_cache(tokens[None])
            ref = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float().cpu()
            mine = fn(model, tokens)
        scores = torch.stack([cache["attn_scores", l][0] for l in range(model.cfg.n_layers)]).float().cpu()

        def mistakes(ref=ref, scores=scores):
            return [("These are the scores before the softmax (hook_attn_scores): the pattern is after it "
                     "(hook_pattern).", lambda: scores),
                    ("Query and key are swapped (the pattern transposed): keep the axes as the cache has them.",
                     lambda: ref.transpose(-1, -2))]

        if isinstance(mine, torch.Tensor) and mine.ndim == 5 and mine.shape[1] == 1:
            raise CheckFailed(f"{name} on the tiny {kind} model: shape {tuple(mine.shape)} keeps the batch axis: "
                              "take [0] of each layer's pattern")
        if isinstance(mine, torch.Tensor) and tuple(mine.shape) == tuple(ref.shape[1:]):
            raise CheckFailed(f"{name} on the tiny {kind} model: shape {tuple(mine.shape)} is one layer's: stack "
                              f"all {model.cfg.n_layers} layers")
        _assert_matches(mine, ref, f"{name} on the tiny {kind} model ({len(tokens)} tokens)",
                        ("layer", "head", "query", "key"), rtol=1e-4, mistakes=mistakes)
    print(f"✓ {name} matches the cached patterns on 3 tiny models")


@grader
def check_pattern_saliency(fn) -> None:
    """Check a by-hand ``fn(model, prompt, label_ids) -> I`` (``[layer, seq, seq]``, the saliency matrices of
    one prompt) against :func:`saliency_matrices` on tiny random models of the three architectures (two SST-2
    prompts each). Raises an AssertionError that says what differs, or prints one line."""
    for kind, model, prompts, lids in _tiny_saliency_setups():
        refs = saliency_matrices(model, prompts, lids)
        for p, ref in zip(prompts, refs):
            mine = fn(model, p, lids)
            if any(w.grad is not None for w in model.parameters()):
                model.zero_grad(set_to_none=True)
            _assert_matches(mine, ref, f"{fn.__name__} on the tiny {kind} model ({len(p)}-token prompt)",
                            ("layer", "row i (to)", "column j (from)"),
                            mistakes=lambda: _pattern_saliency_mistakes(model, p, lids))
    print(f"✓ {fn.__name__} matches the reference (saliency_matrices) on 3 tiny models")


@grader
def check_saliency_flows(fn) -> None:
    """Check a by-hand ``fn(I, prompt) -> flows`` (``[layer, 3]``: S_wp, S_pq, S_ww per layer, from one
    prompt's unpadded saliency matrices ``I [layer, seq, seq]``) against :func:`flow_scores`, on the saliency
    matrices of tiny random models of the three architectures and on random matrices of the same shape."""
    gen = torch.Generator().manual_seed(0)
    for kind, model, prompts, lids in _tiny_saliency_setups():
        for p, sal in zip(prompts, saliency_matrices(model, prompts, lids)):
            for name, I in (("its saliency", sal), ("random matrices", torch.rand(sal.shape, generator=gen).tril())):
                ref = flow_scores(I[None], [p])[0]
                _assert_matches(fn(I, p), ref, f"{fn.__name__} on the tiny {kind} model ({len(p)}-token prompt, "
                                f"{name}; label positions {p.label_pos}, q={p.q})", ("layer", "flow (S_wp, S_pq, S_ww)"),
                                rtol=1e-4, mistakes=lambda: _flow_mistakes(I, p))
    print(f"✓ {fn.__name__} matches the reference (flow_scores) on 3 tiny models")


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
