"""Retrain the positive control (helpers/core/control.py) from a seed: `make control [CONTROL_SEED=0]`.

Writes the checkpoint, its .sha256 and the training curve (in-context accuracy on fresh sequences over steps)
to --out (default .cache/control/control.safetensors; the repository ships data/control/control.safetensors,
trained with seed 0), then prints the training time, the steps to 50/90/99% and the accuracy of the baked
token model on training classes and on classes never seen in training.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / ".cache" / "control" / "control.safetensors")
    ap.add_argument("--max-seconds", type=float, default=540.0, help="stop training after this long (default 540)")
    a = ap.parse_args(argv)
    if a.seed < 0:
        ap.error(f"--seed must be a non-negative integer, got {a.seed}")
    if a.max_seconds <= 0:
        ap.error(f"--max-seconds must be positive, got {a.max_seconds}")
    from helpers.core.control import control_prompts, load_control, train_control
    from helpers.core.predict import predict

    t0 = time.perf_counter()
    result = train_control(seed=a.seed, max_seconds=a.max_seconds)
    from helpers.core.control import save_control

    sha = save_control(result, a.out)
    model = load_control(a.out)
    acc = {}
    for classes in ("train", "heldout"):
        cp = control_prompts(result.task, 1024, seed=a.seed + 777, classes=classes)
        pred = predict(model, cp.prompts, cp.label_ids, batch_size=256).pred
        acc[classes] = float((pred == cp.gold).float().mean())
    print(f"trained in {result.seconds:.0f} s ({result.steps} steps; steps to 50/90/99%: "
          f"{result.steps_to}); in-context accuracy on fresh sequences {result.accuracy:.3f}")
    print(f"baked token model: accuracy {acc['train']:.3f} on training classes, {acc['heldout']:.3f} on held-out "
          f"classes (1024 sequences each; chance {1 / result.task.n_labels:.2f})")
    print(f"wrote {a.out} ({a.out.stat().st_size / 1000:.0f} kB, sha256 {sha}) and "
          f"{a.out.with_name(a.out.stem + '_curve.csv').name}; total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
