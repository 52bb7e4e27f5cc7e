"""All performance figures in one run on one model: what batching buys, what compression buys, peak memory.

    python benchmarks/run_benchmarks.py [--model gemma] [--n 16] [--tasks sst2 trec agnews tweet_emotion]
    make bench

Measured in this one process, on the same prompts, one after the other:

(a) batched vs one-by-one throughput for label prediction
    (``helpers.core.predict.predict``), saliency (``helpers.experiments.saliency.saliency_flow``,
    forward + backward) and isolation (``helpers.experiments.isolation.run_isolation``,
    label words isolated in the first 5 layers), with the largest difference
    between the two modes (they must agree);
(b) Hidden_anchor vs full ICL time per input, per task, with the token-ratio
    bound (``helpers.protocols.compression.time_icl_vs_anchor``; goal: >= 90% of the bound);
(c) peak resident memory of the process after each stage;
(d) what ``helpers.core.tl_patches.matmul_layout`` saves: label prediction one input at
    a time and batched, with the weights as TransformerLens stores them
    (copied on every forward) vs laid out for its matmuls (outputs identical);
(e) the shared-prefix engine (``helpers.core.prefix``) against full prompts, per
    experiment and task on the same prompts: vanilla 1-shot and 5-shot
    prediction (label logits, the paper's prediction), the base run with
    top-5 tokens, label isolation in the first 5 layers and re-weighted
    prediction: tokens each path processes, the unique-token bound (each
    demonstration set once plus every input's own tokens), both wall times,
    the speed-up as a share of the bound, and whether predictions are identical
    (goal: >= 80% of the bound for vanilla prediction on every task).

(f) the accounting of the collection (``helpers.core.accounting``): every notebook of the model run by
    ``scripts/run_all.py --account`` at ``--accounting-profile`` (default ``smoke``, a few minutes; the
    ``default`` profile's table is what ``make run ACCOUNT=1`` writes), into a fresh store, so every step is
    computed: per notebook and stored step, forward and backward positions, FLOPs, wall time, GFLOP/s and
    the share of this machine's fp32 matmul peak measured in the same kernels.

(g) on a GPU only (skipped with one line where no CUDA GPU is visible): the achieved TFLOP/s of every
    experiment path (plain forward, forward + backward, saliency_batch, saliency_flow, predict,
    run_isolation, TF32 and bfloat16 forwards) on the default model and on a random model of GPT2-XL's
    shape (``benchmarks/bench_gpu.py``), written as ``results/<model>/<profile>/gpu-bench.json`` in the format
    of ``benchmarks/gpu/*.json``, which ``scripts/gpu_hours.py`` reads.

(h) heads ablated at q (notebook 10's ablations, ``helpers.experiments.head_ablation``): the plain run and
    several ablations at q, each run as whole suffixes after the shared demonstrations
    (``helpers.core.prefix_runs.predict_with_cache``) against each prompt's tokens before q run once and q alone
    per condition (``helpers.core.prefix_runs.predict_q_row``): both wall times, the speed-up, and whether the
    predictions are identical.

Writes ``results/<model>/<profile>/benchmarks.json`` and
``results/<model>/<profile>/benchmarks.md``. Timings depend on the machine and
on its load: read the ratios, and run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TASKS = ("sst2", "trec", "agnews", "tweet_emotion")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _numbers(measured: dict) -> dict:
    """:func:`bench_predict.measure`'s per-task rows without the logits."""
    return {t: {k: v for k, v in r.items() if not k.endswith("_logits")} for t, r in measured["tasks"].items()}


def measure_isolation(model, tasks, n: int = 16, batch_size: int = 16, k: int = 5, seed: int = 42) -> dict:
    """Label words isolated in the first ``k`` layers: one-by-one vs batched on the same prompts."""
    import bench_predict

    from helpers.experiments.isolation import run_isolation

    def run(prompts, lids, bs):
        return run_isolation(model, prompts, lids, "label", "first", k, batch_size=bs)

    return _numbers(bench_predict.measure(model, tasks, n, batch_size, seed, run=run))


