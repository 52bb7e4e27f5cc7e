"""A user's own task: a template spec loaded from a file, its data checksums, its prompts, its cache identity."""

from __future__ import annotations

import json
from pathlib import Path

import prompt_golden
import pytest


@pytest.fixture(scope="module")
def golden():
    return json.loads(prompt_golden.GOLDEN.read_text())


@pytest.mark.parametrize("tok_name", ["gpt2", "gemma", "smollm2"])
def test_shipped_tasks_render_the_recorded_prompts(golden, tok_name):
    """Text, tokens and every position of the four shipped tasks are byte-identical to the recorded ones."""
    now = prompt_golden.cases(prompt_golden.tokenizers()[tok_name])  # never skipped: the tokenizers load offline
    assert sorted(now) == sorted(golden[tok_name])
    for key, rec in golden[tok_name].items():
        assert now[key] == rec, key


# ---------------------------------------------------------------- templates and the position record

from helpers.core import task_data, tasks  # noqa: E402
from helpers.core.offline_models import gpt2_tokenizer  # noqa: E402
from helpers.core.prompts import Demo, build_prompt  # noqa: E402
from helpers.core.task_data import CorruptDataError  # noqa: E402
from helpers.core.tasks import SpecError, TemplateError  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return gpt2_tokenizer()


def spec_task(template, words=("Negative", "Positive"), separator="\n", name="mine"):
    return tasks.task_from_spec({"name": name, "template": template, "label_words": list(words),
                                 "separator": separator}, need_checksums=False)


def check_record(tok, task, demos, query):
    """Every field of the position record decodes back to the piece of the template it names."""
    p = build_prompt(tok, task, demos, query, bos=False)
    before, mid, lead, after = task.parts
    dec = lambda a, b: tok.decode(p.tokens[a:b].tolist())  # noqa: E731
    assert tok.decode(p.tokens.tolist()) == p.text
    lids = tasks.label_token_ids(tok, task)
    for k, d in enumerate(demos):
        assert dec(*p.label_spans[k]) == lead + task.label_words[d.label]
        assert p.label_pos[k] == p.label_spans[k][0] and int(p.tokens[p.label_pos[k]]) == lids[d.label]
        assert dec(*p.text_spans[k]).strip() == d.text
    assert dec(*p.query_span).strip() == query.text
    assert p.text.endswith(mid) and p.q == len(p) - 1  # the query ends right before the label's leading spaces
    fmt = "".join(tok.decode([int(p.tokens[i])]) for i in p.format_pos)
    want = (before + mid + after + task.separator) * len(demos) + before + mid
    assert fmt.replace(" ", "") == want.replace(" ", "")
    # Hidden_anchor: label tokens + the demonstrations' formatting (up to their last separator), none of the query
    # (a token belongs to the demonstrations when its first non-space character does)
    boundary = len(p.text) - len(before + query.text + mid)
    offsets = tok(p.text, return_offsets_mapping=True)["offset_mapping"]
    in_demos = {i for i, (a, b) in enumerate(offsets) if a + len(p.text[a:b]) - len(p.text[a:b].lstrip(" ")) < boundary}
    label_tok = {i for a, b in p.label_spans for i in range(a, b)}
    assert set(p.anchor_pos) == label_tok | (set(p.format_pos) & in_demos)
    assert max(p.anchor_pos) < min(i for i in p.format_pos if i not in in_demos)
    return p


def test_a_spec_template_renders_the_shipped_prompt_exactly(tok):
    mine = spec_task("Review: {text}\nSentiment: {label}")
    demos, q = [Demo("good", 1), Demo("awful", 0)], Demo("bad", 0)
    for bos in (False, True):
        a = build_prompt(tok, "sst2", demos, q, bos=bos)
        b = build_prompt(tok, mine, demos, q, bos=bos)
        assert a.text == b.text and a.tokens.tolist() == b.tokens.tolist()
        for f in ("label_pos", "label_spans", "format_pos", "text_spans", "query_span", "q", "anchor_pos", "kinds"):
            assert getattr(a, f) == getattr(b, f), f


