"""Triton printer: TritonSpec -> Python source of @triton.jit programs. Syntax only; the tile
structure is decided in triton_lower.py (Note [triton tiles]).

    why_not_triton(g, members, outputs) -> str | None     feasibility (memory-bound kernels)
    can_generate_triton(g, members, outputs) -> bool
    lower_triton(g, members, outputs, config) -> TritonSpec
    emit_triton(spec, interpret=False) -> (source, table)  one module per kernel, one program per group

Each group becomes ``def NAME_gK(in0.., out0.., ws0.., [tab])``: pointers to contiguous row-major
buffers, plus the int table that holds every Lookup atom's constants. Integer ``//`` and ``%``
truncate in Triton (like C): index expressions that may be negative go through floor helpers.
``interpret``: Triton's CPU interpreter has no libdevice, so tanh, log1p, pow and rint are
written with core ops there (same values within float tolerance).
"""

from __future__ import annotations

import numpy as np

from kernorch.codegen import literals
from kernorch.codegen.feasible import why_not
from kernorch.codegen.kernel import Let
from kernorch.codegen.lower_base import identity
from kernorch.codegen.triton_lower import (Barrier, Def, Fill, Fold, Group, Lane, Put, Reduce, TLoop, TritonConfig,
                                           TritonSpec, lower_triton, np2)
from kernorch.ir.interp import NARROW_INTS
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op

TL = {"float32": "tl.float32", "float64": "tl.float64", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
      "int64": "tl.int64", "uint8": "tl.uint8", "uint16": "tl.uint16", "uint32": "tl.uint32", "uint64": "tl.uint64",
      "bool": "tl.int1"}

HEADER = '''import triton
import triton.language as tl
from triton.language.extra import libdevice

@triton.jit
def _floordiv(x, d):
    r = x % d
    return (x - tl.where(r < 0, r + d, r)) // d


@triton.jit
def _floormod(x, d):
    r = x % d
    return tl.where(r < 0, r + d, r)


@triton.jit
def _idiv(a, b):
    q = tl.abs(a) // tl.where(b == 0, 1, tl.abs(b))
    q = tl.where((a < 0) != (b < 0), -q, q)
    return tl.where(b == 0, 0, q)


@triton.jit
def _imod(a, b):
    r = a % tl.where(b == 0, 1, b)
    r = tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return tl.where(b == 0, 0, r)


@triton.jit
def _floor_mod(r, b):
    # r is the truncated remainder (C fmod) of a by b; the prim's mod takes the sign of b.
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def _rint(x):
    f = tl.floor(x)
    d = x - f
    even = (f - 2.0 * tl.floor(f * 0.5)) == 0.0
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))


@triton.jit
def _pow(a, b):
    # C99 pow's special cases (NumPy's and libdevice's): x**0 == 1**y == (-1)**inf == 1, the sign of an
    # odd power of -0 or -inf kept, NaN only for a finite negative base to a finite non-integer power
    p = tl.exp(b * tl.log(tl.abs(a)))
    whole = b == tl.floor(b)
    odd = whole & (tl.abs(b) < float("inf")) & ((b - 2.0 * tl.floor(b * 0.5)) != 0.0)
    negative = (a < 0) | ((a == 0) & (1.0 / a < 0))
    p = tl.where(negative & odd, -p, p)
    p = tl.where((a < 0) & (a > float("-inf")) & (whole == 0), float("nan"), p)
    p = tl.where((tl.abs(a) == 1.0) & (tl.abs(b) == float("inf")), 1.0, p)
    return tl.where((b == 0.0) | (a == 1.0), 1.0, p)


@triton.jit
def _mul(a, b):
    return a * b
'''

# Float scalar functions; {0}, {1} are SSA names (repeating them is free).
FLOAT = {
    "neg": "(-{0})", "abs": "tl.abs({0})", "exp": "tl.exp({0})", "log": "tl.log({0})", "sqrt": "tl.sqrt_rn({0})",
    "recip": "(1.0 / {0})", "erf": "tl.erf({0})", "sigmoid": "(1.0 / (1.0 + tl.exp(-{0})))",
    "relu": "tl.where(({0} > 0) | ({0} != {0}), {0}, 0.0)", "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "sin": "tl.sin({0})", "cos": "tl.cos({0})", "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, {0}))",
    "isnan": "({0} != {0})", "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "max": "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})", "min": "tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})",
}
# Triton's float % on the GPU is a - trunc(a / b) * b (inf for tiny b); libdevice.fmod is exact, and the
# interpreter's % is numpy's fmod.
GPU_MATH = {"tanh": "libdevice.tanh({0})", "log1p": "libdevice.log1p({0})", "pow": "libdevice.pow({0}, {1})",
            "round": "libdevice.rint({0})", "mod": "_floor_mod(libdevice.fmod({0}, {1}), {1})"}
