"""Single-node ONNX models run through kernorch (import -> fission -> interpreter) and through
onnxruntime, the independent oracle for the fission tests."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.ir.prims import Kind, Op


def node_model(op_type: str, inputs: Mapping[str, np.ndarray | None], n_outputs: int = 1, opset: int = 18,
               consts: Sequence[str] = (), out_names: Sequence[str] | None = None, **attrs) -> onnx.ModelProto:
    """One node reading ``inputs`` in order (None = omitted optional input). Names in ``consts``
    become initializers, the rest graph inputs with the arrays' shapes and dtypes."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    outs = list(out_names) if out_names is not None else [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    g_in, inits = [], []
    for n, a in inputs.items():
        if a is None:
            continue
        if n in consts:
            inits.append(numpy_helper.from_array(np.asarray(a), n))
        else:
            dt = helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)
            g_in.append(helper.make_tensor_value_info(n, dt, np.asarray(a).shape))
    g_out = [helper.make_empty_tensor_value_info(o) for o in outs if o]
    graph = helper.make_graph([node], op_type.lower(), g_in, g_out, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset <= 23 else model.ir_version
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # types the outputs
    if any(not o.type.HasField("tensor_type") for o in model.graph.output):
        # shape inference gave up (e.g. GroupNormalization): type the outputs by evaluating the node
        from onnx.reference import ReferenceEvaluator

        try:
            results = ReferenceEvaluator(model).run(None, feeds_of(model, inputs))
            types = [(helper.np_dtype_to_tensor_dtype(r.dtype), r.shape) for r in results]
        except Exception:  # an invalid node (a test of kernorch's error): X's dtype, unknown dims
            x = np.asarray(next(a for a in inputs.values() if a is not None))
            types = [(helper.np_dtype_to_tensor_dtype(x.dtype), [f"d{k}" for k in range(x.ndim)])] * len(outs)
        for o, (dt, shape) in zip(model.graph.output, types):
            o.CopyFrom(helper.make_tensor_value_info(o.name, dt, shape))
    return model


def assert_one_dtype_per_elementwise_prim(model: onnx.ModelProto) -> None:
    """Every elementwise prim of the imported model (a cast aside) reads operands of one dtype: a
    parameter left in float64 gives the interpreter, which promotes, the same values, so only this
    catches it."""
    g, _ = import_onnx(model)
    for p in g.prims:
        if p.kind is Kind.ELEMENTWISE and p.op is not Op.CAST:
            operands = p.inputs[1:] if p.op is Op.WHERE else p.inputs
            assert len({g.types[v].dtype for v in operands}) == 1, (p.op, [g.types[v] for v in p.inputs])


def feeds_of(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    graph_inputs = {i.name for i in model.graph.input}
    return {n: a for n, a in inputs.items() if a is not None and n in graph_inputs}


def run_kernorch(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    g, report = import_onnx(model, input_shapes={k: np.shape(v) for k, v in feeds.items()})
    assert not report.opaque, f"ops kept whole: {report.opaque}"
    assert all(p.op is not Op.OPAQUE for p in g.prims)
    by_name = {g.name(v): v for v in g.inputs}
    out = interp.run(g, {by_name[k]: v for k, v in feeds.items()})
    return [out[v] for v in g.outputs]


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def run_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, dict(feeds))


def assert_close(ours: np.ndarray, ref: np.ndarray, rel: float = 1e-4) -> None:
    """Same shape and dtype; integers and booleans exactly, floats to ``rel`` times the output
    scale (max |ref|, at least 1); NaN and infinities must sit at the same places."""
    ref = np.asarray(ref)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    assert ours.dtype == ref.dtype, (ours.dtype, ref.dtype)
    if ref.dtype.kind != "f":
        np.testing.assert_array_equal(ours, ref)
        return
    a, r = ours.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(r))
    np.testing.assert_array_equal(np.isinf(a), np.isinf(r))
    np.testing.assert_array_equal(a[np.isinf(a)], r[np.isinf(r)])
    ok = np.isfinite(r)
    if ok.any():
        scale = max(1.0, float(np.abs(r[ok]).max()))
        err = float(np.abs(a[ok] - r[ok]).max())
        assert err <= rel * scale, f"max abs err {err:.3g} > {rel:g} * scale {scale:.3g}"


def check(op_type: str, inputs: Mapping[str, np.ndarray | None], n_outputs: int = 1, opset: int = 18,
          consts: Sequence[str] = (), rel: float = 1e-4, oracle=run_ort, **attrs) -> list[np.ndarray]:
    """Build the node, run both ways and compare every output; returns kernorch's outputs."""
    model = node_model(op_type, inputs, n_outputs, opset, consts, **attrs)
    feeds = feeds_of(model, inputs)
    ours = run_kernorch(model, feeds)
    refs = oracle(model, feeds)
    assert len(ours) == len(refs)
    for o, r in zip(ours, refs):
        assert_close(o, r, rel)
    return ours


def run_ort_float32(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the same node with float16/float64 inputs and initializers made float32,
    outputs cast back: an oracle (to float32 accuracy) for dtypes onnxruntime lacks kernels for."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    wide = {onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type in wide:
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for k, t in enumerate(m.graph.initializer):
        if t.data_type in wide:
            arr = numpy_helper.to_array(t).astype(np.float32)
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(arr, t.name))
    del m.graph.value_info[:]
    f32 = {k: v.astype(np.float32) if v.dtype in (np.float16, np.float64) else v for k, v in feeds.items()}
    out_types = [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in model.graph.output]
    return [r.astype(t) for r, t in zip(run_ort(m, f32), out_types)]
