"""Pooling: MaxPool and AveragePool are a window view (padding masked with the reduction's
identity: -inf or 0) followed by a reduce over the window axes; AveragePool then divides by a
constant count (a scalar when every window counts the same). Global pools are plain reduces."""

from __future__ import annotations

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.linear import conv_geometry
from kernorch.ir import layout
from kernorch.ir.prims import Op


def lowest(dtype: str) -> float:
    """The identity of max over ``dtype``."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return -np.inf
    if dt.kind == "b":
        return 0.0
    return float(np.iinfo(dt).min)


def pool_geometry(ctx: NodeContext):
    """Kernel, strides, dilations, begin pads and output sizes of a pooling node."""
    spatial = ctx.shape(0)[2:]
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    if len(kernel) != len(spatial):
        raise ctx.unsupported(f"kernel_shape {kernel} does not match input {ctx.shape(0)}")
    strides, dilations, pads = conv_geometry(ctx, spatial, kernel)
    k = len(spatial)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    out = []
    for d in range(k):
        eff = (kernel[d] - 1) * dilations[d] + 1
        span = spatial[d] + pads[d] + pads[k + d] - eff
        n = (-(-span // strides[d]) if ceil_mode else span // strides[d]) + 1
        if ceil_mode and (n - 1) * strides[d] >= spatial[d] + pads[d]:
            n -= 1  # the last window would start in the end padding
        out.append(n)
    return kernel, strides, dilations, pads, out


@rule("MaxPool")
def max_pool(ctx: NodeContext):
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.unsupported("the Indices output (argmax) is not supported")
    kernel, strides, dilations, pads, out = pool_geometry(ctx)
    m = layout.window(ctx.shape(0), kernel, strides, pads[:len(kernel)], dilations, out, lowest(ctx.dtype(0)))
    w = ctx.b.view(ctx.x(0), m)
    rank = len(ctx.shape(0))
    return [ctx.b.reduce(Op.RMAX, w, range(rank, rank + len(kernel)), keepdims=False)]


def window_counts(n: int, kernel: int, stride: int, dilation: int, begin: int, out: int, lo: int, hi: int):
    """Per output position, how many window taps land in ``[lo, hi)`` (input coordinates)."""
    pos = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - begin
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


@rule("AveragePool")
def average_pool(ctx: NodeContext):
    b = ctx.b
    kernel, strides, dilations, pads, out = pool_geometry(ctx)
    k = len(kernel)
    spatial = ctx.shape(0)[2:]
    m = layout.window(ctx.shape(0), kernel, strides, pads[:k], dilations, out, 0.0)
    rank = len(ctx.shape(0))
    total = b.reduce(Op.SUM, b.view(ctx.x(0), m), range(rank, rank + k), keepdims=False)
    include_pad = bool(ctx.attr("count_include_pad", 0))
    count = np.ones((), dtype=np.int64)
    for d in range(k):
        lo, hi = (-pads[d], spatial[d] + pads[k + d]) if include_pad else (0, spatial[d])
        c = window_counts(spatial[d], kernel[d], strides[d], dilations[d], pads[d], out[d], lo, hi)
        count = np.multiply.outer(count, c)
    dtype = ctx.dtype(0)
    if count.size and (count == count.flat[0]).all():
        return [b.binary(Op.DIV, total, b.scalar(float(count.flat[0]), dtype))]
    divisor = b.constant(np.maximum(count, 1).astype(dtype).reshape((1, 1) + tuple(out)))
    return [b.binary(Op.DIV, total, divisor)]


@rule("LpPool")
def lp_pool(ctx: NodeContext):
    """``(sum over the window of |x|^p)^(1/p)``; padding contributes zeros."""
    b = ctx.b
    kernel, strides, dilations, pads, out = pool_geometry(ctx)
    k, rank, dtype = len(kernel), len(ctx.shape(0)), ctx.dtype(0)
    p = float(ctx.attr("p", 2))
    w = b.view(ctx.x(0), layout.window(ctx.shape(0), kernel, strides, pads[:k], dilations, out, 0.0))
    total = b.reduce(Op.SUM, b.binary(Op.POW, b.unary(Op.ABS, w), b.scalar(p, dtype)), range(rank, rank + k),
                     keepdims=False)
    return [b.binary(Op.POW, total, b.scalar(1.0 / p, dtype))]


@rule("GlobalLpPool")
def global_lp_pool(ctx: NodeContext):
    b = ctx.b
    p, dtype = float(ctx.attr("p", 2)), ctx.dtype(0)
    powered = b.binary(Op.POW, b.unary(Op.ABS, ctx.x(0)), b.scalar(p, dtype))
    total = b.reduce(Op.SUM, powered, range(2, len(ctx.shape(0))), keepdims=True)
    return [b.binary(Op.POW, total, b.scalar(1.0 / p, dtype))]


@rule("GlobalAveragePool")
def global_average_pool(ctx: NodeContext):
    s = ctx.shape(0)
    total = ctx.b.reduce(Op.SUM, ctx.x(0), range(2, len(s)), keepdims=True)
    return [ctx.b.binary(Op.DIV, total, ctx.b.scalar(float(np.prod(s[2:])), ctx.dtype(0)))]


@rule("GlobalMaxPool")
def global_max_pool(ctx: NodeContext):
    return [ctx.b.reduce(Op.RMAX, ctx.x(0), range(2, len(ctx.shape(0))), keepdims=True)]
