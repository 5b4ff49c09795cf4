"""Export a candidate kernel (a prim subgraph) as a standalone ONNX model, opset 17.

This is how onnxruntime and OpenVINO price and run candidates. Elementwise prims map 1:1 (with
explicit casts where NumPy's promotion rules, which the interpreter follows, differ from ONNX's
single-type operators), reductions to Reduce*, linear prims to MatMul / Conv / ConvTranspose,
opaque prims to their stored NodeProto, and views to the steps ``views.plan_view`` proves equal.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import IndexMap
from kernorch.ir.graph import Graph
from kernorch.ir.prims import BINARY, COMPARE, LOGICAL, Op, Prim, ValueId
from kernorch.providers import onnx_patterns as patterns
from kernorch.providers.base import ProviderError
from kernorch.providers.view_steps import Step, shape_after, slice_bounds
from kernorch.providers.views import plan_view


OPSET = 17
INT64_MIN = -(2**63)

_UNARY = {Op.NEG: "Neg", Op.ABS: "Abs", Op.EXP: "Exp", Op.LOG: "Log", Op.SQRT: "Sqrt", Op.RECIP: "Reciprocal",
          Op.TANH: "Tanh", Op.ERF: "Erf", Op.SIGMOID: "Sigmoid", Op.SOFTPLUS: "Softplus", Op.RELU: "Relu",
          Op.FLOOR: "Floor", Op.CEIL: "Ceil", Op.ROUND: "Round", Op.SIN: "Sin", Op.COS: "Cos", Op.SIGN: "Sign",
          Op.NOT: "Not", Op.ISNAN: "IsNaN"}
_FLOAT_ONLY = {Op.EXP, Op.LOG, Op.SQRT, Op.RECIP, Op.TANH, Op.ERF, Op.SIGMOID, Op.SOFTPLUS, Op.FLOOR, Op.CEIL,
               Op.ROUND, Op.SIN, Op.COS, Op.ISNAN}
_BINARY = {Op.ADD: "Add", Op.SUB: "Sub", Op.MUL: "Mul", Op.DIV: "Div", Op.POW: "Pow", Op.MAX: "Max", Op.MIN: "Min",
           Op.EQ: "Equal", Op.LT: "Less", Op.LE: "LessOrEqual", Op.GT: "Greater", Op.GE: "GreaterOrEqual",
           Op.AND: "And", Op.OR: "Or", Op.XOR: "Xor"}
_REDUCE = {Op.SUM: "ReduceSum", Op.RMAX: "ReduceMax", Op.RMIN: "ReduceMin", Op.PROD: "ReduceProd"}
SUPPORTED_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                              "uint32", "uint64", "bool"})


@dataclass
class OnnxKernel:
    """The exported model and how its names relate to value ids. ``feeds`` lists the ONNX input
    name of every non-baked kernel input (``None`` for baked ones), aligned with ``inputs``."""

    model: onnx.ModelProto
    inputs: list[ValueId]
    feeds: list[str | None]
    outputs: list[ValueId]
    output_names: list[str]
    baked: frozenset[ValueId]
    views: Counter = field(default_factory=Counter)


def unsupported(g: Graph, members: Iterable[ValueId]) -> str | None:
    """A reason why the candidate cannot be exported, checked without exporting; None if it can."""
    members = set(members)
    ins, _ = g.boundary(members)
    for v in list(ins) + sorted(members):
        dt = g.types[v].dtype
        if dt not in SUPPORTED_DTYPES:
            return f"dtype {dt} of %{v} has no ONNX export here"
    return None


def export(g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId] | None = None, *,
           bake_constants: bool = True, opset: int = OPSET) -> OnnxKernel:
    """Export ``g.subgraph(members, outputs)``. Tensor constants of ``g`` become initializers
    when ``bake_constants`` (then the model has no input for them), else model inputs."""
    members = set(members)
    reason = unsupported(g, members)
    if reason:
        raise ProviderError(reason)
    sub = g.subgraph(members, outputs)
    baked = frozenset(v for v in sub.inputs if bake_constants and v in g.constants)
    opaque_opsets = [p.attrs.opset for p in sub.prims if p.op is Op.OPAQUE]
    opset = max([opset] + opaque_opsets)
    em = _Emitter(sub, opset, g.constants)
    feeds: list[str | None] = []
    graph_inputs = []
    for v in sub.inputs:
        if v in baked:
            em.inits.append(numpy_helper.from_array(np.ascontiguousarray(g.constants[v]), em.name(v)))
            feeds.append(None)
        else:
            t = sub.types[v]
            graph_inputs.append(helper.make_tensor_value_info(em.name(v), _onnx_dtype(t.dtype), t.shape))
            feeds.append(em.name(v))
    for v, arr in sub.constants.items():
        em.inits.append(numpy_helper.from_array(np.asarray(arr), em.name(v)))
    for p in sub.prims:
        em.prim(p)
    out_names = []
    graph_outputs = []
    for v in sub.outputs:
        name = f"out_{v}"
        em.nodes.append(helper.make_node("Identity", [em.value(v)], [name]))
        t = sub.types[v]
        graph_outputs.append(helper.make_tensor_value_info(name, _onnx_dtype(t.dtype), t.shape))
        out_names.append(name)
    graph = helper.make_graph(em.nodes, "kernorch_kernel", graph_inputs, graph_outputs, em.inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in sorted(em.domains)]
    model = helper.make_model(graph, opset_imports=imports, producer_name="kernorch")
    model.ir_version = min(model.ir_version, 9)
    return OnnxKernel(model, list(sub.inputs), feeds, list(sub.outputs), out_names, baked, em.views)


def _onnx_dtype(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


class _Emitter:
    """Appends nodes for one prim at a time; value ``v`` is named ``v{v}``."""

    def __init__(self, sub: Graph, opset: int, constants=None) -> None:
        self.sub, self.opset = sub, opset
        self.consts = {**(constants or {}), **sub.constants}
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.domains: set[str] = set()
        self.views: Counter = Counter()
        self._n = 0
        # Broadcasts are emitted lazily: a binary op broadcasts by itself, and runtimes match
        # patterns (OpenVINO's MVN fusion wants Subtract(x, ReduceMean(x))) only without an
        # Expand in between. value -> name of the un-expanded input, until an Expand is needed.
        self.lazy: dict[ValueId, str] = {}
        self.expanded: set[ValueId] = set()
        self.producer = {p.output: p for p in sub.prims}

    @staticmethod
    def name(v: ValueId) -> str:
        return f"v{v}"

    def fresh(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def const(self, arr) -> str:
        name = self.fresh()
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op_type: str, inputs: Sequence[str], out: str | None = None, **attrs) -> str:
        out = out or self.fresh()
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def cast(self, name: str, have: str, want: str) -> str:
        if np.dtype(have) == np.dtype(want):
            return name
        return self.node("Cast", [name], to=_onnx_dtype(want))

    def dtype(self, v: ValueId) -> str:
        return self.sub.types[v].dtype

    # -- one prim -----------------------------------------------------------------------------
    def value(self, v: ValueId) -> str:
        """The name of ``v`` in full shape (emitting a deferred Expand if needed)."""
        if v in self.lazy and v not in self.expanded:
            shape = self.producer[v].attrs.shape
            self.node("Expand", [self.lazy[v], self.const(np.array(shape, dtype=np.int64))], self.name(v))
            self.expanded.add(v)
        return self.name(v)

    def _operands(self, p: Prim) -> list[str]:
        """Input names; for an elementwise op a broadcast input is passed un-expanded when another
        operand already has the output's full shape (so the op's own broadcasting is exact)."""
        full = self.sub.types[p.output].shape
        if not (p.op in BINARY or p.op is Op.WHERE):
            return [self.value(v) for v in p.inputs]
        anchor = next((v for v in p.inputs if v not in self.lazy and self.sub.types[v].shape == full), None)
        return [self.lazy[v] if v in self.lazy and anchor is not None else self.value(v) for v in p.inputs]

    def prim(self, p: Prim) -> None:
        out = self.name(p.output)
        want = self.dtype(p.output)
        op = p.op
        if op is Op.BROADCAST:
            self.lazy[p.output] = self.value(p.inputs[0])
            return
        ins = self._operands(p)
        dts = [self.dtype(v) for v in p.inputs]
        if op is Op.CAST:
            self.node("Cast", ins, out, to=_onnx_dtype(want))
        elif op in _UNARY:
            self._unary(p, ins[0], dts[0], out, want)
        elif op in BINARY or op is Op.WHERE:
            self._elementwise(p, ins, dts, out, want)
        elif op in _REDUCE:
            self._reduce(p, ins[0], out)
        elif op is Op.CONCAT:
            self.node("Concat", ins, out, axis=p.attrs.axis)
        elif op is Op.VIEW:
            self._view(p, ins[0], dts[0], out)
        elif op is Op.GATHER:
            self._gather(p, ins, out)
        elif op is Op.MATMUL:
            self.node("MatMul", ins, out)
        elif op in (Op.CONV, Op.CONV_TRANSPOSE):
            self._conv(p, ins, out)
        elif op is Op.OPAQUE:
            self._opaque(p, ins, out)
        else:
            raise ProviderError(f"no ONNX export for {op.value}")

    def _unary(self, p: Prim, x: str, have: str, out: str, want: str) -> None:
        op = p.op
        kind = np.dtype(have).kind
        if op in _FLOAT_ONLY and kind not in "f":
            # NumPy computes in float64 (float32 for the interpreter's recip); ORT lacks a few
            compute = "float32" if op in (Op.RECIP, Op.ERF, Op.SOFTPLUS) else "float64"
            y = self.node(_UNARY[op], [self.cast(x, have, compute)])
            self.node("Cast", [y], out, to=_onnx_dtype(want))
            return
        if op is Op.NOT and kind != "b":
            x = self.cast(x, have, "bool")
        if op is Op.RELU and kind == "b":
            self.node("Identity", [x], out)
            return
        if op is Op.RECIP:  # 1 / x: the form runtimes' fusion patterns (rsqrt, MVN) expect
            y = self.node("Div", [self.const(np.ones((), dtype=have)), x])
        else:
            y = self.node(_UNARY[op], [x])
        self.node("Identity", [self.cast(y, self._result_dtype(p, have), want)], out)

    def _result_dtype(self, p: Prim, have: str) -> str:
        return "bool" if p.op in COMPARE or p.op in LOGICAL else have

    def _elementwise(self, p: Prim, ins: list[str], dts: list[str], out: str, want: str) -> None:
        op = p.op
        if op is Op.WHERE:
            cond = self.cast(ins[0], dts[0], "bool")
            common = str(np.result_type(*[np.dtype(d) for d in dts[1:]]))
            a, b = (self.cast(n, d, common) for n, d in zip(ins[1:], dts[1:]))
            y = self.node("Where", [cond, a, b])
        elif op in (Op.AND, Op.OR, Op.XOR):
            a, b = (self.cast(n, d, "bool") for n, d in zip(ins, dts))
            y = self.node(_BINARY[op], [a, b])
            common = "bool"
        else:
            common = str(np.result_type(*[np.dtype(d) for d in dts]))
            a, b = (self.cast(n, d, common) for n, d in zip(ins, dts))
            if op is Op.NE:
                y = self.node("Not", [self.node("Equal", [a, b])])
            elif op is Op.MOD:
                y = self._mod(a, b, common)
            else:
                y = (patterns.mean(self, p) or patterns.divide(self, p)) if op is Op.MUL and common == want else None
                y = y or (patterns.resize(self, p) if op is Op.ADD and common == want else None)
                y = y or (patterns.softmax(self, p) if op is Op.DIV and common == want else None)
                y = y or self.node(_BINARY[op], [a, b])
        have = "bool" if op in COMPARE or op in LOGICAL else common
        self.node("Identity", [self.cast(y, have, want)], out)

    def _mod(self, a: str, b: str, dtype: str) -> str:
        """NumPy's mod (sign of the divisor): integer Mod(fmod=0); floats take C fmod and shift."""
        if np.dtype(dtype).kind in "iu":
            return self.node("Mod", [a, b], fmod=0)
        r = self.node("Mod", [a, b], fmod=1)
        zero = self.const(np.zeros((), dtype=dtype))
        fix = self.node("And", [self.node("Not", [self.node("Equal", [r, zero])]),
                                self.node("Xor", [self.node("Less", [r, zero]), self.node("Less", [b, zero])])])
        return self.node("Where", [fix, self.node("Add", [r, b]), r])

    def _reduce(self, p: Prim, x: str, out: str) -> None:
        axes = [int(a) for a in p.attrs.axes]
        keep = int(p.attrs.keepdims)
        op_type = _REDUCE[p.op]
        if op_type == "ReduceSum" or self.opset >= 18:
            self.node(op_type, [x, self.const(np.array(axes, dtype=np.int64))], out, keepdims=keep)
        else:
            self.node(op_type, [x], out, axes=axes, keepdims=keep)

    def _conv(self, p: Prim, ins: list[str], out: str) -> None:
        a = p.attrs
        w = self.sub.types[p.inputs[1]].shape
        attrs = dict(strides=list(a.strides), pads=list(a.pads), dilations=list(a.dilations), group=a.groups,
                     kernel_shape=list(w[2:]))
        if p.op is Op.CONV:
            self.node("Conv", ins, out, **attrs)
        else:
            if a.output_padding:
                attrs["output_padding"] = list(a.output_padding)
            self.node("ConvTranspose", ins, out, **attrs)

    def _opaque(self, p: Prim, ins: list[str], out: str) -> None:
        node = onnx.NodeProto()
        node.ParseFromString(p.attrs.node)
        it = iter(ins)
        renamed = [next(it) if n else "" for n in node.input]
        del node.input[:]
        node.input.extend(renamed)
        outs = [out] + [self.fresh() for _ in node.output[1:]]
        del node.output[:]
        node.output.extend(outs)
        node.name = f"opaque_{p.output}"
        if node.domain not in ("", "ai.onnx"):
            self.domains.add(node.domain)
        self.nodes.append(node)

    def _view(self, p: Prim, x: str, dtype: str, out: str) -> None:
        self.node("Identity", [self._apply(p.attrs.map, x, dtype)], out)

    def _apply(self, m: IndexMap, x: str, dtype: str) -> str:
        if m.is_identity():
            return x
        plan = plan_view(m)
        self.views[plan.kind] += 1
        shape = m.in_shape
        for st in plan.steps:
            x = self._step(st, x, dtype, shape)
            shape = shape_after(shape, st)
        return x

    def _gather(self, p: Prim, ins: list[str], out: str) -> None:
        """A runtime gather back as the ONNX node it came from (Gather, GatherElements, GatherND)
        when its maps are exactly that node's; any other map (a gather composed with views) as
        one GatherND over explicit coordinates: constant ones for the plain axes, the viewed and
        wrapped index tensors for the gathered ones."""
        a = p.attrs
        data_shape, idx = a.data.in_shape, p.inputs[1:]
        ishape = [self.sub.types[v].shape for v in idx]
        if len(a.axes) == 1:
            ax = a.axes[0]
            for op_type, ctor in (("Gather", layout.gather_take), ("GatherElements", layout.gather_elements)):
                if (op_type == "Gather" or len(ishape[0]) == len(data_shape)) and \
                        ctor(data_shape, ax, ishape[0]) == (a.data, a.indices):
                    self.node(op_type, [ins[0], ins[1]], out, axis=ax)
                    return
        ax0 = a.axes[0]
        if (len(set(idx)) == 1 and ishape[0] and ishape[0][-1] == len(a.axes)
                and a.axes == tuple(range(ax0, ax0 + len(a.axes)))
                and tuple(ishape[0][:ax0]) == tuple(data_shape[:ax0])
                and layout.gather_nd(data_shape, ishape[0], ax0) == (a.data, a.indices)):
            coords = self.cast(ins[1], self.dtype(idx[0]), "int64")
            self.node("GatherND", [ins[0], coords], out, batch_dims=ax0)
            return
        out_shape = a.data.out_shape
        grid = np.indices(out_shape, dtype=np.int64) if out_shape else []
        parts = []
        for d, e in enumerate(a.data.index):
            if d in a.axes:
                k = a.axes.index(d)
                v = self.cast(self._apply(a.indices[k], ins[1 + k], self.dtype(idx[k])), self.dtype(idx[k]), "int64")
                n = self.const(np.array(data_shape[d], dtype=np.int64))
                neg = self.node("Less", [v, self.const(np.array(0, dtype=np.int64))])
                v = self.node("Where", [neg, self.node("Add", [v, n]), v])
            else:
                v = self.const(np.broadcast_to(np.asarray(ix.evaluate(e, list(grid)), dtype=np.int64), out_shape))
            parts.append(self.node("Unsqueeze", [v, self.const(np.array([-1], dtype=np.int64))]))
        self.node("GatherND", [ins[0], self.node("Concat", parts, axis=-1)], out)

    def _step(self, st: Step, x: str, dtype: str, shape: tuple[int, ...]) -> str:
        i64 = lambda v: self.const(np.array(v, dtype=np.int64))  # noqa: E731
        if st.op == "reshape":
            return self.node("Reshape", [x, i64(st.shape)])
        if st.op == "transpose" and len(shape) == 2 and min(shape) > 1:
            # A 2-D transpose is one of OpenVINO's slow paths (a [16384, 256] one took 28 ms,
            # the same data as [128, 128, 256] -> (2, 0, 1) 4.5 ms): split the first dim.
            a, b = shape
            a1 = max(d for d in range(1, math.isqrt(a) + 1) if a % d == 0)
            y = self.node("Reshape", [x, i64([a1, a // a1, b])])
            y = self.node("Transpose", [y], perm=[2, 0, 1])
            return self.node("Reshape", [y, i64([b, a])])
        if st.op == "transpose":
            return self.node("Transpose", [x], perm=list(st.perm))
        if st.op == "expand":
            return self.node("Expand", [x, i64(st.shape)])
        if st.op == "upsample":
            scales = self.const(np.array(st.shape, dtype=np.float32))
            return self.node("Resize", [x, "", scales], mode="nearest", nearest_mode="floor",
                             coordinate_transformation_mode="asymmetric")
        if st.op == "slice":
            starts, ends, steps = [], [], []
            for s, a, c in zip(st.starts, st.steps, st.counts):
                _, stop, _ = slice_bounds(s, a, c)
                starts.append(s), steps.append(a), ends.append(INT64_MIN if stop is None else stop)
            axes = list(range(len(starts)))
            return self.node("Slice", [x, i64(starts), i64(ends), i64(axes), i64(steps)])
        if st.op == "pad":
            pads = list(st.begins) + list(st.ends)
            ins = [x, i64(pads)]
            if st.mode == "constant":
                ins.append(self.const(_fill(st.value, dtype)))
            return self.node("Pad", ins, mode=st.mode)
        if st.op == "gather":
            flat = self.node("Reshape", [x, i64([-1])])
            y = self.node("Gather", [flat, self.const(st.table)], axis=0)
            if st.mask is None:
                return y
            return self.node("Where", [self.const(st.mask), y, self.const(_fill(st.value, dtype))])
        raise ProviderError(f"unknown view step {st.op}")


def _fill(value: float, dtype: str) -> np.ndarray:
    if np.dtype(dtype) == np.bool_:
        return np.array(bool(value))
    return np.array(value).astype(dtype)
