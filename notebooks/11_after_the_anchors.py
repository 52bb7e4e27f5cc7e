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
# # 11 · After the anchors: flipped labels, label words read in context, and the query's two stages
#
# **Learning objectives.** After this notebook you can
# - flip the label words of the demonstrations and measure whether a model follows the words' meaning or the
#   context's mapping (prompt alignment), and rerun §2.1's flows and §2.2's isolation on such prompts;
# - split the flow into a label word into what comes from earlier demonstrations, and knock those links out;
# - follow the query's hidden state layer by layer with a cross-validated probe and a label read-out, and ask which
#   heads each stage needs;
# - say which of three accounts that refined the anchors picture the evidence on these models supports, what the
#   controls say each check is worth, and what these tests cannot tell apart.

# %% [markdown]
# ## The claims
#
# Paper A ([arXiv 2305.14160](https://arxiv.org/abs/2305.14160) §2.1-2.2, notebooks 01 and 02) found that the
# label words gather the demonstrations in shallow layers and that the prediction position $q$ reads them in deep
# layers. Three later accounts refine the picture, each with a prediction this collection's methods can test:
#
# - **Semantic anchors** (Krishna Kumar, [arXiv 2511.21038](https://arxiv.org/abs/2511.21038)): with every
#   demonstration's label word flipped (a negative review labelled "positive"), 1-12B models do not learn the
#   flipped classifier: the paper's *semantic override rate*, correctness under flipped semantics, stays exactly 0,
#   while *prompt alignment* (agreement with the label the flipped demonstrations indicate) rises only as accuracy
#   falls. The label words are anchors because of what they mean, and they still gather the demonstrations.
# - **Contextualise, then aggregate** (Bakalova et al., [arXiv 2504.00132](https://arxiv.org/abs/2504.00132)): a
#   label word is built from the demonstrations before its own (their labels and inputs) as well as from its own
#   text, and only then read at $q$.
# - **Two stages of the query** (Yang, Cho, Zhong and Inoue, [arXiv 2505.18752](https://arxiv.org/abs/2505.18752)):
#   the query's hidden state first comes to separate the classes (linearly), then turns towards the label words'
#   output directions; previous-token heads drive the first stage, induction heads the second.
#
# **Method.** The methods are this collection's: §2.1's saliency flows (notebook 01), §2.2's isolation
# (notebook 02), head ablation (notebooks 07 and 10), run on the same prompts. The criteria were written in the
# helpers before any run (`helpers.protocols.flipped_labels`, `helpers.protocols.saliency_context`,
# `helpers.protocols.isolation_context`, `helpers.protocols.query_stages`, `helpers.study.after_report`). The same
# checks run on notebook 09's two controls, whose answers are known, to say what each check is worth.
#
# Under `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs of one task (`after_tasks`):
# the numbers test that the code runs; they are not evidence.

# %%
from IPython.display import display

from helpers.core.models import load_model
from helpers.protocols import flipped_labels as fl
from helpers.protocols import isolation_context as ik
from helpers.protocols import query_stages as qs
from helpers.protocols import saliency_context as sx
from helpers.study import plots
from helpers.study.profiles import after_sizes, after_tasks, current_model_name, get_profile

profile, model = get_profile(), load_model(current_model_name())
tasks = after_tasks(profile)  # the profile's tasks (smoke: its first)
sizes = after_sizes(profile)  # seeds, inputs per (task, seed), saliency inputs, random-control inputs, k, folds
print(profile.name, current_model_name(), tasks, sizes, sep="\n")

# %% [markdown]
# ## 1 · Flipped labels: do the label words anchor by their meaning?
#
# `flipped_icl_set` keeps every demonstration's text and position and moves its label by a fixed permutation that
# moves every class (`flip_permutation`: SST-2's two classes swap; TREC's six, AGNews' four and the emotions' four
# each go to the next). The queries are the same, so each flipped prompt pairs with its natural twin. Below, one
# pair's demonstrations: the same inputs, other label words.

# %%
import pandas as pd

from helpers.experiments.flipped_labels import flip_permutation, flipped_icl_set

