"""How far a lower precision moves the experiments' outputs, against float32, on the same inputs.

    .venv/bin/python scripts/precision.py                 # bfloat16 and float16 vs float32, Gemma, SST-2
    .venv/bin/python scripts/precision.py --doc           # then render docs/gpu.md's table from the JSON

The model is loaded once per dtype on the CPU (``load_model(..., dtype=...)``, as ``ICL_DTYPE`` does), and
the outputs of four experiments are computed on the same prompts at the smoke profile's sizes: accuracy
(notebook 00), label and word loyalty of label isolation in the first 5 layers (02), AUCROC_l per layer (03)
and the saliency's relative flows per layer (01). Each lower dtype's largest absolute deviation from
float32 goes into ``benchmarks/precision/<model>.json``, and docs/gpu.md's table is rendered from that file
(:func:`markdown`; tests/test_gpu_hours.py holds the two together).

On a CPU the 16-bit dtypes are emulated (this CPU has no 16-bit matrix units): the rounding of weights and
activations is what a GPU's would be, the kernels' accumulation order is not. TF32 (``ICL_TF32=1``) is a mode
of NVIDIA's tensor cores and cannot be measured on a CPU; it rounds only the matmuls' inputs (10-bit mantissa,
as float16's, with float32's range and accumulation), so its deviations are expected between float32's and
float16's. bfloat16 on this CPU is slow: the sizes are the smoke profile's (8 test inputs, 4 for saliency,
one seed, SST-2 by default), which keep a run under 10 minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["OUTPUTS", "outputs", "deviations", "markdown", "render_doc", "main"]

DOC = ROOT / "docs" / "gpu.md"
BEGIN, END = "<!-- precision:table -->", "<!-- /precision:table -->"
# what each output is, for the table: key -> (label, unit, scale to that unit)
OUTPUTS = {
    "accuracy": ("accuracy", "points", 100.0),
    "label_loyalty": ("label loyalty, label words isolated in the first 5 layers", "points", 100.0),
    "word_loyalty": ("word loyalty, same", "points", 100.0),
    "aucroc": ("AUCROC_l (largest change over layers)", "", 1.0),
    "relative_flow": ("saliency's relative flows S_wp, S_pq, S_ww (largest change over layers)", "", 1.0),
    "same_prediction": ("inputs whose predicted label differs from float32's", "%", 100.0),
}


def outputs(model, task: str, seed: int, n_test: int, n_saliency: int, k: int = 5) -> dict:
    """The four experiments' outputs on ``model`` (lists, JSON-ready)."""
    from helpers.core.loyalty import label_loyalty, word_loyalty
    from helpers.core.predict import predict
    from helpers.core.prompts import make_icl_set
    from helpers.experiments.aucroc import aucroc_per_layer, label_attention
    from helpers.experiments.isolation import isolation_experiment
    from helpers.experiments.saliency import relative_flow, saliency_flow, saliency_prompts

    s = make_icl_set(model, task, seed, n_test)
    pred = predict(model, s.prompts, s.label_ids, top_k=0)
    iso = isolation_experiment(model, s.prompts, s.label_ids, ks=(k,), conditions=("label",), wheres=("first",))
    run = iso[("label", "first", k)]
    scores, apred = label_attention(model, s.prompts, s.label_ids, top_k=0)
    sp, lids = saliency_prompts(model, task, seed, n_saliency)
    flows = relative_flow(saliency_flow(model, sp, lids))
    return {"accuracy": pred.accuracy, "pred": pred.pred.tolist(),
            "label_loyalty": label_loyalty(iso["base"], run), "word_loyalty": word_loyalty(iso["base"], run),
            "aucroc": [float(x) for x in aucroc_per_layer(scores, apred)],
            "relative_flow": np.asarray(flows, dtype=float).tolist()}


def _largest(a, b) -> float | None:
    d = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    return None if np.isnan(d).all() else float(np.nanmax(d))


def deviations(ref: dict, low: dict) -> dict:
    """Largest absolute change of each output from ``ref`` (float32) to ``low``."""
    out = {k: _largest(ref[k], low[k]) for k in ("accuracy", "label_loyalty", "word_loyalty", "aucroc",
                                                   "relative_flow")}
    out["same_prediction"] = float(np.mean(np.asarray(ref["pred"]) != np.asarray(low["pred"])))
    return out


