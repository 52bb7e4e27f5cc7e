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
# # 03 · Deep layers: attention to the label words predicts the output
#
# **Claim (paper §2.3, Fig. 5).** In deep layers the prediction position $q$ reads its answer
# from the label words. If so, the attention from $q$ to each class's label word should predict
# which label the model outputs. For each layer $l$:
# - the score of class $c$ is the attention from $q$ to the label positions of class $c$, summed
#   over heads and over same-class positions;
# - $\mathrm{AUCROC}_l$ is the ROC AUC of those scores against the model's **own** predicted label.
#   Multi-class uses one-vs-one averaging on scores normalised to sum 1, and classes that are
#   never predicted are dropped;
# - $R_l = \sum_{i \le l}(\mathrm{AUCROC}_i - 0.5) / \sum_{i \le N}(\mathrm{AUCROC}_i - 0.5)$ is
#   the share of the total predictive signal reached by layer $l$.
#
# The paper finds $\mathrm{AUCROC}_l$ reaches about 0.8 in deep layers, and $R_l$ grows mainly in
# the middle and later layers (averaged over the four tasks). Like the paper's Fig. 5 (GPT2-XL
# and GPT-J), we show two models: the current model and the other offline model.
#
# **Method.** One forward pass per batch under `torch.inference_mode`. `hook_pattern` hooks keep
# only row $q$ of each layer's attention, and the same pass gives the label-restricted
# prediction.

# %%
import gc

import numpy as np
import pandas as pd
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.tasks import get_task
from helpers.experiments.aucroc import (
    aucroc_runs,
    aucroc_sizes,
    aucroc_verdict,
    crossing_layer,
    curve_intervals,
    mean_curves,
    other_offline_model,
)
from helpers.study import paper, plots
from helpers.study.profiles import current_model_name, get_profile
from helpers.study.results import mean_std, save_figure, save_metrics, summary_row

profile = get_profile()
model = load_model(current_model_name())
budget = aucroc_sizes(profile)
print(profile.name, current_model_name(), budget)

# %% [markdown]
# ## AUCROC$_l$ for every task and seed, on both offline models
#
# Each (model, task, seed) run is cached on disk. The second model is loaded only for its own
# runs, then freed.

# %%
names = [current_model_name()]
other = other_offline_model(current_model_name())
if other:
    names.append(other)
frames, raw = {}, {}  # raw: this run's model, per (task, seed) scores and predictions (for intervals)
for name in names:
    m = model if name == current_model_name() else load_model(name)
    frames[name] = aucroc_runs(m, profile.tasks, budget["seeds"], budget["n"], batch_size=budget["batch_size"],
                               profile=profile.name, raw=raw if name == current_model_name() else None)
    if m is not model:
        del m
        gc.collect()
df = pd.concat(frames.values(), ignore_index=True)
curves = {name: mean_curves(frames[name]) for name in names}
fig = plots.plot_aucroc_curves({f"{name.split('/')[-1]} (mean over tasks, seeds)": c for name, c in curves.items()})
save_figure(fig, "03_aucroc")

# %% [markdown]
# ## Per task
#
# Peak $\mathrm{AUCROC}_l$ and the layer where $R_l$ first passes 0.5, per model and task (mean
# curve over seeds). A run in which the model predicts a single class for every input has no
# defined AUC and is skipped (`n_pred_classes` = 1).

# %%
rows = []
for (name, task), d in df.groupby(["model", "task"]):
    c = mean_curves(d)
    rows.append({"model": name.split("/")[-1], "task": get_task(task).display, "layers": len(c),
                 "peak AUCROC": float(np.nanmax(c["auc"])) if c["auc"].notna().any() else np.nan,
                 "peak layer": int(np.nanargmax(c["auc"])) if c["auc"].notna().any() else None,
                 "R_l > 0.5 at layer": crossing_layer(c["r"].to_numpy()),
                 "accuracy": d.groupby("seed")["accuracy"].first().mean(),
                 "runs with 1 predicted class": int((d.groupby("seed")["n_pred_classes"].first() < 2).sum())})
display(pd.DataFrame(rows).round(3))

# %% [markdown]
# ## Numbers beside the paper's claim
#
# Checks fixed before any run (`helpers.experiments.aucroc.aucroc_verdict`), on each model's curve averaged
# over tasks and seeds:
# 1. the peak $\mathrm{AUCROC}_l$ is at least 0.75 (the paper: "about 0.8"); for this run's model the
#    whole 95% interval of the peak must be (seeds and test inputs resampled, `helpers.experiments.aucroc.curve_intervals`);
# 2. the peak lies in the deeper half of the layers; for this run's model the whole 95% interval of the
#    peak layer (of the seed-averaged curve) must (same resamples);
# 3. $R_l$ first passes 0.5 after the first third of the layers (at layer $\ge \lfloor L/3 \rfloor$, 0-based);
#    for this run's model the whole 95% interval of that layer must (same resamples as check 1).
#
# The verdict is "replicates" if all hold, "partly" if some hold, "inconclusive" if none holds but
# the interval of check 1 straddles 0.75, that of check 2 straddles $\lfloor L/2 \rfloor$ or that of check 3
# straddles $\lfloor L/3 \rfloor$, and
# "does not replicate" otherwise. The other model is judged on its point estimates (its runs keep no
# per-input scores for an interval).

