"""Shape operator edges test_shape_ops.py does not reach: view_chain when two masked maps cannot
compose (and with no maps), axes given as a scalar tensor, axes at rank and at -rank - 1, rank-0
axis normalization, Reshape's one-line errors and its -1 beside a zero dim."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check
from kernorch.errors import UnsupportedOpError
from kernorch.fission.registry import NodeContext
from kernorch.fission.rules.shape_ops import norm_axis, reshape_target, view_chain
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import Op

RNG = np.random.default_rng(44)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def test_view_chain_splits_where_pad_values_differ():
    """Two pads with different values cannot be one view: the chain is cut there, the rest
    composes, and the values are those of applying every map in turn."""
    g = Graph()
    b = Builder(g)
    x = b.input((3, 4))
    m1 = layout.pad((3, 4), [1, 0], [1, 2], value=-1.0)
    m2 = layout.pad(m1.out_shape, [0, 2], [1, 0], value=5.0)
    m3 = layout.permute(m2.out_shape, (1, 0))
    y = view_chain(b, x, [m1, m2, m3])
    g.outputs.append(y)
    assert [p.op for p in g.prims] == [Op.VIEW, Op.VIEW]
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    want = np.pad(np.pad(a, [(1, 1), (0, 2)], constant_values=-1.0), [(0, 1), (2, 0)], constant_values=5.0).T
    np.testing.assert_array_equal(interp.run(g, {x: a})[y], want)


def test_view_chain_of_no_maps_is_the_input():
    g = Graph()
    b = Builder(g)
    x = b.input((3, 4))
    assert view_chain(b, x, []) == x and not g.prims


def test_axes_as_a_scalar_tensor():
    """onnxruntime takes a rank-0 axes input for Unsqueeze; it reads as one axis."""
    check("Unsqueeze", {"x": X, "a": np.array(1, np.int64)}, consts=["a"], opset=13)
    check("Unsqueeze", {"x": X, "a": np.array(-5, np.int64)}, consts=["a"], opset=13)


def _model(op, x_shape, inputs=(), **attrs):
    """No shape inference: ONNX refuses these nodes before kernorch sees them."""
    node = helper.make_node(op, ["x"] + [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d"])],
                              [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in inputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("model,msg", [
    (_model("Unsqueeze", [2, 3, 4, 5], [("axes", [5])]), "axis 5 is out of range for rank 5"),
    (_model("Unsqueeze", [2, 3, 4, 5], [("axes", [-6])]), "axis -6 is out of range for rank 5"),
    (_model("Squeeze", [1, 3], [("axes", [2])]), "axis 2 is out of range for rank 2"),
    (_model("Squeeze", [1], [("axes", [1])]), "axis 1 is out of range for rank 1"),
    (_model("Squeeze", [2, 3], [("axes", [1])]), "cannot squeeze axis 1 of size 3"),
    (_model("Reshape", [2, 3, 4, 5], [("shape", [-1, 4, -1])]), "shape [-1, 4, -1] has more than one -1"),
    (_model("Reshape", [2, 3, 4, 5], [("shape", [-1, -1, -1])]), "shape [-1, -1, -1] has more than one -1"),
    (_model("Reshape", [2, 3, 4, 5], [("shape", [7, -1])]), "cannot reshape (2, 3, 4, 5) to [7, -1]"),
    (_model("Reshape", [2, 3, 4, 5], [("shape", [2, 3, 4])]), "cannot reshape (2, 3, 4, 5) to [2, 3, 4]"),
    (_model("DepthToSpace", [2, 8, 3], blocksize=2), "expects a rank-4 input, got (2, 8, 3)"),
    (_model("DepthToSpace", [2, 8, 3, 3], blocksize=2, mode="XYZ"), "unknown mode 'XYZ'"),
])
def test_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(msg) and "\n" not in str(e.value)


@pytest.mark.parametrize("op,what", [("Reshape", "shape"), ("Unsqueeze", "axes"), ("Squeeze", "axes")])
def test_runtime_shape_or_axes_name_the_input(op, what):
    node = helper.make_node(op, ["x", "a"], ["y"])
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
           helper.make_tensor_value_info("a", TensorProto.INT64, [1])]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d"])])
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert str(e.value).endswith(f": {what} (input 1) must be a constant")


def test_reshape_with_ones_is_not_two_minus_ones():
    check("Reshape", {"x": X, "shape": np.array([1, 1, 120, 1], np.int64)}, consts=["shape"])


def _ctx():
    return NodeContext(helper.make_node("Squeeze", ["x"], ["y"]), Builder(Graph()), [None], 13)


def test_rank_0_takes_axis_0_only():
    assert norm_axis(_ctx(), 0, 0) == 0
    for axis in (1, -1):
        with pytest.raises(UnsupportedOpError, match=f"axis {axis} is out of range for rank 0"):
            norm_axis(_ctx(), axis, 0)


def test_minus_one_beside_a_zero_dim_is_zero():
    """ONNX calls the target invalid (its product is 0), but the -1 then infers 0, never a
    division by zero."""
    assert reshape_target(_ctx(), (0, 3), [0, -1], False) == [0, 0]
    assert reshape_target(_ctx(), (0, 3), [-1, 0], True) == [0, 0]
