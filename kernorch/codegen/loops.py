"""The loop-nest kernel template: (graph, members, outputs) -> KernelSpec, the loop nests of one
fused C kernel (whatever no other template of templates.py takes).

schedule.py decides what is stored and how stages share the parallel outer index (see Note
[parallel domain]); this module builds the loops. Per group: one parallel loop over o; per
stage: loops over the inner dims in natural order (innermost = contiguous dim, marked SIMD).
Reductions accumulate in a register (one element per o) or a per-thread array (several, e.g. a
softmax over a middle axis); consecutive stages with identical loops are fused into one nest
(a value stored by one stage and read at the same position by the next is passed in a register).
Internal values live in registers / per-thread arrays; outputs and values read by a later group
live in memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from kernorch.codegen import extremes, indexing, stencil, transpose
from kernorch.codegen.kernel import Accum, Decl, KernelSpec, Let, Loop, Parallel, Store
from kernorch.codegen.reduce_order import permuted_reduces
from kernorch.codegen.lower_base import KernelLowerer, accumulator_dtype, identity
from kernorch.codegen.schedule import Stage, interchange, make_schedule, transposed_dim, work
from kernorch.codegen.scalar import Inliner
from kernorch.codegen.ssa import Body
from kernorch.codegen.template import Template
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

PARALLEL_MIN_WORK = 1 << 14  # elements per group below which one thread is faster than a fork
MAX_PIECES = 5  # most pieces an innermost loop is split into (pads and concats need 2-3)
TILE = transpose.TILE  # tile edge for transposed reads; larger tiles thrash L1 sets with power-of-two strides


class _NoFuse(Exception):
    pass


@dataclass
class _Nest:
    """Stages sharing one loop nest."""

    loops: tuple[tuple[int, int, int], ...]
    body: Body
    decls: list = field(default_factory=list)
    tail: list = field(default_factory=list)
    after: list = field(default_factory=list)
    reductions: list = field(default_factory=list)
    values: dict = field(default_factory=dict)  # value -> (flat offset, SSA name)
    reduces: set = field(default_factory=set)
    stages: list = field(default_factory=list)  # (Stage, Iteration) built into this nest

    def clone(self) -> "_Nest":
        return _Nest(self.loops, self.body.copy(), list(self.decls), list(self.tail), list(self.after),
                     list(self.reductions), dict(self.values), set(self.reduces), list(self.stages))


def why_not(g: Graph, prims: list[Prim], outputs: Sequence[int], options: CodegenOptions) -> str | None:
    """None when loop nests compute the kernel: every prim but a linear one is elementwise, reduce,
    broadcast or layout (feasible.py checked them), and a linear one must be a convolution with few
    taps per output, written out tap by tap (stencil.py)."""
    for p in prims:
        if p.kind is Kind.LINEAR:
            reason = stencil.why_not(g, p)
            if reason is not None:
                return reason
    return None


def lower(g: Graph, members: set[int], outputs: list[int], threads: int, options: CodegenOptions,
          name: str | None) -> KernelSpec:
    """The loop nests of the kernel (``why_not`` said None), reductions read through a permutation
    computed in that order (reduce_order.py)."""
    permuted, members = permuted_reduces(g, members, outputs)
    spec = LoopLowerer(permuted, members, outputs, threads, options).run(name)
    return spec if permuted is g else dataclasses.replace(spec, traits=spec.traits + ("permuted reduce",))


class LoopLowerer(KernelLowerer):
    """KernelSpec of loop nests (``why_not`` must have said None)."""

    def __init__(self, g: Graph, members: set[int], outputs: list[int], threads: int,
                 options: CodegenOptions = DEFAULT_CODEGEN) -> None:
        super().__init__(g, members, outputs)
        self.threads, self.options = threads, options
        self.traits: set[str] = set()  # KernelSpec.traits

    def run(self, name: str | None) -> KernelSpec:
        g = self.g
        for p in self.prims:  # depthwise weights channels-last: a channels-last loop reads them contiguously
            if p.op is Op.CONV and g.types[p.inputs[1]].shape[1] == 1 and len(g.types[p.inputs[1]].shape) == 4:
                self.pack(p.inputs[1], (2, 3, 1, 0))
        sch = make_schedule(g, self.prims, self.outputs, self.vs, self.threads, window_sums=self.options.window_sums)
        args = self.assign_buffers(sch)
        body = tuple(self.group([sch.stages[k] for k in ks], P) for ks, P in sch.groups)
        comment, local = self.describe()
        notes = [f"group {gi}: P={P}, stages " + ", ".join(local[sch.stages[k].value] for k in ks)
                 for gi, (ks, P) in enumerate(sch.groups)]
        compared = extremes.stored_values(self.prims) - set(self.outputs)
        if sch.mat - {st.value for st in sch.stages if st.reduce} - set(self.outputs) - compared:
            stored = [v for v in sorted(sch.mat) if v not in self.outputs and v not in compared
                      and self.producers[v].kind is not Kind.REDUCE]
            notes.append("stored to avoid recomputation: " + ", ".join(local[v] for v in stored))
            self.traits.add("stored to avoid recomputation")
        if compared:
            notes.append("stored once, compared with its own max/min: " + ", ".join(local[v] for v in sorted(compared)))
        key = g.kernel_key(set(self.producers), self.outputs)
        self.traits |= {"stencil" for p in self.prims if p.op is Op.CONV}
        self.traits |= {"window sums"} if sch.windows else set()
        self.traits |= {"reduce" for p in self.prims if p.kind is Kind.REDUCE and p.output not in sch.windows}
        return KernelSpec(name=name or f"kn_{key[:16]}", args=args, body=body, sizes=tuple(self.vs.sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=self.arena, notes=tuple(notes) + self.pack_notes(), packs=self.pack_specs(),
                          traits=tuple(sorted(self.traits)))

    # -- groups and stages ------------------------------------------------------------------
    def group(self, stages: list[Stage], P: int) -> Parallel:
        self.o, self.P = self.vs.new(P), P
        self.local: dict[int, tuple[str, int]] = {}
        self.arrays: list[Decl] = []
        stmts: list = []
        nest: _Nest | None = None
        for st in stages:
            I = st.size // P
            dtype = self.g.types[st.value].dtype
            if st.value not in self.buf:
                nm = f"{'r' if I == 1 else 'l'}{next(self.names)}"
                self.local[st.value] = (nm, I)
                if I == 1 and not st.reduce:
                    stmts.append(Decl(nm, dtype))
                elif I > 1:
                    self.arrays.append(Decl(nm, dtype, I))
            if st.reduce and I > 1:
                stmts += self._flush(nest)
                nest = None
                stmts += self._array_reduce(st, I)
                continue
            it = indexing.split(st.shape, st.axes, P, self.o, self.vs.new, self.vs.sizes)
            if nest is not None and tuple(e for _, e, _ in it.loops) == tuple(e for _, e, _ in nest.loops):
                shared = iter([v for v, _, _ in nest.loops])
                it2 = indexing.split(st.shape, st.axes, P, self.o, lambda n: next(shared), self.vs.sizes)
                trial = nest.clone()
                try:
                    self._build(trial, st, it2)
                    nest = trial
                    continue
                except _NoFuse:
                    pass
            stmts += self._flush(nest)
            nest = _Nest(it.loops, Body(self.names))
            self._build(nest, st, it)
        stmts += self._flush(nest)
        threads = P > 1 and work(stages) >= PARALLEL_MIN_WORK
        return Parallel(self.o, P, tuple(stmts), tuple(self.arrays), threads)

    def _build(self, nest: _Nest, st: Stage, it: indexing.Iteration) -> None:
        g, p = self.g, st.prim
        dtype = g.types[st.value].dtype
        nest.stages.append((st, it))
        inl = Inliner(g, self.producers, self.inline, self.vs.sizes, nest.body,
                      lambda v, idx, body: self._leaf(v, idx, body, nest))
        if st.reduce:
            op = self._reduce_op(st)
            val = nest.body.cast(inl.value(p.inputs[0], it.natural), dtype)
            acc = self.local[st.value][0] if st.value in self.local else f"a{next(self.names)}"
            adt = accumulator_dtype(op, dtype)
            nest.decls.append(Decl(acc, adt, 1, identity(op, adt)))
            nest.tail.append(Accum(acc, None, op, val, adt))
            nest.reductions.append((acc, op, adt))
            nest.reduces.add(st.value)
            if st.value in self.buf:
                off = self._flat(st.value, self._reduced_index(st, it.natural))
                nest.after.append(Store(self.buf[st.value], off, acc))
            return
        val = nest.body.cast(inl.compute(p, it.natural), dtype)
        off = self._flat(st.value, it.natural)
        nest.values[st.value] = (off, val)
        if st.value in self.buf:
            nest.tail.append(Store(self.buf[st.value], off, val))
        else:
            nm, I = self.local[st.value]
            nest.tail.append(Store(nm, self._local_offset(off, I) if I > 1 else None, val))

    def _flush(self, nest: _Nest | None, split: bool = True) -> list:
        if nest is None:
            return []
        inner: tuple = (*nest.body.lets, *nest.tail)
        if not nest.loops:
            return [*nest.decls, *inner, *nest.after]
        tiled = self._tile(nest, inner)
        if tiled is not None:
            return [*nest.decls, *tiled, *nest.after]
        pieces = self._split(nest) if split else None
        if pieces is not None:
            return [stmt for piece in pieces for stmt in self._flush(piece, split=False)]
        loops, inner = self._coalesce(list(nest.loops), inner)
        for depth, (var, extent, _) in enumerate(reversed(loops)):
            red = tuple(nest.reductions) if depth == 0 else ()
            inner = (Loop(var, ix.const(0), ix.const(extent), inner, simd=depth == 0, reductions=red),)
        return [*nest.decls, *inner, *nest.after]

    def _split(self, nest: _Nest) -> list[_Nest] | None:
        """Split the innermost loop at the points where a mask, a concat piece or a min/max in
        an index changes along it, rebuilding each piece over its own range: inside a piece the
        selects and clamps fold away (the interior of a pad is a plain copy loop)."""
        if nest.reductions or nest.decls or nest.after or not nest.stages:
            return None
        vi, n, dim = nest.loops[-1]
        points = {0, n}
        loose = []
        for e, exact in _split_exprs(nest.body.lets):
            if len(e.terms) != 1 or e.terms[0][0] != ix.Var(vi):
                continue
            k, c = e.terms[0][1], e.const
            x = -(c // k) if k > 0 else (c // -k) + 1  # first index where k*x + c >= 0 flips
            if exact:
                points.add(x)
            elif c % k:
                points.add(x)
            else:
                loose.append(-c // k)  # a min/max tie at x: splitting at x or x + 1 both work
        points.update(x for x in loose if x not in points and x + 1 not in points)
        points = {x for x in points if 0 <= x <= n}
        if len(points) <= 2 or len(points) > MAX_PIECES + 1:
            return None
        cuts = sorted(points)
        pieces = []
        for lo, hi in zip(cuts, cuts[1:]):
            u = self.vs.new(hi - lo)
            mapping = {vi: ix.var(u) + lo}
            piece = _Nest((*nest.loops[:-1], (u, hi - lo, dim)), Body(self.names))
            try:
                for st, it in nest.stages:
                    nat = tuple(self.vs.subst(e, mapping) for e in it.natural)
                    self._build(piece, st, indexing.Iteration(it.outer, nat, piece.loops))
            except _NoFuse:
                return None
            pieces.append(piece)
        return pieces

    def _tile(self, nest: _Nest, inner: tuple) -> tuple | None:
        """Loops for a transposed read (contiguous along a loop other than the innermost): tile
        that loop and the innermost one so reads and writes both stay within cached lines.
        None when there is nothing to tile (or the nest reduces)."""
        if nest.reductions or len(nest.loops) < 2:
            return None
        offsets = [let.attr[1] for let in nest.body.lets if let.op == "load" and let.attr[1] is not None]
        vars_ = [ix.var(v) for v, _, _ in nest.loops]
        k = transposed_dim(vars_, offsets)
        if k is None:
            return None
        (vk, nk, _), (vi, ni, _) = nest.loops[k], nest.loops[-1]
        if nk < TILE or ni < TILE:
            return None
        copy = transpose.block_copy(inner, vk, vi)
        if copy is not None:  # a layout conversion: whole tiles transposed in registers
            self.traits.add("layout tiles")
            tk, ti = self.vs.new(nk // TILE), self.vs.new(ni // TILE)
            body = transpose.tiles(copy, vk, nk, vi, ni, tk, ti, inner, self.vs.subst)
            return self._around(nest, k, body)
        self.traits.add("tiled transposed read")
        tk, ti = self.vs.new(-(-nk // TILE)), self.vs.new(-(-ni // TILE))
        sizes = self.vs.sizes

        def bounds(t: int, n: int):
            lo = ix.var(t) * TILE
            return lo, ix.minimum(lo + TILE, n, sizes)

        body: tuple = (Loop(vi, *bounds(ti, ni), inner),)  # strided reads: let gcc decide on SIMD
        body = (Loop(vk, *bounds(tk, nk), body),)
        body = (Loop(tk, ix.const(0), ix.const(sizes[tk]), (Loop(ti, ix.const(0), ix.const(sizes[ti]), body),)),)
        return self._around(nest, k, body)

    @staticmethod
    def _around(nest: _Nest, k: int, body: tuple) -> tuple:
        """``body`` (the tiled loops k and innermost) inside the nest's other loops."""
        for var, extent, _ in reversed([lp for j, lp in enumerate(nest.loops) if j not in (k, len(nest.loops) - 1)]):
            body = (Loop(var, ix.const(0), ix.const(extent), body),)
        return body

    def _coalesce(self, loops: list, stmts: tuple) -> tuple[list, tuple]:
        """Merge adjacent loops (a, b) into one loop c = a*nb + b when every index expression of
        the body stays affine in c (e.g. the H and W loops of a contiguous NCHW tensor), so the
        SIMD loop gets long. Only for nests whose loops are all alike (all elementwise or all
        reduced), which is every nest that reaches here."""
        j = len(loops) - 2
        while j >= 0:
            (a, na, _), (b, nb, db) = loops[j], loops[j + 1]
            c = self.vs.new(na * nb)
            sizes = self.vs.sizes
            mapping = {a: ix.floordiv(ix.var(c), nb, sizes), b: ix.mod(ix.var(c), nb, sizes)}
            new = _rewrite(stmts, lambda e: self.vs.subst(e, mapping), c)
            if new is not None:
                loops[j:j + 2] = [(c, na * nb, db)]
                stmts = new
            j -= 1
        return loops, stmts

    def _array_reduce(self, st: Stage, I: int) -> list:
        """A reduction with several results per o: a per-thread accumulator array."""
        g, p = self.g, st.prim
        dtype, op = g.types[st.value].dtype, self._reduce_op(st)
        acc = self.local[st.value][0] if st.value in self.local else f"a{next(self.names)}"
        if st.value not in self.local:
            self.arrays.append(Decl(acc, dtype, I))
        out: list = [self._fill(acc, I, identity(op, dtype), dtype)]
        it = indexing.split(st.shape, st.axes, self.P, self.o, self.vs.new, self.vs.sizes)
        body = Body(self.names)
        inl = Inliner(g, self.producers, self.inline, self.vs.sizes, body,
                      lambda v, idx, b: self._leaf(v, idx, b, None))
        val = body.cast(inl.value(p.inputs[0], it.natural), dtype)
        off = self._local_offset(self._flat(st.value, self._reduced_index(st, it.natural)), I)
        loops = interchange(list(it.loops), st.axes)
        var, extent, dim = loops[-1]
        if dim in st.axes:
            part = f"a{next(self.names)}"
            adt = accumulator_dtype(op, dtype)
            loop = Loop(var, ix.const(0), ix.const(extent), (*body.lets, Accum(part, None, op, val, adt)),
                        simd=True, reductions=((part, op, adt),))
            inner: tuple = (Decl(part, adt, 1, identity(op, adt)), loop, Accum(acc, off, op, part, dtype))
        else:
            update = (*body.lets, Accum(acc, off, op, val, dtype))
            inner = (Loop(var, ix.const(0), ix.const(extent), update, simd=True),)
        for var, extent, _ in reversed(loops[:-1]):
            inner = (Loop(var, ix.const(0), ix.const(extent), inner),)
        out += inner
        if st.value in self.buf:
            k = self.vs.new(I)
            t = f"t{next(self.names)}"
            base = ix.var(self.o) * I + ix.var(k)
            out.append(Loop(k, ix.const(0), ix.const(I), (Let(t, dtype, "load", (), (acc, ix.var(k))),
                                                          Store(self.buf[st.value], base, t)), simd=True))
        return out

    def _fill(self, buf: str, n: int, value, dtype: str) -> Loop:
        k = self.vs.new(n)
        t = f"t{next(self.names)}"
        value = np.asarray(value).astype(dtype).item()
        return Loop(k, ix.const(0), ix.const(n), (Let(t, dtype, "imm", (), value), Store(buf, ix.var(k), t)), simd=True)

    # -- reads ------------------------------------------------------------------------------
    def _leaf(self, v: int, idx: tuple, body: Body, nest: _Nest | None) -> str:
        dtype = self.g.types[v].dtype
        if v in self.imm:
            return body.imm(self.imm[v], dtype)
        if nest is not None and v in nest.reduces:
            raise _NoFuse()
        off = self._flat(v, idx)
        if nest is not None and v in nest.values:
            if nest.values[v][0] != off:
                raise _NoFuse()
            return nest.values[v][1]
        if v in self.buf:
            return body.let("load", dtype, (), (self.buf[v], self._clamped_flat(v, idx)))
        nm, I = self.local[v]
        if I == 1:
            return body.let("load", dtype, (), (nm, None))
        return body.let("load", dtype, (), (nm, self._clamp(self._local_offset(off, I), I)))

    def _local_offset(self, off: ix.Expr, I: int) -> ix.Expr:
        return indexing.normalize(off - ix.var(self.o) * I, self.vs.sizes)


