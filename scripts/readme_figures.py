"""Copy the results page's figures (docs/results.md) from a finished run into docs/figures/.

    python scripts/readme_figures.py [--profile default] [--results results]

The results page shows these figures; they are the PNGs the notebooks wrote during
``make run`` (nothing is re-plotted here). Missing figures are reported and
the exit code is non-zero, so a stale page is noticed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (model folder, figure name) pairs shown on the results page, in reading order
KEY_FIGURES = [
    ("gemma-3-270m", "01_saliency_flow"),
    ("gemma-3-270m", "02_isolation_loyalty"),
    ("gemma-3-270m", "03_aucroc"),
    ("gemma-3-270m", "04_beta_heatmap"),
    ("gemma-3-270m", "05_table2_bars"),
    ("gemma-3-270m", "05_speedup"),
    ("gemma-3-270m", "06_confusion_pair"),
    ("gemma-3-270m", "07_two_towers_sst2"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="default: $ICL_PROFILE, else default")
    ap.add_argument("--results", type=Path, help="default: $ICL_RESULTS_DIR, else results/")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from helpers.study.config import option

    a.profile, _ = option(a.profile, "ICL_PROFILE", "default", "--profile")
    a.results = Path(option(a.results, "ICL_RESULTS_DIR", ROOT / "results", "--results")[0])
    # the page's figures are those of the default run: Gemma in float32 on the four tasks
    refused = [f"{k}={os.environ[k]!r}" for k in ("ICL_MODEL", "ICL_TASKS", "ICL_OWN_TASK", "ICL_DTYPE")
               if os.environ.get(k) and not (k == "ICL_DTYPE" and os.environ[k] == "float32")
               and not (k == "ICL_MODEL" and os.environ[k] in ("gemma", "google/gemma-3-270m"))]
    if refused:
        print(f"readme_figures: {', '.join(refused)} cannot be honoured: the results page shows the figures of the default "
              "run (Gemma 3 270M, float32, the four tasks). Unset them.")
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    missing = 0
    for model, fig in KEY_FIGURES:
        src = a.results / model / a.profile / "figures" / f"{fig}.png"
        if not src.exists():
            print(f"missing: {src}")
            missing += 1
            continue
        dst = a.out / f"{model}_{fig}.png"
        shutil.copyfile(src, dst)
        print(f"{dst.relative_to(ROOT) if dst.is_relative_to(ROOT) else dst}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
