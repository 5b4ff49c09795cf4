"""Triton lowering: (graph, members, outputs) -> TritonSpec, the tile program of one fused kernel.

What is materialized and which stages share a parallel outer index o comes from the C scheduler
(schedule.make_schedule in grid mode: outer domains as wide as the stages allow, never narrowed
for fusion); element computation comes from scalar.Inliner. This module decides the GPU
structure, see Note [triton tiles]; triton.py prints it.

Note [triton tiles]
Each group of the schedule is one Triton program launched over ceil(P / BO) programs; a program
owns BO consecutive outer indices (tile axis 0). A stage's inner loops are flattened: an
elementwise stage's into one lane variable r (axis 2), a reduce stage's into kept (k, axis 1) and
reduced (r, axis 2) lane variables, so every value is a rank-3 tile [BO, BK, BR] (size-1 axes
broadcast; printed as [BO, BR] when no stage of the group keeps a lane, the usual case). Lane
variables of equal extent are shared by the stages of a group, so when two stages read the same
element their index expressions coincide. A group is *persistent* when every
stage's tile fits in ``config.block`` elements: then everything runs straight-line, each value
computed once stays in registers, and a later stage that reads it at the same position reuses it
(a row kept in registers across softmax / norm stages). Otherwise each stage loops over chunks
of its lanes, reductions accumulate in a tile and reduce at the end, and values the scheduler
kept only to avoid recomputation are recomputed (arithmetic is cheaper than a round trip to
memory on a GPU). Reduce results with one
value per o stay in registers ([BO, 1, 1]) in both modes; any other same-group read of a
materialized value goes through memory (its output buffer, or scratch) after a barrier, which is
legal because the scheduler proved the read lands in the same o (the same program).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Sequence


from kernorch.codegen import indexing
from kernorch.codegen.facts import CannotGenerate
from kernorch.codegen.kernel import Let, SpecHeader
from kernorch.codegen.lower_base import KernelLowerer, identity
from kernorch.codegen.scalar import Inliner
from kernorch.codegen.ssa import Body
from kernorch.codegen.schedule import Stage, Vars, make_schedule
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph

INDEX32_LIMIT = 1 << 30  # buffers at least this long use 64-bit index arithmetic


@dataclass(frozen=True)
class TritonConfig:
    """``block``: most elements of one tile (a persistent row must fit); ``warps``: most warps."""

    block: int = 4096
    warps: int = 8


@dataclass(frozen=True)
class Lane:
    """A vector index: variable ``var`` over [0, extent) in chunks of ``block`` on tile ``axis``."""

    var: int
    extent: int
    block: int
    axis: int

    @property
    def masked(self) -> bool:
        return self.extent % self.block != 0


@dataclass(frozen=True)
class Def:
    """Define a lane variable over its whole (single-chunk) range."""

    lane: Lane


@dataclass(frozen=True)
class TLoop:
    """``for chunk in range(0, extent, block)``: the lane variable is chunk + arange(block)."""

    lane: Lane
    body: tuple


@dataclass(frozen=True)
class Put:
    """``buf[offset] = value`` on the tile spanned by ``lanes`` (masked by their ranges)."""

    buf: str
    offset: ix.Expr
    value: str
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class Fill:
    name: str
    dtype: str
    init: object
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class Fold:
    """``acc = combine(acc, value)`` where the lanes are in range."""

    acc: str
    op: str
    value: str
    dtype: str
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class Reduce:
    """``name = reduce(src)`` over tile axis 2 (kept as size 1); ``masked``: lanes out of range
    are replaced by the identity first (needed when ``src`` is a value, not an accumulator)."""

    name: str
    op: str
    src: str
    dtype: str
    lanes: tuple[Lane, ...]
    masked: bool


@dataclass(frozen=True)
class Barrier:
    pass


@dataclass(frozen=True)
class Group:
    name: str
    o: Lane
    body: tuple
    grid: int
    warps: int


@dataclass(frozen=True, kw_only=True)
class TritonSpec(SpecHeader):
    """One Triton kernel (every scratch value its own buffer): groups launched in order,
    ``index64`` when offsets need 64-bit arithmetic, the tile ``config``."""

    groups: tuple[Group, ...]
    index64: bool
    config: TritonConfig


def np2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class _NeedBuffer(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def lower_triton(g: Graph, members: Iterable[int], outputs: Sequence[int], config: TritonConfig | None = None,
                 name: str | None = None) -> TritonSpec:
    """The tile program of a memory-bound kernel (no linear or opaque prims)."""
    return TritonLowering(g, members, outputs).spec(config or TritonConfig(), name)


class TritonLowering:
    """One kernel lowered for several tile sizes: the schedule is computed once and shared."""

    def __init__(self, g: Graph, members: Iterable[int], outputs: Sequence[int]) -> None:
        self.g = g
        self._low = _Lowerer(g, set(members), list(outputs))

    def spec(self, config: TritonConfig, name: str | None = None) -> TritonSpec:
        forced: set[int] = set()  # values that must go through memory at this tile size
        while True:
            try:
                return self._low.run(name, forced, config)
            except _NeedBuffer as e:
                if e.value in forced:  # pragma: no cover - a buffered value is always loadable
                    raise CannotGenerate(f"cannot place value {self.g.name(e.value)}") from None
                forced.add(e.value)


@dataclass
class _Plan:
    st: Stage
    it: indexing.Iteration
    kept: list  # (var, extent, dim) loops kept per o (reduce stages)
    red: list  # loops flattened onto axis 2
    K: int
    R: int


class _Lowerer(KernelLowerer):
    def __init__(self, g: Graph, members: set[int], outputs: list[int]) -> None:
        super().__init__(g, members, outputs)
        self._schedule: tuple | None = None

    def run(self, name: str | None, forced: set[int], config: TritonConfig) -> TritonSpec:
        g = self.g
        self.config = config
        self.vs = Vars()
        self.names = itertools.count()
        if self._schedule is None:  # the same for every tile size and scratch choice
            self._schedule = (make_schedule(g, self.prims, self.outputs, self.vs, grid=True), list(self.vs.sizes))
        sch, sizes = self._schedule
        self.vs.sizes = list(sizes)
        args = self.assign_buffers(sch, forced, arena=False)
        key = g.kernel_key(set(self.producers), self.outputs)
        name = name or f"kt_{key[:16]}"
        groups = []
        for gi, (ks, P) in enumerate(sch.groups):
            groups.append(self.group(f"{name}_g{gi}", [sch.stages[k] for k in ks], P))
        index64 = max(a.size for a in args) >= INDEX32_LIMIT
        notes = tuple(f"group {gi}: P={grp.o.extent}, BO={grp.o.block}, grid {grp.grid}, warps {grp.warps}"
                      for gi, grp in enumerate(groups))
        return TritonSpec(name=name, args=args, groups=tuple(groups), sizes=tuple(self.vs.sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=self.describe()[0],
                          index64=index64, config=self.config, notes=notes)

    # -- one group: one Triton program --------------------------------------------------------
    def group(self, name: str, stages: list[Stage], P: int) -> Group:
        block = self.config.block
        o = self.vs.new(P)
        plans = [self._plan(st, P, o) for st in stages]
        self.persistent = all(np2(p.K) * np2(p.R) <= block for p in plans)
        if not self.persistent:  # values kept only to avoid recomputation: recompute them instead
            heavy = {p.st.value for p in plans if not p.st.reduce and p.st.value not in self.buf}
            self.inline |= heavy
            plans = [p for p in plans if p.st.value not in heavy]
        if self.persistent:
            inner = max(np2(p.K) * np2(p.R) for p in plans)
        else:
            inner = max(self._bk(p) * self._br(p) for p in plans)
        BO = max(1, min(np2(P), block // inner))
        self.o = Lane(o, P, BO, 0)
        self.r_lanes: dict[tuple[int, int], Lane] = {}
        self.top = Body(self.names)
        self.emitted = 0
        self.regs: dict[int, tuple[str, ix.Expr]] = {}  # one-per-o reduce results, [BO, 1, 1]
        self.tiles: dict[int, tuple[str, ix.Expr]] = {}  # top-level values
        self.written: set[int] = set()
        self.defined: set[int] = set()
        body: list = []
        for p in plans:
            body += self._stage(p)
        grid = -(-P // BO)
        elems = BO * inner
        warps = max(1, min(self.config.warps, np2(elems) // 256))
        return Group(name, self.o, tuple(body), grid, warps)

    def _plan(self, st: Stage, P: int, o: int) -> _Plan:
        it = indexing.split(st.shape, st.axes, P, o, self.vs.new, self.vs.sizes)
        if it is None:  # pragma: no cover - the scheduler only groups valid splits
            raise CannotGenerate(f"outer extent {P} does not split {st.shape}")
        if st.reduce:
            kept = [lp for lp in it.loops if lp[2] not in st.axes]
            red = [lp for lp in it.loops if lp[2] in st.axes]
        else:
            kept, red = [], list(it.loops)
        return _Plan(st, it, kept, red, math.prod(e for _, e, _ in kept), math.prod(e for _, e, _ in red))

    def _br(self, p: _Plan) -> int:
        return min(np2(p.R), self.config.block)

    def _bk(self, p: _Plan) -> int:
        return max(1, min(np2(p.K), self.config.block // self._br(p)))

    def _lane(self, extent: int, axis: int, block: int) -> Lane:
        """Lanes of equal extent (and block) on one axis share a variable (see the Note)."""
        key = (extent, axis, block)
        if key not in self.r_lanes:
            self.r_lanes[key] = Lane(self.vs.new(extent), extent, block, axis)
        return self.r_lanes[key]

    def _flatten(self, loops: list, lane: Lane | None) -> dict[int, ix.Expr]:
        """Loop variable -> expression of the lane variable (row-major over ``loops``)."""
        out, stride = {}, 1
        sizes = self.vs.sizes
        for var, extent, _ in reversed(loops):
            e = ix.floordiv(ix.var(lane.var), stride, sizes) if stride > 1 else ix.var(lane.var)
            if stride * extent < lane.extent:
                e = ix.mod(e, extent, sizes)
            out[var] = e
            stride *= extent
        return out

    def _stage(self, p: _Plan) -> list:
        st, g = p.st, self.g
        dtype = g.types[st.value].dtype
        k_lane = r_lane = None
        if self.persistent:
            if p.K > 1:
                k_lane = self._lane(p.K, 1, np2(p.K))
            if p.R > 1:
                r_lane = self._lane(p.R, 2, np2(p.R))
        else:
            if p.K > 1:
                k_lane = self._lane(p.K, 1, self._bk(p))
            if p.R > 1:
                r_lane = self._lane(p.R, 2, self._br(p))
        mapping = {**(self._flatten(p.kept, k_lane) if k_lane else {}),
                   **(self._flatten(p.red, r_lane) if r_lane else {})}
        natural = tuple(self.vs.subst(e, mapping) for e in p.it.natural)
        looped = not self.persistent and (k_lane is not None or r_lane is not None)
        body = Body(self.names) if looped else self.top
        start = 0 if looped else len(self.top.lets)
        self.barrier = False
        lanes = tuple(x for x in (self.o, k_lane, r_lane) if x is not None)
        inl = Inliner(g, self.producers, self.inline, self.vs.sizes, body,
                      lambda v, idx, b: self._leaf(v, idx, b, looped))
        out: list = []
        if not looped:
            out += [Def(x) for x in (k_lane, r_lane) if x is not None and x.var not in self.defined]
            self.defined.update(x.var for x in (k_lane, r_lane) if x is not None)
        if not st.reduce:
            val = body.cast(inl.compute(st.prim, natural), dtype)
            off = self._flat(st.value, natural)
            stmts: list = list(body.lets[start:])
            if st.value in self.buf:
                stmts.append(Put(self.buf[st.value], off, val, lanes))
                self.written.add(st.value)
            if looped:
                out.append(TLoop(r_lane, tuple(stmts)))
            else:
                out += stmts
                self.tiles[st.value] = (val, off)
            return ([Barrier()] if self.barrier else []) + out
        op = self._reduce_op(st)
        val = body.cast(inl.value(st.prim.inputs[0], natural), dtype)
        res = f"a{next(self.names)}"
        red_off = self._flat(st.value, self._reduced_index(st, natural))
        stored = []
        if st.value in self.buf:
            stored = [Put(self.buf[st.value], red_off, res, tuple(x for x in (self.o, k_lane) if x is not None))]
            self.written.add(st.value)
        elif p.K > 1:
            raise _NeedBuffer(st.value)
        if not looped:
            out += list(body.lets[start:]) + [Reduce(res, op, val, dtype, lanes, True)] + stored
        else:
            acc = f"a{next(self.names)}"
            inner: tuple = (*body.lets, Fold(acc, op, val, dtype, lanes))
            if r_lane is not None:
                inner = (TLoop(r_lane, inner),)
            red = [Fill(acc, dtype, identity(op, dtype), lanes), *inner,
                   Reduce(res, op, acc, dtype, lanes, False), *stored]
            out += [TLoop(k_lane, tuple(red))] if k_lane is not None else red
        if p.K == 1:
            self.regs[st.value] = (res, red_off)
        return ([Barrier()] if self.barrier else []) + out

    # -- reads --------------------------------------------------------------------------------
    def _leaf(self, v: int, idx: tuple, body: Body, looped: bool) -> str:
        dtype = self.g.types[v].dtype
        if v in self.imm:
            return body.imm(self.imm[v], dtype)
        off = self._flat(v, idx)
        for table in (self.regs, self.tiles):
            if v in table and self._same(off, table[v][1]):
                return body.var(table[v][0], dtype)
        if v in self.buf:
            if v in self.written:
                self.barrier = True
            return body.let("load", dtype, (), (self.buf[v], self._clamped_flat(v, idx)))
        raise _NeedBuffer(v)

    def _same(self, a: ix.Expr, b: ix.Expr) -> bool:
        return ix.bounds(indexing.normalize(a - b, self.vs.sizes), self.vs.sizes) == (0, 0)


__all__ = ["Barrier", "Def", "Fill", "Fold", "Group", "Lane", "Let", "Put", "Reduce", "TLoop", "TritonConfig",
           "TritonLowering", "TritonSpec", "lower_triton", "np2"]
