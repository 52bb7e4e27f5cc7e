"""The protocol of flipped labels (notebook 11, arXiv 2511.21038): its runs over tasks x seeds (each stored by
content), its intervals, the criteria written before any run, its claims, and the same checks on notebook 09's
controls. The method (flipped prompts, agreements) is :mod:`helpers.experiments.flipped_labels`; the flows and the
isolation are §2.1's and §2.2's own methods, run on the flipped prompts and, beside them, on the natural ones.

One run per (task, seed) computes, on one demonstration set and its flipped twin (the same inputs):

- the predictions with the natural and the flipped demonstrations and without demonstrations (the prior);
- on the first ``n_flow`` inputs of each, one saliency pass: §2.1's flows and the context flows of arXiv
  2504.00132 (:func:`helpers.protocols.saliency_context.flows_and_context`);
- §2.2's isolation of the label words and of as many random words in the first ``k`` layers.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from helpers.core.controls.model import ControlPrompts, ControlTask, control_prompts, relabel
from helpers.core.grid import run_grid
from helpers.core.loyalty import label_loyalty_rows
from helpers.core.predict import predict
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.seeds import stream_seed
from helpers.core.sizing import CONTROL_HEAVY_BATCH
from helpers.core.store import pins_weights, prompts_digest
from helpers.core.tasks import LabelWordWarning, get_task, run_args
from helpers.experiments.flipped_labels import (
    ALIGNMENTS,
    agreements,
    flip_permutation,
    flipped_icl_set,
    override_rate,
    zero_shot_prompts,
)
from helpers.experiments.isolation import isolation_experiment
from helpers.experiments.saliency import FLOWS, saliency_flow
from helpers.experiments.saliency_context import CONTEXT_FLOWS
from helpers.protocols import isolation as iso_protocol
from helpers.protocols import isolation_classes as ic
from helpers.protocols import saliency as sal
from helpers.protocols.saliency_context import flows_and_context
from helpers.study.claims import Claim, above_zero, claim
from helpers.study.profile_table import Profile
from helpers.study.profiles import AfterSizes
from helpers.study.stats import Interval, bootstrap_means, paired_differences

__all__ = ["flipped_runs", "after_flow_frame", "override_intervals", "semantic_anchor_verdict", "semantic_anchor_claim",
           "flipped_flow_claims",
           "flipped_isolation_intervals", "flipped_isolation_claim", "control_flipped_claims"]

PROMPTS = ("natural", "flipped")

# the criteria of 11.semantic_anchors, fixed before any run (semantic_anchor_verdict): the override rate's 95%
# interval ends at or below OVERRIDE_BOUND, and the model reads its context: its accuracy with the natural labels
# minus without demonstrations has a 95% interval whose lower end is above CONTEXT_MARGIN
OVERRIDE_BOUND = 0.05
CONTEXT_MARGIN = 0.05


def _loyalty(iso: dict, k: int, n: int, random_n: int) -> dict[str, torch.Tensor]:
    """Per input, 1 where the prediction with the label words (``label``) or as many random words (``random``)
    isolated in the first ``k`` layers equals the unisolated one: the first ``n`` inputs of ``iso``
    (:func:`~helpers.experiments.isolation.isolation_experiment`'s runs), the random ones on the first ``random_n``."""
    base = iso["base"].pred
    return {c: torch.as_tensor(label_loyalty_rows(iso[(c, "first", k)].pred[:m], base[:m]))
            for c, m in (("label", n), ("random", min(n, random_n)))}


def _notebook02_loyalty(model, task: str, seed: int, natural, sizes: AfterSizes,
                        profile: Profile | None) -> dict | None:
    """:func:`_loyalty` of the natural prompts read from notebook 02's stored isolation of ``(task, seed)`` (run
    with ``profile``), where it ran these very prompts first (same tokens, order and label words: the random words'
    draw of an input depends on its place only) at ``sizes.k`` with enough inputs; else None."""
    got = None if profile is None else iso_protocol.notebook02_cell(model, task, seed, profile)
    if got is None:
        return None
    ran, runs = got
    n, rn = len(natural.prompts), min(len(natural.prompts), sizes.random_n)
    keys = [("label", "first", sizes.k), ("random", "first", sizes.k)]
    same = (len(ran.prompts) >= n and list(ran.label_ids) == list(natural.label_ids)
            and prompts_digest(ran.prompts[:n]) == prompts_digest(natural.prompts))
    if not same or not all(key in runs for key in keys) or len(runs[keys[0]]) < n or len(runs[keys[1]]) < rn:
        return None
    return _loyalty(runs, sizes.k, n, rn)


@pins_weights
def flipped_runs(model, tasks: Sequence[str], sizes: AfterSizes, progress: bool = True,
                 profile: Profile | None = None) -> dict:
    """``{(task, seed): {"gold", "perm", "pred": {natural, flipped, prior}, "flows": {natural, flipped},
    "context": {natural, flipped}, "loyal": {natural, flipped: {"label", "random"}}}}`` (module docstring), stored
    on disk per (task, seed). ``profile``: the profile notebook 02 ran with (its
    :func:`~helpers.protocols.isolation.isolation_sizes`); where the store holds its isolation of the same natural
    prompts, their loyalty is read from it (the same numbers, :func:`_notebook02_loyalty`) instead of computed again.
    Notebook 01's stored flows are not read: one saliency pass gives the flows and the context flows together."""
    if not isinstance(sizes, AfterSizes):
        raise TypeError(f"sizes must be the AfterSizes of after_sizes(profile), got {type(sizes).__name__}")
    if profile is not None and not isinstance(profile, Profile):
        raise TypeError(f"profile must be a Profile (get_profile()) or None, got {type(profile).__name__}")
    tasks, seeds = run_args(tasks, sizes.seeds, n=sizes.n)
    bs, k = sizes.batch_size, sizes.k

    def run(task, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LabelWordWarning)  # multi-token label words: read at their first token
            sets = dict(zip(PROMPTS, flipped_icl_set(model, task, seed, sizes.n)))
        lids, m = sets["natural"].label_ids, min(sizes.n_flow, len(sets["natural"].prompts))
        pred = {name: vanilla_predictions(model, s.prompts, lids, batch_size=bs, top_k=0).pred
                for name, s in sets.items()}
        pred["prior"] = predict(model, zero_shot_prompts(model, sets["natural"]), lids, batch_size=bs, top_k=0).pred
        out = {"gold": torch.tensor([p.gold for p in sets["natural"].prompts]),
               "perm": torch.tensor(flip_permutation(get_task(task).n_classes)), "pred": pred,
               "flows": {}, "context": {}, "loyal": {}}
        for name, s in sets.items():
            out["flows"][name], out["context"][name] = flows_and_context(model, s.prompts[:m], lids, batch_size=bs)
            read = _notebook02_loyalty(model, task, seed, s, sizes, profile) if name == "natural" else None
            out["loyal"][name] = read or _loyalty(isolation_experiment(
                model, s.prompts, lids, ks=(k,), wheres=("first",), seed=seed, batch_size=bs, top_k=0,
                random_n=sizes.random_n), k, len(s.prompts), sizes.random_n)
        return out

    return run_grid("flipped_labels", model, tasks, seeds, run,
                    {"n": sizes.n, "n_flow": sizes.n_flow, "random_n": sizes.random_n, "k": k},
                    progress=progress and "flipped labels")


def after_flow_frame(runs: dict):
    """A ``pandas.DataFrame``, a row per (task, seed, prompts, layer, flow): the mean over the inputs of §2.1's
    flows (``S_wp``, ``S_pq``, ``S_ww``) and of the context flows (``from_label``, ``from_text``), each a mean
    saliency per pair, on the natural and the flipped prompts."""
    import pandas as pd  # lazy

    names = (*FLOWS, *CONTEXT_FLOWS)
    rows = []
    for (task, seed), r in runs.items():
        for kind in PROMPTS:
            both = torch.cat([r["flows"][kind], r["context"][kind]], -1).double().nanmean(0)  # [layer, 5]
            rows += [{"task": task, "seed": seed, "prompts": kind, "layer": l, "flow": f, "value": float(both[l, j])}
                     for l in range(both.shape[0]) for j, f in enumerate(names)]
    return pd.DataFrame(rows)


def _override_cells(runs: dict) -> tuple[dict, list[str]]:
    """Per-input override (:func:`~helpers.experiments.flipped_labels.override_rate`) of the tasks that have an input
    right both without demonstrations and with the natural labels in every seed, and the tasks left out."""
    rate = {cell: override_rate(r["pred"]["flipped"], r["pred"]["natural"], r["pred"]["prior"], r["gold"], r["perm"])
            for cell, r in runs.items()}
    seeds = {s for _, s in runs}
    tasks = list(dict.fromkeys(t for t, _ in runs))
    kept = [t for t in tasks if all((t, s) in rate and rate[t, s].size for s in seeds)]
    return {c: v.astype(float) for c, v in rate.items() if c[0] in kept}, [t for t in tasks if t not in kept]


def override_intervals(runs: dict) -> dict:
    """95% intervals (seeds, then inputs; mean over tasks) of each agreement of the flipped prompts' predictions
    (:data:`~helpers.experiments.flipped_labels.ALIGNMENTS`: ``prompt`` is prompt alignment), of ``truth - prompt``
    per input, of the natural prompts' accuracy, of the accuracy without demonstrations (``zero-shot accuracy``) and
    the natural minus it per input (``reads context``), of ``same``: the share of inputs whose prediction the flip
    leaves unchanged, and of the semantic override rate (``override``; None when no task has an input right both
    without demonstrations and with the natural labels in every seed; ``override tasks left out`` names the tasks
    without one)."""
    agree = {cell: agreements(r["pred"]["flipped"], r["gold"], r["perm"], r["pred"]["prior"])
             for cell, r in runs.items()}
    out = {k: bootstrap_means({c: a[k] for c, a in agree.items()}) for k in ALIGNMENTS}
    out["truth - prompt"] = bootstrap_means({c: a["truth"] - a["prompt"] for c, a in agree.items()})
    right = {name: {c: (r["pred"][name] == r["gold"]).numpy().astype(float) for c, r in runs.items()}
             for name in ("natural", "prior")}
    out["natural accuracy"] = bootstrap_means(right["natural"])
    out["zero-shot accuracy"] = bootstrap_means(right["prior"])
    out["reads context"] = bootstrap_means(paired_differences(right["natural"], right["prior"]))
    out["same"] = bootstrap_means({c: (r["pred"]["natural"] == r["pred"]["flipped"]).numpy().astype(float)
                                   for c, r in runs.items()})
    rate, left = _override_cells(runs)
    out["override"] = bootstrap_means(rate) if rate else None
    out["override inputs"] = int(sum(v.size for v in rate.values()))
    out["override tasks left out"] = left
    return out


def semantic_anchor_verdict(override: Interval | None, reads: Interval) -> tuple[str, str]:
    """The verdict of ``11.semantic_anchors`` (criteria fixed before any run: :data:`OVERRIDE_BOUND`,
    :data:`CONTEXT_MARGIN`) and which half decides it: "replicates" when the model reads its context (``reads``,
    natural-label minus zero-shot accuracy, lower end above the margin) and the override rate's interval ends at or
    below the bound; "does not replicate" when it reads its context and the override rate's interval starts above
    the bound (the flipped mapping overrides what it knows); "inconclusive" when it does not read its context (a
    model that ignores its demonstrations has an override rate of 0 for that reason alone) or the interval holds the
    bound; "not comparable" without an override rate."""
    if override is None:
        return "not comparable", "no input was right both without demonstrations and with the natural labels"
    if not reads.low > CONTEXT_MARGIN:
        return "inconclusive", (f"the model does not read its context by the margin: natural-label minus zero-shot "
                                f"accuracy {reads:.3f}, its lower end not above {CONTEXT_MARGIN}")
    if override.high <= OVERRIDE_BOUND:
        return "replicates", f"reads its context and the override rate ends at or below {OVERRIDE_BOUND}"
    if override.low > OVERRIDE_BOUND:
        return "does not replicate", f"reads its context and the override rate starts above {OVERRIDE_BOUND}"
    return "inconclusive", f"reads its context; the override rate's interval holds {OVERRIDE_BOUND}"


def semantic_anchor_claim(ivs: dict, context: str = "") -> Claim:
    """``11.semantic_anchors``: the semantic override rate (correctness under flipped semantics among the inputs the
    model gets right without demonstrations and with the natural labels) at most :data:`OVERRIDE_BOUND`, in a model
    that reads its context (:func:`semantic_anchor_verdict`). The note gives the context-blindness control (the
    share the flip leaves unchanged, natural-label against zero-shot accuracy) and the three alignments."""
    iv = ivs["override"]
    verdict, why = semantic_anchor_verdict(iv, ivs["reads context"])
    left = ivs.get("override tasks left out") or []
    note = (f"{why}. Prompt alignment (the flipped class) {ivs['prompt']:.3f}; the query's own class "
            f"{ivs['truth']:.3f}; as without demonstrations {ivs['prior']:.3f}; unchanged by the flip "
            f"{ivs['same']:.3f}; accuracy with the natural labels {ivs['natural accuracy']:.3f}, without "
            f"demonstrations {ivs['zero-shot accuracy']:.3f}; override rate over {ivs.get('override inputs', 0)} "
            "inputs right both ways" + (f" (tasks without one in every seed, left out: {', '.join(left)})" if left
                                        else ""))
    crit = (f"95% interval of the semantic override rate at most {OVERRIDE_BOUND}, in a model whose natural-label "
            f"minus zero-shot accuracy has its lower end above {CONTEXT_MARGIN}")
    if iv is None:
        return claim("11.semantic_anchors", None, verdict, crit, context=context, note=note, missing=why)
    return claim("11.semantic_anchors", iv, verdict, crit, context=context, note=note)


def _renamed(claims: Sequence[Claim], context: str, notes: Sequence[str] = ()) -> list[Claim]:
    """Notebook 01's flow claims as ``11.flipped_*`` (same interval, verdict and criterion)."""
    notes = list(notes) or [""] * len(claims)
    return [claim(f"11.flipped_{c.key[3:]}", c.ours, c.verdict, c.criterion, context=context,
                  note=" ".join(x for x in (c.note, n) if x)) for c, n in zip(claims, notes)]


def flipped_flow_claims(runs: dict, tasks: Sequence[str], context: str = "") -> list[Claim]:
    """§2.1's three claims (notebook 01's criteria, :func:`helpers.protocols.saliency.saliency_claims`) on the
    flipped prompts, as ``11.flipped_*``; each note gives the same claim on the natural prompts (same inputs)."""
    got = {name: sal.saliency_claims(sal.flow_intervals({cell: r["flows"][name] for cell, r in runs.items()}),
                                     tasks, context) for name in PROMPTS}
    notes = [f"Natural labels, same inputs: {n.verdict}" + ("" if n.ours is None else f", {n.ours:+.3f}") + "."
             for n in got["natural"]]
    return _renamed(got["flipped"], context, notes)


def flipped_isolation_intervals(runs: dict) -> dict:
    """Per prompt kind (natural, flipped): ``kind`` the 95% interval of the loyalty with as many random words
    isolated minus with the label words isolated (first ``k`` layers, paired on the inputs both ran), and ``(kind,
    condition)`` each loyalty."""
    out = {}
    for name in PROMPTS:
        rnd = {c: r["loyal"][name]["random"].numpy() for c, r in runs.items()}
        lab = {c: r["loyal"][name]["label"].numpy() for c, r in runs.items()}
        out[name] = bootstrap_means(paired_differences(rnd, {c: v[: len(rnd[c])] for c, v in lab.items()}))
        out[(name, "label")], out[(name, "random")] = bootstrap_means(lab), bootstrap_means(rnd)
    return out


def flipped_isolation_claim(iv: Interval, k: int, context: str = "", note: str = "") -> Claim:
    """``11.flipped_label_isolation``: on flipped prompts, the loyalty with as many random words isolated minus with
    the label words isolated, first ``k`` layers: above 0 "replicates", below 0 "does not replicate", containing 0
    "inconclusive"."""
    return claim("11.flipped_label_isolation", iv, above_zero(iv), "95% interval of the loyalty with as many random "
                 f"words isolated minus with the label words isolated, first {k} layer(s), flipped prompts, above 0",
                 context=context, note=note)


def control_flipped_claims(model, task: ControlTask, cp: ControlPrompts, seed: int, n_saliency: int, batch_size: int,
                           context: str = "", flow_batch_size: int = CONTROL_HEAVY_BATCH) -> list[Claim]:
    """The checks of this protocol on a control (:mod:`helpers.protocols.power`): ``cp``, sequences of ``task``
    drawn with ``seed``, with every label
    token moved by :func:`~helpers.experiments.flipped_labels.flip_permutation` (the right answer under the
    context's mapping moves with it). ``11.control_override``: the share following the permuted mapping minus the
    share giving the sequence's own class, above 0 "replicates" (the check sees a model that reads the mapping in
    its context); and, on the permuted sequences, the flows (notebook 01's criteria, ``n_saliency`` sequences) and
    the isolation of the label words against as many items, first layer (``11.flipped_*``)."""
    perm = flip_permutation(len(cp.label_ids))
    flipped, key = relabel(cp, perm), ("control", seed)
    pred = predict(model, flipped.prompts, cp.label_ids, batch_size=batch_size, top_k=0).pred
    a = agreements(pred, cp.gold, perm)
    iv = bootstrap_means({key: a["prompt"] - a["truth"]})
    out = [claim("11.control_override", iv, above_zero(iv), "95% interval of the share following the permuted mapping "
                 "minus the share giving the sequence's own class, above 0", context=context,
                 note=f"follows the permuted mapping {np.mean(a['prompt']):.3f}, its own class {np.mean(a['truth']):.3f}")]
    flow_cp = relabel(control_prompts(task, n_saliency, stream_seed("control_saliency", seed)), perm)
    flows = {key: saliency_flow(model, flow_cp.prompts, flow_cp.label_ids, batch_size=flow_batch_size)}
    out += _renamed(sal.saliency_claims(sal.flow_intervals(flows), ["control"], context), context)
    loyalty = ic.class_loyalty_intervals(ic.control_isolation_runs(model, {seed: flipped}, k=1, batch_size=batch_size))
    return out + [flipped_isolation_claim(loyalty[("drop", "label", "first")], 1, context)]
