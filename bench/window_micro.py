"""Micro-benchmark of a generated convolution GEMM's windows: row blocks inside the image read in
place through the taps' offsets (``kn_window_tile``, the default) against every block copied
first (``kn_window_rows``, CodegenOptions.windows_in_place off), both with Winograd off, against the
Winograd F(6,3) kernel where it is taken (codegen/winograd.py: 3x3, unit strides, channels-last)
and oneDNN's prepacked convolution on the same tensors. Calls of the variants alternate in one
process, so the machine's drift hits them alike.

    python -m bench.window_micro [--threads 2] [--repeat 30] [--rounds 3]

Prints a table; asserts nothing (timings belong here, not in tests). Shapes: stems on NCHW
images (ResNet-50's 7x7/2, MobileNetV3's 3x3/2, candy's 9x9), ResNet-50's 3x3s and strided 1x1
on channels-last images, and its 3x3s at 28x28.
"""

from __future__ import annotations


import numpy as np
import torch

from bench import micro
from kernorch.codegen import winograd
from kernorch.codegen.facts import kernel_prims
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs
from kernorch.options import CodegenOptions
from kernorch.targets.gemm_check import alternated_us, generated_call

# name: (Cin, Cout, side, kernel, stride, channels-last image)
SHAPES = {"resnet50 stem 7x7/2": (3, 64, 224, 7, 2, False), "mobilenetv3 stem 3x3/2": (3, 16, 224, 3, 2, False),
          "candy 9x9 3->32": (3, 32, 224, 9, 1, False), "resnet50 3x3 64 @56": (64, 64, 56, 3, 1, True),
          "resnet50 3x3 128 @28": (128, 128, 28, 3, 1, True), "resnet50 3x3 256 @14": (256, 256, 14, 3, 1, True),
          "resnet50 1x1/2 512->1024": (512, 1024, 28, 1, 2, True)}


def _case(cin: int, cout: int, side: int, k: int, stride: int, nhwc: bool, threads: int, rng):
    """(generated call with windows read in place, the same with windows copied, the Winograd
    kernel or None where it is not taken, oneDNN's call)."""
    pad = k // 2
    shape = (1, side, side, cin) if nhwc else (1, cin, side, side)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    attrs = ConvAttrs((stride, stride), (pad,) * 4, (1, 1), 1)
    b = Builder()
    image = b.permute(b.input(shape), (0, 3, 1, 2)) if nhwc else b.input(shape)
    y = b.conv(image, b.constant(w), b.constant(bias), attrs)
    y = b.permute(y, (0, 2, 3, 1)) if nhwc else y
    calls = []
    for in_place, wino in ((True, False), (False, False), (True, True)):
        calls.append(generated_call(b, y, threads, [x], None, CodegenOptions(winograd=wino, windows_in_place=in_place)))
    b.g.outputs = [y]
    taken = winograd.why_not(b.g, kernel_prims(b.g, {p.output for p in b.g.prims}), [y]) is None
    calls[2] = calls[2] if taken else None
    xt = torch.from_numpy(x).permute(0, 3, 1, 2) if nhwc else torch.from_numpy(x)
    wt, bt = torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [pad] * 2, [stride] * 2, [1, 1], 1, list(xt.shape))
    calls.append(lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [pad] * 2, [stride] * 2, [1, 1], 1,
                                                                 "none", [], ""))
    return calls


def main(argv=None) -> None:
    args = micro.parse(__doc__, argv)
    rng = np.random.default_rng(0)
    print(f"{'convolution':26} {'in place':>10} {'copied':>10} {'copied/in place':>16} {'Winograd':>10} "
          f"{'in place/Winograd':>18} {'oneDNN':>10}")
    for name, shape in SHAPES.items():
        calls = _case(*shape, args.threads, rng)
        med = alternated_us(calls, args.rounds, args.repeat)
        wino = (f"{med[2]:10.1f} {med[0] / med[2]:18.2f}" if med[2] else f"{'-':>10} {'-':>18}")
        print(f"{name:26} {med[0]:10.1f} {med[1]:10.1f} {med[1] / med[0]:16.2f} {wino} {med[3]:10.1f}", flush=True)


if __name__ == "__main__":
    main()
