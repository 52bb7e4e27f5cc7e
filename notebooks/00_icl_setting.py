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
# # 00 · The in-context learning setting
#
# **Learning objectives.** After this notebook you can
# - build an ICL prompt for a classification task and name its anchor positions: the label words
#   $p_k$, the formatting tokens and the target position $q$;
# - compute a label-restricted prediction by hand with TransformerLens: one forward pass, the logits at
#   $q$, the label words' first tokens, argmax;
# - read vanilla 1-shot and 5-shot accuracy with a 95% interval over seeds and inputs, beside chance
#   and the paper's GPT2-XL numbers;
# - say why "5-shot is not better than 1-shot" is a claim about a difference, and test it as one.
#
# ## The paper's claim
#
# *Label Words are Anchors* (Wang et al., EMNLP 2023, [arXiv 2305.14160](https://arxiv.org/abs/2305.14160))
# studies in-context learning (ICL) for text classification: the model reads demonstrations, each ending
# in a **label word**, then a query that ends right after the colon, and predicts the next token,
# restricted to the label words ([§2](https://arxiv.org/abs/2305.14160), setting; Appendix for templates).
# The paper's claim is that the label words act as **anchors**: in shallow layers each label word gathers
# the information of its demonstration ([§2.1-2.2](https://arxiv.org/abs/2305.14160)); in deep layers
# the prediction position reads from the label words ([§2.3](https://arxiv.org/abs/2305.14160)).
#
# This notebook fixes the setting every later notebook uses (the four tasks, their templates and label
# words, the **position record**), and measures the baseline of
# [§3.1, Table 1](https://arxiv.org/abs/2305.14160): vanilla ICL accuracy with 1 and 5 demonstrations per
# class. Its one checkable finding: on GPT2-XL, more demonstrations did not help on average (5-shot below
# 1-shot, with sharp falls on AGNews and EmoC).
#
# Run size comes from `ICL_PROFILE` (`smoke` for CI, `default` for a laptop, `paper` for the full
# setting), and the model from `ICL_MODEL` (default: Gemma 3 270M, offline). Under `ICL_PROFILE=smoke`
# (what `make test` runs) each cell sees a handful of inputs: the numbers test that the code runs; they are
# not evidence.

# %%
import warnings

import numpy as np
import pandas as pd
import torch
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import example_prompt
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids, load_split
from helpers.exercises.setting import check_label_logits
from helpers.protocols import setting
from helpers.study import notebook, paper, plots
from helpers.study.claims import report_claims, show_reading
from helpers.study.profiles import current_model_name
from helpers.study.stats import bootstrap_means

profile = notebook.start()
model = load_model(current_model_name())
sizes = setting.setting_sizes(profile)  # seeds, test inputs per (task, seed), batch size
print(profile.name, current_model_name(), sizes)

# %% [markdown]
# ## Tasks, templates and label words
#
# A label word that is several tokens is represented by its **first** token (the paper's rule).
# The table shows how this tokenizer splits each label word. EmoC is not available offline, so
# TweetEval-emotion stands in for it, and every table names the substitute (`data/README.md`).

