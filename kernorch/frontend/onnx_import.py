"""ONNX model -> primitive graph: load, infer shapes, fission every node, fold static subgraphs.

Static subgraphs (Shape, Constant, ConstantOfShape, and anything whose inputs are all constants)
are folded by running their fission rules through the reference interpreter, so folding needs
no separate op implementations. Operators without a rule become opaque prims when onnx's
reference evaluator implements them, and are reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from kernorch.errors import DynamicShapeError, ModelLoadError, UnsupportedOpError
from kernorch.fission.registry import NodeContext
from kernorch.fission.rules import load_rules
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder, Graph, GraphError, TensorType, verify
from kernorch.ir.layout import GatherIndexError
from kernorch.ir.prims import Op, OpaqueAttrs, Prim, ViewAttrs

FOLD_LIMIT_ELEMENTS = 1 << 24  # never fold constants bigger than this (64 MiB of float32)
# Nodes left as prims on constant inputs: a dequantized weight's integers are what a quantized
# model's linear prims multiply (rewrite/quantized.py); the rewrites' constant folding takes the rest.
KEPT_UNFOLDED = frozenset({"DequantizeLinear"})

# Operators whose output shape depends on input values: with non-constant inputs they cannot be
# compiled for static shapes (with constant inputs they fold like anything else).
DATA_DEPENDENT_SHAPE = {
    "NonZero": "the number of non-zero elements",
    "NonMaxSuppression": "the number of boxes kept",
    "Unique": "the number of distinct values",
    "Compress": "the number of true conditions",
    "StringSplit": "the number of substrings",
}


@dataclass
class ImportReport:
    opaque: dict[str, int] = field(default_factory=dict)   # ONNX op type -> count kept whole
    op_histogram: dict[str, int] = field(default_factory=dict)
    folded: int = 0
    exporter: str | None = None  # a PyTorch module's: "torchscript" or "dynamo"; None for ONNX input


def load_model(model: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """Read and check a model; one-line error naming the file on failure."""
    if isinstance(model, onnx.ModelProto):
        proto = model
        where = "the given ModelProto"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        where = f"the given {len(model)} bytes"
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf raises DecodeError and friends
            raise ModelLoadError(f"{where}: not a serialized ONNX model ({type(e).__name__})") from None
    elif not isinstance(model, (str, os.PathLike)):
        raise ModelLoadError(f"expected a path to an .onnx file, an onnx.ModelProto, its bytes or a torch.nn.Module; "
                             f"got {type(model).__name__}")
    else:
        where = str(model)
        if not os.path.exists(where):
            raise ModelLoadError(f"{where}: no such file")
        if os.path.isdir(where):
            raise ModelLoadError(f"{where}: is a directory, not an .onnx file")
        if os.path.isfile(where) and os.path.getsize(where) == 0:
            raise ModelLoadError(f"{where}: not a readable ONNX model (empty file)")
        try:
            proto = onnx.load(where)
        except Exception as e:  # protobuf raises DecodeError and friends
            raise ModelLoadError(f"{where}: not a readable ONNX model ({type(e).__name__})") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{where}: the ONNX graph is empty")
    for node in proto.graph.node:  # before the checker, whose message would not name the node
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
            raise UnsupportedOpError(f"operator {node.op_type} (node {node.name or node.output[0]!r}) has no "
                                     f"fission rule and no reference implementation (not a standard ONNX op)")
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # an op version that newer onnx deprecated (GroupNormalization-18) still has its defined
        # meaning at that opset, and onnxruntime runs it: not a malformed model
        if "is deprecated in domain_version" not in msg:
            raise ModelLoadError(f"{where}: malformed ONNX model: {msg}") from None
    return proto


def _tensor_type(vi: onnx.ValueInfoProto, pinned: Mapping[str, Sequence[int]] | None) -> TensorType:
    tt = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    if pinned and vi.name in pinned:
        return TensorType(_pinned_shape(vi, pinned[vi.name]), dtype)
    shape = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(d.dim_value)
        else:
            sym = d.dim_param or "?"
            err = DynamicShapeError(
                f"input {vi.name!r} has a dynamic dimension {k} ({sym!r}); pin it with input_shapes={{{vi.name!r}: [...]}}")
            err.input, err.dim, err.symbol = vi.name, k, sym  # lets the CLI say the same in its own syntax
            err.example = [x.dim_value if x.HasField("dim_value") and x.dim_value > 0 else 1 for x in tt.shape.dim]
            raise err
    return TensorType(tuple(shape), dtype)


def _pinned_shape(vi: onnx.ValueInfoProto, shape: Sequence[int]) -> tuple[int, ...]:
    """A pinned shape must keep the input's rank and its static dimensions: only dynamic ones can be pinned."""
    shape = tuple(int(s) for s in shape)
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return shape
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in tt.shape.dim]
    declared = "[" + ",".join(map(str, dims)) + "]"
    pinned = "[" + ",".join(map(str, shape)) + "]"
    if len(shape) != len(dims):
        raise DynamicShapeError(f"input {vi.name!r} has rank {len(dims)} {declared}; the pinned shape {pinned} has "
                                f"rank {len(shape)}")
    for k, (d, s) in enumerate(zip(dims, shape)):
        if isinstance(d, int) and d != s:
            raise DynamicShapeError(f"input {vi.name!r} is {declared}: dimension {k} is static ({d}) and cannot be "
                                    f"pinned to {s}; only dynamic dimensions can be pinned")
    return shape