def measure_compression(model, tasks, n: int = 16, repeats: int = 3, seed: int = 42) -> list[dict]:
    from helpers.core.prompts import make_icl_set
    from helpers.protocols.compression import time_icl_vs_anchor

    rows = []
    for task in tasks:
        s = make_icl_set(model, task, seed, n)
        r = time_icl_vs_anchor(model, s, n_inputs=n, repeats=repeats)
        rows.append(r)
        print(f"  {task:<14} L_demo {r['L_demo']:6.1f}  L_x {r['L_x']:5.1f}  L_anchor {r['L_anchor']:3d}  "
              f"bound {r['bound']:4.2f}x  speed-up {r['speedup']:4.2f}x  ({100 * r['speedup_over_bound']:.0f}% "
              f"of the bound)", flush=True)
    return rows


def measure_layout(model, task: str = "sst2", n: int = 16, batch_size: int = 16, seed: int = 42) -> dict:
    """Prediction time with TransformerLens' own weight layout vs :func:`helpers.core.tl_patches.matmul_layout`."""
    import bench_predict

    from helpers.core.tl_patches import matmul_layout

    fast = bench_predict.measure(model, [task], n, batch_size, seed)["tasks"][task]
    for p in model.parameters():  # TransformerLens' layout: contiguous as declared
        p.data = p.data.contiguous()
    try:
        plain = bench_predict.measure(model, [task], n, batch_size, seed)["tasks"][task]
    finally:
        matmul_layout(model)
    one_plain, one_fast = plain["one_by_one_s"], fast["one_by_one_s"]
    b_plain, b_fast = plain["batched_s"], fast["batched_s"]
    out = {"task": task, "n": n, "one_by_one_plain_s": one_plain, "one_by_one_laid_out_s": one_fast,
           "one_by_one_ratio": one_plain / one_fast, "batched_plain_s": b_plain, "batched_laid_out_s": b_fast,
           "batched_ratio": b_plain / b_fast,
           "identical": all(torch.equal(fast[k], plain[k]) for k in ("one_by_one_logits", "batched_logits"))}
    print(f"  {task}: one-by-one {one_plain:.2f}s -> {one_fast:.2f}s ({out['one_by_one_ratio']:.2f}x), batched "
          f"{b_plain:.2f}s -> {b_fast:.2f}s ({out['batched_ratio']:.2f}x), identical logits: {out['identical']}",
          flush=True)
    return out


SHARED_EXPERIMENTS = ("vanilla 1-shot", "vanilla 5-shot", "base run, top-5", "isolation label first 5",
                      "re-weighted 1-shot")


