"""Notebook 00: prompts with their anchor positions, attention views, accuracy bars.

``plot_*`` build a figure and return it, ``*_view`` return a circuitsvis view, ``*_table`` / ``*_lines`` build what
is shown; ``show_*`` show one result of a notebook (its tables, printed lines and figures, in the notebook's order)
and save every figure under the name the results folder and the README use.
"""

from __future__ import annotations

import html
import re
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import HTML, display

from helpers.core.tasks import get_task

from .figures import show_figure

__all__ = ["token_strings", "view_token_strings", "anchor_html", "anchor_tokens_view", "attention_view", "plot_accuracy_bars",
           "plot_interval_bars", "integer_ticks", "OfflineView", "offline_view", "close_view_divs",
           # notebook 00's shown results
           "anchor_prompt_heading", "show_anchor_prompts", "label_rank_lines", "label_rank_table",
           "show_label_ranks", "vanilla_interval_table", "accuracy_bars"]

_COLORS = {"label": "#f4a261", "format": "#a8dadc", "query": "#e9c46a", "q": "#e76f51", "bos": "#cccccc"}


def token_strings(model, prompt) -> list[str]:
    """Each token of ``prompt`` as text to show; special tokens (BOS, ...) as ``‹bos›`` rather than ``<bos>``.

    Views that insert token strings as HTML (circuitsvis does) would read ``<bos>`` as an unknown tag and show
    nothing: the first token of every BOS prompt would vanish.
    """
    special = set(getattr(model.tokenizer, "all_special_ids", None) or ())
    out = []
    for t in prompt.tokens:
        s = model.tokenizer.decode([int(t)])
        out.append(_special_shown(s) if int(t) in special else s)
    return out


def _special_shown(s: str) -> str:
    return s.replace("<", "\u2039").replace(">", "\u203a")


# circuitsvis sets each token as the HTML of its box (``dangerouslySetInnerHTML``), and as plain text in tooltips
# and chart axes: characters HTML reads as markup become look-alikes that show the same in both, and a newline
# token gets a visible mark (as in :func:`anchor_html`) instead of an empty box.
_VIEW_CHARS = str.maketrans({"<": "\u2039", ">": "\u203a", "&": "\uff06", "\n": "\u21b5\n"})


# circuitsvis writes its mount point as ``<div id="circuits-vis-..." style="..."/>``: HTML has no self-closing
# div, so a browser leaves it open and whatever follows (the next cell of a rendered page) nests inside the view.
_SELF_CLOSED_VIEW = re.compile(r'(<div id="circuits-vis-[^"]*"[^>]*?)\s*/>')


def close_view_divs(html_src: str) -> str:
    """``html_src`` with every circuitsvis mount point ``<div id="circuits-vis-..." .../>`` written as
    ``<div ...></div>`` (idempotent; other markup untouched)."""
    return _SELF_CLOSED_VIEW.sub(r"\1></div>", html_src)