natural, flipped = flipped_icl_set(model, tasks[0], profile.seeds[0], n_test=2)
words = natural.task.label_words
display(pd.DataFrame({"input (start)": [d.text[:60] for d in natural.demos],
                      "natural label": [words[d.label] for d in natural.demos],
                      "flipped label": [words[d.label] for d in flipped.demos]}))
print("permutation (class -> the class whose word it carries):", flip_permutation(natural.task.n_classes))

# %% [markdown]
# **Exercise 11.1 · prompt alignment under flipped labels** · difficulty ★☆☆ · importance ★★☆ · about 5 min
#
# Given each flipped prompt's predicted class `pred`, its query's gold class `gold` and the permutation `perm`
# the demonstrations' labels were moved by (all 1-d integer tensors), return the share of inputs whose prediction
# follows the flipped mapping: the class the context assigns to the query's class.
#
# <details><summary>Hint</summary>
#
# A demonstration of class $c$ carries the word of class `perm[c]`; a model that follows the context answers a
# query of class `gold` with `perm[gold]`.
# </details>

# %% tags=["solution"]
import torch


def semantic_override_rate(pred: torch.Tensor, gold: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The share of inputs whose prediction is ``perm[gold]``."""
    return (pred == perm[gold]).float().mean()


# %%
from helpers.exercises.flipped_labels import check_override_rate

check_override_rate(semantic_override_rate)

# %% [markdown]
# ### At scale: what the flipped prompts predict
#
# One demonstration set per (task, seed) and its flipped twin, on the same inputs, each cached on disk
# (`flipped_runs`); every input of each also gets §2.2's isolation of the label words (its random control on the
# first inputs), and the first few one saliency pass. On the natural prompts the isolation is notebook 02's own
# run where the store holds it for the same inputs (passing `profile` lets it look), so it is not run twice. The
# figure: on the flipped prompts, the share of predictions that are the query's own class (the words' meaning),
# its flipped class (prompt alignment, labelled "override" in the figure and in the claim's note) and the class
# predicted without demonstrations (the prior); beside them, the accuracy with the natural labels; 95% intervals
# over seeds and inputs, averaged over tasks.
#
# **What differs from the paper.** The paper's semantic override rate is correctness under flipped semantics, a
# quantity that stays at 0 while the share following the flipped mapping moves; what this notebook measures and
# calls the override is that share, prompt alignment. Its criterion (the query's own class more often than its
# flipped class) is also met by a model that ignores its context, as the negative control does (notebook 09): the
# power table below says so, and the account's verdict does not count this check.

# %%
runs = fl.flipped_runs(model, tasks, sizes, profile=profile)
override = fl.override_intervals(runs)
plots.interval_bars({"flipped prompts": {"the query's own class": override["truth"],
                                         "its flipped class (override)": override["prompt"],
                                         "as without demonstrations": override["prior"]},
                     "natural prompts": {"the query's own class": override["natural accuracy"]}},
                    title=f"{current_model_name()}: what the prediction follows when the labels are flipped",
                    ylabel="share of inputs", save_as="11_flipped_predictions")

# %% [markdown]
# ### At scale: do the label words still carry the demonstrations?
#
# §2.1's three flows on the same inputs, natural and flipped (panels): $S_{wp}$ (text into the label words),
# $S_{pq}$ (label words into $q$) and $S_{ww}$ (between other words), each the mean saliency per pair (y, log
# scale) per layer (x); band: seaborn's 95% bootstrap over the (task, seed) means. Then §2.2's isolation on both:
# label loyalty (y) with the label words or as many random words isolated in the first $k$ layers (bars), with
# 95% intervals.

# %%
from helpers.experiments.saliency import FLOWS

flow_frame = fl.after_flow_frame(runs)
plots.saliency_by_layer(flow_frame, FLOWS, col="prompts", save_as="11_flipped_flows",
                     title=f"{current_model_name()}: §2.1's flows with natural and with flipped labels")
isolated = fl.flipped_isolation_intervals(runs)
plots.interval_bars({kind: {"label words isolated": isolated[(kind, "label")],
                            "as many random words": isolated[(kind, "random")]} for kind in ("natural", "flipped")},
                    title=f"{current_model_name()}: label loyalty, first {sizes.k} layer(s) isolated",
                    ylabel="label loyalty", save_as="11_flipped_isolation")

# %% [markdown]
# ## 2 · Contextualise, then aggregate: do label words read the earlier demonstrations?
#
# §2.1's $S_{wp}$ pools every earlier token of a label word: its own demonstration's and the earlier ones'. The
# pairs of arXiv 2504.00132 keep only the earlier demonstrations: each label word (from the second demonstration
# on, at its first token) as the row, the earlier demonstrations' label words (`links="label"`) or input texts
# (`"text"`) as the columns. The paper traces this on five generative tasks in Gemma-2 2B and finds that how much
# the step matters differs between tasks, and that it "may become more important in the presence of ambiguous
# examples" (its abstract). Its finding does not rest on ambiguous demonstrations, so the prompts here are notebook
# 02's, none chosen for ambiguity. One prompt's pairs, by row:

# %%
from helpers.core.positions import earlier_demo_pairs

prompt = natural.prompts[0]
for links in ("label", "text"):
    pairs = earlier_demo_pairs(prompt, links=links)
    print(links, {int(r): pairs[r].nonzero().flatten().tolist() for r in pairs.any(1).nonzero().flatten()})

# %% [markdown]
# **Exercise 11.2 · the pairs of label <- earlier label** · difficulty ★★☆ · importance ★★☆ · about 10 min
#
# Return a `[seq, seq]` boolean mask, True at (row = the first token of demonstration $k$'s label word, for
# $k \geq 1$; column = every token of the label word of each demonstration $j < k$).
#
# <details><summary>Hint</summary>
#
# `prompt.label_pos[k]` is label word $k$'s first token; `prompt.label_spans[j]` its `(start, end)` span;
# `prompt.n_demos` the number of demonstrations; `len(prompt)` the sequence length.
# </details>

# %% tags=["solution"]
from helpers.core.prompts import Prompt


def earlier_label_pairs(prompt: Prompt) -> torch.Tensor:
    """``[seq, seq]``: True at (label word k's first token, a token of an earlier demonstration's label word)."""
    out = torch.zeros(len(prompt), len(prompt), dtype=torch.bool)
    for k in range(1, prompt.n_demos):
        for a, b in prompt.label_spans[:k]:
            out[prompt.label_pos[k], a:b] = True
    return out


# %%
from helpers.exercises.saliency_context import check_earlier_label_pairs

check_earlier_label_pairs(earlier_label_pairs)

# %% [markdown]
# ### At scale: the flows from the earlier demonstrations, and their knockout
#
# The same saliency pass as section 1, natural prompts: per layer (x), the mean saliency per pair (y, log scale)
# from the earlier demonstrations' label words (`from_label`) and input texts (`from_text`) into each label word,
# beside §2.1's $S_{wp}$ and $S_{ww}$; band: 95% bootstrap over the (task, seed) means. Then the knockout
# (`helpers.experiments.isolation_context`): each label word's links to every earlier demonstration blocked in the
# first $k$ layers, against the same links blocked for one text token of each demonstration (drawn per
# demonstration set), and §2.2's full isolation of the label words for scale; label loyalty with 95% intervals.

# %%
from helpers.experiments.saliency_context import CONTEXT_FLOWS

plots.saliency_by_layer(flow_frame[flow_frame["prompts"] == "natural"], (*CONTEXT_FLOWS, "S_wp", "S_ww"),
                     save_as="11_context_flows",
                     title=f"{current_model_name()}: flows into the label words from the earlier demonstrations")
knockout = ik.context_knockout_intervals(ik.context_knockout_runs(model, tasks, sizes))
plots.interval_bars({"first k layers": {"label words' links to earlier demos": knockout["label"],
                                        "a text token's links (control)": knockout["control"],
                                        "label words fully isolated (§2.2)": isolated[("natural", "label")]}},
                    title=f"{current_model_name()}: label loyalty with links blocked, k = {sizes.k}",
                    ylabel="label loyalty", save_as="11_context_knockout")

# %% [markdown]
# ## 3 · Two stages of the query
#
# `query_states` collects the residual stream at $q$ before every layer and after the last (stage $l$ is the
# input of layer $l$). Two curves per stage: *separability*, whether a linear probe trained on the other folds
# (scikit-learn's logistic regression, stratified cross-validation) finds an input's gold class from its state,
# and *alignment*, whether reading the state through the final norm and the label words' unembedding alone (the
# logit lens restricted to the label words) gives the gold class. Where each curve rises is summarised by its
# **half-rise stage**: the first stage that reaches half of the way from the curve's lowest value to its highest.
#
# **Exercise 11.3 · the half-rise stage** · difficulty ★☆☆ · importance ★☆☆ · about 5 min
#
# Given a curve (a 1-d numpy array, one value per stage), return the first stage whose value reaches
# `lo + (hi - lo) / 2`, as a float; NaN for a flat curve.

# %% tags=["solution"]
import numpy as np


def half_rise(curve: np.ndarray) -> float:
    """The first stage where ``curve`` reaches half of the way from its lowest value to its highest; NaN if flat."""
    lo, hi = curve.min(), curve.max()
    return float("nan") if hi <= lo else float(np.argmax(curve >= lo + (hi - lo) / 2))


# %%
from helpers.exercises.query_stages import check_half_rise

check_half_rise(half_rise)

# %% [markdown]
# ### At scale: the two curves, and which heads each stage needs
#
# The heads: the top previous-token heads (attention from each position to the one before it) and the top
# induction heads (notebook 10's score), both on repeated random tokens, each the top 2% of all heads (at least
# 4), and as many random heads drawn apart from both. The first figure: separability and alignment (lines) per
# stage (x), nothing ablated; the dotted line ends §2.1's shallow layers, the dashed one starts its deep layers;
# band: 95% bootstrap over the (task, seed) curves. The second: each curve (panels) with each set ablated (lines:
# its heads' outputs set to zero at every position).

# %%
head_sets = qs.stage_head_sets(model, qs.n_top_heads(model, sizes))
print({name: [f"L{l}H{h}" for l, h in heads] for name, heads in head_sets.items()})
stage_runs = qs.query_stage_runs(model, tasks, sizes, head_sets)
L = model.cfg.n_layers
plots.stage_curves_figure(qs.stage_curves(stage_runs), L, save_as="11_query_stages",
                          title=f"{current_model_name()}: the query's separability and alignment, layer by layer")
every = pd.concat([qs.stage_curves(stage_runs, name).assign(ablated=name) for name in qs.SETS])
plots.stage_curves_figure(every, L, hue="ablated", col="measure", save_as="11_query_stage_ablations",
                          title=f"{current_model_name()}: each curve with each set of heads ablated")

# %% [markdown]
# ## The same checks on models whose answer is known
#
# Notebook 09's control populations (five checkpoints per recipe, on 2 and on 4 layers; the positive controls read
# a mapping drawn afresh for every sequence from their context; the negative controls answer from their weights and
# do not read it) run the checks above once per checkpoint (`helpers/protocols/power.py`, group "11"), with their
# criteria unchanged, on their sequences with the label tokens permuted as above. The override is measured the other
# way round there: a check that sees the positive controls follow the permuted mapping and the negative ones keep
# their own is able to tell the two answers apart. The knockout and the flows from the earlier demonstrations have
# no positive control: no control builds its label words from the earlier demonstrations (the positive ones copy
# each item into the label after it), so every checkpoint is a negative for them. Their specificity is measured on
# all of them; their sensitivity cannot be, so they can never count as informative. The table: per check, its
# sensitivity on the positive checkpoints and its
# specificity on the negative ones, with exact 95% intervals, and the reading fixed before the run.

# %%
from helpers.protocols import power
from helpers.study.power_report import CHECKS, NOT_MEASURED, power_frame

eleven = [k for k in [*CHECKS, *NOT_MEASURED] if k.startswith("11.")]
c_power, _ = power.power_study(power.power_sizes(profile), groups=("11",), keys=eleven)
display(power_frame(c_power))

# %% [markdown]
# ## Paper vs ours
#
# Fixed before any run, each on a 95% interval (seeds, then inputs within each task and seed; mean over tasks):
# 1. **semantic anchors**: on the flipped prompts, the share predicting the query's own class minus the share
#    predicting its flipped class, above 0 (the words' meaning wins); §2.1's three checks (notebook 01's criteria)
#    and the label words' isolation against as many random words (first $k$ layers) on the flipped prompts;
# 2. **contextualise**: the flow per pair from the earlier demonstrations' label words (texts) into a label word
#    over $S_{ww}$, minus 1, mean over the shallow layers, above 0; the loyalty with a text token's links to the
#    earlier demonstrations blocked minus with the label word's, first $k$ layers, above 0;
# 3. **two stages**: alignment's half-rise stage minus separability's, above 0; the probe's accuracy at the middle
#    stage with random heads ablated minus with the previous-token heads, above 0; the read-out's accuracy after
#    the last layer with random heads ablated minus with the induction heads, above 0.
#
# Each: above 0 "replicates", below 0 "does not replicate", containing 0 "inconclusive". By the paper's checks an
# account is supported when all its checks replicate, partly when some do, not supported when all do not
# replicate; the account's verdict applies that rule to its **informative checks only**, and reads "no
# informative check" when none is (`helpers.study.after_report`). The table shows both, how many checks count,
# and what each is worth on the controls.

# %%
from helpers.study.after_report import after_table
from helpers.study.claims import measured_on, report_claims, show_reading

context = f"{current_model_name()}, {len(sizes.seeds)} seed(s)"
claims = ([fl.semantic_anchor_claim(override, context)] + fl.flipped_flow_claims(runs, tasks, context)
          + [fl.flipped_isolation_claim(isolated["flipped"], sizes.k, context,
                                        note=f"natural labels, same inputs: {isolated['natural']:.3f}")]
          + sx.context_flow_claims(sx.context_flow_intervals(
              {c: r["flows"]["natural"] for c, r in runs.items()}, {c: r["context"]["natural"] for c, r in runs.items()}),
              context)
          + [ik.context_knockout_claim(knockout, sizes.k, context, isolation=isolated[("natural", "label")])]
          + qs.query_stage_claims(qs.two_stages_interval(stage_runs), qs.stage_ablation_intervals(stage_runs, L),
                                  len(head_sets["induction"]), L, context))
claims = measured_on(claims, tasks, profile.tasks)  # under smoke, the claims name the tasks they ran on
report_claims("11_after_the_anchors", claims, digits=3,
              metrics={"sizes": sizes.as_dict(), "head_sets": head_sets, "power": [p.to_json() for p in c_power]})
display(after_table(claims, c_power))  # a row per account: its checks' verdicts, its verdict, their power

# %% [markdown]
# ## Questions for discussion
#
# 1. On SST-2 a flipped prompt can only predict the query's class or its flipped class. On TREC, with six classes,
#    it can predict four others. Why does the criterion compare the two shares rather than take the override rate
#    alone?
# <details><summary>Answer</summary>
#
# With many classes a model that ignores the demonstrations and answers at random overrides rarely (1 in 6 on
# TREC) without following the words' meaning either. The difference between following the meaning and following
# the flip says which of the two the model does more; the override rate alone would credit a guesser with
# semantic anchoring.
# </details>
#
# 2. The knockout's control blocks the same links for a text token of each demonstration. Why not compare with the
#    unmodified run (loyalty 1)?
# <details><summary>Answer</summary>
#
# Blocking any row's view of most of the context changes the residual stream, and with it the prediction, a
# little. The question is whether the label words' view of the earlier demonstrations matters more than an
# ordinary token's view of the same positions; only a control that blocks as many links answers it.
# </details>
#
# 3. What can the probe find at stage 0, and what does a separability curve that starts above chance mean?
# <details><summary>Answer</summary>
#
# Stage 0 is the input of the first layer: at $q$, the embedding of the template's last token, the same token for
# every input (with learned positions, at a position that moves with the query's length). The probe can only use
# what varies: the position, or the class frequencies of its folds. A curve that starts above chance is worth a
# look at the class balance and the query lengths; the half-rise stage measures where the curve rises, not its
# level.
# </details>

# %% [markdown]
# ## Reading: what this shows on a 135M-270M model, and what it cannot

# %%
_ = show_reading("11_after_the_anchors", digits=3, says={
    "11.semantic_anchors": {
        "replicates": "With the labels flipped, the prediction follows the words' meaning more often than the "
                      "flipped mapping, as arXiv 2511.21038 found on larger models.",
        "inconclusive": "With the labels flipped, these inputs cannot tell following the words' meaning from "
                        "following the flipped mapping.",
        "does not replicate": "With the labels flipped, the prediction follows the context's mapping more often "
                              "than the words' meaning: a semantic override the paper did not see.",
    },
    "11.flipped_label_isolation": {
        "replicates": "Even when their meaning contradicts the mapping, isolating the label words in the first "
                      "layers moves the prediction more than isolating as many random words.",
        "inconclusive": "On flipped prompts, isolating the label words cannot be told from isolating random words.",
        "does not replicate": "On flipped prompts, isolating the label words moves the prediction less than "
                              "isolating random words.",
    },
    "11.context_knockout": {
        "replicates": "Blocking the label words' view of the earlier demonstrations moves the prediction more than "
                      "blocking a text token's: the label words draw on the earlier demonstrations.",
        "inconclusive": "Blocking the label words' view of the earlier demonstrations cannot be told from blocking "
                        "a text token's.",
        "does not replicate": "Blocking a text token's view of the earlier demonstrations moves the prediction more "
                              "than blocking the label words'.",
    },
    "11.two_stages": {
        "replicates": "The query's state separates the classes layers before it aligns with the label words.",
        "inconclusive": "Where separability and alignment rise cannot be told apart on these inputs.",
        "does not replicate": "Alignment with the label words rises before the probe separates the classes.",
        "not comparable": "No task had enough inputs of every class for a probe.",
    }})

# %% [markdown]
# Read the verdict table above as the answer of these tests on this model. What they cannot establish: a flipped
# prompt that follows the words' meaning may do so because the model barely reads its context at all (compare the
# share that matches the prediction without demonstrations); the flows are gradients times attention, a correlate,
# and a flow from the earlier demonstrations into a label word is read on prompts whose demonstrations were not
# chosen to be ambiguous (the paper's abstract expects contextualisation to matter more with ambiguous examples,
# and to matter differently across tasks: a small flow here does not speak for its ambiguous case); the
# knockout blocks attention in the first $k$ layers only, and what a label word reads later is not tested. The
# probe measures what a linear read-out can find in a few dozen inputs, with the folds a six-class task allows;
# the head sets are ranked on random tokens, far from the prompts. Two small models are weak few-shot learners: an
# account that needs strong in-context learning may fail here for that reason alone. The controls weigh the checks,
# not the accounts: a check that sees the known mechanism there and stays silent on the negative control gives
# weight to its verdict here; one that misses it or fires leaves its verdict here without weight.
#
# **What each paper claims, what this notebook measures, and where they differ.**
# - *Semantic anchors* (arXiv 2511.21038) reports truth, prior and prompt alignment and a semantic override rate
#   (correctness under flipped semantics) that stays at 0 while prompt alignment rises. This notebook measures
#   the three alignments on flipped prompts and grades the own class against the flipped class; it does not
#   measure the paper's override rate, and its criterion is met by a model that reads no context.
# - *Contextualise, then aggregate* (arXiv 2504.00132) claims a causal, layered process: lower layers build each
#   demonstration's representation from the earlier ones, higher layers aggregate them at the query. This
#   notebook measures two saliency ratios against $S_{ww}$, which label words pass almost by construction, and
#   one knockout of all links to the earlier demonstrations in the first $k$ layers; the aggregation step and the
#   lower-then-higher order are not tested, and no control has the mechanism, so no check is informative.
# - *Two stages of the query* (arXiv 2505.18752) claims a double dissociation: previous-token heads drive
#   separability, induction heads alignment. This notebook ablates a small top share of each ranking (2% of the
#   heads, fewer than the paper's sets) against as many random heads, one measure per head set; the cross effects
#   are not graded, and its stage-order check sets a trained probe against a fixed read-out.
