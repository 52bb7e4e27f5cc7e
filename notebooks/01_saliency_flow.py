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
# # 01 · Saliency: information flows through the label words
#
# **Learning objectives.** After this notebook you can
# - take the gradient of a loss with respect to every layer's attention pattern with TransformerLens hooks;
# - compute the paper's saliency matrix $I_l$ and read it as "how much does the loss depend on token $i$
#   reading from token $j$ in layer $l$";
# - turn one prompt's saliency matrices into the three flows $S_{wp}$, $S_{pq}$, $S_{ww}$ from its positions;
# - judge the paper's two-stage picture (text → label words early, label words → target late) on the
#   intervals of paired contrasts.
#
# ## The paper's claim
#
# [Label Words are Anchors, §2.1 and Fig. 3](https://arxiv.org/abs/2305.14160): label words act as anchors,
# and the information flow shows it in two stages:
# - in **shallow** layers, information flows from the demonstration text into the label words
#   ($S_{wp}$ is the largest flow);
# - in **deep** layers, the prediction position $q$ reads from the label words ($S_{pq}$ dominates);
# - both flows are larger than the flow between all other pairs of tokens ($S_{ww}$).
#
# **Method.** For every layer $l$ the saliency matrix is
# $I_l = \left|\sum_h A_{h,l} \odot \frac{\partial L}{\partial A_{h,l}}\right|$, where $A$ is the
# attention pattern (TransformerLens `hook_pattern`) and $L$ is the cross-entropy of the
# label-restricted logits at $q$ against the gold label. One forward and one backward pass give
# every layer. $S_{wp}$ is the mean of $I_l(p_k, j)$ over $j < p_k$ and all label positions $p_k$;
# $S_{pq}$ the mean of $I_l(q, p_k)$; $S_{ww}$ the mean over every other pair $j < i$. As in the paper,
# every input gets its **own** demonstrations (one per class, drawn with a per-input seed). We plot the
# three means per layer relative to their sum, then average over seeds. Every number comes with a 95%
# interval from a two-level bootstrap: the seeds are resampled, then the inputs within each (task, seed),
# and the whole curve is recomputed (`helpers.protocols.saliency.flow_intervals`). The three flows of
# an input are resampled together, so the differences between flows are paired.
#
# Under `ICL_PROFILE=smoke` (what `make test` runs) each cell sees a handful of inputs: the numbers test
# that the code runs; they are not evidence.

# %%
from IPython.display import display

from helpers.core.models import load_model
from helpers.core.tasks import get_task
from helpers.exercises.saliency import check_attention_patterns, check_pattern_saliency, check_saliency_flows
from helpers.protocols import saliency as sal
from helpers.study import notebook, plots
from helpers.study.claims import report_claims, show_reading
from helpers.study.profiles import current_model_name

profile = notebook.start()
model = load_model(current_model_name())
sizes = sal.saliency_sizes(profile)  # seeds, inputs per (task, seed), batch size
print(profile.name, current_model_name(), sizes)

# %% [markdown]
# ## The mechanism by hand
#
# Three exercises, in order (the [exercise version](../exercises/01_saliency_flow.ipynb) leaves them to you).
#
# **Exercise 1.1 · attention patterns from a cache** · difficulty ★☆☆ · importance ★★☆ · about 10 min
#
# TransformerLens names every intermediate activation: layer $l$'s attention pattern (after the softmax) is
# `blocks.{l}.attn.hook_pattern`, shaped `[batch, head, query, key]`. One run with a cache records them all.
# Return the patterns of every layer for one token sequence, stacked into `[layer, head, query, key]`.
#
# <details><summary>Hint</summary>
#
# `model.run_with_cache(tokens[None])` returns `(logits, cache)`; `cache["pattern", l]` is layer $l$'s
# pattern (the same as `cache[f"blocks.{l}.attn.hook_pattern"]`), with the batch axis first.
# </details>

# %% tags=["solution"]
import torch

from helpers.core.backend import Model  # HookedTransformer (TransformerLens 3.9) or TransformerBridge (4.x)


def attention_patterns(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """Every layer's attention pattern for one sequence ``tokens`` (``[seq]``): ``[layer, head, query, key]``."""
    _, cache = model.run_with_cache(tokens[None])
    return torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)])


# %%
check_attention_patterns(attention_patterns)

