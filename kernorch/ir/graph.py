"""Primitive graphs: typed SSA in topological order, a Builder that infers every output type in one
place, a verifier, and the utilities the later stages need (producers, consumers, subgraphs,
canonical kernel keys)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import ml_dtypes  # noqa: F401 -- registers NumPy's "bfloat16" dtype name
import numpy as np

from kernorch.ir import layout
from kernorch.ir.layout import IndexMap
from kernorch.ir.prims import (BINARY, COMPARE, KIND, LOGICAL, NO_ATTRS, UNARY, Attrs, BroadcastAttrs, CastAttrs,
                               ConcatAttrs, ConvAttrs, GatherAttrs, Kind, Op, OpaqueAttrs, Prim, ReduceAttrs, ValueId,
                               ViewAttrs)

FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


@dataclass(frozen=True, slots=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize if self.dtype != "bfloat16" else self.size * 2

    def __repr__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


class GraphError(ValueError):
    """The graph breaks an IR invariant (found by ``verify``)."""


class Graph:
    """A primitive graph. Values not produced by a prim are graph inputs or constants."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_index")}

    def __init__(self) -> None:
        self.types: dict[ValueId, TensorType] = {}
        self.prims: list[Prim] = []
        self.inputs: list[ValueId] = []
        self.outputs: list[ValueId] = []
        self.constants: dict[ValueId, np.ndarray] = {}
        self.names: dict[ValueId, str] = {}

    # -- lookups ------------------------------------------------------------------------------
    def producers(self) -> dict[ValueId, Prim]:
        return {p.output: p for p in self.prims}

    def consumers(self) -> dict[ValueId, list[Prim]]:
        out: dict[ValueId, list[Prim]] = {v: [] for v in self.types}
        for p in self.prims:
            for v in dict.fromkeys(p.inputs):
                out[v].append(p)
        return out

    def name(self, v: ValueId) -> str:
        return self.names.get(v, f"%{v}")

    def _index(self) -> tuple[dict[ValueId, int], dict[ValueId, list[ValueId]], set[ValueId]]:
        """(position of each prim by output, consumer outputs of each value, graph outputs), cached:
        the orchestrator asks for boundaries and keys of tens of thousands of candidates. The cache
        is keyed on the prim list's identity, length and last prim, which is how graphs grow."""
        fp = (id(self.prims), len(self.prims), id(self.prims[-1]) if self.prims else None, tuple(self.outputs))
        if getattr(self, "_index_fp", None) != fp:
            pos = {p.output: i for i, p in enumerate(self.prims)}
            cons: dict[ValueId, list[ValueId]] = {}
            for p in self.prims:
                for v in dict.fromkeys(p.inputs):
                    cons.setdefault(v, []).append(p.output)
            self._index_cache = (pos, cons, set(self.outputs))
            self._index_cache_sigs = {}
            self._index_fp = fp
        return self._index_cache

    def _index_sigs(self):
        """``p -> 'op(attrs):type'``, memoized per prim (attribute reprs are the slow part of keys)."""
        self._index()
        cache = self._index_cache_sigs if hasattr(self, "_index_cache_sigs") else {}
        self._index_cache_sigs = cache

        def sig(p: Prim) -> str:
            s = cache.get(p.output)
            if s is None:
                attrs = "" if p.attrs is NO_ATTRS else repr(p.attrs)
                s = cache[p.output] = f"{p.op.value}{attrs}:{self.types[p.output]!r}"
            return s

        return sig

    def in_order(self, members: Iterable[ValueId]) -> list[Prim]:
        """The prims named by ``members`` in topological order."""
        pos = self._index()[0]
        return [self.prims[i] for i in sorted(pos[v] for v in members)]

    def counts_by_kind(self) -> dict[str, int]:
        out = {k.value: 0 for k in Kind}
        for p in self.prims:
            out[p.kind.value] += 1
        return out

    def next_id(self) -> ValueId:
        return max(self.types, default=-1) + 1

    # -- subgraphs and keys -------------------------------------------------------------------
    def boundary(self, members: Iterable[ValueId]) -> tuple[list[ValueId], list[ValueId]]:
        """Inputs (read, produced outside) and outputs (consumed outside or graph outputs) of a
        set of prims named by their output values, in first-use / topological order."""
        members = set(members)
        _, cons, graph_outs = self._index()
        ins: dict[ValueId, None] = {}
        outs: list[ValueId] = []
        for p in self.in_order(members):
            for v in p.inputs:
                if v not in members:
                    ins.setdefault(v)
            if p.output in graph_outs or any(c not in members for c in cons.get(p.output, ())):
                outs.append(p.output)
        return list(ins), outs

    def subgraph(self, members: Iterable[ValueId], outputs: Sequence[ValueId] | None = None) -> Graph:
        """The prims in ``members`` as a graph of their own; scalar constants stay constants,
        every other outside value becomes an input. ``outputs`` defaults to the boundary."""
        members = set(members)
        ins, outs = self.boundary(members)
        g = Graph()
        for p in self.in_order(members):
            g.prims.append(p)
            g.types[p.output] = self.types[p.output]
        for v in ins:
            g.types[v] = self.types[v]
            if v in self.constants and self.constants[v].ndim == 0:
                g.constants[v] = self.constants[v]
            else:
                g.inputs.append(v)
        g.outputs = list(outputs) if outputs is not None else outs
        g.names = {v: n for v, n in self.names.items() if v in g.types}
        return g

    def kernel_key(self, members: Iterable[ValueId], outputs: Sequence[ValueId] | None = None) -> str:
        """Canonical key of a set of prims: structure, attributes, shapes, dtypes and the values
        of scalar constants, independent of value ids. Identical kernels in repeated blocks share it."""
        members = set(members)
        ins, outs = self.boundary(members)
        outs = list(outputs) if outputs is not None else outs
        local: dict[ValueId, str] = {}
        parts = []
        for k, v in enumerate(ins):
            t = self.types[v]
            if v in self.constants and self.constants[v].ndim == 0:
                local[v] = f"c{self.constants[v].item()!r}:{t.dtype}"
            else:
                local[v] = f"in{k}"
                parts.append(f"in{k}:{t!r}")
        sigs = self._index_sigs()
        n = 0
        for p in self.in_order(members):
            local[p.output] = f"v{n}"
            n += 1
            args = ",".join(local[v] for v in p.inputs)
            parts.append(f"{local[p.output]}={args}{sigs(p)}")
        parts.append("out=" + ",".join(local[v] for v in outs))
        return hashlib.sha1(";".join(parts).encode()).hexdigest()

    def to_text(self) -> str:
        lines = []
        for v in self.inputs:
            lines.append(f"input {self.name(v)}: {self.types[v]!r}")
        for p in self.prims:
            args = ", ".join(self.name(v) for v in p.inputs)
            attrs = "" if p.attrs is NO_ATTRS else f" {p.attrs!r}"
            lines.append(f"{self.name(p.output)}: {self.types[p.output]!r} = {p.op.value}({args}){attrs}")
        lines.append("outputs " + ", ".join(self.name(v) for v in self.outputs))
        return "\n".join(lines)


