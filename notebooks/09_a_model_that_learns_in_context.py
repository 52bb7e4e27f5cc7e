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
# # 09 · A model that learns in context: the positive control
#
# **Learning objectives.** After this notebook you can
# - say why a method that finds nothing on a model that barely learns in context (notebooks 00-07) needs a
#   *positive control*: a model where the mechanism certainly exists;
# - read a two-step in-context circuit (a head that copies each item into its label, a head that attends from the
#   query to the label whose item matches) off the attention patterns, by hand;
# - run the collection's methods (saliency flows, isolation, AUCROC_l, in-context heads, ablation, value-output
#   vectors, two towers, anchor-only compression) on that model and tell what each method sees.
#
# ## The claim
#
# Small attention networks trained on *bursty* in-context classification sequences learn in context through an
# induction-style circuit (Chan et al., [arXiv 2205.05055](https://arxiv.org/abs/2205.05055); Reddy,
# [arXiv 2312.03002](https://arxiv.org/abs/2312.03002); Olsson et al. 2022 on induction heads): an early head
# copies each demonstration's item into the position of its label, and a later head attends from the query to the
# label whose copied item matches the query. That is paper A's anchor picture
# ([arXiv 2305.14160](https://arxiv.org/abs/2305.14160): shallow layers gather each demonstration into its label
# word, deep layers read the label words at the target) and paper B's metric-learning picture
# ([arXiv 2402.02872](https://arxiv.org/abs/2402.02872): query and key as two towers), in a model small enough to
# train on two CPU cores in minutes.
#
# **The control** (`helpers/core/controls/model.py`): 2 attention-only layers x 2 heads, d_model 64, LayerNorm, learned
# positions, BOS first. A sequence is `BOS x L x L ... x L x?`: 8 item-label pairs showing 4 classes (2 items
# each), then a query item of one of those classes. Items are Gaussian vectors around class centres in R^32 (128
# training classes, 32 classes never used in training); the 4 label tokens `L0..L3` are assigned to the classes
# **at random for every sequence**, so accuracy above 1/4 can only come from reading the mapping in the context.
# After training, items become ordinary tokens (a seeded table of 8 items per class, each embedded through the
# learned projection), so the model is a plain token-input `HookedTransformer` and every helper of the
# collection takes its prompts unchanged. `make control` retrains it; `load_model("control")` loads the shipped
# checkpoint (`data/control/`) after checking its sha256.
#
# **Two more controls** (section 1b) turn "the method found it here" into a measured power. The *wide* positive
# control is the same task on 2 layers x 8 heads, so the heads the answer needs are a small share and "these heads
# against as many random heads" is a fair comparison. The *negative* control has the wide one's shape, items and
# prompt format, but one fixed class -> label mapping and training contexts that never show the query's class: it
# answers from its weights (in-weights learning, which Chan et al. find when contexts are not bursty) and does not
# read its context. Section 4 runs every check of notebooks 01, 02, 03, 05, 07 and 10 many times on both: how often
# it sees the mechanism where it is there (sensitivity) and stays silent where it is absent (specificity).
#
# Run sizes come from the profile (`helpers/experiments/positive_control.py`, `control_sizes`): per seed,
# 4 x `n_test` sequences (the control costs about a thousandth of the offline models per input). Under
# `ICL_PROFILE=smoke` (what `make test` runs) the numbers test that the code runs; they are not evidence.

# %%
import pandas as pd
import torch
from IPython.display import display

from helpers.core.controls.model import CONTROL_PATH, checkpoint_info, control_prompts, control_task
from helpers.core.models import load_model
from helpers.core.seeds import stream_seed
from helpers.exercises.positive_control import check_circuit_attention, check_negative_prediction
from helpers.experiments import incontext_heads as ih
from helpers.experiments.aucroc import label_attention, raw_mean_curves
from helpers.experiments.head_ablation import ablation_accuracy, ablation_conditions
from helpers.experiments.isolation import isolation_experiment
from helpers.experiments.positive_control import circuit_attention, hidden_anchor_accuracy, label_swap
from helpers.experiments.saliency import saliency_flow
from helpers.experiments.saliency_graph import flow_graph
from helpers.experiments.two_towers import value_outputs
from helpers.protocols import aucroc as auc
from helpers.protocols import head_ablation as ha
from helpers.protocols import isolation as iso
from helpers.protocols import mapping_control as mc
from helpers.protocols import positive_control as pc
from helpers.protocols import power
from helpers.protocols import saliency as sal
from helpers.protocols import two_towers as tt
from helpers.study import notebook, plots, power_report
from helpers.study.claims import report_claims, show_reading
from helpers.study.power_report import power_frame, power_summary
from helpers.study.stats import bootstrap_means

