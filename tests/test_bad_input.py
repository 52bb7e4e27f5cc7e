"""Every bad input we know of, with the message it must give: a clear error that says what to do, never a number.

One row per input in :data:`CASES`: ``Bad(id, call, error, message)``. ``call(env)`` makes the bad call (``env``
holds a tiny model, an SST-2 prompt set and a writer of task folders); the test expects ``error`` with
``message`` in its text. A command-line input raises :class:`CommandFailed` (nonzero exit, no traceback) with
its stderr. To add a row, append a ``Bad`` (or extend ``CASES`` from another module). The "Bad input" section of
docs/your-own.md lists these rows.

The second half of the module holds the bad input to the scripts (preflight, run_all, the checksums command, the
Makefile) as tables of their own, one per kind of input:

- SETTINGS: an ``ICL_*`` variable and its value -> helpers.study.config.check_variable's message;
- ROWS: the bytes of a task's data file -> preflight's check_task_data message (file and line named);
- MODEL_FOLDERS: a local model folder, broken one way -> preflight's check_model message;
- COMMANDS: a command line and its environment -> its exit code and output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
import torch

from helpers.core import task_data, tasks
from helpers.core.checks import ArgumentError
from helpers.core.model_loading import ModelLoadError
from helpers.core.models import resolve_dtype
from helpers.core.predict import predict
from helpers.core.prefix_runs import predict_shared, vanilla_predictions
from helpers.core.prompts import Demo, PromptError, build_prompt, example_prompt, make_icl_set, sample_test
from helpers.core.task_data import CorruptDataError
from helpers.core.tasks import LabelCollisionError, SpecError, TemplateError, UnknownTaskError
from helpers.experiments.aucroc import auc_roc, aucroc_per_layer, label_attention
from helpers.experiments.diagnosis import collect_qk
from helpers.experiments.incontext_heads import head_attribution
from helpers.experiments.reweighting import train_reweighting
from helpers.experiments.saliency import relative_flow, saliency_flow, saliency_matrices
from helpers.experiments.two_towers import value_outputs
from helpers.protocols.aucroc import AucrocSizes, aucroc_runs
from helpers.protocols.isolation import IsolationSizes, isolation_runs
from helpers.protocols.reweighting import ReweightingSizes, table1_runs
from helpers.protocols.saliency import SaliencySizes, saliency_runs
from helpers.protocols.setting import SettingSizes, vanilla_accuracy
from helpers.study.profiles import get_profile

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")


def _va(model, tasks, seeds, n_test, k_per_class=1, batch_size=16, **kw):
    """vanilla_accuracy with its sizes built from loose values (each case's bad value enters through them)."""
    return vanilla_accuracy(model, tasks, SettingSizes(seeds=seeds, n_test=n_test, batch_size=batch_size), k_per_class,
                            **kw)


def _sal(model, tasks, seeds, n, batch_size=4, **kw):
    return saliency_runs(model, tasks, SaliencySizes(seeds=seeds, n=n, batch_size=batch_size), **kw)


def _auc(model, tasks, seeds, n, batch_size=16, **kw):
    return aucroc_runs(model, tasks, AucrocSizes(seeds=seeds, n=n, batch_size=batch_size), **kw)


def _retemplate(spec: Path, template: str) -> Path:
    """The spec at ``spec`` with its template replaced (to try a malformed one)."""
    data = json.loads(spec.read_text())
    spec.write_text(json.dumps({**data, "template": template}))
    return spec


class CommandFailed(Exception):
    """A command exited nonzero with a message (its stderr), not a traceback."""


@dataclass
class Env:
    model: Any  # a tiny GPT-2-shaped model (n_ctx 512)
    icl: Any  # an SST-2 prompt set of 3 inputs on it
    tmp: Path

    def task(self, test: bytes | str | list, train: bytes | str | list | None = None, name: str = "mine",
             checksums: bool = True) -> Path:
        """A spec task folder (words 'sad', 'happy') whose files hold exactly these rows (dicts or raw text);
        its checksums are recorded by hand (sha256 only), so the rows are checked only when loaded."""
        folder = self.tmp / f"{name}-{len(list(self.tmp.iterdir()))}"
        folder.mkdir()
        good = [{"text": "good", "label": 1}, {"text": "bad", "label": 0}]
        for split, rows in (("train", good if train is None else train), ("test", test)):
            data = rows if isinstance(rows, bytes) else rows.encode() if isinstance(rows, str) else \
                "".join(json.dumps(r) + "\n" for r in rows).encode()
            (folder / f"{split}.jsonl").write_bytes(data)
        (folder / "task.json").write_text(json.dumps({"name": name, "template": "Text: {text}\nMood: {label}",
                                                      "label_words": ["sad", "happy"]}))
        if checksums:
            (folder / "checksums.json").write_text(json.dumps(
                {f: task_data.file_sha256(folder / f) for f in ("train.jsonl", "test.jsonl")}))
        return folder / "task.json"

    def load(self, test, split: str = "test", **kw):
        return self.load_path(self.task(test, **kw), split)

    def load_path(self, path: Path, split: str = "test"):
        return tasks.load_split(tasks.load_task_spec(path), split)

    def ids(self, task: str = "sst2") -> list[int]:
        return tasks.label_token_ids(self.model.tokenizer, task)

    def long_prompt(self):
        return build_prompt(self.model, "sst2", [Demo("a fine film " * 40, d % 2) for d in range(6)], Demo("ok", 1))


def cli(*args: str) -> str:
    """Run ``python -m <args>`` in the repository; its stdout, or :class:`CommandFailed` with its stderr."""
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if proc.returncode:
        raise CommandFailed(proc.stderr.strip())
    return proc.stdout


@dataclass
class Bad:
    id: str
    call: Callable[[Env], Any]
    error: type[BaseException]
    message: str  # must appear in the error's text


ROW = {"text": "fine", "label": 1}
FIRST = json.dumps(ROW) + "\n"  # a good first line: the bad row is line 2

PROMPT_RUNS = {  # the public functions that take (model, prompts, label_ids)
    "predict": predict, "predict_shared": predict_shared, "vanilla_predictions": vanilla_predictions,
    "label_attention": label_attention, "collect_qk": collect_qk, "saliency_flow": saliency_flow,
    "saliency_matrices": saliency_matrices,
}

CASES: list[Bad] = [
    # ---------------------------------------------------------------- data rows, checked when a split loads
    Bad("row without text", lambda e: e.load([ROW, {"label": 0}]), CorruptDataError,
        "test.jsonl, line 2: no 'text' field"),
    Bad("row with a number as text", lambda e: e.load([ROW, {"text": 5, "label": 0}]), CorruptDataError,
        "line 2: 'text' must be a non-empty string, got 5"),
    Bad("row with empty text", lambda e: e.load([ROW, {"text": "  ", "label": 0}]), CorruptDataError,
        "line 2: 'text' must be a non-empty string, got '  '"),
    Bad("row without label", lambda e: e.load([ROW, {"text": "ok"}]), CorruptDataError,
        "line 2: no 'label' field"),
    Bad("label as a string", lambda e: e.load([ROW, {"text": "ok", "label": "1"}]), CorruptDataError,
        "line 2: 'label' must be an integer class id, got '1'"),
    Bad("label as a float", lambda e: e.load([ROW, {"text": "ok", "label": 1.5}]), CorruptDataError,
        "line 2: 'label' must be an integer class id, got 1.5"),
    Bad("label as a bool", lambda e: e.load([ROW, {"text": "ok", "label": True}]), CorruptDataError,
        "line 2: 'label' must be an integer class id, got True"),
    Bad("label past the label words", lambda e: e.load([ROW, {"text": "ok", "label": 2}]), CorruptDataError,
        "test.jsonl, line 2: label 2 is outside 0..1 (the task has 2 label words"),
    Bad("negative label", lambda e: e.load([ROW, {"text": "ok", "label": -1}]), CorruptDataError,
        "line 2: label -1 is outside 0..1"),
    Bad("label past the label words in train", lambda e: e.load([ROW], split="train", train=[ROW, ROW,
        {"text": "x", "label": 7}]), CorruptDataError, "train.jsonl, line 3: label 7 is outside 0..1"),
    Bad("non-UTF-8 bytes", lambda e: e.load(FIRST.encode() + b'{"text": "caf\xe9", "label": 0}\n'), CorruptDataError,
        "test.jsonl, line 2: not UTF-8 text (byte 0xe9"),
    Bad("empty test.jsonl", lambda e: e.load(""), CorruptDataError, "test.jsonl holds no rows"),
    Bad("only blank lines", lambda e: e.load("\n\n  \n"), CorruptDataError, "test.jsonl holds no rows"),
    Bad("malformed JSON row", lambda e: e.load(FIRST + '{"text": "ok", "label": 0\n'), CorruptDataError,
        "test.jsonl, line 2: not valid JSON"),
    Bad("a JSON list as a row", lambda e: e.load(FIRST + '["ok", 0]\n'), CorruptDataError,
        "line 2: a JSON list, not an object"),
    Bad("edited data file", lambda e: (lambda p: ((p.parent / "test.jsonl").write_text(FIRST * 2),
                                                  e.load_path(p)))(e.task([ROW])), CorruptDataError,
        "does not match its recorded checksum"),
    Bad("record_checksums of malformed JSON", lambda e: tasks.record_checksums(e.task("{oops\n", checksums=False)),
        CorruptDataError, "test.jsonl, line 1: not valid JSON"),
    Bad("--checksums of malformed JSON (command line)",
        lambda e: cli("helpers.core.tasks", "--checksums", str(e.task("{oops\n", checksums=False))), CommandFailed,
        "test.jsonl, line 1: not valid JSON"),
    Bad("--checksums of a template without {label} (command line)",
        lambda e: cli("helpers.core.tasks", "--checksums", str(_retemplate(e.task([ROW], checksums=False),
                                                                           "Text: {text}\nMood:"))),
        CommandFailed, "{label}"),
    Bad("--checksums of a row past the label words (command line)",
        lambda e: cli("helpers.core.tasks", "--checksums", str(e.task([ROW, {"text": "x", "label": 3}],
                                                                      checksums=False))),
        CommandFailed, "line 2: label 3 is outside 0..1"),
    Bad("malformed checksums.json", lambda e: (lambda p: ((p.parent / "checksums.json").write_text("{x"),
                                                          tasks.load_task_spec(p)))(e.task([ROW])),
        SpecError, "checksums.json is not valid JSON"),
    # ---------------------------------------------------------------- tasks and specs
    Bad("unknown task", lambda e: tasks.get_task("nope"), UnknownTaskError, "Unknown task 'nope'"),
    Bad("template without {label}", lambda e: tasks.task_from_spec(
        {"name": "x", "template": "Review: {text}", "label_words": ["a", "b"]}, need_checksums=False),
        TemplateError, "has no {label}"),
    Bad("label words sharing a first token", lambda e: tasks.label_token_ids(e.model.tokenizer, tasks.task_from_spec(
        {"name": "x", "template": "{text} {label}", "label_words": ["Negative", "Negative words"]}, need_checksums=False)),
        LabelCollisionError, "share their first token"),
    Bad("ICL_PROFILE=bogus", lambda e: _with_env("ICL_PROFILE", "bogus", lambda: get_profile()), ValueError,
        "Unknown profile 'bogus'; choose one of ['default', 'paper', 'smoke'] (set ICL_PROFILE)"),
    Bad("ICL_DTYPE=bogus", lambda e: _with_env("ICL_DTYPE", "bogus", lambda: resolve_dtype()), ValueError,
        "ICL_DTYPE='bogus' is not a supported dtype: choose one of float32, bfloat16, float16"),
    # ---------------------------------------------------------------- label ids
    *[Bad(f"label_ids=[] to {name}", lambda e, f=f: f(e.model, e.icl.prompts, []), PromptError,
          "label_ids is empty: it needs one token id per class") for name, f in PROMPT_RUNS.items()],
    Bad("label_ids=[] to head_attribution", lambda e: head_attribution(e.model, e.icl.prompts, []), PromptError,
        "label_ids is empty"),
    Bad("label ids in the wrong order to head_attribution",
        lambda e: head_attribution(e.model, e.icl.prompts, e.ids()[::-1]), PromptError, "are not the first tokens"),
    Bad("label_ids=[] to train_reweighting", lambda e: train_reweighting(e.model, e.icl.prompts, [], epochs=1),
        PromptError, "label_ids is empty"),
    Bad("3 label ids to train_reweighting", lambda e: train_reweighting(e.model, e.icl.prompts, e.ids() + [5],
                                                                         epochs=1),
        PromptError, "label_ids has 3 ids, but SST-2 has 2 classes"),
    Bad("label ids in the wrong order to value_outputs",
        lambda e: value_outputs(e.model, e.icl.prompts, e.ids()[::-1], [(0, 1)]), PromptError,
        "are not the first tokens"),
    Bad("3 label ids for 2 classes", lambda e: predict(e.model, e.icl.prompts, e.ids() + [5]), PromptError,
        "label_ids has 3 ids, but SST-2 has 2 classes (Negative, Positive)"),
    Bad("1 label id for 2 classes", lambda e: predict(e.model, e.icl.prompts, e.ids()[:1]), PromptError,
        "label_ids has 1 id, but SST-2 has 2 classes"),
    Bad("2 label ids for TREC's 6 classes", lambda e: predict(
        e.model, make_icl_set(e.model, "trec", 42, 2).prompts, e.ids("trec")[:2]), PromptError,
        "label_ids has 2 ids, but TREC has 6 classes"),
    Bad("label ids in the wrong order", lambda e: predict(e.model, e.icl.prompts, e.ids()[::-1]), PromptError,
        "are not the first tokens of SST-2's label words ['Negative', 'Positive']"),
    Bad("label ids of other words", lambda e: predict(e.model, e.icl.prompts, [11, 12]), PromptError,
        "label_ids [11, 12] are not the first tokens of SST-2's label words"),
    Bad("label ids of another task", lambda e: saliency_flow(e.model, e.icl.prompts, e.ids("agnews")[:2]),
        PromptError, "are not the first tokens of SST-2's label words"),
    Bad("a repeated label id", lambda e: predict(e.model, e.icl.prompts, [e.ids()[0]] * 2), PromptError,
        "repeat an id"),
    Bad("label ids as a string", lambda e: predict(e.model, e.icl.prompts, "12"), PromptError,
        "label_ids must be a list of token ids, one per class, got '12'"),
    Bad("label ids as floats", lambda e: predict(e.model, e.icl.prompts, [float(i) for i in e.ids()]), PromptError,
        "label_ids must be integer token ids, got"),
    Bad("build_prompt with label_ids=[]", lambda e: build_prompt(e.model, "sst2", [Demo("good", 1)], Demo("ok", 1),
                                                                 label_ids=[]),
        PromptError, "label_ids has 0 id(s), but SST-2 has 2 classes"),
    # ---------------------------------------------------------------- prompts
    *[Bad(f"no prompts to {name}", lambda e, f=f: f(e.model, [], e.ids()), PromptError, "no prompts to")
      for name, f in PROMPT_RUNS.items()],
    *[Bad(f"a prompt past the context to {name}", lambda e, f=f: f(e.model, [e.long_prompt()], e.ids()),
          PromptError, "tokens, longer than the model's context (n_ctx = 512)") for name, f in PROMPT_RUNS.items()],
    Bad("a string where prompts are expected", lambda e: predict(e.model, "Review: fine\nSentiment:", e.ids()),
        PromptError, "prompts to predict must be Prompt objects, got the string 'Review: fine\\nSentiment:'"),
    Bad("a list of strings where prompts are expected", lambda e: label_attention(e.model, ["fine"], e.ids()),
        PromptError, "must be Prompt objects, got str 'fine'"),
    Bad("one Prompt where a list is expected", lambda e: predict(e.model, e.icl.prompts[0], e.ids()), PromptError,
        "got one Prompt: wrap it in a list, [prompt]"),
    Bad("every prompt dropped as too long", lambda e: make_icl_set(e.model, "sst2", seed=42, n_test=3, max_len=8),
        PromptError, "all 3 prompts are longer than 8 tokens"),
    Bad("no test row fits the context (by-hand example)", lambda e: example_prompt(e.model, "sst2", max_len=8),
        PromptError, "every test row's prompt is longer than 8 tokens"),
    # ---------------------------------------------------------------- sizes
    Bad("n_test=-3", lambda e: _va(e.model, ["sst2"], [42], n_test=-3, progress=False), ArgumentError,
        "n_test must be a positive integer, got -3"),
    Bad("n_test=0", lambda e: make_icl_set(e.model, "sst2", 42, n_test=0), ArgumentError,
        "n_test must be a positive integer, got 0"),
    Bad("n_test=2.5", lambda e: make_icl_set(e.model, "sst2", 42, n_test=2.5), ArgumentError,
        "n_test must be a positive integer, got 2.5 (float)"),
    Bad("k_per_class=0", lambda e: make_icl_set(e.model, "sst2", 42, n_test=3, k_per_class=0), ArgumentError,
        "k_per_class must be a positive integer, got 0"),
    Bad("k_per_class=-1", lambda e: _va(e.model, ["sst2"], [42], 3, k_per_class=-1, progress=False),
        ArgumentError, "k_per_class must be a positive integer, got -1"),
    Bad("sample_test with n=-3", lambda e: sample_test(tasks.load_split("sst2", "test"), -3, 42), ArgumentError,
        "n_test must be a positive integer, got -3"),
    Bad("a per-task size of 0", lambda e: _sal(e.model, ["sst2"], [42], n={"sst2": 0}, progress=False),
        ArgumentError, "n['sst2'] must be a positive integer, got 0"),
    Bad("a per-task size dict without the task", lambda e: _auc(e.model, ["sst2"], [42], n={"trec": 4},
                                                                        progress=False),
        ArgumentError, "n is a dict without an entry for ['sst2']"),
    # ---------------------------------------------------------------- task and seed lists
    Bad("a task name where a list is expected", lambda e: _va(e.model, "sst2", [42], 3, progress=False),
        ArgumentError, "tasks must be a list of task names, got the single task 'sst2': write ['sst2']"),
    Bad("a task name to aucroc_runs", lambda e: _auc(e.model, "trec", [42], 3, progress=False), ArgumentError,
        "got the single task 'trec': write ['trec']"),
    Bad("a task name to table1_runs", lambda e: table1_runs(e.model, "sst2", ReweightingSizes(
        seeds=(42,), n_test=3, epochs=1, per_class=4, batch_size=16)), ArgumentError,
        "got the single task 'sst2'"),
    Bad("no tasks", lambda e: _va(e.model, [], [42], 3, progress=False), ArgumentError,
        "tasks is empty: pass at least one task"),
    Bad("no tasks to saliency_runs", lambda e: _sal(e.model, [], [42], 2, progress=False), ArgumentError,
        "tasks is empty"),
    Bad("no seeds", lambda e: _va(e.model, ["sst2"], [], 3, progress=False), ArgumentError,
        "seeds is empty: pass at least one seed"),
    Bad("no seeds to isolation_runs", lambda e: isolation_runs(e.model, ["sst2"], IsolationSizes(
        seeds=(), n=2, sweep_seeds=(), k_main=1, k_sweep=(), sweep_n=None, random_n=None, random_draw="authors",
        batch_size=16), progress=False), ArgumentError, "seeds is empty"),
    Bad("loose seeds and sizes where a study's sizes go", lambda e: saliency_runs(e.model, ["sst2"], [42], 2),
        TypeError, "sizes must be the SaliencySizes that saliency_sizes(profile) returns, got list"),
    Bad("run sizes as a dict to isolation_runs", lambda e: isolation_runs(e.model, ["sst2"], {"seeds": (42,), "n": 2},
                                                                          progress=False),
        ArgumentError, "sizes must be an IsolationSizes (isolation_sizes(profile)"),
    Bad("one seed where a list is expected", lambda e: _va(e.model, ["sst2"], 42, 3, progress=False),
        ArgumentError, "seeds must be a list of integer seeds, got the single seed 42: write [42]"),
    Bad("a seed as a string", lambda e: _va(e.model, ["sst2"], ["42"], 3, progress=False),
        ArgumentError, "seeds must be integers, got '42'"),
    Bad("an unknown task in the list", lambda e: _va(e.model, ["sst2", "nope"], [42], 3, progress=False),
        UnknownTaskError, "Unknown task 'nope'"),
    Bad("paper B: no tasks", lambda e: _bias_runs(e, {}), ArgumentError, "uts is empty"),
    Bad("paper B: no seeds", lambda e: _bias_runs(e, None, seeds=[]), ArgumentError, "seeds is empty"),
    Bad("paper B: sizes as a dict", lambda e: _bias_runs_with(e, {"seeds": [42], "n_eval": 2}), TypeError,
        "EvalSizes that eval_sizes"),
    # ---------------------------------------------------------------- scores
    Bad("auc_roc with a class id past the columns", lambda e: auc_roc(np.zeros((3, 2)), np.array([0, 1, 2])),
        ValueError, "pred holds class id 2, outside 0..1 (scores has 2 class columns)"),
    Bad("auc_roc with a negative class id", lambda e: auc_roc(np.zeros((3, 2)), np.array([0, 1, -1])), ValueError,
        "pred holds class id -1, outside 0..1"),
    Bad("auc_roc with fractional class ids", lambda e: auc_roc(np.zeros((2, 2)), np.array([0.5, 1.0])), ValueError,
        "pred must hold integer class ids"),
    Bad("aucroc_per_layer with a class id past the columns",
        lambda e: aucroc_per_layer(torch.zeros(3, 4, 2), torch.tensor([0, 1, 5])), ValueError,
        "pred holds class id 5, outside 0..1"),
    Bad("auc_roc of no inputs", lambda e: auc_roc(np.zeros((0, 2)), np.zeros(0, dtype=int)), ValueError,
        "no inputs to score"),
    Bad("relative_flow of no inputs", lambda e: relative_flow(torch.zeros(0, 3, 3)), ValueError,
        "run saliency_flow on at least one prompt"),
    # ---------------------------------------------------------------- the public API at its boundary
    Bad("get_task(None)", lambda e: tasks.get_task(None), UnknownTaskError, "a task is a task name such as 'sst2'"),
    Bad("a string seed to make_icl_set", lambda e: make_icl_set(e.model, "sst2", "42", n_test=2), ArgumentError,
        "seed must be an integer such as 42, got '42' (str)"),
    Bad("a float seed", lambda e: make_icl_set(e.model, "sst2", 4.5, n_test=2), ArgumentError,
        "seed must be an integer such as 42, got 4.5"),
    Bad("a negative seed to make_icl_set", lambda e: make_icl_set(e.model, "sst2", -3, n_test=2), ArgumentError,
        "seed must be 0 or more"),
    Bad("seed=None", lambda e: make_icl_set(e.model, "sst2", None, n_test=2), ArgumentError,
        "seed is None, which would draw unseeded prompts"),
    Bad("a model name where a model goes", lambda e: _va("gemma", ["sst2"], [42], n_test=2, progress=False),
        ArgumentError, "got the name 'gemma': load it first, model = load_model('gemma')"),
    Bad("model=None", lambda e: _va(None, ["sst2"], [42], n_test=2, progress=False), ArgumentError,
        "model must be a HookedTransformer"),
    Bad("NaN scores into auc_roc", lambda e: auc_roc(np.array([[np.nan, 1.0], [0.5, 0.2]]), np.array([0, 1])),
        ValueError, "scores hold 1 NaN or infinite values"),
    Bad("NaN scores into aucroc_per_layer, 3 classes",
        lambda e: aucroc_per_layer(torch.tensor([[[float("nan"), 1.0, 0.0]], [[0.2, 0.5, 0.3]], [[0.1, 0.1, 0.8]]]),
                                   torch.tensor([0, 1, 2])), ValueError, "scores hold 1 NaN or infinite values"),
    Bad("NaN scores into aucroc_per_layer, 2 classes",
        lambda e: aucroc_per_layer(torch.tensor([[[float("nan"), 1.0]], [[0.2, 0.5]]]), torch.tensor([0, 1])),
        ValueError, "scores hold 1 NaN or infinite values"),
    Bad("relative_flow of all-zero flows", lambda e: relative_flow(torch.zeros(4, 5, 3)), ValueError,
        "layer(s) [0, 1, 2, 3, 4] carry no flow at all"),
    Bad("label_token_ids(None, ...)", lambda e: tasks.label_token_ids(None, "sst2"), ArgumentError,
        "tokenizer must be a tokenizer (a model's model.tokenizer), got NoneType"),
    Bad("label_token_ids(model, ...)", lambda e: tasks.label_token_ids(e.model, "sst2"), ArgumentError,
        "pass model.tokenizer"),
    Bad("a label class out of range", lambda e: build_prompt(e.model, "sst2", [Demo("a", 5)], Demo("b", 0)),
        PromptError, "demonstration 0 has label 5, but SST-2 has classes 0..1"),
    Bad("Demo(label=-1)", lambda e: build_prompt(e.model, "sst2", [Demo("a", 1), Demo("c", -1)], "b"), PromptError,
        "demonstration 1 has label -1"),
    Bad("tuples as demos", lambda e: build_prompt(e.model, "sst2", [("a", 0)], "b"), PromptError,
        "must be a Demo(text, label) (helpers.core.prompts.Demo), got tuple ('a', 0): write Demo('a', 0)"),
    Bad("a PromptSet where a list of prompts goes", lambda e: predict(e.model, e.icl, e.icl.label_ids), PromptError,
        "prompts to predict must be a list, got PromptSet"),
    Bad("a generator of prompts", lambda e: predict(e.model, (p for p in e.icl.prompts), e.icl.label_ids),
        PromptError, "prompts to predict must be a list, got generator"),
    Bad("relative_flow of the wrong rank", lambda e: relative_flow(torch.zeros(3, 3)), ArgumentError,
        "scores must be a tensor [n, layer, 3]"),
    Bad("relative_flow of negative scores", lambda e: relative_flow(-torch.ones(2, 3, 3)), ArgumentError,
        "scores must be 0 or more"),
    Bad("batch_size=0", lambda e: predict(e.model, e.icl.prompts, e.icl.label_ids, batch_size=0), ArgumentError,
        "batch_size must be a positive integer, got 0"),
    Bad("batch_size=-1", lambda e: predict(e.model, e.icl.prompts, e.icl.label_ids, batch_size=-1), ArgumentError,
        "batch_size must be a positive integer, got -1"),
    Bad("batch_size=2.5", lambda e: predict(e.model, e.icl.prompts, e.icl.label_ids, batch_size=2.5), ArgumentError,
        "batch_size must be a positive integer, got 2.5"),
    Bad("load_model on cuda without CUDA", lambda e: _cuda_on_cpu(), ModelLoadError,
        "device='cuda' asked, but this torch is a CPU build: pass device='cpu'"),
    Bad("an unknown task lists the shipped ones", lambda e: tasks.get_task("sst3"), UnknownTaskError,
        "'rotten_tomatoes'"),
    Bad("a spec naming a data file that does not exist",
        lambda e: tasks.register_task({"name": "gone", "template": "T: {text}\nL: {label}", "label_words": ["a", "b"],
                                       "data": {"test": "nowhere.jsonl"}}, base=e.tmp), SpecError,
        "its train data file"),
    # ---------------------------------------------------------------- repeats that would double-count inputs
    Bad("the same seed twice", lambda e: _va(e.model, ["sst2"], [42, 42], n_test=2, progress=False),
        ArgumentError, "seeds repeat [42]: a seed is one draw of demonstrations"),
    Bad("the same task twice", lambda e: _va(e.model, ["sst2", "sst2"], [42], n_test=2, progress=False),
        ArgumentError, "tasks names ['sst2'] more than once"),
    Bad("a negative seed", lambda e: _va(e.model, ["sst2"], [-1], n_test=2, progress=False),
        ArgumentError, "seeds must be 0 or more"),
]


def _cuda_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from helpers.core.models import load_model

    return load_model("gemma", device="cuda")  # refused before any weights are read


def _with_env(name: str, value: str, fn):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(name, value)
        return fn()


def _bias_runs_with(e, sizes):
    from helpers.core.unrelated import UnrelatedTask, unrelated_task
    from helpers.protocols.head_biases import bias_runs

    full = unrelated_task("sst2")
    uts = {"sst2": UnrelatedTask(full.task, full.train.select(range(50)), full.test.select(range(10)), "sst2", (0, 1))}
    return bias_runs(e.model, uts, {"sst2": []}, sizes)


def _bias_runs(e, uts, seeds=(42,)):
    from helpers.core.unrelated import EvalSizes, UnrelatedTask, unrelated_task
    from helpers.protocols.head_biases import bias_runs

    if uts is None:
        full = unrelated_task("sst2")
        uts = {"sst2": UnrelatedTask(full.task, full.train.select(range(50)), full.test.select(range(10)), "sst2",
                                     (0, 1))}
    return bias_runs(e.model, uts, {t: [] for t in uts}, EvalSizes(n_eval=2, seeds=[42], k_per_class=2), seeds=seeds)


@pytest.fixture(scope="module")
def env(tiny_models, tmp_path_factory):
    m = tiny_models["gpt2"]
    return Env(m, make_icl_set(m, "sst2", seed=42, n_test=3), tmp_path_factory.mktemp("bad-input"))


def test_the_rows_have_distinct_ids():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_its_message(env, case, monkeypatch, tmp_path):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))  # nothing is stored, and nothing old served
    with pytest.raises(case.error, match=re.escape(case.message)):
        case.call(env)
    assert not list((tmp_path / "store").rglob("*.pt")), "a refused call stored a result"


