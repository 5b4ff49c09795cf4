"""Gathers with runtime indices (Gather, GatherElements, GatherND), scatters, and the position /
mask operators exporters emit (Range, CumSum, Trilu) against onnxruntime; negative, boundary
and out-of-range indices, int32 and int64 indices."""

import numpy as np
import pytest

from onnx_oracle import assert_close, check, feeds_of, node_model, run_ort
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.ir.layout import GatherIndexError
from kernorch.ir.prims import Op

RNG = np.random.default_rng(13)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


def prim_ops(model) -> set[Op]:
    g, _ = import_onnx(model)
    return {p.op for p in g.prims}


@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("axis,indices", [
    (0, [2, 0, -3, -1]),                 # both ends, negative wrap
    (1, [[3, 0], [-4, 1]]),              # 2-d indices
    (2, 4), (2, -5),                     # rank-0 index at the boundaries
    (-1, [[[0, 4, -1]]]),
])
def test_gather_runtime_indices(axis, indices, itype):
    idx = np.array(indices, dtype=itype)
    ins = {"x": X, "i": idx}
    assert Op.GATHER in prim_ops(node_model("Gather", ins, axis=axis))
    check("Gather", ins, axis=axis)


def test_token_embedding():
    table = RNG.standard_normal((1000, 16)).astype(np.float32)
    ids = RNG.integers(0, 1000, size=(2, 7)).astype(np.int64)
    ids[0, 0], ids[1, -1] = 0, 999
    check("Gather", {"w": table, "ids": ids}, consts=["w"], axis=0)


@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("axis,shape", [(0, (2, 4, 5)), (1, (3, 6, 5)), (2, (3, 4, 2)), (-1, (1, 2, 7))])
def test_gather_elements(axis, shape, itype):
    n = X.shape[axis]
    idx = RNG.integers(-n, n, size=shape).astype(itype)
    idx.reshape(-1)[0], idx.reshape(-1)[-1] = n - 1, -n
    check("GatherElements", {"x": X, "i": idx}, axis=axis)


@pytest.mark.parametrize("itype", [np.int64])  # ONNX GatherND takes int64 indices only
@pytest.mark.parametrize("idx_shape,batch", [((2, 1), 0), ((2, 2), 0), ((4, 3), 0), ((3, 1), 1), ((3, 2, 2), 1),
                                             ((2, 2, 2), 0)])
def test_gather_nd(idx_shape, batch, itype):
    k = idx_shape[-1]
    sizes = X.shape[batch:batch + k]
    idx = np.stack([RNG.integers(-n, n, size=idx_shape[:-1]) for n in sizes], axis=-1).astype(itype)
    if batch:
        idx = idx[: X.shape[0]] if idx.shape[0] >= X.shape[0] else idx
    check("GatherND", {"x": X, "i": idx}, batch_dims=batch)


def test_out_of_range_index_is_a_clear_interpreter_error():
    model = node_model("Gather", {"x": X, "i": np.array([0, 3], np.int64)}, axis=0)
    g, _ = import_onnx(model)
    with pytest.raises(GatherIndexError, match=r"index 3 is out of range \[-3, 3\) on data axis 0"):
        interp.run(g, {g.inputs[0]: X, g.inputs[1]: np.array([0, 3], np.int64)})
    with pytest.raises(GatherIndexError, match=r"index -4 is out of range"):
        interp.run(g, {g.inputs[0]: X, g.inputs[1]: np.array([-4, 0], np.int64)})


def test_constant_out_of_range_indices_are_rejected_at_import():
    model = node_model("GatherElements", {"x": X, "i": np.full((3, 4, 5), 9, np.int64)}, consts=["i"], axis=2)
    with pytest.raises(UnsupportedOpError, match=r"out of range \[-5, 5\) on axis 2"):
        import_onnx(model)


def _run_opaque(op, ins, **attrs):
    model = node_model(op, ins, **attrs)
    feeds = feeds_of(model, ins)
    g, report = import_onnx(model)
    assert report.opaque == {op: 1}
    out = interp.run(g, {g.inputs[k]: feeds[g.name(v)] for k, v in enumerate(g.inputs)})
    assert_close(out[g.outputs[0]], run_ort(model, feeds)[0])


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_is_opaque_and_matches(reduction):
    idx = np.array([[1], [-1]], np.int64)
    upd = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    _run_opaque("ScatterND", {"x": X, "i": idx, "u": upd}, reduction=reduction)


def test_scatter_elements_is_opaque_and_matches():
    idx = np.array([[[0, 1, 2, 3, 4]]], np.int64).repeat(3, 0)
    upd = RNG.standard_normal((3, 1, 5)).astype(np.float32)
    _run_opaque("ScatterElements", {"x": X, "i": idx, "u": upd}, axis=2, reduction="add")


@pytest.mark.parametrize("dtype,start,limit,delta", [(np.int64, 0, 16, 1), (np.int32, 10, -2, -3),
                                                    (np.float32, 0.5, 3.0, 0.7)])
def test_range_with_constant_bounds(dtype, start, limit, delta):
    ins = {"s": np.array(start, dtype), "l": np.array(limit, dtype), "d": np.array(delta, dtype)}
    model = node_model("Range", ins, consts=["s", "l", "d"])
    g, _ = import_onnx(model)
    (out,) = [g.constants[p.inputs[0]] for p in g.prims]  # folded: the output copies a constant
    np.testing.assert_allclose(out, run_ort(model, {})[0])


