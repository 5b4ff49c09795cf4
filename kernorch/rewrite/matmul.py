"""Korch's matmul rewrites: a sum over the contiguous last axes (or the second-to-last axis)
becomes a MATMUL with a vector of ones, and an elementwise DIV/MUL by a value that is constant
along the contracted axis moves past the MATMUL that follows it when that shrinks the work,
e.g. softmax's normalization in attention: ``(exp / rowsum) @ V == (exp @ V) / rowsum``."""

from __future__ import annotations

import math

import numpy as np

from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement
from kernorch.rewrite.patterns import is_float


def sum_to_matmul(p: Prim, ctx: Ctx) -> Replacement | None:
    """``sum(x, trailing axes)`` -> ``reshape(x, [..., K]) @ ones[K, 1]``;
    ``sum(x, axis=-2)`` -> ``ones[1, K] @ x``. A reduction then runs on the vendor GEMM."""
    if p.op is not Op.SUM or not is_float(ctx, p.output):
        return None
    (x,) = p.inputs
    shape = ctx.shape(x)
    r = len(shape)
    axes = tuple(sorted(a % r for a in p.attrs.axes)) if r else ()
    if not axes:
        return None
    dtype = ctx.type(x).dtype
    out_shape = ctx.shape(p.output)
    b = ctx.builder()
    if axes == tuple(range(r - len(axes), r)):
        k = math.prod(shape[r - len(axes):])
        lead = shape[:r - len(axes)]
        if k <= 1:
            return None
        flat = (lead or (1,)) + (k,)
        x2 = x if flat == shape else b.reshape(x, flat)  # same operand as x @ V: merge_linear_concat
        m = b.matmul(x2, b.constant(np.ones((k, 1), dtype=dtype)))
    elif r >= 2 and axes == (r - 2,) and shape[r - 2] > 1:
        m = b.matmul(b.constant(np.ones((1, shape[r - 2]), dtype=dtype)), x)
    else:
        return None
    return ctx.replace(b, m if ctx.shape(m) == out_shape else b.reshape(m, out_shape))


def _scale_along(ctx: Ctx, r: ValueId, axis: int) -> tuple[str, ValueId | np.ndarray] | None:
    """How ``r`` (an operand of shape S) is constant along ``axis``: ("scalar", r) for a rank-0
    value, ("value", u) when r = broadcast(u) with u of size 1 along axis, ("const", array)
    for a constant whose slice at index 0 of ``axis`` holds all its values."""
    shape = ctx.shape(r)
    if shape == ():
        return "scalar", r
    p = ctx.producer(r)
    if p is not None and p.op is Op.BROADCAST and ctx.shape(p.inputs[0])[axis] == 1:
        return "value", p.inputs[0]
    arr = ctx.const_value(r)
    if arr is not None and _constant_along(arr, axis):
        return "const", np.take(arr, [0], axis=axis)
    return None


def _constant_along(arr: np.ndarray, axis: int) -> bool:
    same = np.broadcast_to(np.take(arr, [0], axis=axis), arr.shape) == arr
    if arr.dtype.kind == "f":
        same |= np.isnan(arr)
    return bool(np.all(same))


def div_past_matmul(p: Prim, ctx: Ctx) -> Replacement | None:
    """``(a ⊙ r) @ B -> (a @ B) ⊙ r'`` for ⊙ in {/, *} and r constant along the contracted axis
    of the left operand (or ``A @ (b ⊙ r)`` with r constant along axis -2 of the right one).
    Applies when the scaled operand feeds only this matmul and the matmul's output is smaller,
    so the elementwise work shrinks."""
    if p.op is not Op.MATMUL or not is_float(ctx, p.output) or p.inputs[0] == p.inputs[1]:
        return None
    out_t = ctx.type(p.output)
    for side, axis in ((0, -1), (1, -2)):
        d_v = p.inputs[side]
        d = ctx.producer(d_v)
        if d is None or d.op not in (Op.DIV, Op.MUL) or ctx.uses(d_v) != 1:
            continue
        if out_t.size >= ctx.type(d_v).size:
            continue
        pairs = [(d.inputs[0], d.inputs[1])]
        if d.op is Op.MUL:
            pairs.append((d.inputs[1], d.inputs[0]))
        for num, r in pairs:
            if ctx.type(num) != ctx.type(d_v) or ctx.type(r).dtype != out_t.dtype:
                continue
            how = _scale_along(ctx, r, axis)
            if how is None:
                continue
            b = ctx.builder()
            operands = [num, p.inputs[1]] if side == 0 else [p.inputs[0], num]
            m = b.matmul(*operands)
            kind, u = how
            if kind == "scalar":
                r2 = u
            else:
                if kind == "const":
                    u = b.constant(u)
                r2 = b.broadcast_to(u, out_t.shape)
            return ctx.replace(b, b.prim(d.op, [m, r2]))
    return None

