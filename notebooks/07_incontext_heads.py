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
# # 07 · In-context heads: query and key as two towers (paper B)
#
# **Learning objectives.** After this notebook you can
# - ablate one attention head at one position with a TransformerLens hook, and read what it did to each
#   label word's log-probability;
# - project a head's value-output vectors onto the label words' logit difference, through the norms with
#   their scales frozen;
# - tell a prior for one word from in-context use of a label mapping, with a swapped-mapping control;
# - say what head ablation, value-output vectors and attention correlations can and cannot show on a
#   135M-270M model.
#
# ## The paper's claim
#
# Yu & Ananiadou 2024, [arXiv 2402.02872](https://arxiv.org/abs/2402.02872) (abstract; the in-context heads
# experiment, the value-output analysis, the two-towers hypothesis and the bias reductions): on classification
# with semantically unrelated labels ("foo"/"bar"), about 1% of the attention heads, the *in-context heads*,
# carry in-context learning. Intervening on them drops ICL accuracy from 87.6% to 24.4%. In those heads the
# value-output (VO) vector at each demonstration's label position carries that label, and a prediction moves
# from foo to bar because the *attention* at the last position q moves between the foo and bar positions (query
# and key act as two towers computing a similarity), not because the VO vectors change. This explains the
# majority-label and recency biases, which the paper reduces by 22% and 17% on its own bias measures; their
# exact definitions are not given, so the measures here are this project's and not the same quantity.
#
# Paper A ([arXiv 2305.14160](https://arxiv.org/abs/2305.14160), Appendix F.2) found GPT2-XL and GPT-J-6B at
# chance with semantically unrelated labels, and LLaMA-33B at 83.0% on SST-2 with "A"/"B" labels: ICL with
# foo/bar needs scale. Expect the small offline models here to fail paper B's setting; the mapping control
# (section 2.1) says whether they do.
#
# Definitions are in the docstrings of one module per idea: `helpers/experiments/mapping_control.py` (the
# mapping control and the regime: does the model read the foo/bar mapping at all),
# `helpers/experiments/incontext_heads.py` (gain, drop, in-context heads), `helpers/experiments/head_ablation.py`
# (ablating them against random heads), `helpers/experiments/two_towers.py` (value-output vectors, logit minus,
# two towers) and `helpers/experiments/head_biases.py` (bias sizes, reductions); the foo/bar tasks are in
# `helpers/core/unrelated.py`, the reading of heads at q in `helpers/core/heads.py`, and the overall verdict
# and the printed lines in `helpers/study/heads_report.py`. Every number
# carries a 95% interval (bootstrap over seeds, then inputs within each task and seed; `helpers/study/stats.py`).
#
# Under `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs, on SST-2 alone (the binary
# task among the first two, `study_tasks`): the numbers test that the code runs; they are not evidence.

# %%
from IPython.display import display

from helpers.core.models import load_model
from helpers.protocols.heads import HeadsStudy
from helpers.study import heads_report as hr
from helpers.study import notebook, plots
from helpers.study.profiles import current_model_name

profile, model_name = notebook.start(), current_model_name()
model = load_model(model_name)
study = HeadsStudy(model, model_name, profile)  # every step below, computed on first use and stored on disk
heads_sizes = study.heads_sizes  # the evaluation sizes (n_eval, seeds, k_per_class) + n_attr
N_IC = study.n_ic  # how many in-context heads: max(4, 1% of the heads)

# %% [markdown]
# The tasks and their label words. Paper B's setting is binary: SST-2, and AGNews made binary (its first two
# classes), each under five mappings of its labels (`helpers.experiments.mapping_control.MAPPINGS`): the
# unrelated foo/bar of the paper and its swap bar/foo, A/B and its swap, and the task's own words. The other
# experiments' sizes each hold the same evaluation sizes, plus their own.

