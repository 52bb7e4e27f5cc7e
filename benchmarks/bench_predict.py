"""Batched vs one-by-one label-restricted prediction, measured in one run.

    python benchmarks/bench_predict.py [--model gemma] [--n 32] [--batch-size 16]

Prints, per task, seconds for the same prompts run one by one and batched
(length-grouped, right-padded), their ratio, the largest logit difference
between the two (they must agree), and the process's peak resident memory.
Timings depend on the machine; the ratio is the number to read.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def measure(model, tasks, n: int = 32, batch_size: int = 16, seed: int = 42, run=None) -> dict:
    """Seconds one-by-one vs batched per task on the same prompts, their ratio and max logit difference.

    ``run(prompts, label_ids, batch_size) -> Predictions`` is what gets timed
    (default :func:`helpers.core.predict.predict`; e.g. an isolation run).
    """
    from helpers.core.predict import predict
    from helpers.core.prompts import make_icl_set

    run = run or (lambda prompts, lids, bs: predict(model, prompts, lids, batch_size=bs))
    out = {"n": n, "batch_size": batch_size, "threads": torch.get_num_threads(), "tasks": {}}
    print(f"{'task':<15}{'tokens':>8}{'one-by-one s':>14}{'batched s':>11}{'ratio':>8}{'max |diff|':>12}")
    for task in tasks:
        s = make_icl_set(model, task, seed, n, 1)
        run(s.prompts[:2], s.label_ids, 2)  # warm-up
        t0 = time.perf_counter()
        ones = [run([p], s.label_ids, 1) for p in s.prompts]
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        batched = run(s.prompts, s.label_ids, batch_size)
        t_b = time.perf_counter() - t0
        one_logits = torch.cat([o.label_logits for o in ones])
        diff = (one_logits - batched.label_logits).abs().max().item()
        mean_len = sum(len(p) for p in s.prompts) / len(s.prompts)
        out["tasks"][task] = {"mean_tokens": mean_len, "one_by_one_s": t_one, "batched_s": t_b,
                              "ratio": t_one / t_b, "max_abs_diff": diff,
                              "one_by_one_logits": one_logits, "batched_logits": batched.label_logits}
        print(f"{task:<15}{mean_len:>8.0f}{t_one:>14.2f}{t_b:>11.2f}{t_one / t_b:>7.2f}x{diff:>12.1e}", flush=True)
    return out


def main(argv=None) -> dict:
    from helpers.core.models import load_model

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="google/gemma-3-270m")
    ap.add_argument("--tasks", nargs="+", default=["sst2", "trec", "agnews", "tweet_emotion"])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    model = load_model(a.model)
    out = {"model": a.model, **measure(model, a.tasks, a.n, a.batch_size)}
    for r in out["tasks"].values():  # keep the JSON to numbers
        r.pop("one_by_one_logits"), r.pop("batched_logits")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_rss_mb"] = peak_mb
    print(f"peak resident memory: {peak_mb:.0f} MB")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
