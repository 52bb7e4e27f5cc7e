"""Paper A's Fig. 1 for any prompt: the saliency flows of one prompt drawn between its tokens, layer by layer.

The graph's data is :func:`helpers.experiments.saliency_graph.flow_graph` (a ``FlowGraph``: every edge ``(i <- j,
layer l)`` with its saliency ``I_l(i, j)``, its share of the layer's saliency, its rank in the layer and its flow
class). :func:`flow_view` draws it as an interactive view: tokens along the x axis (each demonstration a band,
label words ``p_k`` and the target position ``q`` marked), layer ``l``'s edges between row ``l`` (the residual
stream entering layer ``l``) and row ``l + 1`` (leaving it), layer 0 at the bottom as in the paper's figure.
An edge's width and opacity grow with ``I_l(i, j)`` divided by the largest weight of its layer, its colour is its
flow class. The controls choose the edges per layer (top-k), a minimum share of the layer's saliency and a range
of layers; hovering a token highlights the flows into it and out of it.

The view is plain HTML: an SVG drawn by a little inline JavaScript from the data inlined as JSON, nothing fetched
when it is shown, so it works in JupyterLab (a trusted notebook), in a saved notebook and on the static site.
:func:`plot_flow_graph` draws the same graph with matplotlib; :func:`show_flow_view` shows the view and saves that
figure in the results folder for readers without JavaScript.
"""

from __future__ import annotations

import base64
import io
import json
import uuid

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from .analysis import FLOW_COLORS
from .setting import OfflineView, token_strings

__all__ = ["FLOW_LABELS", "flow_view_data", "flow_view_html", "FlowView", "flow_view", "plot_flow_graph",
           "show_flow_view"]

# the three flow classes as the view names them, in the order of helpers.experiments.saliency.FLOWS
FLOW_LABELS = {"S_wp": "text \u2192 label (S_wp)", "S_pq": "label \u2192 q (S_pq)", "S_ww": "other (S_ww)"}
_FLOWS = tuple(FLOW_LABELS)
_LABEL_COLOR, _Q_COLOR = "#b35900", "#c0392b"


def _label(s: str) -> str:
    """A token as the axis shows it: newlines and tabs as marks, outer spaces dropped (the tooltip keeps them)."""
    shown = s.replace("\n", "\u21b5").replace("\t", "\u21e5").strip()
    return (shown or "\u2423")[:14]


def _groups(prompt, labels: list[str]) -> list[list]:
    """``[start, end, caption, short caption, shortest caption]`` bands of the x axis: each demonstration (its text
    up to its label word, with the separator before it; named after its label word ``labels[k]``) and the query
    (everything after the last label word). BOS stands alone."""
    start = 1 if prompt.bos else 0
    out = []
    for k, (_, end) in enumerate(prompt.label_spans):
        out.append([start, end, f"demo {k + 1}: {labels[k]}", f"{k + 1}: {labels[k]}", f"{k + 1}"])
        start = end
    if start < len(prompt):
        out.append([start, len(prompt), "query", "query", "q"])
    return out


def _roles(prompt) -> list[str]:
    label = {p for a, b in prompt.label_spans for p in range(a, b)}
    first = {p: k for k, p in enumerate(prompt.label_pos)}
    roles = []
    for i in range(len(prompt)):
        roles.append("q" if i == prompt.q else f"p_{first[i]}" if i in first else "label" if i in label
                     else "bos" if prompt.bos and i == 0 else "")
    return roles


def _check_graph(graph) -> None:
    need = ("prompt", "n_layers", "edges", "layer_total", "max_edges", "select", "layer_range")
    if not all(hasattr(graph, a) for a in need):
        raise TypeError(f"graph must be a FlowGraph (helpers.experiments.saliency_graph.flow_graph(model, prompt, "
                        f"label_ids)), got {type(graph).__name__}")


