"""Scheduling decisions for a C kernel: what to materialize, how stages group under a shared
parallel outer index, and the outer extent P of each group. See Note [parallel domain].

Note [parallel domain]
A *stage* computes one materialized value: a reduce result, a kernel output, or an internal
value too costly to recompute (``heavy``). Every other member is inlined where it is read.
A stage's elements are split row-major into P equal slices; the slice index is the outer index
``o`` (a prefix split: leading dims times a divisor of the next one; reduced dims never go
outer). A *group* is a run of consecutive stages sharing o: one parallel loop over o, and for
each o the stages run in order. That is legal when every read of a value materialized in the
same group lands in the slice of the same o (checked symbolically: flat(index) // slice == o),
so the data of a row/channel/group stays in cache between stages. A stage joins the current
group unless that leaves fewer outer iterations than threads where the group and the stage
could each have had enough on their own; then a new group starts (a separate parallel loop)
and values read across groups go to scratch memory. P is chosen per group: enough outer
iterations for the threads (PAR_PER_THREAD each), long contiguous inner loops for SIMD, then
as many outer iterations as possible (so reductions get scalar accumulators).

A GPU grid (``grid=True``, the Triton path) is not a thread count: every outer iteration is a
program (or a lane of one), so the scheduler keeps each group as wide as its stages allow, never
narrows a group to fuse a stage into it, and picks the widest P (SIMD length only breaks ties).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from kernorch.codegen import extremes, indexing, stencil, window
from kernorch.codegen.scalar import Inliner
from kernorch.codegen.ssa import WEIGHT, Body
from kernorch.codegen.transpose import TILE
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim

PAR_PER_THREAD = 8  # outer iterations per thread that make static scheduling balance well
VEC_TARGET = 256  # inner contiguous elements that make SIMD loops efficient
SHORT_REDUCE = 16  # trailing reduced extent below which a non-reduced loop is moved innermost
HEAVY = 8  # recomputation weight (WEIGHT units per element) above which a shared value is stored
GROUP_COST = 1 << 15  # WEIGHT units a storing decision must save to be worth an extra group


@dataclass
class Stage:
    value: int
    prim: Prim
    reduce: bool
    shape: tuple[int, ...]  # iteration shape: the value's shape, or the reduce operand's
    axes: tuple[int, ...]  # reduced axes of ``shape``
    size: int  # elements of the value
    cands: set[int]  # valid outer extents P
    reads: list[tuple[int, tuple]] = field(default_factory=list)  # materialized (value, natural index)
    natural: tuple[int, ...] = ()  # analysis variable of each dim of ``shape``
    visited: set[int] = field(default_factory=set)  # inlined values
    repeats: dict[int, int] = field(default_factory=dict)  # inlined values read at several window taps
    tdim: int | None = None  # a dim along which some load is contiguous while the last dim is not


@dataclass
class Schedule:
    stages: list[Stage]
    groups: list[tuple[list[int], int]]  # (stage positions, P)
    mat: set[int]
    windows: set[int] = field(default_factory=set)  # window reduces written out tap by tap (window.py)


class Vars:
    """Kernel-wide index variables and their ranges."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def new(self, extent: int) -> int:
        self.sizes.append(int(extent))
        return len(self.sizes) - 1

    def subst(self, e: ix.Expr, mapping: dict[int, ix.Expr]) -> ix.Expr:
        """``e`` with the variables of ``mapping`` replaced, the others kept (looked up per variable
        read: a kernel's lowering makes thousands of variables, and listing them all per call was
        most of its time)."""
        return indexing.normalize(ix.substitute(e, _Kept(mapping), self.sizes), self.sizes)


