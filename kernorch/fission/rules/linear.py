"""Linear operators: Conv, ConvTranspose, Gemm, MatMul. One linear prim each (vendor libraries
run them); transposes are permute views, Gemm's alpha/beta scalar multiplies, MatMul's 1-D
operands reshape views to rank 2 and back."""

from __future__ import annotations

from kernorch.fission.registry import NodeContext, rule
from kernorch.ir.prims import ConvAttrs, Op


def same_pads(auto_pad: str, total: int) -> tuple[int, int]:
    """Split a total padding: SAME_UPPER puts the odd one at the end, SAME_LOWER at the start."""
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


def conv_geometry(ctx: NodeContext, spatial: tuple[int, ...], kernel: tuple[int, ...]):
    """strides, dilations and pads (begins + ends) of a Conv or pooling node, auto_pad resolved."""
    k = len(spatial)
    strides = [int(s) for s in ctx.attr("strides", [1] * k)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * k)]
    auto_pad = ctx.attr_str("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for n, kk, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-n // s)
            total = max((out - 1) * s + (kk - 1) * d + 1 - n, 0)
            b, e = same_pads(auto_pad, total)
            begins.append(b)
            ends.append(e)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * k)
    elif auto_pad in ("NOTSET", ""):
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * k))]
    else:
        raise ctx.unsupported(f"unknown auto_pad {auto_pad!r}")
    return strides, dilations, pads


@rule("Conv")
def conv(ctx: NodeContext):
    x, w = ctx.x(0), ctx.x(1)
    xs, ws = ctx.shape(0), ctx.shape(1)
    if len(xs) not in (3, 4, 5):
        raise ctx.unsupported(f"only 1-D, 2-D and 3-D convolutions are supported, input is {xs}")
    strides, dilations, pads = conv_geometry(ctx, xs[2:], ws[2:])
    bias = ctx.x(2) if ctx.has_input(2) else None
    attrs = ConvAttrs(tuple(strides), tuple(pads), tuple(dilations), int(ctx.attr("group", 1)))
    return [ctx.b.conv(x, w, bias, attrs)]


@rule("ConvTranspose")
def conv_transpose(ctx: NodeContext):
    x, w = ctx.x(0), ctx.x(1)
    xs, ws = ctx.shape(0), ctx.shape(1)
    k = len(xs) - 2
    if k not in (1, 2, 3):
        raise ctx.unsupported(f"only 1-D, 2-D and 3-D transposed convolutions are supported, input is {xs}")
    strides = [int(s) for s in ctx.attr("strides", [1] * k)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * k)]
    outpad = [int(p) for p in ctx.attr("output_padding", [0] * k)]
    auto_pad = ctx.attr_str("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [n * s for n, s in zip(xs[2:], strides)]
    if out_shape is not None:
        out_shape = [int(o) for o in out_shape][-k:]
        begins, ends = [], []
        for d in range(k):
            full = strides[d] * (xs[2 + d] - 1) + outpad[d] + (ws[2 + d] - 1) * dilations[d] + 1
            total = full - out_shape[d]
            if total < 0:  # the requested output is longer: grow the trailing output padding
                outpad[d] -= total
                total = 0
            b, e = same_pads("SAME_UPPER" if auto_pad == "SAME_UPPER" else "SAME_LOWER", total)
            begins.append(b)
            ends.append(e)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * k)
    else:
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * k))]
    bias = ctx.x(2) if ctx.has_input(2) else None
    attrs = ConvAttrs(tuple(strides), tuple(pads), tuple(dilations), int(ctx.attr("group", 1)), tuple(outpad))
    return [ctx.b.conv(x, w, bias, attrs, transpose=True)]


@rule("Gemm")
def gemm(ctx: NodeContext):
    b = ctx.b
    a, bm = ctx.x(0), ctx.x(1)
    dtype = ctx.dtype(0)
    if ctx.attr("transA", 0):
        a = b.permute(a, (1, 0))
    if ctx.attr("transB", 0):
        bm = b.permute(bm, (1, 0))
    y = b.matmul(a, bm)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = b.binary(Op.MUL, y, b.scalar(alpha, dtype))
    if ctx.has_input(2):
        c = ctx.x(2)
        if beta != 1.0:
            c = b.binary(Op.MUL, c, b.scalar(beta, dtype))
        y = b.binary(Op.ADD, y, c)
    return [y]


@rule("MatMul")
def matmul(ctx: NodeContext):
    b = ctx.b
    a, bm = ctx.x(0), ctx.x(1)
    sa, sb = ctx.shape(0), ctx.shape(1)
    if not sa or not sb:
        raise ctx.unsupported("MatMul operands must have rank >= 1")
    if len(sa) == 1:
        a = b.reshape(a, (1, sa[0]))
    if len(sb) == 1:
        bm = b.reshape(bm, (sb[0], 1))
    y = b.matmul(a, bm)
    s = b.shape(y)
    if len(sa) == 1 and len(sb) == 1:
        return [b.reshape(y, ())]
    if len(sa) == 1:
        return [b.reshape(y, s[:-2] + s[-1:])]
    if len(sb) == 1:
        return [b.reshape(y, s[:-1])]
    return [y]

