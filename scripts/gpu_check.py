"""One device check, ready to run on a bare CUDA machine with only the repository: the CUDA tests, the operator counts
and the saliency flow/batch ratio (benchmarks/bench_ops.py), and notebooks 01, 08 and 09 at smoke; every figure and
each step's seconds in one JSON file.

    python scripts/gpu_check.py [--model NAME_OR_FOLDER] [--tiny] [--notebooks 01 08 09] [--out FILE]
    make gpu-check                       # the same, with the project's .venv

The model: ``--model`` (a name or a ``save_pretrained`` folder), else on CUDA a random model of GPT2-XL's shape
built on the card into a temporary folder (benchmarks/bench_gpu.py), else (``--tiny``, or no CUDA) a tiny random
GPT-2 folder, which is how the project's tests run this script on a CPU. Nothing is downloaded: on a machine
without the locked packages, install the carried wheels first (``pip install --no-index --no-deps wheels/*.whl``).
Each step runs even when an earlier one fails; the exit code is non-zero when any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _device() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {"torch": torch.__version__, "cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "threads": torch.get_num_threads()}


def tiny_folder(folder: Path) -> Path:
    """A tiny random GPT-2 (2 layers x 4 heads, 64 wide) and the real GPT-2 tokenizer, saved in ``folder``."""
    import torch
    import transformers as tr

    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    hf = tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=64, n_layer=2, n_head=4))
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _step(report: dict, name: str, fn) -> None:
    t0 = time.perf_counter()
    try:
        report["steps"][name] = {"ok": True, **(fn() or {})}
    except Exception as e:  # a failed step is reported and the check goes on
        report["steps"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    report["steps"][name]["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{name}: {'ok' if report['steps'][name]['ok'] else 'FAILED'} "
          f"({report['steps'][name]['seconds']} s)", flush=True)


def _run(cmd: list[str], env: dict | None = None) -> dict:
    got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    tail = (got.stdout + got.stderr)[-3000:]
    if got.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {got.returncode}: {tail}")
    return {"tail": tail[-800:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a model name or save_pretrained folder")
    ap.add_argument("--tiny", action="store_true", help="a tiny random GPT-2 folder (the CPU test's model)")
    ap.add_argument("--notebooks", nargs="*", default=["01", "08", "09"])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-check.json")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the CUDA tests (the CPU test of this script)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    env = {"ICL_RESULTS_CACHE": str(work / "store"), "ICL_RESULTS_DIR": str(work / "results")}
    os.environ.update(env)
    report: dict = {"device": _device(), "steps": {}, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    cuda = report["device"]["cuda"]
    py = sys.executable
    if not a.skip_tests:
        _step(report, "cuda tests", lambda: _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                                                  "tests/test_cuda.py", "tests/test_sizing.py"]))
    holder: dict = {}

    def model():
        import bench_ops
        import torch

        if a.model:
            from helpers.core.models import load_model

            holder["name"], m = a.model, load_model(a.model)
        elif cuda and not a.tiny:
            import bench_gpu

            holder["name"] = str(work / "gpt2-xl-shape")
            m = bench_gpu.gpt2_xl_shaped(Path(holder["name"]))
        else:
            from helpers.core.models import load_model

            holder["name"] = str(tiny_folder(work / "tiny-gpt2"))
            m = load_model(holder["name"])
        from helpers.core.sizing import pass_tokens

        passes = pass_tokens(m)  # measured on CUDA; the CPU's fixed charge elsewhere
        ops = bench_ops.measure_ops(m, "sst2", (1, 8))
        flow = bench_ops.measure_flow_vs_batch(m, "sst2", 8)
        del m
        if cuda:
            torch.cuda.empty_cache()
        return {"model": holder["name"], "pass_tokens": passes, "ops": [{k: v for k, v in r.items() if k != "top"} for r in ops],
                "flow_vs_batch": flow, "table": bench_ops.markdown(ops, flow)}

    _step(report, "operator counts and flow/batch ratio", model)
    if a.notebooks and "name" in holder:
        _step(report, f"notebooks {' '.join(a.notebooks)} at smoke", lambda: _run(
            [py, "scripts/run_all.py", "--profile", "smoke", "--models", holder["name"], "--jobs", "1",
             "--out", env["ICL_RESULTS_DIR"], "--notebooks", *a.notebooks], env))
    report["seconds"] = round(sum(s["seconds"] for s in report["steps"].values()), 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {a.out} ({report['seconds']} s)")
    return 0 if all(s["ok"] for s in report["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
