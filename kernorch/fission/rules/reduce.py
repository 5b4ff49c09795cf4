"""Reductions: the ONNX Reduce* family and ArgMax/ArgMin over the four reduce prims.

Mean is a sum times the scalar 1/n; LogSumExp subtracts the maximum first. Reductions over an
empty set of elements are constants (0 for sums, 1 for products, -inf/+inf for max/min), so no
kernel ever reduces over nothing.
"""

import math

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.elementwise import scalar_like
from kernorch.ir.prims import Op

def reduce_axes(ctx: NodeContext) -> tuple[int, ...]:
    """The normalized reduced axes; () with noop_with_empty_axes on empty axes (the elementwise
    part still applies: ReduceSumSquare becomes a square)."""
    rank = len(ctx.shape(0))
    if ctx.has_input(1):
        axes = ctx.require_const(1, "axes").reshape(-1).tolist()
    else:
        axes = ctx.attr("axes", None) or []
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return ()
        return tuple(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.unsupported(f"axis {a} out of range for rank {rank}")
        out.append(a % rank)
    return tuple(sorted(set(out)))


def _empty_value(op_type: str, dtype: str):
    """What a reduction over zero elements yields: the identity of the reduction (the ONNX
    reference's convention); ReduceMean, undefined by ONNX, gives 0 as onnxruntime does."""
    dt = np.dtype(dtype)
    big = np.inf if dt.kind == "f" else (np.iinfo(dt).max if dt.kind in "iu" else True)
    small = -np.inf if dt.kind == "f" else (np.iinfo(dt).min if dt.kind in "iu" else False)
    return {"ReduceProd": 1, "ReduceMax": small, "ReduceMin": big, "ReduceLogSum": -np.inf,
            "ReduceLogSumExp": -np.inf}.get(op_type, 0)


def _mean(ctx: NodeContext, s: int, n: int) -> int:
    if np.dtype(ctx.b.type(s).dtype).kind in "iu":  # integer mean truncates, like the reference
        return ctx.b.binary(Op.DIV, s, scalar_like(ctx, n, s))
    return ctx.b.binary(Op.MUL, s, scalar_like(ctx, 1.0 / n, s))


def _logsumexp(ctx: NodeContext, x: int, axes: tuple[int, ...], keepdims: bool) -> int:
    """m + log(sum(exp(x - m))) with m the maximum (0 where it is infinite, so that rows of -inf
    or +inf give -inf / +inf instead of NaN)."""
    b = ctx.b
    m = b.reduce(Op.RMAX, x, axes, keepdims=True)
    inf = b.binary(Op.EQ, b.unary(Op.ABS, m), scalar_like(ctx, np.inf, m))
    m = b.where(inf, scalar_like(ctx, 0.0, m), m)
    s = b.reduce(Op.SUM, b.unary(Op.EXP, b.binary(Op.SUB, x, m)), axes, keepdims=True)
    out = b.binary(Op.ADD, b.unary(Op.LOG, s), m)
    if not keepdims:
        out = b.reshape(out, [n for d, n in enumerate(b.shape(out)) if d not in axes])
    return out


@rule("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
      "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
def reduce(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    shape = ctx.shape(0)
    axes = reduce_axes(ctx)
    keepdims = bool(ctx.attr("keepdims", 1))
    if ctx.op_type == "ReduceLogSumExp" and ctx.dtype(0) not in ("float16", "float32", "float64"):
        raise ctx.unsupported(f"dtype {ctx.dtype(0)} is not supported")
    out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape) if keepdims or d not in axes)
    n = math.prod(shape[d] for d in axes)
    if n == 0:
        return [b.constant(np.full(out_shape, _empty_value(ctx.op_type, ctx.dtype(0)), dtype=ctx.dtype(0)))]
    op = ctx.op_type
    if op == "ReduceLogSumExp":
        return [_logsumexp(ctx, x, axes, keepdims)]
    if op == "ReduceL1":
        x = b.unary(Op.ABS, x)
    elif op in ("ReduceL2", "ReduceSumSquare"):
        x = b.binary(Op.MUL, x, x)
    prim = {"ReduceMax": Op.RMAX, "ReduceMin": Op.RMIN, "ReduceProd": Op.PROD}.get(op, Op.SUM)
    out = b.reduce(prim, x, axes, keepdims)
    if op == "ReduceMean":
        out = _mean(ctx, out, n)
    elif op == "ReduceL2":
        out = b.unary(Op.SQRT, out)
    elif op == "ReduceLogSum":
        out = b.unary(Op.LOG, out)
    return [out]


def _first_extreme(ctx: NodeContext, x: int, axis: int, op_type: str, last: bool, keepdims: bool) -> int:
    """Position (int64) of the first or last extreme along ``axis``: compare with the reduced
    extreme, keep the position where it matches (n or -1 elsewhere), reduce with min (max).
    A NaN counts as the extreme, as in NumPy."""
    b = ctx.b
    shape = b.shape(x)
    n = shape[axis]
    m = b.reduce(Op.RMAX if op_type == "ArgMax" else Op.RMIN, x, [axis], keepdims=True)
    hit = b.binary(Op.EQ, x, m)
    if np.dtype(b.type(x).dtype).kind == "f":
        hit = b.binary(Op.OR, hit, b.unary(Op.ISNAN, x))
    pos = b.where(hit, _iota(ctx, len(shape), axis, n), b.scalar(-1 if last else n, "int64"))
    return b.reduce(Op.RMAX if last else Op.RMIN, pos, [axis], keepdims)


def _iota(ctx: NodeContext, rank: int, axis: int, n: int) -> int:
    return ctx.b.constant(np.arange(n, dtype=np.int64).reshape([n if d == axis else 1 for d in range(rank)]))


def _axis(ctx: NodeContext, default: int) -> int:
    rank = len(ctx.shape(0))
    axis = ctx.attr("axis", default)
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} out of range for rank {rank}")
    return axis % rank


@rule("ArgMax", "ArgMin")
def arg_extreme(ctx: NodeContext):
    axis = _axis(ctx, 0)
    if ctx.shape(0)[axis] == 0:
        raise ctx.unsupported("arg-reduction needs a non-empty axis")
    keepdims = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    return [_first_extreme(ctx, ctx.x(0), axis, ctx.op_type, last, keepdims)]


@rule("Hardmax")
def hardmax(ctx: NodeContext):
    """1 at the first maximum along ``axis``, 0 elsewhere. Before opset 13 the input is coerced to
    2-D at axis, so the maximum is taken over the flattened axis..rank-1."""
    b, x = ctx.b, ctx.x(0)
    shape = ctx.shape(0)
    axis = _axis(ctx, 1 if ctx.opset < 13 else -1)
    if math.prod(shape) == 0:
        return [b.constant(np.zeros(shape, dtype=ctx.dtype(0)))]
    if ctx.opset < 13:
        x = b.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        axis = 1
    first = _first_extreme(ctx, x, axis, "ArgMax", False, True)
    rank = len(b.shape(x))
    y = b.cast(b.binary(Op.EQ, _iota(ctx, rank, axis, b.shape(x)[axis]), first), ctx.dtype(0))
    return [b.reshape(y, shape)]
