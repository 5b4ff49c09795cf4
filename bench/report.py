"""Tables of one benchmark run: to the terminal (rich when installed), to docs/BENCHMARKS.md (one
section per machine, replaced when the same machine runs again) and a plot (docs/benchmarks.png)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional

from bench.peers import KERNORCH, KERNORCH_DOC, PEERS, RUNTIMES

Table = tuple[str, list[str], list[list[str]], list[str]]  # title, header, rows, notes
PEER_COLS = list(PEERS)
STRATEGY_COLS = ["kn-unfused", "kn-per-op", "kn-greedy", "kn-own", "kn-optimal"]


def geomean(xs) -> Optional[float]:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _ms(rec: dict, col: str, trusted: bool = False) -> Optional[float]:
    """Median ms of a runtime that ran (and, with ``trusted``, whose output matched)."""
    st = rec.get("runtimes", {}).get(col, {})
    if st.get("median_ms") is None or (trusted and st.get("mismatch")):
        return None
    return st["median_ms"]


def _cell(rec: dict, col: str) -> str:
    st = rec.get("runtimes", {}).get(col)
    if not st:
        return "-"
    if st.get("median_ms") is None:
        return st.get("status", "-")
    flag = " MISMATCH" if st.get("mismatch") else ""
    return f"{st['median_ms']:.3g}{flag}"


def _noise(rec: dict) -> str:
    sp = [st["spread"] for st in rec.get("runtimes", {}).values() if st.get("spread") is not None]
    return f"{sorted(sp)[len(sp) // 2]:.0%}" if sp else "-"


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _label(rec: dict) -> str:
    return rec["name"] + (f" ({rec['size']})" if rec.get("size") and not rec["name"].startswith("light_") else "")


# ---------------------------------------------------------------------------------------------
def tables(run: dict) -> list[Table]:
    ms = run["models"]
    out: list[Table] = []
    notes = []
    for rec in ms:
        if rec.get("error"):
            notes.append(f"{rec['name']}: {rec['error']}")
        for col, st in rec.get("runtimes", {}).items():
            if st.get("status") in ("failed", "timeout"):
                notes.append(f"{rec['name']} / {col}: {st['status']}: {st.get('note', '')}")
    out.append(("Latency, ms (median of interleaved repetitions; MISMATCH = output differs from onnxruntime)",
                ["model"] + RUNTIMES + ["noise"], [[_label(r)] + [_cell(r, c) for c in RUNTIMES] + [_noise(r)]
                                                   for r in ms],
                notes + ["noise: median over runtimes of (slowest - fastest sample) / median; "
                         "above ~20% the machine was not quiet."]))

    rows = []
    for r in ms:
        row = [_label(r)]
        for c in RUNTIMES:
            e = r.get("runtimes", {}).get(c, {}).get("rel_err")
            row.append("-" if e is None else f"{e:.1e}" + (" !" if r["runtimes"][c].get("mismatch") else ""))
        rows.append(row)
    out.append((f"Output check: max |x - ort| / max |ort| (flagged '!' above {1e-3:g})", ["model"] + RUNTIMES, rows,
                []))

    cols = [c for c in RUNTIMES if c != "eager"]
    rows, per_col = [], {c: [] for c in cols}
    for r in ms:
        eager = _ms(r, "eager")
        if eager is None:
            continue
        row = [_label(r)]
        for c in cols:
            s = _ratio(eager, _ms(r, c, True))
            per_col[c].append(s)
            row.append(_x(s))
        rows.append(row)
    if rows:
        rows.append(["geomean"] + [_x(geomean(per_col[c])) for c in cols])
    out.append(("Speedup over PyTorch eager (eager ms / runtime ms; models with an nn.Module)", ["model"] + cols, rows,
                []))

    rows, gm = [], [[], [], [], []]
    for r in ms:
        own, opt = _ms(r, "kn-own", True), _ms(r, "kn-optimal", True)
        ratios = [_ratio(_ms(r, k, True), own) for k in ("kn-greedy", "kn-per-op", "kn-unfused")]
        ratios.append(_ratio(_ms(r, "kn-greedy", True), opt))
        for g, x in zip(gm, ratios):
            g.append(x)
        rows.append([_label(r)] + [_x(x) for x in ratios])
    rows.append(["geomean"] + [_x(geomean(g)) for g in gm])
    out.append(("Orchestration win: the binary-LP plan over kernorch's kernels (kn-own) vs the built-in baselines, "
                "same code generator and providers; last column: with provider regions (>1 = optimal faster)",
                ["model", "greedy / own", "per-op / own", "unfused / own", "greedy / optimal"], rows, []))

    rows, gs = [], []
    for r in ms:
        opt = _ms(r, "kn-optimal", True)
        peers_ok = {c: _ms(r, c, True) for c in PEER_COLS if _ms(r, c, True) is not None}
        best = min(peers_ok, key=peers_ok.get) if peers_ok else None
        s = _ratio(peers_ok.get(best), opt) if best else None
        gs.append(s)
        rows.append([_label(r), "-" if opt is None else f"{opt:.3g}", best or "-",
                     "-" if best is None else f"{peers_ok[best]:.3g}", _x(s),
                     _x(_ratio(_ms(r, "ort", True), opt)), _x(_ratio(_ms(r, "eager", True), opt))])
    rows.append(["geomean", "", "", "", _x(geomean(gs)), "", ""])
    out.append(("End to end: kernorch optimal vs the best peer (fastest matching peer)",
                ["model", "optimal ms", "best peer", "peer ms", "speedup", "vs ort", "vs eager"], rows, []))

    rows, gs = [], {k: [] for k in ("tc", "ort", "best")}
    for r in ms:
        own = _ms(r, "kn-own", True)
        peers_ok = {c: _ms(r, c, True) for c in ("ort", "openvino") if _ms(r, c, True) is not None}
        best = min(peers_ok, key=peers_ok.get) if peers_ok else None
        ratios = {"tc": _ratio(_ms(r, "torch.compile", True), own), "ort": _ratio(_ms(r, "ort", True), own),
                  "best": _ratio(peers_ok.get(best), own) if best else None}
        for k, v in ratios.items():
            gs[k].append(v)
        rows.append([_label(r), _cell(r, "kn-own"), _cell(r, "torch.compile"), _x(ratios["tc"]), _cell(r, "ort"),
                     _x(ratios["ort"]), best or "-", _x(ratios["best"])])
    rows.append(["geomean", "", "", _x(geomean(gs["tc"])), "", _x(geomean(gs["ort"])), "", _x(geomean(gs["best"]))])
    out.append(("kernorch's own engine (kn-own: generated C + oneDNN kernels on one thread pool, no provider regions) "
                "vs the peers (speed = peer ms / kn-own ms; > 1 = kn-own faster)",
                ["model", "kn-own ms", "torch.compile ms", "vs torch.compile", "ort ms", "vs ort", "best of ort/openvino",
                 "vs best"], rows, []))

    rows = []
    for r in ms:
        k = r.get("kernels", {}).get("kn-own", {})
        own = _ms(r, "kn-own", True)
        if "by_class_s" not in k or own is None:
            rows.append([_label(r)] + ["-"] * 9)
            continue
        priced, hot, then = k.get("priced_s"), k.get("priced_hot_s"), k.get("compile_e2e_s")
        cls = k["by_class_s"]
        over = max(0.0, own / 1e3 - k["total_s"])
        rows.append([_label(r), "-" if hot is None else f"{hot * 1e3:.3g}",
                     "-" if priced is None else f"{priced * 1e3:.3g}",
                     "-" if then is None else f"{then * 1e3:.3g}",
                     "-" if not (priced and then) else f"{then / priced:.2f}", f"{own:.3g}",
                     "-" if not priced else f"{own / 1e3 / priced:.2f}",
                     f"{cls['linear'] / (own / 1e3):.0%}", f"{(cls['memory'] + cls['opaque']) / (own / 1e3):.0%}",
                     f"{over / (own / 1e3):.0%}"])
    out.append(("kn-own plan: priced (sum of the solver's kernel prices, in context) vs measured end to end, and "
                "where the measured time goes (kernels timed step by step inside real calls, dispatch included)",
                ["model", "first plan priced alone ms", "priced ms", "measured at compile ms", "at compile / priced",
                 "measured in bench ms", "bench / priced",
                 "linear kernels", "memory-bound kernels", "overhead (rest)"], rows,
                ["Priced alone: the first plan's kernels timed alone, hot in cache (what the solver saw before "
                 "pricing in context, runtime/in_context.py). Measured at compile: the plan's end-to-end median "
                 "timed by the compile right after pricing it (report.end_to_end), so the ratio is the pricing's "
                 "error alone; the bench's median comes minutes later, after the other runtimes, and adds the "
                 "machine's drift."]))

    rows = []
    for r in ms:
        cold, warm = r.get("compiles", {}).get("cold", {}), r.get("compiles", {}).get("warm", {})
        rt = r.get("runtimes", {})

        def secs(d: dict) -> str:
            if not d or "wall_s" not in d:
                return d.get("error", "-") if d else "-"
            s = d["seconds"]
            return (f"{d['wall_s']:.1f} (import {s.get('import', 0):.1f}, rewrite {s.get('rewrite', 0):.1f}, "
                    f"orchestrate {s.get('orchestrate', 0):.1f}, build {s.get('build', 0):.1f})")

        def setup(c: str) -> str:
            return f"{rt[c]['setup_s']:.1f}" if rt.get(c, {}).get("setup_s") is not None else rt.get(c, {}).get(
                "status", "-")

        rows.append([_label(r), str(cold.get("prims", "-")), secs(cold),
                     f"{cold.get('measured', '-')} / {cold.get('candidates', '-')}"
                     + (f" ({cold['failed']} rejected)" if cold.get("failed") else ""), secs(warm),
                     f"{warm.get('measured', '-')} / {warm.get('cached', '-')}", str(warm.get("same_plan", "-")),
                     setup("torch.compile"), setup("openvino"), setup("ort")])
    out.append(("Tuning / setup time, s (kernorch optimal: cold = fresh tuning database and build cache, warm = "
                "second compile on the same database)",
                ["model", "prims", "kernorch cold s", "cold measured / candidates", "kernorch warm s",
                 "warm measured / cached", "same plan", "torch.compile s", "openvino s", "ort s"], rows, []))

    rows = []
    for r in ms:
        row = [_label(r)]
        for c in STRATEGY_COLS + ["kn-opt+all", "kn-opt-norw"]:
            d = r.get("compiles", {}).get("cold" if c == "kn-optimal" else c, {})
            row.append(f"{d['candidates']} / {d['kernels']}" if "kernels" in d else "-")
        d = r.get("compiles", {}).get("cold", {})
        row.append(", ".join(f"{k} {v}" for k, v in sorted(d.get("providers", {}).items())) or "-")
        rows.append(row)
    out.append(("Candidates priced / kernels chosen, per strategy", ["model"] + STRATEGY_COLS +
                ["kn-opt+all", "kn-opt-norw", "optimal kernels by provider"], rows, []))

    rows = []
    for r in ms:
        row = [_label(r)]
        for c in STRATEGY_COLS:
            k = r.get("kernels", {}).get(c, {})
            if "shares" not in k:
                row.append(k.get("error", "-")[:40] if k else "-")
                continue
            sh = k["shares"]
            row.append(f"{sh['memory']:.0%}" + (f" (+{sh['opaque']:.0%} opaque)" if sh["opaque"] > 0.005 else ""))
        rows.append(row)
    out.append(("Memory-bound share of kernel time (kernorch's own C kernels: no matmul/conv), per strategy",
                ["model"] + STRATEGY_COLS, rows, []))

    bw = run.get("copy_bw")
    rows = []
    for r in ms:
        k = r.get("kernels", {}).get("kn-own", {})
        if "median_frac" not in k:
            rows.append([_label(r), str(k.get("n_memory", "-")), "-", "-", "-"])
            continue
        w = k["worst"][0] if k.get("worst") else None
        worst = "-" if w is None else f"{w['ops'][:48]} ({w['seconds'] * 1e6:.0f} us, {w['frac']:.0%})"
        rows.append([_label(r), str(k["n_memory"]), f"{k['median_frac']:.0%}", f"{k['share_ge70']:.0%}", worst])
    out.append((f"Roofline, kn-own plan: memory-bound kernels' bandwidth (input + output bytes / time) over copy "
                f"bandwidth ({'-' if bw is None else f'{bw / 1e9:.1f} GB/s'}, large torch copy)",
                ["model", "memory kernels", "median fraction", "time at >= 70%", "costliest shortfall"], rows,
                ["Small tensors live in cache, so a fraction above 100% is possible."]))

    rows = []
    for r in ms:
        cp = r.get("compiles", {})
        none, dflt, full = (_ms(r, c, True) for c in ("kn-opt-norw", "kn-own", "kn-opt+all"))
        def applied(key: str) -> str:
            return ", ".join(f"{k} {v}" for k, v in cp.get(key, {}).get("rewrites", {}).items() if v) or "-"

        rows.append([_label(r)] + [str(cp.get(k, {}).get("prims", "-")) for k in ("kn-opt-norw", "kn-own", "kn-opt+all")]
                    + [f"{v:.3g}" if v is not None else _cell(r, c) for v, c in
                       ((none, "kn-opt-norw"), (dflt, "kn-own"), (full, "kn-opt+all"))]
                    + [_x(_ratio(none, dflt)), _x(_ratio(none, full)), applied("kn-own"), applied("kn-opt+all")])
    out.append(("Rewrite ablation, kernorch optimal without regions (kn-own): no rewrites / DEFAULT_RULES / ALL_RULES (ratios > 1 = the "
                "rewrites make it faster)",
                ["model", "prims none", "prims default", "prims all", "ms none", "ms default", "ms all",
                 "none / default", "none / all", "applied (default)", "applied (all)"], rows, []))
    return out


# ---------------------------------------------------------------------------------------------
def print_tables(run: dict) -> None:
    try:
        from rich.console import Console
        from rich.table import Table as RichTable
    except ImportError:  # plain text
        for title, head, rows, notes in tables(run):
            print(f"\n{title}")
            widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
            for line in [head] + rows:
                print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
            for n in notes:
                print(f"  note: {n}")
        return
    console = Console(width=max(160, Console().width))
    for title, head, rows, notes in tables(run):
        t = RichTable(title=title, title_justify="left", show_lines=False)
        for i, h in enumerate(head):
            t.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for row in rows:
            t.add_row(*[str(x) for x in row])
        console.print(t)
        for n in notes:
            console.print(f"  note: {n}", highlight=False)


def markdown_tables(run: dict) -> str:
    parts = []
    for title, head, rows, notes in tables(run):
        parts.append(f"**{title}**\n")
        parts.append("| " + " | ".join(head) + " |")
        parts.append("|" + "|".join(" --- " for _ in head) + "|")
        for row in rows:
            parts.append("| " + " | ".join(str(x).replace("|", "/") for x in row) + " |")
        parts.extend(f"\n- {n}" for n in notes)
        parts.append("")
    return "\n".join(parts)


HEADER = """# Benchmarks