MODEL = "control"  # this notebook studies the model trained here, whatever ICL_MODEL names
profile = notebook.start()
model = load_model(MODEL)
task, info = control_task(model), checkpoint_info()
sizes = pc.control_sizes(profile)  # seeds; per seed n sequences, n_attr for head attribution, n_saliency
seeds, batch_size = sizes.seeds, sizes.batch_size
sequences = {s: control_prompts(task, sizes.n, s) for s in seeds}  # 4-way sequences of training classes, per seed
print(plots.control_setup_text(profile.name, sizes, info["training"], sequences[seeds[0]].prompts[0]))

# %% [markdown]
# ## 1 · Training, and what the model does
#
# The training curve of the shipped checkpoint: in-context accuracy on 1024 fresh sequences (fresh items of
# training classes) every 100 steps. Accuracy sits at chance, then jumps: the abrupt transition Reddy describes.

# %%
curve = pd.read_csv(CONTROL_PATH.with_name("control_curve.csv"))
plots.training_curve(curve, x="training step", y="accuracy", y_right="loss (nats)", chance=1 / task.n_labels,
                     title=f"Training the control (seed {info['recipe']['seed']}, "
                           f"{info['training']['seconds']:.0f} s on the CPU)",
                     save_as="09_training_curve", model_name=MODEL)

# %% [markdown]
# Three measurements say whether the model reads the mapping from its context:
# - accuracy on fresh sequences of **training classes** (chance 0.25);
# - accuracy on sequences of the 32 **classes never seen in training** (other token ids of the same vocabulary);
# - the **label-swap control** of notebook 07, for four labels: the same sequences with every label token moved
#   to the next one (`L0 -> L1 -> L2 -> L3 -> L0`). A model that ignored the context's labels would give the same
#   answer to both and score at most 0.5 swap-averaged; one that reads the mapping moves its answer with it.

# %%
swapped = {s: label_swap(model, cp) for s, cp in sequences.items()}  # its "correct" is the plain accuracy's input
accuracy = bootstrap_means(pc.swap_cells(swapped, "correct"))
heldout = {s: control_prompts(task, sizes.n, s, classes="heldout") for s in seeds}
heldout_accuracy = bootstrap_means(pc.accuracy_cells(model, heldout, batch_size))
swap = {k: bootstrap_means(pc.swap_cells(swapped, k)) for k in ("swap_averaged", "follows", "same")}
display(plots.interval_table({"accuracy, training classes": accuracy,
                              "accuracy, classes never seen in training": heldout_accuracy,
                              "label swap: swap-averaged accuracy": swap["swap_averaged"],
                              "label swap: answer moves with the labels": swap["follows"],
                              "label swap: same answer (a label prior)": swap["same"]}))

# %% [markdown]
# ## 1b · Two more controls: a wide positive one, and a negative one
#
# The same three measurements on the two controls every power measurement of section 4 uses. The negative
# control's prompts have the format and items of the others, with its one fixed mapping: a model that read the
# context would be right on them too. What tells reading from remembering is the label swap (a reader's answer
# moves with the labels, a rememberer's stays) and classes never seen in training (a reader is right, a rememberer
# guesses). The table: per control and measurement, the mean over inputs with its 95% interval.

# %%
others = {name: load_model(name) for name in (power.POSITIVE, power.NEGATIVE)}  # wide positive, negative
premises = {name: pc.premise_intervals(m, seeds, sizes.n) for name, m in others.items()}  # {name: {classes: ...}}
display(plots.interval_table({f"{name}, {'training' if c == 'train' else 'held-out'} classes: {k}": iv
                              for name, by in premises.items() for c, ivs in by.items() for k, iv in ivs.items()}))