def test_more_inputs_than_the_pool_holds_says_so(env):
    from helpers.core.prompts import PoolSizeWarning

    with pytest.warns(PoolSizeWarning, match="n_test=1000000 asks for more inputs than the test pool holds"):
        make_icl_set(env.model, "sst2", 42, n_test=10**6)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", None, True])
@pytest.mark.parametrize("step", ["vanilla_predictions", "vanilla_accuracy", "saliency_runs", "aucroc_runs"])
def test_a_bad_batch_size_is_refused_on_a_full_store_too(env, monkeypatch, tmp_path, step, bad):
    """The refusal comes before the store is read: a stored result does not let a bad batch size through."""
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    run = {"vanilla_predictions": lambda b: vanilla_predictions(env.model, env.icl.prompts, env.icl.label_ids,
                                                                batch_size=b),
           "vanilla_accuracy": lambda b: _va(env.model, ["sst2"], [42], n_test=2, batch_size=b,
                                                          progress=False),
           "saliency_runs": lambda b: _sal(env.model, ["sst2"], [42], n=1, batch_size=b, progress=False),
           "aucroc_runs": lambda b: _auc(env.model, ["sst2"], [42], n=2, batch_size=b, progress=False)}[step]
    run(2)  # stored now
    with pytest.raises(ArgumentError, match="batch_size must be a positive integer"):
        run(bad)


