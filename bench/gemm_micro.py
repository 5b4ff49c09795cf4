"""Micro-benchmark of the generated GEMM (kernorch/codegen/gemm.py) against the library calls it
competes with: oneDNN with the weight prepacked (the `torch_onednn` provider's call) and
`torch.addmm`, each hot (the same call repeated) and cold (64 MB of other memory touched
before every call, as inside a model whose weights do not stay in cache).

    python -m bench.gemm_micro [--threads 2] [--repeat 100]

Prints the machine (CPU, ISA, compiler and flags: $KERNORCH_CFLAGS adds to them, e.g.
``KERNORCH_CFLAGS=-mtune=sapphirerapids``), a table, and last the line
``generated / oneDNN geomean: X.XXx`` (oneDNN's time over the generated GEMM's, hot and cold cells:
above 1 the generated GEMM is faster). Asserts nothing (timings belong here, not in tests).
Shapes: ViT-Tiny's four token-by-weight products, its attention scores per head, and ResNet-50 1x1
convolutions as (Cout, Cin, H*W), NCHW and channels-last.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench.peers import machine_header
from kernorch.targets.gemm_check import conv_case, conv_nhwc_case, geomean, matmul_case, median_us

MATMULS = [(197, 192, 768), (197, 768, 192), (197, 192, 576), (197, 192, 192), (197, 64, 197)]
CONVS = [(64, 256, 56 * 56), (256, 64, 56 * 56), (128, 512, 28 * 28), (1024, 256, 14 * 14), (512, 2048, 7 * 7)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    junk = torch.empty(64 * 1024 * 1024 // 4)
    cold = lambda: junk.add_(1.0)  # noqa: E731
    print(machine_header(args.threads))
    print(f"threads={args.threads}, median of {args.repeat} calls, us (cold: 64 MB touched before each call)")
    print(f"{'product (M x K @ K x N)':34} {'generated':>18} {'oneDNN prepacked':>18} {'addmm':>18}")
    cases = [(f"matmul {m}x{k} @ {k}x{n} + bias", matmul_case(m, k, n, args.threads, rng)) for m, k, n in MATMULS]
    cases += [(f"conv1x1 {co}x{ci} @ {ci}x{hw} + bias", conv_case(co, ci, hw, args.threads, rng))
              for co, ci, hw in CONVS]
    cases += [(f"NHWC 1x1 {co}x{ci} @ {ci}x{hw} + bias", conv_nhwc_case(co, ci, hw, args.threads, rng))
              for co, ci, hw in CONVS]
    ratios = []
    for label, fns in cases:
        cells, times = [], []
        for fn in fns:
            hot, cold_us = median_us(fn, args.repeat), median_us(fn, args.repeat, cold)
            times.append((hot, cold_us))
            cells.append(f"{hot:7.1f} / {cold_us:7.1f}")
        ratios += [times[1][0] / times[0][0], times[1][1] / times[0][1]]
        print(f"{label:34} " + " ".join(f"{c:>18}" for c in cells))
    print("cells: hot / cold")
    print(f"generated / oneDNN geomean: {geomean(ratios):.2f}x")


if __name__ == "__main__":
    main()
