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

# %%

# %% [markdown]
# # 08 · Your own task
#
# Notebooks 00-03 study the paper's four tasks. This one runs their analyses, in small form, on a
# task you define yourself: a template with `{text}` and `{label}`, the label words in class order,
# a separator between demonstrations, and `train.jsonl` / `test.jsonl` files with their sha256
# checksums, all in a small spec file (README, "Your own task"). Nothing in `helpers/` changes: the
# spec is registered when it is loaded.
#
# By default the notebook uses the example shipped in `data/rotten_tomatoes/task.json` (Rotten
# Tomatoes movie reviews, negative / positive; not one of the paper's tasks). Set
# `ICL_OWN_TASK=/abs/path/to/task.json` to run it on yours. Run sizes come from `ICL_PROFILE`
# (`helpers.study.profiles.own_task_sizes`: with `default`, 3 seeds and 32 test inputs per seed), the
# model from `ICL_MODEL`. Every number comes with the 95% interval of notebooks 00-03: a two-level
# bootstrap over seeds and, within each seed, the test inputs (`helpers.study.stats`).

# %%
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import HTML, display

from helpers.core.models import load_model
from helpers.core.prompts import build_prompt, sample_demos, sample_test
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split
from helpers.experiments.aucroc import aucroc_runs, aucroc_verdict, crossing_layer, curve_intervals, mean_curves
from helpers.experiments.isolation import (
    condition_cells,
    condition_ids,
    isolation_runs,
    isolation_verdict,
    loyalty_frame,
)
from helpers.experiments.saliency import (
    flow_frame,
    flow_interval_table,
    flow_intervals,
    saliency_runs,
    saliency_verdict,
)
from helpers.experiments.setting import vanilla_accuracy
from helpers.study import paper, plots
from helpers.study.profiles import current_model_name, current_own_task, get_profile, own_task_sizes
from helpers.study.results import save_figure, save_metrics, summary_row
from helpers.study.stats import bootstrap_means, cells_from_frame, paired_differences

profile = get_profile()
model = load_model(current_model_name())
task = get_task(current_own_task())
name = task.name
budget = own_task_sizes(profile)
seeds, n = budget["seeds"], budget["n_test"]
print(profile.name, current_model_name(), budget)

# %% [markdown]
# ## The task
#
# The spec file as written, and what it gives. Spaces right before `{label}` belong to the label
# word (tokenizers attach them to the word), so the query ends right before them: after the colon
# for the shipped tasks. A label word of several tokens is represented by its first token, as in
# the paper; two label words must differ in their first token.

# %%
if task.spec_path:
    print(f"{task.spec_path}:\n{Path(task.spec_path).read_text()}")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    lids = label_token_ids(model.tokenizer, task)
pd.DataFrame([{
    "task": task.display, "template": repr(task.full_template), "separator": repr(task.separator),
    "label words": ", ".join(task.label_words),
    "tokens per label word": [len(model.tokenizer(task.label_text(c), add_special_tokens=False)["input_ids"])
                              for c in range(task.n_classes)],
    "first-token ids": lids, "test pool": len(load_split(task, "test")), "demo pool": len(load_split(task, "train")),
    "digest (cache identity)": task.digest or "shipped task",
}]).T

# %% [markdown]
# ## One prompt and its position record
#
# Seed 42, one demonstration per class. Colours mark the label words ($p_k$ is the first token of
# each), the formatting tokens (everything of the template outside `{text}` and `{label}`, and the
# separators), the query text and the target position $q$. The table lists every token with its
# role and whether Hidden_anchor (notebook 05) keeps it.

# %%
demos = sample_demos(load_split(task, "train"), task, 1, seed=42)
query = sample_test(load_split(task, "test"), 1, seed=42)[0]
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    prompt = build_prompt(model, task, demos, query)
display(HTML(f"<h4>{task.display}: {len(prompt)} tokens, p_k = {prompt.label_pos}, q = {prompt.q}</h4>"))
display(HTML(plots.anchor_html(model, prompt)))
role = {i: "BOS" for i in range(1 if prompt.bos else 0)}
role.update({i: "format" for i in prompt.format_pos})
for k, (a, b) in enumerate(prompt.text_spans):
    role.update({i: f"text {k}" for i in range(a, b)})
role.update({i: "query text" for i in range(*prompt.query_span)})
for k, (a, b) in enumerate(prompt.label_spans):
    role.update({i: f"label {k} (p_{k})" if i == a else f"label {k}, later token" for i in range(a, b)})
role[prompt.q] = role.get(prompt.q, "format") + ", q"
anchor = set(prompt.anchor_pos)
record = pd.DataFrame([{"pos": i, "token": repr(model.tokenizer.decode([int(t)])), "role": role.get(i, "?"),
                        "anchor": i in anchor} for i, t in enumerate(prompt.tokens)])
