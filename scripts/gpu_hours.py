"""Estimated GPU hours per notebook for the paper's models, from an accounted run and measured GPU throughputs.

``make run ACCOUNT=1`` writes ``results/<model>/<profile>/accounting.json``: per notebook, the positions the
model ran forward and backward (padding included; ``helpers.core.accounting``). This script turns one such
run into an estimate for another model and profile, in three stated steps:

1. **Work.** Each notebook's positions are scaled by its work under the target profile against the measured
   one (:func:`timing.work`: inputs per task and seed, epochs, draws), and by the token ratio, the tokens the
   target's tokenizer gives per token of the measured model's (GPT-2 and GPT-J share GPT-2's BPE; measure it
   with ``--measure-tokens``).
2. **FLOPs.** A position costs the target model 2 x the weights it multiplies (query, key, value and output
   projections and the MLP of every layer, plus the unembedding, counted at every position as an upper
   bound), from the model's published shape (:data:`SHAPES`); the attention scores add about 1% at these
   prompt lengths and are left out.
3. **Time.** Each notebook's positions run at the throughput *measured* on a GPU for the experiment path
   that notebook runs (:data:`NOTEBOOK_PATHS`), read from a ``benchmarks/gpu/*.json`` file that
   ``make bench`` writes on a GPU (``benchmarks/bench_gpu.py``; its convention: 2 x parameters x tokens, x 3
   with a backward). Positions without a backward take ``2 x weights / throughput`` of the forward path;
   positions with one (saliency, re-weighting's training steps) take three times that at the backward
   path's throughput, which is how that path was timed. Plus ``--load-minutes`` per job for the model's load.

The throughputs are those of the GPT2-XL-shaped model in the file; GPT-J, not measured, is given the same per
path (its larger matmuls usually run faster, so its hours are likely an upper bound).

    .venv/bin/python scripts/gpu_hours.py benchmarks/gpu/accounting-gemma-3-270m-smoke.json --profile paper
    .venv/bin/python scripts/gpu_hours.py benchmarks/gpu/accounting-gemma-3-270m-smoke.json --doc  # docs/gpu.md

The accounting file is either ``accounting.json`` as ``make run ACCOUNT=1`` writes it (a list of rows), or an
object with its ``rows``, its ``profile`` and the ``token_ratio`` measured for it (as committed in
``benchmarks/gpu/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import timing  # noqa: E402  (scripts/timing.py)

from helpers.study.profile_table import PROFILES  # noqa: E402

__all__ = ["SHAPES", "NOTEBOOK_PATHS", "THROUGHPUT", "TARGET", "flops_per_position", "throughputs", "read_accounting",
           "estimate", "markdown", "render_doc", "main"]

# Published shapes (the models' Hugging Face configs): layers, residual width, heads x head width, MLP width,
# vocabulary. GPT-J's attention and MLP read the same residual (parallel blocks): the same weights per position.
SHAPES: dict[str, dict[str, int]] = {
    "gpt2-xl": dict(n_layers=48, d_model=1600, n_heads=25, d_head=64, d_mlp=6400, d_vocab=50257, gated=0),
    "EleutherAI/gpt-j-6B": dict(n_layers=28, d_model=4096, n_heads=16, d_head=256, d_mlp=16384, d_vocab=50400,
                                gated=0),
}


def flops_per_position(shape: dict[str, int]) -> float:
    """Forward FLOPs of one position: 2 x (projections + MLP of every layer + the unembedding)."""
    kv = shape.get("n_key_value_heads") or shape["n_heads"]
    attn = shape["d_model"] * shape["d_head"] * (2 * shape["n_heads"] + 2 * kv)
    mlp = (3 if shape.get("gated") else 2) * shape["d_model"] * shape["d_mlp"]
    return 2.0 * (shape["n_layers"] * (attn + mlp) + shape["d_model"] * shape["d_vocab"])


# The experiment path each notebook's positions run through: (positions without a backward, positions with one).
NOTEBOOK_PATHS: dict[str, tuple[str, str]] = {
    "00": ("predict", "forward_backward"),
    "01": ("predict", "saliency_flow"),  # its forward-only positions: the vanilla runs beside the saliency
    "02": ("run_isolation", "forward_backward"),
    "03": ("predict", "forward_backward"),
    "04": ("predict", "forward_backward"),  # re-weighting's training steps: forward and backward
    "05": ("predict", "forward_backward"),
    "06": ("predict", "forward_backward"),
    "07": ("predict", "forward_backward"),
    "08": ("predict", "saliency_flow"),  # notebooks 00-03 in small form: saliency among them
}
THROUGHPUT = ROOT / "benchmarks" / "gpu" / "h100-gpt2-xl-shape-d774e22.json"
BENCH_MODEL = "gpt2-xl-shape"
# what a GPU run of the paper profile should take: GPT2-XL, every notebook, on one card
TARGET = {"model": "gpt2-xl", "profile": "paper", "hours": 1.0}
DOC = ROOT / "docs" / "gpu.md"
BEGIN, END = "<!-- gpu-hours:table -->", "<!-- /gpu-hours:table -->"


def throughputs(bench: dict, model: str = BENCH_MODEL) -> dict[str, float]:
    """``{path: TFLOP/s}`` of ``model`` in a ``benchmarks/gpu/*.json`` file (``bench_gpu.measure``'s format)."""
    if model not in bench.get("models", {}):
        raise ValueError(f"the throughput file has no measurements of {model!r} (it has "
                         f"{', '.join(bench.get('models', {})) or 'none'}): run make bench on a GPU")
    return {p: float(r["tflops"]) for p, r in bench["models"][model]["paths"].items()}


def read_accounting(path: Path) -> tuple[list[dict], str | None, float | None]:
    """``(rows, profile, token ratio)`` of an accounting file: a list of rows (``make run ACCOUNT=1``; profile
    and ratio None) or an object with ``rows``, ``profile`` and ``token_ratio``."""
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return data, None, None
    return data["rows"], data.get("profile"), data.get("token_ratio")


def estimate(rows: list[dict], measured_profile: str, profile: str, shape: dict[str, int],
             throughput: dict[str, float], token_ratio: float = 1.0, load_minutes: float = 0.0) -> dict[str, dict]:
    """``{notebook: {"work": x, "pflop": ..., "hours": ...}}`` from an accounting table's ``total`` rows.

    ``throughput``: measured TFLOP/s per experiment path (:func:`throughputs`)."""
    src, dst = PROFILES[measured_profile], PROFILES[profile]
    per_pos = flops_per_position(shape)
    out = {}
    for r in rows:
        if r["step"] != "total":
            continue
        nb = r["notebook"]
        fwd_path, bwd_path = NOTEBOOK_PATHS.get(nb[:2], ("predict", "forward_backward"))
        for path in (fwd_path, bwd_path):
            if throughput.get(path, 0) <= 0:
                raise ValueError(f"no positive measured throughput for the path {path!r} (notebook {nb}): give "
                                 "a benchmarks/gpu/*.json that make bench wrote on a GPU")
        base = timing.work(src, nb)
        scale = timing.work(dst, nb) / base if base else 1.0
        back = r["backward_positions"] * scale * token_ratio
        forward_only = max(r["positions"] * scale * token_ratio - back, 0.0)
        seconds = forward_only * per_pos / (throughput[fwd_path] * 1e12) + \
            3 * back * per_pos / (throughput[bwd_path] * 1e12)
        flops = (forward_only + 2 * back) * per_pos
        out[nb] = {"work": scale, "pflop": flops / 1e15, "hours": seconds / 3600 + load_minutes / 60}
    if not out:
        raise ValueError("no 'total' rows: pass the accounting.json of a `make run ACCOUNT=1`")
    return out


def measure_token_ratio(model: str, target: str = "gpt2") -> float:
    """Tokens of GPT-2's BPE per token of ``model``'s tokenizer over the offline tasks' test texts."""
    from helpers.core.models import offline_tokenizer
    from helpers.core.offline_models import gpt2_tokenizer
    from helpers.core.tasks import load_split
    from helpers.study.profile_table import OFFLINE_TASKS

    ours, theirs = offline_tokenizer(model), gpt2_tokenizer()
    n_ours = n_theirs = 0
    for name in OFFLINE_TASKS:
        texts = load_split(name, "test")["text"]
        n_ours += sum(len(ours(t, add_special_tokens=False)["input_ids"]) for t in texts)
        n_theirs += sum(len(theirs(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return n_theirs / n_ours


NAMES = {"gpt2-xl": "GPT2-XL", "EleutherAI/gpt-j-6B": "GPT-J"}


def markdown(rows: list[dict], estimates: dict[str, dict[str, dict]], measured: str, profile: str,
             bench: dict, bench_model: str = BENCH_MODEL, token_ratio: float = 1.0) -> str:
    """One table: per notebook, the measured run's wall time and work, the work factor, hours per target; then
    where the throughputs come from, and the target."""
    totals = {r["notebook"]: r for r in rows if r["step"] == "total"}
    models = list(estimates)
    card = bench["card"]
    head = ["notebook", f"measured ({measured}): wall min", "TFLOP", f"work x ({profile})"] + \
           [f"{NAMES.get(m, m)}: hours on one {card}" for m in models]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sums = {m: 0.0 for m in models}
    for nb, r in totals.items():
        wall = r.get("wall_s") or r["seconds"]
        cells = [nb, f"{wall / 60:.1f}", f"{r['tflop']:.1f}", f"{estimates[models[0]][nb]['work']:.0f}"]
        for m in models:
            h = estimates[m][nb]["hours"]
            sums[m] += h
            cells.append(f"{h:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| all | | | | " + " | ".join(f"{sums[m]:.1f}" for m in models) + " |")
    tp = throughputs(bench, bench_model)
    used = list(tp)
    about = bench["models"][bench_model]["model"]
    text = [
        "",
        f"Throughput measured per path on one {card} (torch {bench['torch']}, commit `{bench['commit']}`, "
        f"{bench['dtype']}) with {about}: " + ", ".join(f"{p} {tp[p]:g}" for p in used) + " TFLOP/s "
        f"({bench['convention']}). Token ratio (GPT-2 BPE per token of the measured model): {token_ratio:.3f}.",
    ]
    if TARGET["model"] in estimates and profile == TARGET["profile"]:
        total = sums[TARGET["model"]]
        met = "meets it" if total <= TARGET["hours"] else "does not meet it"
        text.append("")
        text.append(f"Target: the {TARGET['profile']} profile of {NAMES[TARGET['model']]} on one H100 in at most "
                    f"{TARGET['hours']:g} hour. This estimate, {total:.1f} hours on one {card}, {met}.")
    return "\n".join(lines) + "\n" + "\n".join(text) + "\n"


def render_doc(table: str, doc: Path = DOC) -> str:
    """``doc``'s text with its GPU-hours block replaced by ``table``."""
    from helpers.study.report import replace_block

    return replace_block(doc.read_text(), table, BEGIN, END, str(doc))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("accounting", type=Path, help="accounting.json of a `make run ACCOUNT=1` (or benchmarks/gpu/'s)")
    ap.add_argument("--measured-profile", default=None,
                    help="the profile of that run (default: the file's, else its folder name)")
    ap.add_argument("--profile", default="paper", choices=sorted(PROFILES), help="the profile to estimate")
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=sorted(SHAPES))
    ap.add_argument("--throughput", type=Path, default=THROUGHPUT,
                    help="measured TFLOP/s per path: a benchmarks/gpu/*.json (default: the H100 measurement)")
    ap.add_argument("--token-ratio", type=float, default=None,
                    help="target tokens per measured token (default: the file's, else 1; --measure-tokens measures it)")
    ap.add_argument("--measure-tokens", default=None, metavar="MODEL",
                    help="measure --token-ratio: GPT-2 BPE tokens per token of this offline model's tokenizer")
    ap.add_argument("--load-minutes", type=float, default=0.0, help="added per notebook for the model's load")
    ap.add_argument("--doc", action="store_true", help="write the table into docs/gpu.md's generated block")
    a = ap.parse_args(argv)
    if not a.accounting.is_file():
        ap.error(f"{a.accounting} does not exist: run `make run ACCOUNT=1` first (it writes "
                 "results/<model>/<profile>/accounting.json)")
    if not a.throughput.is_file():
        ap.error(f"{a.throughput} does not exist: give a benchmarks/gpu/*.json (make bench on a GPU writes one)")
    rows, file_profile, file_ratio = read_accounting(a.accounting)
    measured = a.measured_profile or file_profile or a.accounting.parent.name
    if measured not in PROFILES:
        ap.error(f"{measured!r} is not a profile: pass --measured-profile (one of {', '.join(PROFILES)})")
    ratio = a.token_ratio if a.token_ratio is not None else (file_ratio or 1.0)
    if a.measure_tokens:
        ratio = measure_token_ratio(a.measure_tokens)
        print(f"token ratio (GPT-2 BPE / {a.measure_tokens}): {ratio:.3f}")
    bench = json.loads(a.throughput.read_text())
    tp = throughputs(bench)
    est = {m: estimate(rows, measured, a.profile, SHAPES[m], tp, ratio, a.load_minutes) for m in a.models}
    table = markdown(rows, est, measured, a.profile, bench, token_ratio=ratio)
    if a.doc:
        DOC.write_text(render_doc(table))
        print(f"rendered {DOC}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
