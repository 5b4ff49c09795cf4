"""Activation functions as short elementwise chains over the primitive vocabulary.

Every constant (alpha, beta, thresholds) is a rank-0 constant of the input's dtype, so kernels
read it as an immediate and float16/float64 inputs stay in their own precision.
"""

import math

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.elementwise import param, scalar_like
from kernorch.ir.prims import Op


def _clamp01(ctx: NodeContext, v: int) -> int:
    b = ctx.b
    return b.binary(Op.MIN, b.binary(Op.MAX, v, scalar_like(ctx, 0.0, v)), scalar_like(ctx, 1.0, v))


def _affine(ctx: NodeContext, x: int, alpha: float, beta: float) -> int:
    b = ctx.b
    return b.binary(Op.ADD, b.binary(Op.MUL, x, scalar_like(ctx, alpha, x)), scalar_like(ctx, beta, x))


@rule("HardSigmoid")
def hard_sigmoid(ctx: NodeContext):
    x = ctx.x(0)
    return [_clamp01(ctx, _affine(ctx, x, ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)))]


@rule("HardSwish")
def hard_swish(ctx: NodeContext):
    x = ctx.x(0)
    return [ctx.b.binary(Op.MUL, x, _clamp01(ctx, _affine(ctx, x, 1.0 / 6.0, 0.5)))]


@rule("Mish")
def mish(ctx: NodeContext):
    x = ctx.x(0)
    return [ctx.b.binary(Op.MUL, x, ctx.b.unary(Op.TANH, ctx.b.unary(Op.SOFTPLUS, x)))]


@rule("Gelu")
def gelu(ctx: NodeContext):
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate='tanh'
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    b, x = ctx.b, ctx.x(0)
    approx = ctx.attr_str("approximate", "none")
    if approx == "none":
        inner = b.unary(Op.ERF, b.binary(Op.MUL, x, scalar_like(ctx, 1.0 / math.sqrt(2.0), x)))
    elif approx == "tanh":
        cube = b.binary(Op.MUL, b.binary(Op.MUL, x, x), x)
        poly = b.binary(Op.ADD, x, b.binary(Op.MUL, cube, scalar_like(ctx, 0.044715, x)))
        inner = b.unary(Op.TANH, b.binary(Op.MUL, poly, scalar_like(ctx, math.sqrt(2.0 / math.pi), x)))
    else:
        raise ctx.unsupported(f"unknown approximate={approx!r}")
    half_x = b.binary(Op.MUL, x, scalar_like(ctx, 0.5, x))
    return [b.binary(Op.MUL, half_x, b.binary(Op.ADD, inner, scalar_like(ctx, 1.0, x)))]


def _negative_part(ctx: NodeContext, x: int, neg: int) -> int:
    """``neg`` where x < 0, else x (NaN stays NaN through the x branch)."""
    b = ctx.b
    return b.where(b.binary(Op.LT, x, scalar_like(ctx, 0.0, x)), neg, x)


@rule("LeakyRelu")
def leaky_relu(ctx: NodeContext):
    x = ctx.x(0)
    return [_negative_part(ctx, x, ctx.b.binary(Op.MUL, x, scalar_like(ctx, ctx.attr("alpha", 0.01), x)))]


@rule("PRelu")
def prelu(ctx: NodeContext):
    """x where x >= 0, else slope * x; the slope broadcasts to X (unidirectionally), and a
    single-element slope becomes a scalar immediate. Before opset 7 (PyTorch's old exports) a 1-D
    slope of length C applies per channel (axis 1)."""
    b, x, slope = ctx.b, ctx.x(0), ctx.x(1)
    xs, ss = ctx.shape(0), ctx.shape(1)
    if math.prod(ss) == 1:
        slope = _scalar_input(ctx, 1)
    elif ctx.opset < 7 and len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1]:
        slope = param(ctx, 1, (ss[0],) + (1,) * (len(xs) - 2), ctx.dtype(0))
    else:
        try:
            if np.broadcast_shapes(ss, xs) != tuple(xs):
                raise ValueError
        except ValueError:
            raise ctx.unsupported(f"slope shape {ss} does not broadcast to X shape {xs}") from None
        slope = b.cast(slope, ctx.dtype(0))
    return [_negative_part(ctx, x, b.binary(Op.MUL, x, slope))]


@rule("Elu")
def elu(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.0), x)
    em1 = b.binary(Op.SUB, b.unary(Op.EXP, x), scalar_like(ctx, 1.0, x))
    return [_negative_part(ctx, x, b.binary(Op.MUL, em1, alpha))]


