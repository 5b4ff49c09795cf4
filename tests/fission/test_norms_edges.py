"""Normalization edges test_norms.py does not reach: LayerNormalization's default axis and axis at
-rank, its stash_type other than float32 (NumPy brute force: neither onnxruntime nor the ONNX
reference implements it), BatchNormalization training with the default momentum and float16 input
against float32 parameters, float16 instance/batch norm prims in one dtype, one-line errors."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, assert_one_dtype_per_elementwise_prim, check, node_model, run_kernorch, run_ort
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx

RNG = np.random.default_rng(44)


def f32(*shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32)


def _bn(c, dtype="float32"):
    return {"scale": RNG.uniform(0.5, 1.5, c).astype(dtype), "bias": RNG.standard_normal(c).astype(dtype),
            "mean": RNG.standard_normal(c).astype(dtype), "var": RNG.uniform(0.5, 2.0, c).astype(dtype)}


@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_default_axis_is_the_last_on_rank_4(op):
    ins = {"x": f32(2, 3, 4, 5, scale=2, shift=3), "scale": f32(5)}
    if op == "LayerNormalization":
        check(op, {**ins, "b": f32(5)}, n_outputs=3, opset=17)
    else:
        check(op, ins, opset=23)


def test_layer_norm_axis_minus_rank_normalizes_everything():
    ins = {"x": f32(2, 3, 4, scale=2, shift=3), "scale": f32(2, 3, 4), "b": f32(2, 3, 4)}
    check("LayerNormalization", ins, n_outputs=3, opset=17, axis=-3)


def test_layer_norm_stash_type_double():
    """stash_type 11: Mean and InvStdDev in float64, Y back in float32."""
    x, scale, b = f32(2, 3, 4, 5, scale=2, shift=3), f32(4, 5), f32(4, 5)
    model = node_model("LayerNormalization", {"x": x, "scale": scale, "b": b}, n_outputs=3, opset=17, axis=2,
                       stash_type=11)
    y, mean, inv = run_kernorch(model, {"x": x, "scale": scale, "b": b})
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(2, 3), keepdims=True)
    i = 1 / np.sqrt(((x64 - m) ** 2).mean(axis=(2, 3), keepdims=True) + 1e-5)
    assert (y.dtype, mean.dtype, inv.dtype) == (np.float32, np.float64, np.float64)
    np.testing.assert_allclose(mean, m, rtol=1e-12)
    np.testing.assert_allclose(inv, i, rtol=1e-12)
    np.testing.assert_allclose(y, ((x64 - m) * i).astype(np.float32) * scale + b, rtol=1e-5, atol=1e-5)


def test_batchnorm_training_default_momentum():
    ins = {"x": f32(2, 3, 4, scale=2, shift=1), **_bn(3)}
    check("BatchNormalization", ins, n_outputs=3, opset=15, consts=["scale", "bias", "mean", "var"], training_mode=1)


@pytest.mark.parametrize("const", [True, False])
def test_batchnorm_training_float16_input_float32_parameters(const):
    """Y comes out in X's dtype (float16); checked against onnxruntime on Y alone (for the running
    statistics onnxruntime answers float32, the ONNX reference and kernorch float16)."""
    ins = {"x": f32(2, 3, 4, scale=2, shift=1).astype(np.float16), **_bn(3)}
    consts = ["scale", "bias", "mean", "var"] if const else []
    model = node_model("BatchNormalization", ins, n_outputs=3, opset=15, consts=consts, training_mode=1)
    feeds = {k: v for k, v in ins.items() if k not in consts}
    y = run_kernorch(model, feeds)[0]
    assert y.dtype == np.float16
    x = ins["x"].astype(np.float64)
    m, v = x.mean(axis=(0, 2), keepdims=True), x.var(axis=(0, 2), keepdims=True)
    want = (x - m) / np.sqrt(v + 1e-5) * ins["scale"].reshape(1, 3, 1) + ins["bias"].reshape(1, 3, 1)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    assert_one_dtype_per_elementwise_prim(model)


@pytest.mark.parametrize("const", [True, False])
def test_float16_norms_read_parameters_in_float16(const):
    ins = {"x": f32(2, 3, 4, 5).astype(np.float16), "scale": f32(3).astype(np.float16),
           "bias": f32(3).astype(np.float16)}
    consts = ["scale", "bias"] if const else []
    check("InstanceNormalization", ins, consts=consts, rel=1e-2)
    assert_one_dtype_per_elementwise_prim(node_model("InstanceNormalization", ins, consts=consts))
    bn = {"x": ins["x"], **_bn(3, "float16")}
    bconsts = ["scale", "bias", "mean", "var"] if const else []
    assert_one_dtype_per_elementwise_prim(node_model("BatchNormalization", bn, n_outputs=3, opset=15, consts=bconsts,
                                               training_mode=1))


def _model(op, x_shape, opset=17, **attrs):
    """No shape inference: ONNX refuses these nodes before kernorch sees them."""
    node = helper.make_node(op, ["x", "scale"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor("scale", TensorProto.FLOAT, [x_shape[-1]], [1.0] * x_shape[-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("model,msg", [
    (_model("LayerNormalization", [2, 3, 4], axis=3), "axis 3 out of range for rank 3"),
    (_model("LayerNormalization", [2, 3, 4], axis=-4), "axis -4 out of range for rank 3"),
    (_model("RMSNormalization", [2, 3, 4], opset=23, axis=3), "axis 3 out of range for rank 3"),
])
def test_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(msg) and "\n" not in str(e.value)


# -- defaults, -rank axes, empty inputs, parameter dtypes (mutation testing of the rule bodies) ----

def _bare(op, x_shape, opset=18, **attrs):
    """One input x, no shape inference (ONNX refuses these nodes before kernorch sees them)."""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("model,msg", [
    (_bare("LpNormalization", [2, 3, 4], p=3), "p=3, only p=1 and p=2 are defined"),
    (_bare("LpNormalization", [2, 3, 4], axis=3), "axis 3 out of range for rank 3"),
    (_bare("Softmax", [2, 3, 4], opset=13, axis=3), "axis 3 out of range for rank 3"),
    (_bare("MeanVarianceNormalization", [2, 3, 4], axes=[0, 3]), "axes [0, 3] out of range for rank 3"),
    (_bare("LRN", [2, 3, 4, 5], size=-1), "size must be a positive integer, got -1"),
])
def test_more_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(f"'': {msg}") and "\n" not in str(e.value)


@pytest.mark.parametrize("groups,scale,msg", [
    (0, 6, "num_groups=0 does not divide the 6 channels"),
    (-2, 6, "num_groups=-2 does not divide the 6 channels"),
    (2, 4, "input 1 has shape (4,), expected (6,) at opset 21"),
])
def test_group_norm_refusals_name_the_numbers(groups, scale, msg):
    ins = {"x": f32(2, 6, 5), "scale": f32(scale), "bias": f32(6)}
    model = node_model("GroupNormalization", ins, opset=21, consts=["scale", "bias"], num_groups=groups)
    with pytest.raises(UnsupportedOpError) as e:
        run_kernorch(model, {"x": ins["x"]})
    assert str(e.value).endswith(f"'': {msg}")


def test_default_attributes():
    """LpNormalization p=2 over the last axis, MeanVarianceNormalization over (0, 2, 3), GroupNormalization
    epsilon 1e-5 (on small-variance groups, where epsilon matters)."""
    check("LpNormalization", {"x": f32(3, 4, 5)}, opset=18)
    x = f32(2, 3, 4, 5, scale=3, shift=5)
    model = node_model("MeanVarianceNormalization", {"x": x}, axes=[0, 2, 3])  # ONNX's inference fails without
    del model.graph.node[0].attribute[:]
    assert_close(run_kernorch(model, {"x": x})[0], run_ort(model, {"x": x})[0])
    ins = {"x": f32(2, 6, 5, scale=0.01), "scale": f32(6), "bias": f32(6)}
    check("GroupNormalization", ins, opset=21, num_groups=3)


@pytest.mark.parametrize("op,attrs", [("LpNormalization", {"axis": -3, "p": 1}), ("Softmax", {"axis": -3}),
                                      ("LogSoftmax", {"axis": -3}), ("MeanVarianceNormalization", {"axes": [-3, 2]})])
def test_axis_minus_rank(op, attrs):
    check(op, {"x": f32(2, 3, 4, scale=2, shift=1)}, opset=18, **attrs)


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (2, 1)], ids=str)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_empty_and_single_element_rows(op, shape):
    (out,) = check(op, {"x": f32(*shape)}, opset=13)
    assert out.dtype == np.float32


@pytest.mark.parametrize("const", [True, False])
def test_batchnorm_inference_float16_input_float32_parameters(const):
    """Y in X's dtype (float16), every elementwise prim in one dtype; against the formula."""
    ins = {"x": f32(2, 3, 4, scale=2, shift=1).astype(np.float16), **_bn(3)}
    consts = ["scale", "bias", "mean", "var"] if const else []
    model = node_model("BatchNormalization", ins, opset=15, consts=consts)
    (y,) = run_kernorch(model, {k: v for k, v in ins.items() if k not in consts})
    assert y.dtype == np.float16
    s = {k: ins[k].astype(np.float64).reshape(1, 3, 1) for k in ("scale", "bias", "mean", "var")}
    want = (ins["x"].astype(np.float64) - s["mean"]) / np.sqrt(s["var"] + 1e-5) * s["scale"] + s["bias"]
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    assert_one_dtype_per_elementwise_prim(model)


