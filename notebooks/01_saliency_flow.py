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
# average over seeds.

# %%
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from helpers import plots
from helpers.models import load_model
from helpers.profiles import current_model_name, get_profile
from helpers.results import mean_std, save_figure, save_metrics, summary_row
from helpers.saliency import (FLOWS, first_layer_pq_exceeds_wp, flow_frame, relative_flow, saliency_budget,
                              saliency_matrices, saliency_prompts, saliency_runs, saliency_verdict)
from helpers.tasks import get_task

profile = get_profile()
model = load_model(current_model_name())
budget = saliency_budget(profile)
print(profile.name, current_model_name(), budget)

# %% [markdown]
# ## Saliency flows for every task and seed
#
# Each (task, seed) run is cached on disk, so a second run of the notebook only plots.

# %%
runs = saliency_runs(model, profile.tasks, budget["seeds"], budget["n"], batch_size=budget["batch_size"],
                     profile=profile.name)
df = flow_frame(runs)
df["task"] = df["task"].map(lambda t: get_task(t).display)
fig = plots.flow_curves(df, title=f"Relative saliency flows per layer, {current_model_name()} "
                                  f"(mean ± sd over {len(budget['seeds'])} seed(s))")
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
# any run (`helpers.saliency.saliency_verdict`). For each task, over the seed-averaged relative
# curves:
# 1. over the first third of the layers, $S_{wp}$ is larger than $S_{pq}$ and $S_{ww}$;
# 2. over the last half of the layers, $S_{pq}$ is larger than $S_{wp}$ and $S_{ww}$;
# 3. averaged over all layers, both $S_{wp}$ and $S_{pq}$ are larger than $S_{ww}$.
#
# The verdict is "replicates" if every check passes on every task, "partly" if at least half pass,
# and "does not replicate" otherwise.

# %%
rel_by_task, rows = {}, []
for task in profile.tasks:
    rels = torch.stack([relative_flow(runs[(task, s)]) for s in budget["seeds"]])  # [seed, layer, 3]
    rel = rels.mean(0)
    rel_by_task[task] = rel
    L = rel.shape[0]
    firsts = [first_layer_pq_exceeds_wp(r) for r in rels]
    rows.append({
        "task": get_task(task).display,
        "inputs x seeds": f"{budget['n'][task]} x {len(budget['seeds'])}",
        "S_wp shallow third": float(rel[: max(1, L // 3), 0].mean()),
        "S_pq shallow third": float(rel[: max(1, L // 3), 1].mean()),
        "S_pq deep half": float(rel[L // 2:, 1].mean()),
        "S_wp deep half": float(rel[L // 2:, 0].mean()),
        "S_ww mean": float(rel[:, 2].mean()),
        "first layer S_pq > S_wp (seed-mean curve)": first_layer_pq_exceeds_wp(rel),
        "same, per seed": firsts,
    })
table = pd.DataFrame(rows)
verdict, checks = saliency_verdict(rel_by_task)
display(table.round(3))
display(pd.DataFrame([{"task": get_task(t).display, "check": c, "holds": v} for (t, c), v in checks.items()]))

# %%
L = model.cfg.n_layers
summary = (
    f"On {current_model_name()} ({L} layers, profile {profile.name}), the relative S_wp is largest over the first "
    f"third of the layers in {sum(checks[(t, 'shallow: S_wp dominant')] for t in profile.tasks)}/{len(profile.tasks)} "
    f"tasks, S_pq dominates the last half in {sum(checks[(t, 'deep: S_pq dominant')] for t in profile.tasks)}/"
    f"{len(profile.tasks)}, and both exceed S_ww in {sum(checks[(t, 'S_wp and S_pq above S_ww')] for t in profile.tasks)}"
    f"/{len(profile.tasks)}. S_pq first exceeds S_wp at layer(s) "
    f"{', '.join(f'{get_task(t).display} {first_layer_pq_exceeds_wp(rel_by_task[t])}' for t in profile.tasks)} "
    f"(0-based). The paper (GPT2-XL 48 layers, GPT-J 28) shows S_wp dominant early and S_pq dominant in deep layers. "
    f"Verdict: {verdict}."
)
print(summary)
n_tasks = len(profile.tasks)
summary_rows = [
    summary_row("01 shallow layers: S_wp the largest flow (tasks passing)", "S_wp dominant",
                f"{sum(checks[(t, 'shallow: S_wp dominant')] for t in profile.tasks)}/{n_tasks} tasks", verdict),
    summary_row("01 deep layers: S_pq the largest flow (tasks passing)", "S_pq dominant",
                f"{sum(checks[(t, 'deep: S_pq dominant')] for t in profile.tasks)}/{n_tasks} tasks", verdict),
    summary_row("01 S_wp and S_pq above S_ww (tasks passing)", "both above",
                f"{sum(checks[(t, 'S_wp and S_pq above S_ww')] for t in profile.tasks)}/{n_tasks} tasks", verdict),
] + [
    summary_row(f"01 first layer where S_pq > S_wp, {get_task(t).display} (0-based)",
                "curve only (S_wp early, S_pq late)",
                mean_std([first_layer_pq_exceeds_wp(relative_flow(runs[(t, s)])) for s in budget["seeds"]])
                + f" of {L} layers", verdict)
    for t in profile.tasks
]
save_metrics("01_saliency_flow", {
    "model": current_model_name(), "profile": profile.name, "seeds": budget["seeds"], "n": budget["n"],
    "table": table.drop(columns=["same, per seed"]).round(4).to_dict("records"),
    "relative_flow": {t: rel_by_task[t] for t in profile.tasks},
    "first_layer_pq_exceeds_wp": {t: first_layer_pq_exceeds_wp(rel_by_task[t]) for t in profile.tasks},
    "checks": {f"{t}: {c}": v for (t, c), v in checks.items()}, "verdict": f"{verdict}. {summary}",
    "summary": summary_rows,
})