def verify(g: Graph) -> None:
    """Check the invariants: values defined before use, exactly one producer, types consistent
    with what the Builder would infer, outputs defined."""
    defined = set(g.inputs) | set(g.constants)
    for v in defined:
        if v not in g.types:
            raise GraphError(f"value %{v} has no type")
    for p in g.prims:
        for v in p.inputs:
            if v not in defined:
                raise GraphError(f"{p.op.value} reads %{v} before it is defined")
        if p.output in defined:
            raise GraphError(f"%{p.output} is defined twice")
        want = None if p.op is Op.OPAQUE else infer_type(p.op, [g.types[v] for v in p.inputs], p.attrs)
        if want is not None and want != g.types[p.output]:
            raise GraphError(f"{p.op.value} -> %{p.output}: type {g.types[p.output]!r}, expected {want!r}")
        defined.add(p.output)
    for v in g.outputs:
        if v not in defined:
            raise GraphError(f"output %{v} is never defined")


def index_limits(g: Graph) -> dict[ValueId, int]:
    """Values read as runtime gather indices -> the smallest gathered axis they index (n: valid
    indices are [-n, n)), followed back through views, broadcasts and casts to the value they
    copy. Random test data for those values must stay in range: the interpreter rejects
    out-of-range indices (Note [gather bounds] in ir/layout.py)."""
    limits: dict[ValueId, int] = {}
    for p in reversed(g.prims):
        if p.op is Op.GATHER:
            for v, ax in zip(p.inputs[1:], p.attrs.axes):
                limits[v] = min(limits.get(v, p.attrs.data.in_shape[ax]), p.attrs.data.in_shape[ax])
        elif p.op in (Op.VIEW, Op.BROADCAST, Op.CAST) and p.output in limits:
            v = p.inputs[0]
            limits[v] = min(limits.get(v, limits[p.output]), limits[p.output])
    return limits