def test_validation_runs_before_the_store_is_consulted(env, monkeypatch, tmp_path):
    """Float label ids are refused on a fresh store and still refused once the integer result is stored (the
    check used to run only on a miss, and the store's key rounds the ids)."""
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "store"))
    floats = [float(i) for i in env.icl.label_ids]
    with pytest.raises(PromptError, match="label_ids must be integer token ids"):
        vanilla_predictions(env.model, env.icl.prompts, floats)
    vanilla_predictions(env.model, env.icl.prompts, env.icl.label_ids)  # stored now
    with pytest.raises(PromptError, match="label_ids must be integer token ids"):
        vanilla_predictions(env.model, env.icl.prompts, floats)


# ---------------------------------------------------------------- inputs that now work instead of crashing

def test_by_hand_example_skips_a_row_longer_than_the_context(env):
    """Notebooks 00 and 08 show :func:`example_prompt`: the first test row (seed order) whose prompt fits."""
    long_row = {"text": "a very long review " * 200, "label": 0}
    path = env.task([long_row] * 5 + [{"text": "short and fine", "label": 1}],
                    train=[{"text": "good", "label": 1}, {"text": "bad", "label": 0}])
    p = example_prompt(env.model, tasks.load_task_spec(path))
    assert len(p) <= env.model.cfg.n_ctx and p.query.text == "short and fine"
    # when the first row fits, it is sample_test's first row, as before
    first = sample_test(tasks.load_split("sst2", "test"), 1, seed=42)[0]
    assert example_prompt(env.model, "sst2").query == first


