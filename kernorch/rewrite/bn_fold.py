"""Folding per-output-channel affine arithmetic into linear prims: CONV/CONV_TRANSPOSE followed by
a multiply, divide, add or subtract with a constant that varies only along the channel axis (what
BatchNormalization after a convolution fissions into) gets new constant weights and bias; MATMUL
with a constant right operand absorbs a per-column multiply or divide."""

from __future__ import annotations

import numpy as np

from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.ir.tensors import holds_int8
from kernorch.rewrite.driver import Ctx, Replacement
from kernorch.rewrite.patterns import is_float, per_axis_vector

_AFFINE = (Op.MUL, Op.DIV, Op.ADD, Op.SUB)


def bn_fold(p: Prim, ctx: Ctx) -> Replacement | None:
    if p.op not in _AFFINE or not is_float(ctx, p.output):
        return None
    for side in (0, 1):
        lin_v, other = p.inputs[side], p.inputs[1 - side]
        lin = ctx.producer(lin_v)
        if lin is None or ctx.uses(lin_v) != 1 or ctx.type(lin_v) != ctx.type(p.output):
            continue
        if p.op is Op.DIV and side == 1:
            continue
        if lin.op in (Op.CONV, Op.CONV_TRANSPOSE):
            rep = _fold_conv(p, ctx, lin, other, side)
        elif lin.op is Op.MATMUL and p.op in (Op.MUL, Op.DIV):
            rep = _fold_matmul(p, ctx, lin, other)
        else:
            rep = None
        if rep is not None:
            return rep
    return None


def _scale_and_shift(op: Op, s: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) with ``p(lin, s) == lin * scale + shift`` per channel."""
    one, zero = np.ones_like(s), np.zeros_like(s)
    if op is Op.MUL:
        return s, zero
    if op is Op.DIV:
        if not np.all(np.isfinite(s)) or np.any(s == 0):
            return None
        return one / s, zero
    if op is Op.ADD:
        return one, s
    return (one, -s) if side == 0 else (-one, s)  # lin - s  |  s - lin


def _weight(ctx: Ctx, v: ValueId) -> np.ndarray | None:
    """The constant weight to fold into; None for integers in int8's range, a quantized model's
    (rewrite/quantized.py): scaled, they would no longer run as an int8 kernel."""
    w = ctx.const_value(v, ctx.options.fold_max_elements)
    if w is not None and holds_int8(w):
        return None
    return w


def _fold_conv(p: Prim, ctx: Ctx, conv: Prim, other: ValueId, side: int) -> Replacement | None:
    out_shape = ctx.shape(conv.output)
    s = per_axis_vector(ctx, other, out_shape, 1)
    if s is None:
        return None
    w = _weight(ctx, conv.inputs[1])
    bias = _weight(ctx, conv.inputs[2]) if len(conv.inputs) > 2 else None
    if w is None or (len(conv.inputs) > 2 and bias is None):
        return None
    ss = _scale_and_shift(p.op, s, side)
    if ss is None:
        return None
    scale, shift = ss
    spatial = (1,) * (w.ndim - 2)
    if conv.op is Op.CONV:
        w2 = w * scale.reshape((-1, 1) + spatial)
    else:  # CONV_TRANSPOSE: w is [Cin, Cout/groups, k...], output channel = group * Cout/groups + j
        g = conv.attrs.groups
        cin, cpg = w.shape[0], w.shape[1]
        w2 = (w.reshape((g, cin // g, cpg) + w.shape[2:]) * scale.reshape((g, 1, cpg) + spatial)).reshape(w.shape)
    changed_bias = bias is not None or np.any(shift != 0)
    b2 = (bias if bias is not None else np.zeros_like(shift)) * scale + shift if changed_bias else None
    dtype = w.dtype
    b = ctx.builder()
    wv = b.constant(w2.astype(dtype))
    bv = b.constant(b2.astype(ctx.type(conv.output).dtype)) if b2 is not None else None
    out = b.conv(conv.inputs[0], wv, bv, conv.attrs, transpose=conv.op is Op.CONV_TRANSPOSE)
    return ctx.replace(b, out)


def _fold_matmul(p: Prim, ctx: Ctx, mm: Prim, other: ValueId) -> Replacement | None:
    out_shape = ctx.shape(mm.output)
    s = per_axis_vector(ctx, other, out_shape, len(out_shape) - 1)
    if s is None:
        return None
    w = _weight(ctx, mm.inputs[1])
    ss = _scale_and_shift(p.op, s, 0)
    if w is None or ss is None:
        return None
    b = ctx.builder()
    wv = b.constant((w * ss[0]).astype(w.dtype))
    return ctx.replace(b, b.matmul(mm.inputs[0], wv))
