"""Retrain a control (helpers/core/controls/model.py) from a seed: `make control [CONTROL=control] [CONTROL_SEED=0]`, or
every control population (helpers/core/controls/population.py): `make control` / `--populations`.

--control names one of the controls (control, control-wide, control-negative; helpers.core.controls.model.CONTROLS).
Writes the checkpoint, its .sha256 and the training curve (accuracy on fresh sequences of the training
distribution over steps) to --out (default .cache/control/<name>.safetensors; the repository ships
data/control/<name>.safetensors, trained with seed 0), then prints the training time, the steps to 50/90/99% and
the baked token model's accuracy on training classes and on classes never seen in training, with the
context's mapping as trained and with every label moved (the label-swap control); from seed 0, whether its tensors
equal the shipped checkpoint's.

--populations [NAME ...] trains every checkpoint of the named populations (all by default) that is not a named
control's own, from each seed, in --jobs processes of one thread each, into --out-dir (default
.cache/control/population); then prints each one's training time and steps, and whether its tensors equal the
checkpoint shipped under data/control/population/ bit for bit (helpers.core.controls.training.compare_checkpoints:
the files' sha256 always differ, as each records its own training seconds; --ship copies them there).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _train_member(job: tuple[str, int, str]) -> dict:
    """Train one population member (a worker process: one torch thread); its sha256, steps and seconds."""
    import torch

    torch.set_num_threads(1)
    from helpers.core.controls.population import population
    from helpers.core.controls.training import save_control, train_control

    name, seed, out = job
    pop = population(name)
    result = train_control(seed=seed, task=pop.task, shape=pop.shape, progress=False, **pop.train)
    sha = save_control(result, out, name=pop.carries)
    return {"population": name, "seed": seed, "path": out, "sha256": sha, "steps": result.steps,
            "seconds": round(result.seconds, 1), "accuracy": result.accuracy}


def expected_cost(name: str, seed: int) -> float:
    """A member's expected training work, for ordering the jobs: its steps (the shipped training curve's last step,
    else the recipe's most) times its layers."""
    import inspect

    from helpers.core.controls.population import population
    from helpers.core.controls.training import train_control

    pop = population(name)
    curve = pop.path(seed).with_name(pop.path(seed).stem + "_curve.csv")
    steps = pop.train.get("max_steps", inspect.signature(train_control).parameters["max_steps"].default)
    if curve.exists():
        rows = curve.read_text().strip().splitlines()
        if len(rows) > 1:
            steps = int(rows[-1].split(",")[0])
    return float(steps * pop.shape[0])


def train_populations(names, out_dir: Path, jobs: int, ship: bool) -> int:
    import shutil
    from concurrent.futures import ProcessPoolExecutor

    from helpers.core.controls.population import POPULATIONS, population

    names = list(names) or list(POPULATIONS)
    todo = [(n, s, str(out_dir / population(n).path(s).name)) for n in names for s in population(n).seeds
            if s not in population(n).shipped]
    # longest first, so that no long job starts last while the other processes sit idle (the checkpoints do not
    # depend on the order: each member trains from its own seed)
    todo.sort(key=lambda job: -expected_cost(job[0], job[1]))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        done = list(ex.map(_train_member, todo))
    from helpers.core.controls.training import compare_checkpoints

    differ = 0
    for d in done:
        pop = population(d["population"])
        shipped = pop.path(d["seed"])
        verdict = compare_checkpoints(d["path"], shipped)
        differ += verdict != "equal"
        said = ("its tensors equal the shipped checkpoint's, bit for bit" if verdict == "equal"
                else f"{verdict} from the shipped checkpoint")
        print(f"{d['population']} seed {d['seed']}: {d['steps']} steps, {d['seconds']:.0f} s, accuracy "
              f"{d['accuracy']:.3f}, sha256 {d['sha256']} ({said})")  # the sha256 --ship's files need in population.py
        if ship:  # the checkpoint and the two files save_control writes beside it, under the shipped stem
            src = Path(d["path"])
            shipped.parent.mkdir(parents=True, exist_ok=True)
            for tail in (".safetensors", ".sha256", "_curve.csv"):
                shutil.copyfile(src.with_name(src.stem + tail), shipped.with_name(shipped.stem + tail))
    print(f"trained {len(done)} checkpoints in {time.perf_counter() - t0:.0f} s with {jobs} processes"
          + (f"; {differ} differ from the shipped checkpoints" if differ else "; every one equals its shipped "
             "checkpoint (tensors; the files' bytes differ only in the training seconds they record)"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--populations", nargs="*", default=None, help="train these control populations (all when "
                    "none is named) instead of one control")
    ap.add_argument("--out-dir", type=Path, default=ROOT / ".cache" / "control" / "population")
    ap.add_argument("--jobs", type=int, default=2, help="training processes, one thread each (default 2)")
    ap.add_argument("--ship", action="store_true", help="copy the trained populations into data/control/population")
    ap.add_argument("--control", default="control", help="which control: control, control-wide, control-negative")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default .cache/control/<control>.safetensors")
    ap.add_argument("--max-seconds", type=float, default=540.0, help="stop training after this long (default 540)")
    a = ap.parse_args(argv)
    if a.populations is not None:
        if a.jobs < 1:
            ap.error(f"--jobs must be a positive integer, got {a.jobs}")
        return train_populations(a.populations, a.out_dir, a.jobs, a.ship)
    if a.seed < 0:
        ap.error(f"--seed must be a non-negative integer, got {a.seed}")
    if a.max_seconds <= 0:
        ap.error(f"--max-seconds must be positive, got {a.max_seconds}")
    from helpers.core.controls.model import ControlError, control_prompts, control_spec, load_control, relabel
    from helpers.core.controls.training import save_control, train_control
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
    if a.seed == 0:  # the shipped checkpoint was trained from seed 0
        from helpers.core.controls.training import compare_checkpoints

        verdict = compare_checkpoints(out, spec.path)
        said = ("its tensors are equal, bit for bit (the files differ only in the training seconds they record)"
                if verdict == "equal" else verdict)
        print(f"against the shipped {spec.path.name}: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
