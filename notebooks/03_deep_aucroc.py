# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
# ---

# %% [markdown]
# # 03 · Deep layers: attention to the label words predicts the output
#
# **Learning objectives.** After this notebook you can
# - read the attention row of the prediction position $q$ from a TransformerLens cache and sum it, per
#   class, over the label-word positions: the paper's $A_l(q, p_i)$;
# - explain how $\mathrm{AUCROC}_l$ turns those per-class scores into "does layer $l$'s attention predict the
#   output?", and what $R_l$ adds;
# - say which parts of the paper's Fig. 5 the two small models show, and what a correlation of attention with
#   the output cannot establish.

# %% [markdown]
# ## The paper's claim
#
# [arXiv 2305.14160](https://arxiv.org/abs/2305.14160) §2.3 (Fig. 5): in deep layers the prediction position
# $q$ reads its answer from the label words. If so, the attention from $q$ to each class's label words should
# predict which label the model outputs. For each layer $l$:
# - the score of class $c$ is the attention from $q$ to the label positions of class $c$, summed over heads and
#   over same-class positions;
# - $\mathrm{AUCROC}_l$ is the ROC AUC of those scores against the model's **own** predicted label. Two
#   predicted classes: the raw score of the second; more: scores normalised to sum 1 and averaged one-vs-one;
#   classes never predicted are dropped (as in the [authors' code](https://github.com/lancopku/label-words-are-anchors));
# - $R_l = \sum_{i \le l}(\mathrm{AUCROC}_i - 0.5) / \sum_{i \le N}(\mathrm{AUCROC}_i - 0.5)$ is the share of
#   the total predictive signal reached by layer $l$.
#
# The paper finds $\mathrm{AUCROC}_l$ reaches about 0.8 in deep layers, and $R_l$ grows mainly in the middle and
# later layers (GPT2-XL and GPT-J, averaged over four tasks). Like Fig. 5, we show two models: the current
# model and the other offline model. The shallow half of the story (label words gather information in shallow
# layers) is §2.2, notebook 02; whether deep layers *use* the anchors causally is tested in §3.1, notebook 04.
#
# **Method.** One forward pass per input under `torch.inference_mode`; `hook_pattern` hooks keep only row $q$
# of each layer's attention, and the same pass gives the label-restricted prediction
# (`helpers.experiments.aucroc.label_attention`).
#
# Under `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs: the numbers test that the
# code runs; they are not evidence.

# %%
import gc

import pandas as pd
import torch
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.prompts import make_icl_set
from helpers.exercises.aucroc import check_attention_at_q, check_label_attention
from helpers.experiments.aucroc import label_attention_reference, mean_curves
from helpers.protocols import aucroc as auc
from helpers.study import notebook, paper, plots
from helpers.study.claims import report_claims, show_reading
from helpers.study.profiles import current_model_name

profile = notebook.start()
model = load_model(current_model_name())
sizes = auc.aucroc_sizes(profile)  # seeds, test inputs per (task, seed), batch size
print(profile.name, current_model_name(), sizes)

# %% [markdown]
# ## The mechanism by hand: $A_l(q, p_i)$ on one prompt
#
# Everything in this notebook rests on one quantity per prompt: for each layer $l$ and class $c$, how much
# attention the prediction position $q$ pays to the label words of class $c$, summed over heads. Two
# exercises build it (the [exercise version](../exercises/03_deep_aucroc.ipynb) leaves them to you).
#
# A `Prompt` (`helpers.core.prompts`) records the positions: `prompt.tokens` (the token ids), `prompt.q`
# (the position whose next-token prediction is the answer), `prompt.label_pos[i]` (the label word of
# demonstration `i`) and `prompt.label_class[i]` (its class).
#
# **Exercise 3.1 · what $q$ reads, per layer** · difficulty ★☆☆ · importance ★★☆ · about 10 min
#
# From one run with a cache, take each layer's attention pattern (`hook_pattern`, `[batch, head, query_pos,
# key_pos]`), keep the row of the query position, and sum it over heads: a `[layer, key_pos]` table of how
# much $q$ reads from every position.
#
# <details><summary>Hint</summary>
#
# `run_with_cache` takes a `names_filter` (a function of the hook name) to keep only what you need;
# `cache["pattern", layer]` is one layer's pattern. `einops.reduce` sums an axis away by name.
# </details>

# %% tags=["solution"]
import einops

from helpers.core.backend import Model  # HookedTransformer (TransformerLens 3.9) or TransformerBridge (4.x)
from helpers.core.prompts import Prompt


