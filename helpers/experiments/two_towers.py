"""Paper B (Yu & Ananiadou 2024), idea 2: value-output vectors carry the labels, query and key are two towers.

In the in-context heads (:mod:`helpers.experiments.incontext_heads`), the value-output vector at each
demonstration's label position carries that label, and a prediction moves from foo to bar because the
*attention* at q moves between the foo and bar positions (query and key compute a similarity, like two towers),
not because the value-output vectors change. Read at the last position ``q`` (:mod:`helpers.core.heads`).

Definitions (fixed before any result was looked at):

- **Value-output vector** of source position j for head (l, h) at q: ``A[q, j] * (v_j @ W_O[l, h])`` (GQA:
  query head h reads KV head ``h // (n_heads // n_kv_heads)``) (:func:`value_output_vectors`). Summed over j
  it is the head's output at q (b_O excluded).
- Its **logit minus** is ``log p(foo) - log p(bar)`` of the vector projected through the (frozen)
  post-attention norm, the final norm with its scale frozen at that of the actual final residual at q, and
  ``W_U`` - i.e. a logit difference, since the log-softmax normaliser cancels. :func:`value_outputs` reports
  it per unit attention (``vo_lm``, from ``v_j @ W_O``) and attention-weighted (``wvo_lm``).
- **Label-carrying rate**: the share of (input, head, label position) whose ``vo_lm`` has the sign of the
  position's label (foo > 0, bar < 0) (:func:`label_carrying_rate`).
- **Two towers** (:func:`two_towers`): per input, ``d_attn`` = attention on foo positions minus on bar
  positions (summed over the heads) and ``d_vo`` = mean ``vo_lm`` at foo positions minus at bar positions;
  their correlations with the model's logit minus. With one fixed demonstration set the value-output
  vectors are identical for every query (causal attention), so the analysis uses prompts that each have
  their own demonstrations (:func:`helpers.core.unrelated.fresh_demo_prompts`).

Cached steps of notebook 07: :func:`value_output_runs`, :func:`towers_runs`; their intervals
(:func:`label_carrying_interval`, :func:`two_towers_intervals`) become notebook 07's claims in
:func:`two_towers_claims`. By hand: :func:`helpers.exercises.two_towers.check_value_output_logit_minus` compares a
reader's projection of one head's value-output vectors with :func:`value_outputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from einops import einsum
from jaxtyping import Float, Int
from tqdm.auto import tqdm

from helpers.core.grid import model_label, run_grid
from helpers.core.heads import Head, collect_at_q, frozen_norm, full_log_probs, has_post_norm, kv_head_index
from helpers.core.prefix import PrefixCache
from helpers.core.prefix_runs import prompt_batches, shared_cache
from helpers.core.prompts import Prompt, check_prompts
from helpers.core.seeds import stream_seed
from helpers.core.store import pins_weights, result_types
from helpers.core.tasks import label_token_ids
from helpers.core.unrelated import (
    EvalSizes,
    UnrelatedTask,
    cached_eval_runs,
    check_sizes,
    eval_sizes,
    fresh_demo_prompts,
    unrelated_args,
)
from helpers.study.claims import Claim, claim
from helpers.study.stats import Interval, bootstrap_means, bootstrap_statistic

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "value_output_vectors",
    "ValueOutputs",
    "value_outputs",
    "label_carrying_rows",
    "label_carrying_rate",
    "label_carrying_interval",
    "value_output_interval_part",
    "two_towers",
    "two_towers_intervals",
    "two_towers_interval_part",
    "two_towers_claims",
    "TowersSizes",
    "two_towers_sizes",
    "towers_seed",
    "value_output_runs",
    "towers_runs",
]


# ------------------------------------------------------------------ value-output vectors


def value_output_vectors(model: HookedTransformer, pattern_q: Float[torch.Tensor, "batch head seq"],
                         v: Float[torch.Tensor, "batch seq kv d_head"], layer: int,
                         heads: Sequence[int] | None = None) -> Float[torch.Tensor, "batch head seq d_model"]:
    """``A[q, j] * (v_j @ W_O[layer, h])`` for every source j (b_O excluded); summed over j = the head's output."""
    hs = torch.arange(model.cfg.n_heads) if heads is None else torch.as_tensor(list(heads))
    vh = v[:, :, kv_head_index(model)[hs]]  # [batch, seq, head, d_head]: each query head's KV head
    W_O = model.blocks[layer].attn.W_O[hs]
    vo = einsum(vh, W_O, "batch seq head d_head, head d_head d_model -> batch head seq d_model")
    return pattern_q[:, hs, :, None] * vo