class OfflineView:
    """A circuitsvis view that always carries its own JavaScript bundle.

    circuitsvis's ``RenderedHTML`` decides when it is displayed, by trying to reach google.com, whether to inline
    its bundle or import it from a CDN: a notebook executed with a network then shows nothing offline (a rendered
    page, a lecture room without Wi-Fi), and the check itself costs a second without one. This shows the inline
    bundle every time, with the mount point closed (:func:`close_view_divs`). ``str(view)`` is the same HTML.
    """

    def __init__(self, rendered):
        self.html = close_view_divs(rendered.local_src)

    def _repr_html_(self) -> str:
        return self.html

    def __html__(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def offline_view(rendered) -> OfflineView:
    """:class:`OfflineView` of a circuitsvis ``RenderedHTML`` (what ``circuitsvis.*`` functions return)."""
    return OfflineView(rendered)


def view_token_strings(model, prompt) -> list[str]:
    """:func:`token_strings` as circuitsvis views show them literally (tokens of ``*_view`` functions)."""
    return [s.translate(_VIEW_CHARS) for s in token_strings(model, prompt)]


def anchor_html(model, prompt) -> str:
    """HTML of a prompt with label words (p_k), formatting tokens and q highlighted."""
    toks = token_strings(model, prompt)
    label = {p for a, b in prompt.label_spans for p in range(a, b)}
    fmt = set(prompt.format_pos)
    out = []
    for i, t in enumerate(toks):
        kind = "q" if i == prompt.q else "label" if i in label else "format" if i in fmt else (
            "bos" if prompt.bos and i == 0 else "query" if prompt.query_span[0] <= i < prompt.query_span[1] else None)
        s = html.escape(t).replace("\n", "\u21b5<br>")
        if kind:
            title = f"pos {i}: {kind}" + (" (p_k)" if i in prompt.label_pos else "")
            s = f'<span title="{title}" style="background:{_COLORS[kind]};border-radius:3px">{s}</span>'
        out.append(s)
    legend = " ".join(f'<span style="background:{c};padding:0 4px">{k}</span>' for k, c in _COLORS.items())
    return f'<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">{"".join(out)}</div><div>{legend}</div>'


def anchor_tokens_view(model, prompt):
    """circuitsvis token view: 1 on label positions, 0.5 on formatting, 0.25 at q."""
    import circuitsvis as cv  # lazy: only when a view is drawn

    v = np.zeros(len(prompt))
    v[list(prompt.format_pos)] = 0.5
    v[prompt.label_pos] = 1.0
    v[prompt.q] = 0.75
    return offline_view(cv.tokens.colored_tokens(tokens=view_token_strings(model, prompt), values=v.tolist(),
                                                 min_value=0, max_value=1))


def attention_view(model, prompt, layer: int, pattern=None):
    """Interactive circuitsvis view of one layer's attention (all heads) on ``prompt``."""
    import circuitsvis as cv  # lazy: only when a view is drawn
    import torch

    if pattern is None:
        with torch.inference_mode():
            _, cache = model.run_with_cache(prompt.tokens[None].to(model.cfg.device),
                                            names_filter=f"blocks.{layer}.attn.hook_pattern")
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]
    return offline_view(cv.attention.attention_patterns(tokens=view_token_strings(model, prompt),
                                                        attention=pattern.cpu()))


def integer_ticks(*axes) -> None:
    """Whole-number ticks only (``MaxNLocator(integer=True)``) on matplotlib axes (``ax.xaxis``, ...) that count
    layers, layer indices or epochs: matplotlib's default puts ticks at 2.5, 7.5, ... on a range of 18 layers."""
    from matplotlib.ticker import MaxNLocator  # lazy: only when a figure is drawn

    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def _bar_x(xs: list, hues: list, x, hue, width: float = 0.8) -> float:
    """Centre of bar (x, hue) in a seaborn grouped bar chart (x order ``xs``, hue order ``hues``)."""
    return xs.index(x) + (hues.index(hue) - (len(hues) - 1) / 2) * width / len(hues)


def plot_interval_bars(ax, xs: list, hues: list, intervals: dict) -> None:
    """Error bars of ``intervals[(x, hue)]`` (:class:`helpers.study.stats.Interval`) on a seaborn grouped bar chart
    whose x order is ``xs`` and hue order ``hues``."""
    for (x, hue), iv in intervals.items():
        if x in xs and hue in hues:
            pos = _bar_x(xs, hues, x, hue)
            ax.errorbar(pos, iv.estimate, yerr=[[iv.estimate - iv.low], [iv.high - iv.estimate]], color="black",
                        lw=1.2, capsize=3)
    ax.plot([], [], color="black", lw=1.2, label="95% CI (seeds and inputs)")


