"""Reduce* and ArgMax/ArgMin rules against onnxruntime: axes as attribute (opset 13) and as input
(opset 18), keepdims, noop_with_empty_axes, empty sets, integer inputs, ties."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(5)
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def _data(op, shape=(3, 4, 5)):
    if op == "ReduceLogSum":
        return RNG.uniform(0.1, 2.0, shape).astype(np.float32)
    if op == "ReduceProd":
        return RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def _reduce(op, x, axes, opset, consts=True, **attrs):
    """Axes as an input from opset 18 (ReduceSum: 13), as an attribute before."""
    if axes is not None and (opset >= 18 or (op == "ReduceSum" and opset >= 13)):
        ins = {"x": x, "axes": np.asarray(axes, np.int64)}
        return check(op, ins, opset=opset, consts=["axes"] if consts else [], **attrs)
    if axes is not None:
        attrs["axes"] = axes
    return check(op, {"x": x}, opset=opset, **attrs)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [1], [0, 2], [-1], [2, 0, 1]], ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce(op, axes, keepdims, opset):
    _reduce(op, _data(op), axes, opset, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes_input(op, noop):
    """An empty axes input reduces everything, unless noop_with_empty_axes."""
    _reduce(op, _data(op), [], 18, noop_with_empty_axes=noop)


@pytest.mark.parametrize("op", OPS)
def test_reduce_omitted_axes_with_noop(op):
    check(op, {"x": _data(op), "axes": None}, opset=18, noop_with_empty_axes=1)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_empty_set_is_a_constant(op, keepdims):
    """Reducing over a zero-size axis yields the reduction's identity, without a reduce prim."""
    from onnx_oracle import node_model

    from kernorch.frontend.onnx_import import import_onnx

    x = np.zeros((2, 0, 4), np.float32)
    _reduce(op, x, [1], 18, keepdims=keepdims)
    model = node_model(op, {"x": x, "axes": np.asarray([1], np.int64)}, consts=["axes"], keepdims=keepdims)
    g, _ = import_onnx(model, input_shapes={"x": x.shape})
    assert all(p.kind.value != "reduce" for p in g.prims)


def test_reduce_rank0_input():
    check("ReduceSum", {"x": np.asarray(2.5, np.float32)}, opset=13)
    check("ReduceL2", {"x": np.asarray(-2.5, np.float32)}, opset=13)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_reduce_dtypes(op, dtype):
    x = RNG.integers(-5, 6, (3, 4, 5)).astype(dtype)
    if op == "ReduceProd":
        x = RNG.integers(1, 3, (3, 4, 5)).astype(dtype)
    out = _reduce(op, x, [1], 18, keepdims=0)
    assert out[0].dtype == np.dtype(dtype)


def test_reduce_logsumexp_large_values_stay_finite():
    x = (RNG.standard_normal((3, 7)) * 10 + 1e4).astype(np.float32)
    out = _reduce("ReduceLogSumExp", x, [1], 18)
    assert np.isfinite(out[0]).all()


def test_reduce_logsumexp_of_minus_inf_row():
    """A row of -inf gives -inf (not NaN) thanks to the guarded maximum."""
    from onnx_oracle import node_model, run_kernorch

    x = np.full((2, 3), -np.inf, np.float32)
    x[1] = [0.0, 1.0, 2.0]
    model = node_model("ReduceLogSumExp", {"x": x, "axes": np.asarray([1], np.int64)}, consts=["axes"])
    out = run_kernorch(model, {"x": x})[0]
    assert out[0, 0] == -np.inf
    np.testing.assert_allclose(out[1, 0], np.log(np.exp([0.0, 1.0, 2.0]).sum()), rtol=1e-6)


def test_reduce_axes_must_be_constant():
    import onnx
    from onnx import helper

    from kernorch.errors import UnsupportedOpError
    from onnx_oracle import run_kernorch

    f, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    ins = [helper.make_tensor_value_info("x", f, [3, 4]), helper.make_tensor_value_info("axes", i64, [1])]
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"])], "g", ins,
                              [helper.make_tensor_value_info("y", f, ["d0", "d1"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match="axes"):
        run_kernorch(model, {"x": np.ones((3, 4), np.float32), "axes": np.asarray([1], np.int64)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce_with_ties(op, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    check(op, {"x": x}, opset=13, axis=axis, keepdims=keepdims, select_last_index=last)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_arg_reduce_dtypes(op, dtype):
    x = RNG.integers(-9, 9, (4, 6)).astype(dtype)
    check(op, {"x": x}, opset=13, axis=1)


def test_argmax_default_axis_random():
    check("ArgMax", {"x": RNG.standard_normal((5, 3)).astype(np.float32)}, opset=11)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
def test_hardmax(opset, axis):
    """Ties resolve to the first maximum; before opset 13 the input is coerced to 2-D at axis."""
    x = RNG.integers(0, 4, (2, 3, 4)).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    check("Hardmax", {"x": x}, opset=opset, **attrs)
