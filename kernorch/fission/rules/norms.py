"""Normalizations: Softmax/LogSoftmax, Batch/Instance/Layer/Group/RMS normalization and LRN.

Every statistic is a reduce prim plus elementwise work: mean = sum times the scalar 1/n,
variance = mean((x - mean)^2) (two passes, no cancellation), softmax subtracts the row maximum.
Per-channel parameters are reshaped to (C, 1, ..., 1) and broadcast by the Builder.
"""

import math

import numpy as np
import onnx

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.elementwise import param, scalar_like
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.prims import Op


def mean(ctx: NodeContext, x: int, axes, n: int | None = None) -> int:
    """Mean over ``axes``, keeping the reduced dims."""
    b = ctx.b
    n = n if n is not None else math.prod(b.shape(x)[a] for a in axes)
    return b.binary(Op.MUL, b.reduce(Op.SUM, x, axes, keepdims=True), scalar_like(ctx, 1.0 / n, x))


def moments(ctx: NodeContext, x: int, axes) -> tuple[int, int, int]:
    """(mean, x - mean, biased variance), two-pass; mean and variance keep the reduced dims."""
    b = ctx.b
    m = mean(ctx, x, axes)
    d = b.binary(Op.SUB, x, m)
    return m, d, mean(ctx, b.binary(Op.MUL, d, d), axes)


def inv_std(ctx: NodeContext, var: int, eps: float) -> int:
    b = ctx.b
    return b.unary(Op.RECIP, b.unary(Op.SQRT, b.binary(Op.ADD, var, scalar_like(ctx, eps, var))))


def _channel_param(ctx: NodeContext, i: int, rank: int, dtype: str) -> int:
    """Parameter ``i`` (shape (C,) or (C, D1, ...)) shaped to broadcast against (N, C, D1, ...)."""
    s = ctx.shape(i)
    return param(ctx, i, tuple(s) + (1,) * (rank - 1 - len(s)), dtype)


def _stash_dtype(ctx: NodeContext) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(ctx.attr("stash_type", 1)).name


# -- softmax ----------------------------------------------------------------------------------

@rule("Softmax", "LogSoftmax")
def softmax(ctx: NodeContext):
    """exp(x - max) / sum(exp(x - max)); LogSoftmax = (x - max) - log(sum(exp(x - max))). Before
    opset 13 the input is coerced to 2-D at ``axis``: the reduction runs over axis..rank-1."""
    b, x = ctx.b, ctx.x(0)
    rank = len(ctx.shape(0))
    axis = ctx.attr("axis", 1 if ctx.opset < 13 else -1)
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} out of range for rank {rank}")
    axis %= rank
    axes = list(range(axis, rank)) if ctx.opset < 13 else [axis]
    if math.prod(ctx.shape(0)) == 0:
        return [b.constant(np.zeros(ctx.shape(0), dtype=ctx.dtype(0)))]
    d = b.binary(Op.SUB, x, b.reduce(Op.RMAX, x, axes, keepdims=True))
    e = b.unary(Op.EXP, d)
    s = b.reduce(Op.SUM, e, axes, keepdims=True)
    if ctx.op_type == "Softmax":
        return [b.binary(Op.DIV, e, s)]
    return [b.binary(Op.SUB, d, b.unary(Op.LOG, s))]


# -- batch / instance / layer / group / RMS normalization -------------------------------------

@rule("BatchNormalization")
def batch_norm(ctx: NodeContext):
    """Inference: y = x * a + c with a = scale / sqrt(var + eps) and c = bias - mean * a, computed
    here when the parameters are constants. Training (opset 14+): batch statistics, plus the
    running mean/variance outputs."""
    b, x = ctx.b, ctx.x(0)
    rank, dtype = len(ctx.shape(0)), ctx.dtype(0)
    eps = ctx.attr("epsilon", 1e-5)
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, eps)
    params = [ctx.const(i) for i in range(1, 5)]
    if all(p is not None for p in params):
        scale, bias, mu, var = (p.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + eps)
        c = bias - mu * a
        target = a.shape + (1,) * (rank - 1 - a.ndim)
        av, cv = (b.constant(v.astype(dtype).reshape(target)) for v in (a, c))
    else:
        scale, bias, mu, var = (_channel_param(ctx, i, rank, dtype) for i in range(1, 5))
        av = b.binary(Op.MUL, scale, inv_std(ctx, var, eps))
        cv = b.binary(Op.SUB, bias, b.binary(Op.MUL, mu, av))
    return [b.binary(Op.ADD, b.binary(Op.MUL, x, av), cv)]


