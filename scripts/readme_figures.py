"""Copy the README's key figures from a finished run into docs/figures/.

    python scripts/readme_figures.py [--profile default] [--results results]

The README shows these figures; they are the PNGs the notebooks wrote during
``make run`` (nothing is re-plotted here). Missing figures are reported and
the exit code is non-zero, so a stale README is noticed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (model folder, figure name) pairs shown in the README, in reading order
KEY_FIGURES = [
    ("gemma-3-270m", "01_saliency_flow"),
    ("smollm2-135m-instruct", "01_saliency_flow"),
    ("gemma-3-270m", "02_isolation_loyalty"),
    ("smollm2-135m-instruct", "02_isolation_loyalty"),
    ("gemma-3-270m", "03_aucroc"),
    ("gemma-3-270m", "04_beta_heatmap"),
    ("gemma-3-270m", "05_table2_bars"),
    ("gemma-3-270m", "05_speedup"),
    ("gemma-3-270m", "06_confusion_pair"),
    ("gemma-3-270m", "07_two_towers_sst2"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--results", type=Path, default=ROOT / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    a = ap.parse_args(argv)
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
