"""Micro-benchmark of the generated GEMM (kernorch/codegen/gemm.py) against the library calls it
competes with: oneDNN with the weight prepacked (the `torch_onednn` provider's call) and
`torch.addmm`, each hot (the same call repeated) and cold (64 MB of other memory touched
before every call, as inside a model whose weights do not stay in cache).

    python -m bench.gemm_micro [--threads 2] [--repeat 100]

Prints a table; asserts nothing (timings belong here, not in tests). Shapes: ViT-Tiny's four
token-by-weight products, its attention scores per head, and ResNet-50 1x1 convolutions as
(Cout, Cin, H*W), NCHW and channels-last.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from kernorch import codegen
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op

MATMULS = [(197, 192, 768), (197, 768, 192), (197, 192, 576), (197, 192, 192), (197, 64, 197)]
CONVS = [(64, 256, 56 * 56), (256, 64, 56 * 56), (128, 512, 28 * 28), (1024, 256, 14 * 14), (512, 2048, 7 * 7)]


def _median_us(fn, repeat: int, before=None) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def _generated(b: Builder, y: int, threads: int, feeds: list[np.ndarray]):
    b.g.outputs = [y]
    members = {p.output for p in b.g.prims}
    kernel = codegen.build_kernel(b.g, members, [y], num_threads=threads)
    assert kernel.provider == "c", kernel.provider
    env = dict(zip(b.g.inputs, feeds))
    env.update(b.g.constants)
    ins = [torch.from_numpy(np.ascontiguousarray(env[v])) for v in kernel.inputs]
    outs = kernel.run(ins)
    call = kernel.prepared(ins, outs)  # raw pointers: keep the kernel and its tensors alive with it
    return lambda: call() if (kernel, ins, outs) else None


def _matmul_case(m: int, k: int, n: int, threads: int, rng):
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    b = Builder()
    y = b.binary(Op.ADD, b.matmul(b.input((1, m, k)), b.constant(w)), b.constant(bias))
    gen = _generated(b, y, threads, [x])
    xt, wt, bt = torch.from_numpy(x[0]), torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_linear_weight(wt.t().contiguous(), m)
    out = torch.empty(m, n)
    return gen, (lambda: torch.ops.mkldnn._linear_pointwise(xt, packed, bt, "none", [], "")), \
        (lambda: torch.addmm(bt, xt, wt, out=out))


def _conv_case(cout: int, cin: int, hw: int, threads: int, rng):
    side = int(round(hw ** 0.5))
    x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    b = Builder()
    y = b.conv(b.input(x.shape), b.constant(w), b.constant(bias), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    gen = _generated(b, y, threads, [x])
    xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [0, 0], [1, 1], [1, 1], 1, list(x.shape))
    out = torch.empty(cout, hw)
    return gen, (lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [0, 0], [1, 1], [1, 1], 1,
                                                                  "none", [], "")), \
        (lambda: torch.addmm(bt.view(cout, 1), wt.view(cout, cin), xt.view(cin, hw), out=out))


def _conv_nhwc_case(cout: int, cin: int, hw: int, threads: int, rng):
    """The same convolution between channels-last tensors: the generated GEMM's rows are the
    pixels (its input and output are the NHWC halves of layout pairs)."""
    side = int(round(hw ** 0.5))
    x = rng.standard_normal((1, side, side, cin)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    b = Builder()
    xv = b.permute(b.input(x.shape), (0, 3, 1, 2))
    y = b.conv(xv, b.constant(w), b.constant(bias), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    gen = _generated(b, b.permute(y, (0, 2, 3, 1)), threads, [x])
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)  # NCHW view of channels-last memory
    wt, bt = torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [0, 0], [1, 1], [1, 1], 1, list(xt.shape))
    out = torch.empty(hw, cout)
    wtt = wt.view(cout, cin).t()
    return gen, (lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [0, 0], [1, 1], [1, 1], 1,
                                                                  "none", [], "")), \
        (lambda: torch.addmm(bt, torch.from_numpy(x).view(hw, cin), wtt, out=out))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    junk = torch.empty(64 * 1024 * 1024 // 4)
    cold = lambda: junk.add_(1.0)  # noqa: E731
    print(f"threads={args.threads}, median of {args.repeat} calls, us (cold: 64 MB touched before each call)")
    print(f"{'product (M x K @ K x N)':34} {'generated':>18} {'oneDNN prepacked':>18} {'addmm':>18}")
    cases = [(f"matmul {m}x{k} @ {k}x{n} + bias", _matmul_case(m, k, n, args.threads, rng)) for m, k, n in MATMULS]
    cases += [(f"conv1x1 {co}x{ci} @ {ci}x{hw} + bias", _conv_case(co, ci, hw, args.threads, rng))
              for co, ci, hw in CONVS]
    cases += [(f"NHWC 1x1 {co}x{ci} @ {ci}x{hw} + bias", _conv_nhwc_case(co, ci, hw, args.threads, rng))
              for co, ci, hw in CONVS]
    for label, fns in cases:
        cells = []
        for fn in fns:
            cells.append(f"{_median_us(fn, args.repeat):7.1f} / {_median_us(fn, args.repeat, cold):7.1f}")
        print(f"{label:34} " + " ".join(f"{c:>18}" for c in cells))
    print("cells: hot / cold")


if __name__ == "__main__":
    main()
