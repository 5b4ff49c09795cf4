"""Tune one model on a two-node Ray cluster on this machine, with real measurements, and compare
with tuning it in one process.

Two Ray nodes of one CPU each are started on loopback (``ray.cluster_utils.Cluster``); each node's
worker is pinned to its own core and measures with 1 thread, so no two timings share a core. The
same model is then tuned locally (1 thread) into a fresh database. Prints per-node throughput,
the driver's database write rate and both plans' priced costs.

    python -m bench.ray_tuning                       # candy, small input
    python -m bench.ray_tuning --model vit_tiny --size small
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on loopback only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="candy")
    ap.add_argument("--size", default="small", choices=("small", "default"))
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    import kernorch
    from bench.export import export_onnx
    from kernorch.orchestrate.cluster import RayTuning
    from kernorch.orchestrate.tuning_db import Record, TuningDB

    path = export_onnx(args.model, size=args.size)
    tmp = Path(tempfile.mkdtemp(prefix="kn-ray-"))
    opts = dict(threads=1, providers=(), regions=False, progress=False)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    tuning = RayTuning(address=None, pin_cores=True)
    t0 = time.perf_counter()
    dist = kernorch.compile(path, db=tmp / "ray.sqlite", cluster=tuning, **opts)
    dist_s = time.perf_counter() - t0
    ray.shutdown()
    cluster.shutdown()

    t0 = time.perf_counter()
    local = kernorch.compile(path, db=tmp / "local.sqlite", **opts)
    local_s = time.perf_counter() - t0

    with TuningDB(tmp / "writes.sqlite") as db:
        t0 = time.perf_counter()
        for i in range(2000):
            db.put(f"k{i}", "cpu-t1", "c3", Record("codegen:c", 1e-3, "ok", samples=5, disturbed=0))
        writes = 2000 / (time.perf_counter() - t0)

    def priced(m):
        return sum(i.seconds or 0 for i in m.executable.infos) * 1e3

    r = dist.report
    print(f"model {args.model} ({args.size}), 1 thread per kernel; load average {os.getloadavg()[0]:.2f}")
    print(f"two-node Ray cluster: {r.measured} kernels measured in {dist_s:.1f} s "
          f"({r.measured / dist_s:.1f} kernels/s); per node: "
          + ", ".join(f"node {k}: {n}" for k, n in sorted(tuning.measured_by.items())))
    print(f"one process         : {local.report.measured} kernels measured in {local_s:.1f} s "
          f"({local.report.measured / local_s:.1f} kernels/s)")
    print(f"speed-up {local_s / dist_s:.2f}x; driver database writes: {writes:.0f} records/s (single writer)")
    print(f"plans: cluster {len(dist.kernels)} kernels priced {priced(dist):.3f} ms; "
          f"local {len(local.kernels)} kernels priced {priced(local):.3f} ms")
    print(dist.report.timing_note())


if __name__ == "__main__":
    main()
