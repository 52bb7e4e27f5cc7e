"""Tasks with semantically unrelated label words (paper B's foo/bar setting) and their prompt sets.

- **Unrelated-label tasks** (:func:`unrelated_task`): a task from ``TASKS`` with its label words replaced by
  ``foo``/``bar`` (class 0 -> foo, class 1 -> bar) and, by default, the paper's prompt shape
  ``S0 : bar\\nS1 : foo\\n...\\nSx :`` (no input prefix, label prefix ``" :"``). Multi-class sources are made
  binary by keeping two classes (e.g. AGNews World vs Sports) and relabelling them 0/1. Other words (the
  swapped mapping bar/foo, " A"/" B") or the real words (``words=None``) give the controls.
- **Prompt sets**: :func:`make_set` (one fixed demonstration set for many queries, as in notebooks 00-06),
  :func:`eval_set` (the evaluation prompts of one seed, at the sizes of :func:`helpers.protocols.evaluation.eval_sizes`, an
  :class:`EvalSizes`) and
  :func:`fresh_demo_prompts` (every prompt with its own demonstrations).
- :func:`cached_eval_runs`: one computation per (task, seed) on the evaluation prompts, stored on disk
  (:func:`helpers.core.store.cached`); the experiments of notebook 07 build their cached steps on it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from helpers.core.checks import ArgumentError, model_arg, seed_list, sizes_arg
from helpers.core.grid import model_label, run_grid
from helpers.core.prompts import (
    Demo,
    PoolSizeWarning,
    Prompt,
    PromptSet,
    build_prompt,
    build_prompts,
    sample_demos,
    sample_test,
)
from helpers.core.seeds import stream_seed
from helpers.core.sizing import FORWARD_BATCH
from helpers.core.tasks import Task, get_task, label_token_ids, load_split

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "BINARY_SOURCES",
    "UnrelatedTask",
    "unrelated_task",
    "unrelated_args",
    "make_set",
    "fresh_demo_prompts",
    "EvalSizes",
    "eval_set",
    "check_sizes",
    "cached_eval_runs",
]


@dataclass
class UnrelatedTask:
    """A binary task with its own (filtered, relabelled) train/test pools."""

    task: Task
    train: object  # datasets.Dataset
    test: object
    source: str
    classes: tuple[int, int]


BINARY_SOURCES = {"sst2": (0, 1), "agnews": (0, 1)}  # the shipped tasks made binary for foo/bar (their first two classes)


def unrelated_args(uts, seeds=None) -> list[int] | None:
    """Paper B's run helpers: ``uts`` a non-empty dict ``{task name: UnrelatedTask}``; ``seeds`` (when given) a
    non-empty list of integer seeds, which is returned."""
    if not isinstance(uts, Mapping) or not all(isinstance(u, UnrelatedTask) for u in uts.values()):
        raise ArgumentError("uts must be a dict {task name: UnrelatedTask} (helpers.core.unrelated.unrelated_task), "
                            f"got {type(uts).__name__}")
    if not uts:
        raise ArgumentError("uts is empty: pass at least one task, e.g. {'sst2': unrelated_task('sst2')}")
    return None if seeds is None else seed_list(seeds)


def unrelated_task(base: str | Task, classes: tuple[int, int] = (0, 1), words: tuple[str, str] | None = ("foo", "bar"),
                   paper_shape: bool = True) -> UnrelatedTask:
    """``base`` made binary on ``classes`` with label words ``words`` (None keeps the real words).

    ``paper_shape=True`` renders ``{text} : {label}`` lines (paper B's
    ``S0 : bar``); False keeps the base task's prefixes.
    """
    import datasets  # lazy: datasets takes seconds to import

    base = get_task(base)
    if len(classes) != 2 or len(set(classes)) != 2 or not all(0 <= c < base.n_classes for c in classes):
        raise ValueError(f"classes must be two distinct class indices of {base.display} (0..{base.n_classes - 1})")
    real = tuple(base.label_words[c] for c in classes)
    lw = tuple(words) if words is not None else real
    suffix = "foobar" if words is not None else "real"
    binary = tuple(classes) != (0, 1) or base.n_classes != 2
    name = f"{base.name}{''.join(map(str, classes)) if binary else ''}_{suffix}"
    display = f"{base.display}{' ' + '/'.join(real) if binary else ''} ({'/'.join(lw)})"
    task = replace(base, name=name, display=display, label_words=lw,
                   input_prefix="" if paper_shape else base.input_prefix,
                   label_prefix=" :" if paper_shape else base.label_prefix,
                   template="" if paper_shape else base.template, separator="\n" if paper_shape else base.separator,
                   digest="")

    def _filter(split):
        ds = load_split(base, split)
        labels = np.asarray(ds["label"])
        keep = np.flatnonzero(np.isin(labels, classes))
        texts = ds.select(keep.tolist())["text"]
        relab = (labels[keep] == classes[1]).astype(int).tolist()
        return datasets.Dataset.from_dict({"text": texts, "label": relab})

    return UnrelatedTask(task, _filter("train"), _filter("test"), base.name, tuple(classes))


def make_set(model: HookedTransformer, ut: UnrelatedTask, seed: int, n_test: int, k_per_class: int = 2,
             demos: Sequence[Demo] | None = None) -> PromptSet:
    """One fixed demonstration set (``k_per_class`` per class, shuffled with ``seed``) for ``n_test`` queries."""
    demos = list(demos) if demos is not None else sample_demos(ut.train, ut.task, k_per_class, seed)
    queries = sample_test(ut.test, n_test, seed)
    prompts, dropped = build_prompts(model, ut.task, demos, queries)
    return PromptSet(ut.task, seed, k_per_class, demos, [p.query for p in prompts], prompts, dropped,
                     label_token_ids(model.tokenizer, ut.task))


def fresh_demo_prompts(model: HookedTransformer, ut: UnrelatedTask, seed: int, n: int,
                       k_per_class: int = 2) -> list[Prompt]:
    """``n`` prompts, each with its own demonstrations (seed ``seed * 1000 + i + 1``), for the two-towers
    analysis."""
    queries = sample_test(ut.test, n, seed)
    lids = label_token_ids(model.tokenizer, ut.task)
    out = []
    for i, qd in enumerate(queries):
        demos = sample_demos(ut.train, ut.task, k_per_class, stream_seed("unrelated_demos", seed, i))
        p = build_prompt(model, ut.task, demos, qd, label_ids=lids)
        if len(p) <= model.cfg.n_ctx:
            out.append(p)
    return out


# ------------------------------------------------------------------ the evaluation prompts of notebook 07


@dataclass(frozen=True)
class EvalSizes:
    """The evaluation sizes every step of notebook 07 shares: ``n_eval`` queries per seed, the ``seeds``, and
    ``k_per_class`` demonstrations per class. Each experiment's own sizes (its ``*_sizes(profile)``) extend it
    with the fields of its own step."""

    n_eval: int
    seeds: Sequence[int]
    k_per_class: int
    batch_size: int = field(default=FORWARD_BATCH, kw_only=True)  # prompts per forward pass


def check_sizes(sizes, kind: type = EvalSizes, where: str = "eval_sizes(profile)") -> None:
    """Raise a TypeError that says where sizes come from when ``sizes`` is not a ``kind`` (e.g. a plain dict)."""
    sizes_arg(sizes, kind, where)


def eval_set(model: HookedTransformer, ut: UnrelatedTask, seed: int, sizes: EvalSizes) -> PromptSet:
    """The evaluation prompts of ``seed``: ``sizes.n_eval`` queries (all of the test pool when it holds fewer),
    ``sizes.k_per_class`` demos per class."""
    check_sizes(sizes)
    with warnings.catch_warnings():
        # PoolSizeWarning (helpers.core.prompts.sample_test): the paper profile asks n_eval = 1000 queries and the
        # foo/bar SST-2 pool (its validation split) holds 872. Notebook 07 then evaluates on the whole pool by
        # design (regime_runs counts the queries asked as min(n_eval, pool)); without this every step would
        # repeat the warning for every task, seed and mapping.
        warnings.simplefilter("ignore", PoolSizeWarning)
        return make_set(model, ut, seed, sizes.n_eval, sizes.k_per_class)


# Notebook 07's steps run one computation for every task (and seed) and cache each result on disk with
# helpers.core.store.cached. The cache kinds and parameter dicts are part of the results' identity: changing them
# orphans every stored result. ``uts`` maps a task name (the cache key's "task", e.g. "sst2") to its
# UnrelatedTask; ``sizes`` is an EvalSizes (or an experiment's extension of it); ``heads`` maps a task name to its in-context heads;
# ``model_name`` is the name recorded in the cache key (default: the name helpers.core.models.load_model records,
# ``model.cfg.icl_model_name``; notebook 07 passes ``current_model_name()``).


def cached_eval_runs(kind: str, model: HookedTransformer, uts: dict[str, UnrelatedTask], sizes: EvalSizes,
                     seeds: Sequence[int] | None, model_name: str | None, run: Callable,
                     heads: dict[str, Sequence[tuple[int, int]]] | None = None,
                     extra: Callable[[UnrelatedTask], dict] | None = None) -> dict[tuple[str, int], Any]:
    """``run(prompt_set, heads, seed)`` on each (task, seed)'s :func:`eval_set`, cached under ``kind``, with the
    model's weights pinned inside (its first argument is ``kind``, so :func:`~helpers.core.store.pins_weights`,
    which pins its first argument, cannot be used here).

    Cache parameters: model, task, seed, k, n (``sizes.n_eval``), what the prompts are made of (the task's label
    words, its two source classes, its prompt shape), the heads if given, and ``extra(ut)``: the same task name
    under another mapping (foo/bar and bar/foo) never shares a stored result.
    """
    model_arg(model)
    check_sizes(sizes)
    name, K, seeds = model_label(model, model_name), sizes.k_per_class, sizes.seeds if seeds is None else seeds
    seeds = unrelated_args(uts, seeds)

    def params(t, _):
        ut = uts[t]
        out = {"k": K, "n": sizes.n_eval, "words": list(ut.task.label_words), "classes": list(ut.classes),
               "shape": [ut.task.input_prefix, ut.task.label_prefix], **(extra(ut) if extra else {})}
        return out if heads is None else {**out, "heads": heads[t]}

    def compute(t, seed):
        return run(eval_set(model, uts[t], seed, sizes), None if heads is None else heads[t], seed)

    return run_grid(kind, model, list(uts), seeds, compute, params, model_name=name)
