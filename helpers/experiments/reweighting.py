"""Anchor re-weighting (paper A, §3.1).

Reading the attention from the target position q to the label positions p_i as
a classifier suggests a learnable bias per (layer, head, demonstration):

    A'(q, p_i) = exp(beta[l, h, i]) * A(q, p_i)

applied to the post-softmax pattern (``hook_pattern``) in every layer, without
renormalising the row. ``beta = 0`` is the identity. Only ``beta`` is trained
(Adam, cross-entropy on the label-restricted logits at q); the model's own
parameters are frozen for the duration of training and restored afterwards.

Training data (paper A §3.1, arXiv 2305.14160): the 4 extra train examples per class drawn right
after the 1-shot demonstrations by :func:`helpers.core.prompts.class_draws` (draws
2..5 of each class, disjoint from the demonstrations), each wrapped with the
same 1-shot demonstrations.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from tqdm.auto import tqdm

from helpers.core.predict import logits_at, predict, unembed_at
from helpers.core.prefix import (
    extend_prefix,
    run_prefix,
    shared_prefix_len,
    suffix_logits,
)
from helpers.core.prefix_ragged import ragged_fits, ragged_token_forward
from helpers.core.prefix_runs import predict_shared, vanilla_predictions
from helpers.core.prompts import (
    Demo,
    Prompt,
    build_prompts,
    check_prompts,
    class_draws,
    demos_from_indices,
    pad_batch,
    sample_demos,
    sample_test,
)
from helpers.core.sizing import FORWARD_BATCH
from helpers.core.store import result_types
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split
from helpers.core.tl_patches import frozen_params

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["reweighted_label_logits_reference", "ReweightResult", "reweight_hooks", "reweight_factory", "train_reweighting", "train_reweighting_many", "table1_train_prompts", "reweight_train_demos", "vanilla_5shot_demos", "Table1Row", "run_table1", "FIVE_SHOT_PER_CLASS", "SETTINGS"]


def _label_pos_tensor(prompts: Sequence[Prompt], n_demos: int) -> torch.Tensor:
    bad = [i for i, p in enumerate(prompts) if p.n_demos != n_demos]
    if bad:
        raise ValueError(f"prompts {bad[:5]} have a different number of demonstrations than beta "
                         f"({n_demos}); build every prompt with the same demonstrations.")
    return torch.tensor([p.label_pos for p in prompts], dtype=torch.long)


def reweight_hooks(beta: Float[torch.Tensor, "*row layer head demo"], prompts: Sequence[Prompt],
                   q_rows: torch.Tensor | None = None) -> list:
    """``(hook name, fn)`` pairs multiplying ``pattern[b, h, q_b, p_i]`` by ``exp(beta[l, h, i])``.

    Row ``b`` of the batch is ``prompts[b]``; its q and label positions are read
    from the position record. No renormalisation. Differentiable in ``beta``.
    Also works when the prompt's prefix comes from a keep-everything KV cache
    (the pattern then has fewer query rows than keys; key positions are unchanged).
    ``beta`` with a leading row axis ``[B, layer, head, demo]`` gives row ``b`` its own ``beta[b]``;
    ``q_rows``: the query row of each batch row in the pattern (default: q minus the cached positions).
    """
    n_layers, n_heads, n_demos = beta.shape[-3:]
    per_row = beta.dim() == 4
    pos = _label_pos_tensor(prompts, n_demos)  # [B, n]
    q = torch.tensor([p.q for p in prompts], dtype=torch.long)

    def make(layer: int):
        def hook(pattern: Float[torch.Tensor, "batch head qpos kpos"], hook):
            B, H, Tq, Tk = pattern.shape
            if H != n_heads:
                raise ValueError(f"beta has {n_heads} heads but layer {layer}'s pattern has {H}")
            rows = torch.arange(B, device=pattern.device)
            qq = q.to(pattern.device) - (Tk - Tq) if q_rows is None else q_rows.to(pattern.device)
            pp = pos.to(pattern.device)
            scale = torch.exp(beta[:, layer] if per_row else beta[layer][None].expand(B, H, n_demos))
            scale = scale.to(pattern)  # [B, H, n], on the pattern's device and dtype (beta may be on the CPU)
            at_q = pattern[rows, :, qq, :]  # [B, H, kpos]
            ones = torch.ones_like(at_q)
            mult = ones.scatter(2, pp[:, None, :].expand(B, H, n_demos), scale)
            out = pattern.clone()
            out[rows, :, qq, :] = at_q * mult
            return out

        return hook

    return [(f"blocks.{l}.attn.hook_pattern", make(l)) for l in range(n_layers)]


def reweight_factory(beta: Float[torch.Tensor, "layer head demo"]):
    """A :func:`helpers.core.predict.predict` hook factory applying the learned ``beta``."""
    beta = beta.detach()
    return lambda batch, tokens, offset=0: reweight_hooks(beta, batch)  # rows found from the pattern's shape


def reweight_train_demos(train, task, seed: int, per_class: int = 4) -> tuple[list[Demo], list[Demo]]:
    """``(demos, train_examples)``: the 1-shot demonstrations (as in
    :func:`helpers.core.prompts.sample_demos`) and ``per_class`` extra examples per
    class (draws 2..1+per_class, disjoint from the demonstrations)."""
    task = get_task(task)
    demos = sample_demos(train, task, 1, seed)
    draws = class_draws(train, task, 1 + per_class, seed)
    assert sorted(d.idx for d in demos) == sorted(per[0] for per in draws), "nested draws broken"
    extra = [i for per in draws for i in per[1:]]
    return demos, demos_from_indices(train, extra)


def vanilla_5shot_demos(train, task, shots_per_class: int, seed: int) -> list[Demo]:
    """The vanilla many-shot baseline of Table 1: ``shots_per_class`` demonstrations per class.

    These are the demonstrations of notebook 00's vanilla 5-shot run
    (:func:`helpers.core.prompts.sample_demos`, same order): the draws are nested, so
    they are the 1-shot demonstrations plus the first ``shots_per_class - 1``
    re-weighting training examples of every class, and both notebooks score the
    same prompts.
    """
    return sample_demos(train, task, shots_per_class, seed)


@result_types
@dataclass
class ReweightResult:
    beta: Float[torch.Tensor, "layer head demo"]
    losses: list[float]  # per optimisation step
    epoch_losses: list[float]  # mean training loss per epoch
    demo_classes: list[int] = field(default_factory=list)  # class of demonstration i (beta's last axis)


def train_reweighting(model: HookedTransformer, train_prompts: Sequence[Prompt], label_ids: Sequence[int], epochs: int = 10,
                      lr: float = 0.01, batch_size: int = 1, seed: int = 0, progress: bool | str = False,
                      adam_betas: tuple[float, float] = (0.9, 0.999), fast: bool = True) -> ReweightResult:
    """Learn beta [n_layers, n_heads, n_demos] on ``train_prompts`` (all with the same demonstrations).

    Adam(lr, ``adam_betas``); each epoch visits the prompts in an order
    shuffled with ``seed``; loss = cross-entropy of the label-restricted logits
    at q against the prompt's gold label. Model parameters get
    ``requires_grad_(False)`` during training and their flags are restored after.

    ``fast`` (batch size 1 only): beta changes only the attention row of q, so
    every earlier position is independent of beta (causal attention). The
    shared demonstrations run once (:func:`helpers.core.prefix.run_prefix`), each
    training prompt's query up to q extends that cache once
    (:func:`helpers.core.prefix.extend_prefix`), and every step runs only the last
    token through the model with gradients, computing only the label logits.
    This is the same function of beta as the full run (a test checks the
    trained betas agree), ~prompt-length times cheaper.
    """
    if not train_prompts:
        raise ValueError("no training prompts")
    check_prompts(model, train_prompts, "train re-weighting on", label_ids)
    if any(p.gold is None for p in train_prompts):
        raise ValueError("training prompts need gold labels: build them from Demo queries")
    n_demos = train_prompts[0].n_demos
    _label_pos_tensor(train_prompts, n_demos)
    cfg = model.cfg
    device = cfg.device
    beta = torch.zeros(cfg.n_layers, cfg.n_heads, n_demos, device=device, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([beta], lr=lr, betas=adam_betas)
    ids = torch.tensor(list(label_ids), device=device)
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    rng = np.random.default_rng(seed)
    losses, epoch_losses = [], []
    fast = fast and batch_size == 1 and cfg.positional_embedding_type in ("rotary", "standard")
    caches = []
    if fast:
        p0 = shared_prefix_len(train_prompts)
        demos = run_prefix(model, train_prompts[0].tokens[:p0])
        caches = [extend_prefix(model, demos, p.tokens[p0: p.q]) for p in train_prompts]
    with frozen_params(model), torch.enable_grad():
        for _ep in tqdm(range(epochs), desc=progress if isinstance(progress, str) else "re-weighting",
                        disable=not progress, leave=False):
            order = rng.permutation(len(train_prompts))
            ep_loss = []
            for s in range(0, len(order), batch_size):
                batch = [train_prompts[i] for i in order[s:s + batch_size]]
                if fast:
                    p = batch[0]
                    logits = suffix_logits(model, caches[order[s]], p.tokens[p.q:][None], torch.tensor([0]),
                                           reweight_hooks(beta, batch), vocab=ids)
                else:
                    tokens, q = pad_batch(batch, pad)
                    logits = logits_at(model, tokens.to(device), q, reweight_hooks(beta, batch))[:, ids]
                gold = torch.tensor([p.gold for p in batch], device=device)
                loss = F.cross_entropy(logits.float(), gold)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                ep_loss.append(losses[-1] * len(batch))
            epoch_losses.append(sum(ep_loss) / len(order))
    return ReweightResult(beta.detach().cpu(), losses, epoch_losses, list(train_prompts[0].label_class))


def train_reweighting_many(model: HookedTransformer, train_sets: Sequence[Sequence[Prompt]], label_ids: Sequence[int],
                           seeds: Sequence[int], epochs: int = 10, lr: float = 0.01,
                           adam_betas: tuple[float, float] = (0.9, 0.999),
                           progress: bool | str = False) -> list[ReweightResult]:
    """:func:`train_reweighting` (batch size 1) of several independent runs at once: run ``r`` learns its own
    beta on ``train_sets[r]`` (its own demonstrations) with its own shuffling ``seeds[r]``.

    A training step of one run is one token through the model, so it is bound by reading the weights, not by
    arithmetic: here step ``s`` of every run is one forward and one backward of all runs' tokens together
    (:func:`helpers.core.prefix_ragged.ragged_token_forward`, each row after its own cache). The loss is the sum of the
    runs' losses, so each beta receives exactly its own run's gradient, and one Adam over the stacked betas is
    elementwise the runs' separate Adams. Equal to separate :func:`train_reweighting` runs (tests). The runs must
    have as many training prompts and demonstrations as each other (same task); where the sliding window of a
    model cannot be honoured by the stacked caches, each run trains alone.
    """
    if len(train_sets) != len(seeds) or not train_sets:
        raise ValueError("give one seed per training set, and at least one set")
    sizes = {(len(ps), ps[0].n_demos if ps else 0) for ps in train_sets}
    if len(sizes) != 1 or not train_sets[0]:
        raise ValueError(f"every run needs as many training prompts and demonstrations as the others, got "
                         f"(prompts, demonstrations) {sorted(sizes)}; train runs of one task together")
    single = dict(epochs=epochs, lr=lr, batch_size=1, adam_betas=adam_betas)
    if len(train_sets) == 1 or model.cfg.positional_embedding_type not in ("rotary", "standard"):
        return [train_reweighting(model, ps, label_ids, seed=sd, **single) for ps, sd in zip(train_sets, seeds)]
    for ps in train_sets:
        check_prompts(model, ps, "train re-weighting on", label_ids)
        if any(p.gold is None for p in ps):
            raise ValueError("training prompts need gold labels: build them from Demo queries")
        _label_pos_tensor(ps, ps[0].n_demos)
    if not ragged_fits(model, [p.q for ps in train_sets for p in ps]):  # a sliding window stacking would cut
        return [train_reweighting(model, ps, label_ids, seed=sd, **single) for ps, sd in zip(train_sets, seeds)]
    R, n, n_demos = len(train_sets), len(train_sets[0]), train_sets[0][0].n_demos
    caches = []  # each training prompt's cache up to q (its last token runs in every step)
    for ps in train_sets:
        p0 = shared_prefix_len(ps)
        demos = run_prefix(model, ps[0].tokens[:p0])
        caches.append([extend_prefix(model, demos, p.tokens[p0: p.q]) for p in ps])
    cfg, device = model.cfg, model.cfg.device
    beta = torch.zeros(R, cfg.n_layers, cfg.n_heads, n_demos, device=device, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([beta], lr=lr, betas=adam_betas)
    ids = torch.tensor(list(label_ids), device=device)
    rngs = [np.random.default_rng(sd) for sd in seeds]
    losses = [[] for _ in range(R)]
    epoch_losses = [[] for _ in range(R)]
    with frozen_params(model), torch.enable_grad():
        for _ep in tqdm(range(epochs), desc=progress if isinstance(progress, str) else "re-weighting",
                        disable=not progress, leave=False):
            orders = [rng.permutation(n) for rng in rngs]
            sums = [0.0] * R
            for s in range(n):
                pick = [int(o[s]) for o in orders]
                batch = [train_sets[r][i] for r, i in enumerate(pick)]
                tokens = torch.stack([p.tokens[p.q] for p in batch]).to(device)
                hooks = reweight_hooks(beta, batch, q_rows=torch.zeros(R, dtype=torch.long))
                resid = ragged_token_forward(model, [caches[r][i] for r, i in enumerate(pick)], tokens, hooks)
                logits = unembed_at(model, resid[:, None, :], torch.zeros(R, dtype=torch.long), vocab=ids)
                gold = torch.tensor([p.gold for p in batch], device=device)
                each = F.cross_entropy(logits.float(), gold, reduction="none")
                opt.zero_grad()
                each.sum().backward()
                opt.step()
                for r in range(R):
                    losses[r].append(float(each[r].detach()))
                    sums[r] += losses[r][-1]
            for r in range(R):
                epoch_losses[r].append(sums[r] / n)
    return [ReweightResult(beta[r].detach().cpu(), losses[r], epoch_losses[r], list(train_sets[r][0].label_class))
            for r in range(R)]


@result_types
@dataclass
class Table1Row:
    task: str
    seed: int
    acc_1shot: float
    acc_5shot: float  # vanilla many-shot (5 per class; 3 for AGNews)
    acc_reweight: float
    result: ReweightResult
    n_test: int
    n_dropped: int
    # per test input (same inputs, same order in all three): 1 if predicted right, and the test row
    correct_1shot: list[int] = field(default_factory=list)
    correct_5shot: list[int] = field(default_factory=list)
    correct_reweight: list[int] = field(default_factory=list)
    idx: list[int] = field(default_factory=list)


# the paper's "5-shot" baseline uses 3 per class for AGNews (context length)
FIVE_SHOT_PER_CLASS = {"agnews": 3}


def table1_train_prompts(model: HookedTransformer, task, seed: int, per_class: int = 4) -> list[Prompt]:
    """Re-weighting's training prompts of one (task, seed): each of :func:`reweight_train_demos`'s extra examples
    after the 1-shot demonstrations."""
    task = get_task(task)
    demos, extra = reweight_train_demos(load_split(task, "train"), task, seed, per_class)
    return build_prompts(model, task, demos, extra)[0]


def run_table1(model: HookedTransformer, task, seed: int, n_test: int, epochs: int = 10, lr: float = 0.01, batch_size: int = 1,
               per_class: int = 4, eval_batch_size: int = FORWARD_BATCH, progress: bool = False,
               shots_per_class: int | None = None, trained: ReweightResult | None = None) -> Table1Row:
    """Table 1 for one (task, seed): vanilla 1-shot, vanilla 5-shot and re-weighting accuracy.

    ``shots_per_class`` of the vanilla many-shot baseline: default 1 + ``per_class``
    (5), 3 for AGNews as in the paper (:data:`FIVE_SHOT_PER_CLASS`).

    All three conditions are scored on the same test rows: the test sample is
    the one of :func:`helpers.core.prompts.sample_test` minus rows whose 5-shot
    prompt exceeds the context (counted in ``n_dropped``).
    """
    task = get_task(task)
    train, test = load_split(task, "train"), load_split(task, "test")
    demos, extra = reweight_train_demos(train, task, seed, per_class)
    with warnings.catch_warnings():  # multi-token label words: notebook 00's task table shows the splits
        warnings.simplefilter("ignore", LabelWordWarning)
        lids = label_token_ids(model.tokenizer, task)
    queries = sample_test(test, n_test, seed)
    shots = shots_per_class or FIVE_SHOT_PER_CLASS.get(task.name, 1 + per_class)
    five = vanilla_5shot_demos(train, task, shots, seed)
    extra_k = [d for c in range(task.n_classes) for d in [e for e in extra if e.label == c][: shots - 1]]
    assert {d.idx for d in five} == {d.idx for d in demos + extra_k}, "nested draws broken"
    p5, _ = build_prompts(model, task, five, queries)
    kept = {p.query.idx for p in p5}
    queries = [qd for qd in queries if qd.idx in kept]
    p1, _ = build_prompts(model, task, demos, queries)
    res = trained  # trained with other seeds of the task (table1_runs), or here:
    if res is None:
        p_train, _ = build_prompts(model, task, demos, extra)
        res = train_reweighting(model, p_train, lids, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed,
                                progress=f"train {task.name}" if progress else False)
    # each demonstration set runs once (helpers.core.prefix); beta acts on q's row only, so the prefix is unchanged
    # the unmodified runs are notebook 00's (same prompts: stored by content, helpers.core.prefix_runs.vanilla_predictions)
    r1 = vanilla_predictions(model, p1, lids, eval_batch_size, top_k=0)
    r5 = vanilla_predictions(model, p5, lids, eval_batch_size, top_k=0)
    rr = predict_shared(model, p1, lids, eval_batch_size, top_k=0, hooks=reweight_factory(res.beta))
    assert [p.query.idx for p in p1] == [p.query.idx for p in p5], "1-shot and 5-shot must score the same inputs"

    def correct(r):
        return (r.pred == r.gold).int().tolist()

    return Table1Row(task.name, seed, r1.accuracy, r5.accuracy, rr.accuracy, res, len(p1), n_test - len(p1),
                     correct(r1), correct(r5), correct(rr), [p.query.idx for p in p1])


SETTINGS = {"vanilla 1-shot": "correct_1shot", "vanilla 5-shot": "correct_5shot",
            "anchor re-weighting": "correct_reweight"}  # Table 1's rows and the Table1Row field of each


# ---- the reference on one prompt (notebook 04's exercise is checked against it) and the claims --------------------


def reweighted_label_logits_reference(model: HookedTransformer, prompt: Prompt,
                                      beta: Float[torch.Tensor, "layer head demo"], label_ids: Sequence[int]
                                      ) -> Float[torch.Tensor, " classes"]:
    """The label logits at q of one prompt with ``beta`` applied (:func:`reweight_factory`, as Table 1 scores)."""
    return predict(model, [prompt], label_ids, batch_size=1, top_k=0, hooks=reweight_factory(beta)).label_logits[0]
