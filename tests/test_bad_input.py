"""Every bad input we know of, with the message it must give: a clear error that says what to do, never a number.

One row per input in :data:`CASES`: ``Bad(id, call, error, message)``. ``call(env)`` makes the bad call (``env``
holds a tiny model, an SST-2 prompt set and a writer of task folders); the test expects ``error`` with
``message`` in its text. A command-line input raises :class:`CommandFailed` (nonzero exit, no traceback) with
its stderr. To add a row, append a ``Bad`` (or extend ``CASES`` from another module). The README's "Bad input"
section lists these rows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from helpers.core import tasks
from helpers.core.checks import ArgumentError
from helpers.core.models import resolve_dtype
from helpers.core.predict import predict
from helpers.core.prefix import predict_shared, vanilla_predictions
from helpers.core.prompts import Demo, PromptError, build_prompt, example_prompt, make_icl_set, sample_test
from helpers.core.tasks import CorruptDataError, LabelCollisionError, SpecError, TemplateError, UnknownTaskError
from helpers.experiments.aucroc import auc_roc, aucroc_per_layer, aucroc_runs, label_attention
from helpers.experiments.diagnosis import collect_qk
from helpers.experiments.incontext_heads import head_attribution
from helpers.experiments.isolation import isolation_runs
from helpers.experiments.reweighting import table1_runs, train_reweighting
from helpers.experiments.saliency import relative_flow, saliency_flow, saliency_matrices, saliency_runs
from helpers.experiments.setting import vanilla_accuracy
from helpers.experiments.two_towers import value_outputs
from helpers.study.profiles import get_profile

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore::helpers.core.tasks.LabelWordWarning")


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
                {f: tasks.file_sha256(folder / f) for f in ("train.jsonl", "test.jsonl")}))
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
    Bad("n_test=-3", lambda e: vanilla_accuracy(e.model, ["sst2"], [42], n_test=-3, progress=False), ArgumentError,
        "n_test must be a positive integer, got -3"),
    Bad("n_test=0", lambda e: make_icl_set(e.model, "sst2", 42, n_test=0), ArgumentError,
        "n_test must be a positive integer, got 0"),
    Bad("n_test=2.5", lambda e: make_icl_set(e.model, "sst2", 42, n_test=2.5), ArgumentError,
        "n_test must be a positive integer, got 2.5 (float)"),
    Bad("k_per_class=0", lambda e: make_icl_set(e.model, "sst2", 42, n_test=3, k_per_class=0), ArgumentError,
        "k_per_class must be a positive integer, got 0"),
    Bad("k_per_class=-1", lambda e: vanilla_accuracy(e.model, ["sst2"], [42], 3, k_per_class=-1, progress=False),
        ArgumentError, "k_per_class must be a positive integer, got -1"),
    Bad("sample_test with n=-3", lambda e: sample_test(tasks.load_split("sst2", "test"), -3, 42), ArgumentError,
        "n_test must be a positive integer, got -3"),
    Bad("a per-task size of 0", lambda e: saliency_runs(e.model, ["sst2"], [42], n={"sst2": 0}, progress=False),
        ArgumentError, "n['sst2'] must be a positive integer, got 0"),
    Bad("a per-task size dict without the task", lambda e: aucroc_runs(e.model, ["sst2"], [42], n={"trec": 4},
                                                                        progress=False),
        ArgumentError, "n is a dict without an entry for ['sst2']"),
    # ---------------------------------------------------------------- task and seed lists
    Bad("a task name where a list is expected", lambda e: vanilla_accuracy(e.model, "sst2", [42], 3, progress=False),
        ArgumentError, "tasks must be a list of task names, got the single task 'sst2': write ['sst2']"),
    Bad("a task name to aucroc_runs", lambda e: aucroc_runs(e.model, "trec", [42], 3, progress=False), ArgumentError,
        "got the single task 'trec': write ['trec']"),
    Bad("a task name to table1_runs", lambda e: table1_runs(e.model, "sst2", [42], 3, epochs=1), ArgumentError,
        "got the single task 'sst2'"),
    Bad("no tasks", lambda e: vanilla_accuracy(e.model, [], [42], 3, progress=False), ArgumentError,
        "tasks is empty: pass at least one task"),
    Bad("no tasks to saliency_runs", lambda e: saliency_runs(e.model, [], [42], 2, progress=False), ArgumentError,
        "tasks is empty"),
    Bad("no seeds", lambda e: vanilla_accuracy(e.model, ["sst2"], [], 3, progress=False), ArgumentError,
        "seeds is empty: pass at least one seed"),
    Bad("no seeds to isolation_runs", lambda e: isolation_runs(e.model, ["sst2"], [], 2, progress=False),
        ArgumentError, "seeds is empty"),
    Bad("one seed where a list is expected", lambda e: vanilla_accuracy(e.model, ["sst2"], 42, 3, progress=False),
        ArgumentError, "seeds must be a list of integer seeds, got the single seed 42: write [42]"),
    Bad("a seed as a string", lambda e: vanilla_accuracy(e.model, ["sst2"], ["42"], 3, progress=False),
        ArgumentError, "seeds must be integers, got '42'"),
    Bad("an unknown task in the list", lambda e: vanilla_accuracy(e.model, ["sst2", "nope"], [42], 3, progress=False),
        UnknownTaskError, "Unknown task 'nope'"),
    Bad("paper B: no tasks", lambda e: _bias_runs(e, {}), ArgumentError, "uts is empty"),
    Bad("paper B: no seeds", lambda e: _bias_runs(e, None, seeds=[]), ArgumentError, "seeds is empty"),
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
]


def _with_env(name: str, value: str, fn):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(name, value)
        return fn()


def _bias_runs(e, uts, seeds=(42,)):
    from helpers.core.unrelated import UnrelatedTask, unrelated_task
    from helpers.experiments.head_biases import bias_runs

    if uts is None:
        full = unrelated_task("sst2")
        uts = {"sst2": UnrelatedTask(full.task, full.train.select(range(50)), full.test.select(range(10)), "sst2",
                                     (0, 1))}
    return bias_runs(e.model, uts, {t: [] for t in uts}, {"seeds": [42], "n_eval": 2}, seeds=seeds)


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