@result_types
@dataclass
class ValueOutputs:
    heads: list[Head]
    attn: Float[torch.Tensor, "n head demo"]  # A[q, p_k]
    vo_lm: Float[torch.Tensor, "n head demo"]  # logit minus of v_{p_k} W_O (per unit attention)
    wvo_lm: Float[torch.Tensor, "n head demo"]  # attention-weighted
    label_class: Int[torch.Tensor, "n demo"]
    label_pos: Int[torch.Tensor, "n demo"]
    out_lm: Float[torch.Tensor, "n"]  # the model's log p(foo) - log p(bar) at q
    pred: Int[torch.Tensor, "n"]


def value_outputs(model: HookedTransformer, prompts: Sequence[Prompt], label_ids: Sequence[int], heads: Sequence[Head],
                  batch_size: int = 8, progress: bool | str = False, shared: bool = True,
                  cache: PrefixCache | None = None) -> ValueOutputs:
    """Attention and value-output logit minus at every demonstration label position, for ``heads``.

    Prompts sharing their demonstrations run them once (values at the label positions from the prefix
    cache, attention rows from the suffix runs; ``cache``: that prefix already built, keep-everything);
    otherwise (e.g. :func:`helpers.core.unrelated.fresh_demo_prompts`, or ``shared=False``) full prompts run."""
    check_prompts(model, prompts, "read value outputs of", label_ids)
    if len(label_ids) != 2:
        raise ValueError("logit minus needs a binary task (label_ids = [foo, bar])")
    K = {p.n_demos for p in prompts}
    if len(K) != 1:
        raise ValueError("all prompts must have the same number of demonstrations")
    K = K.pop()
    n, S = len(prompts), len(heads)
    layers = sorted({l for l, _ in heads})
    W_U = model.W_U
    u = (W_U[:, label_ids[0]] - W_U[:, label_ids[1]]).float()
    attn = torch.empty(n, S, K)
    vo_lm = torch.empty(n, S, K)
    out_lm = torch.empty(n)
    pred = torch.empty(n, dtype=torch.long)
    if cache is None:
        cache = shared_cache(model, prompts, shared)
    batches = prompt_batches(model, prompts, batch_size, cache)
    with torch.inference_mode():
        for idx, tokens, q in tqdm(batches, desc="value-output", leave=False, disable=not progress):
            batch = [prompts[i] for i in idx]
            st = collect_at_q(model, tokens.to(model.cfg.device), q, want_pattern_layers=layers, cache=cache)
            lp = full_log_probs(model, st["resid_final"])[:, list(label_ids)]
            out_lm[idx] = (lp[:, 0] - lp[:, 1]).cpu()
            pred[idx] = lp.argmax(-1).cpu()
            pos = torch.tensor([p.label_pos for p in batch])  # [b, K] prompt positions
            ar = torch.arange(len(batch))[:, None]
            fs = st["final_scale"][:, None, :] if st["final_scale"] is not None else 1.0
            for s, (l, h) in enumerate(heads):
                v_pos = st["v"][l][ar, pos]  # [b, K, kv, dh]
                ones = torch.ones(len(batch), model.cfg.n_heads, K, dtype=v_pos.dtype, device=v_pos.device)
                vo = value_output_vectors(model, ones, v_pos, l, [h])[:, 0]  # [b, K, d] unweighted
                if has_post_norm(model):
                    vo = frozen_norm(model.blocks[l].ln1_post, vo, st["post_scale"][l][:, None, :])
                vo_lm[idx, s] = (frozen_norm(model.ln_final, vo, fs).float() @ u).cpu()
                attn[idx, s] = st["pattern"][l][ar, h, pos].float().cpu()
    lc = torch.tensor([p.label_class for p in prompts])
    lpos = torch.tensor([p.label_pos for p in prompts])
    return ValueOutputs(list(heads), attn, vo_lm, attn * vo_lm, lc, lpos, out_lm, pred)


def label_carrying_rows(vo: ValueOutputs) -> np.ndarray:
    """Per input, the share of (head, label position) whose value-output logit minus has the sign of the
    position's label (foo > 0, bar < 0)."""
    want = 1 - 2 * vo.label_class[:, None, :].float()  # foo(0) -> +1, bar(1) -> -1
    return ((vo.vo_lm * want) > 0).float().flatten(1).mean(1).numpy()


def label_carrying_rate(vo: ValueOutputs) -> float:
    """Share of (input, head, label position) whose value-output logit minus has the sign of the position's
    label (every input has the same number of heads and label positions: the mean of :func:`label_carrying_rows`)."""
    return float(label_carrying_rows(vo).mean())


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


# ------------------------------------------------------------------ two towers