def attention_at_q(model: Model, prompt: Prompt) -> torch.Tensor:
    """``[n_layers, seq]``: layer l's attention from ``prompt.q`` to every key position, summed over heads (from
    one ``run_with_cache`` of ``prompt.tokens``)."""
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda name: name.endswith("hook_pattern"))
    rows = torch.stack([cache["pattern", layer][0, :, prompt.q, :] for layer in range(model.cfg.n_layers)])
    return einops.reduce(rows, "layer head key_pos -> layer key_pos", "sum").float().cpu()


# %%
check_attention_at_q(attention_at_q)

# %% [markdown]
# **Exercise 3.2 · per class** · difficulty ★☆☆ · importance ★★★ · about 10 min
#
# Add up the columns of each class's label positions: `[layer, class]`. Two demonstrations of the same class
# add up into one column of the result.

# %% tags=["solution"]
def label_attention_at_q(model: Model, prompt: Prompt, n_classes: int) -> torch.Tensor:
    """``[n_layers, n_classes]``: for every layer l and class c, the attention from q (``prompt.q``) to the label
    positions of class c (the ``prompt.label_pos[i]`` with ``prompt.label_class[i] == c``), summed over heads
    and over those positions (from :func:`attention_at_q`)."""
    at_q = attention_at_q(model, prompt)
    out = torch.zeros(model.cfg.n_layers, n_classes)
    for pos, c in zip(prompt.label_pos, prompt.label_class):
        out[:, c] += at_q[:, pos]
    return out


# %% [markdown]
# The check runs your function on tiny random models of three architectures and compares it with the helper;
# then the same comparison on one real prompt (the first test input of the first task and seed).

# %%
check_label_attention(label_attention_at_q)

one = make_icl_set(model, profile.tasks[0], profile.seeds[0], n_test=1)
prompt = one.prompts[0]
mine = label_attention_at_q(model, prompt, len(one.label_ids))
torch.testing.assert_close(mine, label_attention_reference(model, prompt, one.label_ids))
plots.show_label_attention_by_hand(one.task, prompt, mine)

# %% [markdown]
# Reading the table: each column is a layer, each row a class's label words; a value is a sum over heads, so it
# can exceed 1. Look for the layers where $q$'s attention to the label words is large, and for which class's
# label words get more of it there. One prompt says nothing about prediction across inputs: $\mathrm{AUCROC}_l$
# asks, for every layer, whether the class whose label words get more attention is the class the model outputs.
# That is the helper at scale below.

# %% [markdown]
# ## At scale: AUCROC$_l$ for every task and seed, on both offline models
#
# Each (model, task, seed) run is cached on disk. The second model is loaded only for its own runs, then freed.
#
# **Per task** (the table under the figure): peak $\mathrm{AUCROC}_l$ and the layer where $R_l$ first passes 0.5,
# per model and task (mean curve over seeds), and each model's mean over tasks. A run in which the model predicts
# a single class for every input has no defined AUC and is skipped (counted in the last column).

# %%
names = [current_model_name()]
if other := auc.other_offline_model(current_model_name()):
    names.append(other)
frames, raw = {}, {}  # raw: this run's model, per (task, seed) scores and predictions (for intervals)
for name in names:
    m = model if name == current_model_name() else load_model(name)
    frames[name] = auc.aucroc_runs(m, profile.tasks, sizes, profile=profile.name, raw=raw if name == current_model_name() else None)
    if m is not model:
        del m
        gc.collect()
curves = {name: mean_curves(frames[name]) for name in names}
_ = plots.aucroc_by_layer({f"{name.split('/')[-1]} (mean over tasks, seeds)": curve for name, curve in curves.items()},
                          x="layer", curves={"auc": "AUCROC$_l$", "r": "$R_l$"}, threshold=0.5, save_as="03_aucroc")
display(auc.per_task_table(pd.concat(frames.values(), ignore_index=True)))  # peak AUCROC_l, R_l crossing per task

