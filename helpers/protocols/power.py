"""Checks whose power is known: every check of notebooks 01, 02, 03, 05, 07, 10 and 11, run on populations of
controls whose answer is known both ways.

A verdict on a language model is worth the power of the check behind it. "Inconclusive" can mean that the model
has no such mechanism, that the check is blind, or that the check would say "replicates" on anything. Controls
(:mod:`helpers.core.controls.model`) separate the three, each as a population of checkpoints trained from their own seeds
(:mod:`helpers.core.controls.population`), five on 2 layers x 8 heads and eight on 4 layers x 8 heads:

- **positive controls** (``"wide"``, ``"deep"``): trained on sequences whose class -> label mapping is drawn
  afresh for every sequence, so the answer can only come from the context, through a circuit that is known
  (previous-token heads copy each item into its label; a matching head reads the labels of the query's class at
  q). The mechanism every check looks for is there.
- **negative controls** (``"negative"``, ``"deep-negative"``): the same shapes, prompt format and items, trained
  as long with one fixed mapping and contexts that never show the query's class, so the answer sits in the weights
  and the context is not read (in-weights learning; Chan et al., arXiv 2205.05055). The mechanism is absent.

**A replicate** is one checkpoint of a population, run through a check at the control's run size
(:func:`power_sizes`: the sequences notebook 09 uses per seed) with the notebook's own claim function and
criterion, unchanged, on sequences drawn with its replicate seed (:data:`REPLICATE_SEED` + r for checkpoint r).
Every population's replicate r uses the same seed, so positive and negative checkpoints see the same items with
the same labels: only the model differs. Replicates are training runs, so the intervals say how a check behaves on
the recipe, not on one lucky checkpoint.

From the replicates' verdicts :func:`helpers.study.power_report.power_rows` makes each check's sensitivity (the
share of the positive checkpoints' replicates that say "replicates") and specificity (the share of the negative
ones' that say anything else), with their intervals and the reading fixed before any run; that module also says
which control claim measures which check of the language models. :func:`power_study` runs it all.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helpers.core.controls.model import (
    ControlPrompts,
    ControlTask,
    control_kind,
    control_prompts,
    control_spec,
    control_task,
    relabel,
)
from helpers.core.controls.population import POPULATIONS
from helpers.core.predict import predict
from helpers.core.seeds import stream_seed
from helpers.core.store import cached, same_weights
from helpers.experiments import incontext_heads as ih
from helpers.experiments.aucroc import label_attention, raw_mean_curves
from helpers.experiments.head_ablation import ablation_conditions, sets_ablation_conditions, swap_averaged
from helpers.experiments.isolation import isolation_experiment
from helpers.experiments.positive_control import hidden_anchor_accuracy, label_swap, text_anchor_loyalty
from helpers.experiments.saliency import saliency_flow
from helpers.experiments.two_towers import value_outputs
from helpers.protocols import aucroc as auc
from helpers.protocols import compression as comp
from helpers.protocols import compression_specific as cs
from helpers.protocols import flipped_labels as fl
from helpers.protocols import flipped_specific as fsp
from helpers.protocols import head_ablation as ha
from helpers.protocols import head_scores as hs
from helpers.protocols import isolation as iso
from helpers.protocols import isolation_classes as ic
from helpers.protocols import isolation_context as ictx
from helpers.protocols import label_gathering as lg
from helpers.protocols import label_reading as lr
from helpers.protocols import mapping_control as mc
from helpers.protocols import positive_control as pc
from helpers.protocols import query_stages as qs
from helpers.protocols import saliency as sal
from helpers.protocols import saliency_classes as sc
from helpers.protocols import saliency_context as sctx
from helpers.protocols import two_towers as tt
from helpers.protocols.rankings import control_head_rankings
from helpers.study.claims import Claim, claim
from helpers.study.power_report import NEGATIVE, NEGATIVES, POSITIVE, POSITIVES, Power, power_rows
from helpers.study.profile_table import run_sizes
from helpers.study.profiles import RunSizes
from helpers.study.stats import bootstrap_means

__all__ = ["POSITIVE", "NEGATIVE", "REPLICATE_SEED", "PowerSizes", "power_sizes", "GROUPS", "replicate_claims", "replicate_verdicts",
           "power_runs", "population_models", "replicate_premises", "population_premises", "power_study"]

# replicate r draws its sequences with seed REPLICATE_SEED + r (notebook 09's seeds are the profile's, 42-46: the
# two never meet); within a replicate the streams are notebook 09's: saliency + 500, head ranking + 1000, two-way +
# 2000
REPLICATE_SEED = 70_000


@dataclass(frozen=True)
class PowerSizes(RunSizes):
    """Run sizes of the power measurement (:func:`power_sizes`)."""

    replicates: int  # runs of every check on each control
    n: int  # four-way sequences per replicate (accuracy, isolation, AUCROC, ablations, Hidden_anchor)
    n_saliency: int  # sequences per replicate for the flows (a backward pass each)
    n_attr: int  # sequences ranking the heads (stream_seed("ranking", seed))
    batch_size: int  # sequences per forward pass
    flow_batch_size: int  # sequences per saliency batch (a backward pass)


def power_sizes(profile) -> PowerSizes:
    """Per replicate notebook 09's per-seed sizes (:func:`helpers.protocols.positive_control.control_sizes`);
    one replicate per checkpoint of each population (:attr:`helpers.core.controls.population.Population.seeds`: 5 on
    2 layers and 8 on 4, so a check that sees it on all 13 positive checkpoints of both depths has a sensitivity
    interval of [0.75, 1], and one that fires on none of the 13 negative ones a specificity interval of [0.75, 1]),
    2 per population at ``smoke`` (the code runs; not evidence). ``replicates`` is the most any population has;
    a population runs each of its checkpoints once (:func:`power_runs`)."""
    c = pc.control_sizes(profile)
    most = max(len(POPULATIONS[p].seeds) for p in POSITIVES + NEGATIVES)
    return PowerSizes(replicates=run_sizes("power", profile)["replicates"] or most, n=c.n, n_saliency=c.n_saliency,
                      n_attr=c.n_attr, batch_size=c.batch_size, flow_batch_size=c.flow_batch_size)


# ----------------------------------------------------------------- one replicate


def _compression_05(model, cp: ControlPrompts, seed: int, context: str, full) -> list[Claim]:
    """Notebook 05's label-loyalty checks on the control: Hidden_anchor against Hidden_random (one random item
    per demonstration) and against Text_anchor (the label tokens alone as the context, run afresh:
    :func:`helpers.experiments.positive_control.text_anchor_loyalty`), each a paired gap in points with
    notebook 05's criterion (interval above 0); Hidden_anchor's own verdict is notebook 05's rule on the label
    metric (replicates when both gaps lie above 0, does not replicate when one lies below, else inconclusive).
    ``full``: the predictions with the full context (the AUCROC run's, so the sequences run once for both)."""
    h = hidden_anchor_accuracy(model, cp, seed=seed, full=full)
    text = text_anchor_loyalty(model, cp, full=full)
    key = ("control", seed)
    gaps = {"Hidden_random": bootstrap_means({key: 100 * (h["hidden_anchor_loyal"] - h["hidden_random_loyal"])}),
            "Text_anchor": bootstrap_means({key: 100 * (h["hidden_anchor_loyal"] - text)})}
    out = [claim(f"05.anchor_minus_{o}_label_loyalty", iv, comp.gap_verdict(iv), "interval above 0", unit="points",
                 context=context) for o, iv in gaps.items()]
    both = [comp.gap_verdict(iv) for iv in gaps.values()]
    verdict = ("replicates" if all(v == "replicates" for v in both) else
               "does not replicate" if "does not replicate" in both else "inconclusive")
    out.append(claim("05.hidden_anchor_label_loyalty", bootstrap_means({key: 100 * h["hidden_anchor_loyal"]}), verdict,
                     "notebook 05's rule on label loyalty: replicates if Hidden_anchor minus Text_anchor and minus "
                     "Hidden_random both lie above 0, does not replicate if one lies below", unit="%",
                     context=context))
    return out


def _group_09(model, seed: int, sizes: PowerSizes) -> list[Claim]:
    """The checks of notebooks 01, 02, 03, 05 and 07 on one replicate, as notebook 09 runs them."""
    task, name, bs = _prompt_task(model), model.cfg.icl_model_name, sizes.batch_size
    ctx = f"{name}, replicate seed {seed}, {sizes.n} sequences"
    cp = control_prompts(task, sizes.n, seed)
    key = ("control", seed)
    flow_prompts = control_prompts(task, sizes.n_saliency, stream_seed("control_saliency", seed)).prompts
    flows = {key: saliency_flow(model, flow_prompts, task.label_ids, batch_size=sizes.flow_batch_size)}
    out = sal.saliency_claims(sal.flow_intervals(flows), ["control"], ctx)
    isolated = {key: isolation_experiment(model, cp.prompts, cp.label_ids, ks=(1,), seed=seed, batch_size=bs,
                                              shared=False)}
    out += iso.isolation_claims(*iso.isolation_intervals(iso.loyalty_frame(isolated), k=1), k=1, context=ctx)
    scores, pr = label_attention(model, cp.prompts, cp.label_ids, batch_size=bs, top_k=0, shared=False)
    runs = {key: {"scores": scores, "pred": pr.pred, "gold": pr.gold}}
    out += auc.aucroc_claims(raw_mean_curves(runs), auc.curve_intervals(runs), name, context=ctx)
    out += _compression_05(model, cp, seed, ctx, pr.pred)
    attr = control_prompts(task, sizes.n_attr, stream_seed("ranking", seed))
    heads = ih.incontext_heads(ih.head_attribution(model, attr.prompts, attr.label_ids, batch_size=bs, shared=False), 1)
    out += ha.ablation_claims(ha.ablation_intervals({key: ablation_conditions(model, cp.prompts, cp.label_ids, heads,
                                                                                 seed, bs, shared=False)}), ctx)
    two = control_prompts(task, sizes.n, stream_seed("two_way", seed), n_ways=2)
    swapped = label_swap(model, two, perm=[1, 0])
    out += mc.mapping_claims({"swap_averaged": bootstrap_means({key: swapped["swap_averaged"]}),
                              "same_word": bootstrap_means({key: swapped["same"]})}, ctx)
    vo = value_outputs(model, two.prompts, two.label_ids, heads, batch_size=bs, shared=False)
    out += tt.two_towers_claims(tt.label_carrying_interval({key: vo}), tt.two_towers_intervals({"control": vo}), ctx)
    return out


def _group_10(model, seed: int, sizes: PowerSizes) -> list[Claim]:
    """Notebook 10's checks on one replicate: the label words' isolation and flows against content tokens, the
    causal label reading and gathering, the anchors' specific checks, and each ranking's top head against a random one, with the four labels and swap-averaged on two-way sequences."""
    task, name, bs = _prompt_task(model), model.cfg.icl_model_name, sizes.batch_size
    ctx = f"{name}, replicate seed {seed}, {sizes.n} sequences"
    cp = control_prompts(task, sizes.n, seed)
    loyalty = ic.class_loyalty_intervals(ic.control_isolation_runs(model, {seed: cp}, k=1))
    flow_prompts = control_prompts(task, sizes.n_saliency, stream_seed("control_saliency", seed))
    flows = sc.control_flow_intervals(sc.control_flow_runs(model, {seed: flow_prompts}), model.cfg.n_layers)
    top = control_head_rankings(model, control_prompts(task, sizes.n_attr, stream_seed("ranking", seed))).top
    key = ("control", seed)
    plain = hs.head_set_intervals(ha.sets_cells({key: sets_ablation_conditions(model, cp.prompts, cp.label_ids, top,
                                                                                  seed, bs, shared=False)}))
    two = control_prompts(task, sizes.n, stream_seed("two_way", seed), n_ways=2)
    both = [{key: sets_ablation_conditions(model, c.prompts, c.label_ids, top, seed, bs, shared=False)}
            for c in (two, relabel(two, [1, 0]))]
    foobar = hs.head_set_intervals(ha.sets_cells(swap_averaged(*both)))
    reading = lr.control_reading_claim({key: lr.control_reading(model, cp, seed, bs)}, ctx)
    gathers = lg.control_gathering_claim(model, cp, seed, bs, ctx)
    anchors = cs.control_specificity_claims({key: cs.control_specificity(model, cp, seed, bs)}, ctx)
    return ([ic.control_isolation_claim(loyalty, 1, ctx), reading, gathers, *anchors]
            + sc.control_flow_claims(flows, ctx)
            + [c for c in hs.head_set_claims(plain, 1, ctx, foobar=foobar) if c.key != "10.fv_over_induction"])


def _group_11(model, seed: int, sizes: PowerSizes) -> list[Claim]:
    """Notebook 11's checks on one replicate: the flipped-label checks on the sequences with their label tokens
    permuted (and their specific forms), and the query's two stages with the top previous-token and induction heads against a random one.
    The knockout and the flows from the earlier demonstrations have no control (power_report.NOT_MEASURED)."""
    task, name, bs = _prompt_task(model), model.cfg.icl_model_name, sizes.batch_size
    ctx = f"{name}, replicate seed {seed}, {sizes.n} sequences"
    cp = control_prompts(task, sizes.n, seed)
    return (fl.control_flipped_claims(model, task, cp, seed, sizes.n_saliency, bs, ctx,
                                      flow_batch_size=sizes.flow_batch_size)
            + fsp.control_flipped_specific(model, cp, seed, bs, ctx)
            + qs.control_stage_claims(model, cp.prompts, cp.label_ids, seed, bs, ctx)
            + _contextualise_11(model, task, cp, seed, sizes, ctx))


def _contextualise_11(model, task: ControlTask, cp: ControlPrompts, seed: int, sizes: PowerSizes,
                      ctx: str) -> list[Claim]:
    """Notebook 11's checks that a label word reads the earlier demonstrations (arXiv 2504.00132): the context
    flows (on the saliency sequences), the knockout of the label words' links (first layer) and the layered
    knockout of both steps (lower and upper half of the layers), with notebook 11's functions and criteria. No
    control builds its label words from the earlier demonstrations, so every population measures the
    contextualisation checks' specificity only (power_report.SPECIFICITY_ONLY); the positive controls read the label
    words at q, so the aggregation checks have both rows."""
    key = ("control", seed)
    flow_prompts = control_prompts(task, sizes.n_saliency, stream_seed("control_saliency", seed)).prompts
    flows, context = sctx.flows_and_context(model, flow_prompts, task.label_ids, batch_size=sizes.flow_batch_size)
    out = sctx.context_flow_claims(sctx.context_flow_intervals({key: flows}, {key: context}), ctx)
    base = predict(model, cp.prompts, cp.label_ids, batch_size=sizes.batch_size, top_k=0).pred
    cell = ictx.knockout_cell(model, cp.prompts, cp.label_ids, base, [0], sizes.batch_size, seed)
    out.append(ictx.context_knockout_claim(ictx.context_knockout_intervals({key: cell}), 1, ctx))
    layered = ictx.layered_cell(model, cp.prompts, cp.label_ids, base, sizes.batch_size, seed, shared=False)
    return out + ictx.layered_claims(ictx.layered_intervals({key: layered}), model.cfg.n_layers, ctx)


def _prompt_task(model) -> ControlTask:
    """The task whose prompts both controls run: the negative control's (one fixed class -> label mapping, shown
    in every context). Both controls were trained on the same items (same sizes and seed), so the same token is the
    same item in both, and the positive control, which reads whatever mapping the context shows, answers these
    prompts as it answers its own: the two controls see identical inputs and only the model differs."""
    task = control_spec(NEGATIVE).task
    def items(t: ControlTask) -> tuple:
        return t.n_labels, t.n_pairs, t.n_classes, t.n_heldout, t.dim, t.noise, t.exemplars, t.seed

    if items(control_task(model)) != items(task):
        raise ValueError(f"{model.cfg.icl_model_name} was trained on other items than the negative control: the power "
                         "runs need both controls on the same task sizes and seed")
    return task


GROUPS: dict[str, Callable] = {"09": _group_09, "10": _group_10, "11": _group_11}  # the checks each notebook's run measures


def replicate_claims(model, seed: int, sizes: PowerSizes, group: str) -> list[Claim]:
    """One replicate of a group's checks on a control (:data:`GROUPS`): the claims, as the notebooks grade them."""
    _check(model, group)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a constant score on one replicate: its claim says so
        return GROUPS[group](model, seed, sizes)


def _check(model, group: str) -> None:
    if control_kind(model) not in ("positive", "negative"):
        raise ValueError("power runs on the controls only: load_model('control-wide') and load_model('control-"
                         "negative')")
    if group not in GROUPS:
        raise ValueError(f"group must be one of {sorted(GROUPS)}, got {group!r}")


def replicate_verdicts(model, seed: int, sizes: PowerSizes, group: str) -> dict[str, str]:
    """``{claim key: verdict}`` of :func:`replicate_claims`, stored on disk by control, group, seed and sizes (the
    verdicts only: their criteria live in the methods' modules, which the stored step's key covers, while a
    claim's wording does not change a stored step)."""
    _check(model, group)
    params = {"model": model.cfg.icl_model_name, "group": group, "seed": int(seed), "sizes": sizes.as_dict()}

    def run():
        return {c.key: c.verdict for c in replicate_claims(model, seed, sizes, group)}

    with same_weights(model):
        return cached("power_replicate", params, run, model=model)


def power_runs(populations: Mapping[str, Sequence] | Sequence, sizes: PowerSizes,
               groups: Sequence[str] = tuple(GROUPS), progress: bool = True) -> dict[str, list[dict[str, str]]]:
    """``{population: [{claim key: verdict} of replicate r for r in range(sizes.replicates)]}``: replicate ``r``
    runs checkpoint ``r`` of the population's (``{population: [models]}``, :func:`population_models`) on sequences
    of seed ``REPLICATE_SEED + r``, so each replicate is another training run: a population runs each of its
    checkpoints once (at most ``sizes.replicates``). A population of one checkpoint, or a plain list of models
    (each a population of its own, keyed by its name), runs it ``sizes.replicates`` times, the replicates sharing
    it."""
    from tqdm.auto import tqdm  # lazy: only while running

    if not isinstance(populations, Mapping):
        populations = {m.cfg.icl_model_name: [m] for m in populations}
    out = {}
    for name, models in populations.items():
        if not models:
            raise ValueError(f"population {name!r} has no checkpoint")
        out[name] = [{k: v for g in groups
                      for k, v in replicate_verdicts(models[r % len(models)], REPLICATE_SEED + r, sizes, g).items()}
                     for r in tqdm(range(_replicates(models, sizes)), desc=f"power: {name}", disable=not progress)]
    return out


def _replicates(models: Sequence, sizes: PowerSizes) -> int:
    """How many replicates a population runs (:func:`power_runs`)."""
    return sizes.replicates if len(models) == 1 else min(sizes.replicates, len(models))


def population_models(sizes: PowerSizes) -> dict[str, list]:
    """``{population: [checkpoint per replicate]}`` for the positive and negative populations of both depths
    (:data:`~helpers.study.power_report.POSITIVES`, ``NEGATIVES``): the first ``sizes.replicates`` seeds of each
    (all of a population's, when it has fewer), loaded after their sha256 is checked."""
    from helpers.core.controls.population import load_member  # lazy: only when the controls are loaded here

    most = max(len(POPULATIONS[p].seeds) for p in POSITIVES + NEGATIVES)
    if sizes.replicates > most:
        raise ValueError(f"{sizes.replicates} replicates asked for, but no population has more than {most} "
                         "checkpoints: a replicate is one checkpoint")
    return {p: [load_member(p, s) for s in POPULATIONS[p].seeds[: sizes.replicates]] for p in POSITIVES + NEGATIVES}


def replicate_premises(model, seed: int, sizes: PowerSizes) -> dict[str, np.ndarray]:
    """What the checks presuppose of a control, on replicate ``seed``'s own sequences (those :func:`_group_09` runs):
    per sequence ``correct`` and, under every label moved one place (:func:`label_swap`), ``same`` (the answer
    unchanged) and ``follows`` (the answer moved with the labels); ``heldout_by_class``: the accuracy per class on
    as many sequences of classes never seen in training (a class is the unit: its sequences are not independent).
    Stored on disk by checkpoint and seed."""
    params = {"model": model.cfg.icl_model_name, "seed": int(seed), "n": sizes.n}

    def run():
        task = _prompt_task(model)
        swapped = label_swap(model, control_prompts(task, sizes.n, seed))
        held = control_prompts(task, sizes.n, seed, classes="heldout")  # other classes: no sequence is shared
        correct = label_swap(model, held)["correct"]
        cls = held.item_class[:, -1]
        return {"correct": swapped["correct"], "same": swapped["same"], "follows": swapped["follows"],
                "heldout_by_class": np.array([correct[cls == c].mean() for c in np.unique(cls)])}

    with same_weights(model):
        return cached("power_premises", params, run, model=model)


def population_premises(populations: Mapping[str, Sequence], sizes: PowerSizes) -> dict[str, list[dict]]:
    """``{population: [replicate_premises of checkpoint r on seed REPLICATE_SEED + r]}``, as :func:`power_runs`
    pairs them."""
    return {name: [replicate_premises(models[r % len(models)], REPLICATE_SEED + r, sizes)
                   for r in range(_replicates(models, sizes))] for name, models in populations.items()}


def power_study(sizes: PowerSizes, groups: Sequence[str] = tuple(GROUPS), keys=None,
                progress: bool = True) -> tuple[list[Power], dict[str, list[dict[str, str]]]]:
    """Every population's checkpoints loaded (:func:`population_models`), every replicate of ``groups`` run
    (stored on disk), and the power rows of ``keys`` (default: every check the groups measure and every check the
    controls cannot measure). Returns ``(rows, runs)``."""
    runs = power_runs(population_models(sizes), sizes, groups, progress=progress)
    return power_rows(runs, keys), runs
