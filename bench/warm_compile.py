"""Cold and warm compile times: the same bench model compiled ``--times`` times into one tuning
database (kn-own: measured plan, no provider regions), each compile's wall time, phase seconds,
kernel timings and whether it built the plan an earlier compile kept (runtime/plan_cache.py).

    python -m bench.warm_compile resnet50 [--precision f32|int8|bf16] [--db PATH] [--times 2] [--threads 2]

Without ``--db`` the first compile starts from an empty database (cold). Run it alone, on a quiet
machine: the compiles time kernels.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import peers


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--precision", default="f32")
    ap.add_argument("--db", default=None)
    ap.add_argument("--times", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    args.exporter, args.depth, args.small = "torchscript", None, False
    from bench.run import load_model

    m = load_model(args.model, args)
    db = args.db or str(Path(tempfile.mkdtemp(prefix="kn-warm-")) / "tuning.sqlite")
    extra = {}
    if args.precision == "int8":  # bench.int8's calibration batches: the same QDQ model
        from bench.int8 import calibration_batches

        extra["calibration"] = calibration_batches(m["feeds"], 8)
    print(peers.machine_header(args.threads), flush=True)
    print(f"database  {db}")
    for k in range(args.times):
        model, wall = peers.kernorch_compile(m["path"], "optimal", None, db, args.threads, regions=False,
                                             precision=args.precision, **extra)
        r = model.report
        phases = ", ".join(f"{name} {s:.1f}" for name, s in r.seconds.items())
        print(f"compile {k + 1}: {wall:.1f} s ({phases}); {r.measured} kernel timings, {r.cached} from the "
              f"database, plan {'kept by an earlier compile' if r.plan_reused else 'planned'}, "
              f"{len(model.executable.infos)} kernels", flush=True)


if __name__ == "__main__":
    main()
