"""What the C and the Triton lowerers share: a kernel's boundary (external inputs, one-element
constants folded to immediates), which materialized values get a buffer, reads of buffered
values (flat offsets clamped into range), the reduction vocabulary and the kernel's description.

The C kernel templates (loops.py, gemm.py, winograd.py: templates.py) and triton_lower.py (tile
programs) subclass ``KernelLowerer`` and build their own structure; none prints syntax.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from kernorch.codegen import indexing
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.kernel import Arg
from kernorch.codegen.schedule import Schedule, Stage, Vars
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import NoAttrs, Op

REDUCE_OP = {Op.SUM: "sum", Op.PROD: "prod", Op.RMAX: "max", Op.RMIN: "min"}
BOOL_REDUCE = {"sum": "max", "prod": "min", "max": "max", "min": "min"}
ARENA_ALIGN = 64  # bytes; scratch values packed into one workspace start on cache lines


def accumulator_dtype(op: str, dtype: str) -> str:
    """float32 sums accumulate in double: a row of thousands of values summed in float32 drifts
    past the verification tolerance (the interpreter sums pairwise), and these loops are memory-
    bound, so the wider accumulator is nearly free."""
    return "float64" if op == "sum" and dtype == "float32" else dtype


def identity(op: str, dtype: str):
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if dtype == "bool":
        return op == "min"
    if dtype.startswith("float"):
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(dtype)
    return int(info.min if op == "max" else info.max)


class KernelLowerer:
    """The boundary of one kernel (``members`` of ``g`` producing ``outputs``) and the helpers
    both lowerers read through. Subclasses set ``self.vs`` (variable ranges) before lowering."""

    def __init__(self, g: Graph, members: set[int], outputs: list[int]) -> None:
        self.g, self.outputs = g, outputs
        self.prims = kernel_prims(g, members)
        self.producers = {p.output: p for p in self.prims}
        self.vs = Vars()
        self.names = itertools.count()
        ins, _ = g.boundary(members)
        self.imm = {v: g.constants[v].reshape(()) for v in ins if v in g.constants and g.constants[v].size == 1}
        self.ext = [v for v in ins if v not in self.imm]
        # constant input -> (dim order, panel width, transform)
        self.packs: dict[int, tuple[tuple[int, ...], int, str]] = {}

    def pack(self, v: int, perm: tuple[int, ...], panel: int = 0, transform: str = "") -> None:
        """Read constant input ``v`` with its dims in ``perm`` order, or with ``panel`` that as a
        (K, N) matrix in panels of ``panel`` columns, or ``transform``ed (``packing.TRANSFORMS``):
        a copy the runner makes once, ``packing.packed_copy``. A panel-packed input is read
        through a pointer, never by index."""
        if v in self.ext and v in self.g.constants and (panel or transform or tuple(perm) != tuple(range(len(perm)))):
            self.packs[v] = (tuple(perm), panel, transform)

    def pack_notes(self) -> tuple[str, ...]:
        return tuple(f"in{self.ext.index(v)} packed once " + (f"as its {transform} transform" if transform else
                                                               f"with its dims in order {perm}")
                     + (f", in panels of {panel} columns" if panel else "")
                     for v, (perm, panel, transform) in self.packs.items())

    def pack_specs(self) -> tuple[tuple[int, tuple[int, ...], int, str], ...]:
        """``KernelSpec.packs``: (input position, permutation, panel width, transform) of every packed input."""
        return tuple((self.ext.index(v), perm, panel, transform) for v, (perm, panel, transform) in self.packs.items())

    def assign_buffers(self, sch: Schedule, forced: set[int] = frozenset(), arena: bool = True) -> tuple[Arg, ...]:
        """Give a buffer (``self.buf``: value -> name) to every input, output and scratch value:
        values read by another group of the schedule, and ``forced`` ones. Also sets
        ``self.inline`` (values computed where they are read) and ``self.arena`` (workspace bytes:
        with ``arena`` scratch values are packed into one workspace at aligned offsets)."""
        g = self.g
        self.inline = set(self.producers) - sch.mat
        group_of = {sch.stages[k].value: gi for gi, (ks, _) in enumerate(sch.groups) for k in ks}
        crossing = {v for gi, (ks, _) in enumerate(sch.groups) for k in ks for v, _ in sch.stages[k].reads
                    if group_of[v] != gi}
        scratch = [st.value for st in sch.stages
                   if (st.value in crossing or st.value in forced) and st.value not in self.outputs]
        self.buf: dict[int, str] = {}
        args = []
        self.arena = 0
        for role, vals in (("in", self.ext), ("out", self.outputs), ("ws", scratch)):
            for k, v in enumerate(vals):
                self.buf[v] = f"{role}{k}"
                t = g.types[v]
                if role == "ws" and arena:
                    args.append(Arg(self.buf[v], t.dtype, t.size, role, self.arena))
                    self.arena += -(-np.dtype(t.dtype).itemsize * t.size // ARENA_ALIGN) * ARENA_ALIGN
                else:
                    args.append(Arg(self.buf[v], t.dtype, t.size, role))
        return tuple(args)

    def describe(self) -> tuple[str, dict[int, str]]:
        """The kernel as text (one line per prim, for the generated source's comment) and the
        local name of every value."""
        local = {v: f"in{k}" for k, v in enumerate(self.ext)}
        local.update({v: f"c{np.asarray(a).item()!r}" for v, a in self.imm.items()})
        lines = []
        for k, p in enumerate(self.prims):
            local[p.output] = f"v{k}"
            if p.op is Op.VIEW:
                attrs = f"masked pad={p.attrs.map.pad}" if p.attrs.map.mask else ""
            else:
                attrs = "" if isinstance(p.attrs, NoAttrs) else repr(p.attrs)
            lines.append(f"{local[p.output]} = {p.op.value}({', '.join(local[a] for a in p.inputs)}) "
                         f"{self.g.types[p.output]!r} {attrs}".rstrip())
        lines.append("outputs: " + ", ".join(local[v] for v in self.outputs))
        return "\n".join(lines), local

    # -- reads ------------------------------------------------------------------------------
    def _flat(self, v: int, idx: Sequence[ix.Expr]) -> ix.Expr:
        shape, (perm, panel, _) = self.g.types[v].shape, self.packs.get(v, (None, 0, ""))
        assert not panel, "a panel-packed input is read through its pointer"
        if perm is not None:
            return indexing.flat([idx[d] for d in perm], [shape[d] for d in perm], self.vs.sizes)
        return indexing.flat(idx, shape, self.vs.sizes)

    def _clamped_flat(self, v: int, idx: Sequence[ix.Expr]) -> ix.Expr:
        """Flat offset with each dim index clamped where it may leave its range (masked-out
        positions, other concat pieces). Per dim, so parts invariant in the inner loop hoist."""
        shape = self.g.types[v].shape
        return self._flat(v, [self._clamp(e, n) for e, n in zip(idx, shape)])

    def _clamp(self, off: ix.Expr, n: int) -> ix.Expr:
        """Masked-out positions may index outside the buffer; keep every load in bounds (the
        value there is discarded by the select)."""
        lo, hi = ix.bounds(off, self.vs.sizes)
        if lo >= 0 and hi < n:
            return off
        return ix.minimum(ix.maximum(off, 0, self.vs.sizes), n - 1, self.vs.sizes)

    def _reduced_index(self, st: Stage, natural: Sequence[ix.Expr]) -> list[ix.Expr]:
        keep = st.prim.attrs.keepdims
        return [ix.const(0) if d in st.axes else e for d, e in enumerate(natural) if keep or d not in st.axes]

    def _reduce_op(self, st: Stage) -> str:
        op = REDUCE_OP[st.prim.op]
        return BOOL_REDUCE[op] if self.g.types[st.value].dtype == "bool" else op