# %% [markdown]
# ## 2 · The mechanism by hand: two attention patterns
#
# If the model runs the induction-style circuit, two attention patterns show it:
# - **(a)** in the first layer, each label position p_k attends to the item just before it, p_k - 1 (the item is
#   copied into its label: paper A's *aggregation* at the label word);
# - **(b)** in the last layer, the query position q attends to the label positions whose item has the query's
#   class (the label is read where the items match: paper A's *extraction*, paper B's query-key similarity).
#
# Write `circuit_scores(model, prompt, item_class)`: per layer and head, (a) the mean over k of `A[p_k, p_k - 1]`
# and (b) the sum of `A[q, p_k]` over the k whose item has the query's class (`item_class`: the class of every item
# of the sequence, query last). Both read the post-softmax pattern, `blocks.{l}.attn.hook_pattern`.

# %% [markdown]
# <details><summary>Hint</summary>
#
# - `_, cache = model.run_with_cache(prompt.tokens[None])`; `cache["pattern", layer]` has shape `[batch, head,
#   query position, key position]`.
# - `prompt.label_pos` are the p_k, `prompt.q` the query position; `item_class[:-1] == item_class[-1]` marks the
#   demonstrations of the query's class.
# - Advanced indexing `pattern[:, pos, pos - 1]` with a tensor `pos` picks `A[p_k, p_k - 1]` for every k at once.
# </details>

# %% tags=["solution"]
def circuit_scores(model, prompt, item_class):
    """Per layer and head: [..., 0] the mean over label positions p_k of the attention A[p_k, p_k - 1] to the item
    before it; [..., 1] the attention from q summed over the label positions whose item has the query's class.
    Returns a tensor [layer, head, 2]."""
    _, cache = model.run_with_cache(prompt.tokens[None])
    pos = torch.tensor(prompt.label_pos)
    match = torch.as_tensor(item_class[:-1] == item_class[-1], dtype=torch.float32)
    out = []
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer][0].float()  # [head, query pos, key pos]
        to_item = pattern[:, pos, pos - 1].mean(-1)
        to_match = (pattern[:, prompt.q, pos] * match).sum(-1)
        out.append(torch.stack([to_item, to_match], -1))
    return torch.stack(out)


# %% [markdown]
# The check runs your function on tiny random models of three architectures (learned positions, rotary,
# grouped-query attention) against the helper `circuit_attention`; then on the control's sequences of the first
# seed, against the helper's batched run.

# %%
check_circuit_attention(circuit_scores)
first = sequences[seeds[0]]
circuit = circuit_attention(model, first, batch_size)  # [sequence, layer, head, 2]
with torch.inference_mode():
    mine = torch.stack([circuit_scores(model, p, first.item_class[i]) for i, p in enumerate(first.prompts[:8])])
torch.testing.assert_close(mine, circuit[:8], atol=1e-5, rtol=1e-4)
# per head (columns L{layer}H{head}), the two attentions averaged over sequences, then uniform attention's values
display(plots.circuit_table(circuit.mean(0), rows=("(a) label -> its item", "(b) q -> labels of the query's class")))
print(plots.control_uniform_text(first.prompts[0]))

# %% [markdown]
# Where the heads look, on one sequence (circuitsvis; each row a head, the query's row in the last layer):

# %%
plots.attention_view(model, first.prompts[0], model.cfg.n_layers - 1)

# %% [markdown]
# The same two patterns on the wide positive control and on the negative one, each on its own sequences of the
# first seed (columns L{layer}H{head}). On the wide control some first-layer heads should attend from each label to
# its item and one last-layer head from q to the matching labels; on the negative control nothing forces either,
# since reading the context never helped it in training. Then the negative control's last layer on one sequence.

# %%
for name, m in others.items():
    cp_m = control_prompts(control_task(m), sizes.n, seeds[0])
    print(name)
    display(plots.circuit_table(circuit_attention(m, cp_m, batch_size).mean(0),
                                rows=("(a) label -> its item", "(b) q -> labels of the query's class")))