Generated by `python -m bench` (`bench/run.py`; see `bench/README.md`). One section per machine and
run kind; every figure in a section comes from the single run whose command and date it shows.
Runtimes are timed in one process, round-robin per repetition, with the same thread count.
`docs/benchmarks.png` plots the latest run written here.
"""


def section(run: dict, plot: Optional[Path]) -> tuple[str, str]:
    m = run["machine"]
    key = f"{m['cpu']} | {run['threads']} threads | {run['label']}"
    smoke = run["label"] == "smoke"
    lines = [f"<!-- bench:begin {key} -->", f"## {m['cpu']}, {run['threads']} threads"
             + (" — SMOKE RUN (small sizes / few repeats / model subset: not final numbers)" if smoke else ""), ""]
    load = m.get("load_avg")
    lines += [f"- command: `{run['command']}`", f"- date: {run['date']}, wall {run['wall_s'] / 60:.1f} min",
              f"- machine: {m['cpu']}, {m['logical_cpus']} logical CPUs"
              + (f", load average at start {load[0]:.1f}" if load else "")
              + f"; torch {m['torch']}, onnxruntime {m['onnxruntime']}, "
              f"openvino {m.get('openvino') or 'not installed'}",
              f"- {run['repeats']} interleaved repetitions, exporter {run['exporter']}, "
              f"{'small' if run['small'] else 'benchmark'} sizes", ""]
    lines.append("Columns:\n")
    lines += [f"- `{k}`: {v}" for k, v in {**PEERS, **KERNORCH_DOC}.items()]
    lines.append("")
    lines.append(markdown_tables(run))
    if plot is not None:
        lines.append(f"![speedup over PyTorch eager]({plot.name})\n")
    lines.append(f"<!-- bench:end {key} -->")
    return key, "\n".join(lines)


def write_markdown(run: dict, path: Path, plot_path: Optional[Path]) -> None:
    plotted = None
    if plot_path is not None:
        try:
            plot(run, plot_path)
            plotted = plot_path
        except Exception as e:  # no matplotlib: the tables are the result
            print(f"plot skipped: {type(e).__name__}: {e}")
    key, body = section(run, plotted)
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:begin {re.escape(key)} -->.*?<!-- bench:end {re.escape(key)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: body, text)
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def plot(run: dict, path: Path) -> None:
    """Grouped bars: speedup per model per runtime over PyTorch eager and over onnxruntime, log scale."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [r for r in run["models"] if r.get("runtimes")]
    panels = [("eager", [r for r in ms if _ms(r, "eager")]), ("ort", [r for r in ms if _ms(r, "ort")])]
    panels = [(b, rs) for b, rs in panels if rs]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 1.3 * max(len(rs) for _, rs in panels) + 3),
                                                       5.0 * len(panels)), squeeze=False)
    colors = plt.get_cmap("tab20", len(RUNTIMES))  # one colour per runtime in both panels
    for ax, (base, rs) in zip(axes[:, 0], panels):
        cols = [c for c in RUNTIMES if c != base]
        width = 0.8 / len(cols)
        for i, c in enumerate(cols):
            vals = [_ratio(_ms(r, base), _ms(r, c, True)) or 0.0 for r in rs]
            ax.bar([x + (i - len(cols) / 2 + 0.5) * width for x in range(len(rs))], vals, width, label=c,
                   color=colors(RUNTIMES.index(c)), hatch="//" if c in KERNORCH else None)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([_label(r) for r in rs], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"speedup over {base}")
        ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    m = run["machine"]
    fig.suptitle(f"{m['cpu']}, {run['threads']} threads, {run['date']}" + (" (smoke run)" if run["label"] == "smoke"
                                                                           else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
