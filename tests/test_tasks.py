"""Task data: files, checksums, label sets, label tokens."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from helpers.core import task_data, tasks
from helpers.core.offline_models import gpt2_tokenizer
from helpers.core.task_data import CorruptDataError
from helpers.core.tasks import LabelCollisionError, LabelWordWarning, UnknownTaskError

OFFLINE = ["sst2", "trec", "agnews", "tweet_emotion"]
ROWS = {"sst2": (5000, 872), "trec": (5000, 500), "agnews": (5000, 1000), "tweet_emotion": (4052, 1000)}


@pytest.mark.parametrize("name", OFFLINE)
def test_rows_labels_and_checksums(name):
    t = tasks.get_task(name)
    sums = json.loads((task_data.data_dir() / "checksums.json").read_text())
    for split, n in zip(("train", "test"), ROWS[name]):
        ds = tasks.load_split(name, split)
        assert len(ds) == n == sums[f"{name}/{split}.jsonl"]["rows"]
        assert set(ds.unique("label")) == set(range(t.n_classes))
        assert set(ds.column_names) == {"text", "label"}
    train_texts = set(tasks.load_split(name, "train")["text"])
    test_texts = tasks.load_split(name, "test")["text"]
    overlap = sum(x in train_texts for x in test_texts)
    assert overlap <= 0.02 * len(test_texts)  # disjoint rows; a few duplicate sentences exist in the sources


def test_unknown_task():
    with pytest.raises(UnknownTaskError, match="Known tasks"):
        tasks.get_task("imdb")


def test_emoc_substitute_is_named():
    t = tasks.get_task("tweet_emotion")
    assert "EmoC substitute" in t.display and "EmoC" in t.note


def test_templates_match_the_paper():
    sst2 = tasks.get_task("sst2")
    assert sst2.render_demo("great", 1) == "Review: great\nSentiment: Positive"
    assert sst2.render_query("meh") == "Review: meh\nSentiment:"
    assert tasks.get_task("trec").render_query("Why?") == "Question: Why?\nAnswer Type:"
    assert tasks.get_task("agnews").label_words == ("World", "Sports", "Business", "Technology")


def test_corrupt_data_file_is_detected(tmp_path, monkeypatch):
    shutil.copytree(task_data.data_dir(), tmp_path / "data")
    p = tmp_path / "data" / "sst2" / "test.jsonl"
    p.write_text(p.read_text().replace("a", "b", 1))
    monkeypatch.setenv("ICL_ANCHORS_DATA", str(tmp_path / "data"))
    with pytest.raises(CorruptDataError, match="checksum"):
        tasks.load_split("sst2", "test")
    (tmp_path / "data" / "trec" / "train.jsonl").unlink()
    with pytest.raises(CorruptDataError, match="missing"):
        tasks.load_split("trec", "train")


def test_label_first_token_rule_and_collision():
    tok = gpt2_tokenizer()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ids = tasks.label_token_ids(tok, "trec")  # ' Abbreviation' is several GPT-2 tokens
    assert any(issubclass(x.category, LabelWordWarning) and "Abbreviation" in str(x.message) for x in w)
    assert ids[0] == tok(" Abbreviation", add_special_tokens=False)["input_ids"][0]
    bad = tasks.Task("bad", "Bad", "X: ", "\nY:", ("Abbreviation", "Abbreviated"), "none")
    with pytest.raises(LabelCollisionError, match="share their first token"):
        tasks.label_token_ids(tok, bad)


def test_rebuild_from_staicc_reproduces_committed_files(tmp_path):
    import subprocess
    import sys

    root = task_data.data_dir().parent
    out = subprocess.run([sys.executable, str(root / "scripts" / "build_data.py"), "--source", "staicc",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    new = json.loads((tmp_path / "checksums.json").read_text())
    old = json.loads((task_data.data_dir() / "checksums.json").read_text())
    assert {k: v["sha256"] for k, v in new.items()} == {k: v["sha256"] for k, v in old.items()}


def test_unpickler_refuses_globals():
    import importlib.util
    import io
    import pickle

    spec = importlib.util.spec_from_file_location("build_data", task_data.data_dir().parent / "scripts" / "build_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    evil = pickle.dumps([[["x"], 0], print])  # a global inside the rows
    with pytest.raises(pickle.UnpicklingError, match="refusing global"):
        mod._RowsOnly(io.BytesIO(evil)).load()
