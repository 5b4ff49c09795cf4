"""Linear operators (Conv, ConvTranspose, Gemm, MatMul) against onnxruntime, per attribute
variant; each holds exactly one linear prim."""

import numpy as np
import pytest

from onnx_oracle import check, node_model
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Kind

RNG = np.random.default_rng(13)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def linear_prims(model) -> int:
    g, _ = import_onnx(model)
    return sum(p.kind is Kind.LINEAR for p in g.prims)


CONVS = [
    # (input shape, weight shape, attrs)
    ((1, 3, 9), (4, 3, 3), {}),
    ((2, 4, 10), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2]}),
    ((1, 3, 8, 7), (5, 3, 3, 3), {}),
    ((1, 3, 8, 7), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 8, 7), (5, 3, 3, 2), {"pads": [0, 1, 2, 0], "strides": [2, 3]}),
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "dilations": [2, 1]}),
    ((2, 6, 7, 8), (6, 3, 2, 3), {"group": 2, "strides": [1, 2], "dilations": [2, 2], "pads": [1, 0, 0, 2]}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 7, 8), (4, 3, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]}),
    ((1, 4, 5, 6, 4), (4, 2, 2, 2, 2), {"group": 2, "dilations": [1, 2, 1]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVS, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, bias):
    ins = {"x": rand(*xs), "w": rand(*ws)}
    if bias:
        ins["b"] = rand(ws[0])
    check("Conv", ins, consts=["w", "b"], **attrs)
    assert linear_prims(node_model("Conv", ins, consts=["w", "b"], **attrs)) == 1


CONV_TRANSPOSES = [
    ((1, 3, 5), (3, 2, 3), {}),
    ((1, 3, 5), (3, 2, 3), {"strides": [2], "output_padding": [1]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 3], "pads": [1, 0, 1, 2]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [3, 2], "output_padding": [2, 1]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [10, 12]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5), (2, 3, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"dilations": [2, 2]}),
    ((2, 4, 4, 5), (4, 2, 3, 3), {"group": 2, "strides": [2, 1], "pads": [1, 1, 0, 1]}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_TRANSPOSES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(xs, ws, attrs, bias):
    ins = {"x": rand(*xs), "w": rand(*ws)}
    if bias:
        ins["b"] = rand(ws[1] * attrs.get("group", 1))
    check("ConvTranspose", ins, consts=["w", "b"], **attrs)


GEMMS = [
    ({}, (3, 4), (4, 5), None),
    ({"transA": 1}, (4, 3), (4, 5), (5,)),
    ({"transB": 1}, (3, 4), (5, 4), (3, 5)),
    ({"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, (4, 3), (5, 4), (1, 5)),
    ({"alpha": -1.5}, (3, 4), (4, 5), (3, 1)),
    ({"beta": 0.25}, (3, 4), (4, 5), ()),
]


@pytest.mark.parametrize("attrs,sa,sb,sc", GEMMS, ids=str)
def test_gemm(attrs, sa, sb, sc):
    ins = {"a": rand(*sa), "b": rand(*sb)}
    if sc is not None:
        ins["c"] = rand(*sc)
    check("Gemm", ins, consts=["b"], **attrs)


@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (6, 4, 2)), ((5, 1, 2, 3), (1, 4, 3, 2)),
])
def test_matmul(sa, sb):
    check("MatMul", {"a": rand(*sa), "b": rand(*sb)})
    assert linear_prims(node_model("MatMul", {"a": rand(*sa), "b": rand(*sb)})) == 1
