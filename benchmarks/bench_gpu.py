"""Achieved throughput of each experiment path on a GPU: measured, so GPU-hour estimates need assume nothing.

    python benchmarks/bench_gpu.py [--models gemma gpt2-xl-shape] [--out results/gpu-bench.json]
    make bench          # section (g), where CUDA exists

Per model and path, the wall time of one call (after a warm-up call, with ``torch.cuda.synchronize``) and its
throughput in TFLOP/s counted as 2 x parameters x tokens run (x 3 for a forward and backward: the backward
counts twice the forward), the convention of every file in ``benchmarks/gpu/``:

* ``forward``: a plain forward of 8 x 200 random tokens; ``forward_tf32`` the same with TF32 matmuls,
  ``forward_bfloat16`` with the model in bfloat16 (cast after the float32 paths);
* ``forward_backward``: the same forward and a backward into the weights;
* ``saliency_batch``: one :func:`helpers.experiments.saliency.saliency_batch` of 8 AGNews prompts (forward
  and backward);
* ``saliency_flow``: notebook 01's call, :func:`helpers.experiments.saliency.saliency_flow`, on the same 8
  prompts (batches as its sizing cuts them);
* ``predict``: :func:`helpers.core.predict.predict` of 16 full AGNews 1-shot prompts;
* ``run_isolation``: :func:`helpers.experiments.isolation.run_isolation`, label words isolated in the first 5
  layers, on the same 16 prompts.

``gpt2-xl-shape`` is a random model of GPT2-XL's shape (``GPT2LMHeadModel(GPT2Config(n_layer=48, n_embd=1600,
n_head=25))``, 1.56 B parameters) built on the GPU, saved with the real GPT-2 tokenizer
(:func:`helpers.core.models.gpt2_tokenizer`) and loaded through the collection's local-folder path: the paper's
model's cost without a network. ``scripts/gpu_hours.py`` reads the JSON this writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PATHS = ("forward", "forward_backward", "saliency_batch", "saliency_flow", "predict", "run_isolation",
         "forward_tf32", "forward_bfloat16")
GPT2_XL_SHAPE = "gpt2-xl-shape"


def _sync(model) -> None:
    from helpers.core.sizing import model_device

    dev = model_device(model)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(model, fn) -> float:
    """Seconds of ``fn()`` after one warm-up call, the GPU's queue drained before and after."""
    fn()
    _sync(model)
    t0 = time.perf_counter()
    fn()
    _sync(model)
    return time.perf_counter() - t0


def _row(params: int, tokens: int, seconds: float, backward: bool, what: str) -> dict:
    flop = 2.0 * params * tokens * (3 if backward else 1)
    return {"tflops": flop / seconds / 1e12, "seconds": seconds, "tokens": tokens, "backward": backward, "what": what}