negative = others[power.NEGATIVE]
plots.attention_view(negative, control_prompts(control_task(negative), 1, seeds[0]).prompts[0], negative.cfg.n_layers - 1)

# %% [markdown]
# ## 3 · The collection's methods on the control
#
# Every measurement below is the collection's own function (notebooks 01, 02, 03, 05 and 07), called with the
# control's prompts and label ids. Where a notebook used one fixed demonstration set per seed, here every sequence
# has its own context, so the shared-prefix path does not apply and full prompts run.
#
# ### 3.1 · Saliency flows (notebook 01)
#
# `S_wp` (text -> label words), `S_pq` (label words -> q), `S_ww` (the rest), relative per layer. Two layers: the
# shallow range is layer 0, the deep range layer 1.

# %%
flow_prompts = {s: control_prompts(task, sizes.n_saliency, stream_seed("control_saliency", s)).prompts for s in seeds}
flow_runs = {("control", s): saliency_flow(model, flow_prompts[s], task.label_ids, batch_size=sizes.flow_batch_size) for s in seeds}
flow_ivs = sal.flow_intervals(flow_runs)
display(sal.flow_interval_table(flow_ivs, ["control"]))
plots.flows_by_layer(sal.flow_frame(flow_runs), intervals=flow_ivs, x="layer", y="relative size",
                     curves=("S_wp", "S_pq", "S_ww"))

# %% [markdown]
# The same flows on the wide positive control and on the negative one (the same seeds' sequences): the figures,
# one per control, show the three relative flows per layer with their 95% intervals. Relative flows are shares of
# each layer's total, so a model that ignores its context still has flows: what differs is where they go.

# %%
for name, m in others.items():
    task_m = control_task(m)
    runs_m = {("control", s): saliency_flow(m, control_prompts(task_m, sizes.n_saliency,
                                                                   stream_seed("control_saliency", s)).prompts,
                                                 task_m.label_ids, batch_size=sizes.flow_batch_size) for s in seeds}
    plots.flows_by_layer(sal.flow_frame(runs_m), intervals=sal.flow_intervals(runs_m), x="layer", y="relative size",
                         curves=("S_wp", "S_pq", "S_ww"), title=name)

# %% [markdown]
# The same saliency, one sequence at a time, drawn as paper A's Fig. 1 (the view of notebook 01): tokens along the
# bottom, layer 0's edges between the bottom row and the middle one, layer 1's above them; a line's width and
# opacity grow with $I_l(i, j)$ over its layer's largest edge. Blue lines flow into a label position ($S_{wp}$'s
# pairs), red ones from a label position into $q$ ($S_{pq}$'s), grey ones are the rest. An item token `x12.3` is
# exemplar 3 of class 12; the query is the last item, and the labels whose items share its class are the right
# answer.
#
# Where the mechanism of section 2 is known, the view should draw it: in layer 0, short blue lines from each item
# into the label right after it (the copy), strongest for the labels of the query's class (the read-out uses
# their copies); in layer 1, red lines from $q$ to those matching labels. That one edge per label carries the
# copy is also why the mean $S_{wp}$ above can miss it: a mean over every position before a label dilutes a
# single edge. Move the slider to see how far down the ranking the other labels come; hover a label to see what
# it gathers and who reads it.

# %%
_ = plots.show_flow_view(model, flow_graph(model, first.prompts[0], task.label_ids), "09_flow_graph", top_k=8,
                         title="The control: the saliency flows of one sequence", model_name=MODEL)

# %% [markdown]
# ### 3.2 · Isolating the label words (notebook 02)
#
# Attention from every label position to the positions before it blocked in the first layer or in the last (k = 1
# of 2 layers), against as many random non-label positions (the [authors' draw](https://github.com/lancopku/label-words-are-anchors): per input and per layer, among the
# positions before q - 1; here those are the 8 items, so the draw takes all of them). Label loyalty: the share of
# inputs whose prediction is unchanged.