# ---------------------------------------------------------------------------------------------
# Type inference
# ---------------------------------------------------------------------------------------------

def infer_type(op: Op, ins: Sequence[TensorType], attrs: Attrs) -> TensorType:
    kind = KIND[op]
    if kind is Kind.ELEMENTWISE:
        full = [t for t in ins if t.shape != ()]
        shape = full[0].shape if full else ()
        for t in full:
            if t.shape != shape:
                raise GraphError(f"{op.value}: operand shapes differ {[t.shape for t in ins]}")
        if op is Op.CAST:
            return TensorType(shape, attrs.dtype)
        if op in COMPARE:
            return TensorType(shape, "bool")
        if op is Op.WHERE:
            return TensorType(shape, ins[1].dtype)
        arity = 1 if op in UNARY else 2 if op in BINARY else 3
        if len(ins) != arity:
            raise GraphError(f"{op.value} takes {arity} operands, got {len(ins)}")
        if op in LOGICAL:
            return TensorType(shape, "bool")
        return TensorType(shape, ins[0].dtype)
    if kind is Kind.REDUCE:
        (t,) = ins
        axes = tuple(sorted(a % len(t.shape) for a in attrs.axes)) if t.shape else ()
        if attrs.keepdims:
            shape = tuple(1 if d in axes else n for d, n in enumerate(t.shape))
        else:
            shape = tuple(n for d, n in enumerate(t.shape) if d not in axes)
        return TensorType(shape, t.dtype)
    if op is Op.BROADCAST:
        layout.broadcast(ins[0].shape, attrs.shape)  # validates
        return TensorType(tuple(attrs.shape), ins[0].dtype)
    if op is Op.VIEW:
        if tuple(ins[0].shape) != attrs.map.in_shape:
            raise GraphError(f"view expects input {attrs.map.in_shape}, got {ins[0].shape}")
        return TensorType(attrs.map.out_shape, ins[0].dtype)
    if op is Op.GATHER:
        return _gather_type(ins, attrs)
    if op is Op.CONCAT:
        ax = attrs.axis
        base = list(ins[0].shape)
        for t in ins[1:]:
            if len(t.shape) != len(base) or any(a != b for d, (a, b) in enumerate(zip(t.shape, base)) if d != ax):
                raise GraphError(f"concat: incompatible shapes {[t.shape for t in ins]}")
        base[ax] = sum(t.shape[ax] for t in ins)
        return TensorType(tuple(base), ins[0].dtype)
    if op is Op.MATMUL:
        a, b = ins
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise GraphError("matmul operands must have rank >= 2 (fission adds the unit dims)")
        if a.shape[-1] != b.shape[-2]:
            raise GraphError(f"matmul: inner dims differ {a.shape} @ {b.shape}")
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return TensorType(tuple(batch) + (a.shape[-2], b.shape[-1]), a.dtype)
    if op in (Op.CONV, Op.CONV_TRANSPOSE):
        return TensorType(conv_out_shape(op, ins[0].shape, ins[1].shape, attrs), ins[0].dtype)
    raise GraphError(f"cannot infer the type of {op.value}")


