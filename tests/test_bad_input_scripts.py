"""Bad input to the scripts (preflight, run_all, the checksums command, the Makefile): each gives a clear message that
says what to do, before any model loads, never a traceback or a number.

The cases are tables of (input, expected message) rows, one table per kind of input, so that they can be folded
into one table of every bad input:

- SETTINGS: an ``ICL_*`` variable and its value -> helpers.study.config.check_variable's message;
- ROWS: the bytes of a task's data file -> preflight's check_task_data message (file and line named);
- MODEL_FOLDERS: a local model folder, broken one way -> preflight's check_model message;
- COMMANDS: a command line and its environment -> its exit code and output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_icl_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


def test_every_variable_is_in_the_one_readme_table():
    """`grep -o 'ICL_[A-Z_]*'` over helpers, scripts, notebooks and the Makefile: each is in config.VARIABLES, and
    the README holds exactly config.settings_table(), its one table of them."""
    import re

    from helpers.study.config import VARIABLES, settings_table

    used = set()
    for folder in ("helpers", "scripts", "notebooks"):
        for f in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"ICL_[A-Z_]*[A-Z]", f.read_text()))
    used |= set(re.findall(r"ICL_[A-Z_]*[A-Z]", (ROOT / "Makefile").read_text()))
    assert used - set(VARIABLES) == set(), "variables read but not in helpers.study.config.VARIABLES"
    readme = (ROOT / "README.md").read_text()
    assert settings_table() in readme, "README's Settings table differs from helpers.study.config.settings_table()"
    tables = [line for line in readme.splitlines() if line.startswith("| `ICL_")]
    assert len(tables) == len(VARIABLES), "one table, one row per variable"


# ------------------------------------------------------------------------------------------------ task rows

GOOD = b'{"text": "fine", "label": 1}\n{"text": "bad", "label": 0}\n'
ROWS = [  # (test.jsonl bytes, message; the file's path comes before it)
    (b'{"label": 1}\n', ", line 1: 'text' must be a non-empty string, got no 'text'"),
    (GOOD + b'{"text": "", "label": 1}\n', ", line 3: 'text' must be a non-empty string, got 'text' = ''"),
    (b'{"text": "   ", "label": 1}\n', ", line 1: 'text' must be a non-empty string, got 'text' = '   '"),
    (b'{"text": 5, "label": 1}\n', ", line 1: 'text' must be a non-empty string, got 'text' = 5"),
    (b'{"text": null, "label": 1}\n', ", line 1: 'text' must be a non-empty string, got 'text' = None"),
    (b'{"text": "a"}\n', ", line 1: 'label' must be a whole number (the class index), got no 'label'"),
    (b'{"text": "a", "label": "1"}\n', ", line 1: 'label' must be a whole number (the class index), got 'label' = '1'"),
    (b'{"text": "a", "label": 1.0}\n', ", line 1: 'label' must be a whole number (the class index), got 'label' = 1.0"),
    (b'{"text": "a", "label": true}\n', ", line 1: 'label' must be a whole number (the class index), got 'label' = True"),
    (GOOD + b'{"text": "a", "label": 2}\n', ", line 3: label 2 is outside 0..1 (2 label words)"),
    (b'{"text": "a", "label": -1}\n', ", line 1: label -1 is outside 0..1 (2 label words)"),
    (GOOD + b'{"text": "caf\xe9", "label": 0}\n', ", line 3: byte b'\\xe9' at column 14 is not UTF-8; data files are "
                                                  "UTF-8 JSON lines"),
    (b'\xff\xfe{"text": "a", "label": 0}\n', ", line 1: byte b'\\xff' at column 1 is not UTF-8"),
    (GOOD + b'{"text": "a", "label": 0\n', ", line 3: not valid JSON at column 25 (Expecting ',' delimiter)"),
    (b'["a", 0]\n', ", line 1: a row must be a JSON object with 'text' and 'label', got '[\"a\", 0]'"),
    (b"", " has no rows; put the rows there as JSON lines with 'text' and 'label'"),
    (b"\n\n  \n", " has no rows; put the rows there as JSON lines with 'text' and 'label'"),
]


def _spec_task(folder: Path, test_bytes: bytes, words=("Negative", "Positive"), record: bool = True) -> Path:
    """A spec task in ``folder`` with a good train file, ``test_bytes`` as its test file and (``record``) their
    checksums recorded."""
    from helpers.core.tasks import file_sha256

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
    assert f"{test}, line 6: label 7 is outside 0..1 (2 label words)" in problem, problem


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
    from helpers.core.models import gpt2_tokenizer

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
    elif kind == "a file":
        shutil.rmtree(path)
        path.write_text("not a folder")
    return path


MODEL_FOLDERS = [  # (how the folder is broken, message)
    ("missing", "does not exist. Save a model with `model.save_pretrained(d)`"),
    ("a file", "is a file, not a model directory."),
    ("no config", "has no config.json, so it is not a Hugging Face model directory."),
    ("bad config", "config.json' is not valid JSON"),
    ("unsupported", "is a BertForMaskedLM, which TransformerLens cannot load as a HookedTransformer here. "
                    "Supported architectures:"),
    ("no architecture", "names no architecture ('architectures' is missing)"),
    ("no weights", "has no weights (model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
                   "pytorch_model.bin.index.json). Save the model there with `model.save_pretrained(d)`"),
    ("missing shard", "the weight shards ['model-00002-of-00002.safetensors'] listed in "
                      "model.safetensors.index.json are missing."),
    ("no tokenizer", "has no tokenizer files"),
    ("broken tokenizer", "Could not load a tokenizer from"),
]


@pytest.mark.parametrize("kind,message", MODEL_FOLDERS, ids=[k for k, _ in MODEL_FOLDERS])
def test_broken_model_folder_is_refused_by_preflight(pf, tiny_folder, tmp_path, kind, message):
    path = tmp_path / "m" if kind == "missing" else _break(kind, tiny_folder, tmp_path / "m")
    with pytest.raises(pf.PreflightError) as e:
        pf.check_model(str(path))
    assert message in str(e.value), str(e.value)


def test_model_folder_passes_with_its_size(pf, tiny_folder, monkeypatch):
    monkeypatch.setattr(pf, "hub_reachable", lambda timeout=5.0: pytest.fail("a folder never asks the hub"))
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


@pytest.mark.parametrize("script,args,env,code,message", [COMMANDS[0], COMMANDS[8]],
                         ids=["run_all ICL_PROFILE=bogus", "preflight ICL_DTYPE=bogus"])
def test_command_line_gives_a_message_not_a_traceback(tmp_path, script, args, env, code, message):
    r = _run(script, [*args, "--out", str(tmp_path / "results")], **env)
    out = r.stdout + r.stderr
    assert r.returncode == code and message in out and "Traceback" not in out, out


def test_preflight_passes_offline_on_a_local_folder(tiny_folder, tmp_path):
    """`make preflight MODELS=<local folder>` without a network: the folder, its tokenizer and the tasks' label
    words are checked, the hub is never asked."""
    r = _run("preflight.py", ["--profile", "smoke", "--models", str(tiny_folder), "--out", str(tmp_path),
                              "--ignore-resources"], HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"ok    model {tiny_folder}: local model folder (GPT2LMHeadModel" in out
    assert f"ok    label words {tiny_folder}: distinct first tokens in 5 task(s)" in out
    for t in ("sst2", "trec", "agnews", "tweet_emotion", "rotten_tomatoes"):
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
    assert run_key("smoke") == "smoke-tasks-bad_fp+sst2"
    assert results_dir("gemma", "smoke") == tmp_path / "gemma" / "smoke-tasks-bad_fp+sst2"
    monkeypatch.setenv("ICL_TASKS", "sst2,trec,agnews,tweet_emotion")  # the profile's own: no suffix
    assert run_key("default") == "default"
    monkeypatch.setenv("ICL_OWN_TASK", str(spec))
    assert run_key("default") == "default-own-bad_fp"
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
    folder = tmp_path / "gemma-3-270m" / "smoke-tasks-bad_fp"
    for nb in ("00_icl_setting", "01_saliency_flow"):
        _metrics(folder, nb, f"claim of {nb}")
        record_run(folder, nb, {"status": "ok", "seconds": 3.0})
    _metrics(folder, "02_shallow_isolation", "claim of 02")  # run in JupyterLab
    # a rerun of notebook 01 only
    path = build_report(tmp_path, "smoke", ["google/gemma-3-270m"],
                        {"google/gemma-3-270m": {"01_saliency_flow": {"status": "ok", "seconds": 2.0}}})
    assert path == tmp_path / "RESULTS-smoke-tasks-bad_fp.md"
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

    from helpers.experiments.setting import setting_claims

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
    assert str(e.value).startswith("Settings that cannot be honoured (README, 'Settings'):\n")
    assert "- ICL_BATCH_TOKENS='abc': give a whole number of 0 or more." in str(e.value)
    assert "- ICL_MODELS is not a setting of this project (did you mean ICL_MODEL?)" in str(e.value)
    monkeypatch.delenv("ICL_MODELS")
    monkeypatch.delenv("ICL_BATCH_TOKENS")
    monkeypatch.setenv("ICL_PROFILE", "bogus")  # get_profile's own message, as before
    with pytest.raises(ValueError, match=r"^Unknown profile 'bogus'; choose one of \['default', 'paper', 'smoke'\]"):
        get_profile()