# %%
isolated = {("control", s): isolation_experiment(model, cp.prompts, cp.label_ids, ks=(1,), seed=s,
                                                    batch_size=batch_size, shared=False) for s, cp in sequences.items()}
loyalty_df = iso.loyalty_frame(isolated)
loyalty, loyalty_drop = iso.isolation_intervals(loyalty_df, k=1)
display(plots.loyalty_by_condition(loyalty, loyalty_df, conditions=[("label", "first"), ("label", "last"),
                                                                     ("random", "first"), ("random", "last")]))

# %% [markdown]
# ### 3.3 · Attention from q to the label words predicts the output (notebook 03)
#
# Per layer, the attention from q to each label's positions, summed over heads; AUCROC_l against the model's own
# prediction, and R_l.

# %%
attention_runs = {}
for s, cp in sequences.items():
    scores, pr = label_attention(model, cp.prompts, cp.label_ids, batch_size=batch_size, top_k=0, shared=False)
    attention_runs[("control", s)] = {"scores": scores, "pred": pr.pred, "gold": pr.gold}
auc_ivs = auc.curve_intervals(attention_runs)
# per layer: AUCROC_l averaged over seeds and R_l from the mean curve (as notebook 03's mean_curves)
auc_curve = raw_mean_curves(attention_runs)
display(auc_curve.round(3))

# %% [markdown]
# ### 3.4 · In-context heads, ablation, value-output vectors, two towers (notebook 07)
#
# Head attribution (gain and drop at q for each label, on sequences of a separate draw, seed + 1000) ranks the
# heads. The control has 4 heads, so "about 1% of the heads" means nothing here: the number of in-context heads
# is fixed at **one** before the run (the fewest possible; the random control then draws one of the other three).
# Ablation runs on the 4-way sequences (chance 0.25). The value-output vectors and the two towers are paper B's
# binary quantities (log p(L0) - log p(L1)), so they run on 2-way sequences: two classes, 4 items each, labels L0
# and L1 assigned at random per sequence; the mapping control there swaps L0 and L1 (a label prior scores exactly
# 0.5).

# %%
attr = control_prompts(task, sizes.n_attr, stream_seed("ranking", seeds[0]))
head_scores = ih.head_attribution(model, attr.prompts, attr.label_ids, batch_size=batch_size, shared=False)
icl_heads = ih.incontext_heads(head_scores, 1)
ablated = {("control", s): ablation_conditions(model, cp.prompts, cp.label_ids, icl_heads, s, batch_size, shared=False)
           for s, cp in sequences.items()}
ablation_ivs = ha.ablation_intervals(ablated)
one_head = [[ablation_accuracy(model, first.prompts, first.label_ids, [(l, h)], batch_size, shared=False, at="all")
             for h in range(model.cfg.n_heads)] for l in range(model.cfg.n_layers)]  # [layer][head], first seed
print(f"in-context head {icl_heads}; random heads per seed {[r['random_heads'] for r in ablated.values()]}")
display(plots.interval_table(ablation_ivs, column="accuracy [95% CI]"))  # a row per ablation condition
display(plots.layer_head_table(one_head, cells="accuracy, one head ablated everywhere (first seed)"))
plots.head_attribution_map(head_scores, boxed=icl_heads, x="head", y="layer", title="control: head attribution at q",
                           panels=("gain: direct log-prob effect at q", "drop when ablated at q"))

# %%
two_way = {s: control_prompts(task, sizes.n, stream_seed("two_way", s), n_ways=2) for s in seeds}
two_way_swapped = {s: label_swap(model, cp, perm=[1, 0]) for s, cp in two_way.items()}
mapping = {"swap_averaged": bootstrap_means(pc.swap_cells(two_way_swapped, "swap_averaged")),
           "same_word": bootstrap_means(pc.swap_cells(two_way_swapped, "same"))}
vo_runs = {("control", s): value_outputs(model, cp.prompts, cp.label_ids, icl_heads, batch_size=batch_size,
                                            shared=False) for s, cp in two_way.items()}
