"""Reduction edges test_reduce.py does not reach: empty reductions of integer and boolean inputs
(the identity of each reduction per dtype), axes at -rank and rank, ArgMax/ArgMin with NaN
(NumPy's convention, checked by brute force: onnxruntime skips NaN), and that the arg-reduce
prims read operands of one dtype."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check, node_model, run_kernorch, run_reference
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Kind, Op

RNG = np.random.default_rng(44)


EMPTY = [(op, dt) for op in ("ReduceMax", "ReduceMin") for dt in ("int32", "int64", "int8", "uint8", "bool")] + [
    (op, dt) for op in ("ReduceSum", "ReduceProd", "ReduceMean") for dt in ("int32", "int64")] + [
    (op, dt) for op in ("ReduceSum", "ReduceProd") for dt in ("int8", "uint8")]


@pytest.mark.parametrize("op,dtype", EMPTY)
def test_empty_integer_and_boolean_reductions_are_the_identity(op, dtype):
    """int: the dtype's extremes for max/min, 0 and 1 for sum/prod (onnxruntime agrees where it
    has a kernel; bool and 8-bit sums are checked against the ONNX reference)."""
    x = np.zeros((2, 0, 3), dtype)
    oracle = run_reference if dtype == "bool" or (dtype in ("int8", "uint8") and op not in ("ReduceMax", "ReduceMin")) \
        else None
    kw = {"oracle": oracle} if oracle else {}
    (out,) = check(op, {"x": x, "axes": np.asarray([1], np.int64)}, consts=["axes"], opset=20, **kw)
    assert out.shape == (2, 1, 3) and out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_nonempty_integer_and_boolean_max_min(dtype):
    x = (RNG.integers(-50, 50, (3, 4, 5)) if dtype == "int32" else RNG.random((3, 4, 5)) > 0.5).astype(dtype)
    for op in ("ReduceMax", "ReduceMin"):
        check(op, {"x": x, "axes": np.asarray([1], np.int64)}, consts=["axes"], opset=20)


@pytest.mark.parametrize("axes", [[-3], [-3, 2], [-1, -2, -3]])
def test_axis_minus_rank_is_the_first_axis(axes):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    check("ReduceSum", {"x": x, "axes": np.asarray(axes, np.int64)}, consts=["axes"], opset=13)
    check("ReduceMax", {"x": x}, opset=13, axes=axes)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_axis_minus_rank(op):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)
    check(op, {"x": x}, opset=13, axis=-3)
    check("Hardmax", {"x": x}, opset=13, axis=-3)


def _model(op, attrs, inputs=()):
    """No shape inference: ONNX refuses these nodes before kernorch sees them."""
    node = helper.make_node(op, ["x"] + [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])],
                              [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in inputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("model,msg", [
    (_model("ReduceSum", {}, [("axes", [3])]), "axis 3 out of range for rank 3"),
    (_model("ReduceMax", {}, [("axes", [0, -4])]), "axis -4 out of range for rank 3"),
    (_model("ArgMax", {"axis": 3}), "axis 3 out of range for rank 3"),
    (_model("ArgMin", {"axis": -4}), "axis -4 out of range for rank 3"),
    (_model("Hardmax", {"axis": 3}), "axis 3 out of range for rank 3"),
])
def test_axes_out_of_range_are_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(msg)


def test_runtime_axes_name_the_input():
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    ins = [helper.make_tensor_value_info("x", f, [3, 4]), helper.make_tensor_value_info("axes", i64, [1])]
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"])], "g", ins,
                              [helper.make_tensor_value_info("y", f, ["d0", "d1"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(": axes (input 1) must be a constant")


def _brute_arg(x: np.ndarray, op: str, last: bool) -> np.ndarray:
    """NumPy's arg-reduce along axis 1 (a NaN is the extreme, the first one wins), from the end
    when ``last``."""
    f = np.argmax if op == "ArgMax" else np.argmin
    if not last:
        return f(x, axis=1)
    return x.shape[1] - 1 - f(x[:, ::-1], axis=1)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce_nan_is_the_extreme(op, last):
    x = RNG.integers(0, 3, (6, 7)).astype(np.float32)
    x[0, [1, 4]] = np.nan
    x[2, 6] = np.nan
    x[3, 0] = np.nan
    model = node_model(op, {"x": x}, opset=13, axis=1, keepdims=0, select_last_index=last)
    (out,) = run_kernorch(model, {"x": x})
    np.testing.assert_array_equal(out, _brute_arg(x, op, bool(last)))


@pytest.mark.parametrize("dtype,isnan", [("float32", True), ("int32", False), ("int64", False)])
def test_arg_reduce_prims_read_one_dtype_and_test_nan_only_for_floats(dtype, isnan):
    x = RNG.integers(-9, 9, (4, 6)).astype(dtype)
    for last in (0, 1):
        g, _ = import_onnx(node_model("ArgMax", {"x": x}, opset=13, axis=1, select_last_index=last))
        assert (Op.ISNAN in [p.op for p in g.prims]) is isnan
        for p in g.prims:
            if p.kind is Kind.ELEMENTWISE and p.op is not Op.CAST:
                operands = p.inputs[1:] if p.op is Op.WHERE else p.inputs
                assert len({g.types[v].dtype for v in operands}) == 1, (p.op, [g.types[v] for v in p.inputs])