def test_an_own_task_with_long_rows_drops_and_counts_them(env):
    long_row = {"text": "a very long review " * 200, "label": 0}
    path = env.task([long_row, {"text": "short", "label": 1}, {"text": "fine", "label": 0}])
    s = make_icl_set(env.model, tasks.load_task_spec(path), seed=42, n_test=3)
    assert (len(s.prompts), s.n_dropped) == (2, 1)


# ================================================================== the scripts: preflight, run_all, make
sys.path.insert(0, str(Path(__file__).resolve().parent))


from test_preflight import _load  # noqa: E402  (scripts/<name>.py as a module)


@pytest.fixture(scope="module")
def pf():
    return _load("preflight")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICL_") or k in ("ICL_ANCHORS_CACHE",)}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


# ------------------------------------------------------------------------------------------------ settings

SETTINGS = [  # (variable, value, message)
    ("ICL_PROFILE", "bogus", "ICL_PROFILE='bogus': unknown profile; choose one of default, paper, smoke."),
    ("ICL_DTYPE", "bogus", "ICL_DTYPE='bogus': not a supported dtype; choose one of float32, bfloat16, float16 "
                           "(default float32)."),
    ("ICL_DTYPE", "int8", "ICL_DTYPE='int8': not a supported dtype"),
    ("ICL_TASKS", "sst2,imdb", "ICL_TASKS names unknown tasks ['imdb']"),
    ("ICL_OWN_TASK", "nope.json", "ICL_OWN_TASK='nope.json': task spec"),
    ("ICL_RECOMPUTE", "yes", "ICL_RECOMPUTE='yes': give 1 (recompute) or 0 (read the store)."),
    ("ICL_RECOMPUTE", "false", "ICL_RECOMPUTE='false': give 1 (recompute) or 0 (read the store)."),
    ("ICL_BATCH_TOKENS", "abc", "ICL_BATCH_TOKENS='abc': give a whole number of 0 or more."),
    ("ICL_BATCH_TOKENS", "-5", "ICL_BATCH_TOKENS='-5': give a whole number of 0 or more."),
    ("ICL_CELL_TIMEOUT", "0", "ICL_CELL_TIMEOUT='0': give a whole number of 1 or more."),
    ("ICL_CELL_TIMEOUT", "1h", "ICL_CELL_TIMEOUT='1h': give a whole number of 1 or more."),
    ("ICL_HUB_TIMEOUT", "-1", "ICL_HUB_TIMEOUT='-1': give a positive number of seconds."),
    ("ICL_HUB_TIMEOUT", "inf", "ICL_HUB_TIMEOUT='inf': give a positive number of seconds."),
    ("ICL_MODEL", " ", "ICL_MODEL=' ': empty; give a model name or a local model folder, or unset it."),
    ("ICL_ANCHORS_DATA", "/nonexistent/data", "ICL_ANCHORS_DATA='/nonexistent/data': no such folder"),
    ("ICL_RESULTS_DIR", str(ROOT / "README.md"), "is a file, not a folder."),
    ("ICL_MODELS", "gemma", "ICL_MODELS is not a setting of this project (did you mean ICL_MODEL?); unset it."),
    ("ICL_PROFILES", "smoke", "ICL_PROFILES is not a setting of this project (did you mean ICL_PROFILE?)"),
    ("ICL_SEED", "1", "ICL_SEED is not a setting of this project; unset it."),
]


@pytest.mark.parametrize("name,value,message", SETTINGS, ids=[f"{n}={v}" for n, v, _ in SETTINGS])
def test_setting_that_cannot_be_honoured_is_refused(name, value, message):
    from helpers.study.config import check_variable

    got = check_variable(name, value)
    assert got is not None and message in got, got


def test_good_settings_pass(monkeypatch):
    from helpers.study.config import check_environment

    for k in [k for k in os.environ if k.startswith("ICL_")]:
        monkeypatch.delenv(k)
    for name, value in (("ICL_PROFILE", "smoke"), ("ICL_DTYPE", "bfloat16"), ("ICL_TASKS", "sst2, trec"),
                        ("ICL_RECOMPUTE", "1"), ("ICL_BATCH_TOKENS", "0"), ("ICL_HUB_TIMEOUT", "2.5"),
                        ("ICL_CELL_TIMEOUT", "60"), ("ICL_OWN_TASK", "rotten_tomatoes"), ("ICL_MODEL", "")):
        monkeypatch.setenv(name, value)
    assert check_environment() == []


