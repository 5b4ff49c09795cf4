"""``kernorch report DIR``: one self-contained HTML page of a compiled model's plan, and a PNG of
its timeline for terminals.

The page holds, with no file or network access of its own (inline SVG, CSS and a few lines of
JavaScript): the plain-words summary; the primitive graph laid out by depth, each prim coloured
by the kernel that computes it (click a kernel to highlight its prims); per kernel its prims,
runtime, priced ms and ms measured in place; a timeline of one inference (kernels in execution
order, measured widths); and, when given, the latency comparison and baseline plans
(per-operator, greedy) next to the plan. When its script has run, ``<body data-ready="1">``;
a script error sets ``data-error`` (the headless-browser test reads both).
"""

from __future__ import annotations

import html
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from kernorch.errors import KernorchError
from kernorch.frontend.inputs import random_inputs
from kernorch.runtime import compile as compile_module
from kernorch.runtime.benchmark import compare as compare_runtimes
from kernorch.runtime.summary import plain_summary, runtime_name

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
MAX_GRAPH_PRIMS = 6000  # beyond this the graph section lists kernels only (a page must stay usable)


def colour(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


def measure_kernels(model, feeds, repeat: int = 10) -> list[float]:
    """Median seconds per kernel, each run in place in plan order (``Executable.profile``)."""
    return model.executable.profile(feeds, repeat)


def layout(model) -> dict[str, Any]:
    """Prims as nodes (depth = longest path from the graph inputs, column = order within the depth)
    and producer -> consumer edges, with the kernel of every prim (the first kernel that computes
    it; ``dup`` when several do)."""
    g = model.graph
    infos = model.executable.infos
    owner: dict[int, int] = {}
    count: Counter = Counter()
    for k, info in enumerate(infos):
        for v in info.members:
            owner.setdefault(v, k)
            count[v] += 1
    produced = {p.output: p for p in g.prims}
    depth: dict[int, int] = {}
    for p in g.prims:  # topological order
        depth[p.output] = 1 + max((depth[v] for v in p.inputs if v in depth), default=-1)
    consumers: dict[int, list[int]] = {}
    for p in g.prims:
        for v in dict.fromkeys(p.inputs):
            if v in produced:
                consumers.setdefault(v, []).append(p.output)
    for p in reversed(g.prims):  # prims that read only inputs and weights sit just above their first reader
        if not any(v in produced for v in p.inputs) and p.output in consumers:
            depth[p.output] = max(0, min(depth[c] for c in consumers[p.output]) - 1)
    nodes, cols = [], Counter()
    for p in g.prims:
        if p.output not in owner:
            continue
        d = depth[p.output]
        t = g.types[p.output]
        nodes.append({"v": p.output, "op": p.op.value, "kind": p.kind.value, "d": d, "c": cols[d],
                      "k": owner[p.output], "dup": count[p.output] > 1, "origin": p.origin,
                      "type": f"{t.dtype}[{','.join(map(str, t.shape))}]"})
        cols[d] += 1
    shown = {n["v"] for n in nodes}
    edges = [(u, p.output) for p in g.prims if p.output in shown for u in dict.fromkeys(p.inputs)
             if u in shown and u in produced]
    return {"nodes": nodes, "edges": edges, "width": max(cols.values(), default=0),
            "depth": max(depth.values(), default=0) + 1}


def _graph_svg(lay: dict[str, Any]) -> str:
    if not lay["nodes"]:
        return "<p>(no prims)</p>"
    if len(lay["nodes"]) > MAX_GRAPH_PRIMS:
        return f"<p>{len(lay['nodes'])} prims: too many to draw; see the kernel table.</p>"
    labels = len(lay["nodes"]) <= 600  # op names beside the dots while they stay legible
    dx, dy, r = (64 if labels else 16), 18, 5
    w = max(lay["width"], 1) * dx + 2 * dx
    h = lay["depth"] * dy + 2 * dy
    pos = {n["v"]: (dx + n["c"] * dx, dy + n["d"] * dy) for n in lay["nodes"]}
    out = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
           '<g class="edges" stroke="#999" stroke-width="0.6" fill="none">']
    for u, v in lay["edges"]:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}"/>')
    out.append("</g><g class=\"nodes\">")
    for n in lay["nodes"]:
        x, y = pos[n["v"]]
        tip = html.escape(f"%{n['v']} {n['op']} ({n['kind']}) {n['type']} - kernel #{n['k']}"
                          + (" (also computed by another kernel)" if n["dup"] else "")
                          + (f" - ONNX node {n['origin']}" if n["origin"] else ""))
        stroke = ' stroke="#000" stroke-width="1.5"' if n["dup"] else ""
        out.append(f'<circle class="prim" data-k="{n["k"]}" cx="{x}" cy="{y}" r="{r}" fill="{colour(n["k"])}"'
                   f'{stroke}><title>{tip}</title></circle>')
        if labels:
            out.append(f'<text class="prim" data-k="{n["k"]}" x="{x + r + 2}" y="{y + 4}" font-size="10" '
                       f'fill="#333">{html.escape(n["op"])}</text>')
    out.append("</g></svg>")
    return "\n".join(out)


