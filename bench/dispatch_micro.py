"""Per-kernel dispatch and per-call overhead of the executor, Python loop vs native runs.

A chain of N tanh prims on a 16-element tensor compiled with strategy ``unfused`` is a plan of N
tiny generated C kernels: its latency is almost all dispatch. Per-kernel dispatch is the slope
between N=1 and N=LONG; per-call overhead is the N=1 latency (checking inputs, making the output,
one kernel). Then the bundled example (README's first command) against onnxruntime on the same
model file, timed interleaved.

    python -m bench.dispatch_micro [--long 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.onnx"


class TanhChain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            x = torch.tanh(x)
        return x


def median_and_min(fn, seconds: float = 1.0) -> tuple[float, float]:
    for _ in range(20):
        fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", type=int, default=200, help="kernels in the long chain")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import kernorch
    import onnxruntime as ort

    tmp = Path(tempfile.mkdtemp(prefix="kn-dispatch-"))
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    lat = {}
    for n in (1, args.long):
        model = kernorch.compile(TanhChain(n), (torch.from_numpy(x),), strategy="unfused", cost="model",
                                 providers=(), regions=False, threads=args.threads, progress=False,
                                 db=tmp / "db.sqlite")
        assert sum(k.provider == "c" for k in model.kernels) == n
        for native in (False, True):
            model.executable.native = native
            lat[n, native] = median_and_min(lambda: model(x))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.threads} threads; median (min) microseconds")
    print(f"{'executor':<12} {'1 kernel':>16} {f'{args.long} kernels':>18} {'per kernel':>16} {'per call':>14}")
    for native in (False, True):
        (m1, n1), (ml, nl) = lat[1, native], lat[args.long, native]
        per_med, per_min = (ml - m1) / (args.long - 1), (nl - n1) / (args.long - 1)
        print(f"{'native runs' if native else 'Python loop':<12} {m1 * 1e6:>8.1f} ({n1 * 1e6:5.1f}) "
              f"{ml * 1e6:>10.1f} ({nl * 1e6:6.1f}) {per_med * 1e6:>8.2f} ({per_min * 1e6:5.2f}) "
              f"{m1 * 1e6:>7.1f} ({n1 * 1e6:4.1f})")

    model = kernorch.compile(EXAMPLE, threads=args.threads, progress=False, db=tmp / "db.sqlite")
    img = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(str(EXAMPLE), opts, providers=["CPUExecutionProvider"])
    kn, ref = interleaved([lambda: model(img), lambda: sess.run(None, {"input": img})])
    race = model.report.end_to_end
    e2e = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in race.items())
    kept = f", kept: {min(race, key=race.get)}" if race else ""
    print(f"\nbundled example ({len(model.kernels)} kernels: "
          f"{', '.join(sorted({k.provider for k in model.kernels}))}; compile's end-to-end race: {e2e}{kept})")
    print(f"kernorch {kn[0] * 1e6:.1f} us, onnxruntime {ref[0] * 1e6:.1f} us (medians, interleaved; min "
          f"{kn[1] * 1e6:.1f} / {ref[1] * 1e6:.1f} us), kernorch / onnxruntime speed {ref[0] / kn[0]:.2f}x "
          f"(min {ref[1] / kn[1]:.2f}x)")
    own = kernorch.compile(EXAMPLE, cost="model", regions=False, threads=args.threads, progress=False,
                           db=tmp / "db.sqlite")
    ex = own.executable

    def own_call(native: bool):
        def call():
            ex.native = native
            return own(img)
        return call

    loop, nat = interleaved([own_call(False), own_call(True)])
    kinds = ", ".join(f"{n} {p}" for p, n in sorted(Counter(k.provider for k in own.kernels).items()))
    print(f"bundled example, kernorch's own kernels (regions off, modelled costs: {kinds}): Python loop "
          f"{loop[0] * 1e6:.1f} us, native runs {nat[0] * 1e6:.1f} us (medians; min {loop[1] * 1e6:.1f} / "
          f"{nat[1] * 1e6:.1f} us)")


def interleaved(fns, seconds: float = 2.0) -> list[tuple[float, float]]:
    """(median, min) seconds of each function, called in turn (machine load hits all alike)."""
    for _ in range(20):
        for f in fns:
            f()
    times: list[list[float]] = [[] for _ in fns]
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for f, ts in zip(fns, times):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return [(statistics.median(ts), min(ts)) for ts in times]


if __name__ == "__main__":
    main()