def test_every_variable_is_in_the_one_settings_table():
    """`grep -o 'ICL_[A-Z_]*'` over helpers, scripts, notebooks and the Makefile: each is in config.VARIABLES, and
    docs/your-own.md holds exactly config.settings_table(), its one table of them."""
    import re

    from helpers.study.config import VARIABLES, settings_table

    used = set()
    for folder in ("helpers", "scripts", "notebooks"):
        for f in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"ICL_[A-Z0-9_]*[A-Z0-9]", f.read_text()))
    used |= set(re.findall(r"ICL_[A-Z0-9_]*[A-Z0-9]", (ROOT / "Makefile").read_text()))
    assert used - set(VARIABLES) == set(), "variables read but not in helpers.study.config.VARIABLES"
    page = (ROOT / "docs" / "your-own.md").read_text()
    assert settings_table() in page, "docs/your-own.md's Settings table differs from helpers.study.config.settings_table()"
    tables = [line for line in page.splitlines() if line.startswith("| `ICL_")]
    assert len(tables) == len(VARIABLES), "one table, one row per variable"


# ------------------------------------------------------------------------------------------------ task rows

GOOD = b'{"text": "fine", "label": 1}\n{"text": "bad", "label": 0}\n'
ROWS = [  # (test.jsonl bytes, message of helpers.core.task_data.read_rows; the file's path comes before it)
    (b'{"label": 1}\n', ", line 1: no 'text' field (fields: ['label']); each line must be one JSON object"),
    (GOOD + b'{"text": "", "label": 1}\n', ", line 3: 'text' must be a non-empty string, got ''"),
    (b'{"text": "   ", "label": 1}\n', ", line 1: 'text' must be a non-empty string, got '   '"),
    (b'{"text": 5, "label": 1}\n', ", line 1: 'text' must be a non-empty string, got 5"),
    (b'{"text": null, "label": 1}\n', ", line 1: 'text' must be a non-empty string, got None"),
    (b'{"text": "a"}\n', ", line 1: no 'label' field (fields: ['text'])"),
    (b'{"text": "a", "label": "1"}\n', ", line 1: 'label' must be an integer class id, got '1'"),
    (b'{"text": "a", "label": 1.0}\n', ", line 1: 'label' must be an integer class id, got 1.0"),
    (b'{"text": "a", "label": true}\n', ", line 1: 'label' must be an integer class id, got True"),
    (GOOD + b'{"text": "a", "label": 2}\n', ", line 3: label 2 is outside 0..1 (the task has 2 label words"),
    (b'{"text": "a", "label": -1}\n', ", line 1: label -1 is outside 0..1 (the task has 2 label words"),
    (GOOD + b'{"text": "caf\xe9", "label": 0}\n', ", line 3: not UTF-8 text (byte 0xe9 at byte 70); save the file as UTF-8"),
    (b'\xff\xfe{"text": "a", "label": 0}\n', ", line 1: not UTF-8 text (byte 0xff at byte 0)"),
    (GOOD + b'{"text": "a", "label": 0\n', ", line 3: not valid JSON (Expecting ',' delimiter, column 25)"),
    (b'["a", 0]\n', ", line 1: a JSON list, not an object"),
    (b"", " holds no rows; each line must be one JSON object with a non-empty string 'text'"),
    (b"\n\n  \n", " holds no rows"),
]


def _spec_task(folder: Path, test_bytes: bytes, words=("Negative", "Positive"), record: bool = True) -> Path:
    """A spec task in ``folder`` with a good train file, ``test_bytes`` as its test file and (``record``) their
    checksums recorded."""
    from helpers.core.task_data import file_sha256

    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "task.json"
    spec.write_text(json.dumps({"name": f"bad_{folder.name}", "template": "Review: {text}\nSentiment: {label}",
                                "label_words": list(words)}))
    (folder / "train.jsonl").write_bytes(GOOD * 4)
    (folder / "test.jsonl").write_bytes(test_bytes)
    if record:
        sums = {n: {"sha256": file_sha256(folder / n)} for n in ("train.jsonl", "test.jsonl")}
        (folder / "checksums.json").write_text(json.dumps(sums))
    return spec


@pytest.mark.parametrize("data,message", ROWS, ids=[f"row{i}" for i in range(len(ROWS))])
def test_bad_data_row_is_named_with_its_file_and_line(pf, tmp_path, data, message):
    spec = _spec_task(tmp_path / "t", data)
    problems = pf.check_task_data(str(spec))
    assert len(problems) == 1, problems
    path = str(tmp_path / "t" / "test.jsonl")
    assert f"(test): {path}{message}" in problems[0], problems[0]
    assert f"python -m helpers.core.tasks --checksums {spec}" in problems[0]  # what to do


def test_a_train_split_without_a_class_is_caught_by_preflight_and_named_by_the_loader(pf, tmp_path, env):
    """No training row of one class: preflight names the file and the class before any notebook runs, and the
    draw of demonstrations (what notebook 00 met) names the training file too."""
    from helpers.core.prompts import sample_demos
    from helpers.core.task_data import file_sha256

    spec = _spec_task(tmp_path / "t", GOOD * 4)
    only_negative = b"".join(json.dumps({"text": f"dull {i}", "label": 0}).encode() + b"\n" for i in range(6))
    (tmp_path / "t" / "train.jsonl").write_bytes(only_negative)
    (tmp_path / "t" / "checksums.json").write_text(json.dumps(
        {n: {"sha256": file_sha256(tmp_path / "t" / n)} for n in ("train.jsonl", "test.jsonl")}))
    problems = pf.check_task_data(str(spec))
    train = tmp_path / "t" / "train.jsonl"
    assert problems == [f"bad_t (train): {train} has no rows of class 1 ('Positive'): every prompt shows a "
                        "demonstration of each class, so add rows of it to that file (then record its checksums "
                        "again)"], problems
    task = tasks.load_task_spec(spec)
    with pytest.raises(PromptError, match=f"the training pool {train} has 0 row\\(s\\) of class 1 \\('Positive'\\)"):
        sample_demos(tasks.load_split(task, "train"), task, 1, seed=42)


def test_a_spec_may_not_take_a_shipped_tasks_name(tmp_path):
    """A copy of a shipped spec with its template changed but its name kept would replace that task in every run
    that names it: refused, naming the shipped task; the shipped spec itself still loads."""
    shipped = ROOT / "data" / "rotten_tomatoes" / "task.json"
    spec = json.loads(shipped.read_text())
    (tmp_path / "rt").mkdir()
    copy = tmp_path / "rt" / "task.json"
    copy.write_text(json.dumps({**spec, "template": "Film: {text}\nVerdict: {label}"}))
    with pytest.raises(SpecError, match="'rotten_tomatoes' is the name of the shipped task in .*data/rotten_tomatoes"):
        tasks.load_task_spec(copy)
    with pytest.raises(SpecError, match="is the name of the shipped task"):
        tasks.record_checksums(copy)
    assert tasks.load_task_spec(shipped).name == "rotten_tomatoes"


def test_edited_data_fails_its_checksum(pf, tmp_path):
    spec = _spec_task(tmp_path / "t", GOOD)
    (tmp_path / "t" / "test.jsonl").write_bytes(GOOD.replace(b'"label": 1', b'"label": 0'))
    [problem] = pf.check_task_data(str(spec))
    assert "does not match its recorded checksum" in problem and "corrupt or was edited" in problem, problem


def test_edited_shipped_data_fails_before_any_model_loads(pf, tmp_path, monkeypatch):
    """A shipped task's file edited in a copy of data/: preflight names it and says how to restore it."""
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data" / "sst2", data / "sst2")
    shutil.copy(ROOT / "data" / "checksums.json", data / "checksums.json")
    monkeypatch.setenv("ICL_ANCHORS_DATA", str(data))
    assert pf.check_task_data("sst2") == []
    test = data / "sst2" / "test.jsonl"
    test.write_text(test.read_text().replace('"label": 1', '"label": 0', 1))
    [problem] = pf.check_task_data("sst2")
    assert problem.startswith("sst2 (test): ") and "does not match its recorded checksum" in problem
    assert "git checkout -- data/" in problem
    lines = test.read_text().splitlines()
    test.write_text("\n".join(lines[:5] + ['{"text": "x", "label": 7}'] + lines[5:]) + "\n")
    [problem] = pf.check_task_data("sst2")
    assert f"{test}, line 6: label 7 is outside 0..1 (the task has 2 label words" in problem, problem


def test_spec_without_checksums_and_malformed_spec(pf, tmp_path):
    spec = _spec_task(tmp_path / "t", GOOD, record=False)
    prof = pf.check_profile("smoke")
    with pytest.raises(pf.PreflightError, match=r"no sha256 checksum is recorded.*--checksums"):
        pf.check_tasks(prof, str(spec))
    spec.write_text('{"name": "x", "template": "{text} {label}"')
    with pytest.raises(pf.PreflightError, match=r"is not valid JSON"):
        pf.check_tasks(prof, str(spec))
    spec.write_text(json.dumps({"name": "x", "template": "Review: {text}", "label_words": ["a", "b"]}))
    with pytest.raises(pf.PreflightError, match=r"has no \{label\}"):
        pf.check_tasks(prof, str(spec))
    with pytest.raises(pf.PreflightError, match=r"ICL_OWN_TASK='nope/task.json': task spec .* does not exist"):
        pf.check_own_task("nope/task.json")
    spec.write_bytes(b'{"name": "caf\xe9", "template": "{text} {label}", "label_words": ["a", "b"]}')
    with pytest.raises(pf.PreflightError, match=r"ICL_TASKS=.*: a spec file is not UTF-8 \('utf-8' codec"):
        pf.check_tasks(prof, str(spec))
    spec.write_text("[1, 2]")
    with pytest.raises(pf.PreflightError, match=r"must hold one JSON object \(the task spec\), not list"):
        pf.check_tasks(prof, str(spec))
    toml = tmp_path / "t" / "task.toml"
    toml.write_text('name = "x"\ntemplate = "{text} {label}"\nlabel_words = ["a", "b"\n')
    with pytest.raises(pf.PreflightError, match=r"is not valid TOML"):
        pf.check_tasks(prof, str(toml))