def test_template_without_space_before_label(tok):
    mine = spec_task("Review: {text}\nSentiment:{label}")
    assert mine.parts == ("Review: ", "\nSentiment:", "", "")
    assert mine.render_demo("good", 1) == "Review: good\nSentiment:Positive"
    p = check_record(tok, mine, [Demo("good", 1), Demo("bad", 0)], Demo("fine", 1))
    assert "Sentiment:Positive\n" in p.text and p.text.endswith("Review: fine\nSentiment:")
    assert tasks.label_token_ids(tok, mine)[1] == tok("Positive")["input_ids"][0]  # no leading space
    assert tasks.label_token_ids(tok, "sst2")[1] == tok(" Positive")["input_ids"][0]


def test_multi_line_template_text_after_label_and_other_separators(tok):
    demos = [Demo("Stocks fell sharply", 1), Demo("The team won the cup", 0)]
    for sep in ("\n\n", " | ", "\n###\n"):
        mine = spec_task("Headline: {text}\nQuestion: what is it about?\nAnswer: {label}.", ("sport", "business"), sep)
        p = check_record(tok, mine, demos, Demo("Rain expected tomorrow", 0))
        assert p.text == ("Headline: Stocks fell sharply\nQuestion: what is it about?\nAnswer: business." + sep
                          + "Headline: The team won the cup\nQuestion: what is it about?\nAnswer: sport." + sep
                          + "Headline: Rain expected tomorrow\nQuestion: what is it about?\nAnswer:")
    no_query = build_prompt(tok, mine, demos, None, bos=False)
    assert no_query.text.endswith("Answer: sport.")  # no trailing separator without a query


def test_multi_token_label_words(tok):
    mine = spec_task("Q: {text}\nA: {label}", ("Abbreviation", "Numerical value"), " | ")
    p = check_record(tok, mine, [Demo("what is NASA?", 0), Demo("how many?", 1)], Demo("how far?", 1))
    assert all(b - a > 1 for a, b in p.label_spans)


@pytest.mark.parametrize("template, match", [
    ("Review: {text}\nSentiment: {lable}", "placeholder {lable}"),
    ("Review: {text}\nSentiment:", r"has no \{label\}"),
    ("Sentiment: {label}\nReview: {text}", r"\{label\} before \{text\}"),
    ("{text} {text} {label}", "once"),
    ("Review: {text:>9} {label}", "placeholder"),
    ("Review: {text} {label} {", "cannot be parsed"),
])
def test_bad_templates_are_refused(template, match):
    with pytest.raises(TemplateError, match=match):
        spec_task(template)


def test_literal_braces_in_a_template(tok):
    mine = spec_task("{{json}} {text} => {label}")
    assert mine.render_query("hi") == "{json} hi =>"


# ---------------------------------------------------------------- spec files, checksums, registration

def write_task(folder, spec, rows=None, checksums=True):
    folder.mkdir(parents=True, exist_ok=True)
    rows = rows or {"train": [("good", 1), ("bad", 0), ("great", 1), ("awful", 0)],
                    "test": [("fine", 1), ("dull", 0), ("superb", 1)]}
    for split, rs in rows.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rs))
    path = folder / "task.json"
    path.write_text(json.dumps(spec))
    if checksums:
        tasks.record_checksums(path)
    return path


SPEC = {"name": "tiny_sentiment", "display": "Tiny sentiment", "template": "Text: {text}\nMood: {label}",
        "label_words": ["sad", "happy"], "separator": " | ", "note": "a test task"}