carrying = tt.label_carrying_interval(vo_runs)
towers = tt.two_towers_intervals({"control": vo_runs[("control", seeds[0])]})
print(plots.control_two_way_text(mapping, carrying, towers))

# %% [markdown]
# ### 3.5 · Anchor-only context (notebook 05) and re-weighting (notebook 04)
#
# Hidden_anchor on the control: each sequence's context runs once and only BOS and the label tokens keep their
# keys and values; the query item then runs against them. Hidden_random keeps BOS and one random item per
# demonstration instead. If the label positions hold their items (step (a) above), the anchors alone suffice.
#
# Anchor re-weighting (notebook 04) is not run: it learns one bias per demonstration slot for one fixed
# demonstration set, and the control's mapping changes with every sequence while its accuracy has no room to grow.

# %%
anchor_only = {s: hidden_anchor_accuracy(model, cp, seed=s, full=swapped[s]["pred"]) for s, cp in sequences.items()}
# a row per condition: full context (icl), Hidden_anchor, Hidden_random (accuracy, and loyalty to the full context)
display(plots.interval_table({k: bootstrap_means({("control", s): h[k] for s, h in anchor_only.items()})
                              for k in anchor_only[seeds[0]]}))

# %% [markdown]
# ## 4 · What each check can see: its power on populations of controls
#
# One checkpoint says how a check behaves on that checkpoint. Whether it sees a mechanism that a training recipe
# produces is a question about the recipe, so each control here is a **population** of checkpoints trained from
# their own seeds (`helpers/core/controls/population.py`): five on 2 layers x 8 heads, eight on 4 layers x 8 heads
# (where "shallow", "deep" and "middle" name different layers; the depth checks are read on these alone, and with
# five a check that sees its mechanism every time would still have an interval starting below 0.5), the negative ones trained as long as the positive ones
# train on average. Every check of notebooks 01, 02, 03, 05, 07, 10 and 11 runs once per checkpoint (a replicate: this notebook's
# size per seed, on sequences of the replicate's own seed) on the positive controls, where the mechanism it looks
# for is there, and on the negative controls, where it is absent; checkpoint r of every population sees the same
# items with the same labels. Each replicate is graded by the check's own notebook function and criterion,
# unchanged. **Sensitivity** is the share of the positive checkpoints that say "replicates" (both depths pooled;
# the depth checks of notebook 03 on the 4-layer ones alone); **specificity** the share of the negative checkpoints
# that say anything else; each with its exact 95% binomial interval, whose unit is a training run. The reading was
# fixed before any run
# (`helpers/study/power_report.py`): an interval at or above 0.5 says yes, one below 0.5 says no; a check that
# sees it and stays silent is *informative*; one that misses it or fires on the negative is *uninformative*, and
# its verdicts on the language models (README, notebook 10) say so.
#
# **Exercise.** Before running the next cells, predict for a few checks whether each will *fire* (say
# "replicates") or stay *silent* on the negative control, which answers from its weights. Think about what each
# check measures: a difference the context makes, or something any model shows.

# %% tags=["solution"]
def predict_on_negative():
    """For at least two checks (claim keys), "fires" if you expect the check to say "replicates" on the negative
    control, else "silent". Returns {claim key: "fires" or "silent"}."""
    return {
        # isolating the label words cannot matter to a model that does not read them
        "02.label_first_hurts_most": "silent",
        # random words barely matter to any model that does not read them: this one should say "replicates"
        "02.random_first_barely_matters": "fires",
        # the ranking scores heads by what they write at q; the negative control writes its stored answer there,
        # so ablating that head costs accuracy whatever the context holds
        "07.ablation_at_q": "fires",
        # the mapping control swaps the labels in the context; an answer from the weights does not move
        "07.foobar_icl": "silent",
    }


# %% [markdown]
# First the premises every power row rests on, on the exact sequences the replicates run: each positive checkpoint
# answers in context; each negative one answers with its training mapping, **keeps its answer** when every label of
# the context moves (a model that moved away from the swapped labels without reading them would pass "does not
# follow the swap", not this), and is near chance on classes never seen in training (classes as the unit). The
# table: per premise and population, the mean with its 95% interval over checkpoints and sequences.