# %% [markdown]
# ## Paper vs ours
#
# Checks fixed before any run (`helpers.protocols.aucroc.aucroc_verdict`), on this run's model, each on the
# 95% interval of its statistic (seeds, then test inputs within each task and seed, resampled;
# `helpers.protocols.aucroc.curve_intervals`):
# 1. the peak $\mathrm{AUCROC}_l$ (of each seed's task-averaged curve) is at least 0.75 (the paper: "about
#    0.8"): the whole interval must be;
# 2. the peak lies in the deeper half of the layers (layer $\ge \lfloor L/2 \rfloor$, 0-based): the whole
#    interval of the peak layer must;
# 3. $R_l$ first passes 0.5 after the first third of the layers (layer $\ge \lfloor L/3 \rfloor$): the whole
#    interval of that layer must.
#
# Each check replicates if its whole interval clears the threshold, is inconclusive if the interval straddles
# it, and does not replicate if it lies wholly on the wrong side. Together: "replicates" if all three hold,
# "partly" if some do, "inconclusive" if none holds but one straddles, "does not replicate" otherwise. The other
# model appears in the figure and the table above; its own run (`ICL_MODEL`) reports its claims.

# %%
ivs = auc.curve_intervals(raw)  # 95% intervals: seeds, then test inputs within each (task, seed)
claims = auc.aucroc_claims(curves[current_model_name()], ivs, current_model_name(), peak_target=paper.FIG5_PEAK_AUCROC)
report_claims("03_deep_aucroc", claims, metrics={n: c.to_dict("list") for n, c in curves.items()}, digits=2)

# %% [markdown]
# ## Questions for discussion
#
# 1. Why is $\mathrm{AUCROC}_l$ computed against the model's own prediction and not against the gold label?
#
# <details><summary>Answer</summary>
#
# The claim is about mechanism: whether the attention at $q$ explains what the model outputs, right or wrong.
# Against gold labels the AUC would mix in the model's errors, and with a weak few-shot learner (notebook 00 gives
# the two models' 1-shot accuracy) it would be capped by accuracy rather than by how closely the output follows
# the attention.
# </details>
#
# 2. The score sums the attention over all heads. What could a per-head score find that the sum hides, and
#    what would it cost?
#
# <details><summary>Answer</summary>
#
# A few heads may carry the label information while others attend to the label words without writing anything
# useful (paper B, arXiv 2402.02872, separates such heads). The sum weighs every head alike, so such heads dilute
# it; a per-head AUC could peak higher. The cost: $L \times H$ AUCs (72 on Gemma, 270 on SmolLM2) on 64 inputs
# per task and seed, and picking the best head after looking at them inflates its AUC, so it would need held-out
# inputs.
# </details>
#
# 3. A peak $\mathrm{AUCROC}_l$ of 0.75 means the attention to the label words predicts the output. Does it mean
#    the output is computed from the label words?
#
# <details><summary>Answer</summary>
#
# No: it is a correlation across inputs. The query's content could drive both where $q$ attends and what the
# model outputs, through paths that never read the label words. Causal evidence needs an intervention: blocking
# the label words' information flow (§2.2, notebook 02) or changing the attention to them and watching the output
# move (§3.1, notebook 04; its by-hand cell does exactly that on one prompt).
# </details>
#
# 4. $R_l$ is a share of a total. What happens to it when the deep layers' AUCs are only slightly above 0.5, and
#    why does the helper refuse to report it when the total is not positive?
#
# <details><summary>Answer</summary>
#
# With a small total, small fluctuations of shallow layers around 0.5 (both signs) move $R_l$ a lot, and the
# crossing layer becomes noisy: that is why the check uses the interval of the crossing layer, not its point
# value. With a total at or below zero the "shares" can exceed 1 or run backwards; they are not fractions of
# anything, so `cumulative_r` returns NaN.
# </details>

# %% [markdown]
# ## Reading: what this shows on a 135M-270M model, and what it cannot
#
# Fig. 5's shape is $\mathrm{AUCROC}_l$ near chance in the first layers, rising through the middle and peaking
# deep, with $R_l$ passing 0.5 after the first third. The three checks below grade the peak's size, its layer and
# the crossing; the numbers and verdicts are this run's.

# %%
_ = show_reading("03_deep_aucroc", digits=2)

# %% [markdown]
# Read the curve above for the shape: where it leaves chance, where it peaks, and whether it falls back in the
# last layers.
#
# What this design cannot establish. It is a correlation of attention with the output (question 3), not a test
# that the deep layers read the label words; notebook 04 intervenes. Two models of 135M and 270M parameters are
# an order of magnitude below GPT2-XL (1.5B) and GPT-J (6B), and weak few-shot learners, so a smaller AUC may
# reflect weaker in-context learning as much as a different mechanism. TweetEval-emotion stands in for EmoC
# (data/README.md). The peak is a maximum over layers, so on few inputs it leans high (the interval is the spread
# of that statistic, not a bound on one fixed layer's AUC). Five seeds resample the demonstrations, not the
# prompt template or the label words.