def measure_shared(model, tasks, n: int = 64, batch_size: int = 16, seed: int = 42,
                   experiments=SHARED_EXPERIMENTS) -> list[dict]:
    """Shared prefix vs full prompts, same prompts, same run (the full path first, then the shared one)."""
    from helpers.core.predict import predict, shots_for
    from helpers.core.prefix_runs import predict_shared, token_bound
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.isolation import run_isolation
    from helpers.experiments.reweighting import reweight_factory

    rows = []
    for exp in experiments:
        for task in tasks:
            k = shots_for(task, 5) if exp == "vanilla 5-shot" else 1
            s = make_icl_set(model, task, seed, n, k)
            ps, ids = s.prompts, s.label_ids
            if exp.startswith("isolation"):
                run = {"full": lambda: run_isolation(model, ps, ids, "label", "first", 5, batch_size=batch_size,
                                                     shared=False),
                       "shared": lambda: run_isolation(model, ps, ids, "label", "first", 5, batch_size=batch_size)}
            else:
                kw = {"top_k": 5 if exp.startswith("base") else 0}
                if exp.startswith("re-weighted"):
                    g = torch.Generator().manual_seed(0)
                    beta = 0.5 * torch.randn(model.cfg.n_layers, model.cfg.n_heads, ps[0].n_demos, generator=g)
                    kw["hooks"] = reweight_factory(beta)
                run = {"full": lambda: predict(model, ps, ids, batch_size, **kw),
                       "shared": lambda: predict_shared(model, ps, ids, batch_size, **kw)}
            predict_shared(model, ps[:2], ids, batch_size)  # warm-up
            out, secs = {}, {}
            for path in ("full", "shared"):
                t0 = time.perf_counter()
                out[path] = run[path]()
                secs[path] = time.perf_counter() - t0
            tb = token_bound(ps)
            speedup = secs["full"] / secs["shared"]
            row = {"experiment": exp, "task": task, "n": len(ps), "prefix": tb["prefix"],
                   "suffix": round(tb["mean_suffix"], 1), "full_tokens": tb["full_tokens"],
                   "shared_tokens": tb["unique_tokens"], "bound": tb["bound"], "full_s": secs["full"],
                   "shared_s": secs["shared"], "speedup": speedup, "pct_bound": 100 * speedup / tb["bound"],
                   "same_pred": bool(torch.equal(out["full"].pred, out["shared"].pred)),
                   "same_topk": bool(torch.equal(out["full"].topk, out["shared"].topk)),
                   "max_abs_diff": float((out["full"].label_logits - out["shared"].label_logits).abs().max())}
            rows.append(row)
            print(f"  {exp:24s} {task:13s} full {secs['full']:6.1f}s shared {secs['shared']:5.1f}s "
                  f"{speedup:5.2f}x of bound {tb['bound']:5.2f} ({row['pct_bound']:.0f}%), same predictions "
                  f"{row['same_pred']}, max diff {row['max_abs_diff']:.1e}", flush=True)
    return rows


def measure_q_row(model, tasks, n: int = 32, batch_size: int = 16, seed: int = 42, n_sets: int = 6,
                  n_heads: int = 4) -> list[dict]:
    """The plain run and ``n_sets`` ablations at q of ``n_heads`` random heads each, as whole suffixes vs q's row
    alone, same prompts, same run (the suffix path first)."""
    from helpers.core.prefix_runs import predict_q_row, predict_with_cache, q_row_fits, shared_cache
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.head_ablation import ablation_hook_pair, random_heads

    sets = {"plain": [], **{f"set {i}": random_heads(model, n_heads, seed=i) for i in range(n_sets)}}
    rows = []
    for task in tasks:
        s = make_icl_set(model, task, seed, n)
        ps, ids = s.prompts, s.label_ids
        if not q_row_fits(model, ps):
            print(f"  {task:13s} skipped: the prompts reach a sliding window before q", flush=True)
            continue
        t0 = time.perf_counter()
        cache = shared_cache(model, ps)
        whole = {k: predict_with_cache(model, ps, ids, batch_size, cache=cache,
                                       hooks=ablation_hook_pair(hs, at="q")[1] if hs else None) for k, hs in sets.items()}
        t1 = time.perf_counter()
        cache = shared_cache(model, ps)
        q_row = predict_q_row(model, ps, ids, {k: ablation_hook_pair(hs, at="all")[0] if hs else []
                                               for k, hs in sets.items()}, batch_size, cache)
        t2 = time.perf_counter()
        row = {"task": task, "n": len(ps), "conditions": len(sets),
               "mean_suffix": round(sum(p.q + 1 - cache.length for p in ps) / len(ps), 1),
               "whole_s": t1 - t0, "q_row_s": t2 - t1, "speedup": (t1 - t0) / (t2 - t1),
               "same_pred": all(torch.equal(whole[k].pred, q_row[k].pred) for k in sets),
               "max_abs_diff": max(float((whole[k].label_logits - q_row[k].label_logits).abs().max()) for k in sets)}
        rows.append(row)
        print(f"  {task:13s} whole suffixes {row['whole_s']:5.1f}s q row {row['q_row_s']:5.1f}s "
              f"{row['speedup']:.2f}x, same predictions {row['same_pred']}, max diff {row['max_abs_diff']:.1e}",
              flush=True)
    return rows