# %%
foobar = study.foobar  # {task: UnrelatedTask} under the paper's foo/bar (smoke: SST-2); every mapping: study.tasks_by_mapping
task_names, seed0 = study.task_names, heads_sizes.seeds[0]
t0 = task_names[0]
title, short_name = study.title, study.short_name  # figure titles, and the tasks' short names
print(hr.heads_setup_text(profile.name, model_name, hr.notebook_sizes(heads_sizes, study.towers_sizes, study.bias_sizes),
                          model.cfg, N_IC))

# %% [markdown]
# ## 1 · The mechanism by hand: one head ablated at q, one head's value-output vectors
#
# The tasks are the collection's SST-2 (Negative -> **foo**, Positive -> **bar**) and AGNews restricted to
# World vs Sports (World -> foo, Sports -> bar), in the paper's prompt shape `S0 : bar\nS1 : foo\n...\nSx :`
# (no "Review:" prefix: with unrelated labels the template's own words would hint at the meaning the paper
# removes on purpose). Two measurements carry this notebook; on one prompt each is a few lines of
# TransformerLens, and each is an exercise (the [exercise version](../exercises/07_incontext_heads.ipynb) leaves
# them to you).
#
# **Exercise 7.1 · (a) a head ablated at q** · difficulty ★★☆ · importance ★★★ · about 15 min
#
# Head (l, h) writes `z[q, h] @ W_O[l, h]` into the residual stream at the last position q. Hook
# `blocks.{l}.attn.hook_z`, zero that head's z at q only, and compare each label word's full-vocabulary
# log-probability at q without and with the ablation: that difference is the head's **drop**.
# Section 2.2 measures it for every head on many prompts, where a key/value cache re-runs only the last token.
#
# **Exercise 7.2 · (b) a head's value-output vectors** · difficulty ★★★ · importance ★★☆ · about 25 min
#
# Source position j contributes `A[q, j] * (v_j @ W_O[l, h])` to the
# head's output at q. Per unit attention, `v_j @ W_O[l, h]` read through the final norm (its scale frozen at its
# value at q) and `W_U[:, foo] - W_U[:, bar]` is the vector's **logit minus**: positive if it pushes the
# prediction toward foo. If the VO vectors carry the labels, foo positions come out positive and bar positions
# negative.

# %% [markdown]
# <details><summary>Hint</summary>
#
# - `model.run_with_hooks(tokens[None], fwd_hooks=[(name, fn)])` returns the logits with `fn(z, hook)` applied;
#   `z` has shape `[batch, pos, head, d_head]`. Compare log-probabilities (`log_softmax`), not logits.
# - `_, cache = model.run_with_cache(tokens[None])` gives `cache[f"blocks.{l}.attn.hook_v"]`, shape `[batch, pos,
#   kv_head, d_head]`. With grouped-query attention query head h reads key/value head
#   `h // (n_heads // n_key_value_heads)` (`n_key_value_heads` is None when every head has its own).
# - A norm's linear part with its scale frozen: `x / scale * norm.w`, where `scale` is the norm's `hook_scale` at
#   q; a LayerNorm (the tiny GPT-2-like model) first subtracts the mean over `d_model`. Gemma also has a norm after
#   attention (`blocks.{l}.ln1_post`, `model.cfg.use_normalization_before_and_after`): apply it first, the same way.
# </details>

# %% tags=["solution"]
from einops import einsum


def head_ablation_drop(model, tokens, layer, head, label_ids):
    """Each label word's log-probability at the last position q, plain minus with head (layer, head)'s output z
    set to zero at q only (full-vocabulary log_softmax). Returns one value per label word."""
    q = len(tokens) - 1

    def zero_head_at_q(z, hook):  # z: [batch, pos, head, d_head]
        z[:, q, head] = 0.0
        return z

    plain = model(tokens[None])[0, q].log_softmax(-1)
    ablated = model.run_with_hooks(tokens[None], fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero_head_at_q)])
    return plain[label_ids] - ablated[0, q].log_softmax(-1)[label_ids]


