"""Two constant linear maps in a row become one product (rewrite/compose.py): a token projection
followed by a 1x1 convolution after the tokens -> image reshape (SegFormer's decoder), and a
MatMul after a MatMul, match onnxruntime after the rewrite with one product left. An activation
between them, a bottleneck (composing would cost more), an intermediate with another reader and
a reshape that does not keep the feature axis are left alone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.ir.prims import Op

from .onnx_oracle import model_of, rewrite_matches_ort

RULE = "compose_linear"
H, W = 3, 5


def _model(k1, n1, n2, second="conv", bias1=True, bias2=True, between=None, reshape="transpose", extra_output=False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((k1, n1)).astype(np.float32), "w1")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y"])]
    y = "y"
    if bias1:
        inits.append(numpy_helper.from_array(rng.standard_normal(n1).astype(np.float32), "b1"))
        nodes.append(helper.make_node("Add", ["y", "b1"], ["yb"]))
        y = "yb"
    if between:
        nodes.append(helper.make_node(between, [y], ["ya"]))
        y = "ya"
    if second == "conv":
        inits.append(numpy_helper.from_array(np.array([1, n1, H, W], np.int64), "shape"))
        if reshape == "transpose":
            nodes.append(helper.make_node("Transpose", [y], ["t"], perm=[0, 2, 1]))
            nodes.append(helper.make_node("Reshape", ["t", "shape"], ["img"]))
        else:  # tokens read as an image without the transpose: features mixed with pixels
            nodes.append(helper.make_node("Reshape", [y, "shape"], ["img"]))
        inits.append(numpy_helper.from_array(rng.standard_normal((n2, n1, 1, 1)).astype(np.float32), "w2"))
        ins = ["img", "w2"]
        if bias2:
            inits.append(numpy_helper.from_array(rng.standard_normal(n2).astype(np.float32), "b2"))
            ins.append("b2")
        nodes.append(helper.make_node("Conv", ins, ["z"], kernel_shape=[1, 1]))
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal((n1, n2)).astype(np.float32), "w2"))
        nodes.append(helper.make_node("MatMul", [y, "w2"], ["z"]))
    nodes.append(helper.make_node("Sigmoid", ["z"], ["out"]))
    outputs = ["out"] + ([y] if extra_output else [])
    graph = helper.make_graph(nodes, "compose", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, H * W, k1])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return model_of(graph)


def _check(model, fired: int):
    return [p.op for p in rewrite_matches_ort(model, RULE, fired, atol=1e-5).prims]


@pytest.mark.parametrize("bias1,bias2", [(True, True), (False, True), (True, False), (False, False)])
def test_token_projection_then_pointwise_conv_is_one_product(bias1, bias2):
    ops = _check(_model(4, 16, 12, bias1=bias1, bias2=bias2), 1)
    assert ops.count(Op.MATMUL) == 1 and Op.CONV not in ops


@pytest.mark.parametrize("bias1", [True, False])
def test_matmul_then_matmul_is_one_product(bias1):
    ops = _check(_model(6, 16, 10, second="matmul", bias1=bias1), 1)
    assert ops.count(Op.MATMUL) == 1


@pytest.mark.parametrize("case", ["activation between", "bottleneck", "other reader", "features mixed"])
def test_left_alone(case):
    kwargs = {"activation between": {"between": "Relu"}, "bottleneck": {}, "other reader": {"extra_output": True},
              "features mixed": {"reshape": "plain"}}[case]
    k1, n1, n2 = (32, 4, 32) if case == "bottleneck" else (4, 16, 12)
    _check(_model(k1, n1, n2, **kwargs), 0)