def test_spec_file_loads_verifies_and_registers(tmp_path, tok):
    path = write_task(tmp_path / "tiny", SPEC)
    t = tasks.load_task_spec(path)
    assert (t.name, t.display, t.note, t.separator, t.n_classes) == ("tiny_sentiment", "Tiny sentiment", "a test task",
                                                                   " | ", 2)
    assert tasks.get_task("tiny_sentiment") == t == tasks.get_task(str(path)) and t.digest
    assert tasks.load_split("tiny_sentiment", "test")["text"] == ["fine", "dull", "superb"]
    sums = json.loads((tmp_path / "tiny" / "checksums.json").read_text())
    assert sums["train.jsonl"]["sha256"] == task_data.file_sha256(tmp_path / "tiny" / "train.jsonl")
    p = build_prompt(tok, t, [Demo("good", 1)], Demo("bad", 0), bos=False)
    assert p.text == "Text: good\nMood: happy | Text: bad\nMood:"
    # an edited data file is refused with what to do
    (tmp_path / "tiny" / "test.jsonl").write_text('{"text": "x", "label": 0}\n')
    with pytest.raises(CorruptDataError, match="record the new checksum"):
        tasks.load_split(t, "test")
    tasks.record_checksums(path)
    assert tasks.load_split(tasks.load_task_spec(path), "test")["text"] == ["x"]


def test_spec_checksums_in_the_spec_and_data_paths(tmp_path):
    path = write_task(tmp_path / "a", SPEC, checksums=False)
    (tmp_path / "b").mkdir()
    spec = {**SPEC, "name": "moved", "data": {"train": "../a/train.jsonl", "test": str(tmp_path / "a" / "test.jsonl")}}
    with pytest.raises(SpecError, match="no sha256 checksum"):
        tasks.task_from_spec(spec, base=tmp_path / "b")
    spec["checksums"] = {s: task_data.file_sha256(tmp_path / "a" / f"{s}.jsonl") for s in ("train", "test")}
    (tmp_path / "b" / "task.json").write_text(json.dumps(spec))
    t = tasks.load_task_spec(tmp_path / "b")  # a folder holding task.json
    assert len(tasks.load_split(t, "train")) == 4 and path.exists()


def test_toml_spec(tmp_path):
    write_task(tmp_path / "t", SPEC)
    (tmp_path / "t" / "task.toml").write_text(
        'name = "tomlish"\ntemplate = """Text: {text}\nMood: {label}"""\nlabel_words = ["sad", "happy"]\n')
    t = tasks.load_task_spec(tmp_path / "t" / "task.toml")
    assert t.render_demo("ok", 1) == "Text: ok\nMood: happy" and t.separator == "\n"


def test_toml_needs_python_311_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "task.toml").write_text('template = "{text} {label}"\nlabel_words = ["a", "b"]\n')
    monkeypatch.setattr(tasks.sys, "version_info", (3, 10, 12))
    with pytest.raises(SpecError, match="write the spec as JSON"):
        tasks.load_task_spec(tmp_path / "task.toml")


def test_checksums_command(tmp_path):
    import subprocess
    import sys

    path = write_task(tmp_path / "c", SPEC, checksums=False)
    out = subprocess.run([sys.executable, "-m", "helpers.core.tasks", "--checksums", str(path)], capture_output=True,
                         text=True, timeout=120, cwd=task_data.data_dir().parent)
    assert out.returncode == 0, out.stderr
    sums = json.loads((tmp_path / "c" / "checksums.json").read_text())
    assert sums["test.jsonl"] == {"sha256": task_data.file_sha256(tmp_path / "c" / "test.jsonl"), "rows": 3,
                                  "labels": {"0": 1, "1": 2}}


@pytest.mark.parametrize("change, match", [
    ({"label_words": ["same", "same"]}, "distinct"),
    ({"label_words": ["only"]}, "two or more"),
    ({"name": "sst2"}, "shipped task"),
    ({"colour": "red"}, "unknown keys"),
    ({"template": "Text: {text}"}, r"no \{label\}"),
])
def test_bad_specs_are_refused(tmp_path, change, match):
    with pytest.raises((SpecError, TemplateError), match=match):
        tasks.load_task_spec(write_task(tmp_path / "bad", {**SPEC, **change}))