# %%
rows = []
for name in profile.tasks:
    t = get_task(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        ids = label_token_ids(model.tokenizer, t)
    pieces = [len(model.tokenizer(t.label_text(c), add_special_tokens=False)["input_ids"]) for c in range(t.n_classes)]
    rows.append({"task": t.display, "template": repr(t.full_template),
                 "label words": ", ".join(t.label_words),
                 "tokens per label word": pieces, "first-token ids": ids,
                 "test pool": len(load_split(t, "test")), "demo pool": len(load_split(t, "train"))})
pd.DataFrame(rows)

# %% [markdown]
# ## Prompts and their anchor positions
#
# One prompt per task (seed 42, one demonstration per class, shuffled order; the first test row whose prompt
# fits the model's context, as the experiments drop longer ones). Colours mark the
# label words ($p_k$ is the first token of each), the formatting tokens, the query text and
# the target position $q$. Hover over a token to see its position.

# %%
examples = {}
for name in profile.tasks:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        examples[name] = example_prompt(model, get_task(name), seed=42, k_per_class=1)
plots.show_anchor_prompts(model, examples)

# %% [markdown]
# The same record as a circuitsvis token view (1 = label word, 0.75 = q, 0.5 = formatting):

# %%
plots.anchor_tokens_view(model, examples[profile.tasks[0]])

# %% [markdown]
# ## The mechanism by hand: the label-restricted prediction
#
# Every number in this project starts from one step: run the prompt, read the logits at $q$ (the
# colon that ends the query), keep only the label words' first tokens, and take the argmax. The model is
# never asked to produce a label word as its top-1 token; it only has to rank the label words in the
# right order. Write that step for one prompt.
#
# <details><summary>Hint</summary>
#
# `model(tokens)` returns logits `[batch, pos, d_vocab]` (with Gemma's final soft cap already applied).
# `prompt.tokens` is one sequence with BOS already in it when the model uses one: add the batch axis with
# `prompt.tokens[None]`. Index `[0, prompt.q, label_ids]`.
# </details>

# %% tags=["solution"]
from helpers.core.backend import Model  # HookedTransformer (TransformerLens 3.9) or TransformerBridge (4.x)
from helpers.core.prompts import Prompt


def label_logits(model: Model, prompt: Prompt, label_ids: list[int]) -> torch.Tensor:
    """The label-restricted scores of one prompt: a tensor ``[classes]``.

    Run the model once on ``prompt.tokens`` (as a batch of one; BOS is already in the tokens), take the
    logits at the query position ``prompt.q`` (the last token), and keep the columns ``label_ids`` (each
    class's label-word first token, in class order). The predicted class is the argmax of the result.
    """
    logits = model(prompt.tokens[None].to(model.cfg.device))  # [batch=1, pos, d_vocab]
    return logits[0, prompt.q, label_ids]


# %% [markdown]
# The check runs your function on tiny random models (learned positions, rotary, grouped-query attention)
# against the batched helper every experiment uses; then the same on the SST-2 prompt above, against
# `vanilla_predictions` (which runs the demonstrations once and the query against their cache).

# %%
check_label_logits(label_logits)
task0, p = get_task(profile.tasks[0]), examples[profile.tasks[0]]
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    ids = label_token_ids(model.tokenizer, task0)
with torch.inference_mode():
    mine = label_logits(model, p, ids).float().cpu()
    full = model(p.tokens[None])[0, p.q].float().cpu()  # every vocabulary column, to see where the label words rank
torch.testing.assert_close(mine, vanilla_predictions(model, [p], ids, top_k=0).label_logits[0], atol=1e-3, rtol=1e-3)
rank = (full[None, :] > mine[:, None]).sum(-1)  # how many vocabulary tokens score above each label word
plots.show_label_ranks(model, task0, p, mine, full, rank)  # positions, the ranks, the top-5 tokens at q

# %% [markdown]
# The table gives each label word's rank among all vocabulary tokens at $q$ (0: the top token). Other
# tokens, such as another spelling of a label word, can score above the label words; the restriction ignores
# them. It is what turns a language model into a classifier here, and accuracy measures only the label
# words' order. The positions printed above are the ones every later notebook uses: $p_k$ for the anchors,
# the formatting tokens for the controls, $q$ for the read-out.

# %% [markdown]
# ## Attention on one prompt
#
# All heads of a deep layer on the first task's prompt. Click a head, then hover over the last token
# to see where $q$ attends. In many heads the label words stand out.

# %%
plots.attention_view(model, examples[profile.tasks[0]], layer=model.cfg.n_layers - 2)

# %% [markdown]
# ## At scale: vanilla ICL accuracy
#
# The paper uses one fixed set of demonstrations per seed for the whole test sample, seeds 42-46,
# and up to 1000 test inputs. Its "5-shot" baseline uses 5 demonstrations per class (3 for
# AGNews, because of length). Our test pools are seeded samples of the merged StaICC splits
# (see `data/README.md`), not the original test splits.

# %%
one = setting.vanilla_accuracy(model, profile.tasks, sizes, 1, profile.name)
five = setting.vanilla_accuracy(model, profile.tasks, sizes, 5, profile.name)
acc = pd.concat([one.assign(setting="vanilla 1-shot"), five.assign(setting="vanilla 5-shot")])
acc["task"] = acc["task"].map(lambda n: get_task(n).display)
by_task = acc.groupby(["setting", "task"], sort=False)["accuracy"].agg(["mean", "std", "count"]).reset_index()
by_task["n per seed"] = acc.groupby(["setting", "task"], sort=False)["n"].mean().values
by_task

# %% [markdown]
# ### How sure are these numbers?
#
# Each accuracy rests on two samples: the demonstrations (one draw per seed) and the test inputs
# (`sizes.n_test` per task and seed). The 95% interval resamples both, as a two-level bootstrap
# (`helpers.study.stats`): draw the seeds with replacement, then within each drawn seed its inputs with
# replacement, and recompute the mean. Here it is by hand for one task and setting, then with the helper.

# %%
rng = np.random.default_rng(0)
sub = acc[(acc.setting == "vanilla 1-shot") & (acc.task == acc.task.iloc[0])]
per_seed = [np.asarray(c, dtype=float) for c in sub["correct"]]
boot = []
for _ in range(4000):
    seeds_drawn = rng.integers(0, len(per_seed), len(per_seed))
    boot.append(np.mean([rng.choice(per_seed[j], per_seed[j].size).mean() for j in seeds_drawn]))
by_hand = (np.mean([c.mean() for c in per_seed]), *np.quantile(boot, [0.025, 0.975]))
helper = bootstrap_means({s: c for s, c in zip(sub["seed"], sub["correct"])})
print(f"{sub.task.iloc[0]}, 1-shot: by hand {by_hand[0]:.3f} [{by_hand[1]:.3f}, {by_hand[2]:.3f}]; helper {helper}")
assert abs(by_hand[1] - helper.low) < 0.02 and abs(by_hand[2] - helper.high) < 0.02  # same method, other draws

# %% [markdown]
# Per task and setting, with chance and the paper's GPT2-XL accuracy where the paper ran the task
# (our TweetEval-emotion sits in the paper's EmoC column):

# %%
intervals = {(t, st): bootstrap_means({s: c for s, c in zip(g["seed"], g["correct"])})
             for (st, t), g in acc.groupby(["setting", "task"], sort=False)}
chance = {get_task(t).display: 1 / get_task(t).n_classes for t in profile.tasks}
paper_marks = {(get_task(ours).display, st): paper.TABLE1_GPT2XL[st][col] for st in ("vanilla 1-shot", "vanilla 5-shot")
               for col, ours in paper.OURS_FOR.items() if ours in profile.tasks}
display(plots.vanilla_interval_table(intervals, chance, paper_marks))
plots.accuracy_bars(acc, x="task", y="accuracy", bars="setting", intervals=intervals, chance=chance, paper=paper_marks,
                    title=f"Vanilla ICL accuracy, {model.cfg.icl_model_name} ({profile.name}: {len(sizes.seeds)} "
                          f"seed(s), n={sizes.n_test}); diamonds: paper, GPT2-XL", save_as="00_vanilla_accuracy")

# %% [markdown]
# ## Paper vs ours
#
# The paper's baseline finding: **more demonstrations do not help** GPT2-XL on average (Table 1,
# vanilla rows). The criterion, fixed before the run: the 95% interval of ours (5-shot minus 1-shot,
# mean over tasks, paired on the test inputs both settings score) lies below zero ("replicates"),
# above zero ("does not replicate"), or contains zero ("inconclusive"). The two accuracies themselves
# are a baseline of another, much larger model on the original test sets: shown beside the paper's,
# not judged ("not comparable").

# %%
_ = report_claims("00_icl_setting", setting.setting_claims(one, five), metrics=setting.vanilla_interval_metrics(intervals))

# %% [markdown]
# ## Questions for discussion
#
# 1. The prediction is the argmax over the label words only. What would accuracy measure if we took the
#    argmax over the whole vocabulary instead, and why would a 270M model score near zero on it?
#    <details><summary>Answer</summary>
#
#    It would require the label word to be the model's single most likely next token, so it would mix
#    "knows the answer" with "writes the answer in exactly this form". Any token that outranks the label
#    words (another spelling, a space, a frequent word: see the ranks above) would count as an error even
#    when the label words are in the right order, and a small model's accuracy would fall towards zero. The
#    paper, like this project, restricts to the label words: accuracy then measures only which class the
#    model prefers.
#    </details>
# 2. A label word such as " Abbreviation" is several tokens; we score only its first. What can go wrong
#    with that rule, and what does `label_token_ids` refuse?
#    <details><summary>Answer</summary>
#
#    Two classes whose label words start with the same token could not be told apart; `label_token_ids`
#    raises an error then. A first token that is a common word piece (" Ab") can also carry a prior of its
#    own that has nothing to do with the class, so a multi-token label word can bias the prediction.
#    </details>
# 3. Why is the 5-shot minus 1-shot difference paired on the test inputs rather than computed from the two
#    accuracies?
#    <details><summary>Answer</summary>
#
#    Both settings score the same test inputs (minus the 5-shot prompts that exceed the context), so most of
#    the input-to-input variation cancels in the per-input difference; the interval of the paired difference
#    is narrower than one built from two independent accuracies. Pairing by test-row id keeps only inputs
#    scored in both settings.
#    </details>
# 4. With one demonstration set per seed, what does the seed level of the bootstrap capture that the input
#    level cannot?
#    <details><summary>Answer</summary>
#
#    Which demonstrations were drawn, and in which order. ICL accuracy is known to swing with that choice;
#    with 5 seeds the interval includes this source of variation, but 5 draws are few, so the seed level
#    often dominates the width of the interval.
#    </details>

# %% [markdown]
# ## Reading: what this shows on a 135M-270M model, and what it cannot
#
# The paper's Table 1 baselines are GPT2-XL's; ours are a model 5-10 times smaller, so the two accuracies are
# set side by side as a baseline, not checked against each other. The claim that can be checked is the paper's
# observation that more demonstrations do not help. The numbers and verdicts below are this run's.

# %%
_ = show_reading("00_icl_setting")

# %% [markdown]
# Per task (the interval table above), the largest falls are where the label prior of the demonstrations
# matters most; the figure shows them beside chance.
#
# What the design cannot establish: the comparison is across models (270M and 135M against GPT2-XL's 1.5B),
# on test pools that are seeded samples of merged splits rather than the original test sets, with a
# substitute for EmoC; a handful of seeds samples the demonstration draw thinly, and the inputs per task and
# seed give intervals of several points per task. "Inconclusive" means the run cannot tell the two readings
# apart; it is not evidence for either.
