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
# # 02 · Shallow layers: isolating the label words
#
# **Learning objectives.** After this notebook you can
# - block chosen attention edges with a TransformerLens `hook_attn_scores` hook (a pre-softmax $-\infty$);
# - isolate the label words of a prompt in chosen layers and see how the prediction at $q$ moves;
# - measure an intervention's effect with label loyalty and word loyalty against the unmodified run;
# - read the paper's shallow-versus-deep contrast, and its random-word control, off paired intervals.
#
# ## The paper's claim
#
# [Label Words are Anchors, §2.2, Fig. 4 and Table 5](https://arxiv.org/abs/2305.14160): in shallow
# layers the label words gather the information of their demonstrations, and later layers need that. To
# test this, the paper **isolates** the label words: each label position $p_k$ may not attend to any
# earlier position, in all heads of the chosen layers. Then:
# - isolating the label words in the **first** 5 layers changes the prediction most;
# - isolating them in the **last** 5 layers barely matters;
# - isolating the same number of **random** non-label words barely matters, in either place.
#
# Two measures compare each run with the unmodified one: **label loyalty** (the share of inputs
# whose predicted label is unchanged) and **word loyalty** (the Jaccard similarity of the top-5
# tokens at $q$ over the full vocabulary).
#
# **Method.** A `hook_attn_scores` hook sets the pre-softmax score from $p_k$ to every $j < p_k$ to
# $-\infty$, so the row renormalises onto $p_k$ itself. Every isolated label row lies in the
# demonstrations, so each label condition's demonstrations run once and every input runs as a short
# suffix against them (`helpers.core.prefix`; tested equal to the full prompts). Our offline models are
# shallower than the paper's (Gemma 3 270M has 18 layers, SmolLM2-135M has 30, GPT2-XL has 48), so
# 5 layers is a larger share of the depth here.
#
# **The random control** isolates as many random non-label words as there are demonstrations, drawn
# as in the [authors' code](https://github.com/lancopku/label-words-are-anchors): afresh for every input and in every isolated layer, among the positions
# before the one preceding $q$. We never draw a token of a label word, and never position 0, whose row
# has nothing earlier to block (`helpers.experiments.isolation.authors_positions`). Because every input
# has its own isolated positions, this control runs each input's full prompt, many times the cost of a
# label condition. It runs on the profile's first `n_random_control` inputs of each task and seed (all
# 64 in the default profile, as in the paper), paired with the same inputs of the label conditions.
#
# Under `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs: the numbers test
# that the code runs; they are not evidence.

# %%
import warnings

import pandas as pd
import torch
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.prompts import make_icl_set
from helpers.core.tasks import LabelWordWarning, get_task, label_token_ids
from helpers.exercises.isolation import check_block_label_rows, check_isolated_label_logits
from helpers.experiments.isolation import label_token_share, layer_range, run_isolation
from helpers.protocols import isolation as iso
from helpers.study import notebook, plots
from helpers.study.claims import report_claims, show_reading
from helpers.study.profiles import current_model_name

profile = notebook.start()
model = load_model(current_model_name())
sizes = iso.isolation_sizes(profile)  # seeds, inputs, k, the sweep over k and the random control's inputs
k = sizes.k_main
print(profile.name, current_model_name(), sizes)

# %% [markdown]
# ## The mechanism by hand
#
# Two exercises, in order (the [exercise version](../exercises/02_shallow_isolation.ipynb) leaves them to you).
#
# **Exercise 2.1 · blocking label rows** · difficulty ★☆☆ · importance ★★★ · about 10 min
#
# A hook on `blocks.{l}.attn.hook_attn_scores` receives the attention scores `[batch, head, query, key]`
# after the causal mask and before the softmax. Row $i$ of the last two axes holds what position $i$ reads.
# Write the edit a hook makes: for every label position $p$, the scores from row $p$ to each earlier key
# become $-\infty$, in every batch entry and head, and nothing else changes. After the softmax, that row's
# weight then sits on $p$ alone.
#
# <details><summary>Hint</summary>
#
# One slice per label position: its row, and the keys before it. Leave the diagonal alone: a row of all
# $-\infty$ has no softmax, and TransformerLens turns the NaN it gives into zeros, so that label word would
# read nothing at all. No error: finite, wrong logits.
# </details>

