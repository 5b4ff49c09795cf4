"""Micro-benchmark of the C code generator: generated kernel vs PyTorch eager, and achieved
bandwidth vs a copy of the same bytes (generated copy kernel), all on a fixed thread count.

    python bench/codegen_micro.py [--threads 2] [--repeat 200]

Prints a table; asserts nothing (timings belong here, not in tests).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "codegen"))

from cg_util import gelu_erf, layer_norm, softmax  # noqa: E402
from kernorch import codegen  # noqa: E402
from kernorch.ir import layout  # noqa: E402
from kernorch.ir.graph import Builder  # noqa: E402
from kernorch.ir.prims import ConvAttrs, Op  # noqa: E402


STAT = statistics.median


def _median_time(fn, repeat: int) -> float:
    for _ in range(max(3, repeat // 10)):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return STAT(times)


def _softmax():
    b = Builder()
    x = b.input((512, 1024))
    return b, softmax(b, x, -1), lambda t: torch.softmax(t[0], -1)


def _layernorm():
    b = Builder()
    x = b.input((512, 768))
    y = layer_norm(b, x)

    def eager(t):
        return torch.nn.functional.layer_norm(t[0], (768,), t[1], t[2], 1e-5)

    return b, y, eager


def _transpose():
    b = Builder()
    x = b.input((1024, 1024))
    return b, b.permute(x, (1, 0)), lambda t: t[0].t().contiguous()


def _permute(shape, perm):
    def make():
        b = Builder()
        x = b.input(shape)
        return b, b.permute(x, perm), lambda t: t[0].permute(*perm).contiguous()
    return make


def _gelu():
    b = Builder()
    x = b.input((4 * 1024 * 1024,))
    return b, gelu_erf(b, x), lambda t: torch.nn.functional.gelu(t[0])


def _max_pool_nhwc():
    """3x3/2 max pool between channels-last tensors (codegen/reduce_order.py)."""
    b = Builder()
    x = b.permute(b.input((1, 112, 112, 64)), (0, 3, 1, 2))
    m = layout.window((1, 64, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1), (56, 56), -np.inf)
    y = b.permute(b.reduce(Op.RMAX, b.view(x, m), [4, 5], keepdims=False), (0, 2, 3, 1))

    def eager(t):
        return F.max_pool2d(t[0].permute(0, 3, 1, 2), 3, 2, 1).permute(0, 2, 3, 1).contiguous()

    return b, y, eager


def _conv(cin, cout, size, k, stride, out_nhwc):
    """A convolution from a channels-last image (a generated GEMM): narrow tiles for <= 16
    output channels, NCHW outputs of 224x224 maps through a staging tile."""
    def make():
        rng = np.random.default_rng(0)
        b = Builder()
        x = b.permute(b.input((1, size, size, cin)), (0, 3, 1, 2))
        w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
        p = k // 2
        y = b.conv(x, b.constant(w), None, ConvAttrs((stride, stride), (p,) * 4, (1, 1), 1))
        y = b.permute(y, (0, 2, 3, 1)) if out_nhwc else y
        wt = torch.from_numpy(w)

        def eager(t):
            r = F.conv2d(t[0].permute(0, 3, 1, 2), wt, None, stride, p)
            return r.permute(0, 2, 3, 1).contiguous() if out_nhwc else r.contiguous()

        return b, y, eager
    return make


def _copy(n: int):
    b = Builder()
    x = b.input((n,))
    return b, b.reshape(x, (n, 1))


CASES = {"softmax 512x1024": _softmax, "layernorm 512x768": _layernorm, "transpose 1024x1024": _transpose,
         "gelu 4M": _gelu,
         # layout conversions of SegFormer / CSPDarknet sizes (codegen/transpose.py)
         "tokens 16384x256 ->T": _permute((16384, 256), (1, 0)),
         "NHWC->NCHW 104x104x128": _permute((1, 104, 104, 128), (0, 3, 1, 2)),
         "NCHW->NHWC 32x416x416": _permute((1, 32, 416, 416), (0, 2, 3, 1)),
         # generated GEMMs and pools (eager: PyTorch on the same channels-last input)
         "maxpool 3x3/2 NHWC 64x112": _max_pool_nhwc,
         "conv 3->16 3x3/2 224 NHWC": _conv(3, 16, 224, 3, 2, True),
         "conv 64->16 1x1 56 NHWC": _conv(64, 16, 56, 1, 1, True),
         "conv 3->32 9x9 224 ->NCHW": _conv(3, 32, 224, 9, 1, False)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="min is more robust on a machine shared with other jobs")
    args = ap.parse_args()
    global STAT
    STAT = min if args.stat == "min" else statistics.median
    torch.set_num_threads(args.threads)
    rows = []
    items, eagers, moved = [], [], []
    for name, make in CASES.items():
        b, y, eager = make()
        b.g.outputs = [y]
        members = {p.output for p in b.g.prims}
        items.append((b.g, members, [y]))
        eagers.append(eager)
    kernels = codegen.build_many(items, num_threads=args.threads)
    copies = {}
    for (g, _, outs), k in zip(items, kernels):
        nbytes = sum(t.nbytes for t in k.in_types) + sum(t.nbytes for t in k.out_types)
        moved.append(nbytes)
        n = nbytes // 8  # float32 elements read (and as many written)
        copies.setdefault(n, None)
    copy_items = {n: _copy(n) for n in copies}
    copy_kernels = codegen.build_many([(b.g, {p.output for p in b.g.prims}, [y]) for b, y in copy_items.values()],
                                      num_threads=args.threads)
    copy_time = {}
    for n, ck in zip(copy_items, copy_kernels):
        x = torch.randn(n)
        out = [torch.empty(n, 1)]
        copy_time[n] = _median_time(lambda: ck.run([x], out=out), args.repeat)
    for (name, (g, _, outs)), k, eager, nbytes in zip(zip(CASES, items), kernels, eagers, moved):
        rng = np.random.default_rng(0)
        env = {v: rng.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs}
        env.update(g.constants)
        ins = [torch.from_numpy(np.ascontiguousarray(env[v])) for v in k.inputs]
        out = [torch.empty(t.shape) for t in k.out_types]
        t_gen = _median_time(lambda: k.run(ins, out=out), args.repeat)
        t_eager = _median_time(lambda: eager(ins), args.repeat)
        t_copy = copy_time[nbytes // 8]
        bw = nbytes / t_gen / 1e9
        rows.append((name, t_gen * 1e6, t_eager * 1e6, t_eager / t_gen, bw, nbytes / t_copy / 1e9, t_copy / t_gen))
    hdr = f"{'kernel':<24}{'gen us':>10}{'eager us':>10}{'speedup':>9}{'GB/s':>8}{'copy GB/s':>11}{'% copy':>8}"
    print(f"threads={args.threads}, {args.stat} of {args.repeat} runs; GB/s = (bytes read + written) / time; "
          "copy = generated copy kernel moving the same bytes")
    print(hdr)
    print("-" * len(hdr))
    for name, tg, te, sp, bw, cbw, frac in rows:
        print(f"{name:<24}{tg:>10.1f}{te:>10.1f}{sp:>8.2f}x{bw:>8.1f}{cbw:>11.1f}{100 * frac:>7.0f}%")


if __name__ == "__main__":
    main()
