"""Micro-benchmark of depthwise convolutions between channels-last tensors (with bias and ReLU, as the
models' depthwise kernels fuse them): the register-blocked row tiles of kernorch/codegen/depthwise.py
(the default) against the loop-nest stencil they replace (CodegenOptions.depthwise_tiles off) and
oneDNN's prepacked convolution with a fused ReLU on the same tensors. Calls of the variants alternate
in one process, so the machine's drift hits them alike.

    python -m bench.depthwise_micro [--threads 2] [--repeat 30] [--rounds 3]

Prints a table; asserts nothing (timings belong here, not in tests). Shapes: MobileNetV3-Large's
and EfficientNet-B0's depthwise layers at 224x224.
"""

from __future__ import annotations


import numpy as np
import torch

from bench import micro
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions
from kernorch.targets.gemm_check import alternated_us, generated_call

# name: (channels, output side, kernel, stride)
SHAPES = {"16 @112 3x3": (16, 112, 3, 1), "32 @112 3x3": (32, 112, 3, 1), "96 @56 3x3/2": (96, 56, 3, 2),
          "72 @56 3x3": (72, 56, 3, 1), "144 @56 3x3": (144, 56, 3, 1), "144 @28 5x5/2": (144, 28, 5, 2),
          "120 @28 5x5": (120, 28, 5, 1), "240 @28 5x5": (240, 28, 5, 1), "240 @14 3x3/2": (240, 14, 3, 2),
          "480 @14 3x3": (480, 14, 3, 1), "672 @14 5x5": (672, 14, 5, 1), "672 @7 5x5/2": (672, 7, 5, 2),
          "960 @7 5x5": (960, 7, 5, 1), "1152 @7 5x5": (1152, 7, 5, 1)}


def _calls(c: int, side: int, k: int, stride: int, threads: int, rng) -> list:
    """(the row tiles' call, the loop nest's call, oneDNN's call) on one channels-last image."""
    shape = (1, side * stride, side * stride, c)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    pad = k // 2
    b = Builder()
    y = b.conv(b.permute(b.input(shape), (0, 3, 1, 2)), b.constant(w), b.constant(bias),
               ConvAttrs((stride, stride), (pad,) * 4, (1, 1), c))
    y = b.permute(b.unary(Op.RELU, y), (0, 2, 3, 1))
    calls = [generated_call(b, y, threads, [x], None, CodegenOptions(depthwise_tiles=on)) for on in (True, False)]
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    wt, bt = torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [pad] * 2, [stride] * 2, [1, 1], c, list(xt.shape))
    calls.append(lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [pad] * 2, [stride] * 2, [1, 1], c,
                                                                 "relu", [], ""))
    return calls


def main(argv=None) -> None:
    args = micro.parse(__doc__, argv)
    rng = np.random.default_rng(0)
    print(f"{'depthwise conv + relu':22} {'row tiles':>10} {'loop nest':>10} {'loops/tiles':>12} {'oneDNN':>10} "
          f"{'oneDNN/tiles':>13}")
    ratios = []
    for name, shape in SHAPES.items():
        calls = _calls(*shape, args.threads, rng)
        tiles, loops, onednn = alternated_us(calls, args.rounds, args.repeat)
        ratios.append((loops / tiles, onednn / tiles))
        print(f"{name:22} {tiles:10.1f} {loops:10.1f} {loops / tiles:12.2f} {onednn:10.1f} {onednn / tiles:13.2f}",
              flush=True)
    geo = [float(np.exp(np.mean(np.log(col)))) for col in zip(*ratios)]
    print(f"geomean: loop nest / row tiles {geo[0]:.2f}x, oneDNN / row tiles {geo[1]:.2f}x")


if __name__ == "__main__":
    main()
