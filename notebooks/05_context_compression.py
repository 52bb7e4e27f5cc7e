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
# # 05 · Anchor-only context compression (paper A, §3.2, Tables 2 and 3)
#
# **Claim.** If the label words (and the template tokens around them) carry what the model needs from the
# demonstrations, then keeping *only their keys and values* — computed once, with the full context — and
# running each test input alone after them (Hidden_anchor) should keep most of ICL's predictions, better than
# keeping the same words as plain text (Text_anchor) or keeping random positions (Hidden_random,
# Hidden_random-top), and be faster. Paper (GPT2-XL, average of 4 tasks): Hidden_anchor label loyalty 79.47,
# word loyalty 62.17, accuracy 45.04 (ICL 51.90); speed-up 1.1x-2.5x, bounded by the ratio of tokens.
#
# Mechanics (`helpers.experiments.compression`): one pass of the demonstrations into TransformerLens's key/value cache; the
# cache is cut to the anchor positions (`Prompt.anchor_pos`: label tokens, the demonstrations' template tokens
# and newlines, BOS). The anchors keep their **original** positions and the input continues at its original
# position (rotary: keys pre-rotated, queries shifted; learned positions: `W_pos[P0:]`). Tests prove that a
# cache keeping every position reproduces full ICL and that a pruned cache equals the full prompt with the
# dropped positions masked. Hidden_random keeps the template tokens plus one random text position per
# demonstration instead of the label; Hidden_random-top is the best of `profile.random_top_draws` seeded draws
# by label loyalty, chosen on the same test inputs (as in the paper; this flatters it).
#
# Query positions (`QUERY_POSITIONS` below, default `"original"`: the method above). The two released code paths
# of the paper (arXiv 2305.14160, §3.2) differ here: the GPT-J code continues the input at its original position,
# as we do, while the GPT-2 code passes the anchors' keys and values but restarts the input at position 0. Setting
# `QUERY_POSITIONS = "restart"` runs that GPT-2 variant for the three cached methods (Hidden_anchor, Hidden_random,
# Hidden_random-top): the input's tokens get positions 0..len-1 (learned positions `W_pos[0:len]`; rotary angles
# 0..len-1 for its queries and its own keys) while the anchors keep the positions they had in the full context.
# A GPT2-XL run with `"restart"` is the one to set beside the paper's GPT2-XL Table 2. ICL and Text_anchor have
# no cache and do not change; results of the two settings are stored apart (`helpers.experiments.compression.cached_compression`).
#
# Data note: seeded test/demonstration pools from StaICC's merged data (data/README.md); TweetEval-emotion
# stands in for EmoC.

# %%
import pandas as pd
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.prompts import make_icl_set
from helpers.core.tasks import get_task
from helpers.experiments.compression import (
    METHODS,
    cached_compression,
    method_cells,
    speed_verdict,
    table2_verdict,
    time_icl_vs_anchor,
)
from helpers.study import paper as PA
from helpers.study import plots
from helpers.study.profiles import current_model_name, get_profile
from helpers.study.results import save_figure, save_metrics, summary_row
from helpers.study.stats import bootstrap_means, paired_differences

profile = get_profile()
model_name = current_model_name()
model = load_model(model_name)
print(profile)

# %% [markdown]
# Run size: every method is one pass over the test inputs (as suffixes after its cache), and
# Hidden_random-top one per draw (`profile.random_top_draws`: 2 in `default`, the paper's 20 in `paper`);
# every seed of the profile (`smoke`: one) and `profile.n_test` inputs per (task, seed).
# `QUERY_POSITIONS`: `"original"` (the method) or `"restart"` (the paper's GPT-2 code; see above).

# %%
QUERY_POSITIONS = "original"
SUFFIX = "" if QUERY_POSITIONS == "original" else f"_{QUERY_POSITIONS}"  # a variant's figures/metrics stay apart
N_SEEDS = {"smoke": 1}.get(profile.name, len(profile.seeds))
N_TEST = profile.n_test
seeds = profile.seeds[:N_SEEDS]
results = {}
for task in profile.tasks:
    for seed in seeds:
        icl = make_icl_set(model, task, seed, N_TEST)
        results[task, seed] = cached_compression(model, icl, profile.random_top_draws, profile.batch_size,
                                                 query_positions=QUERY_POSITIONS)
        m = results[task, seed].metrics
        print(f"{task:14s} seed {seed}: " + "  ".join(f"{k} LL {100 * v['label_loyalty']:.0f} "
                                                     f"WL {100 * v['word_loyalty']:.0f} Acc {100 * v['accuracy']:.0f}"
                                                     for k, v in m.items()))

