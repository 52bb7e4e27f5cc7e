"""Execute every notebook for each model and profile, then write the results report.

    python scripts/run_all.py --profile default --models google/gemma-3-270m smollm2

Executed notebooks go to results/<model>/<profile>/notebooks/, figures and
metrics to results/<model>/<profile>/{figures,metrics}/, and the summary to
results/RESULTS-<profile>.md (+ .html). A failing notebook is recorded and the
run goes on; the exit code is non-zero if any failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from helpers.models import resolve_name
    from helpers.report import build_report
    from helpers.results import model_slug

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=os.environ.get("ICL_PROFILE", "default"))
    ap.add_argument("--models", nargs="+", default=["google/gemma-3-270m"])
    ap.add_argument("--notebooks", nargs="*", help="subset, e.g. 00 03")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("ICL_RESULTS_DIR", ROOT / "results")))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    a = ap.parse_args(argv)
    models = [resolve_name(m) for m in a.models]
    nbs = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if a.notebooks:
        nbs = [p for p in nbs if p.name[:2] in a.notebooks]
    runs: dict[str, dict] = {}
    failed = 0
    for m in models:
        runs[m] = {}
        outdir = a.out / model_slug(m) / a.profile / "notebooks"
        outdir.mkdir(parents=True, exist_ok=True)
        os.environ.update(ICL_MODEL=m, ICL_PROFILE=a.profile, ICL_RESULTS_DIR=str(a.out))
        for nb_path in nbs:
            nb = nbformat.read(nb_path, as_version=4)
            t0 = time.perf_counter()
            status = "ok"
            try:
                NotebookClient(nb, timeout=a.timeout, kernel_name="python3",
                               resources={"metadata": {"path": str(nb_path.parent)}}).execute()
            except Exception as e:  # record and go on
                status = f"FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
                failed += 1
            dt = time.perf_counter() - t0
            nbformat.write(nb, outdir / nb_path.name)
            runs[m][nb_path.stem] = {"status": status, "seconds": round(dt, 1)}
            print(f"[{model_slug(m)}/{a.profile}] {nb_path.stem}: {status} ({dt:.0f}s)", flush=True)
    report = build_report(a.out, a.profile, models, runs)
    print(f"report: {report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