# %% tags=["solution"]
def block_label_rows(scores: torch.Tensor, label_pos: list[int]) -> torch.Tensor:
    """``scores`` (``[batch, head, query, key]``, before the softmax) with every score from a label position
    ``p`` in ``label_pos`` to an earlier key ``j < p`` set to ``-inf``; every other score unchanged. May edit
    ``scores`` in place; returns it."""
    for p in label_pos:
        scores[:, :, p, :p] = float("-inf")
    return scores


# %%
check_block_label_rows(block_label_rows)

# %% [markdown]
# **Exercise 2.2 · isolating the label words in chosen layers** · difficulty ★★☆ · importance ★★★ ·
# about 15 min
#
# Now run the model on one prompt with your edit as a hook in each layer of `layers`, and return the logits
# at the query position, restricted to the label words.
#
# <details><summary>Hint</summary>
#
# `model.run_with_hooks(tokens, fwd_hooks=[(hook name, function), ...])` takes a batch of token ids and
# returns the logits `[batch, seq, vocab]`; a hook function gets `(tensor, hook)` and returns the tensor.
# The prompt knows its query position and its label positions.
# </details>

# %% tags=["solution"]
from helpers.core.backend import Model  # HookedTransformer (TransformerLens 3.9) or TransformerBridge (4.x)
from helpers.core.prompts import Prompt


def isolated_label_logits(model: Model, prompt: Prompt, label_ids: list[int],
                          layers: list[int]) -> torch.Tensor:
    """The logits at ``prompt.q`` restricted to ``label_ids`` (``[n_labels]``), with the label words isolated
    in ``layers``: each of those layers' ``hook_attn_scores`` goes through :func:`block_label_rows` with
    ``prompt.label_pos``. Other layers are untouched."""
    hooks = [(f"blocks.{l}.attn.hook_attn_scores", lambda scores, hook: block_label_rows(scores, prompt.label_pos))
             for l in layers]
    logits = model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)
    return logits[0, prompt.q, label_ids]


# %% [markdown]
# First the check on tiny random models (learned positions, rotary, grouped-query attention), then the
# function on one real prompt against the helper the rest of the notebook uses (which runs the isolated
# demonstrations once as a shared prefix), and how the prediction moves.

# %%
check_isolated_label_logits(isolated_label_logits)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    one = make_icl_set(model, profile.tasks[0], seed=sizes.seeds[0], n_test=1)
prompt, lids = one.prompts[0], one.label_ids
with torch.no_grad():
    moves = {"unmodified": isolated_label_logits(model, prompt, lids, []).float().cpu()}  # the helpers' device
    for where in ("first", "last"):
        mine = isolated_label_logits(model, prompt, lids, layer_range(model, where, k)).float().cpu()
        torch.testing.assert_close(mine, run_isolation(model, [prompt], lids, "label", where, k).label_logits[0],
                                   rtol=1e-4, atol=1e-4)
        moves[f"label words isolated, {where} {k} layers"] = mine
plots.show_isolation_by_hand(get_task(profile.tasks[0]), prompt, moves)

# %% [markdown]
# The table gives the probabilities over the label words on this one prompt, without isolation and with
# the label words isolated in the first or the last 5 layers. On a single prompt the move can be small,
# and whether the predicted label flips depends on how close the unmodified prediction was: one prompt is
# an anecdote. The rest of the notebook counts, over many inputs, how often the predicted label changes.
#
# ## At scale: every condition, task and seed
#
# Each (task, seed) runs the unmodified model once, then the four conditions (label or random
# words, first or last $k$ layers) for $k = 5$, the random ones on the profile's first
# `n_random_control` inputs (all of them in the default profile). The first seed also runs the sweep
# over $k$. Results are cached on disk.
#
# The cell shows how many inputs each condition ran on, the label and word loyalty of the four conditions at
# $k = 5$ (bars with 95% intervals), the label loyalty (%) per task, then the sweep.
#
# **Sweep over the number of isolated layers.** This uses the sweep seed(s) only; $k = 5$ is included for every
# seed. The random control runs on its first inputs at every $k$.

