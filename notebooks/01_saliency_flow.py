# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Saliency: information flows through the label words
#
# **Claim (paper §2.1, Fig. 3).** Label words act as anchors, and the information flow shows it
# in two stages:
# - in **shallow** layers, information flows from the demonstration text into the label words
#   ($S_{wp}$ is the largest flow);
# - in **deep** layers, the prediction position $q$ reads from the label words ($S_{pq}$ dominates);
# - both flows are larger than the flow between all other pairs of tokens ($S_{ww}$).
#
# **Method.** For every layer $l$ the saliency matrix is
# $I_l = \left|\sum_h A_{h,l} \odot \frac{\partial L}{\partial A_{h,l}}\right|$, where $A$ is the
# attention pattern (TransformerLens `hook_pattern`) and $L$ is the cross-entropy of the
# label-restricted logits at $q$ against the gold label. One forward and one backward pass give
# every layer. Batches sum the per-input losses, so each input keeps its own gradient. $S_{wp}$,
# $S_{pq}$ and $S_{ww}$ are means of $I_l$ over the position pairs taken from the prompt's
# position record. As in the paper, every input gets its **own** demonstrations (one per class,
# drawn with a per-input seed). We plot the three means per layer relative to their sum, then
# average over seeds. Every number comes with a 95% interval from a two-level bootstrap: the seeds
# are resampled, then the inputs within each (task, seed), and the whole curve is recomputed
# (`helpers.experiments.saliency.flow_intervals`, `helpers.study.stats`). The three flows of an input are resampled
# together, so the differences between flows are paired.

# %%
import pandas as pd
import torch
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.tasks import get_task
from helpers.experiments.saliency import (
    CROSSING,
    FLOW_CHECKS,
    MEAN_OVER_TASKS,
    contrast_name,
    first_layer_pq_exceeds_wp,
    flow_frame,
    flow_interval_table,
    flow_intervals,
    relative_flow,
    saliency_matrices,
    saliency_prompts,
    saliency_runs,
    saliency_sizes,
    saliency_verdict,
)
from helpers.study import plots
from helpers.study.profiles import current_model_name, get_profile
from helpers.study.results import save_figure, save_metrics, summary_row

profile = get_profile()
model = load_model(current_model_name())
budget = saliency_sizes(profile)
print(profile.name, current_model_name(), budget)

# %% [markdown]
# ## Saliency flows for every task and seed
#
# Each (task, seed) run is cached on disk, so a second run of the notebook only plots. The line is
# the seed-averaged curve, the band its 95% interval (seeds and inputs resampled).

# %%
runs = saliency_runs(model, profile.tasks, budget["seeds"], budget["n"], batch_size=budget["batch_size"],
                     profile=profile.name)
ivs = flow_intervals(runs)  # {(task, ...): Interval}; task MEAN_OVER_TASKS: the curve averaged over tasks
display_name = {t: get_task(t).display for t in profile.tasks}
df = flow_frame(runs)
df["task"] = df["task"].map(display_name)
fig = plots.plot_flow_curves(df, intervals={(display_name.get(k[0], k[0]), *k[1:]): iv for k, iv in ivs.items()},
                        title=f"Relative saliency flows per layer, {current_model_name()} "
                              f"(mean over {len(budget['seeds'])} seed(s), 95% CI)")
save_figure(fig, "01_saliency_flow")

# %% [markdown]
# ## One prompt, one shallow and one deep layer
#
# Each "head" below is one layer's saliency matrix $I_l$ of a single SST-2 prompt, divided by
# its maximum. Hover a token to see which earlier tokens feed it. In a shallow layer, expect the
# label words to draw from their own demonstration. In a deep layer, expect $q$ (the last colon)
# to draw from the label words.

# %%
prompts, lids = saliency_prompts(model, profile.tasks[0], seed=budget["seeds"][0], n=1)
(sal,) = saliency_matrices(model, prompts, lids)
shallow, deep = 1, model.cfg.n_layers - 2
print(f"'heads' 0 and 1 = layers {shallow} and {deep}; label positions p_k = {prompts[0].label_pos}, q = {prompts[0].q}")
plots.saliency_view(model, prompts[0], sal, [shallow, deep])

