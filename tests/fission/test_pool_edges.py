"""Pooling edges the attribute grid of test_pool.py does not reach: ceil_mode where the last
window would start in the end padding (dropped, as onnxruntime and the ONNX reference do; at
opset 22, because ONNX's shape inference keeps that window before it, and the importer checks
kernorch's shapes against ONNX's), integer MaxPool
padded with the dtype's minimum, the identity of max per dtype, and the rejection of a
kernel_shape of the wrong rank."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check
from kernorch.errors import UnsupportedOpError
from kernorch.fission.rules.pool import lowest
from kernorch.frontend.onnx_import import import_onnx

RNG = np.random.default_rng(44)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("shape,attrs,spatial", [
    # ceil gives 3 windows, the third starts in the pad
    ((1, 2, 3), {"kernel_shape": [2], "strides": [2], "pads": [1, 1]}, (2,)),
    ((1, 2, 3), {"kernel_shape": [1], "strides": [3]}, (1,)),  # (n - 1) * stride == input size: still dropped
    ((1, 1, 3, 6), {"kernel_shape": [2, 3], "strides": [2, 4], "pads": [1, 1, 1, 2]}, (2, 2)),
])
def test_ceil_mode_drops_a_last_window_that_starts_in_the_end_padding(op, shape, attrs, spatial):
    x = RNG.standard_normal(shape).astype(np.float32)
    (out,) = check(op, {"x": x}, opset=22, ceil_mode=1, **attrs)
    assert out.shape[2:] == spatial


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_integer_max_pool_pads_with_the_dtype_minimum(dtype):
    """All-negative int8 windows at the border: a pad of 0 (or any value above -128) would win."""
    lo, hi = (-128, -1) if dtype is np.int8 else (0, 256)
    x = RNG.integers(lo, hi, (1, 2, 5, 5)).astype(dtype)
    check("MaxPool", {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    check("MaxPool", {"x": x}, opset=22, kernel_shape=[2, 3], strides=[2, 2], pads=[1, 2, 1, 0], ceil_mode=1)


@pytest.mark.parametrize("dtype,want", [("float16", -np.inf), ("float32", -np.inf), ("float64", -np.inf),
                                        ("bool", 0.0), ("int8", -128.0), ("uint8", 0.0), ("int32", -2.0 ** 31),
                                        ("int64", -2.0 ** 63)])
def test_lowest_is_the_identity_of_max(dtype, want):
    assert lowest(dtype) == want
    assert type(lowest(dtype)) is float


def test_kernel_shape_of_the_wrong_rank_is_rejected():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match=r"kernel_shape \[2\] does not match input \(1, 2, 4, 4\)"):
        import_onnx(model)