def _fmt(value, unit: str, scale: float) -> str:
    if value is None:
        return "n/a"
    v = value * scale
    return f"{v:.1f} {unit}".strip() if unit else f"{v:.3f}"


def markdown(res: dict) -> str:
    """docs/gpu.md's table: per output, the largest deviation of each lower dtype from float32."""
    dts = list(res["deviations"])
    lines = ["| output (largest change from float32) | " + " | ".join(dts) + " |", "|---|" + "---|" * len(dts)]
    for key, (label, unit, scale) in OUTPUTS.items():
        lines.append(f"| {label} | " + " | ".join(_fmt(res["deviations"][d][key], unit, scale) for d in dts) + " |")
    s = res["sizes"]
    nan = [d for d in dts if any(np.isnan(np.asarray(out[k], dtype=float)).any()
                                 for out in res["outputs"][d].values() for k in ("aucroc", "relative_flow"))]
    if nan:
        lines.append("")
        lines.append(f"n/a: under {', '.join(nan)} the attention and saliency outputs are NaN (the model's "
                     "activations leave the dtype's range), and the predictions those runs give are not the model's.")
    lines.append("")
    lines.append(f"Measured on a CPU, emulated ({res['cpu']}, torch {res['torch']}, commit `{res['commit']}`, "
                 f"{res['seconds'] / 60:.1f} min): {res['model']} on {', '.join(res['tasks'])}, seed {s['seed']}, "
                 f"{s['n_test']} test inputs ({s['n_saliency']} for the saliency), the smoke profile's sizes. "
                 "TF32 cannot be measured on a CPU.")
    return "\n".join(lines) + "\n"


def render_doc(res: dict, doc: Path = DOC) -> str:
    """``doc``'s text with its precision block replaced by :func:`markdown` of ``res``."""
    from helpers.study.report import replace_block

    return replace_block(doc.read_text(), markdown(res), BEGIN, END, str(doc))



def main(argv=None) -> int:
    from helpers.study.report import git_commit
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="google/gemma-3-270m")
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16"])
    ap.add_argument("--tasks", nargs="+", default=["sst2"])
    ap.add_argument("--out", type=Path, default=None, help="the JSON (default benchmarks/precision/<model>.json)")
    ap.add_argument("--doc", action="store_true", help="only render docs/gpu.md's table from the JSON")
    a = ap.parse_args(argv)
    from helpers.study.profile_table import PROFILES
    from helpers.study.results import model_slug

    out = a.out or ROOT / "benchmarks" / "precision" / f"{model_slug(a.model)}.json"
    if a.doc:
        if not out.is_file():
            ap.error(f"{out} does not exist: run scripts/precision.py without --doc first")
        DOC.write_text(render_doc(json.loads(out.read_text())))
        print(f"rendered {DOC} from {out}")
        return 0
    import os
    import tempfile

    import torch

    from helpers.core.models import load_model

    warnings.simplefilter("ignore")
    # a fresh store: every output computed here, nothing read from or left in the collection's store
    os.environ["ICL_RESULTS_CACHE"] = tempfile.mkdtemp(prefix="icl-precision-")
    smoke = PROFILES["smoke"]
    sizes = {"seed": smoke.seeds[0], "n_test": smoke.n_test, "n_saliency": smoke.n_saliency}
    t0 = time.perf_counter()
    per_dtype: dict[str, dict] = {}
    for dt in ["float32", *a.dtypes]:
        t = time.perf_counter()
        model = load_model(a.model, device="cpu", dtype=dt, verbose=False)
        per_dtype[dt] = {task: outputs(model, task, sizes["seed"], sizes["n_test"], sizes["n_saliency"])
                         for task in a.tasks}
        del model
        print(f"{dt}: {time.perf_counter() - t:.0f} s", flush=True)
    devs = {dt: {k: max((v for v in (deviations(per_dtype["float32"][task], per_dtype[dt][task])[k]
                                     for task in a.tasks) if v is not None), default=None)
                 for k in OUTPUTS} for dt in a.dtypes}
    res = {"model": a.model, "tasks": a.tasks, "sizes": sizes, "device": "cpu", "emulated": True,
           "cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "commit": git_commit(),
           "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0,
           "deviations": devs, "outputs": per_dtype}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(markdown(res))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
