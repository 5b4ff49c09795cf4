"""Kernel providers on the linear kernels they compete for: time per provider, same thread count.

    python bench/providers_micro.py [--threads 2] [--repeats 15]

Each case is a candidate kernel of a primitive graph (linear prim + epilogue), built, verified
against the interpreter and timed by every provider through ``best_provider``. Prints a table;
asserts nothing (timings are machine- and load-dependent).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernorch.ir.graph import Builder  # noqa: E402
from kernorch.ir.prims import ConvAttrs, Op  # noqa: E402
from kernorch.providers import (MedianTimer, OpenVinoProvider, OrtProvider, TorchProvider,  # noqa: E402
                                best_provider)

RNG = np.random.default_rng(0)


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.05).astype(np.float32)


def conv(name, x_shape, cout, k, groups=1, relu=True):
    def make():
        b = Builder()
        x = b.input(x_shape)
        cin = x_shape[1]
        p = k // 2
        y = b.conv(x, b.constant(_w(cout, cin // groups, k, k)), b.constant(_w(cout)),
                   ConvAttrs((1, 1), (p, p, p, p), (1, 1), groups))
        out = b.unary(Op.RELU, y) if relu else y
        b.g.outputs = [out]
        return b.g, [q.output for q in b.g.prims], [out]
    return name, make


def matmul_bias(name, m, k, n):
    def make():
        b = Builder()
        a = b.input((m, k))
        y = b.binary(Op.ADD, b.matmul(a, b.constant(_w(k, n))), b.constant(_w(n)))
        b.g.outputs = [y]
        return b.g, [q.output for q in b.g.prims], [y]
    return name, make


CASES = [
    conv("conv3x3 64->64 1x64x56x56 +bias+relu", (1, 64, 56, 56), 64, 3),
    conv("conv1x1 256->64 1x256x56x56 +bias", (1, 256, 56, 56), 64, 1, relu=False),
    matmul_bias("matmul 128x768 @ 768x3072 +bias", 128, 768, 3072),
    conv("depthwise3x3 144ch 1x144x56x56 +bias+relu", (1, 144, 56, 56), 144, 3, groups=144),
]


class RecordingTimer(MedianTimer):
    """The median (what selection uses) plus the fastest sample, which on a loaded machine is the
    better estimate of the uncontended cost."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.best: dict[str, float] = {}

    def __call__(self, fn, provider=""):
        samples = []

        def timed():
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)

        med = super().__call__(timed, provider)
        self.best[provider] = min(samples[1:] or samples)  # all but the cold first run
        return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--min-sample-us", type=float, default=200.0, help="loop a kernel until a sample lasts this long")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    t = args.threads
    providers = [OrtProvider(t), OpenVinoProvider(t), TorchProvider("eager", t), TorchProvider("channels_last", t),
                 TorchProvider("jit", t)]
    cols = [p.name for p in providers]
    timer = RecordingTimer(warmup=5, repeats=args.repeats, min_sample_s=args.min_sample_us * 1e-6)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"threads={t}  torch {torch.__version__}  load average {load:.1f}  (us per run: median/min; * = chosen)")
    head = f"{'kernel':44s}" + "".join(f"{c:>14s}" for c in cols)
    print(head)
    print("-" * len(head))
    notes = []
    for name, make in CASES:
        g, members, outputs = make()
        best, _, records = best_provider(g, members, outputs, providers, timer=timer)
        row = f"{name:44s}"
        for r in records:
            if r.status == "ok":
                cell = f"{r.seconds * 1e6:.0f}/{timer.best[r.provider] * 1e6:.0f}" + ("*" if r.provider == best else "")
            else:
                cell = "n/a" if r.status == "unsupported" else r.status
                notes.append(f"{name} / {r.provider}: {r.reason}")
            row += f"{cell:>14s}"
        print(row, flush=True)
    for n in notes:
        print("  note:", n)


if __name__ == "__main__":
    main()
