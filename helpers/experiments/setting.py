"""The in-context-learning setting (notebook 00; arXiv 2305.14160 §2 and Table 1's vanilla rows): vanilla ICL
accuracy for every (task, seed), cached on disk; the label-restricted prediction by hand and its check; the
claims of notebooks 00 and 08 (08 runs notebooks 00-03 on a user's own task)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from jaxtyping import Float
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from helpers.core.checks import CheckFailed, grader, likely_mistake
from helpers.core.predict import predict, shots_for
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import Demo, Prompt, build_prompt, make_icl_set
from helpers.core.store import cached, pins_weights
from helpers.core.tasks import LabelWordWarning, Task, get_task, label_token_ids, run_args, task_from_spec
from helpers.study.claims import Claim, claim
from helpers.study.paper import FIG5_PEAK_AUCROC
from helpers.study.stats import Interval, bootstrap_means, cells_from_frame, interval_verdict, paired_differences

__all__ = ["vanilla_accuracy", "shots_for", "label_logits_reference", "check_label_logits", "check_render_prompt",
           "setting_claims", "own_task_claims"]


@pins_weights
def vanilla_accuracy(model: HookedTransformer, tasks: Sequence[str], seeds: Sequence[int], n_test: int,
                     k_per_class: int = 1, batch_size: int = 16, profile: str = "", progress: bool = True):
    """Vanilla ICL accuracy for every (task, seed): a ``pandas.DataFrame`` row per run.

    Columns: task, seed, shots (per class), n (inputs scored), dropped (over-long), accuracy, and per
    input ``idx`` (test row) and ``correct`` (0/1), for intervals (:mod:`helpers.study.stats`).
    Results are cached on disk (helpers.core.store.cached).
    """
    tasks, seeds = run_args(tasks, seeds, n_test=n_test, k_per_class=k_per_class)
    import pandas as pd  # lazy: pandas takes a second to import

    rows = []
    name = getattr(model.cfg, "icl_model_name", model.cfg.model_name)
    with warnings.catch_warnings():  # a multi-token label word is shown by notebook 00's task table, not per run
        warnings.simplefilter("ignore", LabelWordWarning)
        for task in tqdm(tasks, desc=f"{k_per_class}-shot", disable=not progress):
            k = shots_for(task, k_per_class)
            for seed in seeds:
                def run():
                    s = make_icl_set(model, task, seed, n_test, k)
                    # the 1-shot run is the one notebooks 02, 03 and 05 read too (top-5 words, attention at q): it
                    # runs in full once; nothing reads more than the label logits of the 5-shot runs
                    r = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=batch_size,
                                            top_k=5 if k_per_class == 1 else 0)
                    return {"n": len(r), "dropped": s.n_dropped, "accuracy": r.accuracy, "pred": r.pred.tolist(),
                            "gold": r.gold.tolist(), "idx": [p.query.idx for p in s.prompts]}
                out = cached("vanilla_accuracy", {"model": name, "task": task, "seed": seed, "n_test": n_test,
                                                  "k": k, "profile": profile}, run, model=model)
                rows.append({"task": task, "seed": seed, "shots": k, "n": out["n"], "dropped": out["dropped"],
                             "accuracy": out["accuracy"], "idx": out["idx"],
                             "correct": [int(a == b) for a, b in zip(out["pred"], out["gold"])]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ the prediction by hand, and its check

def label_logits_reference(model: HookedTransformer, prompt: Prompt,
                           label_ids: Sequence[int]) -> Float[torch.Tensor, classes]:  # noqa: F821
    """The label words' first-token logits at q of one prompt, as every experiment computes them
    (:func:`helpers.core.predict.predict`: batched, unembedding at q only)."""
    return predict(model, [prompt], list(label_ids), batch_size=1, top_k=0).label_logits[0]


_TINY_DEMOS = [Demo("a gripping, beautifully acted film", 1), Demo("dull and far too long", 0),
               Demo("the jokes never land", 0), Demo("a joy from start to finish", 1)]
_TINY_QUERY = Demo("warm, funny and wise", 1)


def _tiny_models():
    from helpers.core.models import make_tiny_model

    return {kind: make_tiny_model(kind, seed=0) for kind in ("gpt2", "rotary", "gqa")}


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


# ------------------------------------------------------------------ claims

def _verdict(iv: Interval, direction: int, value: float = 0.0) -> str:
    v = interval_verdict(iv, direction=direction, value=value)
    return "does not replicate" if v == "opposite" else v


def setting_claims(one, five, context: str = "") -> list[Claim]:
    """Notebook 00's claims from the vanilla 1-shot and 5-shot frames (:func:`vanilla_accuracy`): the two
    accuracies (mean over tasks; a baseline of another, much larger model, so "not comparable") and the
    paper's finding that more demonstrations do not help (5-shot minus 1-shot, paired on the test inputs
    both settings score: below zero replicates, above zero does not, containing zero is inconclusive).
    """
    c1, id1 = cells_from_frame(one, "correct", ids="idx")
    c5, id5 = cells_from_frame(five, "correct", ids="idx")
    diff = bootstrap_means(paired_differences(c5, c1, id5, id1)).scaled(100)
    base = "a baseline: another, much larger model (GPT2-XL) on the original test sets, no claim to check"
    over = _mean_over(one["task"])
    k = int(five["shots"].max()) if len(five) else 5
    shots = five.groupby("task", sort=False)["shots"].max()
    fewer = [f"{int(n)} on {get_task(t).display}" for t, n in shots.items() if n < k]
    return [
        claim("00.vanilla_1shot", bootstrap_means(c1).scaled(100), "not comparable", base, unit="%", context=context,
              statement=f"Vanilla ICL accuracy, 1 demonstration per class, {over}"),
        claim("00.vanilla_5shot", bootstrap_means(c5).scaled(100), "not comparable", base, unit="%", context=context,
              statement=f"Vanilla ICL accuracy, {k} demonstrations per class"
                        f"{' (' + ', '.join(fewer) + ')' if fewer else ''}, {_mean_over(five['task'])}"),
        claim("00.more_demos_no_help", diff, _verdict(diff, -1), "95% interval of 5-shot minus 1-shot below 0: "
              "replicates; above 0: does not replicate; contains 0: inconclusive", unit="points", context=context,
              statement=f"More demonstrations do not help: {k}-shot minus 1-shot accuracy, {over}"),
    ]


def _mean_over(tasks) -> str:
    """``"mean over 4 tasks (SST-2, TREC, ...)"``, or ``"on <task>"`` for one: the tasks a frame's rows cover."""
    names = [get_task(t).display for t in dict.fromkeys(tasks)]
    return f"on {names[0]}" if len(names) == 1 else f"mean over {len(names)} tasks ({', '.join(names)})"