@rule("Selu")
def selu(ctx: NodeContext):
    """gamma * (x if x > 0 else alpha * (exp(x) - 1))."""
    b, x = ctx.b, ctx.x(0)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    em1 = b.binary(Op.SUB, b.unary(Op.EXP, x), scalar_like(ctx, 1.0, x))
    neg = b.binary(Op.MUL, em1, scalar_like(ctx, alpha * gamma, x))
    pos = b.binary(Op.MUL, x, scalar_like(ctx, gamma, x))
    return [b.where(b.binary(Op.GT, x, scalar_like(ctx, 0.0, x)), pos, neg)]


@rule("Celu")
def celu(ctx: NodeContext):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    b, x = ctx.b, ctx.x(0)
    alpha = ctx.attr("alpha", 1.0)
    e = b.unary(Op.EXP, b.binary(Op.MUL, x, scalar_like(ctx, 1.0 / alpha, x)))
    neg = b.binary(Op.MUL, b.binary(Op.SUB, e, scalar_like(ctx, 1.0, x)), scalar_like(ctx, alpha, x))
    zero = scalar_like(ctx, 0.0, x)
    return [b.binary(Op.ADD, b.binary(Op.MAX, x, zero), b.binary(Op.MIN, neg, zero))]


@rule("ThresholdedRelu")
def thresholded_relu(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    keep = b.binary(Op.GT, x, scalar_like(ctx, ctx.attr("alpha", 1.0), x))
    return [b.where(keep, x, scalar_like(ctx, 0.0, x))]


@rule("Softsign")
def softsign(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    return [b.binary(Op.DIV, x, b.binary(Op.ADD, b.unary(Op.ABS, x), scalar_like(ctx, 1.0, x)))]


@rule("Clip")
def clip(ctx: NodeContext):
    """min(max(x, lo), hi): when lo > hi every element becomes hi, as ONNX specifies. Bounds are
    attributes before opset 11 and optional (scalar) inputs after; absent bounds are skipped."""
    b, x = ctx.b, ctx.x(0)
    if ctx.opset < 11:
        lo = ctx.attr("min")
        hi = ctx.attr("max")
        lo = None if lo is None else scalar_like(ctx, lo, x)
        hi = None if hi is None else scalar_like(ctx, hi, x)
    else:
        lo, hi = (_scalar_input(ctx, i) if ctx.has_input(i) else None for i in (1, 2))
    if lo is not None:
        x = b.binary(Op.MAX, x, lo)
    if hi is not None:
        x = b.binary(Op.MIN, x, hi)
    return [x]


def _scalar_input(ctx: NodeContext, i: int) -> int:
    """Input ``i`` (one element) as a rank-0 value of X's dtype; a constant stays a constant."""
    if math.prod(ctx.shape(i)) != 1:
        raise ctx.unsupported(f"input {i} must be a scalar, has shape {ctx.shape(i)}")
    c = ctx.const(i)
    if c is not None:
        return ctx.b.scalar(c.reshape(()), ctx.dtype(0))
    return ctx.b.cast(ctx.b.reshape(ctx.x(i), ()), ctx.dtype(0))


@rule("Shrink")
def shrink(ctx: NodeContext):
    """x + bias where x < -lambd, x - bias where x > lambd, else 0 (lambd and bias in X's dtype,
    as the ONNX function body casts them)."""
    b, x = ctx.b, ctx.x(0)
    lambd = ctx.attr("lambd", 0.5)
    bias = scalar_like(ctx, ctx.attr("bias", 0.0), x)
    pos = b.where(b.binary(Op.GT, x, scalar_like(ctx, lambd, x)), b.binary(Op.SUB, x, bias), scalar_like(ctx, 0, x))
    neg_l = ctx.b.scalar(-np.asarray(lambd).astype(ctx.dtype(0)), ctx.dtype(0))
    return [b.where(b.binary(Op.LT, x, neg_l), b.binary(Op.ADD, x, bias), pos)]


@rule("Swish")
def swish(ctx: NodeContext):
    """x * sigmoid(alpha * x)."""
    b, x = ctx.b, ctx.x(0)
    alpha = ctx.attr("alpha", 1.0)
    arg = x if alpha == 1.0 else b.binary(Op.MUL, x, scalar_like(ctx, alpha, x))
    return [b.binary(Op.MUL, x, b.unary(Op.SIGMOID, arg))]
