"""Micro-benchmark of bf16 products on AMX tiles or AVX512-BF16 (kernorch/codegen/amx.py) against oneDNN's bf16
call through PyTorch (the weight prepacked, as the `torch_onednn` provider calls it) and the
generated float32 GEMM of the same product, each hot (the same call repeated).

    python -m bench.amx_micro [--threads 2] [--repeat 50]

Shapes: BERT-base's token-by-weight products at 128 tokens, ViT-Tiny's at 197, ResNet-50's 1x1
convolutions on channels-last pixels and its 3x3 convolutions (windows copied per row block),
each with a bias, and oneDNN's float32 call (what providers/bf16_choice.py weighs bf16 against). Prints the
machine header, a table (us), and last the line
``generated bf16 / oneDNN bf16 geomean: X.XXx`` (above 1 the generated tiles are faster).
Asserts nothing; run it alone on a quiet machine.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench.peers import machine_header
from kernorch import codegen
from kernorch.codegen import amx
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.ir.tensors import BFLOAT16, to_torch
from kernorch.targets.gemm_check import geomean, median_us

MATMULS = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (197, 192, 768), (197, 768, 192)]
# (cout, cin, side, kernel): ResNet-50's 1x1s at 56/28/14 px and its 3x3s
CONVS = [(256, 64, 56, 1), (64, 256, 56, 1), (512, 128, 28, 1), (1024, 256, 14, 1), (64, 64, 56, 3),
         (128, 128, 28, 3), (256, 256, 14, 3)]


def _generated(b: Builder, y: int, feeds: list[np.ndarray], threads: int):
    b.g.outputs = [y]
    kernel = codegen.build_kernel(b.g, {p.output for p in b.g.prims}, [y], num_threads=threads)
    values = {**dict(zip(b.g.inputs, feeds)), **b.g.constants}
    ins = [to_torch(np.ascontiguousarray(values[v])) for v in kernel.inputs]
    outs = kernel.run(ins)
    call = kernel.prepared(ins, outs)
    return (lambda: call() if (kernel, ins, outs) else None), kernel


def matmul(m: int, k: int, n: int, dtype: str, threads: int, rng):
    """The generated kernel of x (1, m, k) @ W + bias in ``dtype`` (bf16: the bias added in float32)."""
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    b = Builder()
    if dtype == "bfloat16":
        xb, wb = x.astype(BFLOAT16), w.astype(BFLOAT16)
        y = b.binary(Op.ADD, b.cast(b.matmul(b.input(x.shape, "bfloat16"), b.constant(wb)), "float32"), b.constant(bias))
        return _generated(b, y, [xb], threads)
    y = b.binary(Op.ADD, b.matmul(b.input(x.shape), b.constant(w)), b.constant(bias))
    return _generated(b, y, [x], threads)


def conv(cout: int, cin: int, side: int, kernel: int, dtype: str, threads: int, rng):
    """The generated kernel of a convolution between channels-last tensors (its input and output the
    NHWC halves of layout pairs), with its bias."""
    x = rng.standard_normal((1, side, side, cin)).astype(np.float32)
    w = rng.standard_normal((cout, cin, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    pad = kernel // 2
    b = Builder()
    attrs = ConvAttrs((1, 1), (pad,) * 4, (1, 1), 1)
    if dtype == "bfloat16":
        xv = b.permute(b.input(x.shape, "bfloat16"), (0, 3, 1, 2))
        y = b.cast(b.conv(xv, b.constant(w.astype(BFLOAT16)), b.constant(bias), attrs), "float32")
        return _generated(b, b.permute(y, (0, 2, 3, 1)), [x.astype(BFLOAT16)], threads)
    xv = b.permute(b.input(x.shape), (0, 3, 1, 2))
    y = b.conv(xv, b.constant(w), b.constant(bias), attrs)
    return _generated(b, b.permute(y, (0, 2, 3, 1)), [x], threads)


def onednn_matmul(m: int, k: int, n: int, dtype: torch.dtype = torch.bfloat16):
    x = torch.randn(m, k).to(dtype)
    packed = torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k).to(dtype), m)
    bias = torch.randn(n)
    return lambda: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def onednn_conv(cout: int, cin: int, side: int, kernel: int, dtype: torch.dtype = torch.bfloat16):
    x = torch.randn(1, cin, side, side).to(dtype).contiguous(memory_format=torch.channels_last)
    pad = [kernel // 2] * 2
    w = torch.randn(cout, cin, kernel, kernel).to(dtype)
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, pad, [1, 1], [1, 1], 1, list(x.shape))
    bias = torch.randn(cout)
    return lambda: torch.ops.mkldnn._convolution_pointwise(x, packed, bias, pad, [1, 1], [1, 1], 1, "none", [], "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    if not amx.available():
        raise SystemExit("this CPU has no bf16 products (AMX or AVX512-BF16): nothing to compare")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(machine_header(args.threads))
    print(f"threads={args.threads}, median of {args.repeat} hot calls, us")
    print(f"{'product':34} {'gen bf16':>9} {'oneDNN bf16':>12} {'gen f32':>8} {'oneDNN f32':>11} {'bf16 TFLOP/s':>13} "
          f"{'oneDNN/gen':>11}")
    ratios = []
    cases = [(f"matmul {m}x{k} @ {k}x{n}", 2 * m * k * n, (lambda d, s=(m, k, n): matmul(*s, d, args.threads, rng)),
              (lambda d, s=(m, k, n): onednn_matmul(*s, d))) for m, k, n in MATMULS]
    cases += [(f"conv {kk}x{kk} {ci}->{co} at {s}x{s}", 2 * co * ci * kk * kk * s * s,
               (lambda d, c=(co, ci, s, kk): conv(*c, d, args.threads, rng)), (lambda d, c=(co, ci, s, kk): onednn_conv(*c, d)))
              for co, ci, s, kk in CONVS]
    for name, flops, make, lib in cases:
        gen_bf16, kernel = make("bfloat16")
        assert "amx tiles" in kernel.spec.traits, kernel.spec.traits
        gen_f32, _ = make("float32")
        calls = (gen_bf16, lib(torch.bfloat16), gen_f32, lib(torch.float32))
        t_gen, t_lib, t_f32, t_lib32 = (median_us(f, args.repeat) for f in calls)
        ratios.append(t_lib / t_gen)
        print(f"{name:34} {t_gen:9.0f} {t_lib:12.0f} {t_f32:8.0f} {t_lib32:11.0f} {flops / t_gen / 1e6:13.2f} "
              f"{t_lib / t_gen:10.2f}x")
    print(f"generated bf16 / oneDNN bf16 geomean: {geomean(ratios):.2f}x")


if __name__ == "__main__":
    main()