def value_output_logit_minus(model, cache, layer, head, positions, label_ids):
    """Head (layer, head)'s value-output vector v_j @ W_O[layer, head] at each source position j of `positions`
    (per unit attention; `cache` from model.run_with_cache(tokens[None])), read at the last position q as
    log p(foo) - log p(bar): through ln1_post (if the model has one) and ln_final, each with its scale frozen at
    its value at q (a LayerNorm first subtracts the mean), then W_U[:, foo] - W_U[:, bar]. Returns one value per
    position."""
    kv_head = head // (model.cfg.n_heads // (model.cfg.n_key_value_heads or model.cfg.n_heads))
    v = cache[f"blocks.{layer}.attn.hook_v"][0, positions, kv_head]
    x = einsum(v, model.W_O[layer, head], "pos d_head, d_head d_model -> pos d_model")

    def frozen_norm(norm, x, scale):  # the norm's linear part, its scale fixed
        if type(norm).__name__.startswith("LayerNorm"):
            x = x - x.mean(-1, keepdim=True)
        return x / scale * norm.w

    if model.cfg.use_normalization_before_and_after:  # Gemma: a norm after attention
        x = frozen_norm(model.blocks[layer].ln1_post, x, cache[f"blocks.{layer}.ln1_post.hook_scale"][0, -1])
    x = frozen_norm(model.ln_final, x, cache["ln_final.hook_scale"][0, -1])
    return x @ (model.W_U[:, label_ids[0]] - model.W_U[:, label_ids[1]])


# %% [markdown]
# The check runs your functions on tiny random models of three architectures (learned positions with
# LayerNorm, rotary with RMSNorm, grouped-query attention) against the helpers. Then the same functions run on
# the loaded model and one evaluation prompt, against the helpers' results: the drop of every head (one batched
# run at q, `head_label_drops`), and `value_outputs`. Your function recomputes the three heads with the largest
# drop, and the VO vectors of the first of them.

# %%
import torch

from helpers.core.unrelated import eval_set
from helpers.exercises.incontext_heads import check_head_ablation
from helpers.exercises.two_towers import check_value_output_logit_minus
from helpers.experiments.incontext_heads import head_label_drops
from helpers.experiments.two_towers import value_outputs

check_head_ablation(head_ablation_drop)
check_value_output_logit_minus(value_output_logit_minus)
ps = eval_set(model, foobar[t0], seed0, heads_sizes)
prompt, lids, words = ps.prompts[0], ps.label_ids, foobar[t0].task.label_words
all_heads = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
drops = head_label_drops(model, prompt.tokens, all_heads, lids)  # [head, label], every head at once
top = [all_heads[i] for i in drops.abs().amax(1).argsort(descending=True)[:3]]
with torch.inference_mode():
    mine = torch.stack([head_ablation_drop(model, prompt.tokens, l, h, lids) for l, h in top]).float().cpu()
    _, cache = model.run_with_cache(prompt.tokens[None])
    vo_mine = value_output_logit_minus(model, cache, *top[0], prompt.label_pos, lids).float().cpu()
torch.testing.assert_close(mine, drops[[all_heads.index(hd) for hd in top]], atol=1e-4, rtol=1e-4)
torch.testing.assert_close(vo_mine, value_outputs(model, [prompt], lids, [top[0]], shared=False).vo_lm[0, 0],
                           atol=1e-4, rtol=1e-4)
print(prompt.text, "\n")
display(plots.by_hand_drop_table(mine, top, words))  # rows: the three heads; columns: drop of log p(word)
print(hr.by_hand_vo_text(top[0], words, prompt.label_class, vo_mine))

# %% [markdown]
# A positive drop means the head raised that word at q on this prompt. The VO line is the first head's
# vectors at the four label positions: if they carry the labels, the foo positions are positive and the bar
# positions negative. Both are one prompt; section 2 asks which heads do this on many prompts, and whether it
# matters for the prediction.

