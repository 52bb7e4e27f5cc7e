"""Sphinx configuration of the rendered site (``make site``; scripts/build_site.py stages the sources).

myst-nb renders the notebooks a ``make run`` executed, outputs as they are, without running them again
(``nb_execution_mode = "off"``); MathJax is served from the site itself (sphinx-mathjax-offline), so the
pages need no network.
"""

project = "Label words are anchors: a TransformerLens reproduction"
author = "the project's contributors"
extensions = ["myst_nb", "sphinx-mathjax-offline"]
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "Label words are anchors"
# site.css: long table cells wrap, wide tables scroll in their own box; site.js: a click shows a figure full size
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_js_files = ["site.js"]
exclude_patterns = ["_build", "record"]
# notebooks start with a level-1 title and use levels 2-3 below; the staged pages link to each other by file
suppress_warnings = ["myst.header"]