def measure_paths(model, paths=PATHS, seed: int = 42) -> dict:
    """``{path: {"tflops", "seconds", "tokens", "backward", "what"}}`` for ``model`` on its device."""
    from helpers.core.predict import predict
    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning
    from helpers.experiments.isolation import run_isolation
    from helpers.experiments.saliency import saliency_batch, saliency_flow, saliency_prompts

    dev = next(model.parameters()).device
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, model.cfg.d_vocab, (8, min(200, model.cfg.n_ctx)), generator=g).to(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        sal, sal_ids = saliency_prompts(model, "agnews", seed, 8)
        icl = make_icl_set(model, "agnews", seed, 16)
    sal_tokens = sum(len(p) for p in sal)
    icl_tokens = sum(len(p) for p in icl.prompts)
    k = min(5, model.cfg.n_layers)
    out = {}

    def forward():
        with torch.inference_mode():
            model(rand, return_type=None)

    def forward_backward():
        weights = list(model.parameters())
        before = [w.requires_grad for w in weights]
        for w in weights:
            w.requires_grad_(True)
        try:
            with torch.enable_grad():
                model(rand, return_type="loss").backward()
        finally:
            for w, flag in zip(weights, before):
                w.grad = None
                w.requires_grad_(flag)

    runs = {
        "forward": (forward, rand.numel(), False, f"plain forward, {rand.shape[0]} x {rand.shape[1]} random tokens"),
        "forward_backward": (forward_backward, rand.numel(), True,
                             f"forward and backward into the weights, {rand.shape[0]} x {rand.shape[1]} tokens"),
        "saliency_batch": (lambda: saliency_batch(model, sal, sal_ids), sal_tokens, True,
                           f"saliency_batch, {len(sal)} AGNews prompts in one batch"),
        "saliency_flow": (lambda: saliency_flow(model, sal, sal_ids), sal_tokens, True,
                          f"saliency_flow (notebook 01's call), the same {len(sal)} prompts"),
        "predict": (lambda: predict(model, icl.prompts, icl.label_ids, top_k=0), icl_tokens, False,
                    f"predict, {len(icl.prompts)} full AGNews 1-shot prompts"),
        "run_isolation": (lambda: run_isolation(model, icl.prompts, icl.label_ids, "label", "first", k), icl_tokens,
                          False, f"run_isolation, label words isolated in the first {k} layers, the same "
                                 f"{len(icl.prompts)} prompts"),
    }
    for name, (fn, tokens, backward, what) in runs.items():
        if name in paths:
            out[name] = _row(params, tokens, _timed(model, fn), backward, what)
    if "forward_tf32" in paths and dev.type == "cuda":
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            out["forward_tf32"] = _row(params, rand.numel(), _timed(model, forward), False,
                                       "plain forward with TF32 matmuls (ICL_TF32=1)")
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
    if "forward_bfloat16" in paths:  # last: casts the model
        model.to(torch.bfloat16)
        out["forward_bfloat16"] = _row(params, rand.numel(), _timed(model, forward), False,
                                       "plain forward, the model in bfloat16")
    return out


def gpt2_xl_shaped(folder: Path, device: str = "cuda"):
    """A random model of GPT2-XL's shape, built on ``device``, saved to ``folder`` and loaded from there."""
    import transformers as tr

    from helpers.core.models import load_model
    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    with torch.device(device):
        hf = tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_layer=48, n_embd=1600, n_head=25))
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    del hf
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return load_model(str(folder), device=device, verbose=False)



def measure(models=("google/gemma-3-270m", GPT2_XL_SHAPE), paths=PATHS) -> dict | None:
    """The JSON of ``benchmarks/gpu/``: the card, versions, and per model the throughput of every path.

    None (with one line saying why) where no CUDA GPU is visible."""
    from helpers.study.report import git_commit
    if not torch.cuda.is_available():
        print("(g) GPU throughput: skipped, no CUDA GPU visible to this torch (run make bench on a GPU machine)")
        return None
    import transformer_lens

    from helpers.core.models import load_model

    res = {"card": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "transformer_lens": getattr(transformer_lens, "__version__", "unknown"), "commit": git_commit(),
           "dtype": "float32", "convention": "2 x parameters x tokens, x 3 with a backward", "models": {}}
    for name in models:
        torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory(prefix="icl-gpu-bench-") as tmp:
            if name == GPT2_XL_SHAPE:
                model = gpt2_xl_shaped(Path(tmp) / "gpt2-xl-shape")
                about = ("a random model of GPT2-XL's shape (48 layers, d_model 1600, 25 heads), the real GPT-2 "
                         "tokenizer, loaded from a local folder")
            else:
                model = load_model(name, device="cuda", verbose=False)
                about = name
            params = sum(p.numel() for p in model.parameters())
            rows = measure_paths(model, paths)
        res["models"][name] = {"model": about, "parameters": params, "paths": rows,
                               "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
        for path, r in rows.items():
            print(f"  {name:24s} {path:18s} {r['tflops']:6.1f} TFLOP/s  ({r['seconds']:.2f} s, {r['what']})",
                  flush=True)
        del model
        torch.cuda.empty_cache()
    return res


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["google/gemma-3-270m", GPT2_XL_SHAPE])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-bench.json")
    a = ap.parse_args(argv)
    res = measure(a.models)
    if res is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {a.out}")
    return res


if __name__ == "__main__":
    main()
