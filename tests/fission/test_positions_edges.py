"""Range, CumSum and Trilu edges test_gather.py does not reach: Range's output dtype and empty
ranges, Trilu on rank 2 with the default `upper`, on wide and tall matrices behind leading axes
of size 1, and the one-line errors of all three."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, check, node_model, run_ort
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp

RNG = np.random.default_rng(44)


@pytest.mark.parametrize("dtype,start,limit,delta", [
    (np.int32, 1, 10, 3), (np.int16, 1, 10, 3), (np.int64, 5, 2, 1), (np.float64, 0.5, 2.0, 0.3),
    (np.float32, 3.0, -1.0, -0.75), (np.float32, 1.0, 1.0, 0.5),
])
def test_range_dtype_and_length(dtype, start, limit, delta):
    ins = {"s": np.array(start, dtype), "l": np.array(limit, dtype), "d": np.array(delta, dtype)}
    model = node_model("Range", ins, consts=["s", "l", "d"])
    g, _ = import_onnx(model)
    assert_close(interp.run(g, {})[g.outputs[0]], run_ort(model, {})[0])


def test_trilu_rank_2_default_upper():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    check("Trilu", {"x": x})
    check("Trilu", {"x": x.T.copy(), "k": np.array(-1, np.int64)}, consts=["k"])


@pytest.mark.parametrize("shape", [(1, 1, 2, 9), (1, 1, 1, 9, 2), (1, 3, 1, 7), (1, 1, 9, 2)])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [0, 2, -3])
def test_trilu_wide_and_tall(shape, upper, k):
    x = RNG.standard_normal(shape).astype(np.float32)
    check("Trilu", {"x": x, "k": np.array(k, np.int64)}, consts=["k"], upper=upper)


def _model(op, x_shape, inputs, runtime=(), dtype=TensorProto.FLOAT, **attrs):
    """No shape inference: ONNX refuses some of these nodes before kernorch sees them."""
    node = helper.make_node(op, ([] if x_shape is None else ["x"]) + [n for n, _ in inputs], ["y"], **attrs)
    g_in = [] if x_shape is None else [helper.make_tensor_value_info("x", dtype, x_shape)]
    inits = []
    for n, v in inputs:
        if n in runtime:
            g_in.append(helper.make_tensor_value_info(n, TensorProto.INT64, []))
        else:
            inits.append(helper.make_tensor(n, TensorProto.INT64, [], [v]))
    graph = helper.make_graph([node], "g", g_in, [helper.make_tensor_value_info("y", dtype, ["a"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


RANGE = [("s", 0), ("l", 5), ("d", 1)]


@pytest.mark.parametrize("model,msg", [
    (_model("Range", None, RANGE, runtime=["s"], dtype=TensorProto.INT64), ": start (input 0) must be a constant"),
    (_model("Range", None, RANGE, runtime=["d"], dtype=TensorProto.INT64), ": delta (input 2) must be a constant"),
    (_model("Range", None, [("s", 0), ("l", 5), ("d", 0)], dtype=TensorProto.INT64), "delta is 0"),
    (_model("CumSum", [3, 4], [("a", 0)], runtime=["a"]), ": axis (input 1) must be a constant"),
    (_model("CumSum", [3, 4], [("a", 2)]), "axis 2 is out of range for rank 2"),
    (_model("CumSum", [3, 4], [("a", -3)]), "axis -3 is out of range for rank 2"),
    (_model("Trilu", [5], []), "input of rank 1; Trilu needs rank >= 2"),
    (_model("Trilu", [3, 4], [("k", 1)], runtime=["k"]), ": k (input 1) must be a constant"),
])
def test_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(msg) and "\n" not in str(e.value)