def test_label_words_sharing_a_first_token_are_refused(pf, tmp_path):
    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    spec = _spec_task(tmp_path / "t", GOOD, words=("Good", "Goodness"))
    assert tok(" Good")["input_ids"][0] == tok(" Goodness")["input_ids"][0]
    [problem] = pf.check_label_words(tok, [str(spec)])
    assert "label words ' Good' and ' Goodness' share their first token" in problem, problem
    assert pf.check_label_words(tok, ["sst2", "trec"]) == []


# --------------------------------------------------------------------------------------------- model folders

def _tiny_folder(path: Path) -> Path:
    from test_local_models import save_tiny

    save_tiny("gpt2", path)
    return path


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return _tiny_folder(tmp_path_factory.mktemp("models") / "tiny-gpt2")


def _break(kind: str, good: Path, path: Path) -> Path:
    shutil.copytree(good, path)
    if kind == "no config":
        (path / "config.json").unlink()
    elif kind == "bad config":
        (path / "config.json").write_text("{")
    elif kind == "unsupported":
        cfg = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertForMaskedLM"]}))
    elif kind == "no architecture":
        cfg = json.loads((path / "config.json").read_text())
        cfg.pop("architectures")
        (path / "config.json").write_text(json.dumps(cfg))
    elif kind == "no weights":
        (path / "model.safetensors").unlink()
    elif kind == "missing shard":
        (path / "model.safetensors").rename(path / "model-00001-of-00002.safetensors")
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    elif kind == "no tokenizer":
        for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
            (path / f).unlink(missing_ok=True)
    elif kind == "broken tokenizer":
        (path / "tokenizer.json").write_text("{")
    elif kind == "truncated weights":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif kind == "a file":
        shutil.rmtree(path)
        path.write_text("not a folder")
    return path


MODEL_FOLDERS = [  # (how the folder is broken, message)
    ("missing", "does not exist. Save a model with `model.save_pretrained(d)`"),
    ("a file", "is a file, not a model directory."),
    ("no config", "has no config.json, so it is not a Hugging Face model directory."),
    ("bad config", "config.json' is not valid JSON"),
    ("unsupported", "is a BertForMaskedLM, which TransformerLens 3.9.0 cannot load as a HookedTransformer here. "
                    "Supported architectures:"),
    ("no architecture", "names no architecture ('architectures' is missing)"),
    ("no weights", "has no weights (model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
                   "pytorch_model.bin.index.json). Save the model there with `model.save_pretrained(d)`"),
    ("missing shard", "the weight shards ['model-00002-of-00002.safetensors'] listed in "
                      "model.safetensors.index.json are missing."),
    ("no tokenizer", "has no tokenizer files"),
    ("broken tokenizer", "Could not load a tokenizer from"),
    ("truncated weights", "cannot be read as safetensors"),
]


@pytest.mark.parametrize("kind,message", MODEL_FOLDERS, ids=[k for k, _ in MODEL_FOLDERS])
def test_broken_model_folder_is_refused_by_preflight(pf, tiny_folder, tmp_path, kind, message):
    path = tmp_path / "m" if kind == "missing" else _break(kind, tiny_folder, tmp_path / "m")
    with pytest.raises(pf.PreflightError) as e:
        pf.check_model(str(path))
    assert message in str(e.value), str(e.value)


def test_preflight_refuses_a_model_too_shallow_for_notebook_02_and_unwritable_folders(pf, tiny_folder, tmp_path):
    """A 2-layer folder passes for notebooks without 02 and fails, saying what to do, with 02; read-only results
    and store folders fail preflight instead of a raw PermissionError mid-run."""
    import os

    from helpers.study.profiles import get_profile
    from helpers.study.results import unwritable

    prof = get_profile("smoke")
    pf.check_model(str(tiny_folder))
    layers = pf.LOCAL_LAYERS[str(tiny_folder.resolve())]
    assert layers < 7
    why = pf.check_depth("tiny", layers, prof, ["00_icl_setting", "02_shallow_isolation"])
    assert f"has {layers}" in why and "NOTEBOOKS=" in why
    assert pf.check_depth("tiny", layers, prof, ["00_icl_setting", "03_deep_aucroc"]) is None
    (tmp_path / "a-file").write_text("x")
    assert "cannot be created" in unwritable(tmp_path / "a-file" / "results")  # under a file: refused as root too
    assert unwritable(tmp_path / "new" / "results") is None and not (tmp_path / "new").exists()  # creates nothing
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores the mode
            pytest.skip("this user can write to a read-only folder")
        assert "is not writable" in unwritable(ro / "results") and unwritable(tmp_path / "ok") is None
    finally:
        ro.chmod(0o700)


