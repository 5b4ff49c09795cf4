"""The floor of int8 convolutions through PyTorch's oneDNN ops: each of ResNet-50's 53 convolution
shapes called bare in a loop (``torch.ops.onednn.qconv_pointwise``: uint8 NHWC in, requantized
uint8 out, ReLU, prepacked int8 weights; the op providers/onednn_int8.py calls), their medians
summed, and the fixed cost of one call on a 16-channel 4x4 image.

    python -m bench.int8_floor [--threads 2] [--zero-point 0] [--repeat 60]

What an int8 plan of single oneDNN calls cannot beat, whatever it fuses around them. Run it alone.
"""

from __future__ import annotations

import argparse

import torch

from bench import peers
from bench.codegen_micro import _median_time


def resnet50_convolutions():
    """(in channels, out channels, image side, kernel, stride) of every ResNet-50 convolution."""
    yield 3, 64, 224, 7, 2
    cin = 64
    for width, blocks, stride, side in ((64, 3, 1, 56), (128, 4, 2, 56), (256, 6, 2, 28), (512, 3, 2, 14)):
        for b in range(blocks):
            s, h = (stride, side) if b == 0 else (1, side // stride)
            yield cin, width, h, 1, 1
            yield width, width, h, 3, s
            yield width, width * 4, h // s, 1, 1
            if b == 0:
                yield cin, width * 4, h, 1, s
            cin = width * 4


def qconv_seconds(cin: int, cout: int, side: int, k: int, stride: int, zp: int, repeat: int) -> float:
    """Median seconds of one bare int8 convolution call."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (1, cin, side, side), dtype=torch.uint8, generator=g)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randint(-128, 127, (cout, cin, k, k), dtype=torch.int8, generator=g)
    scales, zeros, bias = torch.full((cout,), 0.01), torch.zeros(cout, dtype=torch.int64), torch.zeros(cout)
    pad = [k // 2] * 2
    packed = torch.ops.onednn.qconv_prepack(w, scales, 1.0, zp, [stride] * 2, pad, [1, 1], 1, [1, cin, side, side])

    return _median_time(lambda: torch.ops.onednn.qconv_pointwise(
        x, 1.0, zp, packed, scales, zeros, bias, [stride] * 2, pad, [1, 1], 1, 0.05, 4, torch.uint8, "relu", [], ""),
        repeat)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--zero-point", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=60)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(peers.machine_header(args.threads), flush=True)
    shapes = list(resnet50_convolutions())
    total = sum(qconv_seconds(*s, args.zero_point, args.repeat) for s in shapes)
    tiny = qconv_seconds(16, 16, 4, 1, 1, args.zero_point, args.repeat * 5)
    print(f"ResNet-50: {len(shapes)} int8 convolutions, bare medians summed {total * 1e3:.2f} ms "
          f"(activation zero point {args.zero_point})")
    print(f"one call on a 16-channel 4x4 image: {tiny * 1e6:.0f} us")


if __name__ == "__main__":
    main()
