"""Pooling against onnxruntime per attribute variant: always a window view plus a reduce (and
for averages a division), never an opaque or linear prim."""

import numpy as np
import pytest

from onnx_oracle import check, node_model
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Kind, Op

RNG = np.random.default_rng(14)
X1 = RNG.standard_normal((2, 3, 11)).astype(np.float32)
X2 = RNG.standard_normal((1, 2, 9, 8)).astype(np.float32)
X3 = RNG.standard_normal((1, 2, 6, 7, 5)).astype(np.float32)

POOLS = [
    (X1, {"kernel_shape": [3]}),
    (X1, {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    (X1, {"kernel_shape": [3], "strides": [2], "dilations": [2], "pads": [2, 1]}),
    (X2, {"kernel_shape": [2, 2]}),
    (X2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (X2, {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 1, 2, 0]}),
    (X2, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    (X2, {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    (X2, {"kernel_shape": [2, 2], "dilations": [2, 3]}),
    (X2, {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2], "pads": [1, 2, 1, 0], "ceil_mode": 1}),
    (X2, {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    (X2, {"kernel_shape": [4, 3], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    (X2, {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    (X3, {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 1, 0, 0, 1, 1]}),
    (X3, {"kernel_shape": [3, 2, 2], "strides": [2, 2, 2], "ceil_mode": 1}),
]


def _ops(model):
    g, _ = import_onnx(model)
    return [p.op for p in g.prims]


@pytest.mark.parametrize("x,attrs", POOLS, ids=lambda c: str(c) if isinstance(c, dict) else str(c.shape))
def test_max_pool(x, attrs):
    check("MaxPool", {"x": x}, **attrs)
    assert _ops(node_model("MaxPool", {"x": x}, **attrs)) == [Op.VIEW, Op.RMAX]


@pytest.mark.parametrize("x,attrs", POOLS, ids=lambda c: str(c) if isinstance(c, dict) else str(c.shape))
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(x, attrs, count_include_pad):
    check("AveragePool", {"x": x}, opset=19, count_include_pad=count_include_pad, **attrs)
    ops = _ops(node_model("AveragePool", {"x": x}, opset=19, count_include_pad=count_include_pad, **attrs))
    assert ops[:2] == [Op.VIEW, Op.SUM] and Op.DIV in ops
    assert all(o.value != "opaque" for o in ops)


def test_max_pool_uint8_pads_with_the_dtype_minimum():
    x = RNG.integers(0, 255, (1, 1, 5, 5)).astype(np.uint8)
    check("MaxPool", {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])


def test_max_pool_indices_output_is_rejected():
    model = node_model("MaxPool", {"x": X2}, n_outputs=2, kernel_shape=[2, 2])
    with pytest.raises(UnsupportedOpError, match="Indices"):
        import_onnx(model)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("x", [X1, X2, X3], ids=lambda x: str(x.shape))
def test_global_pool(op, x):
    check(op, {"x": x})
    g, _ = import_onnx(node_model(op, {"x": x}))
    assert {p.kind for p in g.prims} <= {Kind.REDUCE, Kind.ELEMENTWISE}


@pytest.mark.parametrize("x,attrs", POOLS[:6] + POOLS[10:12], ids=lambda c: str(c) if isinstance(c, dict) else str(c.shape))
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(x, attrs, p):
    check("LpPool", {"x": x}, p=p, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    check("GlobalLpPool", {"x": X2}, p=p)
