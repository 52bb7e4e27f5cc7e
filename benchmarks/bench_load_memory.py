"""Peak host memory while a model loads, against the bytes of its weights.

    python benchmarks/bench_load_memory.py [--d-model 768] [--layers 6] [--dtype float32]

Saves a random GPT-2-shaped model (about 82M parameters at the defaults: 330 MB in float32) with its tokenizer to
a temporary folder, then loads it in fresh processes, each measuring its resident set (``ru_maxrss``) before and
after the load:

- ``load_model``: this project's loader for a local folder (transformers loads the weights straight onto the
  device, and the HookedTransformer's parameters become the converted tensors: ``hooked_from_state``);
- ``hub``: the same folder as a cached Hugging Face hub model named ``gpt2`` (``HF_HUB_OFFLINE=1``), through
  ``load_model("gpt2")``;
- ``transformer_lens``: TransformerLens' own steps for comparison (a HookedTransformer with initialised
  weights, then ``load_and_process_state_dict`` copying every converted tensor into it).

The extra host memory of a load is the peak minus the resident set before it (imports done). The goal for
this project's loaders: at most 1.2 x the weights' bytes plus a fixed 200 MB (tokenizer, Python objects,
allocator slack). On a CUDA device the weights go to the GPU and the host extra stays near the fixed part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED_MB = 200.0
RATIO = 1.2

CHILD = r"""
import json, resource, sys, torch
mode, path, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
from helpers.core import models  # imports transformers and transformer_lens
from helpers.core import offline_models
import transformer_lens, transformers
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if mode == "load_model":
    model = models.load_model(path, device="cpu", dtype=dtype, verbose=False)
elif mode == "hub":
    model = models.load_model("gpt2", device="cpu", dtype=dtype, verbose=False)
else:
    from transformer_lens import HookedTransformer, loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM
    d = models.resolve_dtype(dtype)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=d)
    cfg = loading.get_pretrained_model_config("gpt2", hf_cfg=hf.config.to_dict(), fold_ln=False, device="cpu", dtype=d)
    model = HookedTransformer(cfg, offline_models.gpt2_tokenizer(), move_to_device=False)
    model.load_and_process_state_dict(loading.get_pretrained_state_dict("gpt2", cfg, hf, dtype=d), fold_ln=False,
                                      center_writing_weights=False, center_unembed=False, fold_value_biases=False)
    del hf
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
print(json.dumps({"mode": mode, "before": before, "peak_before": peak_before, "peak": peak,
                  "weights": sum(storages.values()), "params": sum(p.numel() for p in model.parameters())}))
"""


def save_model(folder: Path, d_model: int, layers: int) -> None:
    import transformers as tr

    sys.path.insert(0, str(ROOT))
    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    cfg = tr.GPT2Config(vocab_size=len(tok), n_positions=1024, n_ctx=1024, n_embd=d_model, n_layer=layers,
                        n_head=max(1, d_model // 64))
    tr.GPT2LMHeadModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def hub_cache(home: Path, folder: Path) -> None:
    """``folder`` as the Hugging Face cache's copy of ``gpt2`` (files linked, not copied)."""
    snapshot = home / "hub" / "models--gpt2" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for f in folder.iterdir():
        os.symlink(f, snapshot / f.name)
    (home / "hub" / "models--gpt2" / "refs").mkdir()
    (home / "hub" / "models--gpt2" / "refs" / "main").write_text("0" * 40)


def measure(mode: str, folder: Path, dtype: str = "float32", hf_home: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    if hf_home is not None:
        env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", CHILD, mode, str(folder), dtype], capture_output=True, text=True,
                       env=env, timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(f"{mode}: {r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["extra"] = out["peak"] - max(out["before"], 0)
    out["ratio"] = out["extra"] / out["weights"]
    out["limit"] = RATIO * out["weights"] + FIXED_MB * 2**20
    out["ok"] = out["extra"] <= out["limit"]
    return out


def run(d_model: int = 768, layers: int = 6, dtype: str = "float32", modes=("load_model", "hub", "transformer_lens")):
    rows = []
    with tempfile.TemporaryDirectory(prefix="icl-load-memory-") as tmp:
        folder = Path(tmp) / "wide-gpt2"
        save_model(folder, d_model, layers)
        home = Path(tmp) / "hf-home"
        hub_cache(home, folder)
        for mode in modes:
            rows.append(measure(mode, folder, dtype, hf_home=home))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args(argv)
    rows = run(a.d_model, a.layers, a.dtype)
    mb = 2**20
    print(f"{'path':<18}{'params':>10}{'weights MB':>12}{'extra RSS MB':>14}{'x weights':>11}{'limit MB':>10}  ok")
    for r in rows:
        print(f"{r['mode']:<18}{r['params'] / 1e6:>9.1f}M{r['weights'] / mb:>12.0f}{r['extra'] / mb:>14.0f}"
              f"{r['ratio']:>11.2f}{r['limit'] / mb:>10.0f}  {'yes' if r['ok'] else 'NO'}")
    return 0 if all(r["ok"] for r in rows if r["mode"] != "transformer_lens") else 1


if __name__ == "__main__":
    sys.exit(main())