# %% [markdown]
# ## 2 · At scale
#
# Every step below is one cached `*_runs` call (results stored on disk per task and seed; see the end of each
# experiment module). `k_per_class` demonstrations per class, one fixed, shuffled set per seed (as in
# notebooks 00-06).
#
# ### 2.1 · Accuracy with unrelated labels, and the mapping control
#
# Foo/bar accuracy above 0.5 can come from a prior for one word and a test sample that happens to favour its
# class. So the same demonstrations and queries also run with the mapping swapped (Negative -> bar, Positive
# -> foo), with " A"/" B" both ways, and with the real label words. Per input, the *swap-averaged accuracy* is
# the mean of its correctness under a mapping and under its swap: a fixed word preference scores exactly 0.5 on
# every input, so only a model that reads the mapping from the demonstrations lifts it above 0.5. *Same-word
# rate*: the share of inputs whose predicted word does not change when the mapping is swapped (1 for a pure
# word prior).

# %%
from helpers.protocols import mapping_control as mc

display(plots.unrelated_accuracy_table(study.accuracy))  # rows: mappings; column: accuracy [95% CI]
# columns: each mapping with its swap; rows: swap-averaged accuracy, same-word rate, what the interval says
display(plots.mapping_control_table(study.swap_control, reading=mc.mapping_interval_part))

# %% [markdown]
# ### 2.2 · Head attribution at q, for each label word
#
# For every head, on prompts of a separate draw (seed + 1000, so head selection never sees the evaluation
# prompts): **gain** = what the head's own write at q adds to a label word's log-probability at the final
# residual (`log p(c | r) - log p(c | r - c_head)`), and **drop** = section 1's quantity. Both are measured for
# each label word c on the prompts whose gold label is c, so there is a ranking of the heads that raise "foo"
# and one of the heads that raise "bar" (each by the mean of the head's two ranks). The in-context heads are
# the `max(4, ceil(1% of heads))` heads taken from the two rankings in turn. A single ranking on the model's
# predicted label finds only the heads of the word the model favours; it is printed for comparison.

# %%
ic_heads = study.ic_heads  # per task: the top of each label word's ranking, merged
for t in task_names:
    print(hr.incontext_heads_text(title[t], ic_heads[t], study.per_word[t], study.pooled[t]))
# per task: mean gain and mean drop (nats) as layer x head heatmaps, the in-context heads boxed
plots.show_gain_and_drop_by_layer_and_head(study.scores, boxed=ic_heads, titles=title)

# %% [markdown]
# ### 2.3 · Ablating the in-context heads vs the same number of random heads
#
# Zero ablation of the heads' `hook_z`, at q only (what the heads write into the prediction's position) and at
# every position (the heads removed from the whole forward pass). The random control draws `N_IC` heads with the
# evaluation seed, never overlapping the in-context heads.

# %%
from helpers.experiments.head_ablation import ABLATION_CONDITIONS, ALL_POSITIONS
from helpers.protocols import head_ablation as ha

ablation = study.ablation
task_iv = ha.task_intervals(ablation, short_name)  # {(task, condition): accuracy's interval}
display(plots.incontext_ablation_table(ablation, short_name, ABLATION_CONDITIONS))  # task x condition
# accuracy (y) per task (x) in each condition (colour): plain, in-context or random heads ablated, at q or everywhere
plots.show_accuracy_by_task_and_condition(ablation, intervals=task_iv, names=short_name,
                                          conditions=ABLATION_CONDITIONS)

# %% [markdown]
# ### 2.4 · Value-output vectors at the label positions
#
# Section 1's logit minus for every in-context head at every label position of the evaluation prompts.
# *Label-carrying rate* = share of (input, head, position) with the label's sign. The label positions lie in the
# shared demonstrations, so the rate hardly varies between inputs of one seed; its interval comes from the
# demonstration sets of all seeds. The figures show the first seed.