def flow_view_data(model, graph, top_k: int = 10, min_share: float = 0.0, layers: tuple[int, int] | None = None,
                   title: str | None = None) -> dict:
    """Everything :func:`flow_view` inlines, JSON-ready: the tokens, their roles and bands, every edge of the
    graph as ``[layer, i, j, weight, share, rank, flow index]`` (flow index into ``flows``) and the controls'
    starting values (``top_k``, ``min_share``, ``layers``: checked as ``FlowGraph.select`` checks them)."""
    _check_graph(graph)
    graph.select(top_k, min_share, layers)  # the starting values are checked as the Python selection checks them
    lo, hi = graph.layer_range(layers)
    prompt = graph.prompt
    toks = token_strings(model, prompt)
    e = graph.edges
    flow_index = {f: k for k, f in enumerate(_FLOWS)}
    edges = [[int(r.layer), int(r.i), int(r.j), float(r.weight), float(r.share), int(r.rank), flow_index[r.flow]]
             for r in e.itertuples(index=False)]
    groups = _groups(prompt, [_label(toks[p]) for p in prompt.label_pos])
    n_rank = int(e["rank"].max()) + 1 if len(e) else 1
    return {
        "title": title or f"Saliency flows of one {len(prompt)}-token prompt, layer by layer",
        "n_layers": int(graph.n_layers), "tokens": [_label(t) for t in toks], "tips": [repr(t) for t in toks],
        "roles": _roles(prompt), "groups": groups, "label_pos": [int(p) for p in prompt.label_pos], "q": int(prompt.q),
        "edges": edges, "layer_total": [float(t) for t in graph.layer_total], "max_rank": n_rank,
        "max_share": float(e["share"].max()) if len(e) else 0.0, "top_k": int(min(top_k, n_rank)),
        "min_share": float(min_share), "layers": [lo, hi], "flows": list(_FLOWS),
        "flow_labels": [FLOW_LABELS[f] for f in _FLOWS], "colors": [FLOW_COLORS[f] for f in _FLOWS],
        "label_color": _LABEL_COLOR, "q_color": _Q_COLOR,
    }