def _gather_type(ins: Sequence[TensorType], a: GatherAttrs) -> TensorType:
    if tuple(ins[0].shape) != a.data.in_shape:
        raise GraphError(f"gather expects data {a.data.in_shape}, got {ins[0].shape}")
    if len(ins) != 1 + len(a.axes) or len(a.indices) != len(a.axes):
        raise GraphError(f"gather on axes {a.axes} takes {1 + len(a.axes)} operands and index maps, "
                         f"got {len(ins)} and {len(a.indices)}")
    if a.data.mask or any(m.mask for m in a.indices):
        raise GraphError("gather maps carry no masks")
    for t, m, ax in zip(ins[1:], a.indices, a.axes):
        if t.dtype not in ("int32", "int64"):
            raise GraphError(f"gather indices must be int32 or int64, got {t.dtype}")
        if tuple(t.shape) != m.in_shape or m.out_shape != a.data.out_shape:
            raise GraphError(f"gather index map {m.in_shape} -> {m.out_shape} does not fit index {t.shape} "
                             f"and output {a.data.out_shape}")
        if not 0 <= ax < len(a.data.in_shape) or a.data.in_shape[ax] == 0:
            raise GraphError(f"gather axis {ax} is not a non-empty data axis of {a.data.in_shape}")
    return TensorType(a.data.out_shape, ins[0].dtype)