def _corr(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def two_towers(vo: ValueOutputs) -> dict:
    """Per input: attention difference d_attn = sum over heads of (attention on foo positions - on bar
    positions) and value-output difference d_vo = mean over heads of (mean vo_lm at foo positions - at bar
    positions, per unit attention). Pearson correlation of each with the model's logit minus, and with the
    predicted label (point-biserial, foo = 1); coefficient of variation (std / |mean|) of each."""
    foo = (vo.label_class == 0).float()[:, None, :]
    bar = 1 - foo
    d_attn = ((vo.attn * foo).sum(-1) - (vo.attn * bar).sum(-1)).sum(1)
    d_vo = ((vo.vo_lm * foo).sum(-1) / foo.sum(-1).clamp(min=1) - (vo.vo_lm * bar).sum(-1) / bar.sum(-1).clamp(min=1)).mean(1)
    is_foo = (vo.pred == 0).float()
    cv = lambda x: float(x.std() / x.mean().abs().clamp(min=1e-8))
    return {
        "d_attn": d_attn, "d_vo": d_vo,
        "corr_attn_logit_minus": _corr(d_attn, vo.out_lm), "corr_vo_logit_minus": _corr(d_vo, vo.out_lm),
        "corr_attn_pred": _corr(d_attn, is_foo), "corr_vo_pred": _corr(d_vo, is_foo),
        "cv_attn": cv(d_attn), "cv_vo": cv(d_vo),
        "frac_pred_foo": float(is_foo.mean()),
    }


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
        ca = [_corr(cols[t][0][i], out_lm[t][i]) for t, i in idx.items()]
        cv = [abs(_corr(cols[t][1][i], out_lm[t][i])) for t, i in idx.items()]
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


# ------------------------------------------------------------------ notebook 07's claims


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


# ------------------------------------------------------------------ sizes and cached runs (notebook 07)


@dataclass(frozen=True)
class TowersSizes(EvalSizes):
    """The evaluation sizes (:class:`helpers.core.unrelated.EvalSizes`) and ``n_towers``, the prompts with their own
    demonstrations for the two-towers analysis."""

    n_towers: int


def two_towers_sizes(profile) -> TowersSizes:
    """Run sizes of the value-output and two-towers steps of notebook 07: the shared evaluation sizes
    (:func:`helpers.core.unrelated.eval_sizes`) and ``n_towers``."""
    n_towers = {"smoke": 8, "default": 32}.get(profile.name, 200)
    return TowersSizes(**asdict(eval_sizes(profile)), n_towers=n_towers)


def towers_seed(sizes: EvalSizes) -> int:
    """Seed of the two-towers prompts: the first seed + 2000."""
    return stream_seed("two_way", sizes.seeds[0])


def value_output_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                      sizes: EvalSizes, seeds: Sequence[int] | None = None, batch_size: int = 16,
                      model_name: str | None = None) -> dict[tuple[str, int], ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on the evaluation prompts, per (task, seed) (cache kind
    ``"heads_vo"``). Returns ``{(task, seed): ValueOutputs}``."""
    def run(ps, hs, _seed):
        return value_outputs(model, ps.prompts, ps.label_ids, hs, batch_size)

    return cached_eval_runs("heads_vo", model, uts, sizes, seeds, model_name, run, heads=heads)


@pins_weights
def towers_runs(model: HookedTransformer, uts: dict[str, UnrelatedTask], heads: dict[str, Sequence[Head]],
                sizes: TowersSizes, batch_size: int = 16, model_name: str | None = None) -> dict[str, ValueOutputs]:
    """:func:`value_outputs` of ``heads[task]`` on ``sizes.n_towers`` prompts that each have their own
    demonstrations (:func:`helpers.core.unrelated.fresh_demo_prompts`, seed :func:`towers_seed`), per task
    (cache kind ``"heads_towers"``); :func:`two_towers` reads them. Returns ``{task: ValueOutputs}``."""
    check_sizes(sizes, TowersSizes, "two_towers_sizes(profile)")
    name, K, seed = model_label(model, model_name), sizes.k_per_class, towers_seed(sizes)
    unrelated_args(uts)

    def compute(t, seed):
        prompts = fresh_demo_prompts(model, uts[t], seed, sizes.n_towers, K)
        return value_outputs(model, prompts, label_token_ids(model.tokenizer, uts[t].task), heads[t], batch_size)

    runs = run_grid("heads_towers", model, list(uts), [seed], compute,
                    lambda t, _: {"k": K, "n": sizes.n_towers, "heads": heads[t]}, model_name=name)
    return {t: runs[(t, seed)] for t in uts}