# %% [markdown]
# ## Numbers beside the paper's claim
#
# The paper reports curves, not numbers. Its claims are stated as checks that were fixed before
# any run, and each is judged on the 95% intervals of paired contrasts between the flows of each
# task's seed-averaged relative curve (`helpers.experiments.saliency.saliency_verdict`):
# 1. shallow layers (the first third): the intervals of $S_{wp} - S_{pq}$ and of $S_{wp} - S_{ww}$,
#    averaged over those layers, both lie above zero;
# 2. deep layers (the last half): the intervals of $S_{pq} - S_{wp}$ and of $S_{pq} - S_{ww}$ both
#    lie above zero;
# 3. all layers: the intervals of $S_{wp} - S_{ww}$ and of $S_{pq} - S_{ww}$ both lie above zero.
#
# A check "holds" on a task when both of its intervals lie above zero, "fails" when one lies below
# zero, and is "inconclusive" otherwise (an interval contains zero, none lies below it). The verdict is "replicates" if every
# check holds on every task, "partly" if at least half hold, "does not replicate" if more than half
# fail, and "inconclusive" otherwise. The first layer where $S_{pq}$ exceeds $S_{wp}$ is reported
# with its interval but is not a check (the paper shows it as a curve only).

# %%
tasks = list(profile.tasks)
L = model.cfg.n_layers
table = flow_interval_table(ivs, tasks, labels=display_name)
table.insert(1, "inputs x seeds", [f"{budget['n'][t]} x {len(budget['seeds'])}" for t in tasks]
             + [f"{sum(budget['n'].values())} x {len(budget['seeds'])}"])
verdict, checks = saliency_verdict(ivs, tasks)
display(table.set_index("task").T)
display(pd.DataFrame([{"task": display_name[t], "check": c, "on the 95% intervals": v} for (t, c), v in checks.items()])
        .pivot(index="check", columns="task", values="on the 95% intervals"))

# %%
rel_by_task = {t: torch.stack([relative_flow(runs[(t, s)]) for s in budget["seeds"]]).mean(0) for t in tasks}


def crossing(task: str) -> str:
    """The first layer where S_pq > S_wp, with its interval (or the point value when it has none)."""
    iv = ivs.get((task, CROSSING))
    if iv is not None:
        return f"{iv:.1f} (95% CI; {iv.n_seeds} seed(s), {iv.n_inputs} inputs)"
    point = first_layer_pq_exceeds_wp(rel_by_task[task])
    return f"{'never' if point is None else point} (no interval: undefined in over 10% of the resamples)"


def tally(check: str) -> str:
    got = [checks[(t, check)] for t in tasks]
    return ", ".join(f"{got.count(v)} {v}" for v in ("holds", "fails", "inconclusive") if got.count(v))


names = {"shallow": "the first third of the layers", "deep": "the last half of the layers", "all": "all layers"}
mean_iv = {(r, a, b): ivs[(MEAN_OVER_TASKS, r, contrast_name(a, b))] for cs in FLOW_CHECKS.values() for r, a, b in cs}
summary = (
    f"On {current_model_name()} ({L} layers, profile {profile.name}, {len(budget['seeds'])} seed(s)), averaged over "
    f"tasks, S_wp - S_pq over the first third of the layers is {mean_iv[('shallow', 'S_wp', 'S_pq')]:+.3f} and "
    f"S_pq - S_wp over the last half is {mean_iv[('deep', 'S_pq', 'S_wp')]:+.3f} (relative sizes, 95% intervals). "
    f"Per task ({len(tasks)}): S_wp the largest flow in shallow layers: {tally('shallow: S_wp dominant')}; "
    f"S_pq the largest in deep layers: {tally('deep: S_pq dominant')}; both above S_ww: "
    f"{tally('S_wp and S_pq above S_ww')}. S_pq first exceeds S_wp at layer "
    f"{'; '.join(f'{display_name[t]} {crossing(t)}' for t in tasks)} (0-based). The paper (GPT2-XL 48 layers, "
    f"GPT-J 28) shows S_wp dominant early and S_pq dominant in deep layers. Verdict: {verdict}."
)
print(summary)
summary_rows = [
    summary_row(f"01 {a} minus {b} over {names[r]} (relative size, mean over tasks)", "above 0",
                mean_iv[(r, a, b)], verdict)
    for cs in FLOW_CHECKS.values() for r, a, b in cs
] + [
    summary_row("01 checks on the 95% intervals (tasks x 3 checks)", "all hold",
                ", ".join(f"{list(checks.values()).count(v)} {v}" for v in ("holds", "fails", "inconclusive")),
                verdict),
] + [
    summary_row(f"01 first layer where S_pq > S_wp, {display_name[t]} (0-based)", "curve only (S_wp early, S_pq late)",
                f"{crossing(t)} of {L} layers", verdict)
    for t in tasks
]
save_metrics("01_saliency_flow", {
    "model": current_model_name(), "profile": profile.name, "seeds": budget["seeds"], "n": budget["n"],
    "table": table.to_dict("records"),
    "relative_flow": {t: rel_by_task[t] for t in tasks},
    "intervals": {" / ".join(map(str, k)): None if iv is None else [iv.estimate, iv.low, iv.high]
                  for k, iv in ivs.items()},
    "checks": {f"{t}: {c}": v for (t, c), v in checks.items()}, "verdict": f"{verdict}. {summary}",
    "summary": summary_rows,
})
