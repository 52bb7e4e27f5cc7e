"""Saliency throughput: batched vs one-by-one, measured in the same run on the default model.

    python benchmarks/bench_saliency.py [--n 8] [--batch-size 4] [--task sst2] [--model NAME]

Both modes compute the same thing (``helpers.saliency.saliency_flow``) on the same
prompts; the script checks that the results agree and prints inputs/second and
the ratio. A warm-up batch runs first so neither mode pays one-off costs.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model name (default: $ICL_MODEL or Gemma 3 270M)")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--n", type=int, default=8, help="inputs (fresh demonstrations each)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    from helpers.models import load_model
    from helpers.profiles import current_model_name
    from helpers.saliency import saliency_flow, saliency_prompts
    from helpers.tasks import LabelWordWarning

    name = args.model or current_model_name()
    model = load_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        prompts, lids = saliency_prompts(model, args.task, args.seed, args.n)
    saliency_flow(model, prompts[:2], lids, batch_size=2)  # warm-up

    t0 = time.perf_counter()
    one = saliency_flow(model, prompts, lids, batch_size=1)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = saliency_flow(model, prompts, lids, batch_size=args.batch_size)
    t_batched = time.perf_counter() - t0

    diff = float((one - batched).abs().max())
    scale = float(one.abs().max())
    lens = [len(p) for p in prompts]
    print(f"model {name}, task {args.task}, {len(prompts)} inputs ({min(lens)}-{max(lens)} tokens), "
          f"{torch.get_num_threads()} threads")
    print(f"one-by-one : {len(prompts) / t_one:.3f} inputs/s ({t_one:.1f} s)")
    print(f"batched ({args.batch_size}): {len(prompts) / t_batched:.3f} inputs/s ({t_batched:.1f} s)")
    print(f"throughput ratio batched / one-by-one: {t_one / t_batched:.2f}x")
    print(f"max |difference| of S_wp/S_pq/S_ww: {diff:.2e} (max value {scale:.2e})")


if __name__ == "__main__":
    main()
