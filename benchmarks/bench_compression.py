"""Speed of Hidden_anchor vs full ICL (paper A, Table 3), per task, in one run.

    python benchmarks/bench_compression.py [--model google/gemma-3-270m] [--n 16] [--repeats 3] [--seed 42]
        [--tasks sst2,trec,agnews,tweet_emotion] [--threads N] [--label-only]

Prints per task: L_demo (mean tokens per demonstration), L_x (mean input
tokens), L_anchor (cached positions), the token-ratio bound
(L_context + L_x) / (L_anchor + L_x), the measured speed-up (time per input of
full ICL / Hidden_anchor, one input at a time, same run) and speed-up / bound
(goal: >= 0.9). Writes results/<model>/<profile>/metrics/bench_compression.json.
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from helpers.core.models import load_model
from helpers.core.prompts import make_icl_set
from helpers.protocols.compression import engine_goal, time_icl_vs_anchor
from helpers.study.paper import TABLE3_SPEEDUP as PAPER
from helpers.study.profile_table import OFFLINE_TASKS
from helpers.study.profiles import current_model_name
from helpers.study.results import save_metrics


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=current_model_name())
    ap.add_argument("--tasks", default=",".join(OFFLINE_TASKS))
    ap.add_argument("--n", type=int, default=16, help="test inputs per task")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--label-only", action="store_true",
                    help="compute only the label logits in both paths (drops the fixed unembedding cost)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model, verbose=False)
    rows = []
    for task in args.tasks.split(","):
        s = make_icl_set(model, task, args.seed, args.n)
        r = time_icl_vs_anchor(model, s, n_inputs=args.n, repeats=args.repeats, label_only=args.label_only)
        rows.append(r)
        print(f"{task:14s} L_demo={r['L_demo']:6.1f} L_x={r['L_x']:5.1f} L_anchor={r['L_anchor']:3d} "
              f"bound={r['bound']:4.2f}x  speed-up={r['speedup']:4.2f}x  ratio={r['speedup_over_bound']:.2f}  "
              f"(full {1e3 * r['t_full']:.1f} ms, anchor {1e3 * r['t_anchor']:.1f} ms per input)", flush=True)
    df = pd.DataFrame(rows)[["task", "L_demo", "L_x", "L_anchor", "bound", "speedup", "speedup_over_bound",
                             "t_full", "t_anchor", "t_build", "n_inputs"]]
    print(df.round(3).to_string(index=False))
    verdict = engine_goal(dict(zip(df.task, df.speedup)), dict(zip(df.task, df.bound)))
    print(f"threads={torch.get_num_threads()} label_only={args.label_only}  "
          f"verdict (goal: speed-up >= 90% of the bound on every task): {verdict}")
    name = "bench_compression" + ("_label_only" if args.label_only else "")
    save_metrics(name, {"model": args.model, "threads": torch.get_num_threads(), "label_only": args.label_only,
                        "rows": rows, "verdict": verdict, "paper": PAPER})
    return df


if __name__ == "__main__":
    main()