# %% [markdown]
# **Exercise 1.2 · the saliency matrices of one prompt** · difficulty ★★★ · importance ★★★ · about 25 min
#
# Now the same patterns with their gradient. Keep every layer's pattern during a forward, ask autograd to
# keep its gradient too, take the cross-entropy of the gold label word among the label words at $q$, run
# the backward pass, and combine each pattern with its gradient as the docstring says.
#
# <details><summary>Hint</summary>
#
# A hook on `hook_pattern` receives the pattern and may return nothing; the pattern is not a leaf of the
# graph, so autograd keeps its gradient only if asked to (`retain_grad`). Run the forward with
# `model.run_with_hooks` under `torch.enable_grad()`. After the backward pass, each kept pattern has a
# `.grad` of its shape; `model.zero_grad(set_to_none=True)` drops the parameters' gradients again.
# `einops.reduce` sums an axis away by name. On a GPU the logits are on the model's device: build the
# cross-entropy's target there too (`device=logits.device`).
# </details>

# %% tags=["solution"]
import einops
import torch.nn.functional as F

from helpers.core.prompts import Prompt


def pattern_saliency(model: Model, prompt: Prompt, label_ids: list[int]) -> torch.Tensor:
    """The saliency matrices of one prompt: ``I[l, i, j] = |sum_h A[l, h, i, j] * dL/dA[l, h, i, j]|``.

    ``A`` is layer l's attention pattern (``blocks.{l}.attn.hook_pattern``) on ``prompt.tokens``; ``L`` the
    cross-entropy of the logits at ``prompt.q`` restricted to ``label_ids`` (one per class), against the
    gold class ``prompt.gold``. Sum over heads first, then take the absolute value.
    Returns a ``[layer, seq, seq]`` tensor (no gradient attached).
    """
    patterns = []

    def keep(pattern, hook):
        pattern.retain_grad()  # keep dL/dA on this non-leaf tensor after backward()
        patterns.append(pattern)

    hooks = [(f"blocks.{l}.attn.hook_pattern", keep) for l in range(model.cfg.n_layers)]
    with torch.enable_grad():
        logits = model.run_with_hooks(prompt.tokens[None], fwd_hooks=hooks)[0, prompt.q, label_ids]
        F.cross_entropy(logits[None], torch.tensor([prompt.gold], device=logits.device)).backward()
    model.zero_grad(set_to_none=True)
    A = torch.stack([p[0] for p in patterns]).detach()  # [layer, head, i, j]
    grad = torch.stack([p.grad[0] for p in patterns])
    return einops.reduce(A * grad, "layer head i j -> layer i j", "sum").abs()


# %%
check_pattern_saliency(pattern_saliency)

# %% [markdown]
# **Exercise 1.3 · three flows from one saliency matrix** · difficulty ★★☆ · importance ★★★ · about 15 min
#
# Average $I_l$ over the three sets of position pairs of the prompt, as the docstring defines them.
#
# <details><summary>Hint</summary>
#
# A boolean mask `m` of shape `[seq, seq]` selects pairs: `I[:, m]` is `[layer, pairs]`. A lower triangle
# without its diagonal marks every $j < i$.
# </details>

# %% tags=["solution"]
def saliency_flows(I: torch.Tensor, prompt: Prompt) -> torch.Tensor:
    """``[layer, 3]``: per layer the means of ``I[l, i, j]`` over three sets of pairs (row i reads column j):

    - S_wp: i a label position ``p_k`` (``prompt.label_pos``), every j < i;
    - S_pq: i = ``prompt.q``, j a label position;
    - S_ww: every other pair with j < i (the diagonal is never counted).
    """
    n = I.shape[-1]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # (i, j) with j < i
    wp = torch.zeros(n, n, dtype=torch.bool)
    wp[prompt.label_pos] = earlier[prompt.label_pos]
    pq = torch.zeros(n, n, dtype=torch.bool)
    pq[prompt.q, prompt.label_pos] = True
    ww = earlier & ~wp & ~pq
    return torch.stack([I[:, m].mean(-1) for m in (wp, pq, ww)], dim=-1)


# %% [markdown]
# The check of the flows on tiny random models (learned positions, rotary, grouped-query attention), then
# your functions on one real prompt, against the helpers the rest of the notebook uses.

# %%
from helpers.experiments.saliency import saliency_flow, saliency_matrices, saliency_prompts

check_saliency_flows(saliency_flows)

prompts, lids = saliency_prompts(model, profile.tasks[0], seed=sizes.seeds[0], n=1)
prompt = prompts[0]
I = pattern_saliency(model, prompt, lids).float().cpu()  # on the CPU, as the helpers return their results
flows = saliency_flows(I, prompt)
torch.testing.assert_close(I, saliency_matrices(model, prompts, lids)[0], rtol=1e-3, atol=1e-5 * float(I.max()))
torch.testing.assert_close(flows, saliency_flow(model, prompts, lids)[0], rtol=1e-3, atol=1e-6)
rel = flows / flows.sum(-1, keepdim=True)
plots.show_saliency_by_hand(get_task(profile.tasks[0]).display, prompt, rel)