# %%
# every seed: the VO vectors belong to the demonstrations
vo = {t: study.value_outputs[(t, seed0)] for t in task_names}  # the first seed's, drawn below
carrying = study.carrying  # .interval over every (task, seed); .by_task on the first seed
print(hr.label_carrying_text(carrying.interval, carrying.by_task))
# per task: VO logit minus (y) per in-context head (x), at foo vs at bar label positions (colour)
plots.show_vo_logit_minus_by_head_and_label(vo, carrying_rates=carrying.by_task, titles=title)

# %% [markdown]
# Where the in-context heads look from q on section 1's prompt (circuitsvis; one row per head):

# %%
from helpers.core.heads import attention_rows_at_q

rows = attention_rows_at_q(model, prompt, ic_heads[t0])  # [head, position]
plots.head_attention_view(model, prompt, rows, [f"L{l}H{h}" for l, h in ic_heads[t0]])

# %% [markdown]
# ### 2.5 · Two towers: attention moves, value-output vectors stay
#
# With one fixed demonstration set the VO vectors at the label positions are *identical* for every query
# (causal attention: they are computed before the query is read), so their stability would be trivial. Here
# every input gets its own demonstrations (seeded per input), so both the attention and the VO vectors may
# vary. Per input: `d_attn` = attention on foo positions minus on bar positions (summed over the in-context
# heads) and `d_vo` = mean VO logit minus at foo positions minus at bar positions. If query and key do the work,
# the model's logit minus follows `d_attn`, not `d_vo`.

# %%
towers = study.towers  # .stats: per task the correlations and the per-input d_attn, d_vo; .intervals
display(plots.two_towers_table(towers.stats, title))  # rows: tasks; columns: the correlations and their inputs
print(hr.two_towers_text(towers.intervals))
# per task: the model's logit minus (y) against d_attn, and against d_vo (x)
plots.show_logit_minus_against_attention_and_vo(towers.stats, study.towers_runs, titles=title)

# %% [markdown]
# ### 2.6 · Majority-label and recency bias, and the two reductions
#
# *Majority bias*: demonstrations 3:1 (3 foo + 1 bar, and 3 bar + 1 foo, shuffled); size = mean over the two
# sets of P(pred = majority label) - 0.5. Reduction: in the in-context heads, the attention from q to the
# minority label's position is multiplied by 3 (= 3/1, fixed by the imbalance, not tuned), i.e. the minority
# label's VO contribution is amplified. *Recency bias*: orders `foo foo bar bar` and `bar bar foo foo`; size =
# mean over the two orders of P(pred = label of the last two demonstrations) - 0.5. Reduction: each in-context
# head's positional attention profile (mean attention from q to slot k over both orders, where each slot holds
# each label once) is divided out. % reduction = 100 * (|before| - |after|) / |before| (an overshoot into the
# opposite bias is still bias), with its 95% interval from the same resamples as the two bias sizes (paired per
# input), graded only where the bias before is measurable (its interval above 0). Tasks: `bias_sizes.bias_tasks`.

# %%
from helpers.protocols import head_biases as hb

bias_iv = study.bias  # each bias before and after the ablation, and its reduction
display(plots.head_bias_table(bias_iv, reading=hb.bias_interval_part))  # each bias before, after, % reduction
# bias size (y) per bias (x), before and after its reduction (colour)
plots.show_bias_before_and_after_reduction(study.bias_runs, bias_iv, names=short_name)