record.set_index("pos").T

# %% [markdown]
# ## Vanilla 1-shot accuracy against chance
#
# One fixed set of demonstrations (one per class) per seed for the whole test sample, as in
# notebook 00. The reading compares the 95% interval with chance (1 / number of classes).

# %%
one = vanilla_accuracy(model, [name], seeds, n, 1, budget["batch_size"], profile.name)
cells, _ = cells_from_frame(one, "correct", ids="idx")
acc_iv = bootstrap_means(cells)
chance = 1 / task.n_classes
acc_reading = ("above chance" if acc_iv.low > chance else "below chance" if acc_iv.high < chance
               else "not distinguishable from chance")
display(one[["seed", "n", "dropped", "accuracy"]].round(3))
print(f"{task.display}: vanilla 1-shot accuracy {acc_iv:.3f} (95% CI; {acc_iv.n_seeds} seed(s), "
      f"{acc_iv.n_inputs} inputs), chance {chance:.3f}: {acc_reading}.")

# %% [markdown]
# ## Saliency flows $S_{wp}$, $S_{pq}$, $S_{ww}$ (notebook 01)
#
# Per layer, the saliency of the flows from the demonstration text to the label words ($S_{wp}$),
# from the label words to $q$ ($S_{pq}$) and between all other pairs ($S_{ww}$), relative to their
# sum, each input with its own demonstrations. The paper's picture: $S_{wp}$ largest in shallow
# layers, $S_{pq}$ in deep layers. The checks are notebook 01's, on this task alone.

# %%
sal = saliency_runs(model, [name], seeds, budget["n_saliency"], batch_size=4, profile=profile.name)
sal_ivs = flow_intervals(sal)
labels = {name: task.display}
flows = flow_frame(sal)
flows["task"] = flows["task"].map(labels)
fig = plots.plot_flow_curves(flows, intervals={(labels.get(k[0], k[0]), *k[1:]): iv for k, iv in sal_ivs.items()},
                        title=f"Relative saliency flows, {task.display}, {current_model_name()} "
                              f"({len(seeds)} seed(s) x {budget['n_saliency']} inputs, 95% CI)")
save_figure(fig, f"08_{name}_saliency_flow")
sal_verdict, sal_checks = saliency_verdict(sal_ivs, [name])
display(flow_interval_table(sal_ivs, [name], labels=labels).set_index("task").T)
display(pd.Series({c: v for (_, c), v in sal_checks.items()}, name="on the 95% intervals").to_frame())
print(f"Saliency on {task.display}: the paper's two-stage picture {sal_verdict} "
      f"({', '.join(f'{c}: {v}' for (_, c), v in sal_checks.items())}).")

# %% [markdown]
# ## Isolating the label words in the first and last layers (notebook 02)
#
# Label words may not attend to anything earlier in the first or last $k$ layers; the random
# control isolates as many random non-label words, drawn per input and per layer as in the authors'
# code (on the first inputs of each seed only: it runs every input's full prompt). Label loyalty is
# the share of predictions left unchanged, word loyalty the overlap of the top-5 tokens at $q$.
# The paper: isolating label words in the first layers hurts most, the other three barely matter.