def _batch_norm_training(ctx: NodeContext, eps: float) -> list[int]:
    b, x = ctx.b, ctx.x(0)
    rank, dtype = len(ctx.shape(0)), ctx.dtype(0)
    momentum = ctx.attr("momentum", 0.9)
    axes = [0] + list(range(2, rank))
    m, d, var = moments(ctx, x, axes)
    scale, bias = (_channel_param(ctx, i, rank, dtype) for i in (1, 2))
    y = b.binary(Op.ADD, b.binary(Op.MUL, b.binary(Op.MUL, d, inv_std(ctx, var, eps)), scale), bias)
    outs = [y]
    for stat, i in ((m, 3), (var, 4)):
        cur = b.reshape(stat, ctx.shape(i))
        run = b.binary(Op.MUL, b.cast(ctx.x(i), dtype), scalar_like(ctx, momentum, cur))
        outs.append(b.binary(Op.ADD, run, b.binary(Op.MUL, cur, scalar_like(ctx, 1.0 - momentum, cur))))
    return outs


@rule("InstanceNormalization")
def instance_norm(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    rank, dtype = len(ctx.shape(0)), ctx.dtype(0)
    _, d, var = moments(ctx, x, range(2, rank))
    y = b.binary(Op.MUL, d, inv_std(ctx, var, ctx.attr("epsilon", 1e-5)))
    scale, bias = (_channel_param(ctx, i, rank, dtype) for i in (1, 2))
    return [b.binary(Op.ADD, b.binary(Op.MUL, y, scale), bias)]


def _trailing_axes(ctx: NodeContext) -> list[int]:
    rank = len(ctx.shape(0))
    axis = ctx.attr("axis", -1)
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} out of range for rank {rank}")
    return list(range(axis % rank, rank))


@rule("LayerNormalization")
def layer_norm(ctx: NodeContext):
    """Statistics in ``stash_type`` precision over axis..rank-1; outputs Y, Mean, InvStdDev (the
    statistics keep the reduced dims as 1, in the stash precision)."""
    b = ctx.b
    axes = _trailing_axes(ctx)
    xu = b.cast(ctx.x(0), _stash_dtype(ctx))
    m, d, var = moments(ctx, xu, axes)
    inv = inv_std(ctx, var, ctx.attr("epsilon", 1e-5))
    y = b.cast(b.binary(Op.MUL, d, inv), ctx.dtype(0))
    y = b.binary(Op.MUL, y, ctx.x(1))
    if ctx.has_input(2):
        y = b.binary(Op.ADD, y, ctx.x(2))
    return [y, m, inv]


@rule("RMSNormalization")
def rms_norm(ctx: NodeContext):
    """x / sqrt(mean(x^2) + eps) * scale, the statistic in ``stash_type`` precision."""
    b = ctx.b
    xu = b.cast(ctx.x(0), _stash_dtype(ctx))
    ms = mean(ctx, b.binary(Op.MUL, xu, xu), _trailing_axes(ctx))
    y = b.cast(b.binary(Op.MUL, xu, inv_std(ctx, ms, ctx.attr("epsilon", 1e-5))), ctx.dtype(0))
    return [b.binary(Op.MUL, y, ctx.x(1))]


