"""Notebook 09's exercises: the two steps of the induction circuit read off the attention, checked against
:func:`helpers.experiments.positive_control.circuit_attention` on two-layer tiny random models
(:mod:`helpers.exercises.tiny`); and a prediction of what the checks say on the negative control, set beside
what its replicates said (:func:`check_negative_prediction`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from helpers.core.controls.model import ControlTask, control_prompts
from helpers.core.prompts import Prompt
from helpers.exercises.grading import CheckFailed, grader, likely_mistake
from helpers.exercises.tiny import TINY_KINDS, make_tiny_model
from helpers.experiments.positive_control import circuit_attention_reference
from helpers.study.power_report import Power, reading

__all__ = ["check_circuit_attention", "check_negative_prediction"]


@grader
def check_circuit_attention(fn: Callable, task: ControlTask | None = None) -> None:
    """Compare a reader's ``fn(model, prompt, item_class) -> [layer, head, 2]`` with :func:`circuit_attention` on
    tiny random models of three architectures (learned positions, rotary, grouped-query) and two control
    sequences; raises AssertionError naming the first case that differs."""
    task = task or ControlTask()
    cp = control_prompts(task, 2, seed=0)
    for kind in TINY_KINDS:
        model = make_tiny_model(kind, seed=0, n_layers=2)
        for i, p in enumerate(cp.prompts):
            with torch.inference_mode():
                got = torch.as_tensor(fn(model, p, cp.item_class[i])).float().cpu()
            want = circuit_attention_reference(model, p, cp.item_class[i])
            where = f"tiny {kind} model, sequence {i}"
            if got.shape != want.shape:
                raise CheckFailed(f"{where}: shape {tuple(got.shape)}, expected {tuple(want.shape)} "
                                  "[layer, head, 2]")
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-4):
                part = "[..., 0] (label -> its item)" if not torch.allclose(got[..., 0], want[..., 0], atol=1e-5,
                                                                           rtol=1e-4) else "[..., 1] (q -> matching labels)"
                cause = likely_mistake(got, _circuit_mistakes(model, p, cp.item_class[i]), atol=1e-5)
                raise CheckFailed(f"{where}: {part} differs, by up to {(got - want).abs().max():.2e}. " + (
                    cause or "[..., 0]: the mean over label positions p of A[p, p - 1]; [..., 1]: the sum over the "
                    "label positions whose item has the query's class of A[q, p]."))
    print("check_circuit_attention: matches circuit_attention on 3 architectures x 2 sequences")


def _circuit_mistakes(model, prompt: Prompt, item_class):
    """Typical wrong versions of the by-hand circuit scores, each with its likely cause."""
    with torch.inference_mode():
        _, cache = model.run_with_cache(prompt.tokens[None], names_filter=lambda n: n.endswith("hook_pattern"))
    pat = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)]).float()  # [l, h, i, j]
    pos = torch.tensor(prompt.label_pos)
    item_class = np.asarray(item_class)
    match = torch.as_tensor(item_class[:-1] == item_class[-1], dtype=torch.float32)

    def scores(back=1, reduce0="mean", weights=match, reduce1="sum"):
        a = getattr(pat[:, :, pos, pos - back], reduce0)(-1)
        b = getattr(pat[:, :, prompt.q][:, :, pos] * weights, reduce1)(-1)
        return torch.stack([a, b], -1)

    return [
        ("[..., 0] reads the label position itself (A[p, p]): the item is the token before it, A[p, p - 1].",
         lambda: scores(back=0)),
        ("[..., 0] is summed over label positions: take the mean.", lambda: scores(reduce0="sum")),
        ("[..., 1] sums over every label position: keep only those whose item has the query's class "
         "(item_class[:-1] == item_class[-1]).", lambda: scores(weights=torch.ones_like(match))),
        ("[..., 1] is a mean: sum over the matching label positions.", lambda: scores(reduce1="mean")),
        ("The two scores are swapped: [..., 0] is label -> its item, [..., 1] q -> matching labels.",
         lambda: scores().flip(-1)),
    ]


PREDICTIONS = ("fires", "silent")


@grader
def check_negative_prediction(fn: Callable, rows: list[Power]) -> None:
    """Set a reader's ``fn() -> {claim key: "fires" or "silent"}`` (written before the power runs: will the check
    say "replicates" on the negative control, whose answer does not come from its context?) beside what the
    negative control's replicates said (``rows``: :func:`helpers.study.power_report.power_rows`). A prediction is
    a guess, so only its form is graded: at least two checks, each one the controls measure, each "fires" or
    "silent"; then a line per check says whether the runs bore it out."""
    got = fn()
    if not isinstance(got, dict) or len(got) < 2:
        raise CheckFailed("return a dict of at least two checks, e.g. {'02.label_first_hurts_most': 'silent', "
                          "'07.ablation_at_q': 'fires'}")
    measured = {p.key: p for p in rows if not p.why}
    for key, said in got.items():
        if key not in measured:
            raise CheckFailed(f"{key!r} is not a check the controls measure; choose among {sorted(measured)[:6]}...")
        if said not in PREDICTIONS:
            raise CheckFailed(f"{key}: predict 'fires' (it says 'replicates' on the negative control) or 'silent' "
                              f"(anything else), not {said!r}")
    for key, said in got.items():
        p = measured[key]
        runs = sum(p.negative.values())
        fired = p.negative.get("replicates", 0)
        outcome = reading(p)["negative"]
        seen = "fires" if outcome == "fires" else "silent" if outcome == "silent" else "unsure"
        verdict = "as you predicted" if seen == said else "unsure at this size" if seen == "unsure" else "not as you predicted"
        print(f"- {key}: you said {said}; it said 'replicates' in {fired} of {runs} replicates on the negative "
              f"control ({outcome}): {verdict}")

