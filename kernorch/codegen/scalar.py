"""Scalar code for one loop body: inlines elementwise, broadcast and layout prims into SSA Lets.

``Inliner.value(v, idx)`` returns the SSA name holding value ``v`` at index ``idx`` (index
expressions over loop variables); layout prims become index arithmetic, masks become selects,
CONCAT a piecewise select by range. Values that are not inlined (kernel inputs, materialized
values) are delegated to a ``leaf`` callback. Numeric promotion follows NumPy (the interpreter):
operands are cast to ``np.result_type`` of the operand dtypes, the result to the declared dtype.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

from kernorch.codegen import indexing, stencil, window
from kernorch.codegen.kernel import Let
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.index import Expr
from kernorch.ir.prims import BINARY, COMPARE, LOGICAL, Kind, Op, Prim

FLOATS = frozenset({"float32", "float64"})
INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
DTYPES = FLOATS | INTS | {"bool", "bfloat16"}
MATH = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.ERF, Op.SIGMOID, Op.SOFTPLUS, Op.SIN, Op.COS})
SAME_TYPE = frozenset({Op.NEG, Op.ABS, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN, Op.RELU})
BOOL_ARITH = {Op.ADD: Op.OR, Op.MUL: Op.AND, Op.MAX: Op.OR, Op.MIN: Op.AND}
BAD_ON_BOOL = frozenset({Op.SUB, Op.DIV, Op.POW, Op.MOD, Op.NEG, Op.ABS, Op.SIGN, Op.RECIP} | MATH)

# Relative cost of recomputing one element, used to decide what to materialize.
WEIGHT = {**{op: 8 for op in MATH | {Op.POW}}, Op.DIV: 2, Op.RECIP: 2, Op.MOD: 2}


def promote(*dtypes: str) -> str:
    return str(np.result_type(*[np.dtype(d) for d in dtypes]))


class Body:
    """SSA statements of one loop body, hash-consed (identical computations share a name)."""

    def __init__(self, names: Iterator[int]) -> None:
        self.lets: list[Let] = []
        self.dtype: dict[str, str] = {}
        self.imms: dict[str, object] = {}
        self._memo: dict[tuple, str] = {}
        self._names = names

    def copy(self) -> "Body":
        """An independent copy sharing the name counter (to try a fusion and roll it back)."""
        b = Body(self._names)
        b.lets, b.dtype, b._memo, b.imms = list(self.lets), dict(self.dtype), dict(self._memo), dict(self.imms)
        return b

    def let(self, op: str, dtype: str, args: Sequence[str] = (), attr: object = None) -> str:
        key = (op, dtype, tuple(args), repr(attr) if op == "imm" else attr)
        name = self._memo.get(key)
        if name is None:
            name = f"t{next(self._names)}"
            self.lets.append(Let(name, dtype, op, tuple(args), attr))
            self.dtype[name] = dtype
            self._memo[key] = name
        return name

    def imm(self, value, dtype: str) -> str:
        value = np.asarray(value).astype(dtype).item()
        name = self.let("imm", dtype, (), value)
        self.imms[name] = value
        return name

    def cast(self, x: str, dtype: str) -> str:
        if self.dtype[x] == dtype:
            return x
        if x in self.imms:
            return self.imm(self.imms[x], dtype)
        return self.let("cast", dtype, (x,))

    def var(self, name: str, dtype: str) -> str:
        """Register an externally declared scalar variable (a register accumulator)."""
        self.dtype[name] = dtype
        return name


def elementwise(body: Body, op: Op, args: Sequence[str], out: str, cast_to: str | None = None) -> str:
    """Emit one elementwise prim on SSA operands with NumPy's promotion."""
    dts = [body.dtype[a] for a in args]
    if op is Op.CAST:
        return body.cast(args[0], out)
    if op in MATH or op is Op.RECIP:
        ct = dts[0] if dts[0] in FLOATS else ("float32" if op is Op.RECIP else "float64")
        return body.cast(body.let(op.value, ct, (body.cast(args[0], ct),)), out)
    if op in SAME_TYPE:
        if dts[0] not in FLOATS and op in (Op.FLOOR, Op.CEIL, Op.ROUND):
            return body.cast(args[0], out)
        return body.cast(body.let(op.value, dts[0], (args[0],)), out)
    if op is Op.NOT:
        return body.let("not", "bool", (body.cast(args[0], "bool"),))
    if op is Op.ISNAN:
        if dts[0] not in FLOATS:
            return body.imm(False, "bool")
        return body.let("isnan", "bool", (args[0],))
    if op in LOGICAL:
        return body.let(op.value, "bool", tuple(body.cast(a, "bool") for a in args))
    if op in COMPARE:
        ct = promote(*dts)
        return body.let(op.value, "bool", tuple(body.cast(a, ct) for a in args))
    if op in BINARY:
        ct = promote(*dts)
        if ct == "bool":
            op = BOOL_ARITH[op]
        return body.cast(body.let(op.value, ct, tuple(body.cast(a, ct) for a in args)), out)
    if op is Op.WHERE:
        ct = promote(dts[1], dts[2])
        c = body.cast(args[0], "bool")
        return body.cast(body.let("select", ct, (c, body.cast(args[1], ct), body.cast(args[2], ct))), out)
    raise NotImplementedError(op)


Leaf = Callable[[int, tuple[Expr, ...], Body], str]


