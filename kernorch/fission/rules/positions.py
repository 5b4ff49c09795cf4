"""What exporters emit around embeddings, masks and positions: Range (position ids), CumSum
(position ids from an attention mask), Trilu (causal masks). Range has a data-dependent output
shape, so its inputs must be constants (Shape-derived ones fold on import); CumSum is a masked
window view plus a sum; Trilu is one masked view."""

from __future__ import annotations

import math

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.shape_ops import norm_axis
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import Cond
from kernorch.ir.prims import Op


@rule("Range")
def range_(ctx: NodeContext):
    start, limit, delta = (ctx.require_const(i, what).reshape(()) for i, what in
                           enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise ctx.unsupported("delta is 0")
    n = max(int(math.ceil((limit - start) / delta)), 0)
    dtype = ctx.dtype(0)
    out = (start + np.arange(n, dtype=np.float64 if dtype.startswith("float") else np.int64) * delta).astype(dtype)
    return [ctx.b.constant(out)]


@rule("CumSum")
def cumsum(ctx: NodeContext):
    """``out[.., i, ..] = sum_w x[.., w, ..]`` over ``w <= i`` (``w < i`` exclusive; ``w >= i``
    reversed): a view of shape ``x.shape + [n]`` masked to the summed positions, then a sum over
    the new axis. Quadratic in the axis length, which is fine for the sequence-length axes
    exporters use it on (position ids from an attention mask)."""
    s = ctx.shape(0)
    axis = norm_axis(ctx, int(ctx.require_const(1, "axis").reshape(())), len(s))
    n = s[axis]
    exclusive, reverse = int(ctx.attr("exclusive", 0)), int(ctx.attr("reverse", 0))
    r = len(s)
    w, i = ix.var(r), ix.var(axis)
    idx = [w if d == axis else ix.var(d) for d in range(r)]
    diff = w - i if reverse else i - w
    m = layout.make(list(s) + [n], s, idx, [Cond(diff, exclusive, n)], 0.0)
    return [ctx.b.reduce(Op.SUM, ctx.b.view(ctx.x(0), m), [r], keepdims=False)]


@rule("Trilu")
def trilu(ctx: NodeContext):
    """Keep ``j - i >= k`` (upper) or ``j - i <= k`` (lower) of the last two axes, zero elsewhere:
    one masked identity view, which fuses into its consumer like any pad."""
    s = ctx.shape(0)
    if len(s) < 2:
        raise ctx.unsupported(f"input of rank {len(s)}; Trilu needs rank >= 2")
    k = int(ctx.require_const(1, "k").reshape(())) if ctx.has_input(1) else 0
    upper = int(ctx.attr("upper", 1))
    r = len(s)
    i, j = ix.var(r - 2), ix.var(r - 1)
    big = s[-1] + s[-2] + abs(k) + 1
    cond = Cond(j - i - k, 0, big) if upper else Cond(i - j + k, 0, big)
    return [ctx.b.view(ctx.x(0), layout.make(s, s, [ix.var(d) for d in range(r)], [cond], 0.0))]
