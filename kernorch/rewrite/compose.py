"""Two linear maps in a row become one: ``(x @ W1 + b1) @ W2 + b2`` -> ``x @ (W1 W2) + (b1 W2 + b2)``.

Models write a projection right after another when no activation separates them: SegFormer's
decoder projects each stage's tokens to 256 features (a Linear) and mixes them again with a 1x1
convolution after a reshape to an image (the fuse layer; with ``conv_before_upsample`` every
piece gets its own). With constant weights the two products are one, and the composed weight is
smaller whenever K1 * N2 < K1 * N1 + N1 * N2 per row (SegFormer-B0's first stage: 32 -> 256 -> 256
becomes 32 -> 256, an 8.6x cut of its multiply-adds and no 16 MB intermediate).

The second map is a MATMUL with a 2-D constant weight, or a pointwise 2-D convolution (1x1,
groups 1, stride 1, no pads) that reads the first map's output through a view taking its
channels from the last axis (the tokens -> image reshape). The view is replayed on the composed
product with the feature count changed; a view that reads the feature axis in any other way, or
masks, is left alone. Every intermediate value must have no other reader.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement


def compose_linear(p: Prim, ctx: Ctx) -> Replacement | None:
    second = _second_map(p, ctx)
    if second is None:
        return None
    w2, b2, view, y = second
    first = _first_map(ctx, y)
    if first is None:
        return None
    x, w1, b1 = first
    (k1, n1), n2 = w1.shape, w2.shape[1]
    if k1 * n2 >= k1 * n1 + n1 * n2:
        return None
    dtype = ctx.type(p.output).dtype
    w = (w1.astype(np.float64) @ w2.astype(np.float64)).astype(dtype)
    bias = np.zeros(n2) if b1 is None else b1.astype(np.float64) @ w2.astype(np.float64)
    if b2 is not None:
        bias = bias + b2
    b = ctx.builder()
    z = b.matmul(x, b.constant(w))
    if b1 is not None or b2 is not None:
        z = b.binary(Op.ADD, z, b.constant(bias.astype(dtype)))
    if view is not None:
        m = view.attrs.map
        channel = len(m.out_shape) - 1 if p.op is Op.MATMUL else 1
        m = dataclasses.replace(m, out_shape=_with(m.out_shape, channel, n2), in_shape=_with(m.in_shape, -1, n2))
        z = b.view(z, m)
    return ctx.replace(b, z)


def _with(shape, axis: int, n: int) -> tuple[int, ...]:
    s = list(shape)
    s[axis] = n
    return tuple(s)


def _second_map(p: Prim, ctx: Ctx):
    """(W2 as (N1, N2), its bias or None, the view between the maps or None, the view's input)."""
    if p.op is Op.MATMUL:
        w2 = ctx.const(p.inputs[1])
        if w2 is None or w2.ndim != 2:
            return None
        y, channel, b2 = p.inputs[0], len(ctx.shape(p.inputs[0])) - 1, None
    elif p.op is Op.CONV:
        a = p.attrs
        w2 = ctx.const(p.inputs[1])
        if w2 is None or w2.ndim != 4 or w2.shape[2:] != (1, 1) or a.groups != 1:
            return None
        if set(a.strides) != {1} or any(a.pads):
            return None
        b2 = ctx.const(p.inputs[2]) if len(p.inputs) > 2 else None
        if len(p.inputs) > 2 and b2 is None:
            return None
        w2 = w2[:, :, 0, 0].T
        y, channel = p.inputs[0], 1
    else:
        return None
    if not np.issubdtype(w2.dtype, np.floating) or ctx.uses(y) != 1:
        return None
    q = ctx.producer(y)
    if q is None or q.op is not Op.VIEW:
        return (w2, b2, None, y) if p.op is Op.MATMUL else None
    if ctx.uses(q.inputs[0]) != 1 or not _feature_view(q.attrs.map, channel):
        return None
    return w2, b2, q, q.inputs[0]


def _feature_view(m, channel: int) -> bool:
    """The view reads its output axis ``channel`` from its input's last axis, and nothing else from it."""
    if m.mask or m.index[-1] != ix.var(channel) or m.out_shape[channel] != m.in_shape[-1]:
        return False
    return all(channel not in ix.free_vars(e) for e in m.index[:-1])


def _first_map(ctx: Ctx, y: ValueId):
    """(x, W1, b1 or None) when ``y`` is ``x @ W1`` or ``x @ W1 + b1`` (constants, b1 along the last axis)."""
    q = ctx.producer(y)
    b1 = None
    if q is not None and q.op is Op.ADD:
        for prod, bias in (q.inputs, q.inputs[::-1]):
            b1 = _row_bias(ctx, bias, ctx.shape(y)[-1])
            if b1 is not None:
                if ctx.uses(prod) != 1:
                    return None
                q = ctx.producer(prod)
                break
        else:
            return None
    if q is None or q.op is not Op.MATMUL:
        return None
    w1 = ctx.const(q.inputs[1])
    if w1 is None or w1.ndim != 2:
        return None
    return q.inputs[0], w1, b1


def _row_bias(ctx: Ctx, v: ValueId, n: int) -> np.ndarray | None:
    """The bias vector when ``v`` is a constant that varies along the last axis only (maybe broadcast)."""
    q = ctx.producer(v)
    c = q.inputs[0] if q is not None and q.op is Op.BROADCAST else v
    shape = ctx.shape(c)
    if not shape or shape[-1] != n or any(d != 1 for d in shape[:-1]):
        return None
    value = ctx.const_value(c, ctx.options.const_probe_elements)
    return None if value is None else value.reshape(n)