# %%
psizes = power.power_sizes(profile)  # one replicate per checkpoint, and per replicate the sequences of one seed
populations = power.population_models(psizes)  # {population: [checkpoint per replicate]}, sha256 checked
pop_premises = power.population_premises(populations, psizes)
display(plots.interval_table({f"{name}: {field}": pc.premise_interval(pop_premises, name, field)
                              for name in pop_premises for field in ("correct", "same", "follows", "heldout_by_class")}))

# %% [markdown]
# The runs (stored on disk per checkpoint, replicate and group of checks, so a rerun reads them back), the table,
# and your prediction beside what the negative controls said. The table: a row per check of the language models,
# the control claim that measures it, sensitivity and specificity with their intervals, the verdicts of the
# replicates (and, where the two depths part, what each population said), and the reading; the last rows name the
# checks the controls cannot measure, and why. Where they part, look at the layers: the 4-layer positives read the
# labels at q in their second layer of four (`tests/test_label_reading.py`), so a check that looks for that
# read-out in the deep or upper half of the layers looks past it there.

# %%
power_runs = power.power_runs(populations, psizes)
power_rows = power_report.power_rows(power_runs)
display(power_frame(power_rows))
check_negative_prediction(predict_on_negative, power_rows)
print(power_summary(power_rows))

# %% [markdown]
# ## 5 · The papers beside the control
#
# **Checks fixed before the run.** The control's premise (`control_claims`): accuracy on training classes and on
# classes never seen in training, and the label-swap control's swap-averaged accuracy, each with its whole 95%
# interval at or above 0.90. Every other claim is graded by its notebook's own function with that notebook's
# criteria, unchanged (01 `saliency_claims`, 02 `isolation_claims` with k = 1, 03 `aucroc_claims`, 07
# `mapping_claims`, `ablation_claims` and `two_towers_claims`). Nothing was tuned to this model. The statements are the
# papers' as the other notebooks print them: where notebook 02's say "5 layers" (the paper's k), the control's
# run isolates k = 1 of its 2 layers; where paper B's say "foo/bar" and "~1% of the heads", the control's labels are
# L0/L1 and its in-context head is 1 of 4.

# %%
ctx = f"control, {len(seeds)} seed(s) x {sizes.n} sequences"
claims = (pc.control_claims(accuracy, heldout_accuracy, swap["swap_averaged"], swap["follows"], ctx)
          + pc.controls_claims(premises[power.POSITIVE]["train"]["swap_averaged"],
                               premises[power.NEGATIVE]["train"]["correct"], premises[power.NEGATIVE]["train"]["follows"],
                               premises[power.NEGATIVE]["heldout"]["correct"],
                               f"the wide and negative controls, {len(seeds)} seed(s) x {sizes.n} sequences")
          + pc.population_claims(pop_premises, f"the control populations, {psizes.replicates} checkpoint(s) each x "
                                               f"{psizes.n} sequences")
          + sal.saliency_claims(flow_ivs, ["control"], ctx)
          + iso.isolation_claims(loyalty, loyalty_drop, k=1, context=ctx)
          + auc.aucroc_claims(auc_curve, auc_ivs, MODEL, context=ctx)
          + mc.mapping_claims(mapping, ctx) + ha.ablation_claims(ablation_ivs, ctx) + tt.two_towers_claims(carrying, towers, ctx))
_ = report_claims("09_a_model_that_learns_in_context", claims, digits=2, model_name=MODEL,
                  metrics={"sizes": sizes.as_dict(), "incontext_heads": icl_heads, "training": info["training"],
                           "power_sizes": psizes.as_dict(), "power": [p.to_json() for p in power_rows]})