@rule("GroupNormalization")
def group_norm(ctx: NodeContext):
    """Normalize (N, G, C/G * D...) over its last axis, then scale and shift per channel. Opset 18
    gives scale/bias per group (repeated over the group's channels), opset 21 per channel."""
    b, x = ctx.b, ctx.x(0)
    shape, dtype = ctx.shape(0), ctx.dtype(0)
    rank = len(shape)
    g = ctx.attr("num_groups")
    c = shape[1]
    if g is None or g <= 0 or c % g:
        raise ctx.unsupported(f"num_groups={g} does not divide the {c} channels")
    stash = _stash_dtype(ctx) if ctx.opset >= 21 else dtype
    xg = b.cast(b.reshape(x, (shape[0], g, math.prod(shape[1:]) // g)), stash)
    _, d, var = moments(ctx, xg, [2])
    y = b.cast(b.binary(Op.MUL, d, inv_std(ctx, var, ctx.attr("epsilon", 1e-5))), dtype)
    y = b.reshape(y, shape)
    per_group = ctx.opset < 21
    params = []
    for i in (1, 2):
        want = g if per_group else c
        if math.prod(ctx.shape(i)) != want:
            raise ctx.unsupported(f"input {i} has shape {ctx.shape(i)}, expected ({want},) at opset {ctx.opset}")
        target = (c,) + (1,) * (rank - 2)
        const = ctx.const(i)
        if const is not None:
            arr = const.astype(dtype).reshape(want)
            params.append(b.constant((np.repeat(arr, c // g) if per_group else arr).reshape(target)))
            continue
        p = b.reshape(b.cast(ctx.x(i), dtype), (want,))
        if per_group:  # (G,) -> (G, C/G) -> (C,)
            p = b.reshape(b.broadcast_to(b.reshape(p, (g, 1)), (g, c // g)), (c,))
        params.append(b.reshape(p, target))
    return [b.binary(Op.ADD, b.binary(Op.MUL, y, params[0]), params[1])]


@rule("LpNormalization")
def lp_norm(ctx: NodeContext):
    """x / ||x||_p along ``axis`` (p = 1 or 2); a zero norm divides by 1, so the output is zero."""
    b, x = ctx.b, ctx.x(0)
    p = ctx.attr("p", 2)
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p}, only p=1 and p=2 are defined")
    rank = len(ctx.shape(0))
    axis = ctx.attr("axis", -1)
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} out of range for rank {rank}")
    t = b.unary(Op.ABS, x) if p == 1 else b.binary(Op.MUL, x, x)
    norm = b.reduce(Op.SUM, t, [axis % rank], keepdims=True)
    if p == 2:
        norm = b.unary(Op.SQRT, norm)
    zero = b.binary(Op.EQ, norm, scalar_like(ctx, 0.0, norm))
    return [b.binary(Op.DIV, x, b.where(zero, scalar_like(ctx, 1.0, norm), norm))]


@rule("MeanVarianceNormalization")
def mean_variance_norm(ctx: NodeContext):
    """(x - mean) / (sqrt(var) + 1e-9) over ``axes`` (the ONNX function's epsilon); the variance is
    two-pass, where the function body's E[x^2] - E[x]^2 can cancel to a negative number."""
    b, x = ctx.b, ctx.x(0)
    rank = len(ctx.shape(0))
    axes = ctx.attr("axes", [0, 2, 3])
    if any(not -rank <= a < rank for a in axes):
        raise ctx.unsupported(f"axes {axes} out of range for rank {rank}")
    _, d, var = moments(ctx, x, sorted({a % rank for a in axes}))
    std = b.binary(Op.ADD, b.unary(Op.SQRT, var), scalar_like(ctx, 1e-9, var))
    return [b.binary(Op.DIV, d, std)]


# -- local response normalization ---------------------------------------------------------------

@rule("LRN")
def lrn(ctx: NodeContext):
    """y = x / (bias + alpha / size * square_sum)^beta, where square_sum sums x^2 over the channel
    window [c - floor((size-1)/2), c + ceil((size-1)/2)]: a masked window view plus a sum."""
    b, x = ctx.b, ctx.x(0)
    shape = ctx.shape(0)
    rank = len(shape)
    size = ctx.attr("size")
    if not size or size <= 0:
        raise ctx.unsupported(f"size must be a positive integer, got {size}")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    sq = b.binary(Op.MUL, x, x)
    lo = (size - 1) // 2
    out_shape = tuple(shape) + (size,)
    chan = ix.var(1) + ix.var(rank) - lo
    idx = [ix.var(d) if d != 1 else chan for d in range(rank)]
    win = b.view(sq, layout.make(out_shape, shape, idx, [layout.Cond(chan, 0, shape[1])], 0.0))
    ss = b.reduce(Op.SUM, win, [rank], keepdims=False)
    base = b.binary(Op.ADD, b.binary(Op.MUL, ss, scalar_like(ctx, alpha / size, ss)), scalar_like(ctx, bias, ss))
    return [b.binary(Op.DIV, x, b.binary(Op.POW, base, scalar_like(ctx, beta, ss)))]