class Inliner:
    """Builds SSA for inlined values. ``inline``: member values computed in place (every other
    value goes to ``leaf``). ``sizes`` is the kernel-wide variable range list."""

    def __init__(self, g: Graph, producers: dict[int, Prim], inline: set[int], sizes: list[int],
                 body: Body, leaf: Leaf) -> None:
        self.g, self.producers, self.inline, self.sizes = g, producers, inline, sizes
        self.body, self.leaf = body, leaf
        self.visited: set[int] = set()
        self._memo: dict[tuple, str] = {}
        # Values computed inside convolution windows, and at how many indices each (the
        # scheduler stores a costly prologue read by overlapping windows instead of recomputing it).
        self.stencil_depth = 0
        self.repeats: dict[int, int] = {}

    def value(self, v: int, idx: Sequence[Expr]) -> str:
        idx = tuple(idx)
        key = (v, idx)
        name = self._memo.get(key)
        if name is None:
            if v in self.inline:
                self.visited.add(v)
                if self.stencil_depth:
                    self.repeats[v] = self.repeats.get(v, 0) + 1
                name = self.compute(self.producers[v], idx)
            else:
                name = self.leaf(v, idx, self.body)
            self._memo[key] = name
        return name

    def compute(self, p: Prim, idx: tuple[Expr, ...]) -> str:
        """The value of prim ``p``'s output at ``idx``."""
        b, out = self.body, self.g.types[p.output]
        if p.kind is Kind.ELEMENTWISE:
            args = [self.value(a, idx if self.g.types[a].shape else ()) for a in p.inputs]
            return elementwise(b, p.op, args, out.dtype)
        if p.op is Op.BROADCAST:
            src = self.g.types[p.inputs[0]].shape
            return self.value(p.inputs[0], [i if n != 1 else ix.const(0) for i, n in zip(idx, src)])
        if p.op is Op.VIEW:
            m = p.attrs.map
            new = [self._sub(e, idx) for e in m.index]
            x = self.value(p.inputs[0], new)
            ok = self.conds([(self._sub(c.expr, idx), c.lo, c.hi) for c in m.mask])
            if ok is None:
                return x
            if ok is False:
                return b.imm(m.pad, out.dtype)
            return b.let("select", out.dtype, (ok, x, b.imm(m.pad, out.dtype)))
        if p.op is Op.CONCAT:
            return self._concat(p, idx)
        if p.op is Op.GATHER:
            return self._gather(p, idx)
        if p.op is Op.CONV:
            return stencil.value(self, p, idx)
        if p.kind is Kind.REDUCE:  # only a window reduce is ever inlined (schedule.py)
            return window.value(self, p, idx)
        raise NotImplementedError(f"{p.op.value} cannot be inlined")

    def _gather(self, p: Prim, idx: tuple[Expr, ...]) -> str:
        """Read the data at an index whose gathered coordinates are loaded values, wrapped once
        when negative and clamped into range (Note [gather bounds]): never out of bounds."""
        a = p.attrs
        coords = [self._sub(e, idx) for e in a.data.index]
        for k, (ax, m) in enumerate(zip(a.axes, a.indices)):
            n = a.data.in_shape[ax]
            raw = self.value(p.inputs[1 + k], [self._sub(e, idx) for e in m.index])
            coords[ax] = ix.loaded(self._index_scalar(raw, n), n)
        return self.value(p.inputs[0], coords)

    def _index_scalar(self, raw: str, n: int) -> str:
        b = self.body
        x = b.cast(raw, "int64")
        zero, last = b.imm(0, "int64"), b.imm(n - 1, "int64")
        negative = b.let("lt", "bool", (x, zero))
        wrapped = b.let("select", "int64", (negative, b.let("add", "int64", (x, b.imm(n, "int64"))), x))
        return b.let("min", "int64", (b.let("max", "int64", (wrapped, zero)), last))

    def _sub(self, e: Expr, idx: Sequence[Expr]) -> Expr:
        return indexing.normalize(ix.substitute(e, list(idx), self.sizes), self.sizes)

    def conds(self, conds) -> str | bool | None:
        """AND of ``lo <= e < hi``: None if always true, False if never, else an SSA bool."""
        names = []
        for e, lo, hi in conds:
            elo, ehi = ix.bounds(e, self.sizes)
            if elo >= lo and ehi < hi:
                continue
            if ehi < lo or elo >= hi:
                return False
            names.append(self.body.let("cond", "bool", (), (e, lo if elo < lo else None, hi if ehi >= hi else None)))
        if not names:
            return None
        acc = names[0]
        for n in names[1:]:
            acc = self.body.let("and", "bool", (acc, n))
        return acc

    def _concat(self, p: Prim, idx: tuple[Expr, ...]) -> str:
        ax, out = p.attrs.axis, self.g.types[p.output].dtype
        lo, hi = ix.bounds(idx[ax], self.sizes)
        pieces, start = [], 0
        for a in p.inputs:
            n = self.g.types[a].shape[ax]
            if start <= hi and start + n > lo:
                pieces.append((start, n, a))
            start += n
        result = None
        for start, n, a in reversed(pieces):
            sub = list(idx)
            sub[ax] = indexing.normalize(idx[ax] - start, self.sizes)
            x = self.body.cast(self.value(a, sub), out)
            if result is None:
                result = x
                continue
            c = self.conds([(idx[ax], lo, start + n)])
            result = x if c is None else self.body.let("select", out, (c, x, result))
        return result
