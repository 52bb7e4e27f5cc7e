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
# # 08 · Your own task
#
# **Learning objectives.** After this notebook you can
# - write a task spec (template with `{text}` and `{label}`, label words, separator, data files) and render
#   its prompts by hand, token for token as the helpers do;
# - run the analyses of notebooks 00-03 (accuracy, saliency flows, label-word isolation, AUCROC) on a task
#   of your own, each with its 95% interval;
# - read the verdicts on a small run: what "replicates", "partly" and "inconclusive" can and cannot say
#   about your task.
#
# ## The paper's claim, on a task the paper did not run
#
# *Label Words are Anchors* ([arXiv 2305.14160](https://arxiv.org/abs/2305.14160)) finds on four
# classification tasks that label words are anchors: in shallow layers the information of each demonstration
# flows into its label word ([§2.1](https://arxiv.org/abs/2305.14160), saliency flows $S_{wp}$ early;
# [§2.2](https://arxiv.org/abs/2305.14160), isolating the label words in the first layers changes the
# prediction most), and in deep layers the prediction position $q$ reads from the label words
# ([§2.1](https://arxiv.org/abs/2305.14160), $S_{pq}$ late; [§2.3](https://arxiv.org/abs/2305.14160), the
# attention from $q$ to the label words predicts the output). If that is a property of ICL rather than of
# four tasks, it should show on yours.
#
# This notebook runs those analyses, in small form, on a task you define: a template with `{text}` and
# `{label}`, the label words in class order, a separator between demonstrations, and `train.jsonl` /
# `test.jsonl` files with their sha256 checksums, all in a small spec file (docs/your-own.md, "Your own task").
# Nothing in `helpers/` changes: the spec is registered when it is loaded.
#
# By default the notebook uses the example shipped in `data/rotten_tomatoes/task.json` (Rotten
# Tomatoes movie reviews, negative / positive; not one of the paper's tasks). Set
# `ICL_OWN_TASK=/abs/path/to/task.json` to run it on yours. Run sizes come from `ICL_PROFILE`
# (`helpers.study.profiles.own_task_sizes`: with `default`, 3 seeds and 32 test inputs per seed), the
# model from `ICL_MODEL`. Every number comes with the 95% interval of notebooks 00-03: a two-level
# bootstrap over seeds and, within each seed, the test inputs (`helpers.study.stats`). Under
# `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs: the numbers test that the
# code runs; they are not evidence.

# %%
import warnings

import pandas as pd
import torch
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import example_prompt, sample_demos
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split
from helpers.exercises.setting import check_render_prompt
from helpers.experiments.aucroc import mean_curves
from helpers.experiments.saliency_graph import flow_graph
from helpers.protocols import aucroc, isolation, saliency, setting
from helpers.study import notebook, paper, plots
from helpers.study.claims import report_claims, show_reading
from helpers.study.profiles import current_model_name, current_own_task, own_task_sizes
from helpers.study.stats import bootstrap_means, cells_from_frame, paired_differences

profile = notebook.start()
model = load_model(current_model_name())
task = get_task(current_own_task())
name = task.name
sizes = own_task_sizes(profile)  # seeds, test and saliency inputs per seed, the random control's inputs
seeds, n = sizes.seeds, sizes.n_test
print(profile.name, current_model_name(), sizes)

# %% [markdown]
# ## The task
#
# The spec file as written, and what it gives. Spaces right before `{label}` belong to the label
# word (tokenizers attach them to the word), so the query ends right before them: after the colon
# for the shipped tasks. A label word of several tokens is represented by its first token, as in
# the paper; two label words must differ in their first token.

# %%
plots.show_task_spec(task)  # the spec file as written (nothing for a shipped task)
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
# Seed 42, one demonstration per class (the first test row whose prompt fits the model's context). Colours mark the label words ($p_k$ is the first token of
# each), the formatting tokens (everything of the template outside `{text}` and `{label}`, and the
# separators), the query text and the target position $q$. The table lists every token with its
# role and whether Hidden_anchor (notebook 05) keeps it.