def test_labels_outside_the_label_words_are_refused(tmp_path):
    rows = {"train": [("a", 0), ("b", 2)], "test": [("c", 1)]}
    with pytest.raises(CorruptDataError, match=r"train.jsonl, line 2: label 2 is outside 0..1"):
        write_task(tmp_path / "x", SPEC, rows=rows)  # recording the checksums reads every row
    path = write_task(tmp_path / "y", SPEC, rows=rows, checksums=False)
    (path.parent / "checksums.json").write_text(json.dumps(
        {f: task_data.file_sha256(path.parent / f) for f in ("train.jsonl", "test.jsonl")}))
    with pytest.raises(CorruptDataError, match=r"train.jsonl, line 2: label 2 is outside 0..1"):
        tasks.load_split(tasks.load_task_spec(path), "train")


def test_icl_tasks_accepts_spec_paths(tmp_path, monkeypatch):
    from helpers.study.profile_table import current_tasks
    from helpers.study.profiles import get_profile

    path = write_task(tmp_path / "tiny", SPEC)
    monkeypatch.setenv("ICL_TASKS", f"sst2, {path}")
    assert current_tasks() == ("sst2", "tiny_sentiment") == get_profile("smoke").tasks
    monkeypatch.setenv("ICL_TASKS", "rotten_tomatoes")  # a folder of data/ holding a task.json
    assert current_tasks() == ("rotten_tomatoes",)
    monkeypatch.setenv("ICL_TASKS", f"{tmp_path}/nowhere/task.json")
    with pytest.raises(ValueError, match="does not exist"):
        current_tasks()
    other = write_task(tmp_path / "other", {**SPEC, "label_words": ["no", "yes"]})
    monkeypatch.setenv("ICL_TASKS", f"{path},{other}")
    with pytest.raises(ValueError, match="two different tasks called 'tiny_sentiment'"):
        current_tasks()


def test_preflight_accepts_a_spec_path(tmp_path):
    import importlib.util

    from helpers.study.profile_table import PROFILES

    spec = importlib.util.spec_from_file_location("preflight", task_data.data_dir().parent / "scripts" / "preflight.py")
    pf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pf)
    path = write_task(tmp_path / "tiny", SPEC)
    assert pf.check_tasks(PROFILES["smoke"], env=f"trec,{path}") == ("trec", "tiny_sentiment")
    (tmp_path / "tiny" / "train.jsonl").unlink()
    with pytest.raises(pf.PreflightError, match="missing"):
        pf.check_tasks(PROFILES["smoke"], env=str(path))


# ---------------------------------------------------------------- cache identity

def test_editing_a_spec_recomputes_instead_of_serving_the_old_result(tmp_path, monkeypatch):
    from helpers.core.store import cached

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "cache"))
    path = write_task(tmp_path / "tiny", SPEC)
    calls = []

    def run():
        calls.append(1)
        return list(tasks.get_task("tiny_sentiment").label_words)

    tasks.load_task_spec(path)
    assert cached("probe", {"task": "tiny_sentiment", "seed": 42}, run) == ["sad", "happy"]
    assert cached("probe", {"task": "tiny_sentiment", "seed": 42}, run) == ["sad", "happy"] and len(calls) == 1
    path.write_text(json.dumps({**SPEC, "label_words": ["down", "up"]}))  # the user edits the label words
    tasks.load_task_spec(path)
    assert cached("probe", {"task": "tiny_sentiment", "seed": 42}, run) == ["down", "up"] and len(calls) == 2
    path.write_text(json.dumps({**SPEC, "label_words": ["down", "up"], "separator": "\n"}))
    tasks.load_task_spec(path)
    cached("probe", {"task": "tiny_sentiment", "seed": 42}, run)
    assert len(calls) == 3  # the separator too
    (tmp_path / "tiny" / "test.jsonl").write_text('{"text": "x", "label": 0}\n')  # and the data
    tasks.record_checksums(path)
    tasks.load_task_spec(path)
    cached("probe", {"task": "tiny_sentiment", "seed": 42}, run)
    assert len(calls) == 4


