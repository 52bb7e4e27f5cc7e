"""JupyterLab and jupytext settings of the repository: the notebook sources open as notebooks, and saving them
keeps their header free of kernelspec and version noise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_jupytext_config_pairs_and_filters_the_header(tmp_path, monkeypatch):
    """jupytext.toml pairs ipynb with py:percent and keeps the kernelspec and jupytext's version out of the .py:
    a notebook synced under it (as `jupytext --sync` does) gets a .py header without them, its .ipynb keeps its
    kernelspec, and the pairing stays readable in the .py (tests/test_notebooks.py checks it)."""
    import jupytext
    import nbformat
    from jupytext.cli import jupytext as jupytext_cli

    (tmp_path / "jupytext.toml").write_text((ROOT / "jupytext.toml").read_text())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("1 + 1")])
    nb.metadata["kernelspec"] = {"name": "some-other-kernel", "display_name": "Other", "language": "python"}
    nbformat.write(nb, tmp_path / "01_unpaired.ipynb")
    nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}  # as every notebook of notebooks/
    nbformat.write(nb, tmp_path / "00_probe.ipynb")
    monkeypatch.setenv("JUPYTEXT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no config above tmp_path
    jupytext_cli(["--sync", str(tmp_path / "00_probe.ipynb"), str(tmp_path / "01_unpaired.ipynb"), "--quiet"])
    assert (tmp_path / "01_unpaired.py").exists()  # paired by the config alone
    meta = jupytext.read(tmp_path / "00_probe.py").metadata  # the .py's own header
    assert "kernelspec" not in meta, meta
    assert "jupytext_version" not in meta["jupytext"]["text_representation"], meta
    assert meta["jupytext"]["text_representation"]["format_name"] == "percent"
    assert meta["jupytext"]["formats"] == "ipynb,py:percent"
    back = nbformat.read(tmp_path / "00_probe.ipynb", as_version=4)
    assert back.metadata["kernelspec"]["name"] == "some-other-kernel"


def test_lab_settings_make_py_open_as_notebooks(tmp_path, monkeypatch):
    """scripts/lab_settings.py sets jupytext's viewer as the default for Python files in JupyterLab's
    overrides.json, keeping the settings already there."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import lab_settings

    app = tmp_path / "lab"
    path = lab_settings.overrides_path(app)
    assert path == app / "settings" / "overrides.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
                                lab_settings.PLUGIN: {"defaultViewers": {"markdown": "Markdown Preview"}}}))
    assert lab_settings.main(["--app-dir", str(app)]) == 0
    data = json.loads(path.read_text())
    assert data[lab_settings.PLUGIN]["defaultViewers"] == {"markdown": "Markdown Preview", "python": "Jupytext Notebook"}
    assert data["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    lab_settings.main(["--app-dir", str(app)])  # twice: the same file
    assert json.loads(path.read_text()) == data
    # the default folder: this environment's JupyterLab application folder
    monkeypatch.delenv("JUPYTERLAB_DIR", raising=False)
    assert lab_settings.overrides_path() == Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def test_make_lab_writes_the_lab_settings():
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/lab_settings.py" in recipe and recipe.index("lab_settings") < recipe.index("jupyter lab")
