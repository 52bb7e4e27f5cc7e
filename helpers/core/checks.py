"""Checks of what a caller passes to the public functions of ``helpers``, done once where the call comes in.

Every check raises an error that names the argument, what it got and what to pass instead, so bad input never
turns into a number: label ids that are not the task's label words (or not one per class), sizes that are not
positive, a task name where a list of tasks is expected, empty task or seed lists, a string where a list of
prompts is expected. The errors are :class:`ArgumentError` (a ``TypeError`` and a ``ValueError``) and
:class:`helpers.core.prompts.PromptError` for prompts and label ids.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping, Sequence

__all__ = ["ArgumentError", "seed_arg", "model_arg", "positive_int", "task_list", "seed_list", "sizes_per_task", "run_args",
           "check_label_ids", "prompt_list",
           "unrelated_args"]


class ArgumentError(TypeError, ValueError):
    """An argument of the wrong type or value; the message says what to pass."""


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a whole number >= 1, else an :class:`ArgumentError` naming ``name``."""
    if not _is_int(value):
        raise ArgumentError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__}): "
                            "pass a whole number such as 8")
    if value < 1:
        raise ArgumentError(f"{name} must be a positive integer, got {value}: pass 1 or more")
    return int(value)


def seed_arg(seed, name: str = "seed") -> int:
    """``seed`` as an int if it is a whole number >= 0, else an :class:`ArgumentError`: a seed of None would draw
    unseeded, unrepeatable prompts, and numpy takes no negative seed."""
    if seed is None:
        raise ArgumentError(f"{name} is None, which would draw unseeded prompts that no rerun repeats: pass an integer "
                            f"seed such as 42")
    if not _is_int(seed):
        raise ArgumentError(f"{name} must be an integer such as 42, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ArgumentError(f"{name} must be 0 or more (numpy's generators take no negative seed), got {seed}")
    return int(seed)


def model_arg(model, name: str = "model"):
    """``model`` if it is a loaded HookedTransformer, else an :class:`ArgumentError` that says how to load one."""
    from transformer_lens import HookedTransformer

    if isinstance(model, HookedTransformer):
        return model
    if isinstance(model, str):
        raise ArgumentError(f"{name} must be a loaded model, got the name {model!r}: load it first, "
                            f"model = load_model({model!r}) (helpers.core.models)")
    raise ArgumentError(f"{name} must be a HookedTransformer (helpers.core.models.load_model(name)), got "
                        f"{type(model).__name__}")


def task_list(tasks, name: str = "tasks") -> list[str]:
    """A non-empty list of distinct task names (or :class:`~helpers.core.tasks.Task`s), each a known task."""
    from helpers.core.tasks import Task, get_task

    if isinstance(tasks, (str, Task)):
        shown = tasks if isinstance(tasks, str) else tasks.name
        raise ArgumentError(f"{name} must be a list of task names, got the single task {shown!r}: "
                            f"write [{shown!r}]")
    if isinstance(tasks, Mapping) or not isinstance(tasks, Sequence) and not hasattr(tasks, "__iter__"):
        raise ArgumentError(f"{name} must be a list of task names such as ['sst2', 'trec'], got "
                            f"{type(tasks).__name__}")
    tasks = list(tasks)
    if not tasks:
        raise ArgumentError(f"{name} is empty: pass at least one task, e.g. ['sst2'] (the profile's tasks: "
                            "helpers.study.profiles.get_profile().tasks)")
    for t in tasks:
        if not isinstance(t, (str, Task)):
            raise ArgumentError(f"{name} must hold task names (strings), got {t!r} ({type(t).__name__})")
        get_task(t)  # UnknownTaskError names the known tasks
    names = [t if isinstance(t, str) else t.name for t in tasks]
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise ArgumentError(f"{name} names {twice} more than once: each task would be run and counted again, "
                            f"doubling its inputs in the intervals; pass each task once")
    return tasks


def seed_list(seeds, name: str = "seeds") -> list[int]:
    """A non-empty list of distinct integer seeds, each 0 or more."""
    if _is_int(seeds):
        raise ArgumentError(f"{name} must be a list of integer seeds, got the single seed {seeds}: write [{seeds}]")
    if isinstance(seeds, (str, bytes, Mapping)) or not hasattr(seeds, "__iter__"):
        raise ArgumentError(f"{name} must be a list of integer seeds such as [42, 43], got {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ArgumentError(f"{name} is empty: pass at least one seed, e.g. [42]")
    bad = [s for s in seeds if not _is_int(s)]
    if bad:
        raise ArgumentError(f"{name} must be integers, got {bad[0]!r} ({type(bad[0]).__name__})")
    if any(s < 0 for s in seeds):
        raise ArgumentError(f"{name} must be 0 or more (numpy's generators take no negative seed), got "
                            f"{min(seeds)}: pass e.g. [42]")
    twice = sorted({int(s) for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ArgumentError(f"{name} repeat {twice}: a seed is one draw of demonstrations, and a repeat would count "
                            f"its inputs twice in the intervals; pass each seed once")
    return [int(s) for s in seeds]


def sizes_per_task(name: str, n, tasks: Sequence[str]) -> None:
    """``n`` is a positive int, or a dict giving a positive int for every task in ``tasks``."""
    if isinstance(n, Mapping):
        missing = [t for t in tasks if t not in n]
        if missing:
            raise ArgumentError(f"{name} is a dict without an entry for {missing}: give every task a size")
        for t in tasks:
            positive_int(f"{name}[{t!r}]", n[t])
    else:
        positive_int(name, n)


def run_args(tasks, seeds, **sizes) -> tuple[list[str], list[int]]:
    """The checked ``(tasks, seeds)`` of a run helper; each size (an int, or a per-task dict) must be positive."""
    tasks, seeds = task_list(tasks), seed_list(seeds)
    for name, n in sizes.items():
        if n is not None:
            sizes_per_task(name, n, [t if isinstance(t, str) else t.name for t in tasks])
    return tasks, seeds


def unrelated_args(uts, seeds=None) -> list[int] | None:
    """Paper B's run helpers: ``uts`` a non-empty dict ``{task name: UnrelatedTask}``; ``seeds`` (when given) a
    non-empty list of integer seeds, which is returned."""
    from helpers.core.unrelated import UnrelatedTask

    if not isinstance(uts, Mapping) or not all(isinstance(u, UnrelatedTask) for u in uts.values()):
        raise ArgumentError("uts must be a dict {task name: UnrelatedTask} (helpers.core.unrelated.unrelated_task), "
                            f"got {type(uts).__name__}")
    if not uts:
        raise ArgumentError("uts is empty: pass at least one task, e.g. {'sst2': unrelated_task('sst2')}")
    return None if seeds is None else seed_list(seeds)


def prompt_list(prompts, what: str = "run") -> list:
    """``prompts`` as a list of :class:`~helpers.core.prompts.Prompt`; a string, one prompt, or anything else
    raises :class:`~helpers.core.prompts.PromptError`."""
    from helpers.core.prompts import Prompt, PromptError

    hint = "pass a list of Prompt objects (make_icl_set(...).prompts, or [build_prompt(...)])"
    if isinstance(prompts, Prompt):
        raise PromptError(f"prompts to {what} must be a list, got one Prompt: wrap it in a list, [prompt]")
    if isinstance(prompts, (str, bytes)):
        raise PromptError(f"prompts to {what} must be Prompt objects, got the string {prompts[:60]!r}: {hint}")
    if not isinstance(prompts, Sequence):
        raise PromptError(f"prompts to {what} must be a list, got {type(prompts).__name__}: {hint}")
    bad = next((p for p in prompts if not isinstance(p, Prompt)), None)
    if bad is not None:
        raise PromptError(f"prompts to {what} must be Prompt objects, got {type(bad).__name__} "
                          f"{str(bad)[:60]!r}: {hint}")
    return list(prompts)


def _ids(n: int) -> str:
    return f"{n} id" if n == 1 else f"{n} ids"


def check_label_ids(tokenizer, prompts: Sequence, label_ids) -> list[int]:
    """``label_ids`` as a list of ints: one per class, and exactly the first tokens of the prompts' label words.

    A prompt built by :func:`~helpers.core.prompts.build_prompt` knows its task, so the ids must equal
    :func:`~helpers.core.tasks.label_token_ids` of that task; a prompt without one is checked against its
    demonstrations (each label position holds the id of its class).
    """
    from helpers.core.prompts import PromptError
    from helpers.core.tasks import label_token_ids

    fix = "pass tasks.label_token_ids(model.tokenizer, task), or the prompt set's .label_ids"
    if isinstance(label_ids, (str, bytes, Mapping)) or not hasattr(label_ids, "__iter__"):
        raise PromptError(f"label_ids must be a list of token ids, one per class, got {label_ids!r}; {fix}")
    if hasattr(label_ids, "tolist"):
        label_ids = label_ids.tolist()
    ids = list(label_ids)
    if not ids:
        raise PromptError(f"label_ids is empty: it needs one token id per class; {fix}")
    bad = next((i for i in ids if not _is_int(i)), None)
    if bad is not None:
        raise PromptError(f"label_ids must be integer token ids, got {bad!r} ({type(bad).__name__}); {fix}")
    ids = [int(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise PromptError(f"label_ids {ids} repeat an id: the classes could not be told apart; {fix}")
    tasks = {p.task for p in prompts if getattr(p, "task", None) is not None}
    for task in tasks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the multi-token warning was given when the prompts were built
            want = label_token_ids(tokenizer, task)
        if len(ids) != len(want):
            raise PromptError(f"label_ids has {_ids(len(ids))}, but {task.display} has {len(want)} classes "
                              f"({', '.join(task.label_words)}); {fix}")
        if ids != want:
            raise PromptError(f"label_ids {ids} are not the first tokens of {task.display}'s label words "
                              f"{list(task.label_words)} ({want}, in class order); {fix}")
    for i, p in enumerate(prompts):
        classes = list(p.label_class) + ([p.gold] if p.gold is not None else [])
        if classes and max(classes) >= len(ids):
            raise PromptError(f"label_ids has {_ids(len(ids))}, but prompt {i} has class {max(classes)}; {fix}")
        for pos, c in zip(p.label_pos, p.label_class):
            if int(p.tokens[pos]) != ids[c]:
                raise PromptError(f"prompt {i}: the label word of class {c} at position {pos} is token "
                                  f"{int(p.tokens[pos])}, but label_ids gives {ids[c]} for that class; {fix}")
    return ids