def _outer_scope_reads(proto: onnx.ModelProto) -> None:
    """Subgraph attributes (Loop, If, Scan bodies) must not read values of the enclosing graph:
    kernorch runs such a node as one opaque kernel that only sees the node's own inputs."""
    for node in proto.graph.node:
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for body in bodies:
                free = _free_names(body)
                if free:
                    name = node.name or node.output[0]
                    raise UnsupportedOpError(
                        f"{node.op_type} node {name!r}: its {attr.name!r} subgraph reads {sorted(free)[0]!r} from the "
                        f"enclosing graph (outer-scope values are not supported; pass it as an explicit input)")


def _free_names(body: onnx.GraphProto) -> set[str]:
    """Names a subgraph (and its nested subgraphs) reads without defining them."""
    defined = {i.name for i in body.input} | {t.name for t in body.initializer} | {""}
    defined |= {t.name for t in body.sparse_initializer}
    free: set[str] = set()
    for node in body.node:
        free |= {i for i in node.input if i not in defined}
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                free |= _free_names(sub) - defined
        defined |= set(node.output)
    free |= {o.name for o in body.output if o.name not in defined}
    return free


def import_onnx(model: str | os.PathLike | onnx.ModelProto,
                input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Graph, ImportReport]:
    """Import an ONNX model into a primitive graph with static shapes."""
    proto = load_model(model)
    rules = load_rules()
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    if input_shapes:
        unknown = set(input_shapes) - {i.name for i in proto.graph.input}
        if unknown:
            names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
            raise ModelLoadError(f"a shape is pinned for unknown input(s) {sorted(unknown)}; the model's inputs are "
                                 f"{names}")
    _outer_scope_reads(proto)
    g = Graph()
    b = Builder(g)
    env: dict[str, int] = {}
    report = ImportReport()
    inits = {t.name for t in proto.graph.initializer}
    for t in proto.graph.initializer:
        env[t.name] = b.constant(numpy_helper.to_array(t), name=t.name)
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        env[vi.name] = b.input(_tensor_type(vi, input_shapes).shape, _tensor_type(vi, input_shapes).dtype, name=vi.name)

    inferred = _infer_types(proto, g, env)
    for node in proto.graph.node:
        report.op_histogram[node.op_type] = report.op_histogram.get(node.op_type, 0) + 1
        outs = _fission_node(node, g, env, rules, opset, inferred, report)
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v
    for o in proto.graph.output:
        if o.name not in env:
            raise ModelLoadError(f"graph output {o.name!r} is never produced")
        v = env[o.name]
        if v in g.constants or v in g.inputs or v in g.outputs:  # outputs must be produced by a prim
            v = _copy(g, v)
        g.outputs.append(v)
        g.names[v] = o.name
    _drop_unused_constants(g)
    verify(g)
    return g, report


def _copy(g: Graph, v: int) -> int:
    """An explicit copy prim, so that every graph output is produced by some kernel."""
    b = Builder(g, origin="output_copy")
    return b.prim(Op.VIEW, [v], ViewAttrs(layout.identity(b.shape(v))))


