"""The exercises of notebooks 00 and 08: the label-restricted prediction by hand, checked against
:func:`helpers.experiments.setting.label_logits_reference`, and a prompt's text by hand, checked against
:func:`helpers.core.prompts.build_prompt`, on the tiny random models (:mod:`helpers.exercises.tiny`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.core.prompts import Demo, build_prompt
from helpers.core.tasks import Task, get_task, label_token_ids, task_from_spec
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, make_tiny_model
from helpers.experiments.setting import label_logits_reference

__all__ = ["check_label_logits", "check_render_prompt"]


_TINY_DEMOS = [Demo("a gripping, beautifully acted film", 1), Demo("dull and far too long", 0),
               Demo("the jokes never land", 0), Demo("a joy from start to finish", 1)]
_TINY_QUERY = Demo("warm, funny and wise", 1)


def _tiny_models():
    return {kind: make_tiny_model(kind, seed=0) for kind in TINY_KINDS}


@grader
def check_label_logits(fn: Callable) -> None:
    """Run ``fn(model, prompt, label_ids)`` on tiny random models of three architectures (learned positions,
    rotary, grouped-query attention) and two SST-2 prompts each, against :func:`label_logits_reference`.

    Raises an AssertionError that says what differs (and, when your logits are those of another position,
    which one); prints one line when every case matches.
    """
    for kind, model in _tiny_models().items():
        ids = label_token_ids(model.tokenizer, "sst2")
        for demos in (_TINY_DEMOS[:2], _TINY_DEMOS):
            p = build_prompt(model, "sst2", demos, _TINY_QUERY, label_ids=ids)
            ref = label_logits_reference(model, p, ids)
            with torch.no_grad():
                mine = fn(model, p, ids)
            where = f"{kind} model, {len(demos)} demonstrations ({len(p)} tokens, q = {p.q})"
            if not isinstance(mine, torch.Tensor) or tuple(mine.shape) != tuple(ref.shape):
                raise CheckFailed(f"{where}: expected a tensor of shape {tuple(ref.shape)} (one logit per class, "
                                     f"in class order), got {getattr(mine, 'shape', type(mine).__name__)}")
            mine = mine.detach().float().cpu()
            if not torch.allclose(mine, ref, atol=1e-4, rtol=1e-4):
                raise CheckFailed(f"{where}: your label logits {[round(x, 4) for x in mine.tolist()]} differ from "
                                  f"the reference {[round(x, 4) for x in ref.tolist()]}. "
                                  + _label_logits_mistake(model, p, ids, mine))
            if int(mine.argmax()) != int(ref.argmax()):
                raise CheckFailed(f"{where}: the predicted class differs from the reference's")
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches the reference on 3 tiny models "
          "(learned positions, rotary, grouped-query), 2 prompts each")


def _label_logits_mistake(model, p, ids: list[int], mine: torch.Tensor) -> str:
    """The likely cause of wrong label logits: a typical wrong version they equal, or what to check."""
    with torch.no_grad():
        full = model(p.tokens[None])[0].float().cpu()  # [pos, vocab]
    other = [i for i in range(len(p)) if i != p.q and torch.allclose(full[i, ids], mine, atol=1e-4, rtol=1e-4)]
    if other:
        return (f"They are the logits at position {other[0]}, not at q = {p.q} (prompt.q, the last token: the "
                "model's guess for the token after it).")
    at_q = full[p.q]
    found = likely_mistake(mine, [
        ("These are probabilities over the whole vocabulary (a softmax): return the logits themselves; the "
         "argmax is the same, but the experiments compare logits.", lambda: at_q.softmax(-1)[ids]),
        ("These are log-probabilities (log_softmax over the vocabulary): return the logits themselves.",
         lambda: at_q.log_softmax(-1)[ids]),
        ("These are a softmax over the label columns only: return the logits themselves.",
         lambda: at_q[ids].softmax(-1)),
        ("The classes are in another order: keep the columns label_ids in the order given (class c is column "
         "label_ids[c]).", lambda: at_q[list(reversed(ids))]),
        ("The prompt's first token is missing (BOS, where the model uses one): run prompt.tokens as they are, "
         "not a re-tokenised text.", lambda: model(p.tokens[None, 1:])[0, -1, ids]),
    ])
    return found or ("Check: one forward on prompt.tokens (BOS included), the logits at prompt.q, the columns "
                     "label_ids in class order.")


def _render_cases() -> list[Task]:
    return [get_task("sst2"),
            task_from_spec({"name": "check_reviews", "template": "Movie review: {text}\nSentiment: {label}",
                            "label_words": ["negative", "positive"], "separator": "\n\n"}, need_checksums=False),
            task_from_spec({"name": "check_verdict", "template": "Text: {text} | Verdict: {label}.",
                            "label_words": ["bad", "good"], "separator": "\n"}, need_checksums=False)]


def _render_mistake(task: Task, mine, want: str) -> str:
    """The likely cause of a wrong prompt text."""
    if not isinstance(mine, str):
        return f"Return the prompt's text as one string (got {type(mine).__name__})."
    before, between, lead, after = task.parts
    if mine.rstrip() == want.rstrip() and len(mine) > len(want):
        return ("Your text ends with extra whitespace: the space before a label word belongs to the label's token "
                "(' positive'), so the prompt ends right after the query's lead-in.")
    if task.separator and len(want.split(task.separator)) > 1 and task.separator not in mine:
        return f"The examples are not joined with the task's separator ({task.separator!r}): use task.separator."
    if after and mine == want.replace(after, ""):
        return f"The text after each demonstration's label ({after!r}, the template's end) is missing."
    return ("Build each demonstration as before + text + between + lead + label word + after (task.parts), the "
            "query as before + text + between, and join them with task.separator.")


@grader
def check_render_prompt(fn: Callable) -> None:
    """Run ``fn(task, demos, query_text)`` on three templates (SST-2's; a spec with a blank line between
    demonstrations; one with text after the label) against
    :func:`helpers.core.prompts.build_prompt`'s text, and compare the tokens of that text (BOS prepended
    when the model uses one) with build_prompt's on tiny models of three architectures.
    """
    models = _tiny_models()
    for task in _render_cases():
        for demos in (_TINY_DEMOS[:2], _TINY_DEMOS):
            mine = fn(task, demos, _TINY_QUERY.text)
            for kind, model in models.items():
                p = build_prompt(model, task, demos, _TINY_QUERY)
                where = f"template {task.full_template!r}, separator {task.separator!r}, {len(demos)} demonstrations"
                if mine != p.text:
                    n = next((i for i, (a, b) in enumerate(zip(mine, p.text)) if a != b), min(len(mine), len(p.text)))
                    raise CheckFailed(f"{where}: your text differs from build_prompt's at character {n}: "
                                      f"yours ...{mine[max(0, n - 20):n + 20]!r}, "
                                      f"build_prompt's ...{p.text[max(0, n - 20):n + 20]!r}. "
                                      + _render_mistake(task, mine, p.text))
                tok = model.tokenizer
                ids = [tok.bos_token_id] * p.bos + tok(mine, add_special_tokens=False)["input_ids"]
                if ids != p.tokens.tolist():
                    raise CheckFailed(f"{where}, {kind} model: the tokens of your text differ from build_prompt's")
    print(f"✓ {getattr(fn, '__name__', 'your function')} matches build_prompt on 3 templates and 3 tiny models")
