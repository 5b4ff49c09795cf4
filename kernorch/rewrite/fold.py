"""Constant folding and algebraic identities: prims computable from constants become constants
(weight-only arithmetic such as a transposed weight), and ``x*1``, ``x+0``, ``--x``, casts to the
same dtype and reductions over size-1 axes disappear."""

from __future__ import annotations

import numpy as np

from kernorch.ir.interp import eval_prim
from kernorch.ir.prims import REDUCE_OPS, Op, Prim
from kernorch.rewrite.driver import Ctx, Replacement
from kernorch.rewrite.patterns import uniform_value


def fold_constants(p: Prim, ctx: Ctx) -> Replacement | None:
    """A prim whose inputs are all constants becomes a constant, unless the constant would be
    larger than ``fold_max_elements`` or grow beyond its inputs (a broadcast of a scalar stays a
    broadcast: materializing it would only add memory traffic). Opaque prims are never folded
    (they may be random generators)."""
    if p.op is Op.OPAQUE or not p.inputs:
        return None
    args = [ctx.const(v) for v in p.inputs]
    if any(a is None for a in args):
        return None
    t = ctx.type(p.output)
    opts = ctx.options
    if t.size > opts.fold_max_elements or t.size > max(sum(a.size for a in args), opts.fold_growth_floor):
        return None
    arr = np.array(eval_prim(p, args, t.dtype, t.shape), order="C")  # a broadcast evaluates to a strided view
    b = ctx.builder()
    return ctx.replace(b, b.constant(arr))


_NEUTRAL = {Op.ADD: 0.0, Op.SUB: 0.0, Op.MUL: 1.0, Op.DIV: 1.0, Op.POW: 1.0}
_COMMUTES = {Op.ADD, Op.MUL}
_INVOLUTIONS = {Op.NEG, Op.NOT}


def algebra(p: Prim, ctx: Ctx) -> Replacement | None:
    """Identities that keep every value bit-for-bit (up to the sign of zero)."""
    out_t = ctx.type(p.output)
    if p.op in _NEUTRAL and out_t.dtype != "bool":
        a, c = p.inputs
        candidates = [(a, c)] + ([(c, a)] if p.op in _COMMUTES else [])
        for x, k in candidates:
            if ctx.type(x) == out_t and uniform_value(ctx, k) == _NEUTRAL[p.op]:
                return ctx.replace(None, x)
        return None
    if p.op in _INVOLUTIONS:
        q = ctx.producer(p.inputs[0])
        if q is not None and q.op is p.op and ctx.type(q.inputs[0]) == out_t:
            return ctx.replace(None, q.inputs[0])
        return None
    if p.op is Op.CAST and ctx.type(p.inputs[0]) == out_t:
        return ctx.replace(None, p.inputs[0])
    if p.op in REDUCE_OPS:
        (x,) = p.inputs
        shape = ctx.shape(x)
        if shape and all(shape[a % len(shape)] == 1 for a in p.attrs.axes):
            b = ctx.builder()
            return ctx.replace(b, b.reshape(x, out_t.shape))
    return None
