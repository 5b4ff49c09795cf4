"""Orchestration at scale on the real benchmark models (no tuning: roofline costs).

    python -m bench.orchestration_scale [--small] [--models a,b]

Per model: primitives (after the default rewrites), segments, candidates (single / multi-output),
enumeration and solve time of `optimal`, and kernels + modelled cost of every strategy.
Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

from kernorch.frontend.onnx_import import import_onnx
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.measure import MeasuredCost, ordered_outputs
from kernorch.orchestrate.strategies import STRATEGIES, orchestrate
from kernorch.orchestrate.tuning_db import TuningDB
from kernorch.rewrite.pipeline import apply_rewrites
from kernorch.targets.cpu import calibrate_cached

MODELS = ["segformer_b0", "efficientvit_b0", "candy", "vit_tiny", "gpt2_block"]


def plan_model(path):
    g, _ = apply_rewrites(import_onnx(path)[0])
    dag = dag_from_graph(g)
    mc = MeasuredCost(g, TuningDB(":memory:"))
    pos = {p.output: i for i, p in enumerate(g.prims)}

    def key(c):
        return g.kernel_key(c.nodes, ordered_outputs(pos, c))

    cost = calibrate_cached().bind(dag)
    plans = {}
    for s in STRATEGIES:
        t = time.perf_counter()
        plans[s] = (orchestrate(dag, s, cost, mc.can_generate, key), time.perf_counter() - t)
    return g, plans


def main(argv=None) -> None:
    from bench.export import export_onnx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporter", default="dynamo")
    args = ap.parse_args(argv)
    head = (f"{'model':16} {'prims':>6} {'segs':>5} {'cands':>7} {'single':>7} {'multi':>7} {'enum s':>7} "
            f"{'solve s':>8} | kernels (modelled ms): " + " / ".join(STRATEGIES))
    print(head)
    for name in args.models.split(","):
        path = export_onnx(name, args.exporter, size="small" if args.small else None, verbose=False)
        g, plans = plan_model(path)
        opt = plans["optimal"][0]
        st = opt.stats
        single = int(st.get("single_output", 0))
        cands = int(st.get("candidates", 0))
        per = " / ".join(f"{len(p.kernels)} ({p.cost * 1e3:.2f})" for p, _ in (plans[s] for s in STRATEGIES))
        print(f"{name:16} {len(g.prims):>6} {int(st.get('segments', 0)):>5} {cands:>7} {single:>7} "
              f"{cands - single:>7} {st.get('enumerate_s', 0):>7.1f} {st.get('solve_s', 0):>8.1f} | {per}",
              flush=True)


if __name__ == "__main__":
    main()