def _infer_types(proto: onnx.ModelProto, g: Graph, env: dict[str, int]) -> dict[str, TensorType]:
    """Shape inference with the pinned input shapes; used to type opaque nodes and check rules."""
    p = onnx.ModelProto()
    p.CopyFrom(proto)
    for vi in p.graph.input:
        if vi.name in env and env[vi.name] in g.inputs:
            t = g.types[env[vi.name]]
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for s in t.shape:
                dims.add().dim_value = s
    try:
        p = onnx.shape_inference.infer_shapes(p, data_prop=True)
    except Exception:
        return {}
    out = {}
    for vi in list(p.graph.value_info) + list(p.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or tt.elem_type == 0:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if all(d >= 0 for d in dims):
            out[vi.name] = TensorType(tuple(dims), onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name)
    return out


def _fission_node(node, g: Graph, env, rules, opset, inferred, report: ImportReport) -> list[int]:
    name = node.name or f"{node.op_type}_{node.output[0]}"
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedOpError(f"operator {node.domain}::{node.op_type} (node {name!r}) is not supported")
    ins = []
    for i in node.input:
        if i and i not in env:
            raise ModelLoadError(f"node {name!r} reads {i!r}, which is never defined")
        ins.append(env[i] if i else None)
    out_types = [inferred.get(o) for o in node.output]
    all_const = all(v is None or v in g.constants for v in ins)
    rule = rules.get(node.op_type)
    if node.op_type in DATA_DEPENDENT_SHAPE and not all_const:
        raise UnsupportedOpError(f"operator {node.op_type} (node {name!r}): its output shape depends on the input "
                                 f"values ({DATA_DEPENDENT_SHAPE[node.op_type]}); kernorch compiles static shapes")
    if rule is None and all_const and out_types[0] is None and len([o for o in node.output if o]) == 1:
        # no static type, but constant inputs (NonZero of a constant mask): evaluate, whatever the shape
        p = Prim(Op.OPAQUE, tuple(v for v in ins if v is not None), -1,
                 OpaqueAttrs(node.op_type, node.SerializeToString(), opset))
        try:
            arr = np.asarray(interp.eval_opaque(p, [g.constants[v] for v in p.inputs]))
        except Exception as e:  # noqa: BLE001 -- the reference rejects the node: say which
            raise UnsupportedOpError(f"operator {node.op_type} (node {name!r}) could not be evaluated on its "
                                     f"constant inputs ({type(e).__name__})") from None
        report.folded += 1
        return [Builder(g).constant(arr)]
    if rule is None:
        v = _opaque(node, name, g, ins, out_types, opset, report)
        if all_const:
            p = g.prims.pop()
            g.constants[v] = interp.eval_prim(p, [g.constants[i] for i in p.inputs], g.types[v].dtype, g.types[v].shape)
            report.opaque[node.op_type] -= 1
            report.folded += 1
        return [v]
    if all_const and node.op_type not in KEPT_UNFOLDED:
        folded = _try_fold(node, name, g, ins, out_types, opset, rule)
        if folded is not None:
            report.folded += 1
            return folded
    ctx = NodeContext(node, Builder(g, origin=name), ins, opset, out_types)
    first = len(g.prims)
    outs = list(rule(ctx))
    for p in g.prims[first:]:
        if p.op is Op.OPAQUE:  # a rule that keeps its op whole (scatters): reported like any opaque op
            report.opaque[p.attrs.op_type] = report.opaque.get(p.attrs.op_type, 0) + 1
    for o, v, t in zip(node.output, outs, out_types):
        if t is not None and v is not None and g.types[v].shape != t.shape:
            raise GraphError(f"fission of {node.op_type} node {name!r} gave {o!r} shape {g.types[v].shape}, "
                             f"ONNX infers {t.shape}")
    return outs


def _try_fold(node, name, g: Graph, ins, out_types, opset, rule) -> list[int] | None:
    """Evaluate a node whose inputs are all constants; its outputs become constants."""
    scratch = Graph()
    sb = Builder(scratch)
    local = []
    for v in ins:
        if v is None:
            local.append(None)
        else:
            if g.constants[v].size > FOLD_LIMIT_ELEMENTS:
                return None
            local.append(sb.constant(g.constants[v]))
    ctx = NodeContext(node, Builder(scratch, origin=name), local, opset, out_types)
    outs = list(rule(ctx))
    scratch.outputs = [v for v in outs if v is not None and v not in scratch.constants]
    try:
        vals = interp.run(scratch, {}) if scratch.outputs else {}
    except GatherIndexError as e:  # constant indices computed out of range: the model's error
        raise UnsupportedOpError(f"{node.op_type} node {name!r}: {e}") from None
    b = Builder(g)
    result = []
    for v in outs:
        arr = scratch.constants[v] if v in scratch.constants else vals[v]
        result.append(b.constant(np.array(arr)))
    return result


def _opaque(node, name, g: Graph, ins, out_types, opset, report: ImportReport) -> int:
    from onnx.reference.ops import load_op

    try:
        load_op("", node.op_type, version=opset)
    except Exception:
        raise UnsupportedOpError(f"operator {node.op_type} (node {name!r}) has no fission rule "
                                 f"and no reference implementation") from None
    if len([o for o in node.output if o]) != 1:
        raise UnsupportedOpError(f"operator {node.op_type} (node {name!r}) has no fission rule "
                                 f"and several outputs")
    t = out_types[0]
    if t is None:
        raise UnsupportedOpError(f"operator {node.op_type} (node {name!r}) has no fission rule and "
                                 f"its output shape cannot be inferred statically")
    report.opaque[node.op_type] = report.opaque.get(node.op_type, 0) + 1
    b = Builder(g, origin=name)
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    return b.opaque(node.op_type, [v for v in ins if v is not None], t, n2.SerializeToString(), opset)


def _drop_unused_constants(g: Graph) -> None:
    used = {v for p in g.prims for v in p.inputs} | set(g.outputs)
    for v in [v for v in g.constants if v not in used]:
        del g.constants[v]
        del g.types[v]
        g.names.pop(v, None)