class _Kept:
    """``mapping[i]``, else variable ``i`` itself: the values ix.substitute reads."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: dict[int, ix.Expr]) -> None:
        self.mapping = mapping

    def __getitem__(self, i: int) -> ix.Expr:
        e = self.mapping.get(i)
        return ix.var(i) if e is None else e


def make_schedule(g: Graph, prims: list[Prim], outputs: list[int], vs: Vars, threads: int = 1, *,
                  grid: bool = False, window_sums: bool = True) -> Schedule:
    """The schedule for ``threads`` CPU threads, or for a GPU grid (``grid``; ``threads`` unused).
    ``window_sums``: CodegenOptions.window_sums. See Note [parallel domain]."""
    width = math.inf if grid else threads
    producers = {p.output: p for p in prims}
    # a small window reduce is written out tap by tap (window.py), on CPU loops only: inlined where
    # it is read, or an elementwise stage where it is stored
    windows = set() if grid or not window_sums else {p.output for p in prims if window.is_window(g, p, producers)}
    base = {p.output for p in prims if p.kind is Kind.REDUCE and p.output not in windows} | set(outputs)
    base |= extremes.stored_values(prims)  # compared with its own max/min: Note [extreme tests]
    mat = set(base)
    stages = _analyze(g, prims, producers, mat, vs, windows)
    saved = 0.0
    while True:
        heavy = _heavy(g, prims, producers, mat, stages)
        if heavy is None:
            break
        saved += heavy[1]
        mat.add(heavy[0])
        stages = _analyze(g, prims, producers, mat, vs, windows)
    groups = _group(g, stages, vs, width)
    if mat != base:
        plain = _analyze(g, prims, producers, base, vs, windows)
        plain_groups = _group(g, plain, vs, width)
        if saved < GROUP_COST * (len(groups) - len(plain_groups)):
            mat, stages, groups = base, plain, plain_groups
    return Schedule(stages, groups, mat, windows)


def _analyze(g: Graph, prims, producers, mat: set[int], vs: Vars, windows: set[int]) -> list[Stage]:
    """One stage per materialized value, with its reads of materialized values over natural
    (analysis) variables; a window reduce (``windows``) is an elementwise stage."""
    stages = []
    inline = {p.output for p in prims} - mat
    for p in prims:
        if p.output not in mat:
            continue
        t = g.types[p.output]
        reduce = p.kind is Kind.REDUCE and p.output not in windows
        if reduce:
            shape = g.types[p.inputs[0]].shape
            axes = tuple(a % len(shape) for a in p.attrs.axes)
        else:
            shape, axes = t.shape, ()
        out_shape = tuple(n for d, n in enumerate(shape) if d not in axes)
        st = Stage(p.output, p, reduce, tuple(shape), axes, t.size, indexing.split_candidates(out_shape))
        st.natural = tuple(vs.new(n) for n in shape)
        idx = tuple(ix.var(v) for v in st.natural)

        loads = []

        def leaf(v, index, body, st=st, loads=loads):
            if v in mat:
                st.reads.append((v, index))
            if g.types[v].size > 1:
                loads.append(indexing.flat(index, g.types[v].shape, vs.sizes))
            return body.imm(0, g.types[v].dtype)

        inl = Inliner(g, producers, inline, vs.sizes, Body(itertools.count()), leaf)
        if st.reduce:
            inl.value(p.inputs[0], idx)
        else:
            inl.compute(p, idx)
        st.visited, st.repeats = inl.visited, inl.repeats
        dims = [d for d, n in enumerate(shape) if n != 1]
        if not st.reduce:
            t = transposed_dim([ix.var(st.natural[d]) for d in dims], loads)
            st.tdim = None if t is None else dims[t]
        stages.append(st)
    return stages


def transposed_dim(loop_vars: list[ix.Expr], offsets: list[ix.Expr]) -> int | None:
    """Position of a loop variable with unit stride in some load whose stride along the last
    loop variable is not 0 or 1 (a transposed read); None if there is none."""
    if len(loop_vars) < 2:
        return None
    coefs = [dict(e.terms) for e in offsets]
    atoms = [v.as_atom() for v in loop_vars]
    for c in coefs:
        if c.get(atoms[-1], 0) in (0, 1):
            continue
        for d in range(len(atoms) - 1):
            if c.get(atoms[d]) == 1:
                return d
    return None


def _heavy(g: Graph, prims, producers, mat: set[int], stages: list[Stage]) -> tuple[int, float] | None:
    """The topologically last inlined value whose recomputation costs more than HEAVY per
    element: its weight (WEIGHT of the inlined ops below it) times the extra evaluations, i.e.
    how often each element is computed beyond once -- by several stages (exp in a softmax is
    needed by the sum and by the division) or repeatedly within one (a value broadcast into a
    reduction, or read by overlapping windows). Returns (value, work saved by storing it)."""
    weight: dict[int, int] = {}
    for p in prims:
        w = (WEIGHT.get(p.op, 1) if p.kind is Kind.ELEMENTWISE else stencil.weight(g, p) if p.op is Op.CONV
             else window.weight(g, p) if p.kind is Kind.REDUCE else 0)
        weight[p.output] = w + sum(weight.get(a, 0) for a in p.inputs if a in producers and a not in mat)
    evals: dict[int, float] = {}
    for st in stages:
        n = math.prod(st.shape)
        for v in st.visited:
            evals[v] = evals.get(v, 0.0) + n * st.repeats.get(v, 1) / g.types[v].size
    best = None
    for p in prims:
        v = p.output
        if v not in mat and weight[v] * (evals.get(v, 0.0) - 1) > HEAVY:
            best = v, weight[v] * (evals[v] - 1) * g.types[v].size
    return best


def _group(g: Graph, stages: list[Stage], vs: Vars, width: float) -> list[tuple[list[int], int]]:
    """Consecutive stages sharing an outer index, each group with its P; ``width``: the threads to
    keep busy (math.inf: a GPU grid)."""
    groups: list[tuple[list[int], set[int]]] = []
    for k, st in enumerate(stages):
        if groups:
            members, valid = groups[-1]
            inside = {stages[j].value for j in members}
            new = {P for P in valid & st.cands if _local(g, st, P, inside, vs)}
            if max(new) >= min(max(valid), max(st.cands), width):
                members.append(k)
                groups[-1] = (members, new)
                continue
        groups.append(([k], set(st.cands)))
    target = PAR_PER_THREAD * width
    return [(members, _choose([stages[j] for j in members], valid, vs, target)) for members, valid in groups]


def _local(g: Graph, st: Stage, P: int, inside: set[int], vs: Vars) -> bool:
    """Every read of a value of the group lands in the slice of the reading stage's o."""
    reads = [(v, idx) for v, idx in st.reads if v in inside]
    if not reads or P == 1:
        return True
    o = vs.new(P)
    it = indexing.split(st.shape, st.axes, P, o, vs.new, vs.sizes)
    if it is None:
        return False
    mapping = {nv: e for nv, e in zip(st.natural, it.natural)}
    for v, idx in reads:
        t = g.types[v]
        f = indexing.flat([vs.subst(e, mapping) for e in idx], t.shape, vs.sizes)
        if ix.bounds(ix.floordiv(f, t.size // P, vs.sizes) - ix.var(o), vs.sizes) != (0, 0):
            return False
    return True


def _choose(stages: list[Stage], valid: set[int], vs: Vars, target: float) -> int:
    """The P with the most parallel iterations (up to ``target``), then the longest contiguous
    inner loop. A P that keeps every thread busy and leaves each transposed read TILE elements
    to tile comes first (NHWC -> NCHW of 128 channels split 16 x 8 was a scalar loop, 8 x 16 is
    whole tiles)."""
    def score(P: int) -> tuple[bool, int, int, int]:
        contig = [_contig(st, P, vs) for st in stages]
        tileable = all(st.tdim is None or c >= TILE for st, c in zip(stages, contig))
        return tileable and P >= target // PAR_PER_THREAD, min(P, target), min(min(contig), VEC_TARGET), P

    return max(valid, key=score)


def interchange(loops: list, axes) -> list:
    """Loop order of a reduction with several results per o: when the trailing reduced loops
    are short (a pooling window), move the last non-reduced loop innermost so SIMD runs across
    results (acc[ow] over a window) instead of across a 3-element window."""
    red = [d in axes for _, _, d in loops]
    trailing = 1
    for (_, extent, d), r in zip(reversed(loops), reversed(red)):
        if not r:
            break
        trailing *= extent
    if not red or not red[-1] or all(red) or trailing >= SHORT_REDUCE:
        return loops
    j = max(k for k, r in enumerate(red) if not r)
    return loops[:j] + loops[j + 1:] + [loops[j]]


def _contig(st: Stage, P: int, vs: Vars) -> int:
    """Extent of the innermost loop when it runs along the last (contiguous) dim, else 1; for a
    transposed read, the smaller of that and the inner extent along the read's contiguous dim
    (both are needed to tile)."""
    it = indexing.split(st.shape, st.axes, P, vs.new(P), vs.new, vs.sizes)
    if it is None or not it.loops:
        return 1
    last = max((d for d, n in enumerate(st.shape) if n != 1), default=-1)
    var, extent, dim = it.loops[-1]
    if st.reduce:
        loops = interchange(list(it.loops), st.axes)
        if loops[-1] != it.loops[-1]:
            return loops[-1][1]
    if dim != last:
        return 1
    if st.tdim is not None:
        extent = min(extent, next((e for _, e, d in it.loops if d == st.tdim), 1))
    return extent


def work(stages: list[Stage]) -> int:
    return max(math.prod(st.shape) for st in stages)