def own_task_claims(task: Task, acc: Interval, saliency: tuple[str, dict], isolation: tuple[str, dict],
                    aucroc: tuple[str, dict], k: int, context: str = "") -> list[Claim]:
    """Notebook 08's claims on a user's task, from what notebooks 01-03's functions computed there.

    Values stay fractions (report with ``digits=2``). ``acc``: vanilla 1-shot accuracy; judged against chance
    (1 / classes): above it replicates, below it does not, otherwise inconclusive. ``saliency``,
    ``isolation``, ``aucroc``: (verdict, intervals) of
    :func:`~helpers.experiments.saliency.saliency_verdict` with :func:`~helpers.experiments.saliency.flow_intervals`
    (ours: S_wp - S_pq over the shallow third), :func:`~helpers.experiments.isolation.isolation_verdict`
    with ``{(condition, where, measure): Interval}`` (ours: label loyalty, label words isolated in the first
    ``k`` layers) and :func:`~helpers.experiments.aucroc.aucroc_verdict` with
    :func:`~helpers.experiments.aucroc.curve_intervals` (ours: the peak AUCROC_l; verdict ``"undefined"`` when
    the model predicted one class for every input). The verdicts are theirs, unchanged.
    """
    chance = 1 / task.n_classes
    ctx = f"{task.display}; {context}" if context else task.display
    sal_v, sal_iv = saliency[0], saliency[1].get((task.name, "shallow", "S_wp - S_pq"))
    iso_v, iso_iv = isolation[0], isolation[1][("label", "first", "label_loyal")]
    auc_v, auc_iv = aucroc[0], aucroc[1].get("peak")
    return [
        claim("08.accuracy_above_chance", acc, _verdict(acc, 1, chance),
              f"95% interval above chance ({chance:.2f}): replicates; below: does not replicate; "
              "contains it: inconclusive", context=ctx),
        claim("08.saliency_two_stages", sal_iv, sal_v, "notebook 01's checks: S_wp above S_pq and S_ww in the first "
              "third of the layers, S_pq above both in the last half, both above S_ww over all layers, each on its "
              "95% interval (all hold: replicates; at least half: partly)", context=ctx,
              note="Ours: S_wp - S_pq over the first third of the layers (shares of the total flow)."),
        claim("08.isolation_first_hurts", iso_iv, iso_v, f"notebook 02's checks at k = {k}: label "
              "loyalty lowest with label words isolated in the first layers (every paired drop above 0), label-last "
              "and random words at or above 0.80 (all hold: replicates; the first alone: partly)", context=ctx,
              note=f"Ours: label loyalty, label words isolated in the first {k} layers."),
        claim("08.aucroc_deep", auc_iv, "inconclusive" if auc_v == "undefined" else auc_v,
              f"notebook 03's checks: peak AUCROC_l >= {FIG5_PEAK_AUCROC - 0.05:.2f}, in the deeper half of the "
              "layers, R_l passing 0.5 after the first third, each on its whole 95% interval (all hold: "
              "replicates; some: partly)", context=ctx,
              note="Ours: peak AUCROC_l." + (" Undefined: the model predicted one class for every input."
                                              if auc_v == "undefined" else "")),
    ]
