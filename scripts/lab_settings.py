"""Make this environment's JupyterLab open the notebook sources (``notebooks/NN_*.py``) as notebooks on a double click.

    python scripts/lab_settings.py            # `make lab` runs it after installing JupyterLab into .venv

JupyterLab opens a ``.py`` file with its default viewer for Python files, the text editor, unless that default is
set to jupytext's "Jupytext Notebook" viewer (jupytext's documented setting: ``defaultViewers`` of the document
manager, ``"python": "Jupytext Notebook"``). ``jupytext-config set-default-viewer python`` writes it into the user's
own JupyterLab settings, for every project. This script writes it instead as a default of the JupyterLab installed
in this environment: ``overrides.json`` in JupyterLab's application settings folder (``<sys.prefix>/share/jupyter/
lab/settings``, or ``$JUPYTERLAB_DIR/settings``), keeping whatever else that file holds. A user's own setting, made
in Settings > Settings Editor > Document Manager, still wins over it, as with every JupyterLab default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

PLUGIN = "@jupyterlab/docmanager-extension:plugin"
VIEWER = "Jupytext Notebook"


def overrides_path(app_dir: Path | None = None) -> Path:
    """``overrides.json`` of the JupyterLab application folder of this environment (as ``jupyter lab path``)."""
    if app_dir is None:
        app_dir = Path(os.environ.get("JUPYTERLAB_DIR") or Path(sys.prefix) / "share" / "jupyter" / "lab")
    return Path(app_dir) / "settings" / "overrides.json"


def set_default_viewer(path: Path, doctypes: tuple[str, ...] = ("python",)) -> dict:
    """Add ``defaultViewers[doctype] = "Jupytext Notebook"`` to the overrides file at ``path``; returns its content."""
    data = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
    viewers = data.setdefault(PLUGIN, {}).setdefault("defaultViewers", {})
    for d in doctypes:
        viewers[d] = VIEWER
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--app-dir", type=Path, help="JupyterLab application folder (default: this environment's)")
    a = ap.parse_args(argv)
    path = overrides_path(a.app_dir)
    set_default_viewer(path)
    print(f"JupyterLab in {sys.prefix}: .py files open as notebooks on a double click ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