# %%
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    prompt = example_prompt(model, task, seed=42, k_per_class=1)  # the first test row that fits the context
demos, query = sample_demos(load_split(task, "train"), task, 1, seed=42), prompt.query
plots.show_anchor_prompts(model, {name: prompt})
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
# ## The mechanism by hand: your prompt, rendered from the spec
#
# Everything above and below rests on one rendering: each demonstration is the template with `{text}` and
# `{label}` filled in, demonstrations are joined by the separator, and the query is the template cut right
# before the label word. Write that rendering; the check compares it with `build_prompt` on three templates,
# then on this prompt, token for token. Then the label-restricted prediction of notebook 00 on your tokens.
#
# <details><summary>Hint</summary>
#
# `task.parts` splits the template `before{text}between lead{label}after` into `(before, between, lead,
# after)`, where `lead` is the run of spaces right before `{label}`: it belongs to the label word (it is
# inside the label word's first token), so the query ends after `between`. `task.label_words[d.label]` is a
# demonstration's label word; `task.separator` goes between demonstrations and before the query.
# </details>

# %% tags=["solution"]
from collections.abc import Sequence

from helpers.core.prompts import Demo
from helpers.core.tasks import Task


def render_prompt(task: Task, demos: Sequence[Demo], query_text: str) -> str:
    """The prompt text of ``demos`` followed by the query ``query_text``.

    With ``before, between, lead, after = task.parts`` (the template is ``before{text}between lead{label}after``):
    each demonstration ``d`` is ``before + d.text + between + lead + task.label_words[d.label] + after``; the
    query is ``before + query_text + between`` (it stops before the label word and its leading spaces); the
    pieces (demonstrations, then the query) are joined by ``task.separator``.
    """
    before, between, lead, after = task.parts
    shown = [f"{before}{d.text}{between}{lead}{task.label_words[d.label]}{after}" for d in demos]
    return task.separator.join(shown + [f"{before}{query_text}{between}"])


# %%
check_render_prompt(render_prompt)
text = render_prompt(task, demos, query.text)
tokens = torch.tensor([model.tokenizer.bos_token_id] * prompt.bos
                      + model.tokenizer(text, add_special_tokens=False)["input_ids"])
torch.testing.assert_close(tokens, prompt.tokens)  # the same tokens as build_prompt's
with torch.inference_mode():  # notebook 00's prediction: logits at q (the last token), label words' first tokens
    mine = model(tokens[None].to(model.cfg.device))[0, len(tokens) - 1, lids].float().cpu()
torch.testing.assert_close(mine, vanilla_predictions(model, [prompt], lids, top_k=0).label_logits[0],
                           atol=1e-3, rtol=1e-3)
plots.show_rendered_prediction(task, text, mine, prompt.gold)  # the query's end, the label logits, the prediction

# %% [markdown]
# The rendered text ends with the template's text between `{text}` and `{label}` (for the example, the
# colon after "Sentiment"): that last token is $q$. If your tokenizer merges a label word with the token
# before or after it, `build_prompt` refuses the template rather than reading a wrong position.

# %% [markdown]
# ## At scale: vanilla 1-shot accuracy against chance
#
# One fixed set of demonstrations (one per class) per seed for the whole test sample, as in
# notebook 00. The reading compares the 95% interval with chance (1 / number of classes).

# %%
one = setting.vanilla_accuracy(model, [name], setting.SettingSizes(seeds=seeds, n_test=n, batch_size=sizes.batch_size), 1,
                               profile.name)
cells, _ = cells_from_frame(one, "correct", ids="idx")
acc_iv = bootstrap_means(cells)
plots.show_own_accuracy(task, one, acc_iv)  # per seed, then the interval beside chance

# %% [markdown]
# ## Saliency flows $S_{wp}$, $S_{pq}$, $S_{ww}$ (notebook 01)
#
# Per layer, the saliency of the flows from the demonstration text to the label words ($S_{wp}$),
# from the label words to $q$ ($S_{pq}$) and between all other pairs ($S_{ww}$), relative to their
# sum, each input with its own demonstrations. The paper's picture: $S_{wp}$ largest in shallow
# layers, $S_{pq}$ in deep layers. The checks are notebook 01's, on this task alone.

# %%
sal_sizes = saliency.SaliencySizes(seeds=seeds, n=sizes.n_saliency, batch_size=sizes.batch_size)
sal_runs = saliency.saliency_runs(model, [name], sal_sizes, profile=profile.name)
sal_ivs = saliency.flow_intervals(sal_runs)
sal_verdict, sal_checks = saliency.saliency_verdict(sal_ivs, [name])
display(saliency.flow_interval_table(sal_ivs, [name], labels={name: task.display}).set_index("task").T)
display(plots.own_saliency_checks_table(sal_checks))
plots.flows_by_layer(saliency.flow_frame(sal_runs), intervals=sal_ivs, panels={name: task.display}, x="layer",
                     y="relative size", curves=("S_wp", "S_pq", "S_ww"), save_as=f"08_{name}_saliency_flow",
                     title=f"Relative saliency flows, {task.display}, {current_model_name()} "
                           f"({len(seeds)} seed(s) x {sizes.n_saliency} inputs, 95% CI)")