# %%
k = 5 if model.cfg.n_layers >= 10 else max(1, model.cfg.n_layers // 3)
iso = isolation_runs(model, [name], seeds, n, k_main=k, k_sweep=(), sweep_seeds=(), batch_size=budget["batch_size"],
                     profile=profile.name, random_n=budget["random_n"])
loy = loyalty_frame(iso)
loy["task"] = loy["task"].map(labels)
conds = [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]
iso_ivs = {(c, w, m): bootstrap_means(condition_cells(loy, c, w, k, m)) for c, w in conds
           for m in ("label_loyal", "word_loyal")}
fig = plots.plot_loyalty_bars(loy, k=k, title=f"Isolation in the first / last {k} layers, {task.display}",
                         intervals={((c, w), f"{m}ty"): iv.scaled(100) for (c, w, m), iv in iso_ivs.items()})
save_figure(fig, f"08_{name}_isolation")
drop = {(c, w): bootstrap_means(paired_differences(condition_cells(loy, c, w, k, "label_loyal"),
                                                   condition_cells(loy, "label", "first", k, "label_loyal"),
                                                   condition_ids(loy, c, w, k), condition_ids(loy, "label", "first", k)))
        for c, w in conds[1:]}
iso_verdict, iso_checks = isolation_verdict({cw: iso_ivs[(*cw, "label_loyal")] for cw in conds}, drop)
display(pd.DataFrame({"label loyalty % [95% CI]": {f"{c} words, {w} {k}": f"{iso_ivs[(c, w, 'label_loyal')].scaled(100):.1f}"
                                                   for c, w in conds},
                      "word loyalty % [95% CI]": {f"{c} words, {w} {k}": f"{iso_ivs[(c, w, 'word_loyal')].scaled(100):.1f}"
                                                  for c, w in conds}}))
print(f"Isolation on {task.display}: label loyalty {iso_ivs[('label', 'first', 'label_loyal')].scaled(100):.0f}% "
      f"(label words, first {k} layers) against {iso_ivs[('label', 'last', 'label_loyal')].scaled(100):.0f}% (last), "
      f"random words {iso_ivs[('random', 'first', 'label_loyal')].scaled(100):.0f}% / "
      f"{iso_ivs[('random', 'last', 'label_loyal')].scaled(100):.0f}%: the paper's finding {iso_verdict}.")

# %% [markdown]
# ## Attention from $q$ to the label words predicts the output (notebook 03)
#
# For each layer, the attention from $q$ to each class's label words scores the classes;
# $\mathrm{AUCROC}_l$ is the ROC AUC of those scores against the model's own prediction, and $R_l$
# the share of the total signal reached by layer $l$. The paper: $\mathrm{AUCROC}_l$ about 0.8 in
# deep layers, $R_l$ growing in the middle and later layers. A run in which the model predicts one
# class for every input has no AUC.

# %%
raw = {}
auc_df = aucroc_runs(model, [name], seeds, n, batch_size=budget["batch_size"], profile=profile.name, raw=raw)
curve = mean_curves(auc_df)
auc_ivs = curve_intervals(raw)
if curve["auc"].notna().any():
    fig = plots.plot_aucroc_curves({f"{current_model_name().split('/')[-1]}, {task.display}": curve})
    save_figure(fig, f"08_{name}_aucroc")
    auc_verdict, auc_checks = aucroc_verdict(curve, peak_target=paper.FIG5_PEAK_AUCROC, peak_iv=auc_ivs["peak"],
                                             cross_iv=auc_ivs["crossing"], peak_layer_iv=auc_ivs["peak_layer"])
    fmt = lambda iv, f: "no interval" if iv is None else format(iv, f)  # noqa: E731
    cross = crossing_layer(curve["r"].to_numpy())
    auc_text = (f"peak AUCROC_l {np.nanmax(curve['auc']):.2f} at layer {int(np.nanargmax(curve['auc']))} "
                f"[{fmt(auc_ivs['peak'], '.3f')}], R_l passes 0.5 at layer {'never' if cross is None else cross} "
                f"[{fmt(auc_ivs['crossing'], '.1f')}] of {model.cfg.n_layers} (0-based; 95% CI in brackets)")
    display(pd.Series(auc_checks, name="holds").to_frame())
else:
    auc_verdict, auc_checks = "undefined", {}
    auc_text = "no AUC: the model predicted one class for every input"
print(f"AUCROC on {task.display}: {auc_text}; the paper's finding {auc_verdict}.")

# %% [markdown]
# ## Summary
#
# The four readings above, saved with the task's spec path and digest (so results of different
# specs never mix) in the results folder's `metrics/08_your_own_task_<name>.json`.

# %%
summary = [
    summary_row(f"08 {task.display}: vanilla 1-shot accuracy", f"chance {chance:.3f}", acc_iv, acc_reading),
    summary_row(f"08 {task.display}: saliency, S_wp early and S_pq late", "two stages",
                ", ".join(f"{c}: {v}" for (_, c), v in sal_checks.items()), sal_verdict),
    summary_row(f"08 {task.display}: label loyalty, label words isolated in the first {k} layers (%)",
                "lowest of the four", iso_ivs[("label", "first", "label_loyal")].scaled(100), iso_verdict),
    summary_row(f"08 {task.display}: AUCROC_l and R_l", f"about {paper.FIG5_PEAK_AUCROC}; middle/late", auc_text,
                auc_verdict),
]
display(pd.DataFrame(summary))
save_metrics(f"08_your_own_task_{name}", {
    "task": name, "display": task.display, "spec": task.spec_path, "digest": task.digest,
    "template": task.full_template, "separator": task.separator, "label_words": list(task.label_words),
    "model": current_model_name(), "profile": profile.name, "budget": budget, "isolated_layers": k,
    "accuracy": [acc_iv.estimate, acc_iv.low, acc_iv.high], "chance": chance,
    "saliency_checks": {c: v for (_, c), v in sal_checks.items()}, "isolation_checks": iso_checks,
    "aucroc_checks": auc_checks, "table": summary,
    "verdict": f"accuracy {acc_reading}; saliency {sal_verdict}; isolation {iso_verdict}; AUCROC {auc_verdict}",
    "summary": summary,
})