# %% [markdown]
# On this one prompt, the relative flows above already show the pattern the paper describes if $S_{wp}$
# leads in the first rows and $S_{pq}$ in the last. One caveat is visible in the construction: in the
# last layer only row $q$ reaches the loss, so $I_{L-1}$ is zero in every other row and $S_{wp}$ is 0
# there by construction. Below, each panel is one layer's $I_l$ of this prompt divided by its maximum;
# hover a token to see which earlier tokens feed it. In a shallow layer, expect the label words to draw
# from their own demonstration; in a deep layer, $q$ (the last colon) to draw from the label words.

# %%
plots.saliency_view(model, prompt, I, [1, model.cfg.n_layers - 2])  # a shallow and a deep layer

# %% [markdown]
# ## At scale: every task and seed
#
# Each (task, seed) run is cached on disk, so a second run of the notebook only plots. The line is
# the seed-averaged curve, the band its 95% interval (seeds and inputs resampled).

# %%
runs = sal.saliency_runs(model, profile.tasks, sizes, profile=profile.name)
ivs = sal.flow_intervals(runs)  # {(task, ...): Interval}; task "mean over tasks": the curve averaged over tasks
display_name = {t: get_task(t).display for t in profile.tasks}
_ = plots.flows_by_layer(sal.flow_frame(runs), intervals=ivs, panels=display_name, x="layer", y="relative size",
                         curves=("S_wp", "S_pq", "S_ww"), save_as="01_saliency_flow",
                         title=f"Relative saliency flows per layer, {current_model_name()} "
                               f"(mean over {len(sizes.seeds)} seed(s), 95% CI)")

# %% [markdown]
# ### The flows of one prompt per task, drawn as the paper's Fig. 1
#
# The curves above average thousands of token pairs into three numbers per layer. The paper's Fig. 1 draws
# the flows themselves, and so does the view below, for one prompt per task (the first input of the first
# seed): tokens along the bottom, one row per layer boundary with layer 0 at the bottom, and a line from token
# $j$ in row $l$ to token $i$ in row $l + 1$ for each large $I_l(i, j)$. A line's width and opacity grow with
# $I_l(i, j)$ divided by the largest edge of its layer, so shallow and deep layers can be compared by eye. Blue
# lines flow from earlier tokens into a label word ($S_{wp}$'s pairs), red ones from a label word into $q$
# ($S_{pq}$'s), grey ones are every other pair ($S_{ww}$'s). Each demonstration is a band named after its label
# word; the label words $p_k$ are orange, $q$ red. The sliders keep each layer's $k$ largest edges, or only
# those above a share of their layer's saliency, and choose a range of layers; hovering a token keeps only the
# flows into it and out of it (an edge's tooltip gives its $I_l(i, j)$ and share).
#
# What to look for: if the label words are anchors, blue lines gather into the label words in the shallow rows
# and red lines leave them for $q$ in the deep rows. The top row can only have lines into $q$ (question 2
# below). One prompt illustrates; the curves above and the checks below are the evidence. A notebook opened
# without being trusted shows a line of text instead of the view (trust it, or run the cell again); the same
# graph is saved as the figure `01_flow_graph_<task>.png` in the results folder.

# %%
from helpers.experiments.saliency_graph import flow_graph

for t in profile.tasks:
    (first, *_), ids = saliency_prompts(model, t, seed=sizes.seeds[0], n=1)
    plots.show_flow_view(model, flow_graph(model, first, ids), f"01_flow_graph_{t}",
                         title=f"{display_name[t]}: the saliency flows of one prompt on {current_model_name()}")

# %% [markdown]
# ## Paper vs ours
#
# The paper reports curves, not numbers. Its claims are stated as checks that were fixed before
# any run, and each is judged on the 95% intervals of paired contrasts between the flows of each
# task's seed-averaged relative curve (`helpers.protocols.saliency.saliency_verdict`):
# 1. shallow layers (the first third): the intervals of $S_{wp} - S_{pq}$ and of $S_{wp} - S_{ww}$,
#    averaged over those layers, both lie above zero;
# 2. deep layers (the last half): the intervals of $S_{pq} - S_{wp}$ and of $S_{pq} - S_{ww}$ both
#    lie above zero;
# 3. all layers: the intervals of $S_{wp} - S_{ww}$ and of $S_{pq} - S_{ww}$ both lie above zero.
#
# A check "holds" on a task when both of its intervals lie above zero, "fails" when one lies below
# zero, and is "inconclusive" otherwise. Each claim's verdict is "replicates" if its check holds on every
# task, "partly" if on at least half, "does not replicate" if it fails on more than half, and
# "inconclusive" otherwise. The table shows the curve averaged over tasks; the first layer where
# $S_{pq}$ exceeds $S_{wp}$ is reported with its interval but is not a check (the paper shows it as a
# curve only).