def plot_accuracy_bars(df: pd.DataFrame, paper: dict | None = None, ax=None, intervals: dict | None = None,
                  chance: dict | None = None, x: str = "task", y: str = "accuracy", hue: str = "setting"):
    """Bar chart of accuracy per task and setting; ``df`` has task, setting, accuracy (one row per seed): a group
    of bars per value of column ``x``, a bar per value of ``hue``, their height column ``y`` (the axis label).

    ``paper`` maps (task, setting) -> the paper's GPT2-XL accuracy, drawn as markers.
    ``intervals`` maps (task, setting) -> :class:`helpers.study.stats.Interval`, drawn as the error bars
    (otherwise the bars show the std over seeds); ``chance`` maps task -> chance accuracy, drawn as a
    dashed line across that task's bars.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    sns.barplot(data=df, x=x, y=y, hue=hue, errorbar=None if intervals else "sd", ax=ax)
    settings = list(dict.fromkeys(df[hue]))
    tasks = list(dict.fromkeys(df[x]))
    if intervals:
        plot_interval_bars(ax, tasks, settings, intervals)
    if chance:
        for task, c in chance.items():
            if task in tasks:
                i = tasks.index(task)
                ax.hlines(c, i - 0.45, i + 0.45, colors="grey", linestyles="--", lw=1)
        ax.plot([], [], color="grey", ls="--", lw=1, label="chance")
    if paper:
        for (task, setting), val in paper.items():
            if task in tasks and setting in settings and val is not None:
                ax.plot(_bar_x(tasks, settings, task, setting), val, marker="D", color="black", ms=6, ls="none")
        ax.plot([], [], marker="D", color="black", ls="none", label="paper (GPT2-XL)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylabel(y)
    ax.set_xticks(ax.get_xticks(), [textwrap.fill(t.get_text(), 18) for t in ax.get_xticklabels()])
    return ax


# --- notebook 00's shown results -----------------------------------------------------------------------------------


def anchor_prompt_heading(display_name: str, prompt) -> str:
    """The heading shown above a prompt: ``<h4>SST-2: 40 tokens, p_k = [..], q = 39</h4>``."""
    return f"<h4>{display_name}: {len(prompt)} tokens, p_k = {prompt.label_pos}, q = {prompt.q}</h4>"


def show_anchor_prompts(model, prompts: dict) -> None:
    """Show each prompt of ``{task name: Prompt}`` as its heading (:func:`anchor_prompt_heading`, the task's
    display name) and its highlighted tokens (:func:`anchor_html`)."""
    for name, prompt in prompts.items():
        display(HTML(anchor_prompt_heading(get_task(name).display, prompt)))
        display(HTML(anchor_html(model, prompt)))


def label_rank_lines(model, task, prompt, label_logits, full_logits) -> tuple[str, str]:
    """The two lines printed around the label-word ranks: the prompt's anchor positions with their tokens, and the
    top-5 vocabulary tokens at q with the label-restricted prediction (argmax of ``label_logits``) and the gold."""
    def tok(i):
        return model.tokenizer.decode([int(prompt.tokens[i])])

    positions = (f"{task.display}: p_k = {[(i, tok(i)) for i in prompt.label_pos]}, q = {prompt.q} {tok(prompt.q)!r}, "
                 f"formatting tokens {[tok(i) for i in prompt.format_pos]}")
    top = [model.tokenizer.decode([i]) for i in full_logits.topk(5).indices.tolist()]
    prediction = (f"top-5 tokens at q: {top}; prediction {task.label_words[int(label_logits.argmax())]!r}, "
                  f"gold {task.label_words[prompt.gold]!r}")
    return positions, prediction


def label_rank_table(task, label_logits, rank) -> pd.DataFrame:
    """One row per label word: its logit at q (2 decimals) and its rank among all vocabulary tokens (0: top)."""
    return pd.DataFrame({"logit at q": label_logits.numpy().round(2), "rank in the vocabulary": rank.numpy()},
                        index=task.label_words)


def show_label_ranks(model, task, prompt, label_logits, full_logits, rank) -> None:
    """Print the prompt's positions, show :func:`label_rank_table`, print the top-5 tokens and the prediction
    (:func:`label_rank_lines`). ``label_logits`` ``[classes]`` and ``full_logits`` ``[d_vocab]`` are the logits
    at q (CPU), ``rank`` how many vocabulary tokens score above each label word."""
    positions, prediction = label_rank_lines(model, task, prompt, label_logits, full_logits)
    print(positions)
    display(label_rank_table(task, label_logits, rank))
    print(prediction)


def vanilla_interval_table(intervals: dict, chance: dict, paper_marks: dict) -> pd.DataFrame:
    """One row per (task, setting) of ``intervals`` (``{(task, setting): Interval}``): the accuracy with its 95%
    interval, chance (``{task: accuracy}``) and the paper's GPT2-XL accuracy (``{(task, setting): value}``;
    "not run" where the paper did not run the task)."""
    return pd.DataFrame([{"setting": st, "task": t, "accuracy [95% CI]": f"{iv:.3f}", "chance": round(chance[t], 3),
                          "paper GPT2-XL": paper_marks.get((t, st), "not run")} for (t, st), iv in intervals.items()])


def accuracy_bars(acc: pd.DataFrame, *, x: str, y: str, bars: str, intervals: dict, chance: dict, paper: dict,
                  title: str, save_as: str) -> None:
    """Show (and save as figure ``save_as``) the accuracy bars of :func:`plot_accuracy_bars`: a group per value of
    column ``x`` of ``acc``, a bar per value of column ``bars``, height ``y``, with the 95% ``intervals``, ``chance``
    (dashed) and the ``paper``'s marks (diamonds), titled ``title``."""
    fig, ax = plt.subplots(figsize=(10.5, 3.5))
    plot_accuracy_bars(acc, paper, ax=ax, intervals=intervals, chance=chance, x=x, y=y, hue=bars)
    ax.set_title(title)
    show_figure(fig, save_as)