def _timeline_svg(names: Sequence[str], secs: Sequence[float]) -> str:
    total = sum(secs) or 1.0
    w, h, pad = 1000, 46, 4
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="100%" height="{h + 22}" '
           f'viewBox="0 0 {w} {h + 22}" preserveAspectRatio="none">']
    x = 0.0
    for k, (name, s) in enumerate(zip(names, secs)):
        bw = max(s / total * w, 0.5)
        tip = html.escape(f"kernel #{k} {name}: {s * 1e3:.4f} ms ({s / total:.1%})")
        out.append(f'<rect class="kbar" data-k="{k}" x="{x:.2f}" y="{pad}" width="{bw:.2f}" height="{h - 2 * pad}" '
                   f'fill="{colour(k)}"><title>{tip}</title></rect>')
        x += s / total * w
    out.append(f'<text x="0" y="{h + 16}" font-size="12">0 ms</text>'
               f'<text x="{w}" y="{h + 16}" font-size="12" text-anchor="end">{total * 1e3:.3f} ms</text></svg>')
    return "\n".join(out)


def _census(ops: Sequence[str]) -> str:
    if len(ops) <= 12:
        return " ".join(ops)
    return f"{len(ops)} prims: " + " ".join(f"{op}&times;{n}" for op, n in Counter(ops).most_common())


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 8px}
pre.summary{background:#f6f8fa;padding:10px;border-radius:6px;white-space:pre-wrap}
table{border-collapse:collapse;font-size:13px} td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.kernel{cursor:pointer} tr.kernel.sel{background:#fff3c4}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
#graphbox{overflow:auto;max-height:720px;border:1px solid #ddd;border-radius:6px;padding:4px}
svg .dim{opacity:.15} .note{color:#666;font-size:12px}
"""

SCRIPT = """
window.addEventListener('error', function (e) { document.body.dataset.error = String(e.message); });
(function () {
  var rows = document.querySelectorAll('tr.kernel');
  var marks = document.querySelectorAll('[data-k]');
  var selected = null;
  function show(k) {
    selected = (selected === k) ? null : k;
    for (var i = 0; i < marks.length; i++) {
      var m = marks[i];
      var on = selected !== null && m.dataset.k === selected;
      if (m.tagName.toLowerCase() === 'tr') { m.classList.toggle('sel', on); }
      else { m.classList.toggle('dim', selected !== null && !on); }
    }
  }
  for (var i = 0; i < marks.length; i++) {
    marks[i].addEventListener('click', function (e) { show(this.dataset.k); e.stopPropagation(); });
  }
  var data = JSON.parse(document.getElementById('plan-data').textContent);
  document.getElementById('count').textContent = data.kernels + ' kernels, ' + data.prims + ' prims';
  document.body.dataset.ready = '1';
})();
"""


def build_html(model, *, title: str, kernel_seconds: Sequence[float] | None = None, comparison=None,
               baselines: Sequence[dict] | None = None) -> str:
    infos = model.executable.infos
    lay = layout(model)
    esc = html.escape
    summary = "\n".join(plain_summary(model, comparison))
    measured = list(kernel_seconds) if kernel_seconds is not None else None
    rows = []
    for k, info in enumerate(infos):
        priced = info.seconds
        meas = measured[k] if measured else None
        ratio = f"{meas / priced:.2f}" if meas and priced else "-"
        rows.append(
            f'<tr class="kernel" data-k="{k}"><td><span class="swatch" style="background:{colour(k)}"></span>{k}</td>'
            f'<td>{esc(runtime_name(info.provider))}</td><td class="num">{len(info.members)}</td>'
            f'<td class="num">{"-" if priced is None else f"{priced * 1e3:.4f}"}</td>'
            f'<td class="num">{"-" if meas is None else f"{meas * 1e3:.4f}"}</td><td class="num">{ratio}</td>'
            f"<td>{_census(info.ops)}</td></tr>")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>", '<p class="note" id="count"></p>',
        f'<pre class="summary">{esc(summary)}</pre>',
    ]
    if measured:
        parts += ["<h2>One inference, kernel by kernel</h2>",
                  f'<p class="note">Each kernel run in place in plan order, median of repeated runs; '
                  f"total {sum(measured) * 1e3:.3f} ms. Click a bar or a row to highlight its prims.</p>",
                  _timeline_svg([runtime_name(i.provider) for i in infos], measured)]
    if comparison is not None:
        parts += ["<h2>Latency against the runtimes users run today</h2>",
                  f"<pre>{esc(comparison.table())}</pre>"]
    if baselines:
        parts += ["<h2>The plan next to the baselines (same code generator)</h2>",
                  '<table><tr><th>plan</th><th class="num">kernels</th><th class="num">median ms</th>'
                  '<th class="num">vs this plan</th><th>notes</th></tr>']
        mine = next((b["median"] for b in baselines if b.get("name") == "this plan"), None)
        for b in baselines:
            med = b.get("median")
            rel = f"{med / mine:.2f}x" if med and mine else "-"
            parts.append(f'<tr><td>{esc(b["name"])}</td><td class="num">{b.get("kernels", "-")}</td>'
                         f'<td class="num">{"-" if med is None else f"{med * 1e3:.3f}"}</td>'
                         f'<td class="num">{rel}</td><td>{esc(b.get("note", ""))}</td></tr>')
        parts.append("</table>")
    parts += ["<h2>Kernels</h2>",
              '<table><tr><th>#</th><th>runs on</th><th class="num">prims</th><th class="num">priced ms</th>'
              '<th class="num">measured ms</th><th class="num">measured / priced</th><th>prims</th></tr>',
              *rows, "</table>",
              "<h2>Primitive graph, coloured by kernel</h2>",
              f'<p class="note">{len(lay["nodes"])} prims by depth (top: inputs). A black ring: the prim is '
              f"computed by more than one kernel (recomputed instead of stored). Hover for details.</p>",
              f'<div id="graphbox">{_graph_svg(lay)}</div>',
              '<script type="application/json" id="plan-data">'
              + json.dumps({"kernels": len(infos), "prims": len(lay["nodes"])}) + "</script>",
              f"<script>{SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts)


def write_png(path: str | Path, infos, kernel_seconds: Sequence[float], title: str) -> Path | None:
    """The timeline as a PNG (matplotlib); None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    total = sum(kernel_seconds) or 1.0
    fig, ax = plt.subplots(figsize=(10, 1.8), dpi=100)
    x = 0.0
    for k, s in enumerate(kernel_seconds):
        ax.barh(0, s * 1e3, left=x * 1e3, color=colour(k), edgecolor="white", linewidth=0.5)
        if s / total > 0.06:
            ax.text((x + s / 2) * 1e3, 0, f"#{k} {runtime_name(infos[k].provider)}", ha="center", va="center",
                    fontsize=7, color="white")
        x += s
    ax.set_yticks([])
    ax.set_xlabel("ms (kernels run in place in plan order, median each)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def write_report(model, path, *, png=None, source: Any = None, feeds=None, repeat: int = 20,
                 threads: int | None = None, baselines: bool = True, compare: bool = True,
                 title: str | None = None) -> tuple[Path, Path | None]:
    """Write the HTML page of ``model`` (a CompiledModel) to ``path`` and its timeline to ``png``
    (default: ``path`` with ``.png``; skipped without matplotlib). ``source`` (the original ONNX
    file or ModelProto) enables the onnxruntime/OpenVINO comparison and the per-operator and
    greedy baselines; ``feeds`` default to seeded random inputs. Returns (page, png or None)."""
    page = Path(path)
    png = page.with_suffix(".png") if png is None else Path(png)
    feeds = random_inputs(model.executable.sig.graph, seed=0) if feeds is None else feeds
    secs = measure_kernels(model, feeds, repeat)
    comparison = compare_runtimes(model, feeds, source, threads=threads, seconds=1.0) if compare else None
    plans = baseline_plans(model, feeds, source, threads) if baselines and source is not None else None
    title = title or "kernorch plan"
    try:
        page.write_text(build_html(model, title=title, kernel_seconds=secs, comparison=comparison, baselines=plans))
        made = write_png(png, model.executable.infos, secs, title)
    except OSError as e:
        raise KernorchError(f"cannot write the report ({e.strerror or e}): {e.filename}") from None
    return page, made


def baseline_plans(model, feeds, source: Any, threads: int | None, seconds: float = 2.0) -> list[dict]:
    """The per-operator and greedy plans of ``source`` (kernorch's own kernels, roofline costs, so
    nothing is tuned), timed end to end next to ``model``, interleaved round by round."""
    src = source if hasattr(source, "SerializeToString") else os.fspath(source)
    g = model.executable.sig.graph
    shapes = {g.name(v): list(g.types[v].shape) for v in g.inputs}
    runs = {"this plan": model}
    notes = {"this plan": "the compiled model",
             "per-operator": "kernorch's own kernels, one per operator",
             "greedy": "kernorch's own kernels, rule-based fusion"}
    for strategy in ("per-operator", "greedy"):
        try:
            runs[strategy] = compile_module.compile(src, strategy=strategy, cost="model", providers=(), regions=False,
                                           input_shapes=shapes, threads=threads, progress=False)
        except KernorchError as e:
            notes[strategy] = f"not built: {e}"
    times: dict[str, list[float]] = {k: [] for k in runs}
    t_end = time.perf_counter() + seconds
    rounds = 0
    while rounds < 5 or (time.perf_counter() < t_end and rounds < 500):
        for name, m in runs.items():
            t = time.perf_counter()
            m.run(feeds)
            if rounds >= 2:  # warm-up rounds
                times[name].append(time.perf_counter() - t)
        rounds += 1
    out = [{"name": name, "kernels": len(m.kernels), "median": statistics.median(times[name]), "note": notes[name]}
           for name, m in runs.items()]
    return out + [{"name": k, "note": notes[k]} for k in ("per-operator", "greedy") if k not in runs]