def test_a_spec_task_runs_through_the_run_helpers(tmp_path, tiny_models, monkeypatch):
    from helpers.protocols.setting import SettingSizes, vanilla_accuracy

    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path / "cache"))
    rows = {"train": [(f"good {i}", 1) for i in range(5)] + [(f"bad {i}", 0) for i in range(5)],
            "test": [(f"fine {i}", i % 2) for i in range(6)]}
    path = write_task(tmp_path / "tiny", SPEC, rows=rows)
    monkeypatch.setenv("ICL_TASKS", str(path))
    from helpers.study.profile_table import current_tasks

    df = vanilla_accuracy(tiny_models["gpt2"], current_tasks(), SettingSizes(seeds=(42,), n_test=4, batch_size=4), 1,
                          "smoke", progress=False)
    assert df.task.tolist() == ["tiny_sentiment"] and df.n.tolist() == [4]


# ---------------------------------------------------------------- the shipped example

def test_the_shipped_example_task():
    t = tasks.get_task("rotten_tomatoes")
    assert t.spec_path.endswith("data/rotten_tomatoes/task.json") and t.separator == "\n\n"
    assert t.label_words == ("negative", "positive") and "Rotten Tomatoes" in t.display
    sums = json.loads((task_data.data_dir() / "checksums.json").read_text())
    for split, n in (("train", 5000), ("test", 1000)):
        ds = tasks.load_split(t, split)
        assert len(ds) == n == sums[f"rotten_tomatoes/{split}.jsonl"]["rows"]
        assert set(ds.unique("label")) == {0, 1}
    assert "rotten_tomatoes" not in tasks.TASKS  # registered from its spec, not shipped in helpers


def test_notebook_08_task_and_budget(tmp_path, monkeypatch):
    from helpers.study.profile_table import PROFILES
    from helpers.study.profiles import current_own_task, own_task_sizes

    monkeypatch.delenv("ICL_OWN_TASK", raising=False)
    assert current_own_task() == "rotten_tomatoes"
    monkeypatch.setenv("ICL_OWN_TASK", str(write_task(tmp_path / "tiny", SPEC)))
    assert current_own_task() == "tiny_sentiment"
    smoke, default = own_task_sizes(PROFILES["smoke"]), own_task_sizes(PROFILES["default"])
    assert smoke.seeds == (42,) and smoke.n_test == 8 and smoke.n_saliency == 4 and smoke.random_n == 2
    assert default.seeds == (42, 43, 44) and default.n_test == 32 and default.random_n == 8
    assert own_task_sizes(PROFILES["paper"]).n_test == 1000
    assert list(smoke.as_dict()) == ["seeds", "n_test", "n_saliency", "random_n", "batch_size"]  # recorded as before


def test_aucroc_intervals_when_the_model_predicts_one_class():
    """One task with few inputs (notebook 08's smoke run): a single predicted class gives no interval, no crash."""
    import torch

    from helpers.protocols.aucroc import curve_intervals

    g = torch.Generator().manual_seed(0)
    raw = {("t", 42): {"scores": torch.rand(6, 4, 2, generator=g), "pred": torch.zeros(6, dtype=torch.long),
                       "gold": torch.zeros(6, dtype=torch.long)}}
    assert curve_intervals(raw, n_boot=20) == {"peak": None, "crossing": None, "peak_layer": None}
    raw[("t", 42)]["pred"] = torch.tensor([0, 1, 0, 1, 1, 0])
    ivs = curve_intervals(raw, n_boot=20)
    assert ivs["peak"] is None or 0 <= ivs["peak"].low <= ivs["peak"].high <= 1


