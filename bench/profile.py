"""Where a compiled model's time goes, kernel by kernel, inside the real call.

    python -m bench.profile resnet50 [--precision bf16|int8] [--small] [--db PATH] [--threads 2] [--top 25]

Compiles the bench model (kn-own: measured plan, no provider regions) into ``--db`` (default: a
fresh one), then prints ``Executable.profile_in_call``'s median time per call, the slowest kernels
with their prims and provider notes, and the time per provider. Run it alone, on a quiet machine.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path

from bench import peers


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--precision", default="f32")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--db", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    args.exporter, args.depth = "torchscript", None
    from bench.run import load_model

    m = load_model(args.model, args)
    db = args.db or str(Path(tempfile.mkdtemp(prefix="kn-profile-")) / "tuning.sqlite")
    print(peers.machine_header(args.threads), flush=True)
    extra = {}
    if args.precision == "int8":  # bench.int8's calibration batches: the same QDQ model, its tuning database
        from bench.int8 import calibration_batches

        extra["calibration"] = calibration_batches(m["feeds"], 8)
    model, wall = peers.kernorch_compile(m["path"], "optimal", None, db, args.threads, regions=False,
                                         precision=args.precision, **extra)
    ex = model.executable
    per, call = ex.profile_in_call(m["feeds"], repeat=10)
    print(f"{args.model} {args.precision}: {call * 1e3:.2f} ms per call, {len(ex.infos)} kernels, compile {wall:.0f} s")
    rows, by_provider = [], defaultdict(float)
    for info, t, k in zip(ex.infos, per, ex.kernels):
        spec = getattr(k, "spec", None)  # a generated kernel: its template's own note (GEMM sizes, variant)
        detail = (getattr(k, "detail", "") or getattr(getattr(k, "built", None), "detail", "")
                  or (spec.notes[0] if spec is not None and spec.notes else ""))
        rows.append((t * 1e3, info.provider, ",".join(info.ops)[:70], str(detail)[:150]))
        by_provider[info.provider] += t * 1e3
    for row in sorted(rows, reverse=True)[:args.top]:
        print("%7.3f ms  %-14s %-70s %s" % row)
    print("per provider (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_provider.items())))


if __name__ == "__main__":
    main()