def _script_json(data: dict) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` element: ``<``, ``>`` and ``&`` escaped, so a token such
    as ``</script>`` cannot end the element."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# Draws the view into its mount point from the JSON beside it. Plain DOM and SVG: nothing is fetched. The edges
# shown are exactly FlowGraph.select's: rank < top-k, share >= min share, first <= layer <= last.
_SCRIPT = r"""
(function () {
  var root = document.getElementById("__UID__");
  if (!root) { return; }
  var D = JSON.parse(root.querySelector("script.icl-flow-data").textContent);
  var mount = root.querySelector(".icl-flow-mount");
  var SVG = "http://www.w3.org/2000/svg";  // the SVG namespace's name, not an address that is fetched
  function node(ns, tag, attrs, parent, text) {
    var x = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (var k in attrs) { x.setAttribute(k, attrs[k]); }
    if (text !== undefined) { x.textContent = text; }
    if (parent) { parent.appendChild(x); }
    return x;
  }
  function svg(tag, attrs, parent, text) { return node(SVG, tag, attrs, parent, text); }
  function html(tag, attrs, parent, text) { return node(null, tag, attrs, parent, text); }
  mount.textContent = "";
  var font = "font:12px sans-serif;";
  html("div", {style: font + "font-weight:bold;margin:2px 0"}, mount, D.title);
  var bar = html("div", {style: font + "display:flex;flex-wrap:wrap;gap:4px 16px;align-items:center;margin:4px 0"}, mount);
  var inputs = {};
  function slider(key, label, min, max, step, value, fmt) {
    var wrap = html("label", {style: "white-space:nowrap"}, bar, label + " ");
    var input = html("input", {type: "range", min: min, max: max, step: step, "data-control": key,
                               style: "vertical-align:middle;width:110px"}, wrap);
    input.value = value;
    var out = html("span", {style: "display:inline-block;min-width:3.2em;margin-left:3px"}, wrap, fmt(+input.value));
    input.addEventListener("input", function () {
      if (key === "from" && +inputs.from.value > +inputs.to.value) { inputs.to.value = inputs.from.value; }
      if (key === "to" && +inputs.to.value < +inputs.from.value) { inputs.from.value = inputs.to.value; }
      for (var k in inputs) { inputs[k].nextSibling.textContent = inputs[k].fmt(+inputs[k].value); }
      draw();
    });
    input.fmt = fmt;
    inputs[key] = input;
  }
  var L = D.n_layers, n = D.tokens.length;
  slider("topk", "edges per layer", 1, D.max_rank, 1, D.top_k, String);
  var shareMax = Math.max(1, Math.ceil(D.max_share * 100));
  slider("share", "min share of its layer", 0, shareMax, 0.1, D.min_share * 100, function (v) { return v.toFixed(1) + "%"; });
  slider("from", "layers from", 0, L - 1, 1, D.layers[0], String);
  slider("to", "to", 0, L - 1, 1, D.layers[1], String);
  var legend = html("div", {style: font + "margin:2px 0"}, mount);
  var counts = [];
  for (var f = 0; f < D.flows.length; f++) {
    var item = html("span", {style: "margin-right:14px;white-space:nowrap"}, legend);
    html("span", {style: "display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px;background:"
                          + D.colors[f]}, item);
    html("span", {}, item, D.flow_labels[f] + ": ");
    counts.push(html("span", {"data-flow-count": D.flows[f]}, item, "0"));
  }
  var status = html("div", {style: font + "color:#444;margin:2px 0", "data-role": "status"}, mount);
  var box = html("div", {style: "overflow-x:auto;max-width:100%"}, mount);
  // a token's column: as wide as the page allows up to 40 px, at least 12 px (a long prompt scrolls sideways)
  var left = 64, top = 30, room = (mount.clientWidth || 900) - left - 16;
  var dx = Math.max(12, Math.min(40, Math.floor(room / n))), dy = Math.max(30, Math.min(90, 300 / L));
  var longest = 0;
  for (var t = 0; t < n; t++) { longest = Math.max(longest, D.tokens[t].length); }
  var bottom = 14 + 6.5 * longest;
  function x(t) { return left + t * dx + dx / 2; }
  var focused = -1, lines = [], summary = "";

  function draw() {
    var k = +inputs.topk.value, s = +inputs.share.value / 100, a = +inputs.from.value, b = +inputs.to.value;
    var shown = D.edges.filter(function (e) { return e[5] < k && e[4] >= s && e[0] >= a && e[0] <= b; });
    var rows = b - a + 2, height = top + (rows - 1) * dy + bottom, width = left + n * dx + 12;
    function y(row) { return top + (b + 1 - row) * dy; }
    box.textContent = "";
    var g = svg("svg", {width: width, height: height, "class": "icl-flow-svg",
                        style: "font-family:sans-serif;display:block"}, box);
    D.groups.forEach(function (grp, idx) {
      var x0 = left + grp[0] * dx, w = (grp[1] - grp[0]) * dx;
      svg("rect", {x: x0, y: top - 6, width: w, height: (rows - 1) * dy + 12,
                   fill: grp[2] === "query" ? "#fff6dd" : idx % 2 ? "#f4f4f4" : "#eaeef4"}, g);
      var fits = grp.slice(2, 5).filter(function (c) { return c.length * 6 <= w - 4; });  // the longest that fits
      var cap = svg("text", {x: x0 + 3, y: top - 12, "font-size": 10, fill: "#333"}, g, fits.length ? fits[0] : "");
      svg("title", {}, cap, grp[2]);
      cap.style.pointerEvents = "none";
    });
    D.label_pos.concat([D.q]).forEach(function (p) {
      svg("line", {x1: x(p), x2: x(p), y1: top - 6, y2: y(a) + 6, stroke: p === D.q ? D.q_color : D.label_color,
                   "stroke-width": 1, "stroke-dasharray": "2,3", "stroke-opacity": 0.6}, g);
    });
    for (var l = a; l <= b; l++) {
      svg("text", {x: left - 8, y: (y(l) + y(l + 1)) / 2 + 4, "text-anchor": "end", "font-size": 11, fill: "#333"},
          g, "layer " + l);
    }
    var maxw = {};
    D.edges.forEach(function (e) { if (e[5] === 0) { maxw[e[0]] = e[3]; } });
    shown.sort(function (e1, e2) { return e1[3] / maxw[e1[0]] - e2[3] / maxw[e2[0]]; });
    lines = [];
    var per = [0, 0, 0], ends = {};
    shown.forEach(function (e) {
      var w = e[3] / maxw[e[0]];
      var ln = svg("line", {x1: x(e[2]), y1: y(e[0]), x2: x(e[1]), y2: y(e[0] + 1), stroke: D.colors[e[6]],
                            "stroke-width": (0.6 + 3.4 * w).toFixed(2), "stroke-linecap": "round",
                            "class": "icl-flow-edge " + D.flows[e[6]], "data-l": e[0], "data-i": e[1],
                            "data-j": e[2]}, g);
      ln.baseOpacity = 0.2 + 0.8 * w;
      ln.setAttribute("stroke-opacity", ln.baseOpacity.toFixed(3));
      svg("title", {}, ln, "layer " + e[0] + ": " + e[1] + " " + D.tips[e[1]] + " \u2190 " + e[2] + " " +
          D.tips[e[2]] + "\nI = " + e[3].toPrecision(3) + " (" + (100 * e[4]).toFixed(1) + "% of the layer, rank " +
          (e[5] + 1) + ")\n" + D.flow_labels[e[6]]);
      lines.push(ln);
      per[e[6]] += 1;
      ends[e[2] + ":" + e[0]] = 1;
      ends[e[1] + ":" + (e[0] + 1)] = 1;
    });
    Object.keys(ends).forEach(function (key) {
      var parts = key.split(":"), t = +parts[0];
      var c = svg("circle", {cx: x(t), cy: y(+parts[1]), r: 2.2, fill: D.roles[t] === "q" ? D.q_color :
                             D.roles[t].indexOf("p_") === 0 ? D.label_color : "#555"}, g);
      hover(c, t);
    });
    for (var t = 0; t < n; t++) {
      var role = D.roles[t], tg = svg("g", {"class": "icl-flow-token", "data-t": t, style: "cursor:default"}, g);
      svg("rect", {x: x(t) - dx / 2, y: y(a) + 4, width: dx, height: bottom - 4, fill: "transparent"}, tg);
      var txt = svg("text", {transform: "translate(" + (x(t) + 3.5) + "," + (y(a) + 8) + ") rotate(-90)",
                             "text-anchor": "end", "font-size": 10,
                             fill: role === "q" ? D.q_color : role === "bos" ? "#777" : role ? D.label_color : "#222",
                             "font-weight": role === "q" || role.indexOf("p_") === 0 ? "bold" : "normal"},
                    tg, D.tokens[t]);
      svg("title", {}, txt, "position " + t + ": " + D.tips[t] + (role ? " (" + role + ")" : ""));
      hover(tg, t);
    }
    for (var f = 0; f < counts.length; f++) { counts[f].textContent = per[f]; }
    summary = shown.length + " edges shown: the " + k + " largest of each layer" + (s > 0 ? " with at least " +
      (100 * s).toFixed(1) + "% of its layer's saliency" : "") + ", layers " + a + "\u2013" + b +
      ". Hover a token to see its flows.";
    emphasise(focused);
  }
  function hover(el, t) {
    el.addEventListener("mouseenter", function () { emphasise(t); });
    el.addEventListener("mouseleave", function () { emphasise(-1); });
  }
  function emphasise(t) {
    focused = t;
    var into = 0, out = 0;
    lines.forEach(function (ln) {
      var i = +ln.getAttribute("data-i"), j = +ln.getAttribute("data-j"), on = i === t || j === t;
      if (i === t) { into += 1; } else if (j === t) { out += 1; }
      ln.setAttribute("stroke-opacity", (t < 0 ? ln.baseOpacity : on ? 1 : 0.05).toFixed(3));
      ln.classList.toggle("icl-flow-focus", t >= 0 && on);
    });
    status.textContent = t < 0 ? summary : "position " + t + " " + D.tips[t] + (D.roles[t] ? " (" + D.roles[t] +
      ")" : "") + ": " + into + " flows into it, " + out + " out of it, among the edges shown.";
  }
  draw();
  root.setAttribute("data-drawn", "1");
})();
"""


def flow_view_html(data: dict, uid: str | None = None, figure_name: str | None = None) -> str:
    """The view's HTML for :func:`flow_view_data`'s ``data``: a ``div.icl-flow`` with a unique id (``uid``, or a
    fresh one), the data as JSON, the mount point (a line for readers whose JavaScript does not run, naming the
    static figure ``figure_name`` when there is one) and the script that draws it."""
    uid = uid or f"icl-flow-{uuid.uuid4().hex[:12]}"
    static = (f" The same graph is saved as a static figure, <code>{figure_name}.png</code>, in the run's "
              "<code>figures/</code> folder." if figure_name else "")
    fallback = ("<p style=\"font:12px sans-serif;color:#555\">This interactive view of the saliency flows is drawn "
                "by JavaScript, which did not run here (in JupyterLab: trust the notebook, or run its cell again)."
                f"{static}</p>")
    return (f'<div class="icl-flow" id="{uid}" data-icl-flow="{uid}">'
            f'<script type="application/json" class="icl-flow-data">{_script_json(data)}</script>'
            f'<div class="icl-flow-mount">{fallback}</div>'
            f"<script>{_SCRIPT.replace('__UID__', uid)}</script></div>")


class FlowView(OfflineView):
    """An interactive flow view (:func:`flow_view`); a notebook shows it as its HTML, like any
    :class:`~helpers.study.plots.setting.OfflineView`. ``data`` is what it draws."""

    def __init__(self, data: dict, figure_name: str | None = None):
        self.data = data
        self.html = flow_view_html(data, figure_name=figure_name)


def flow_view(model, graph, top_k: int = 10, min_share: float = 0.0, layers: tuple[int, int] | None = None,
              title: str | None = None) -> FlowView:
    """Interactive view of one prompt's saliency flows (paper A's Fig. 1 for this prompt and model).

    ``graph``: :func:`helpers.experiments.saliency_graph.flow_graph` of the prompt; ``model`` gives its tokens. The
    controls start at ``top_k`` edges per layer, a minimum share ``min_share`` of a layer's saliency (0 to 1) and
    the layers ``layers`` (first, last; all when None).
    """
    return FlowView(flow_view_data(model, graph, top_k, min_share, layers, title))


def plot_flow_graph(model, graph, top_k: int = 10, min_share: float = 0.0, layers: tuple[int, int] | None = None,
                    title: str | None = None):
    """The graph :func:`flow_view` draws, with its controls at these values, as a matplotlib figure (returned)."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D

    data = flow_view_data(model, graph, top_k, min_share, layers, title)
    lo, hi = data["layers"]
    shown = graph.select(data["top_k"], min_share, (lo, hi))
    n = len(data["tokens"])
    width = min(36.0, max(7.0, 0.16 * n + 1.6))
    fig, ax = plt.subplots(figsize=(width, min(12.0, max(3.2, 0.38 * (hi - lo + 1) + 2.2))))
    per_token = 0.8 * width / n  # inches of the x axis per token (the axes take about 80% of the figure)
    for k, (a, b, *captions) in enumerate(data["groups"]):
        ax.axvspan(a - 0.5, b - 0.5, color="#fff6dd" if captions[0] == "query" else ("#f4f4f4" if k % 2 else "#eaeef4"),
                   lw=0, zorder=0)
        fits = [c for c in captions if 0.07 * len(c) <= (b - a) * per_token]  # 7-point characters, in inches
        ax.text(a - 0.4, hi + 1.25, fits[0] if fits else "", fontsize=7, va="bottom", ha="left", clip_on=False)
    for p in data["label_pos"] + [data["q"]]:
        ax.axvline(p, color=_Q_COLOR if p == data["q"] else _LABEL_COLOR, lw=0.8, ls=(0, (2, 3)), alpha=0.6, zorder=1)
    if len(shown):
        top = graph.edges[graph.edges["rank"] == 0].set_index("layer")["weight"]
        w = (shown["weight"] / shown["layer"].map(top)).to_numpy()
        order = np.argsort(w, kind="stable")
        seg = [((j, l), (i, l + 1)) for l, i, j in shown[["layer", "i", "j"]].to_numpy()[order]]
        colors = [to_rgba(FLOW_COLORS[f], 0.2 + 0.8 * x) for f, x in zip(shown["flow"].to_numpy()[order], w[order])]
        ax.add_collection(LineCollection(seg, colors=colors, linewidths=0.5 + 2.6 * w[order], zorder=2,
                                         capstyle="round"))
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(lo - 0.15, hi + 1.15)
    ax.set_xticks(range(n), data["tokens"], rotation=90, fontsize=7 if n <= 80 else 5)
    for t, tick in enumerate(ax.get_xticklabels()):
        role = data["roles"][t]
        if role:
            tick.set_color(_Q_COLOR if role == "q" else "#777777" if role == "bos" else _LABEL_COLOR)
            tick.set_fontweight("bold" if role == "q" or role.startswith("p_") else "normal")
    ax.set_yticks([l + 0.5 for l in range(lo, hi + 1)], [f"layer {l}" for l in range(lo, hi + 1)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.legend([Line2D([], [], color=FLOW_COLORS[f], lw=2) for f in _FLOWS], [FLOW_LABELS[f] for f in _FLOWS],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    share = f", at least {100 * min_share:.1f}% of its layer" if min_share > 0 else ""
    ax.set_title(f"{data['title']}\nthe {data['top_k']} largest edges of each layer{share}; width and opacity: "
                 "I_l(i, j) over the layer's largest", fontsize=9, loc="left", pad=26)
    fig.tight_layout()
    return fig


def show_flow_view(model, graph, name: str, top_k: int = 10, min_share: float = 0.0,
                   layers: tuple[int, int] | None = None, title: str | None = None,
                   model_name: str | None = None) -> FlowView:
    """Show the interactive :func:`flow_view` and save the same graph (:func:`plot_flow_graph`) as
    ``figures/<name>.png`` in the results folder (:func:`helpers.study.results.save_figure`). The output carries
    the figure too (``image/png``), for a reader of the notebook whose viewer shows no HTML. Returns the view (its
    ``data`` is what it draws); a cell that ends with this call shows it once (``_ = show_flow_view(...)``)."""
    from helpers.study.results import save_figure

    view = FlowView(flow_view_data(model, graph, top_k, min_share, layers, title), figure_name=name)
    fig = plot_flow_graph(model, graph, top_k, min_share, layers, title)
    save_figure(fig, name, model_name=model_name)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    display({"text/html": view.html, "image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
             "text/plain": f"<flow view: {view.data['title']}>"}, raw=True)
    return view
