"""Layout cleanups: a view of a view becomes one view (``IndexMap.compose``), identity views and
no-op slices disappear, transpose/reshape pairs cancel (compose, then identity), broadcasts to the
same shape disappear, broadcast chains collapse, and a view that reads one part of a concat reads
that part directly."""

from __future__ import annotations

import functools
import math

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import IndexMap
from kernorch.ir.prims import Op, Prim
from kernorch.rewrite.driver import Ctx, Replacement

_PROBE_LIMIT = 1 << 16  # elements; larger maps are identity only when syntactically so


@functools.lru_cache(maxsize=4096)
def is_noop(m: IndexMap) -> bool:
    """Whether the map reads every element in place: syntactically, or (for small maps whose
    expressions did not simplify to plain variables) by evaluating it on every index."""
    if m.is_identity():
        return True
    if m.out_shape != m.in_shape or m.mask:
        return False
    if all(e == ix.var(d) or (n == 1 and e == ix.const(0)) for d, (e, n) in enumerate(zip(m.index, m.out_shape))):
        return True  # a reshape that keeps the shape reads a size-1 dim at index 0, not at i_d
    if math.prod(m.out_shape) > _PROBE_LIMIT:
        return False
    src = np.arange(math.prod(m.in_shape), dtype=np.int64).reshape(m.in_shape)
    return bool(np.array_equal(m.gather(src), src))


def identity_view(p: Prim, ctx: Ctx) -> Replacement | None:
    if p.op is Op.VIEW and is_noop(p.attrs.map):
        return ctx.replace(None, p.inputs[0])
    return None


def view_chain(p: Prim, ctx: Ctx) -> Replacement | None:
    """VIEW(VIEW(x)) -> VIEW(x) with the composed map (both kept when compose declines)."""
    if p.op is not Op.VIEW:
        return None
    q = ctx.producer(p.inputs[0])
    if q is None or q.op is not Op.VIEW:
        return None
    if _is_shared_upsampling_tap(p, ctx):
        return None
    m = p.attrs.map.compose(q.attrs.map)
    if m is None:
        return None
    x = q.inputs[0]
    if is_noop(m):
        return ctx.replace(None, x)
    b = ctx.builder()
    return ctx.replace(b, b.view(x, m))


def _is_shared_upsampling_tap(p: Prim, ctx: Ctx) -> bool:
    """A view that grows one axis (an interpolation tap of a Resize) over a view other taps share:
    kept apart, so exporters still see ``take(x, taps) * w + ...`` over one tensor and can hand
    it to a runtime as one Resize (composing gains nothing in a fused kernel either)."""
    m = p.attrs.map
    if len(m.in_shape) != len(m.out_shape) or m.mask or ctx.uses(p.inputs[0]) < 2:
        return False
    grown = [a < b for a, b in zip(m.in_shape, m.out_shape)]
    return sum(grown) == 1 and all(a <= b for a, b in zip(m.in_shape, m.out_shape))


def broadcast_noop(p: Prim, ctx: Ctx) -> Replacement | None:
    if p.op is Op.BROADCAST and ctx.shape(p.inputs[0]) == ctx.shape(p.output):
        return ctx.replace(None, p.inputs[0])
    return None


def broadcast_chain(p: Prim, ctx: Ctx) -> Replacement | None:
    """BROADCAST(BROADCAST(x)) -> BROADCAST(x): both keep the rank, so size-1 dims of x expand."""
    if p.op is not Op.BROADCAST:
        return None
    q = ctx.producer(p.inputs[0])
    if q is None or q.op is not Op.BROADCAST:
        return None
    b = ctx.builder()
    return ctx.replace(b, b.broadcast_to(q.inputs[0], ctx.shape(p.output)))


def view_of_concat(p: Prim, ctx: Ctx) -> Replacement | None:
    """A view whose index along the concat axis stays inside one part reads that part."""
    if p.op is not Op.VIEW:
        return None
    q = ctx.producer(p.inputs[0])
    if q is None or q.op is not Op.CONCAT:
        return None
    m: IndexMap = p.attrs.map
    axis = q.attrs.axis
    lo, hi = ix.bounds(m.index[axis], m.out_shape)
    off = 0
    for part in q.inputs:
        n = ctx.shape(part)[axis]
        if off <= lo and hi < off + n:
            idx = list(m.index)
            idx[axis] = idx[axis] - off
            new = layout.make(m.out_shape, ctx.shape(part), idx, m.mask, m.pad)
            if is_noop(new):
                return ctx.replace(None, part)
            b = ctx.builder()
            return ctx.replace(b, b.view(part, new))
        off += n
    return None
