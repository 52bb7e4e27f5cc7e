"""Estimated GPU hours per notebook for the paper's models, scaled from a measured, accounted run.

``make run ACCOUNT=1`` writes ``results/<model>/<profile>/accounting.json``: per notebook, the positions the
model ran forward and backward (padding included; ``helpers.core.accounting``). This script turns one such
run into an estimate for another model and profile, in three stated steps:

1. **Work.** Each notebook's positions are scaled by its work under the target profile against the measured
   one (:func:`timing.work`: inputs per task and seed, epochs, draws), and by ``--token-ratio``, the tokens the
   target's tokenizer gives per token of the measured model's (GPT-2 and GPT-J share GPT-2's BPE; measure it
   with ``--measure-tokens``).
2. **FLOPs.** A position costs the target model 2 x the weights it multiplies (query, key, value and output
   projections and the MLP of every layer, plus the unembedding, counted at every position as an upper
   bound), from the model's published shape (:data:`SHAPES`); the attention scores add about 1% at these
   prompt lengths and are left out. Every backward pass in this collection takes gradients of activations
   only (saliency, re-weighting's beta), so a backward position counts as one forward position, as the
   accounting counts it.
3. **Time.** FLOPs divided by an assumed achieved throughput, ``--tflops`` (default 8: about 40% of an
   A100's 19.5 TFLOP/s fp32 peak; the collection runs fp32 unless ``ICL_DTYPE`` says otherwise), plus
   ``--load-minutes`` per job for the model's load.

It is an estimate, not a measurement: run one notebook of the target with ``ACCOUNT=1`` on the GPU and its
accounting table gives the real figure (and the achieved TFLOP/s to pass back here).

    .venv/bin/python scripts/gpu_hours.py results/gemma-3-270m/default/accounting.json --profile paper
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

__all__ = ["SHAPES", "flops_per_position", "estimate", "markdown", "main"]

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


def estimate(rows: list[dict], measured_profile: str, profile: str, shape: dict[str, int], tflops: float,
             token_ratio: float = 1.0, load_minutes: float = 0.0) -> dict[str, dict]:
    """``{notebook: {"work": x, "pflop": ..., "hours": ...}}`` from an accounting table's ``total`` rows."""
    if tflops <= 0:
        raise ValueError(f"tflops={tflops}: give the achieved throughput in TFLOP/s, a positive number")
    src, dst = PROFILES[measured_profile], PROFILES[profile]
    per_pos = flops_per_position(shape)
    out = {}
    for r in rows:
        if r["step"] != "total":
            continue
        nb = r["notebook"]
        base = timing.work(src, nb)
        scale = timing.work(dst, nb) / base if base else 1.0
        flops = (r["positions"] + r["backward_positions"]) * scale * token_ratio * per_pos
        out[nb] = {"work": scale, "pflop": flops / 1e15, "hours": flops / (tflops * 1e12) / 3600 + load_minutes / 60}
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


def markdown(rows: list[dict], estimates: dict[str, dict[str, dict]], measured: str, profile: str,
             tflops: float) -> str:
    """One table: per notebook, the measured run's wall time and work, the work factor, hours per target."""
    totals = {r["notebook"]: r for r in rows if r["step"] == "total"}
    models = list(estimates)
    head = ["notebook", f"measured ({measured}): wall min", "TFLOP", f"work x ({profile})"] + \
           [f"{m}: GPU h" for m in models]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sums = {m: 0.0 for m in models}
    for nb, r in totals.items():
        wall = r.get("wall_s") or r["seconds"]
        cells = [nb, f"{wall / 60:.1f}", f"{r['tflop']:.1f}", f"{estimates[models[0]][nb]['work']:.0f}"]
        for m in models:
            h = estimates[m][nb]["hours"]
            sums[m] += h
            cells.append(f"{h:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| all | | | | " + " | ".join(f"{sums[m]:.0f}" for m in models) + " |")
    return "\n".join(lines) + f"\n\nAssumed throughput: {tflops:g} TFLOP/s achieved per GPU.\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("accounting", type=Path, help="accounting.json of a `make run ACCOUNT=1`")
    ap.add_argument("--measured-profile", default=None,
                    help="the profile of that run (default: the accounting file's folder name)")
    ap.add_argument("--profile", default="paper", choices=sorted(PROFILES), help="the profile to estimate")
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=sorted(SHAPES))
    ap.add_argument("--tflops", type=float, default=8.0, help="achieved TFLOP/s per GPU (default 8; see above)")
    ap.add_argument("--token-ratio", type=float, default=1.0,
                    help="target tokens per measured token (default 1; --measure-tokens measures it)")
    ap.add_argument("--measure-tokens", default=None, metavar="MODEL",
                    help="measure --token-ratio: GPT-2 BPE tokens per token of this offline model's tokenizer")
    ap.add_argument("--load-minutes", type=float, default=0.0, help="added per notebook for the model's load")
    a = ap.parse_args(argv)
    if not a.accounting.is_file():
        ap.error(f"{a.accounting} does not exist: run `make run ACCOUNT=1` first (it writes "
                 "results/<model>/<profile>/accounting.json)")
    rows = json.loads(a.accounting.read_text())
    measured = a.measured_profile or a.accounting.parent.name
    if measured not in PROFILES:
        ap.error(f"{measured!r} is not a profile: pass --measured-profile (one of {', '.join(PROFILES)})")
    ratio = a.token_ratio
    if a.measure_tokens:
        ratio = measure_token_ratio(a.measure_tokens)
        print(f"token ratio (GPT-2 BPE / {a.measure_tokens}): {ratio:.3f}")
    est = {m: estimate(rows, measured, a.profile, SHAPES[m], a.tflops, ratio, a.load_minutes) for m in a.models}
    print(markdown(rows, est, measured, a.profile, a.tflops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
