"""The rewrites on what fission really produces, against onnxruntime: Conv + BatchNormalization
folds to one convolution, and an attention block (three projections, Softmax, MatMul) merges its
projections and, with every rule on, keeps its result."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.interp import run
from kernorch.ir.prims import Op
from kernorch.rewrite import ALL_RULES, DEFAULT_RULES, apply_rewrites

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits):
    arrays = [numpy_helper.from_array(a.astype("float32"), n) for n, a in inits.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], arrays)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _against_onnxruntime(model, rules):
    g, _ = import_onnx(model)
    out, report = apply_rewrites(g, rules)
    feeds = {g.names[v]: RNG.standard_normal(g.types[v].shape).astype("float32") for v in g.inputs}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = run(out, [feeds[g.names[v]] for v in g.inputs])
    for w, v in zip(want, out.outputs):
        np.testing.assert_allclose(got[v], w, rtol=1e-4, atol=1e-4)
    return out, report


@pytest.mark.parametrize("transpose", [False, True])
def test_conv_batchnorm_from_onnx_folds_to_one_conv(transpose):
    c, k = 3, 4
    w = RNG.standard_normal((c, k, 3, 3) if transpose else (k, c, 3, 3))
    inits = {"w": w, "b": RNG.standard_normal(k), "gamma": RNG.standard_normal(k),
             "beta": RNG.standard_normal(k), "mean": RNG.standard_normal(k), "var": RNG.random(k) + 0.5}
    conv = helper.make_node("ConvTranspose" if transpose else "Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])
    nodes = [conv, helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["y"])]
    model = _model(nodes, [("x", [2, c, 6, 6])], [("y", [2, k, 6, 6])], inits)
    out, report = _against_onnxruntime(model, DEFAULT_RULES)
    assert [p.op for p in out.prims] == [Op.CONV_TRANSPOSE if transpose else Op.CONV, Op.RELU]
    assert report["bn_fold"] >= 2


@pytest.mark.parametrize("rules", [DEFAULT_RULES, ALL_RULES])
def test_attention_from_onnx(rules):
    d, s = 16, 12
    inits = {"wq": RNG.standard_normal((d, d)), "wk": RNG.standard_normal((d, d)), "wv": RNG.standard_normal((d, 4)),
             "scale": np.array(d ** -0.5)}
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "scale"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    out, report = _against_onnxruntime(_model(nodes, [("x", [2, s, d])], [("y", [2, s, 4])], inits), rules)
    assert report["merge_linear"] == 1
    if rules == ALL_RULES:
        assert report["div_past_matmul"] >= 1 and report["sum_to_matmul"] >= 1