# %% [markdown]
# ### 2.7 · The regime: 1 to 16 demonstrations per class, two label pairs
#
# Section 2.1 measures one regime: 2 demonstrations per class with foo/bar. A model that cannot read a mapping
# from four demonstrations might read it from thirty-two, or from a pair of words it already treats as labels.
# Here the swap-averaged accuracy of section 2.1 runs at 1, 2, 4, 8 and 16 demonstrations per class, with
# foo/bar and with " A"/" B" (the pair with which paper A's appendix F.2 found LLaMA-33B following an unrelated
# mapping, 83.0% on SST-2 at 8 per class), each with its swap, on the same tasks. Each (task, seed, size) has one
# fixed, shuffled demonstration set, the same under a mapping and its swap, and runs it once (the shared-prefix
# path); prompts longer than the model's context are dropped and counted. The pairs, the sizes
# (`REGIME_PAIRS`, `REGIME_KS`) and the criterion were fixed before any run: a regime *follows the mapping* when
# the 95% interval of its swap-averaged accuracy lies above 0.5 (section 2.1's `mapping_interval_part`). With
# ten regimes, each with a 95% interval, one may clear 0.5 by chance alone, so one regime just above 0.5 is weak
# evidence: the regime with the highest lower bound runs again on fresh seeds (`regime_confirmation`;
# `confirm_seeds` of `regime_sizes`), and the claim counts it only if it clears 0.5 there too. (This confirmation
# was added after the first default run, in which Gemma cleared 0.5 in one regime of ten; it can only make the
# verdict stricter.) If any regime follows the mapping, sections 2.2-2.3 also run again in the one with the
# highest lower bound: in-context heads found on that regime's own attribution prompts, then ablated at q and at every
# position against as many random heads. Run sizes: `regime_sizes` (default: 32 queries x the first 2 seeds per
# task and size).

# %%
regime = study.regime  # the regimes, the clear ones, and in the best: confirmation, heads, ablation (None without)
regime_sizes, regime_iv = study.regime_sizes, regime.intervals
display(plots.regime_table(regime_iv))  # one row per (label pair, demonstrations per class)
print(hr.regime_outcome_text(regime_iv, regime.clear, regime_sizes, regime.confirmation, regime.heads))
if regime.clear:
    display(plots.regime_ablation_table(regime.ablation, ABLATION_CONDITIONS))
    print(hr.regime_excess_text(regime.ablation, ALL_POSITIONS))
# swap-averaged accuracy (y) against demonstrations per class (x), one line per label pair with its swap
plots.show_swap_averaged_by_demos_per_class(
    regime_iv, title=f"{', '.join(short_name[t] for t in regime.tasks)}: swap-averaged accuracy, "
                     f"{len(regime_sizes.seeds)} seed(s) x {regime_sizes.n_eval} queries")

# %% [markdown]
# **Question.** Why not report the best of the ten regimes as "the model's foo/bar accuracy", and why does the
# table show plain accuracy under each mapping beside the swap-averaged one?
#
# <details><summary>Answer</summary>
#
# The best of ten noisy estimates is biased upwards: with ten 95% intervals, one may lie above 0.5 by chance
# alone, so a regime picked after the fact needs a fresh run (new seeds) before it counts as evidence; the claim
# below says how many regimes it was chosen from. Plain accuracy under one mapping mixes a word prior with the
# class balance of the test sample (question 1): a model that always says " A" scores high under A/B exactly
# when the sample is rich in A's class, and low under B/A. The two plain accuracies moving in opposite
# directions while the swap-averaged one stays at 0.5 is the signature of a prior, not of reading the mapping.
# </details>

# %% [markdown]
# ## 3 · Paper B beside ours
#
# **Checks fixed before the run** (the `*_interval_part` functions of the experiment modules), all on 95%
# intervals:
# - *Mapping control* (the premise, read first): the swap-averaged accuracy above 0.5 means the model follows the
#   foo/bar mapping; an interval that contains 0.5 is "at chance".
# - *Ablation* (at q, and separately at every position): the accuracy with random heads ablated minus that with
#   the in-context heads ablated lies above zero (partly), and the drop from the plain accuracy is at least 0.20
#   (replicates); "inconclusive" when the interval contains zero.
# - *Value outputs*: the label-carrying rate's interval at or above 0.75 (partly: 0.60).
# - *Two towers*: the attention correlation's interval at or above 0.5 and that of (attention correlation - |VO
#   correlation|) at or above 0.2 (partly: above 0).
# - *Biases* (this project's measures): graded only when the bias before lies above 0; the reduction's interval
#   at or above 10% replicates, above 0 partly.
#
# The paper's numbers come from `helpers/study/paper.py`. The paper's setting is Llama/GPT-J class models,
# several demonstrations and thousands of inputs; ours is a small offline model on a CPU budget.

