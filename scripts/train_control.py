"""Retrain a control (helpers/core/control.py) from a seed: `make control [CONTROL=control] [CONTROL_SEED=0]`.

--control names one of the controls (control, control-wide, control-negative; helpers.core.control.CONTROLS).
Writes the checkpoint, its .sha256 and the training curve (accuracy on fresh sequences of the training
distribution over steps) to --out (default .cache/control/<name>.safetensors; the repository ships
data/control/<name>.safetensors, trained with seed 0), then prints the training time, the steps to 50/90/99% and
the baked token model's accuracy on training classes and on classes never seen in training, with the
context's mapping as trained and with every label moved (the label-swap control).
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
    ap.add_argument("--control", default="control", help="which control: control, control-wide, control-negative")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default .cache/control/<control>.safetensors")
    ap.add_argument("--max-seconds", type=float, default=540.0, help="stop training after this long (default 540)")
    a = ap.parse_args(argv)
    if a.seed < 0:
        ap.error(f"--seed must be a non-negative integer, got {a.seed}")
    if a.max_seconds <= 0:
        ap.error(f"--max-seconds must be positive, got {a.max_seconds}")
    from helpers.core.control import ControlError, control_prompts, control_spec, load_control, relabel
    from helpers.core.control_training import save_control, train_control
    from helpers.core.predict import predict

    try:
        spec = control_spec(a.control)
    except ControlError as e:
        ap.error(str(e))
    out = a.out or ROOT / ".cache" / "control" / spec.file
    t0 = time.perf_counter()
    recipe = {"max_seconds": a.max_seconds} | spec.train
    result = train_control(seed=a.seed, task=spec.task, shape=spec.shape, **recipe)
    sha = save_control(result, out, name=spec.name)
    model = load_control(out)
    acc = {}
    for classes in ("train", "heldout"):
        cp = control_prompts(result.task, 1024, seed=a.seed + 777, classes=classes)
        sw = relabel(cp, [(i + 1) % len(cp.label_ids) for i in range(len(cp.label_ids))])
        for name, c in (("", cp), (" swapped", sw)):
            pred = predict(model, c.prompts, c.label_ids, batch_size=256, top_k=0).pred
            acc[classes + name] = float((pred == c.gold).float().mean())
    print(f"{spec.name} ({spec.kind}, {spec.shape[0]} layers x {spec.shape[1]} heads): trained in "
          f"{result.seconds:.0f} s ({result.steps} steps; steps to 50/90/99%: {result.steps_to}); accuracy on fresh "
          f"sequences of its training distribution {result.accuracy:.3f}")
    print(f"baked token model, accuracy on 1024 sequences each (chance {1 / result.task.n_labels:.2f}): training "
          f"classes {acc['train']:.3f} ({acc['train swapped']:.3f} with every label moved), held-out classes "
          f"{acc['heldout']:.3f} ({acc['heldout swapped']:.3f} with every label moved)")
    print(f"wrote {out} ({out.stat().st_size / 1000:.0f} kB, sha256 {sha}) and "
          f"{out.with_name(out.stem + '_curve.csv').name}; total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