@pytest.mark.slow
@pytest.mark.notebooks
def test_every_notebook_runs_on_a_task_and_model_of_your_own(tmp_path):
    """The documented own-task path, end to end: `make run PROFILE=smoke ICL_TASKS=<spec> ICL_OWN_TASK=<spec>` with
    a three-class task written here and a tiny random 8-layer GPT-2 folder. Every notebook that reads the tasks
    finishes; notebooks 06 and 07, which study fixed tasks, file their results under the tasks they ran. Notebook 09
    is not run: it studies the controls on their own synthetic tasks whatever ICL_TASKS says (nbmake runs it)."""
    import json
    import os
    import subprocess
    import sys

    from transformers import GPT2Config, GPT2LMHeadModel

    from helpers.core import offline_models

    root = Path(__file__).resolve().parent.parent
    tok = offline_models.gpt2_tokenizer()
    model_dir = tmp_path / "tiny-8-layers"
    import torch

    torch.manual_seed(0)  # weights large enough for logits of order 1: a model that predicts more than one class
    GPT2LMHeadModel(GPT2Config(n_layer=8, n_embd=64, n_head=4, n_positions=1024, vocab_size=len(tok),
                               initializer_range=0.2)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    task_dir = tmp_path / "three_way"
    task_dir.mkdir()
    texts = ["good film", "bad film", "so so", "great", "awful", "fine", "loved it", "hated it", "meh"] * 8
    rows = "".join(json.dumps({"text": t, "label": i % 3}) + "\n" for i, t in enumerate(texts))
    for split in ("train", "test"):
        (task_dir / f"{split}.jsonl").write_text(rows)
    (task_dir / "task.json").write_text(json.dumps({"name": "three_way", "template": "Review: {text}\nMood: {label}",
                                                     "label_words": ["bad", "good", "neutral"]}))
    tasks.record_checksums(task_dir / "task.json")
    spec = str(task_dir / "task.json")
    # the session's results store, as a user's runs share theirs: the steps that do not read the task or the model
    # (the controls' power runs of notebooks 10 and 11) are computed once for this run and the notebooks' own runs
    # under nbmake, whichever comes first (each stored step's key holds the task, the model's weights and the code)
    store = os.environ.get("ICL_RESULTS_CACHE") or str(tmp_path / "store")
    env = {**os.environ, "ICL_TASKS": spec, "ICL_OWN_TASK": spec, "ICL_RESULTS_CACHE": store, "OMP_NUM_THREADS": "1"}
    env.pop("ICL_RESULTS_DIR", None)
    sys.path.insert(0, str(root / "scripts"))
    try:
        from timing import OWN_MODEL  # the notebooks run_all runs on a model of their own (the controls)
    finally:
        sys.path.remove(str(root / "scripts"))
    reading = [p.name[:2] for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")) if p.name[:2] not in OWN_MODEL]
    r = subprocess.run([sys.executable, "scripts/run_all.py", "--profile", "smoke", "--models", str(model_dir),
                        "--jobs", "1", "--out", str(tmp_path / "results"), "--notebooks", *reading], cwd=root, env=env,
                       capture_output=True, text=True, timeout=1500)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert f"finished: {len(reading)} of {len(reading)} notebooks ok, 0 failed, in" in out, out[-3000:]
    assert len(reading) == 11 and "[control/" not in out, out[-3000:]
    d = tasks.get_task(spec).digest[:8]  # a spec's task is named with its digest
    folders = {p.parent.parent.name for p in (tmp_path / "results").glob("*/*/metrics/*.json")}
    assert {f"smoke-tasks-three_way.{d}-own-three_way.{d}", f"smoke-tasks-trec-own-three_way.{d}",
            f"smoke-tasks-sst2-own-three_way.{d}"} <= folders, folders