def measure_accounting(model_name: str, profile: str = "smoke", tasks=None) -> dict:
    """Every notebook of ``model_name`` under run_all --account at ``profile``, in a fresh store and results folder."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="icl-bench-acct-") as tmp:
        env = {**os.environ, "ICL_RESULTS_CACHE": str(Path(tmp) / "store")}
        env.pop("ICL_RECOMPUTE", None)
        if tasks:
            env["ICL_TASKS"] = ",".join(tasks)
        cmd = [sys.executable, str(ROOT / "scripts" / "run_all.py"), "--profile", profile, "--models", model_name,
               "--out", str(Path(tmp) / "results"), "--jobs", "1", "--account", "--progress-every", "0"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=ROOT)
        folders = list((Path(tmp) / "results").glob("*/*/accounting.json"))
        rows = json.loads(folders[0].read_text()) if folders else []
    return {"profile": profile, "tasks": list(tasks or []), "exit": proc.returncode,
            "seconds": time.perf_counter() - t0, "rows": rows}


def markdown(res: dict) -> str:
    from helpers.study.report import markdown_table

    lines = [f"# Benchmarks: {res['model']}\n",
             f"{res['threads']} torch thread(s), {res['cpu']}, torch {res['torch']}; measured in one run "
             f"({res['seconds']:.0f} s). Timings depend on the machine and its load; read the ratios.\n",
             ]
    if "prediction" in res:
        lines.append("## (a) Batched vs one-by-one (same prompts, same run)\n")
        rows = [{"what": "prediction", "task": t, **{k: v for k, v in r.items() if k != "mean_tokens"}}
                for t, r in res["prediction"]["tasks"].items()]
        sal = res["saliency"]
        rows.append({"what": "saliency (fwd + bwd)", "task": sal["task"], "n": sal["n"], "one_by_one_s": sal["one_by_one_s"],
                     "batched_s": sal["batched_s"], "ratio": sal["ratio"], "max_abs_diff": sal["max_abs_diff"]})
        rows += [{"what": "isolation (label, first 5)", "task": t, **r} for t, r in res["isolation"].items()]
        for r in rows:
            r["max_abs_diff"] = f"{r['max_abs_diff']:.1e}"
            r.setdefault("n", res["prediction"]["n"])
        lines.append(markdown_table([{k: r.get(k, "") for k in ("what", "task", "n", "one_by_one_s", "batched_s",
                                                                 "ratio", "max_abs_diff")} for r in rows]))
    if "compression" in res:
        lines.append("## (b) Hidden_anchor vs full ICL, time per input (one input at a time)\n")
        lines.append(markdown_table([{"task": r["task"], "L_demo": r["L_demo"], "L_x": r["L_x"], "L_anchor": r["L_anchor"],
                                      "bound": r["bound"], "speed-up": r["speedup"],
                                      "% of bound": 100 * r["speedup_over_bound"], "full ms": 1e3 * r["t_full"],
                                      "anchor ms": 1e3 * r["t_anchor"]} for r in res["compression"]]))
        lines.append(f"Goal (speed-up >= 90% of the token-ratio bound on every task): **{res['compression_verdict']}**.\n")
    if "layout" in res:
        lay = res["layout"]
        lines.append("## (d) Weight layout for TransformerLens' matmuls (helpers.core.tl_patches.matmul_layout)\n")
        lines.append(markdown_table([
            {"mode": "one by one", "TransformerLens layout s": lay["one_by_one_plain_s"],
             "laid out s": lay["one_by_one_laid_out_s"], "speed-up": lay["one_by_one_ratio"]},
            {"mode": "batched", "TransformerLens layout s": lay["batched_plain_s"], "laid out s": lay["batched_laid_out_s"],
             "speed-up": lay["batched_ratio"]}]))
        lines.append(f"{lay['n']} {lay['task']} inputs; logits bit-identical in both layouts: {lay['identical']}.\n")
    if res.get("shared"):
        lines.append("## (e) Shared prefix vs full prompts (helpers.core.prefix), same prompts, same run\n")
        lines.append(markdown_table([{
            "experiment": r["experiment"], "task": r["task"], "n": r["n"], "prefix tok": r["prefix"],
            "suffix tok": r["suffix"], "full tokens": r["full_tokens"], "shared tokens": r["shared_tokens"],
            "bound": r["bound"], "full s": r["full_s"], "shared s": r["shared_s"], "speed-up": r["speedup"],
            "% of bound": r["pct_bound"], "same pred": r["same_pred"], "max |diff|": f"{r['max_abs_diff']:.1e}"}
            for r in res["shared"]]))
        van = [r for r in res["shared"] if r["experiment"].startswith("vanilla")]
        ok = all(r["pct_bound"] >= 80 and r["same_pred"] for r in van)
        lines.append(f"Goal (vanilla prediction >= 80% of the unique-token bound on every task, identical "
                     f"predictions): **{'met' if ok else 'not met'}**.\n")
    if res.get("q_row"):
        lines.append("## (h) Heads ablated at q: whole suffixes vs q's row alone (helpers.core.prefix_runs.predict_q_row)\n")
        lines.append(markdown_table([{
            "task": r["task"], "n": r["n"], "conditions": r["conditions"], "mean suffix tok": r["mean_suffix"],
            "whole suffixes s": r["whole_s"], "q row s": r["q_row_s"], "speed-up": r["speedup"],
            "same pred": r["same_pred"], "max |diff|": f"{r['max_abs_diff']:.1e}"} for r in res["q_row"]]))
    if res.get("accounting"):
        from helpers.study.report import accounting_markdown

        acc = res["accounting"]
        tasks = f", tasks {', '.join(acc['tasks'])}" if acc["tasks"] else ""
        body = accounting_markdown(acc["rows"])
        lines.append(f"## (f) Accounting: every notebook, profile {acc['profile']}{tasks} "
                     f"(run_all --account, exit {acc['exit']}, {acc['seconds']:.0f} s)\n\n{body}")
    if isinstance(res.get("gpu"), dict):
        g = res["gpu"]
        lines.append(f"## (g) GPU throughput per experiment path: {g['card']} (torch {g['torch']}, {g['convention']})\n")
        lines.append(markdown_table([{"model": m, "path": p, "TFLOP/s": r["tflops"], "s": r["seconds"], "what": r["what"]}
                                     for m, v in g["models"].items() for p, r in v["paths"].items()]))
    elif "gpu" in res:
        lines.append(f"## (g) GPU throughput per experiment path\n\n{res['gpu']}.\n")
    lines.append("## (c) Peak resident memory (MB, process, after each stage)\n")
    lines.append(markdown_table([{"after": k, "peak RSS MB": v} for k, v in res["peak_rss_mb"].items()]))
    return "\n".join(lines)


def main(argv=None) -> dict:
    import bench_predict
    import bench_saliency

    from helpers.core.models import load_model
    from helpers.protocols.compression import engine_goal
    from helpers.study.profiles import current_model_name, get_profile
    from helpers.study.results import model_slug, results_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=current_model_name())
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--n", type=int, default=16, help="inputs per task for prediction, isolation, compression")
    ap.add_argument("--n-saliency", type=int, default=8, help="inputs for the saliency benchmark (SST-2)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the compression timing (median)")
    ap.add_argument("--profile", default=None, help="results folder's profile (default: $ICL_PROFILE or default)")
    ap.add_argument("--n-shared", type=int, default=64, help="inputs per task for the shared-prefix comparison")
    ap.add_argument("--n-q-row", type=int, default=32, help="inputs per task for section (h)")
    ap.add_argument("--accounting-profile", default="smoke",
                    help="profile of section (f)'s notebook runs (default smoke; make run ACCOUNT=1 gives default's)")
    ap.add_argument("--accounting-tasks", nargs="*", default=None, help="tasks of section (f) (default: the profile's)")
    ap.add_argument("--only", nargs="*", default=None, choices=["a", "b", "d", "e", "f", "g", "h"],
                    help="run only these sections (default: all)")
    ap.add_argument("--shared-experiments", nargs="*", default=list(SHARED_EXPERIMENTS), choices=SHARED_EXPERIMENTS,
                    help="experiments of section (e)")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t_start = time.perf_counter()
    mem = {"start": peak_rss_mb()}
    model = load_model(a.model)
    name = getattr(model.cfg, "icl_model_name", a.model)
    mem["model loaded"] = peak_rss_mb()
    res = {"model": name, "threads": torch.get_num_threads(), "torch": torch.__version__,
           "cpu": platform.processor() or platform.machine()}
    want = set(a.only or "abdefgh")
    if "a" in want:
        print(f"(a) prediction, batched ({a.batch_size}) vs one-by-one", flush=True)
        res["prediction"] = bench_predict.measure(model, a.tasks, a.n, a.batch_size)
        res["prediction"]["tasks"] = _numbers(res["prediction"])
        mem["prediction"] = peak_rss_mb()
        print("(a) saliency, batched (4) vs one-by-one", flush=True)
        res["saliency"] = bench_saliency.measure(model, "sst2", a.n_saliency, 4)
        print(f"  sst2 ratio {res['saliency']['ratio']:.2f}x", flush=True)
        mem["saliency"] = peak_rss_mb()
        print(f"(a) isolation, batched ({a.batch_size}) vs one-by-one", flush=True)
        res["isolation"] = measure_isolation(model, a.tasks, a.n, a.batch_size)
        mem["isolation"] = peak_rss_mb()
    if "b" in want:
        print("(b) Hidden_anchor vs full ICL", flush=True)
        res["compression"] = measure_compression(model, a.tasks, a.n, a.repeats)
        res["compression_verdict"] = engine_goal({r["task"]: r["speedup"] for r in res["compression"]},
                                                   {r["task"]: r["bound"] for r in res["compression"]})
        mem["compression"] = peak_rss_mb()
    if "d" in want:
        print("(d) weight layout: TransformerLens' own vs laid out for its matmuls", flush=True)
        res["layout"] = measure_layout(model, "sst2", a.n, a.batch_size)
        mem["layout"] = peak_rss_mb()
    if "e" in want:
        print(f"(e) shared prefix vs full prompts ({a.n_shared} inputs per task)", flush=True)
        res["shared"] = measure_shared(model, a.tasks, a.n_shared, a.batch_size,
                                       experiments=a.shared_experiments)
        mem["shared prefix"] = peak_rss_mb()
    if "h" in want:
        print(f"(h) heads ablated at q: whole suffixes vs q's row alone ({a.n_q_row} inputs per task)", flush=True)
        res["q_row"] = measure_q_row(model, a.tasks, a.n_q_row, a.batch_size)
        mem["ablations at q"] = peak_rss_mb()
    if "f" in want:
        print(f"(f) accounting: every notebook at profile {a.accounting_profile}", flush=True)
        res["accounting"] = measure_accounting(name, a.accounting_profile, a.accounting_tasks)
    gpu = None
    if "g" in want:
        import bench_gpu

        print("(g) GPU throughput per experiment path", flush=True)
        del model  # the GPU section loads its own models onto the GPU
        gpu = bench_gpu.measure((name, bench_gpu.GPT2_XL_SHAPE))
        res["gpu"] = gpu if gpu is not None else "skipped: no CUDA GPU visible to this torch"
    res["peak_rss_mb"] = mem
    res["seconds"] = time.perf_counter() - t_start
    profile = a.profile or get_profile().name
    out = results_dir(name, profile)
    out.mkdir(parents=True, exist_ok=True)
    if gpu is not None:
        (out / "gpu-bench.json").write_text(json.dumps(gpu, indent=1) + "\n")
    (out / "benchmarks.json").write_text(json.dumps(res, indent=1))
    md = out / "benchmarks.md"
    md.write_text(markdown(res))
    print(f"(c) peak RSS: {max(mem.values()):.0f} MB\nwrote {md} ({model_slug(name)}, {res['seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