# %% [markdown]
# ## 6 · Questions for discussion
#
# **1.** The class -> label assignment is drawn afresh for every sequence. Why does that make accuracy above 0.25
# proof of in-context learning, when the same number on Gemma or SmolLM2 would not be?
#
# <details><summary>Answer</summary>
#
# Over sequences, every label is equally likely for every class, so nothing stored in the weights can predict the
# label of a query's class: only the pairs shown in this sequence can. For a pretrained model with real label
# words, a correct answer can come from the word's meaning (a prior) with the demonstrations ignored; notebook 07's
# swapped mappings are what separates the two there.
# </details>
#
# **2.** In a 2-layer attention-only model, why can isolating the label positions in the *last* layer not change
# the prediction, whatever the model does?
#
# <details><summary>Answer</summary>
#
# What a label position computes in the last layer is written to its own residual stream after the last layer
# has read it: no later layer reads it, and q's last-layer attention uses the keys and values made from the
# residual stream *entering* that layer. So the "label words last" condition is an identity here, whatever the
# mechanism; on a deep model the last few layers are not all after the read-out, which is why the paper's figure
# is not trivial.
# </details>
#
# **3.** Hidden_anchor keeps only BOS and the label tokens. Why can that be enough on the control, and what does
# Hidden_random test?
#
# <details><summary>Answer</summary>
#
# If the first layer copies each item into its label position (step (a)), the label positions' keys hold the items
# and their values the labels: the last layer needs nothing else. Hidden_random keeps as many positions, items
# instead of labels: the items' keys match the query but their values carry no label, so the answer is a guess.
# </details>
#
# **4.** Suppose a method reports "inconclusive" on the offline models and "replicates" on the control. What has
# the control shown, and what has it not?
#
# <details><summary>Answer</summary>
#
# It has shown that the method can see the mechanism where it exists, at this run size: the offline models'
# "inconclusive" is then evidence about those models, not a blind spot of the method. It has not shown that the
# offline models use the same mechanism, nor that the method is as sensitive in a model with 30 layers, 4 heads'
# worth of redundancy per function and real text as in a 2-layer model built for one task.
# </details>
#
# **5.** The rows of notebook 02 that say an isolation "barely matters" (random words; the label words in the last
# layers) say "replicates" on a model that reads nothing from its context. Why does the rule above call such a row
# uninformative whatever the language models do, and what is it for?
#
# <details><summary>Answer</summary>
#
# They are reference conditions, not detectors: any model that does not depend on the isolated positions passes
# them, including one that ignores its context, so "replicates" there cannot tell reading from not reading. Their
# job is to be the baseline the detector (the label words isolated in the first layers) is read against.
# </details>
#
# **6.** Suppose Hidden_anchor's comparisons (notebook 05) say "replicates" on the negative control too. That model
# answers from its weights and ignores a swapped mapping. What besides the label words' role as anchors could make
# keeping the label positions' keys and values better than keeping as many items, or than the label words alone as
# text?
#
# <details><summary>Answer</summary>
#
# The form of the context. Hidden_anchor keeps positions whose keys and values were computed in the full sequence,
# so the query still attends over a context of the kind it was trained on. Hidden_random keeps item positions
# instead, and Text_anchor moves the query to another position in a shorter sequence: both are inputs the model
# never saw. A model that answers from its weights can still be knocked off by an unfamiliar context, so a loyalty
# gap measures how much the context's form matters, not whether the label words carry the demonstrations; the
# label-swap control (does the answer follow the mapping?) asks that.
# </details>

# %% [markdown]
# ## 7 · Reading: what each method sees on a model that certainly learns in context
#
# On this model the mechanism is known (section 2: a first-layer head copies each item into its label, a
# second-layer head reads the labels of the query's class at q), so each verdict below grades the *method*:
# "replicates" means it sees the mechanism, anything else that it misses part of it. The numbers and verdicts
# are this run's, graded with the same criteria as on the offline models.

# %%
_ = show_reading("09_a_model_that_learns_in_context", digits=2, model_name=MODEL)

# %% [markdown]
# So where the offline models' mapping control sits at chance and 07's ablation cannot be tested, the methods of
# 02, 03, 05 and 07 are not blind when they find this mechanism here. Saliency's shallow check and paper B's
# head ranking are the two places where a method can miss a mechanism that is there. What this control cannot
# establish: anything about depth (two layers, where "first" and "last" are single layers), text (items are
# single tokens, labels have no meaning to unlearn), or redundancy (a 270M model may spread one function over
# many heads).
