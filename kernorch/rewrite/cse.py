"""Common-subexpression elimination: a prim with the same op, attributes and inputs as another
(inputs equal as value ids, or as equal small constants; commutative ops in either order) is
replaced by that other prim's output."""

from __future__ import annotations


from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement

_COMMUTATIVE = frozenset({Op.ADD, Op.MUL, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.AND, Op.OR, Op.XOR})
_CONST_COMPARE_LIMIT = 4096  # elements; larger constants compare by id only


def _same(ctx: Ctx, a: ValueId, b: ValueId) -> bool:
    if a == b:
        return True
    x, y = ctx.const(a), ctx.const(b)
    if x is None or y is None or x.dtype != y.dtype or x.shape != y.shape or x.size > _CONST_COMPARE_LIMIT:
        return False
    return x.tobytes() == y.tobytes()


def _same_inputs(ctx: Ctx, p: Prim, q: Prim) -> bool:
    if len(p.inputs) != len(q.inputs):
        return False
    if all(_same(ctx, a, b) for a, b in zip(p.inputs, q.inputs)):
        return True
    if p.op in _COMMUTATIVE and len(p.inputs) == 2:
        return _same(ctx, p.inputs[0], q.inputs[1]) and _same(ctx, p.inputs[1], q.inputs[0])
    return False


def cse(p: Prim, ctx: Ctx) -> Replacement | None:
    """Opaque prims are never merged (an ONNX node may be random)."""
    if p.op is Op.OPAQUE or not p.inputs:
        return None
    pivot = min(p.inputs, key=lambda v: (ctx.const(v) is not None, ctx.uses(v)))
    t = ctx.type(p.output)
    for q in ctx.users(pivot):
        if q.output == p.output or q.op is not p.op or q.attrs != p.attrs or ctx.type(q.output) != t:
            continue
        if _same_inputs(ctx, p, q):
            return ctx.replace(None, q.output)
    return None



