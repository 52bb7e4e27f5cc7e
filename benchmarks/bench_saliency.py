"""Saliency throughput: batched vs one-by-one, measured in the same run on the default model.

    python benchmarks/bench_saliency.py [--n 8] [--batch-size 4] [--task sst2] [--model NAME]

Both modes compute the same thing (``helpers.experiments.saliency.saliency_flow``) on the same
prompts; the script checks that the results agree and prints inputs/second and
the ratio. A warm-up batch runs first so neither mode pays one-off costs.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch


def measure(model, task: str = "sst2", n: int = 8, batch_size: int = 4, seed: int = 42) -> dict:
    """Saliency one-by-one vs batched on the same prompts (fresh demonstrations each), same run."""
    from helpers.core.tasks import LabelWordWarning
    from helpers.experiments.saliency import saliency_flow, saliency_prompts

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        prompts, lids = saliency_prompts(model, task, seed, n)
    saliency_flow(model, prompts[:2], lids, batch_size=2)  # warm-up
    t0 = time.perf_counter()
    one = saliency_flow(model, prompts, lids, batch_size=1)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = saliency_flow(model, prompts, lids, batch_size=batch_size)
    t_batched = time.perf_counter() - t0
    lens = [len(p) for p in prompts]
    return {"task": task, "n": len(prompts), "batch_size": batch_size, "threads": torch.get_num_threads(),
            "min_tokens": min(lens), "max_tokens": max(lens), "one_by_one_s": t_one, "batched_s": t_batched,
            "ratio": t_one / t_batched, "max_abs_diff": float((one - batched).abs().max()),
            "max_value": float(one.abs().max())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model name (default: $ICL_MODEL or Gemma 3 270M)")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--n", type=int, default=8, help="inputs (fresh demonstrations each)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)

    from helpers.core.models import load_model
    from helpers.study.profiles import current_model_name

    name = args.model or current_model_name()
    model = load_model(name)
    r = measure(model, args.task, args.n, args.batch_size, args.seed)
    print(f"model {name}, task {args.task}, {r['n']} inputs ({r['min_tokens']}-{r['max_tokens']} tokens), "
          f"{r['threads']} threads")
    print(f"one-by-one : {r['n'] / r['one_by_one_s']:.3f} inputs/s ({r['one_by_one_s']:.1f} s)")
    print(f"batched ({args.batch_size}): {r['n'] / r['batched_s']:.3f} inputs/s ({r['batched_s']:.1f} s)")
    print(f"throughput ratio batched / one-by-one: {r['ratio']:.2f}x")
    print(f"max |difference| of S_wp/S_pq/S_ww: {r['max_abs_diff']:.2e} (max value {r['max_value']:.2e})")


if __name__ == "__main__":
    main()