def _dtypes(model):
    g, _ = import_onnx(model)
    return {t.dtype for t in g.types.values()}


@pytest.mark.parametrize("op,opset,stash", [("RMSNormalization", 23, True), ("LayerNormalization", 17, True),
                                            ("GroupNormalization", 21, True), ("GroupNormalization", 18, False)])
@pytest.mark.parametrize("const", [True, False])
def test_float16_statistics_in_the_stash_type(op, opset, stash, const):
    """stash_type (default float32) from opset 21 on for GroupNormalization; before, float16 throughout.
    The values agree either way to float16 accuracy: only the graph's dtypes tell."""
    n_param = {"GroupNormalization": 2 if opset == 18 else 4}.get(op, 6)  # per group, per channel, last axis
    ins = {"x": f32(2, 4, 6, scale=2, shift=3).astype(np.float16), "scale": f32(n_param).astype(np.float16)}
    attrs = {"num_groups": 2} if op.startswith("Group") else {}
    if op != "RMSNormalization":
        ins["bias"] = f32(*ins["scale"].shape).astype(np.float16)
    consts = [k for k in ins if k != "x"] if const else []
    model = node_model(op, ins, opset=opset, consts=consts, **attrs)
    assert _dtypes(model) == ({"float16", "float32"} if stash else {"float16"})
    assert_one_dtype_per_elementwise_prim(model)