# %%
summary_rows_tbl, verdicts, metrics = [], {}, {}
# this run's model: 95% interval of the peak (each seed's task-averaged curve; seeds, then inputs resampled)
ivs = curve_intervals(raw)  # None where undefined in too many resamples (e.g. one predicted class, tiny runs)
peak_iv, cross_iv, peak_layer_iv = ivs["peak"], ivs["crossing"], ivs["peak_layer"]
print(f"{current_model_name()}: peak AUCROC_l {'no interval' if peak_iv is None else format(peak_iv, '.3f')}; "
      f"R_l passes 0.5 at layer {'no interval' if cross_iv is None else format(cross_iv, '.1f')}; "
      f"peak layer {'no interval' if peak_layer_iv is None else format(peak_layer_iv, '.1f')} (95% CI)")
for name, c in curves.items():
    this = name == current_model_name()
    v, checks = aucroc_verdict(c, peak_target=paper.FIG5_PEAK_AUCROC, peak_iv=peak_iv if this else None,
                               cross_iv=cross_iv if this else None, peak_layer_iv=peak_layer_iv if this else None)
    verdicts[name] = v
    L = len(c)
    cross = crossing_layer(c["r"].to_numpy())
    peak = float(np.nanmax(c["auc"]))
    summary_rows_tbl.append({"model": name.split("/")[-1], "layers": L,
                         "paper: peak AUCROC": f"about {paper.FIG5_PEAK_AUCROC}", "ours: peak AUCROC": round(peak, 3),
                         "ours: peak layer": int(np.nanargmax(c["auc"])),
                         "paper: R_l grows": "mainly middle/late layers",
                         "ours: R_l > 0.5 at layer": cross,
                         "ours: R_l > 0.5 at layer, mean over seeds [95% CI]":
                             format(cross_iv, ".1f") if this and cross_iv is not None else "n/a",
                         "ours: R_l > 0.5 at depth": None if cross is None else round(cross / (L - 1), 2),
                         **{k: v for k, v in checks.items()}, "verdict": v})
    metrics[name] = {"auc": c["auc"].to_numpy(), "r": c["r"].to_numpy(), "peak_auc": peak,
                     "peak_layer": int(np.nanargmax(c["auc"])), "crossing_layer": cross, "checks": checks,
                     "verdict": v}
display(pd.DataFrame(summary_rows_tbl).set_index("model").T)
summary = " ".join(
    f"{name} ({m['auc'].shape[0]} layers): peak AUCROC_l {m['peak_auc']:.2f} at layer {m['peak_layer']}, "
    f"R_l passes 0.5 at layer {m['crossing_layer']}; verdict: {m['verdict']}."
    for name, m in metrics.items()
) + f" (Paper: AUCROC_l about {paper.FIG5_PEAK_AUCROC} in deep layers, R_l growing mainly in middle and later layers.)"
print(summary)
# this run's model: per-seed values (each seed's curve averaged over tasks)
cur = frames[current_model_name()]
seed_curves = {s: mean_curves(d) for s, d in cur.groupby("seed")}
L = model.cfg.n_layers
summary_rows = [
    summary_row("03 peak AUCROC_l (each seed's curve, mean over tasks)", f"about {paper.FIG5_PEAK_AUCROC}",
                peak_iv if peak_iv is not None else [float(np.nanmax(c["auc"])) for c in seed_curves.values()],
                verdicts[current_model_name()]),
    summary_row("03 layer where R_l passes 0.5 (0-based)", "middle / later layers",
                (mean_std([crossing_layer(c["r"].to_numpy()) for c in seed_curves.values()]) if cross_iv is None
                 else f"{cross_iv:.1f} (95% CI; {cross_iv.n_seeds} seed(s), {cross_iv.n_inputs} inputs)")
                + f" of {L} layers", verdicts[current_model_name()]),
]
save_metrics("03_deep_aucroc", {"profile": profile.name, "seeds": budget["seeds"], "n": budget["n"],
                                "table": summary_rows_tbl,
                                "models": metrics, "verdict": f"{verdicts[current_model_name()]}. {summary}",
                                "summary": summary_rows})