# %%
runs = iso.isolation_runs(model, profile.tasks, sizes, profile=profile.name)
df = iso.loyalty_frame(runs).assign(task=lambda d: d["task"].map(lambda t: get_task(t).display))
loyalty, drop = iso.isolation_intervals(df, k)  # 95% intervals: seeds, then inputs within each (task, seed)
print(f"Random control on the first {sizes.random_n} inputs of each task and seed; inputs per (task, seed):")
display(plots.isolation_inputs_table(df, k))
plots.loyalty_bars(df, k=k, conditions=[("label", "first"), ("label", "last"), ("random", "first"), ("random", "last")],
                   bars=("label_loyalty", "word_loyalty"), y="loyalty (%)", intervals=loyalty,
                   title=f"Isolation in the first / last {k} layers, {current_model_name()}", save_as="02_isolation_loyalty")
display(plots.label_loyalty_table(df, k))  # label loyalty (%) per condition and task
sweep_inputs = f"the first {sizes.sweep_n} inputs" if sizes.sweep_n else "all inputs"
plots.loyalty_sweep(df[df.seed.isin(sizes.sweep_seeds)], x="isolated layers", y="loyalty (%)",
                    panels=("label_loyalty", "word_loyalty"), save_as="02_isolation_sweep",
                    title=f"Loyalty vs isolated layers (seed(s) {list(sizes.sweep_seeds)}; k != {k} on {sweep_inputs})")

# %% [markdown]
# ### Table 5: top-5 tokens at $q$ with and without first-layers isolation (AGNews)
#
# The paper reports that, after the label words are isolated in the first 5 layers, the top
# tokens become generic ("\n", "The", ...) and no longer the label words. Below are the first
# inputs of the first seed, and the share of top-5 tokens that are label-word tokens.

# %%
t5_task = "agnews" if "agnews" in profile.tasks else profile.tasks[0]
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LabelWordWarning)
    t5_lids = label_token_ids(model.tokenizer, t5_task)
share = {c: float(pd.Series([label_token_share(runs[(t5_task, s)][key], t5_lids) for s in sizes.seeds]).mean())
         for c, key in [("without isolation", "base"), (f"label words first {k}", ("label", "first", k)),
                        (f"label words last {k}", ("label", "last", k))]}
# paper Table 5: a row per input (first seed's first 4), its top-5 tokens without isolation and with the label words
# isolated in the first k layers; then the share of label words among the top-5 per condition (mean over seeds)
plots.show_top_tokens(model, runs[(t5_task, sizes.seeds[0])], k, share, get_task(t5_task).display)

# %% [markdown]
# ## Paper vs ours
#
# The paper gives Fig. 4 as bars. Its claims become checks fixed before the run
# (`helpers.protocols.isolation.isolation_verdict`, one claim per check in `isolation_claims`), on mean
# label loyalty over tasks and seeds at $k = 5$ with 95% intervals that resample seeds and, within each
# seed, the test inputs (`helpers.study.stats`):
# 1. label words isolated in the first layers hurt most: for each of the three other conditions,
#    the interval of its loyalty minus label-first's (paired on the same inputs: for the random
#    control, its first inputs) lies above zero;
# 2. label words isolated in the last layers barely matter: the interval of their loyalty lies at
#    or above 80%;
# 3. random words barely matter: both intervals (first and last) lie at or above 80%.
#
# Each claim "replicates" when its check holds, "does not replicate" when its interval lies entirely on
# the wrong side (a paired drop below zero; a loyalty interval below 80%), and is "inconclusive"
# otherwise. The overall verdict (in the metrics) is "replicates" if all three hold, "partly" if check 1
# holds but not all, "does not replicate" if some paired drop lies below zero, "inconclusive" otherwise.