# %% [markdown]
# ## Table 2 (label loyalty / word loyalty / accuracy, %, mean over tasks and seeds)

# %%
long = pd.DataFrame([dict(task=t, seed=s, method=meth, metric=met, value=val)
                     for (t, s), r in results.items() for meth, d in r.metrics.items() for met, val in d.items()])
per_task = long.groupby(["method", "metric", "task"]).value.mean().unstack("task")
avg = (100 * per_task.mean(axis=1)).unstack("metric")[["label_loyalty", "word_loyalty", "accuracy"]].loc[list(METHODS)]
avg.columns = ["LL", "WL", "Acc"]
paper2 = pd.DataFrame({f"{m} {col}": [PA.TABLE2[m][meth][i] for meth in METHODS]
                       for m in ("GPT2-XL", "GPT-J") for i, col in enumerate(("LL", "WL", "Acc"))}, index=list(METHODS))
table2 = pd.concat([paper2, avg.add_prefix(f"{model_name.split('/')[-1]} (ours) ").round(2)], axis=1)
table2

# %%
per_metric = {"label_loyalty": "label_loyal", "word_loyalty": "word_loyal", "accuracy": "correct"}


def cells(method, metric):
    return method_cells(results, method, metric)


# 95% intervals over seeds and, within each seed, test inputs (helpers.study.stats)
ivs = {(m, met): bootstrap_means(cells(m, col)).scaled(100) for m in METHODS for met, col in per_metric.items()}
bars = long.groupby(["method", "metric"], sort=False).value.mean().reset_index()
fig = plots.plot_compression_bars(bars, title=f"{model_name}: loyalty and accuracy, mean over tasks",
                                  intervals={(met, m): iv.scaled(0.01) for (m, met), iv in ivs.items()})
save_figure(fig, "05_table2_bars" + SUFFIX)

# %% [markdown]
# ## Table 3: speed-up of Hidden_anchor over full ICL
# Time per input, one input at a time, both paths in the same run and interleaved (see
# `benchmarks/bench_compression.py` for the standalone version). The bound is the ratio of tokens
# (L_context + L_x) / (L_anchor + L_x); L_demo is the mean length of one demonstration.
# Each input's time is its median over the repeats; the speed-up is the ratio of the mean times, with a
# 95% bootstrap interval over the timed inputs (paired). That interval covers the inputs' lengths and
# the timing noise of this run, not another machine's timing. Times on a shared CPU are noisy; the
# benchmark script is the reference measurement.

# %%
N_TIME = {"smoke": 4, "default": 8}.get(profile.name, 16)
speed = []
for task in profile.tasks:
    icl = make_icl_set(model, task, seeds[0], N_TIME)
    reps = {"smoke": 1, "default": 2}.get(profile.name, 3)
    speed.append(time_icl_vs_anchor(model, icl, n_inputs=N_TIME, repeats=reps))
speed = pd.DataFrame(speed)
table3 = speed[["task", "L_demo", "L_x", "L_anchor", "bound", "speedup", "speedup_low", "speedup_high",
               "speedup_over_bound"]].round(2)  # low/high: 95% interval over the timed inputs
for m in ("GPT2-XL", "GPT-J"):
    table3[f"paper {m}"] = [PA.TABLE3_SPEEDUP[m][PA.paper_key(t)] for t in table3.task]
table3["paper L_demo / L_x"] = [f"{PA.TABLE3_LDEMO[PA.paper_key(t)]} / {PA.TABLE3_LX[PA.paper_key(t)]}"
                               + (" (EmoC)" if PA.paper_key(t) == "emoc" else "") for t in table3.task]
table3

# %%
fig = plots.plot_speedup(speed, title=f"{model_name}: Hidden_anchor speed-up vs token-ratio bound")
save_figure(fig, "05_speedup")