CORE_MATH = {"tanh": "(1.0 - 2.0 / (tl.exp(2.0 * {0}) + 1.0))", "log1p": "tl.log(1.0 + {0})", "pow": "_pow({0}, {1})",
             "round": "_rint({0})", "mod": "_floor_mod(({0} % {1}), {1})"}
INT = {
    "neg": "(-{0})", "abs": "tl.abs({0})", "relu": "tl.where({0} > 0, {0}, 0)",
    "sign": "(({0} > 0).to({t}) - ({0} < 0).to({t}))", "add": "({0} + {1})", "sub": "({0} - {1})",
    "mul": "({0} * {1})", "div": "_idiv({0}, {1})", "mod": "_imod({0}, {1})", "max": "tl.maximum({0}, {1})",
    "min": "tl.minimum({0}, {1})",
}
ANY = {
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})",
    "ge": "({0} >= {1})", "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})", "not": "({0} == 0)",
    "select": "tl.where({0}, {1}, {2})",
}
FOLD = {"sum": "{a} + {v}", "prod": "{a} * {v}"}
UNSUPPORTED = {Op.POW: "integer pow"}  # ops the printer has no integer form for


def why_not_triton(g: Graph, members, outputs) -> str | None:
    """None when kernorch can run this kernel on CUDA: as Triton (memory-bound prims), through
    torch (one linear prim, see linear.py) or the reference (one opaque prim); else the reason,
    in the Triton generator's words."""
    return why_not(g, members, outputs, "Triton", _why_not_prim)


def _why_not_prim(g: Graph, p) -> str | None:
    if p.op in UNSUPPORTED and any(g.types[v].dtype not in ("float32", "float64") for v in (*p.inputs, p.output)):
        return f"{UNSUPPORTED[p.op]} ({g.name(p.output)}) is not supported by the Triton generator"
    return None


def can_generate_triton(g: Graph, members, outputs) -> bool:
    return why_not_triton(g, members, outputs) is None


def literal(value, dtype: str) -> str:
    # Literals, not module globals: Triton checks at each launch that globals kept their value, and nan != nan.
    return literals.literal(value, dtype, 'float("nan")', 'float("inf")', 'float("-inf")', "", lambda v, _: str(v))


def full(shape: str, value, dtype: str) -> str:
    return f"tl.full({shape}, {literal(value, dtype)}, {TL[dtype]})"


