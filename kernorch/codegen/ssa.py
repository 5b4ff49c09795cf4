"""SSA for one loop body: the dtypes the C generator handles, NumPy's promotion between them,
``Body`` (the Lets of a loop body, each value named once) and ``elementwise`` (one elementwise prim
on SSA operands). Below every kernel template: the scalar inliner (scalar.py), the stencils and
window sums written out tap by tap (stencil.py, window.py) and the GEMM's epilogue all print
through it.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from kernorch.codegen.kernel import Let
from kernorch.ir.prims import BINARY, COMPARE, LOGICAL, Op

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