# %% [markdown]
# ## Verdict
# Criteria (fixed before the run, `helpers.experiments.compression.table2_verdict`), on 95% intervals of
# Hidden_anchor minus each other compressed method (Text_anchor, Hidden_random, Hidden_random-top), paired per
# input and averaged over tasks: *replicates* if all six intervals (label and word loyalty) lie above zero;
# *partly* if the three of one metric do, or the four against the hidden random baselines do; *does not
# replicate* if on both metrics some method lies clearly above Hidden_anchor; else *inconclusive*. Speed
# (`speed_verdict`): *meets the goal* if every task reaches 90% of its token-ratio bound, *speeds up* if every
# task is faster than full ICL.

# %%
names_ = {"label_loyalty": "label loyalty", "word_loyalty": "word loyalty", "accuracy": "accuracy"}
gaps = {(o, met): bootstrap_means(paired_differences(cells("Hidden_anchor", per_metric[met]),
                                                     cells(o, per_metric[met]))).scaled(100)
        for o in ("Text_anchor", "Hidden_random", "Hidden_random-top") for met in ("label_loyalty", "word_loyalty")}
display(pd.DataFrame({names_[met]: {m: f"{ivs[(m, met)]:.1f}" for m in METHODS} for met in per_metric})
        .rename_axis(f"ours, % [95% CI], {model_name}"))
display(pd.DataFrame({"Hidden_anchor minus (points) [95% CI]": {f"{o}, {met}": f"{iv:+.1f}" for (o, met), iv in gaps.items()}}))
verdict, checks = table2_verdict(gaps)
display(pd.Series(checks, name="holds").to_frame())
sverdict = speed_verdict(dict(zip(speed.task, speed.speedup)), dict(zip(speed.task, speed.bound)))
names = {"label_loyalty": "label loyalty", "word_loyalty": "word loyalty", "accuracy": "accuracy"}
summary = [summary_row(f"05 Table 2 {meth}: {names[met]} (%)", float(paper2.loc[meth, f"GPT2-XL {col}"]),
                       ivs[(meth, met)], verdict)
           for meth in METHODS if meth != "ICL" for met, col in zip(names, ("LL", "WL", "Acc"))]
summary.append(summary_row("05 Table 2 ICL accuracy (%)", 51.90, ivs[("ICL", "accuracy")], verdict))
summary += [summary_row(f"05 Table 2 Hidden_anchor minus {o}: {names[met]} (points)", "above 0", iv, verdict)
            for (o, met), iv in gaps.items()]
summary += [summary_row(f"05 Table 3 speed-up, {get_task(r.task).display}",
                        PA.TABLE3_SPEEDUP["GPT2-XL"][PA.paper_key(r.task)],
                        f"{r.speedup:.2f}x [{r.speedup_low:.2f}, {r.speedup_high:.2f}] (95% CI over {r.n_inputs} timed "
                        f"inputs; bound {r.bound:.2f}x: {100 * r.speedup_over_bound:.0f}%)", sverdict)
            for r in speed.itertuples()]
save_metrics("05_context_compression" + SUFFIX, {"table2": avg.to_dict(), "table3": speed.to_dict(orient="records"),
                                                 "table": table2.reset_index(names="method").to_dict(orient="records"),
                                                 "table2_ci": {f"{m}|{met}": [iv.estimate, iv.low, iv.high]
                                                               for (m, met), iv in ivs.items()},
                                                 "checks": checks, "query_positions": QUERY_POSITIONS,
                                                 "summary": summary, "seeds": list(seeds), "n_test": N_TEST,
                                                 "verdict": verdict, "speed_verdict": sverdict})
print("Paper (GPT2-XL): Hidden_anchor LL 79.47 / WL 62.17 / Acc 45.04 vs ICL Acc 51.90; best compressed method.")
ha = avg.loc["Hidden_anchor"]
print(f"Ours ({model_name}, profile {profile.name}, seeds {list(seeds)}, n={N_TEST}, query positions "
      f"{QUERY_POSITIONS}): Hidden_anchor LL {ha.LL:.2f} / "
      f"WL {ha.WL:.2f} / Acc {ha.Acc:.2f} vs ICL Acc {avg.loc['ICL', 'Acc']:.2f}  ->  {verdict}")
print("Speed-up per task: " + ", ".join(f"{r.task} {r.speedup:.2f}x (bound {r.bound:.2f}x)" for r in speed.itertuples())
      + f"  ->  {sverdict}")