def test_an_unwritable_results_folder_is_named_not_a_traceback(tmp_path, monkeypatch):
    """results_dir() (what a notebook run by nbconvert calls) and run_all both name the folder and the fix."""
    from helpers.study.results import ResultsFolderError, results_dir

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path / "a-file" / "results"))
    with pytest.raises(ResultsFolderError, match="cannot be created: .*a-file is not a writable folder; point it"):
        results_dir("google/gemma-3-270m", "smoke")
    r = subprocess.run([sys.executable, "scripts/run_all.py", "--profile", "smoke", "--models", "gemma",
                        "--notebooks", "00"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ICL_RESULTS_DIR": str(tmp_path / "a-file" / "results")})
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert "run_all: the results folder: " in r.stdout and "nothing was run" in r.stdout, r.stdout[-2000:]


def test_model_folder_passes_with_its_size(pf, tiny_folder, monkeypatch):
    monkeypatch.setattr(sys.modules["preflight_models"], "hub_reachable", lambda timeout=5.0: pytest.fail("a folder never asks the hub"))
    canon, where = pf.check_model(str(tiny_folder))
    assert canon == str(tiny_folder.resolve())
    assert where.startswith("local model folder (GPT2LMHeadModel, ") and "tokenizer of 50257 tokens" in where
    assert pf.n_params(canon) > 0 and pf.disk_need(canon) == 0.0
    tok, why = pf.tokenizer_offline(canon)
    assert why is None and pf.check_label_words(tok, ["sst2", "trec", "agnews", "tweet_emotion"]) == []


# ---------------------------------------------------------------------------------------------- commands

def _run(script: str, args: list[str], timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], env=_env(**env),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


COMMANDS = [  # (script, arguments, environment, exit code, message)
    ("run_all.py", ["--models", "gemma"], {"ICL_PROFILE": "bogus"}, 2,
     "run_all: ICL_PROFILE='bogus': unknown profile; choose one of default, paper, smoke."),
    ("run_all.py", ["--profile", "bogus", "--models", "gemma"], {}, 2,
     "run_all: ICL_PROFILE='bogus': unknown profile"),
    ("run_all.py", ["--models", "gemma"], {"ICL_DTYPE": "bogus"}, 2,
     "run_all: ICL_DTYPE='bogus': not a supported dtype; choose one of float32, bfloat16, float16"),
    ("run_all.py", ["--models", "gemma"], {"ICL_MODELS": "smollm2"}, 2,
     "run_all: ICL_MODELS is not a setting of this project (did you mean ICL_MODEL?)"),
    ("run_all.py", ["--models", "gemmma"], {}, 2, "run_all: Unknown model 'gemmma'"),
    ("run_all.py", [], {"ICL_MODEL": "./no/such/folder"}, 2, "does not exist. Save a model with"),
    ("run_all.py", ["--models", "gemma"], {"ICL_TASKS": "sst2,imdb"}, 2, "ICL_TASKS names unknown tasks ['imdb']"),
    ("run_all.py", ["--models", "gemma", "--timeout", "0"], {}, 2, "run_all: --timeout=0: give a positive whole number of seconds per notebook cell."),
    ("preflight.py", ["--models", "gemma"], {"ICL_DTYPE": "bogus"}, 1,
     "FAIL  settings: ICL_DTYPE='bogus': not a supported dtype"),
    ("preflight.py", ["--models", "gemma"], {"ICL_PROFILE": "bogus"}, 1, "FAIL  profile: Unknown profile 'bogus'"),
    ("preflight.py", ["--models", "gemma"], {"ICL_MODELS": "smollm2"}, 1,
     "FAIL  settings: ICL_MODELS is not a setting of this project (did you mean ICL_MODEL?)"),
    ("preflight.py", ["--models", "gemma"], {"ICL_TASKS": "sst2,imdb"}, 1,
     "FAIL  tasks: ICL_TASKS names unknown tasks ['imdb']"),
    ("preflight.py", ["--models", "gemma"], {"ICL_RECOMPUTE": "true"}, 1,
     "FAIL  settings: ICL_RECOMPUTE='true': give 1 (recompute) or 0 (read the store)."),
    ("preflight.py", ["--models", "gemma", "--notebooks", "08"], {"ICL_OWN_TASK": "no/such/task.json"}, 1,
     "FAIL  own task: ICL_OWN_TASK='no/such/task.json': task spec"),
]


@pytest.mark.parametrize("script,args,env,code,message", COMMANDS,
                         ids=[f"{s}-{' '.join(a)}-{e}" for s, a, e, _, _ in COMMANDS])
def test_command_refuses_bad_input_before_anything_runs(tmp_path, monkeypatch, capsys, script, args, env, code,
                                                        message):
    """The script's main() in this process (seconds, not a fresh interpreter per case), in an environment of
    its own; the first two cases also run as commands below."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ICL_") or k == "ICL_ANCHORS_CACHE"}
    monkeypatch.setattr(os, "environ", {**environ, **env})  # main() sets variables: they go with this copy
    rc = _load(script.removesuffix(".py")).main([*args, "--out", str(tmp_path / "results")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc == code, text
    assert message in text, text
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.ipynb"))


@pytest.mark.parametrize("script,jobs,message", [("run_all.py", "-2", "JOBS must be 0 (one worker per model) or more"),
                                                ("preflight.py", "two", "JOBS must be a whole number")])
def test_a_negative_or_non_numeric_jobs_is_refused(tmp_path, script, jobs, message):
    r = _run(script, ["--models", "gemma", "--jobs", jobs, "--out", str(tmp_path / "results")])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("script,args,env,code,message", [COMMANDS[0], COMMANDS[8]],
                         ids=["run_all ICL_PROFILE=bogus", "preflight ICL_DTYPE=bogus"])
def test_command_line_gives_a_message_not_a_traceback(tmp_path, script, args, env, code, message):
    r = _run(script, [*args, "--out", str(tmp_path / "results")], **env)
    out = r.stdout + r.stderr
    assert r.returncode == code and message in out and "Traceback" not in out, out


def test_preflight_passes_offline_on_a_local_folder(tiny_folder, tmp_path):
    """`make preflight MODELS=<local folder>` without a network: the folder, its tokenizer and the tasks' label
    words are checked, the hub is never asked."""
    args = ["--profile", "smoke", "--models", str(tiny_folder), "--out", str(tmp_path), "--ignore-resources"]
    env = dict(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    # all notebooks and tasks: the 2-layer folder cannot run notebook 02 (k = 5 layers), and its 128-token context
    # holds no AGNews prompt; preflight says both before the run
    r = _run("preflight.py", args, **env)
    assert r.returncode == 1 and "notebook 02 isolates up to 5 layers" in r.stdout, r.stdout + r.stderr
    assert "context is 128 tokens, but even the shortest AGNews prompt" in r.stdout, r.stdout
    r = _run("preflight.py", [*args, "--notebooks", "00", "01", "03", "08"], **env, ICL_TASKS="sst2,trec")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"ok    model {tiny_folder}: local model folder (GPT2LMHeadModel" in out
    assert f"ok    label words {tiny_folder}: distinct first tokens in 3 task(s)" in out
    for t in ("sst2", "trec", "rotten_tomatoes"):
        assert f"ok    task {t}: spec, checksums and every row" in out, out
    assert "preflight passed" in out


def test_preflight_fails_on_a_label_collision_before_loading(tiny_folder, tmp_path):
    spec = _spec_task(tmp_path / "t", GOOD, words=("Good", "Goodness"))
    r = _run("preflight.py", ["--profile", "smoke", "--models", str(tiny_folder), "--out", str(tmp_path / "r"),
                              "--notebooks", "00"], ICL_TASKS=str(spec), HF_HUB_OFFLINE="1")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"FAIL  label words {tiny_folder}: bad_t: label words ' Good' and ' Goodness' share their first token" in out


def _probe_notebooks(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cells = {
        "00_probe": ["import os\nfrom helpers.study.results import save_metrics, summary_row\n"
                     "save_metrics('00_probe', {'summary': [summary_row('probe', 1.0, os.environ['ICL_MODEL'], "
                     "'replicates')], 'model': os.environ['ICL_MODEL']})"],
        "01_slow": ["import os, time\nopen(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\ntime.sleep(300)"],
        "02_never": ["open(os.environ['PID_FILE'] + '.never', 'w').write('ran')"],
    }
    for stem, sources in cells.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / f"{stem}.ipynb")
    return folder


@pytest.mark.slow
def test_icl_model_without_models_runs_that_model(tiny_folder, tmp_path):
    """`ICL_MODEL=<folder> scripts/run_all.py` (no --models) runs the folder, not Gemma."""
    nbs = _probe_notebooks(tmp_path / "nbs")
    r = _run("run_all.py", ["--profile", "smoke", "--notebooks-dir", str(nbs), "--notebooks", "00", "--out",
                            str(tmp_path / "results")], ICL_MODEL=str(tiny_folder),
             JUPYTER_DATA_DIR=str(tmp_path / "jd"))
    assert r.returncode == 0, r.stdout + r.stderr
    [met] = list((tmp_path / "results").glob("local-tiny-gpt2-*/smoke/metrics/00_probe.json"))
    assert json.loads(met.read_text())["model"] == str(tiny_folder)
    assert not (tmp_path / "results" / "gemma-3-270m").exists()


@pytest.mark.slow
@pytest.mark.parametrize("jobs,sig", [(1, signal.SIGTERM), (2, signal.SIGINT)])
def test_run_all_stops_on_a_signal_and_reports_what_finished(tmp_path, jobs, sig):
    """kill <pid> (SIGTERM) or Ctrl-C (SIGINT): the kernels shut down, the next notebook never starts, the report
    says what finished, the exit code is 128 + the signal."""
    nbs = _probe_notebooks(tmp_path / "nbs")
    pid_file = tmp_path / "kernel.pid"
    out = tmp_path / "results"
    models = ["gemma"] if jobs == 1 else ["gemma", "smollm2"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run_all.py"), "--profile", "smoke", "--models",
                             *models, "--jobs", str(jobs), "--notebooks-dir", str(nbs), "--out", str(out)],
                            env=_env(PID_FILE=str(pid_file), JUPYTER_DATA_DIR=str(tmp_path / "jd")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pid_file.exists(), proc.kill() or proc.communicate()[0]
    time.sleep(2 if jobs > 1 else 0)  # with two workers, let both reach the slow notebook
    kernel = int(pid_file.read_text())
    t0 = time.monotonic()
    proc.send_signal(sig)
    text, _ = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 60, text
    assert proc.returncode == 128 + sig.value, text
    with pytest.raises(ProcessLookupError):  # the kernel is gone (not left running its 300 s cell)
        for _ in range(20):
            os.kill(kernel, 0)
            time.sleep(0.5)
    assert not Path(str(pid_file) + ".never").exists(), "a notebook started after the signal"
    assert f"run_all: {sig.name} received: stopping" in text
    assert "stopped: google/gemma-3-270m: 1/3 notebooks finished (00_probe); stopped in 01_slow; not started: " \
           "02_never" in text, text
    assert "rerun the same command to go on" in text
    report = (out / "RESULTS-smoke.md").read_text()
    assert "| google/gemma-3-270m | 00_probe | ok |" in report and "| google/gemma-3-270m | 01_slow | stopped (" in report
    assert "stopped by " in report


# ------------------------------------------------------------------------------------------------- Makefile

@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_preflight_installs_nothing_and_reads_the_settings(tmp_path):
    """`make preflight` runs scripts/preflight.py only (no pip, no venv), says to run `make setup` when there is
    no .venv, and takes PROFILE and MODELS from ICL_PROFILE and ICL_MODEL when they are not given."""
    from test_makefile import FAKE_PYTHON

    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    fake = tmp_path / "fake-python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()

    def make(*args, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith("ICL_")}
        r = subprocess.run(["make", "--no-print-directory", f"PYTHON={fake}", *args], cwd=tmp_path,
                           env={**e, "FAKE_LOG": str(log), **env}, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr

    rc, out = make("preflight")
    assert rc != 0 and "run `make setup` first" in out, out
    assert log.read_text() == "" and not (tmp_path / ".venv").exists()  # nothing ran, nothing was created
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(fake, tmp_path / ".venv" / "bin" / "python")
    rc, out = make("preflight")
    calls = log.read_text().splitlines()
    assert rc == 0 and len(calls) == 1 and "scripts/preflight.py" in calls[0], calls
    assert "--profile default --models google/gemma-3-270m HuggingFaceTB/SmolLM2-135M-Instruct" in calls[0]
    make("preflight", ICL_PROFILE="smoke", ICL_MODEL="/models/tiny")
    assert "--profile smoke --models /models/tiny --jobs" in log.read_text().splitlines()[-1]
    make("preflight", "PROFILE=paper", "MODELS=gpt2-xl", ICL_PROFILE="smoke", ICL_MODEL="/models/tiny")
    assert "--profile paper --models gpt2-xl --jobs" in log.read_text().splitlines()[-1]  # make's variables win
    assert not any("pip" in c for c in log.read_text().splitlines())


# ------------------------------------------------------------------------------- results folders and report

def test_results_folders_are_keyed_by_task_set(tmp_path, monkeypatch):
    from helpers.study.results import model_slug, results_dir, run_key

    for k in ("ICL_TASKS", "ICL_OWN_TASK", "ICL_DTYPE", "ICL_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    assert run_key("smoke") == "smoke"
    assert results_dir("gemma", "smoke") == tmp_path / "gemma" / "smoke"
    spec = _spec_task(tmp_path / "fp", GOOD)
    monkeypatch.setenv("ICL_TASKS", f"{spec},sst2")
    d = tasks.get_task(str(spec)).digest[:8]  # a spec's task is named with its digest
    assert run_key("smoke") == f"smoke-tasks-bad_fp.{d}+sst2"
    assert results_dir("gemma", "smoke") == tmp_path / "gemma" / f"smoke-tasks-bad_fp.{d}+sst2"
    # another spec with the same name but other content: another folder, never the first one's
    other = _spec_task(tmp_path / "elsewhere" / "fp", GOOD, words=("Awful", "Great"))
    monkeypatch.setenv("ICL_TASKS", f"{other},sst2")
    assert run_key("smoke").startswith("smoke-tasks-bad_fp.") and run_key("smoke") != f"smoke-tasks-bad_fp.{d}+sst2"
    monkeypatch.setenv("ICL_TASKS", f"{spec},sst2")
    monkeypatch.setenv("ICL_TASKS", "sst2,trec,agnews,tweet_emotion")  # the profile's own: no suffix
    assert run_key("default") == "default"
    monkeypatch.setenv("ICL_OWN_TASK", str(spec))
    assert run_key("default") == f"default-own-bad_fp.{d}"
    monkeypatch.delenv("ICL_OWN_TASK")
    monkeypatch.setenv("ICL_TASKS", ",".join(["sst2", "trec", "agnews", "tweet_emotion"] * 2 + ["rotten_tomatoes"]))
    assert run_key("smoke") != "smoke" and len(run_key("smoke")) < 80  # long lists: a prefix and a hash
    monkeypatch.delenv("ICL_TASKS")
    monkeypatch.setenv("ICL_DTYPE", "bfloat16")
    assert model_slug("gemma") == "gemma-bfloat16"  # the dtype is in the model's folder


def _metrics(folder: Path, section: str, claim_text: str) -> None:
    (folder / "metrics").mkdir(parents=True, exist_ok=True)
    (folder / "metrics" / f"{section}.json").write_text(json.dumps(
        {"summary": [{"claim": claim_text, "paper": "1", "ours": "2", "verdict": "replicates"}],
         "claims": [{"sentence": f"{claim_text}: sentence"}]}))


def test_report_names_its_tasks_and_keeps_runs_and_claims_in_agreement(tmp_path, monkeypatch):
    """An own-task report names the task (never 'four tasks'); a rerun of one notebook lists the earlier run of the
    others whose claims it shows; a notebook whose metrics were made outside make run is marked so."""
    from helpers.study.report import build_report, record_run

    for k in ("ICL_TASKS", "ICL_OWN_TASK", "ICL_DTYPE"):
        monkeypatch.delenv(k, raising=False)
    spec = _spec_task(tmp_path / "fp", GOOD)
    monkeypatch.setenv("ICL_TASKS", str(spec))
    from helpers.study.results import run_key

    folder = tmp_path / "gemma-3-270m" / run_key("smoke")
    for nb in ("00_icl_setting", "01_saliency_flow"):
        _metrics(folder, nb, f"claim of {nb}")
        record_run(folder, nb, {"status": "ok", "seconds": 3.0})
    _metrics(folder, "02_shallow_isolation", "claim of 02")  # run in JupyterLab
    # a rerun of notebook 01 only
    path = build_report(tmp_path, "smoke", ["google/gemma-3-270m"],
                        {"google/gemma-3-270m": {"01_saliency_flow": {"status": "ok", "seconds": 2.0}}})
    assert path == tmp_path / f"RESULTS-{run_key('smoke')}.md" and run_key("smoke").startswith("smoke-tasks-bad_fp.")
    md = path.read_text()
    assert "Tasks: bad_fp (1 task; every mean over tasks below is over these)" in md
    assert "four tasks" not in md and "AGNews" not in md and "TweetEval" not in md
    assert "| google/gemma-3-270m | 00_icl_setting | ok | 3.000 | earlier (" in md
    assert "| google/gemma-3-270m | 01_saliency_flow | ok | 2.000 | this run |" in md
    assert "| google/gemma-3-270m | 02_shallow_isolation | metrics only |  | outside make run" in md
    for n in ("00_icl_setting", "01_saliency_flow", "02"):
        assert f"claim of {n}" in md
    assert not (tmp_path / "RESULTS-smoke.md").exists()  # the default task set's report is not overwritten


def test_notebook_00_claims_name_the_tasks_they_average():
    import pandas as pd

    from helpers.protocols.setting import setting_claims

    def frame(tasks, shots):
        return pd.DataFrame([{"task": t, "seed": 42, "shots": s, "idx": [0, 1, 2], "correct": [1, 0, 1]}
                             for t, s in zip(tasks, shots)])

    four = ["sst2", "trec", "agnews", "tweet_emotion"]
    c = setting_claims(frame(four, [1] * 4), frame(four, [5, 5, 3, 5]))
    assert c[0].statement.endswith("mean over 4 tasks (SST-2, TREC, AGNews, TweetEval-emotion (EmoC substitute))")
    assert "5 demonstrations per class (3 on AGNews)" in c[1].statement
    own = setting_claims(frame(["rotten_tomatoes"], [1]), frame(["rotten_tomatoes"], [5]))
    assert own[0].statement == "Vanilla ICL accuracy, 1 demonstration per class, on Rotten Tomatoes (own-task example)"
    assert all("four" not in x.statement and "AGNews" not in x.statement for x in own)


def test_durations_are_keyed_like_the_results(tmp_path, monkeypatch, tiny_folder):
    """Run times of a local folder or another dtype are recorded in that model's own results folder."""
    from helpers.study.results import model_slug

    timing = _load("timing")
    monkeypatch.delenv("ICL_DTYPE", raising=False)
    timing.record_duration(tmp_path, str(tiny_folder), "smoke", "00_icl_setting", 5.0)
    assert timing.durations_path(tmp_path, str(tiny_folder), "smoke").parent.parent.name == model_slug(str(tiny_folder))
    assert model_slug(str(tiny_folder)).startswith("local-tiny-gpt2-")
    monkeypatch.setenv("ICL_DTYPE", "bfloat16")
    assert timing.recorded_durations(tmp_path, str(tiny_folder), "smoke") == {}  # bfloat16 has its own
    assert timing.durations_path(tmp_path, "gemma", "smoke").parent.parent.name == "gemma-bfloat16"


def test_notebooks_refuse_the_same_settings(monkeypatch):
    """get_profile(), every notebook's first call, refuses what the scripts refuse, all problems in one message."""
    from helpers.study.profiles import get_profile

    for k in [k for k in os.environ if k.startswith("ICL_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("ICL_PROFILE", "smoke")
    assert get_profile().name == "smoke"
    monkeypatch.setenv("ICL_MODELS", "smollm2")
    monkeypatch.setenv("ICL_BATCH_TOKENS", "abc")
    with pytest.raises(ValueError) as e:
        get_profile()
    assert str(e.value).startswith("Settings that cannot be honoured (docs/your-own.md, 'Settings'):\n")
    assert "- ICL_BATCH_TOKENS='abc': give a whole number of 0 or more." in str(e.value)
    assert "- ICL_MODELS is not a setting of this project (did you mean ICL_MODEL?)" in str(e.value)
    monkeypatch.delenv("ICL_MODELS")
    monkeypatch.delenv("ICL_BATCH_TOKENS")
    monkeypatch.setenv("ICL_PROFILE", "bogus")  # get_profile's own message, as before
    with pytest.raises(ValueError, match=r"^Unknown profile 'bogus'; choose one of \['default', 'paper', 'smoke'\]"):
        get_profile()


def test_label_words_that_differ_only_by_leading_space_are_named_as_such():
    """A tokenizer that folds leading whitespace (as sentencepiece ones do) gives both words one first token: the
    message names the token and says the words differ only by whitespace."""
    class Folding:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [hash(text.strip()) % 1000]}

        def convert_ids_to_tokens(self, i):
            return "▁good"

    task = tasks.task_from_spec({"name": "spaces", "template": "{text} Mood: {label}", "label_words": ["good", " good"]},
                                need_checksums=False)
    with pytest.raises(LabelCollisionError, match="differ only by leading whitespace") as e:
        tasks.label_token_ids(Folding(), task)
    assert "'▁good'" in str(e.value)


def test_preflight_refuses_a_context_too_short_for_the_prompts(pf, tiny_folder):
    """A 64-token context cannot hold even the shortest AGNews prompt: preflight says so, with what to do; a
    1024-token one holds every task's."""
    tok, _ = pf.tokenizer_offline(str(tiny_folder))
    short = pf.check_context("tiny", 64, tok, ["sst2", "agnews"])
    assert any("context is 64 tokens, but even the shortest AG News" in s or "context is 64 tokens" in s
               for s in short), short
    assert "leave agnews out of ICL_TASKS" in " ".join(short)
    assert pf.check_context("tiny", 1024, tok, ["sst2", "trec", "agnews", "tweet_emotion"]) == []


def test_demonstrations_as_a_generator_are_refused_not_used_up(env):
    """A generator of demos would be consumed by the check and render a prompt without demonstrations."""
    with pytest.raises(PromptError, match="demos must be a list of Demo"):
        build_prompt(env.model, "sst2", (d for d in [Demo("a", 0), Demo("b", 1)]), "c")