# %% [markdown]
# The flows of the prompt shown at the top of this notebook, drawn as the paper's Fig. 1 (the view of notebook
# 01): tokens along the bottom, one row per layer boundary with layer 0 at the bottom, a line from token $j$ in
# row $l$ to token $i$ in row $l + 1$ for each large $I_l(i, j)$ (width and opacity: over the largest edge of its
# layer). Blue lines flow into a label word ($S_{wp}$'s pairs), red ones from a label word into $q$ ($S_{pq}$'s),
# grey ones are the rest; each demonstration is a band named after its label word. The sliders keep each layer's
# $k$ largest edges or those above a share of the layer's saliency, and choose the layers; hover a token to see
# its flows. If your task's label words are anchors, blue lines gather into them in the shallow rows and red
# lines leave them for $q$ in the deep rows; one prompt illustrates, the checks above are the evidence. The same
# graph is saved as a figure, `08_<task name>_flow_graph.png`, in the results folder.

# %%
_ = plots.show_flow_view(model, flow_graph(model, prompt, lids), f"08_{name}_flow_graph",
                         title=f"{task.display}: the saliency flows of the prompt above on {current_model_name()}")

# %% [markdown]
# ## Isolating the label words in the first and last layers (notebook 02)
#
# Label words may not attend to anything earlier in the first or last $k$ layers; the random
# control isolates as many random non-label words, drawn per input and per layer as in the [authors'](https://github.com/lancopku/label-words-are-anchors)
# code (on the first inputs of each seed only: it runs every input's full prompt). Label loyalty is
# the share of predictions left unchanged, word loyalty the overlap of the top-5 tokens at $q$.
# The paper: isolating label words in the first layers hurts most, the other three barely matter.