def test_range_with_runtime_bounds_is_rejected():
    ins = {"s": np.array(0, np.int64), "l": np.array(5, np.int64), "d": np.array(1, np.int64)}
    with pytest.raises(UnsupportedOpError, match="limit \\(input 1\\) must be a constant"):
        import_onnx(node_model("Range", ins, consts=["s", "d"]))


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis,dtype", [(1, np.float32), (-1, np.int64), (0, np.int32)])
def test_cumsum(axis, dtype, exclusive, reverse):
    x = (X * 10).astype(dtype)
    check("CumSum", {"x": x, "a": np.array(axis, np.int64)}, consts=["a"], exclusive=exclusive, reverse=reverse)


def test_position_ids_from_attention_mask():
    """What BERT/Llama exporters compute: cumsum(mask) * mask - 1, then a gather of positions."""
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    check("CumSum", {"m": mask, "a": np.array(1, np.int64)}, consts=["a"])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2, 7, -9])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_trilu(upper, k, dtype):
    x = (RNG.standard_normal((2, 4, 6)) > 0 if dtype is np.bool_ else X.reshape(3, 4, 5)[:2] * 3).astype(dtype)
    ins = {"x": x} if k is None else {"x": x, "k": np.array(k, np.int64)}
    model = node_model("Trilu", ins, consts=["k"], upper=upper)
    assert prim_ops(model) == {Op.VIEW}
    check("Trilu", ins, consts=["k"], upper=upper)


@pytest.mark.parametrize("op", ["NonZero", "Unique"])
def test_data_dependent_shapes_are_one_line_errors(op):
    x = np.array([[1, 0], [2, 2]], np.int64)
    model = node_model(op, {"x": x})
    with pytest.raises(UnsupportedOpError, match=f"operator {op} .*output shape depends on the input values") as e:
        import_onnx(model)
    assert "\n" not in str(e.value)


def test_random_test_data_keeps_gather_indices_in_range():
    """Every random-input generator (kernorch check, kernel verification, rewrite checks) draws
    index inputs inside the gathered axis, also through a cast and a reshape on the way."""
    from onnx import TensorProto, helper

    from kernorch.frontend.inputs import random_inputs
    from kernorch.ir.graph import index_limits
    from kernorch.providers.base import random_inputs as provider_inputs
    from kernorch.rewrite.check import random_feeds

    nodes = [helper.make_node("Cast", ["i"], ["i32"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["i32", "shape"], ["i2"]),
             helper.make_node("GatherElements", ["x", "i2"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
                                           helper.make_tensor_value_info("i", TensorProto.INT64, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])])
    g, _ = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    i = g.inputs[1]
    assert index_limits(g)[i] == 2
    for seed in range(5):
        for arr in (random_inputs(g, seed)["i"], provider_inputs(g, g, seed)[i], random_feeds(g, seed)[i]):
            assert arr.min() >= -2 and arr.max() < 2
        interp.run(g, random_feeds(g, seed))


def test_out_of_range_user_input_is_a_one_line_input_error():
    from kernorch.errors import InputError
    from kernorch.frontend.reference import run_interpreter

    g, _ = import_onnx(node_model("Gather", {"x": X, "i": np.array([0, 1], np.int64)}, axis=0))
    with pytest.raises(InputError, match=r"gather .*index 5 is out of range \[-3, 3\)") as e:
        run_interpreter(g, {"x": X, "i": np.array([0, 5], np.int64)})
    assert "\n" not in str(e.value)


def test_constant_gather_computed_out_of_range_is_one_line():
    """Indices that only become constant by folding (here: an Add of constants) are checked too."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", ["a", "b"], ["i"]), helper.make_node("GatherElements", ["x", "i"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor("a", TensorProto.INT64, [2, 2], [0, 1, 1, 0]),
                               helper.make_tensor("b", TensorProto.INT64, [2, 2], [0, 0, 2, 0])])
    with pytest.raises(UnsupportedOpError, match=r"GatherElements node .*out of range \[-2, 2\)"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_opaque_kernels_run_on_onnxruntime():
    """An opaque prim's kernel is one onnxruntime node (not the Python reference), and matches the
    reference interpreter."""
    from kernorch import codegen

    upd = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    idx = np.array([[2], [0]], np.int64)
    g, _ = import_onnx(node_model("ScatterND", {"x": X, "i": idx, "u": upd}))
    members = {p.output for p in g.prims if p.op is Op.OPAQUE}
    (out,) = members
    kernel = codegen.build_kernel(g, members, [out])
    assert kernel._session is not None and "onnxruntime" in kernel.detail
    np.testing.assert_array_equal(kernel.run([X, idx, upd])[0].numpy(),
                                  interp.run(g, {g.inputs[0]: X, g.inputs[1]: idx, g.inputs[2]: upd})[g.outputs[0]])


def test_data_dependent_op_on_constants_folds():
    """NonZero of a constant (a mask baked into the model) has a known value, so it folds."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("NonZero", ["m"], ["nz"]), helper.make_node("Cast", ["nz"], ["f"], to=1),
             helper.make_node("Add", ["x", "f"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor("m", TensorProto.INT64, [4], [0, 5, 0, 7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, report = import_onnx(model)
    assert not report.opaque and report.folded >= 2
    x = RNG.standard_normal((1, 2)).astype(np.float32)
    assert_close(interp.run(g, {g.inputs[0]: x})[g.outputs[0]], run_ort(model, {"x": x})[0])
