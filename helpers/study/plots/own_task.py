"""Notebook 08: a task of the reader's own, shown with the analyses of notebooks 00-03.

``*_table`` / ``*_lines`` / ``*_text`` build what is shown; ``show_*`` show one result of the notebook (its
tables, printed lines and figures, in the notebook's order) and save every figure as ``08_<task name>_<analysis>``,
the names the results folder and the README use. Functions of the experiment modules that a display needs (a
table builder) are passed in by the notebook: this package never imports ``helpers.experiments``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
from IPython.display import display

from helpers.study.profiles import current_model_name

from .analysis import plot_aucroc_curves, plot_flow_curves, plot_loyalty_bars
from .setting import show_figure

__all__ = ["task_spec_text", "show_task_spec", "rendered_prediction_lines", "show_rendered_prediction",
           "own_accuracy_table", "own_accuracy_line", "show_own_accuracy", "own_saliency_checks_table",
           "show_own_saliency", "own_isolation_table", "show_own_isolation", "own_aucroc_table",
           "own_aucroc_checks_table", "show_own_aucroc"]


def _model_name(model_name: str | None) -> str:
    return model_name or current_model_name()


def task_spec_text(task) -> str | None:
    """``"<spec path>:\\n<the spec file as written>"`` for a task loaded from a spec file; None for a shipped task."""
    return f"{task.spec_path}:\n{Path(task.spec_path).read_text()}" if task.spec_path else None


def show_task_spec(task) -> None:
    """Print :func:`task_spec_text` (nothing for a shipped task)."""
    text = task_spec_text(task)
    if text is not None:
        print(text)


def rendered_prediction_lines(task, text: str, label_logits, gold: int) -> tuple[str, str]:
    """The end of the rendered prompt ``text`` (its last 80 characters), and the label logits at q (``[classes]``,
    CPU) by label word with the prediction (their argmax) and the ``gold`` label word."""
    query = f"the query as rendered: ...{text[-80:]!r}"
    logits = ", ".join(f"{w} {x:.2f}" for w, x in zip(task.label_words, label_logits.tolist()))
    prediction = (f"label logits at q: {logits}; prediction {task.label_words[int(label_logits.argmax())]!r}, "
                  f"gold {task.label_words[gold]!r}")
    return query, prediction


def show_rendered_prediction(task, text: str, label_logits, gold: int) -> None:
    """Print the two :func:`rendered_prediction_lines`."""
    for line in rendered_prediction_lines(task, text, label_logits, gold):
        print(line)


def own_accuracy_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per seed: inputs scored, prompts dropped (too long for the context) and accuracy, to 3 decimals."""
    return runs[["seed", "n", "dropped", "accuracy"]].round(3)


def own_accuracy_line(task, acc) -> str:
    """The accuracy :class:`~helpers.study.stats.Interval` ``acc`` with what it rests on, beside chance
    (1 / number of classes)."""
    return (f"{task.display}: vanilla 1-shot accuracy {acc:.3f} (95% CI; {acc.n_seeds} seed(s), "
            f"{acc.n_inputs} inputs), chance {1 / task.n_classes:.3f}")


def show_own_accuracy(task, runs: pd.DataFrame, acc) -> None:
    """Show :func:`own_accuracy_table` of the per-seed ``runs``, then print :func:`own_accuracy_line`."""
    display(own_accuracy_table(runs))
    print(own_accuracy_line(task, acc))


def own_saliency_checks_table(checks: dict) -> pd.DataFrame:
    """The saliency checks (``{(task, check): bool}``, one task) as one column, "on the 95% intervals"."""
    return pd.Series({c: v for (_, c), v in checks.items()}, name="on the 95% intervals").to_frame()


def show_own_saliency(task, flows: pd.DataFrame, intervals: dict, checks: dict, interval_table: Callable,
                      budget: dict, model_name: str | None = None) -> None:
    """Show the saliency flows of one task: the interval table (``interval_table(intervals, [task name],
    labels=...)``, one column), the checks (:func:`own_saliency_checks_table`) and the flow curves with their 95%
    bands (:func:`plot_flow_curves`), saved as ``08_<task name>_saliency_flow``.

    ``flows``: the per-layer frame (task, seed, layer, flow, value); ``intervals``: ``{(task name, ...): Interval}``;
    ``budget``: the run sizes (its ``seeds`` and ``n_saliency`` name the figure's sample); ``model_name``: for
    the title (default: the current model).
    """
    labels = {task.name: task.display}
    title = (f"Relative saliency flows, {task.display}, {_model_name(model_name)} "
             f"({len(budget['seeds'])} seed(s) x {budget['n_saliency']} inputs, 95% CI)")
    fig = plot_flow_curves(flows, title=title, intervals=intervals, labels=labels)
    display(interval_table(intervals, [task.name], labels=labels).set_index("task").T)
    display(own_saliency_checks_table(checks))
    show_figure(fig, f"08_{task.name}_saliency_flow")


def own_isolation_table(intervals: dict, k: int) -> pd.DataFrame:
    """Label and word loyalty in % with their 95% intervals, one row per isolation condition ("label words, first
    5", ...), from ``intervals[(condition, where, "label_loyal" | "word_loyal")]`` (fractions), in their order."""
    conds = list(dict.fromkeys((c, w) for c, w, _ in intervals))
    column = {m: {f"{c} words, {w} {k}": f"{intervals[(c, w, m)].scaled(100):.1f}" for c, w in conds}
              for m in ("label_loyal", "word_loyal")}
    return pd.DataFrame({"label loyalty % [95% CI]": column["label_loyal"],
                         "word loyalty % [95% CI]": column["word_loyal"]})


def show_own_isolation(task, loyalty: pd.DataFrame, intervals: dict, checks: dict, k: int) -> None:
    """Show :func:`own_isolation_table`, print the isolation checks, and show the loyalty bars with their 95%
    intervals (:func:`plot_loyalty_bars`), saved as ``08_<task name>_isolation``."""
    fig = plot_loyalty_bars(loyalty, k=k, title=f"Isolation in the first / last {k} layers, {task.display}",
                            intervals=intervals)
    display(own_isolation_table(intervals, k))
    print(f"isolation checks: {checks}")
    show_figure(fig, f"08_{task.name}_isolation")


def own_aucroc_table(intervals: dict) -> pd.DataFrame:
    """The AUCROC intervals (peak, crossing layer, ...) to 2 decimals, "no estimate" where there is none."""
    return pd.DataFrame({"95% interval (layers 0-based)": {s: "no estimate" if iv is None else f"{iv:.2f}"
                                                           for s, iv in intervals.items()}})


def own_aucroc_checks_table(checks: dict) -> pd.DataFrame:
    """The AUCROC checks (``{check: bool}``) as one column, "holds" (empty when AUCROC is undefined)."""
    return pd.Series(checks, name="holds", dtype=object).to_frame()


def show_own_aucroc(task, curve: pd.DataFrame, intervals: dict, checks: dict, model_name: str | None = None) -> None:
    """Show :func:`own_aucroc_table` and :func:`own_aucroc_checks_table`, then the AUCROC_l / R_l curves
    (:func:`plot_aucroc_curves`, empty when undefined) titled "<model>, <task>", saved as ``08_<task name>_aucroc``."""
    display(own_aucroc_table(intervals))
    display(own_aucroc_checks_table(checks))
    fig = plot_aucroc_curves({f"{_model_name(model_name).split('/')[-1]}, {task.display}": curve})
    show_figure(fig, f"08_{task.name}_aucroc")