class _Printer:
    def __init__(self, spec: TritonSpec, interpret: bool) -> None:
        self.spec, self.interpret = spec, interpret
        self.math = CORE_MATH if interpret else GPU_MATH
        self.tables: dict[tuple[int, ...], int] = {}
        self.table_len = 0
        self.lines: list[str] = []
        self.types: dict[str, str] = {}
        self.lanes: dict[int, Lane] = {}

    # -- index expressions ------------------------------------------------------------------
    def idx(self, e: ix.Expr) -> str:
        return "(" + ix.render(e, lambda i: f"v{i}", self.spec.sizes, floordiv_fn="_floordiv", mod_fn="_floormod",
                               min_fn="tl.minimum", max_fn="tl.maximum", div="//", lookup=self._lookup) + ")"

    def _lookup(self, a: ix.Lookup, x: str) -> str:
        """A constant-table read; every lane clamps into the table (masked lanes past a
        power-of-two block may hold any index)."""
        base, n = self._table(a.table), len(a.table)
        if not a.x.terms:
            return f"tl.load(tab + {base + min(max(a.x.const, 0), n - 1)})"
        return f"tl.load(tab + ({base} + tl.minimum(tl.maximum({x}, 0), {n - 1})))"

    def _table(self, t: tuple[int, ...]) -> int:
        if t not in self.tables:
            self.tables[t] = self.table_len
            self.table_len += len(t)
        return self.tables[t]

    def mask(self, vars_) -> str | None:
        parts = [f"m{v}" for v in sorted(vars_) if v in self.lanes and self.lanes[v].masked]
        return " & ".join(parts) if parts else None

    def shape(self, lanes) -> str:
        dims = [1, 1, 1]
        for lane in lanes:
            dims[lane.axis] = lane.block
        return str([dims[a] for a in self.axes])

    # -- statements -------------------------------------------------------------------------
    def emit(self, depth: int, s: str) -> None:
        self.lines.append("    " * depth + s)

    def lane(self, lane: Lane, d: int, base: str) -> None:
        sl = "[" + ", ".join(":" if a == lane.axis else "None" for a in self.axes) + "]"
        self.lanes[lane.var] = lane
        start = "" if base == "0" else f"{base} + "
        self.emit(d, f"v{lane.var} = {start}tl.arange(0, {lane.block}){sl}")
        if lane.masked:
            self.emit(d, f"m{lane.var} = v{lane.var} < {lane.extent}")

    def stmt(self, s, d: int) -> None:
        if isinstance(s, Let):
            self.types[s.name] = s.dtype
            self.emit(d, f"{s.name} = {self.expr(s)}")
        elif isinstance(s, Def):
            self.lane(s.lane, d, "0")
        elif isinstance(s, TLoop):
            c = f"c{s.lane.var}"
            self.emit(d, f"for {c} in range(0, {s.lane.extent}, {s.lane.block}):")
            self.lane(s.lane, d + 1, c)
            for b in s.body:
                self.stmt(b, d + 1)
        elif isinstance(s, Put):
            shp = self.shape(s.lanes)
            m = self.mask({x.var for x in s.lanes})
            ptr = f"{s.buf} + {self.idx(s.offset)} + tl.zeros({shp}, tl.int32)"
            val = f"tl.broadcast_to({s.value}, {shp})"
            self.emit(d, f"tl.store({ptr}, {val}{', mask=' + m if m else ''})")
        elif isinstance(s, Fill):
            self.types[s.name] = s.dtype
            self.emit(d, f"{s.name} = {full(self.shape(s.lanes), s.init, s.dtype)}")
        elif isinstance(s, Fold):
            self.fold(s, d)
        elif isinstance(s, Reduce):
            self.reduce(s, d)
        elif isinstance(s, Barrier):
            self.emit(d, "tl.debug_barrier()")
        else:
            raise TypeError(s)

    def fold(self, s: Fold, d: int) -> None:
        ident = full(self.unit, identity(s.op, s.dtype), s.dtype)
        m = self.mask({x.var for x in s.lanes})
        v = f"tl.where({m}, {s.value}, {ident})" if m else s.value
        self.emit(d, f"f{s.acc} = {v}")
        v, a = f"f{s.acc}", s.acc
        if s.dtype == "bool":
            expr = f"{a} | {v}" if s.op == "max" else f"{a} & {v}"
        elif s.op in FOLD:
            expr = FOLD[s.op].format(a=a, v=v)
        elif s.dtype.startswith("float"):
            cmp = ">" if s.op == "max" else "<"
            expr = f"tl.where(({v} {cmp} {a}) | ({v} != {v}), {v}, {a})"
        else:
            expr = f"tl.{'maximum' if s.op == 'max' else 'minimum'}({a}, {v})"
        self.emit(d, f"{a} = {expr}")

    def reduce(self, s: Reduce, d: int) -> None:
        shp = self.shape(s.lanes)
        ident = full(self.unit, identity(s.op, s.dtype), s.dtype)
        red = f"axis={self.axes.index(2)}, keep_dims=True"
        src = f"tl.broadcast_to({s.src}, {shp})"
        m = self.mask({x.var for x in s.lanes})
        if s.masked and m:
            src = f"tl.where({m}, {src}, {ident})"
        x = f"x{s.name}"
        self.emit(d, f"{x} = {src}")
        self.types[s.name] = s.dtype
        if s.dtype == "bool":
            fn = "tl.max" if s.op == "max" else "tl.min"
            self.emit(d, f"{s.name} = {fn}({x}.to(tl.int32), {red}) != 0")
        elif s.op == "sum":
            self.emit(d, f"{s.name} = tl.sum({x}, {red})")
        elif s.op == "prod":
            self.emit(d, f"{s.name} = tl.reduce({x}, {self.axes.index(2)}, _mul, keep_dims=True)")
        else:
            self.emit(d, f"{s.name} = tl.{s.op}({x}, {red})")
            if s.dtype.startswith("float"):
                nan = f"tl.max(({x} != {x}).to(tl.int32), {red}) > 0"
                self.emit(d, f"{s.name} = tl.where({nan}, {full(self.unit, float('nan'), s.dtype)}, {s.name})")

    def expr(self, s: Let) -> str:
        if s.op == "imm":
            return full(self.unit, s.attr, s.dtype)
        if s.op == "load":
            buf, off = s.attr
            m = self.mask(ix.free_vars(off))
            return f"tl.load({buf} + {self.idx(off)}{', mask=' + m + ', other=0' if m else ''})"
        if s.op == "cond":
            e, lo, hi = s.attr
            r = self.idx(e)
            parts = ([f"({lo} <= {r})"] if lo is not None else []) + ([f"({r} < {hi})"] if hi is not None else [])
            return "(" + " & ".join(parts) + ")"
        if s.op == "cast":
            if s.dtype == "bool":
                return f"({s.args[0]} != 0)"
            if s.dtype in NARROW_INTS and self.types.get(s.args[0], "") in ("float32", "float64", "bfloat16", "float16"):
                return f"{s.args[0]}.to(tl.int32).to({TL[s.dtype]})"  # through int32, as interp._cast
            return f"{s.args[0]}.to({TL[s.dtype]})"
        arg_types = [self.types.get(a, s.dtype) for a in s.args]
        return scalar_expr(s.op, s.dtype, arg_types, s.args, self.math)

    def group(self, grp: Group, args: list[str]) -> None:
        self.lanes = {}
        # Tiles are rank 3 only where a reduction keeps a lane (axis 1); else [BO, BR] as usual.
        self.axes = [0, 1, 2] if any(lane.axis == 1 for lane in _lanes(grp.body)) else [0, 2]
        self.unit = str([1] * len(self.axes))
        self.emit(0, "@triton.jit")
        self.emit(0, f"def {grp.name}({', '.join(args)}):")
        self.emit(1, "pid = tl.program_id(0)")
        if self.spec.index64:
            self.emit(1, "pid = pid.to(tl.int64)")
        self.lane(grp.o, 1, f"pid * {grp.o.block}")
        for s in grp.body:
            self.stmt(s, 1)
        self.emit(0, "")
        self.emit(0, "")

    def module(self) -> str:
        args = [a.name for a in self.spec.args]
        body_start = len(self.lines)
        for grp in self.spec.groups:
            self.group(grp, args + ["tab"])
        if not self.tables:  # no lookup: drop the table argument
            self.lines[body_start:] = [ln.replace(", tab):", "):") if ln.startswith("def ") else ln
                                       for ln in self.lines[body_start:]]
        doc = [f"# {self.spec.name}: key {self.spec.key}", *["# " + ln for ln in self.spec.comment.splitlines()],
               *["# " + n for n in self.spec.notes]]
        return "\n".join(doc) + "\n" + HEADER + "\n\n" + "\n".join(self.lines) + "\n"