# %%
k = 5 if model.cfg.n_layers >= 10 else max(1, model.cfg.n_layers // 3)
iso_sizes = isolation.IsolationSizes(seeds=seeds, n=n, sweep_seeds=(), k_main=k, k_sweep=(), sweep_n=None,
                                     random_n=sizes.random_n, random_draw="authors", batch_size=sizes.batch_size)
iso_runs = isolation.isolation_runs(model, [name], iso_sizes, profile=profile.name)
loy = isolation.loyalty_frame(iso_runs)
loy["task"] = loy["task"].map({name: task.display})
conds = [("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")]
iso_ivs = {(c, w, m): bootstrap_means(isolation.condition_cells(loy, c, w, k, m)) for c, w in conds
           for m in ("label_loyal", "word_loyal")}
drop = {(c, w): bootstrap_means(paired_differences(isolation.condition_cells(loy, c, w, k, "label_loyal"),
                                                   isolation.condition_cells(loy, "label", "first", k, "label_loyal"),
                                                   isolation.condition_ids(loy, c, w, k), isolation.condition_ids(loy, "label", "first", k)))
        for c, w in conds[1:]}
iso_verdict, iso_checks = isolation.isolation_verdict({cw: iso_ivs[(*cw, "label_loyal")] for cw in conds}, drop)
display(plots.own_isolation_table(iso_ivs, k))  # label and word loyalty (%) per condition
print(f"isolation checks: {iso_checks}")
plots.loyalty_bars(loy, k=k, conditions=conds, bars=("label_loyalty", "word_loyalty"), y="loyalty (%)", intervals=iso_ivs,
                   title=f"Isolation in the first / last {k} layers, {task.display}", save_as=f"08_{name}_isolation")

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
auc_sizes = aucroc.AucrocSizes(seeds=seeds, n=n, batch_size=sizes.batch_size)
auc_df = aucroc.aucroc_runs(model, [name], auc_sizes, profile=profile.name, raw=raw)
curve = mean_curves(auc_df)
auc_ivs = aucroc.curve_intervals(raw)
defined = bool(curve["auc"].notna().any())  # no AUC when the model predicted one class for every input
auc_verdict, auc_checks = aucroc.aucroc_verdict(curve, peak_target=paper.FIG5_PEAK_AUCROC, peak_iv=auc_ivs["peak"],
                                         cross_iv=auc_ivs["crossing"], peak_layer_iv=auc_ivs["peak_layer"]) \
    if defined else ("undefined", {})
display(plots.own_aucroc_table(auc_ivs))
display(plots.own_aucroc_checks_table(auc_checks))
plots.aucroc_by_layer({f"{current_model_name().split('/')[-1]}, {task.display}": curve}, x="layer",
                      curves={"auc": "AUCROC$_l$", "r": "$R_l$"}, threshold=0.5,
                      save_as=f"08_{name}_aucroc")  # the curves are empty when AUCROC is undefined

# %% [markdown]
# ## Paper vs ours
#
# The checks are those of notebooks 00-03, fixed before the run; their verdicts are taken unchanged. For
# accuracy: the 95% interval above chance "replicates" (ICL works on the task), below chance "does not
# replicate", containing chance "inconclusive". A run whose model predicts one class for every input has no
# AUCROC: "inconclusive". The report is saved with the spec's digest (so results of different specs
# never mix) in the results folder's `metrics/08_your_own_task_<name>.json`.

# %%
claims = setting.own_task_claims(task, acc_iv, (sal_verdict, sal_ivs), (iso_verdict, iso_ivs), (auc_verdict, auc_ivs), k)
_ = report_claims(f"08_your_own_task_{name}", claims, digits=2, metrics={"digest": task.digest, "budget": sizes.as_dict()})

# %% [markdown]
# ## Questions for discussion
#
# 1. Your accuracy interval contains chance, but isolation and AUCROC replicate. Is that a contradiction?
#    <details><summary>Answer</summary>
#
#    No. Label loyalty and AUCROC_l are measured against the model's *own* prediction, not the gold label:
#    they say how the prediction is formed (from the label words), not whether it is right. A model can route
#    its guess through the label words and still guess badly, e.g. by copying the label of the demonstration it
#    finds most similar. Read the mechanism verdicts as "how this model predicts on this task".
#    </details>
# 2. You change the separator from `"\n"` to `"\n\n"`. What changes in the position record, and in which
#    analyses?
#    <details><summary>Answer</summary>
#
#    The separator's tokens are formatting tokens (`format_pos`): they count in $S_{ww}$ (notebook 01), are
#    candidates for the random-word control in isolation (notebook 02) and are kept by Hidden_anchor
#    (notebook 05). The label positions $p_k$ and $q$ move, but the analyses read them from the record, so no
#    code changes. The task's digest changes too, so no stored result of the old spec is reused.
#    </details>
# 3. Your label words are `neg` / `pos` instead of `negative` / `positive`. Why might the verdicts change
#    even on the same reviews?
#    <details><summary>Answer</summary>
#
#    The prediction reads only each label word's first token. Short or rare words carry less of the class
#    meaning and more of a prior of their own (a model may simply prefer one of them), which lowers accuracy
#    and makes the model predict one class more often; with few inputs, a run where one class dominates has a
#    wide or undefined AUCROC interval.
#    </details>
# 4. With 3 seeds and 32 inputs per seed (the `default` budget), which claim is the hardest to settle?
#    <details><summary>Answer</summary>
#
#    Isolation's third check (random words barely matter): the random control runs on at most 8 inputs per
#    seed, so its loyalty interval is wide and rarely lies wholly above 80%; a "partly" there often means "the
#    control is too small", not "random words matter". Saliency, with 6 inputs per seed (each with its own
#    demonstrations and a backward pass), is the next smallest.
#    </details>

# %% [markdown]
# ## Reading your task's claims: what they can show, and what they cannot
#
# The numbers of this notebook are those of whatever task it runs on. This run's, with the point each verdict
# makes:

# %%
_ = show_reading(f"08_your_own_task_{name}", digits=2)

# %% [markdown]
# - **What a verdict rests on.** With `default` each claim rests on 3 seeds and at most 32 test inputs per
#   seed (saliency and the random-word control on fewer; the table's "ours" column gives the counts). The
#   paper's numbers in the table are its four tasks on GPT2-XL, never your task: a verdict says whether
#   your run shows the paper's *pattern*, not whether it matches a number.
# - **What cannot be concluded.** One small model (135M-270M) and one template say nothing about larger
#   models or other phrasings; a handful of seeds samples the choice of demonstrations thinly; and a task
#   where the model is at chance can still show the anchor pattern (question 1), so the mechanism verdicts
#   never show that ICL *works* on your task, only how the model forms its prediction.
