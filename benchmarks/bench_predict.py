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


def measure(model, tasks, n: int = 32, batch_size: int = 16, seed: int = 42) -> dict:
    """Seconds one-by-one vs batched per task on the same prompts, their ratio and max logit difference."""
    from helpers.predict import predict
    from helpers.prompts import make_icl_set

    out = {"n": n, "batch_size": batch_size, "threads": torch.get_num_threads(), "tasks": {}}
    print(f"{'task':<15}{'tokens':>8}{'one-by-one s':>14}{'batched s':>11}{'ratio':>8}{'max |diff|':>12}")
    for task in tasks:
        s = make_icl_set(model, task, seed, n, 1)
        predict(model, s.prompts[:2], s.label_ids, batch_size=2)  # warm-up
        t0 = time.perf_counter()
        ones = [predict(model, [p], s.label_ids, batch_size=1) for p in s.prompts]
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        batched = predict(model, s.prompts, s.label_ids, batch_size=batch_size)
        t_b = time.perf_counter() - t0
        diff = max((o.label_logits[0] - batched.label_logits[i]).abs().max().item() for i, o in enumerate(ones))
        mean_len = sum(len(p) for p in s.prompts) / len(s.prompts)
        out["tasks"][task] = {"mean_tokens": mean_len, "one_by_one_s": t_one, "batched_s": t_b,
                              "ratio": t_one / t_b, "max_abs_diff": diff}
        print(f"{task:<15}{mean_len:>8.0f}{t_one:>14.2f}{t_b:>11.2f}{t_one / t_b:>7.2f}x{diff:>12.1e}", flush=True)
    return out


def main(argv=None) -> dict:
    from helpers.models import load_model

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
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_rss_mb"] = peak_mb
    print(f"peak resident memory: {peak_mb:.0f} MB")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
