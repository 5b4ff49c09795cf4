"""Exported regions spell normalizations the way runtimes recognize them: mean as ReduceMean,
broadcasts left to the binary ops, x * (1/y) as x / y, so OpenVINO fuses an instance or layer
norm written as primitives into one MVN node (without it, a region of candy ran 2.5x slower)."""

import collections
import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.providers.base import verify
from kernorch.providers.ort import OrtProvider
from kernorch.providers.ov import OpenVinoProvider
from kernorch.providers.to_onnx import export


def _norm_model(op: str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    shape = [1, 8, 12, 12] if op == "InstanceNormalization" else [1, 16, 32]
    c = shape[1] if op == "InstanceNormalization" else shape[-1]
    inits = [numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "beta")]
    attrs = {"epsilon": 1e-5} if op == "InstanceNormalization" else {"epsilon": 1e-5, "axis": -1}
    nodes = [helper.make_node(op, ["x", "gamma", "beta"], ["n"], **attrs), helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["InstanceNormalization", "LayerNormalization"])
def test_norm_exports_as_reduce_mean_and_divide(op):
    g, _ = import_onnx(_norm_model(op))
    members = {p.output for p in g.prims}
    k = export(g, members, list(g.outputs))
    ops = collections.Counter(n.op_type for n in k.model.graph.node)
    assert ops["ReduceMean"] == 2 and ops["Div"] >= 1 and ops["Expand"] == 0, ops
    built = OrtProvider(1).build(g, members, list(g.outputs))
    ok, err, detail = verify(built, g, members, list(g.outputs))
    assert ok, detail


@pytest.mark.parametrize("op", ["InstanceNormalization", "LayerNormalization"])
def test_openvino_fuses_the_exported_norm_into_mvn(op):
    ov = pytest.importorskip("openvino")
    g, _ = import_onnx(_norm_model(op))
    members = {p.output for p in g.prims}
    k = export(g, members, list(g.outputs))
    core = ov.Core()
    compiled = core.compile_model(core.read_model(io.BytesIO(k.model.SerializeToString())), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    kinds = {op_.get_rt_info()["layerType"].astype(str) for op_ in compiled.get_runtime_model().get_ordered_ops()}
    assert "MVN" in kinds and "Reduce" not in kinds, kinds
    built = OpenVinoProvider(1).build(g, members, list(g.outputs))
    ok, err, detail = verify(built, g, members, list(g.outputs))
    assert ok, detail


def test_a_broadcast_that_leaves_the_kernel_is_expanded():
    """Lazy broadcasts still produce full-shape values where the kernel writes them."""
    from kernorch.ir.graph import Builder
    from kernorch.ir.prims import Op

    b = Builder()
    x = b.input((4, 1), name="x")
    y = b.input((4, 5), name="y")
    wide = b.broadcast_to(x, (4, 5))
    s = b.binary(Op.ADD, wide, y)
    g = b.g
    g.outputs = [wide, s]
    members = {p.output for p in g.prims}
    k = export(g, members, list(g.outputs))
    assert [n.op_type for n in k.model.graph.node].count("Expand") == 1
    built = OrtProvider(1).build(g, members, list(g.outputs))
    ok, _, detail = verify(built, g, members, list(g.outputs))
    assert ok, detail


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
def test_linear_resize_exports_as_one_resize_per_axis(coord):
    """Fission spells a linear Resize as taps * weights per axis; the export gives it back to
    runtimes as Resize (OpenVINO runs Interpolate, not gathers), even after a transpose."""
    shape = [1, 4, 6, 5]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Resize", ["t", "", "", "sizes"], ["y"], mode="linear",
                              coordinate_transformation_mode=coord)]
    sizes = numpy_helper.from_array(np.array([1, 5, 12, 8], dtype=np.int64), "sizes")
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 12, 8])], [sizes])
    g, _ = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    members = {p.output for p in g.prims}
    k = export(g, members, list(g.outputs))
    linear = [n for n in k.model.graph.node
              if n.op_type == "Resize" and any(a.name == "mode" and a.s == b"linear" for a in n.attribute)]
    assert len(linear) == 2, [n.op_type for n in k.model.graph.node]
    built = OrtProvider(1).build(g, members, list(g.outputs))
    ok, err, detail = verify(built, g, members, list(g.outputs))
    assert ok, detail


def test_softmax_and_2d_transpose_export_as_runtimes_expect():
    """Fission's softmax goes back as one Softmax (runtimes fuse attention around it); a 2-D
    transpose goes out as a 3-D one (OpenVINO's 2-D transpose is a slow path)."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 12])])
    g, _ = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    members = {p.output for p in g.prims}
    k = export(g, members, list(g.outputs))
    ops = collections.Counter(n.op_type for n in k.model.graph.node)
    assert ops["Softmax"] == 1, ops
    assert all(len(a.ints) == 3 for n in k.model.graph.node if n.op_type == "Transpose" for a in n.attribute)
    built = OrtProvider(1).build(g, members, list(g.outputs))
    ok, err, detail = verify(built, g, members, list(g.outputs))
    assert ok, detail
