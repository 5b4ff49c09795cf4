"""Scalar code for one loop body: inlines elementwise, broadcast and layout prims into SSA Lets.

``Inliner.value(v, idx)`` returns the SSA name holding value ``v`` at index ``idx`` (index
expressions over loop variables); layout prims become index arithmetic, masks become selects,
CONCAT a piecewise select by range. Values that are not inlined (kernel inputs, materialized
values) are delegated to a ``leaf`` callback. Numeric promotion follows NumPy (the interpreter):
operands are cast to ``np.result_type`` of the operand dtypes, the result to the declared dtype.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from kernorch.codegen import indexing, stencil, window
from kernorch.codegen.ssa import Body, elementwise
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.index import Expr
from kernorch.ir.prims import Kind, Op, Prim

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

    def _scaled_by_reciprocal(self, v: int, idx: tuple[Expr, ...]) -> str | None:
        """``x / c`` for a rounding to integers (QuantizeLinear's ``round(x / scale)``) as ``x * (1/c)``
        when ``c`` is a constant scalar and ``v`` is computed here, else None (Note [quantize by
        reciprocal]); any other reader of ``v`` computes the exact quotient itself."""
        q = self.producers.get(v)
        dtype = self.g.types[v].dtype
        if q is None or q.op is not Op.DIV or v not in self.inline or dtype not in ("float32", "float64"):
            return None
        c = self.value(q.inputs[1], idx if self.g.types[q.inputs[1]].shape else ())
        if c not in self.body.imms or not np.isfinite(self.body.imms[c]) or self.body.imms[c] == 0:
            return None
        self.visited.add(v)
        x = self.value(q.inputs[0], idx if self.g.types[q.inputs[0]].shape else ())
        return elementwise(self.body, Op.MUL, (x, self.body.imm(1.0 / float(self.body.imms[c]), dtype)), dtype)

    # Note [quantize by reciprocal]
    # A division has a fraction of a multiplication's throughput (AVX-512: vdivps one per ~16 cycles
    # against two multiplications a cycle), and an int8 plan's requantizing kernels (a residual add:
    # dequantize two uint8 inputs, add, divide by the output scale, round, clamp) were bound by it:
    # 0.14-0.24 ms for 56x56x256 at 2 threads, where their memory traffic takes a third of that. So a
    # quotient by a constant that is only rounded to an integer is a product with the reciprocal, as
    # oneDNN's requantization computes it: the two differ only where x / c lies within a rounding
    # error of a half-integer, which then rounds one step the other way; the oracle judges a kernel
    # holding a ROUND so (ir/oracle.py ``quantizes``). A quotient read as a float stays a division.

    def compute(self, p: Prim, idx: tuple[Expr, ...]) -> str:
        """The value of prim ``p``'s output at ``idx``."""
        b, out = self.body, self.g.types[p.output]
        if p.kind is Kind.ELEMENTWISE:
            scaled = self._scaled_by_reciprocal(p.inputs[0], idx) if p.op is Op.ROUND else None
            if scaled is not None:
                return elementwise(b, p.op, (scaled,), out.dtype)
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