def scalar_expr(op: str, dtype: str, arg_types: list[str], args, math_: dict) -> str:
    """One scalar operation as a Triton expression."""
    if op in ANY:
        return ANY[op].format(*args)
    t = dtype if dtype.startswith("float") else (arg_types[0] if arg_types else dtype)
    if t.startswith("float"):
        if op == "softplus":
            x = args[0]
            return f"(tl.where({x} > 0, {x}, 0.0) + {math_['log1p'].format(f'tl.exp(-tl.abs({x}))')})"
        if op == "sqrt" and t == "float64":
            return f"tl.sqrt({args[0]})"  # sqrt_rn is float32 only; float64 sqrt is IEEE anyway
        tmpl = math_.get(op) or FLOAT[op]
        return tmpl.format(*args)
    return INT[op].format(*args, t=TL[dtype])


def emit_triton(spec: TritonSpec, interpret: bool = False) -> tuple[str, np.ndarray]:
    """The module source and the concatenated lookup table (empty when the kernel has none)."""
    p = _Printer(spec, interpret)
    src = p.module()
    flat = [x for t in p.tables for x in t]
    small = all(-(1 << 31) <= x < (1 << 31) for x in flat)
    table = np.asarray(flat, dtype=np.int32 if small else np.int64)
    return src, table


def tuning_space(spec: TritonSpec) -> list[TritonConfig]:
    """A few tile sizes worth timing for this kernel: a small and a large tile, and a tile that
    holds the widest row when it fits in 16K elements (a persistent softmax / norm)."""
    widest = max((grp.o.block * _inner(grp) for grp in spec.groups), default=1)
    out = [TritonConfig(1024, 4), TritonConfig(4096, 8)]
    if 4096 < widest <= 16384:
        out.append(TritonConfig(np2(widest), 16))
    return out


def _lanes(stmts):
    for s in stmts:
        if isinstance(s, (Def, TLoop)):
            yield s.lane
        if isinstance(s, TLoop):
            yield from _lanes(s.body)


def _inner(grp: Group) -> int:
    extents = {}
    for lane in _lanes(grp.body):
        extents[lane.axis] = max(extents.get(lane.axis, 1), np2(lane.extent))
    return extents.get(1, 1) * extents.get(2, 1)


__all__ = ["TritonConfig", "TritonSpec", "can_generate_triton", "emit_triton", "lower_triton", "tuning_space",
           "why_not_triton"]