def _split_exprs(lets) -> list[tuple[ix.Expr, bool]]:
    """Expressions whose sign change moves a mask or a min/max choice: ``e - lo`` and ``e - hi``
    of every condition (exact: the split must fall where the sign flips), ``a - b`` of every
    min/max inside an index (not exact: at a tie either side works)."""
    out: list[tuple[ix.Expr, bool]] = []

    def walk(e: ix.Expr) -> None:
        for a, _ in e.terms:
            if isinstance(a, (ix.MinOf, ix.MaxOf)):
                out.append((a.a - a.b, False))
                walk(a.a)
                walk(a.b)
            elif isinstance(a, (ix.FloorDiv, ix.Mod, ix.Lookup)):
                walk(a.x)

    for let in lets:
        if let.op == "cond":
            e, lo, hi = let.attr
            out += [(e - b, True) for b in (lo, hi) if b is not None]
            walk(e)
        elif let.op == "load" and let.attr[1] is not None:
            walk(let.attr[1])
    return out


def _rewrite(stmts: tuple, fn, var: int) -> tuple | None:
    """Apply ``fn`` to every index expression of ``stmts``; None if a result uses ``var`` other
    than as a plain affine term."""
    def ok(e: ix.Expr) -> bool:
        return all(isinstance(a, ix.Var) or var not in ix.free_vars(ix.Expr(((a, 1),), 0)) for a, _ in e.terms)

    out = []
    for s in stmts:
        if isinstance(s, Let) and s.op == "load" and s.attr[1] is not None:
            e = fn(s.attr[1])
            s = Let(s.name, s.dtype, s.op, s.args, (s.attr[0], e))
        elif isinstance(s, Let) and s.op == "cond":
            e = fn(s.attr[0])
            s = Let(s.name, s.dtype, s.op, s.args, (e, *s.attr[1:]))
        elif isinstance(s, (Store, Accum)) and s.offset is not None:
            e = fn(s.offset)
            s = Store(s.buf, e, s.value) if isinstance(s, Store) else Accum(s.acc, e, s.op, s.value, s.dtype)
        else:
            out.append(s)
            continue
        if not ok(e):
            return None
        out.append(s)
    return tuple(out)


TEMPLATE = Template("loops", why_not, lower, reads=("window_sums",),
                    doc="loop nests of elementwise, reduce, broadcast and layout prims and stencil convolutions")
