"""The plots package re-exports every submodule; no name may shadow another."""

from __future__ import annotations

import importlib

SUBMODULES = ("setting", "analysis", "applications", "heads")


def test_no_name_collisions_between_plot_modules():
    owners: dict[str, str] = {}
    for sub in SUBMODULES:
        mod = importlib.import_module(f"helpers.plots.{sub}")
        for name in getattr(mod, "__all__", []):
            assert name not in owners, f"plots.{name} is defined in both {owners[name]} and {sub}"
            owners[name] = sub


def test_anchor_html_marks_label_format_and_q(tiny_models):
    from helpers import plots
    from helpers.prompts import Demo, build_prompt

    m = tiny_models["gpt2"]
    p = build_prompt(m, "sst2", [Demo("good", 1)], Demo("bad", 0))
    html = plots.anchor_html(m, p)
    assert html.count("(p_k)") == 1 and f"pos {p.q}: q" in html and "format" in html