# %%
verdict, _ = iso.isolation_verdict({(c, w): iv for (c, w, m), iv in loyalty.items() if m == "label_loyal"}, drop)
word_pct = {f"{c}-{w}": str(iv.scaled(100)) for (c, w, m), iv in loyalty.items() if m == "word_loyal"}
claims = iso.isolation_claims(loyalty, drop, k, context=f"{current_model_name()}, {len(sizes.seeds)} seed(s)")
_ = report_claims("02_shallow_isolation", claims, metrics=dict(verdict=verdict, word_loyalty_pct=word_pct, table5=share))

# %% [markdown]
# ## Questions for discussion
#
# 1. Why set the score to $-\infty$ *before* the softmax, rather than zeroing the pattern after it?
#
#    <details><summary>Answer</summary>
#
#    Zeroing pattern entries leaves a row that no longer sums to 1: the label position would read less of
#    *everything*, a change of scale as well as of content. With $-\infty$ before the softmax the row
#    renormalises onto what is left (here only the diagonal), so the label word still gets a unit of
#    attention, just only from itself. That isolates "what the label word reads" without also shrinking
#    its attention output.
#    </details>
#
# 2. Isolation in the first layers changes the label words' residual stream in *all* later layers. Is the
#    first-versus-last contrast then a fair comparison?
#
#    <details><summary>Answer</summary>
#
#    That asymmetry is the point of the test, not a flaw: if the label words gather their demonstration's
#    information early and later layers read it from them, blocking early starves every later reader,
#    while blocking late comes after the gathering. The random control is what makes it fair: random
#    words isolated in the same first layers also change every later layer, so the label-first drop
#    beyond random-first is what is specific to the label words.
#    </details>
#
# 3. Word loyalty drops far more than label loyalty under first-layer isolation. Why can the predicted
#    label survive when the top-5 tokens do not?
#
#    <details><summary>Answer</summary>
#
#    Label loyalty compares only the argmax among the label words; word loyalty compares the top 5 of
#    the whole vocabulary. Isolation can push generic tokens (a newline, "The") above every label word,
#    which destroys word loyalty, while the *order* among the label words, driven by the query and the
#    model's prior, stays the same. The Table 5 share of label-word tokens in the top 5 shows this
#    directly.
#    </details>
#
# 4. A profile can run the random control on fewer inputs than the label conditions (`random_n`: the
#    smoke profile does, and the default did before it ran the paper's full control, 16 of 64). What does
#    that do to the verdict?
#
#    <details><summary>Answer</summary>
#
#    The contrasts with the random control are paired on its inputs only, so with a quarter of the
#    inputs their intervals are about twice as wide as the label-only contrasts. A check that needs
#    "random-first minus label-first above zero" can then be inconclusive for lack of inputs rather
#    than because the effect is absent.
#    </details>
#
# ## Reading: what this shows on a 135M-270M model, and what it cannot
#
# The paper's Fig. 4 pattern is one condition low and three high: isolating the label words in the first layers
# changes the prediction most, while the same isolation in the last layers, or isolating as many random words,
# barely matters. The four claims below are those four bars, with their verdicts from this run.

# %%
_ = show_reading("02_shallow_isolation")

# %% [markdown]
# Word loyalty and the label-word share of the top 5 (the tables above) move more than label loyalty does: the
# isolation changes *what* the model would say far more than which label it picks.
#
# What the design cannot establish: 5 layers are 28% of Gemma's depth and 17% of SmolLM2's against 10% of
# GPT2-XL's, so "first 5" is not the same intervention; the random control runs on its own inputs and its
# contrasts are paired on those only; TweetEval-emotion stands in for EmoC; one demonstration per class and one
# prompt format; two small models. Loyalty says the label words *matter* when isolated early; it does not say
# what information they carry (notebooks 03-05 probe that).