def conv_out_shape(op: Op, x: Sequence[int], w: Sequence[int], a: ConvAttrs) -> tuple[int, ...]:
    k = len(x) - 2
    out = [x[0]]
    if op is Op.CONV:
        out.append(w[0])
        for s in range(k):
            eff = a.dilations[s] * (w[2 + s] - 1) + 1
            out.append((x[2 + s] + a.pads[s] + a.pads[k + s] - eff) // a.strides[s] + 1)
    else:
        out.append(w[1] * a.groups)
        for s in range(k):
            op_ = a.output_padding[s] if a.output_padding else 0
            out.append(a.strides[s] * (x[2 + s] - 1) + op_ + ((w[2 + s] - 1) * a.dilations[s] + 1)
                       - a.pads[s] - a.pads[k + s])
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Builder
# ---------------------------------------------------------------------------------------------

class Builder:
    """Appends prims to a graph, inferring output types; skips identity views."""

    def __init__(self, graph: Graph | None = None, origin: str = "") -> None:
        self.g = graph if graph is not None else Graph()
        self.origin = origin
        self._next = self.g.next_id()

    def _new(self, t: TensorType) -> ValueId:
        v = self._next
        self._next += 1
        self.g.types[v] = t
        return v

    def type(self, v: ValueId) -> TensorType:
        return self.g.types[v]

    def shape(self, v: ValueId) -> tuple[int, ...]:
        return self.g.types[v].shape

    # -- leaves -------------------------------------------------------------------------------
    def input(self, shape: Sequence[int], dtype: str = "float32", name: str | None = None) -> ValueId:
        v = self._new(TensorType(tuple(int(s) for s in shape), dtype))
        self.g.inputs.append(v)
        if name:
            self.g.names[v] = name
        return v

    def constant(self, array, dtype: str | None = None, name: str | None = None) -> ValueId:
        arr = np.asarray(array, dtype=dtype)
        v = self._new(TensorType(tuple(arr.shape), str(arr.dtype)))
        self.g.constants[v] = arr
        if name:
            self.g.names[v] = name
        return v

    def scalar(self, value, dtype: str = "float32") -> ValueId:
        return self.constant(np.asarray(value, dtype=dtype))

    def prim(self, op: Op, inputs: Sequence[ValueId], attrs: Attrs = NO_ATTRS, out_type: TensorType | None = None) -> ValueId:
        t = out_type if out_type is not None else infer_type(op, [self.g.types[v] for v in inputs], attrs)
        v = self._new(t)
        self.g.prims.append(Prim(op, tuple(inputs), v, attrs, self.origin))
        return v

    # -- elementwise ----------------------------------------------------------------------------
    def unary(self, op: Op, x: ValueId) -> ValueId:
        return self.prim(op, [x])

    def binary(self, op: Op, a: ValueId, b: ValueId) -> ValueId:
        a, b = self.broadcast_operands(a, b)
        return self.prim(op, [a, b])

    def where(self, c: ValueId, a: ValueId, b: ValueId) -> ValueId:
        c, a, b = self.broadcast_operands(c, a, b)
        return self.prim(Op.WHERE, [c, a, b])

    def cast(self, x: ValueId, dtype: str) -> ValueId:
        if self.type(x).dtype == dtype:
            return x
        return self.prim(Op.CAST, [x], CastAttrs(dtype))

    def broadcast_operands(self, *xs: ValueId) -> list[ValueId]:
        """NumPy broadcasting: rank-0 operands stay scalars, others are expanded to the common shape."""
        shapes = [self.shape(x) for x in xs]
        full = np.broadcast_shapes(*shapes)
        return [x if s == () or s == full else self.broadcast_to(x, full) for x, s in zip(xs, shapes)]

    # -- reduce / broadcast ---------------------------------------------------------------------
    def reduce(self, op: Op, x: ValueId, axes: Sequence[int], keepdims: bool = True) -> ValueId:
        rank = len(self.shape(x))
        axes = tuple(sorted({a % rank for a in axes})) if rank else ()
        if not axes:
            return x
        return self.prim(op, [x], ReduceAttrs(axes, keepdims))

    def broadcast_to(self, x: ValueId, shape: Sequence[int]) -> ValueId:
        shape = tuple(int(s) for s in shape)
        s = self.shape(x)
        if s == shape:
            return x
        if len(s) < len(shape):
            x = self.reshape(x, (1,) * (len(shape) - len(s)) + s)
        return self.prim(Op.BROADCAST, [x], BroadcastAttrs(shape))

    # -- layout ---------------------------------------------------------------------------------
    def view(self, x: ValueId, m: IndexMap) -> ValueId:
        if m.is_identity():
            return x
        return self.prim(Op.VIEW, [x], ViewAttrs(m))

    def gather(self, data: ValueId, indices: Sequence[ValueId], data_map: IndexMap, axes: Sequence[int],
               index_maps: Sequence[IndexMap]) -> ValueId:
        """A gather whose data index on ``axes`` is read from the ``indices`` (see GatherAttrs)."""
        return self.prim(Op.GATHER, [data, *indices], GatherAttrs(data_map, tuple(axes), tuple(index_maps)))

    def reshape(self, x: ValueId, shape: Sequence[int]) -> ValueId:
        return self.view(x, layout.reshape(self.shape(x), shape))

    def permute(self, x: ValueId, perm: Sequence[int]) -> ValueId:
        return self.view(x, layout.permute(self.shape(x), perm))

    def concat(self, xs: Sequence[ValueId], axis: int) -> ValueId:
        xs = [x for x in xs if self.shape(x)[axis % len(self.shape(x))] > 0] or list(xs[:1])
        if len(xs) == 1:
            return xs[0]
        return self.prim(Op.CONCAT, xs, ConcatAttrs(axis % len(self.shape(xs[0]))))

    # -- linear ---------------------------------------------------------------------------------
    def matmul(self, a: ValueId, b: ValueId) -> ValueId:
        return self.prim(Op.MATMUL, [a, b])

    def conv(self, x: ValueId, w: ValueId, bias: ValueId | None, attrs: ConvAttrs, transpose: bool = False) -> ValueId:
        ins = [x, w] + ([bias] if bias is not None else [])
        return self.prim(Op.CONV_TRANSPOSE if transpose else Op.CONV, ins, attrs)

    def opaque(self, op_type: str, inputs: Sequence[ValueId], out: TensorType, node: bytes, opset: int) -> ValueId:
        return self.prim(Op.OPAQUE, inputs, OpaqueAttrs(op_type, node, opset), out_type=out)
