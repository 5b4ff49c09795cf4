"""Chains as one node (``Knobs.chains``) on and off: per model, a measured compile (no provider
regions) into a fresh tuning database each, its wall time, candidates and kernel timings, then the
two plans timed interleaved in one process.

    python -m bench.chains [--models bert_base] [--depth 2] [--precision f32|int8] [--threads 2] [--repeats 9]

Run it alone, on a quiet machine (the header prints the load average).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench import peers


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_base")
    ap.add_argument("--depth", type=int, default=None, help="layers / blocks (default: the model's own)")
    ap.add_argument("--precision", default="f32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    from bench.export import export_onnx
    from bench.int8 import calibration_batches
    from bench.models import build_model
    from kernorch.orchestrate.knobs import Knobs

    print(peers.machine_header(args.threads), flush=True)
    folder = Path(tempfile.mkdtemp(prefix="kn-chains-"))
    print(f"{'model':12} {'chains':>6} {'compile s':>10} {'candidates':>10} {'timings':>8} {'kernels':>8} {'ms':>8} {'noise':>6}")
    for name in [m for m in args.models.split(",") if m]:
        path = export_onnx(name, "torchscript", None, depth=args.depth, verbose=False)
        module, inputs = build_model(name, depth=args.depth)
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        inits = {i.name for i in graph.initializer}
        feeds = {i.name: t.numpy() for i, t in zip([i for i in graph.input if i.name not in inits], inputs)}
        extra = {"calibration": calibration_batches(feeds, 8)} if args.precision == "int8" else {}
        runners, rows = {}, {}
        for chains in (True, False):
            db = folder / f"{name}-{chains}.sqlite"
            model, wall = peers.kernorch_compile(path, "optimal", None, db, args.threads, regions=False,
                                                 precision=args.precision, knobs=Knobs(chains=chains), **extra)
            runners[str(chains)] = peers.kernorch_runner(f"chains {chains}", model, feeds, wall)
            rows[str(chains)] = (wall, model.report.candidates, model.report.measured, len(model.kernels))
        samples = peers.interleaved(runners, args.repeats, 0.05, 0.5)
        for k, (wall, cands, timed, kernels) in rows.items():
            med = statistics.median(samples[k])
            noise = (max(samples[k]) - min(samples[k])) / med
            print(f"{name:12} {k:>6} {wall:10.1f} {cands:10d} {timed:8d} {kernels:8d} {med * 1e3:8.3f} {noise:6.0%}")


if __name__ == "__main__":
    main()
