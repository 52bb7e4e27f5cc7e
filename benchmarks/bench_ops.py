"""Operators per call: how many matrix products and index ops one forward + backward pass launches, per layer.

    python benchmarks/bench_ops.py [--model NAME] [--n 1 8] [--task sst2]

A GPU waits on the host when work comes as many small launches, and the number of launches is an operator count,
which ``torch.profiler`` takes on a CPU as well as on a card. For one ``saliency_batch`` call (one forward and
one backward pass, the saliency path of notebooks 01, 08 and 11) on ``n`` prompts, it counts every ``aten::``
operator the call runs, and reports the products (the kernels ``bmm``, ``mm``, ``baddbmm``, ``addmm``: the
wrappers ``matmul``, ``einsum`` and ``linear`` that call them are not counted twice), the views that pick one head
(``select``) and all operators, per call and per layer. A count that grows with the
number of heads (one product per key head) is what the batched attention of the roadmap removes; a count that does
not is a fixed number of launches per layer, whatever the model's width.

Also, on the same prompts: ``saliency_flow`` (which chooses its batches) against one ``saliency_batch`` call, as a
ratio in one run, with the batches the flow chose.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter

import torch

PRODUCTS = ("aten::bmm", "aten::mm", "aten::baddbmm", "aten::addmm")  # the kernels, not the wrappers around them
PICKS = ("aten::select",)


def _prompts(model, task: str, n: int, seed: int = 42):
    from helpers.core.tasks import LabelWordWarning
    from helpers.experiments.saliency import saliency_prompts

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return saliency_prompts(model, task, seed, n)


def count_ops(fn) -> Counter:
    """``{operator name: calls}`` of every operator ``fn()`` runs (CPU profiler, no shapes or stacks kept)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities, record_shapes=False) as prof:
        fn()
    return Counter({e.key: e.count for e in prof.key_averages()})


def measure_ops(model, task: str = "sst2", sizes=(1, 8)) -> list[dict]:
    """Per number of prompts: the products, head picks and all operators of one ``saliency_batch`` call, per call
    and per layer, with the model's layers and heads (so a count that grows with heads shows)."""
    from helpers.experiments.saliency import saliency_batch

    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = []
    for n in sizes:
        prompts, lids = _prompts(model, task, n)
        saliency_batch(model, prompts[:1], lids)  # warm-up: one-off costs outside the count
        ops = count_ops(lambda prompts=prompts, lids=lids: saliency_batch(model, prompts, lids))
        products = sum(ops[k] for k in PRODUCTS)
        picks = sum(ops[k] for k in PICKS)
        total = sum(v for k, v in ops.items() if k.startswith("aten::"))
        out.append({"n": len(prompts), "layers": L, "heads": H, "kv_heads": model.cfg.n_key_value_heads or H,
                    "products": products, "products_per_layer": products / L, "selects": picks,
                    "selects_per_layer": picks / L, "aten_ops": total, "aten_ops_per_layer": total / L,
                    "top": ops.most_common(8)})
    return out


def measure_flow_vs_batch(model, task: str = "sst2", n: int = 8) -> dict:
    """``saliency_flow`` (its own batches) against one ``saliency_batch`` call on the same ``n`` prompts: seconds,
    the ratio, and the batches the flow chose."""
    from helpers.experiments import saliency

    prompts, lids = _prompts(model, task, n)
    one_call = saliency.saliency_batch
    one_call(model, prompts[:1], lids)  # warm-up
    batches = []

    def counted(m, ps, ids):  # the flow's own calls, and how many prompts each held
        batches.append(len(ps))
        return one_call(m, ps, ids)

    saliency.saliency_batch = counted
    try:
        t0 = time.perf_counter()
        saliency.saliency_flow(model, prompts, lids, batch_size=len(prompts))
        t_flow = time.perf_counter() - t0
    finally:
        saliency.saliency_batch = one_call
    t0 = time.perf_counter()
    one_call(model, prompts, lids)
    t_one = time.perf_counter() - t0
    return {"n": len(prompts), "flow_s": t_flow, "one_batch_s": t_one, "ratio": t_flow / t_one,
            "flow_batches": batches}


def markdown(ops: list[dict], flow: dict | None = None) -> str:
    rows = ["| prompts | layers x heads (key heads) | products per call | per layer | `select` per layer | "
            "aten ops per layer |", "|---|---|---|---|---|---|"]
    rows += [f"| {r['n']} | {r['layers']} x {r['heads']} ({r['kv_heads']}) | {r['products']} | "
             f"{r['products_per_layer']:.1f} | {r['selects_per_layer']:.1f} | {r['aten_ops_per_layer']:.1f} |"
             for r in ops]
    if flow is not None:
        rows += ["", f"`saliency_flow` on {flow['n']} prompts (batches {flow['flow_batches']}) took "
                     f"{flow['flow_s']:.2f} s, one `saliency_batch` call {flow['one_batch_s']:.2f} s: ratio "
                     f"{flow['ratio']:.2f}x"]
    return "\n".join(rows) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model name or folder (default: $ICL_MODEL or Gemma 3 270M); "
                    "'tiny-<gpt2|rotary|gqa>' for a tiny random model")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--heads", type=int, default=4, help="heads of a tiny model (default 4)")
    a = ap.parse_args(argv)
    if a.model and a.model.startswith("tiny-"):
        from helpers.exercises.tiny import make_tiny_model

        model = make_tiny_model(a.model.removeprefix("tiny-"), n_heads=a.heads)
    else:
        from helpers.core.models import load_model
        from helpers.study.profiles import current_model_name

        model = load_model(a.model or current_model_name())
    ops = measure_ops(model, a.task, a.n)
    flow = measure_flow_vs_batch(model, a.task, max(a.n))
    print(markdown(ops, flow))


if __name__ == "__main__":
    main()