# %%
from helpers.study.claims import report_claims, show_reading

# the premise (does the model read the mapping from its context?) says whether the claims about heads can be
# tested, not whether they hold, so it is not part of the overall verdict; paper B's claims about heads are
claims, overall, metrics = study.claims()
print(hr.heads_overall_text(overall, N_IC, model.cfg))
_ = report_claims("07_incontext_heads", claims, metrics=metrics, digits=2)

# %% [markdown]
# ## 4 · Questions for discussion
#
# **1.** A model that always prefers "foo" scores exactly 0.5 swap-averaged accuracy on *every* input, whatever
# the class balance of the test sample. Why?
#
# <details><summary>Answer</summary>
#
# Under the swapped mapping the same word names the other class. An input whose gold class maps to "foo" under
# one mapping maps to "bar" under the other, so a model that always says "foo" is right on it under exactly one
# of the two: its per-input mean is 0.5. Plain accuracy, by contrast, is the share of the favoured class in the
# sample, which can lie far from 0.5 by chance.
# </details>
#
# **2.** Why does ablating a head at q change only position q's residual stream, and why does that let the
# attribution re-run just the last token once per head?
#
# <details><summary>Answer</summary>
#
# Attention is causal: no position before q reads position q, so everything computed at earlier positions
# (their residual streams, keys and values) is the same with or without the ablation. Those keys and values
# can be cached once and only the last token re-run, one copy per ablated head. Ablating at every position is
# different: it changes the keys and values of later positions, so it needs full runs (section 2.3).
# </details>
#
# **3.** With one fixed demonstration set, the VO vectors at the label positions are the same for every query.
# Why, and what does that mean for the claim that "VO vectors stay stable while attention moves"?
#
# <details><summary>Answer</summary>
#
# The label positions come before the query, and under causal attention their values are computed before the
# query is read. Their stability across queries of one set is therefore guaranteed by the architecture, not a
# finding. The two-towers analysis gives each input its own demonstrations, so that both the VO vectors and the
# attention can vary, and asks which of the two the prediction follows.
# </details>
#
# **4.** If the swap-averaged accuracy is at chance, what can ablating the in-context heads show?
#
# <details><summary>Answer</summary>
#
# Little about in-context learning: a model that does not use the mapping has no in-context computation for the
# heads to carry, so accuracy with them ablated stays where a word prior puts it, and so does accuracy with
# random heads ablated. The heads found by gain and drop still describe how the model reads the demonstrations
# (section 2.4-2.5), but not that this reading produces the answer.
# </details>

# %% [markdown]
# ## 5 · Reading: what this shows on a 135M-270M model, and what it cannot
#
# Paper B's ablation claim rests on a premise: the model reads the foo/bar mapping from its context. The mapping
# control (section 2.3) tests that premise first, because a swap-averaged accuracy at 0.5 is what any fixed
# word preference gives, and then there is no in-context computation for an ablation to remove (question 4).
# The value-output vectors and the two towers can be read either way; the bias reductions are this project's
# own measures, not the paper's, and are never set beside its 22% and 17% as one quantity. The numbers and
# verdicts below are this run's.

# %%
_ = show_reading("07_incontext_heads", digits=2)

# %% [markdown]
# **Reading the words is not reading the mapping.** The same-word rate in section 2.7's table tells a word prior
# (the same word under both mappings) from taking a label from the demonstrations; a swap-averaged accuracy
# near 0.5 with a low same-word rate means the model copies a demonstrated label consistently, but which class it
# names hardly depends on the input.
#
# What this design cannot establish: anything about scale (two models of 135M-270M parameters, against the
# paper's Llama/GPT-J class models); the paper's five datasets (here two, one of them a binary subset of
# AGNews); a precise head set (attribution on a few prompts per task, and 1% of a small model's heads is a
# handful); more than a correlation for the two towers (one seed, no intervention on query or key); and any
# comparison of the bias reductions with the paper's numbers.
