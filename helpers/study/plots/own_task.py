"""Notebook 08: a task of the reader's own, shown with the analyses of notebooks 00-03.

``*_table`` / ``*_lines`` / ``*_text`` build what is shown; ``show_*`` print or display one of them. The
figures are notebooks 01-03's (``flows_by_layer``, ``loyalty_bars``, ``aucroc_by_layer``), called in the notebook
with their axes named and saved as ``08_<task name>_<analysis>``, the names the results folder and the README use.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from IPython.display import display

from helpers.study.profiles import current_model_name

__all__ = ["task_spec_text", "show_task_spec", "rendered_prediction_lines", "show_rendered_prediction",
           "own_accuracy_table", "own_accuracy_line", "show_own_accuracy", "own_saliency_checks_table",
           "own_isolation_table", "own_aucroc_table", "own_aucroc_checks_table"]


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


def own_isolation_table(intervals: dict, k: int) -> pd.DataFrame:
    """Label and word loyalty in % with their 95% intervals, one row per isolation condition ("label words, first
    5", ...), from ``intervals[(condition, where, "label_loyal" | "word_loyal")]`` (fractions), in their order."""
    conds = list(dict.fromkeys((c, w) for c, w, _ in intervals))
    column = {m: {f"{c} words, {w} {k}": f"{intervals[(c, w, m)].scaled(100):.1f}" for c, w in conds}
              for m in ("label_loyal", "word_loyal")}
    return pd.DataFrame({"label loyalty % [95% CI]": column["label_loyal"],
                         "word loyalty % [95% CI]": column["word_loyal"]})


def own_aucroc_table(intervals: dict) -> pd.DataFrame:
    """The AUCROC intervals (peak, crossing layer, ...) to 2 decimals, "no estimate" where there is none."""
    return pd.DataFrame({"95% interval (layers 0-based)": {s: "no estimate" if iv is None else f"{iv:.2f}"
                                                           for s, iv in intervals.items()}})


def own_aucroc_checks_table(checks: dict) -> pd.DataFrame:
    """The AUCROC checks (``{check: bool}``) as one column, "holds" (empty when AUCROC is undefined)."""
    return pd.Series(checks, name="holds", dtype=object).to_frame()