# %%
tasks = list(profile.tasks)
display(sal.flow_interval_table(ivs, tasks, labels=display_name).set_index("task").T)
verdict, _ = sal.saliency_verdict(ivs, tasks)
claims = sal.saliency_claims(ivs, tasks, context=f"{current_model_name()}, {len(sizes.seeds)} seed(s)")
_ = report_claims("01_saliency_flow", claims, metrics={"verdict": verdict, "n": sizes.n}, digits=3)

# %% [markdown]
# ## Questions for discussion
#
# 1. Why does the loss use the logits restricted to the label words, not the full vocabulary?
#
#    <details><summary>Answer</summary>
#
#    The question is which tokens carry the *choice between the classes*. The full-vocabulary
#    cross-entropy would also reward or punish mass on tokens that are no label at all (a newline,
#    "The"), so its gradient would partly measure "produce a label word at all" rather than "produce
#    the right one". The restricted softmax is what the prediction of the ICL setting is (argmax over the
#    label words), so its gradient is the one the claim is about.
#    </details>
#
# 2. In the last layer, $S_{wp}$ is exactly 0. Is that a finding?
#
#    <details><summary>Answer</summary>
#
#    No, it is a consequence of the design: the loss reads only the residual stream at $q$, and in the
#    last layer only row $q$ of the attention pattern writes into it, so every other row has zero
#    gradient. More generally, rows other than $q$ can only reach the loss through later layers, so the
#    deeper the layer the fewer paths they have. Part of "$S_{pq}$ dominates in deep layers" is this
#    geometry; the interesting part is the shallow half, where $S_{wp}$ wins although $S_{pq}$ has the
#    same direct path to the loss.
#    </details>
#
# 3. Why are the three flows divided by their sum per layer before averaging the checks?
#
#    <details><summary>Answer</summary>
#
#    The raw magnitudes of $I_l$ differ a lot between layers (and between models), so a mean over layers
#    would be dominated by a few layers with large gradients. Normalising per layer asks "which flow
#    dominates *this* layer", which is the paper's plotted quantity. The cost: relative sizes say nothing
#    about whether a layer matters at all.
#    </details>
#
# 4. $S_{ww}$ averages over many more pairs than $S_{wp}$ and $S_{pq}$. Does that bias the comparison?
#
#    <details><summary>Answer</summary>
#
#    Each flow is a *mean* over its pairs, not a sum, so the count does not inflate $S_{ww}$. But a mean
#    over thousands of mostly irrelevant pairs (attention from one text token to another) is naturally
#    small, whereas $S_{pq}$ averages over the handful of pairs that lead straight to $q$. "Above
#    $S_{ww}$" is therefore a weak bar; the shallow $S_{wp}$ versus $S_{pq}$ contrast is the informative one.
#    </details>
#
# ## Reading: what this shows on a 135M-270M model, and what it cannot
#
# The paper shows its two stages as curves for GPT2-XL and GPT-J: in shallow layers the text-to-label flow
# $S_{wp}$ dominates, in deep layers the label-to-target flow $S_{pq}$. Each claim below is checked per task on
# the relative flows, and its verdict counts the tasks on which the check holds (the note gives the tally and
# the second contrast). The numbers and verdicts are this run's.

# %%
_ = show_reading("01_saliency_flow", digits=3)

# %% [markdown]
# The crossing layer (the table above) says where the model switches stage; it differs between models and
# tasks, so "shallow" is not the same share of depth everywhere.
#
# What the design cannot establish: saliency is a first-order, gradient-times-activation attribution; it
# says where the loss is locally sensitive, not that the information actually travels that way (notebook
# 02 intervenes to test that). The deep-layer dominance of $S_{pq}$ is partly structural (question 2).
# These are two small models, one prompt format with one demonstration per class, TweetEval-emotion
# standing in for EmoC, and a few dozen inputs per task and seed (a backward pass per input); the intervals
# cover seeds and inputs, not models or prompt formats.
