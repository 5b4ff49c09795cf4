"""Softmax/LogSoftmax and the normalization rules (Batch/Instance/Layer/Group/RMS norm, LRN)
against onnxruntime."""

import numpy as np
import pytest

from onnx_oracle import check, node_model, run_kernorch

RNG = np.random.default_rng(3)


def f32(*shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32)


# -- softmax ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5)], ids=str)
def test_softmax(op, opset, axis, shape):
    """Before opset 13 the input is coerced to 2-D at axis (reduce over axis..rank-1)."""
    attrs = {} if axis is None else {"axis": axis}
    check(op, {"x": f32(*shape, scale=3)}, opset=opset, **attrs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_large_inputs_stay_finite(op):
    """Inputs around 1e4 overflow exp() unless the row maximum is subtracted first."""
    x = f32(4, 9, scale=50, shift=1e4)
    out = check(op, {"x": x}, opset=13)[0]
    assert np.isfinite(out).all()
    if op == "Softmax":
        np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("dtype,rel", [("float64", 1e-6), ("float16", 3e-3)])
def test_softmax_dtypes(dtype, rel):
    from onnx_oracle import run_ort_float32

    out = check("Softmax", {"x": f32(3, 8, scale=2).astype(dtype)}, opset=13, rel=rel, oracle=run_ort_float32)
    assert out[0].dtype == np.dtype(dtype)


# -- batch normalization ------------------------------------------------------------------------

def _bn_inputs(c, dtype="float32"):
    return {"scale": f32(c).astype(dtype), "bias": f32(c).astype(dtype), "mean": f32(c).astype(dtype),
            "var": RNG.uniform(0.5, 2.0, c).astype(dtype)}


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 4)], ids=str)
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("opset", [9, 15])
def test_batchnorm_inference(shape, const, opset):
    ins = {"x": f32(*shape), **_bn_inputs(shape[1])}
    consts = ["scale", "bias", "mean", "var"] if const else []
    check("BatchNormalization", ins, opset=opset, consts=consts, epsilon=1e-3)


def test_batchnorm_constant_params_fold_to_one_multiply_add():
    ins = {"x": f32(2, 3, 4, 5), **_bn_inputs(3)}
    from kernorch.frontend.onnx_import import import_onnx

    g, _ = import_onnx(node_model("BatchNormalization", ins, consts=["scale", "bias", "mean", "var"]))
    ops = sorted(p.op.value for p in g.prims if p.kind.value == "elementwise")
    assert ops == ["add", "mul"]


def test_batchnorm_float64():
    ins = {"x": f32(2, 3, 4).astype(np.float64), **_bn_inputs(3, "float64")}
    check("BatchNormalization", ins, opset=15, consts=["scale", "bias", "mean", "var"], rel=1e-10)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_batchnorm_training_mode(shape, momentum):
    ins = {"x": f32(*shape, scale=2, shift=1), **_bn_inputs(shape[1])}
    check("BatchNormalization", ins, n_outputs=3, opset=15, consts=["scale", "bias", "mean", "var"],
          training_mode=1, momentum=momentum)


# -- instance / layer / group / RMS normalization ---------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
@pytest.mark.parametrize("const", [True, False])
def test_instance_norm(shape, eps, const):
    ins = {"x": f32(*shape, scale=3, shift=2), "scale": f32(shape[1]), "bias": f32(shape[1])}
    check("InstanceNormalization", ins, consts=["scale", "bias"] if const else [], epsilon=eps)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm(axis, bias, eps):
    shape = (2, 3, 4, 5)
    norm_shape = shape[axis % 4:]
    ins = {"x": f32(*shape, scale=2, shift=3), "scale": f32(*norm_shape), "b": f32(*norm_shape) if bias else None}
    check("LayerNormalization", ins, n_outputs=3, opset=17, axis=axis, epsilon=eps)


def test_layer_norm_only_y_requested():
    ins = {"x": f32(3, 8), "scale": f32(8), "b": f32(8)}
    check("LayerNormalization", ins, n_outputs=1, opset=17, consts=["scale", "b"])


def test_layer_norm_float16_stashes_in_float32():
    """Statistics in float32 (stash_type=1): Mean/InvStdDev come out float32, Y float16."""
    from onnx_oracle import run_ort_float32

    ins = {"x": f32(4, 16, scale=4, shift=100).astype(np.float16), "scale": f32(16).astype(np.float16),
           "b": f32(16).astype(np.float16)}
    out = check("LayerNormalization", ins, n_outputs=3, opset=17, rel=3e-3, oracle=run_ort_float32)
    assert [o.dtype for o in out] == [np.float16, np.float32, np.float32]


@pytest.mark.parametrize("axis", [-1, -2, 0])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_rms_norm(axis, eps):
    shape = (2, 3, 4, 5)
    ins = {"x": f32(*shape, scale=2, shift=1), "scale": f32(*shape[axis % 4:])}
    check("RMSNormalization", ins, opset=23, axis=axis, epsilon=eps)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 6, 3, 4)], ids=str)
@pytest.mark.parametrize("const", [True, False])
def test_group_norm(groups, opset, shape, const):
    """Opset 18: scale/bias per group; opset 21: per channel."""
    n = groups if opset == 18 else shape[1]
    ins = {"x": f32(*shape, scale=2, shift=1), "scale": f32(n), "bias": f32(n)}
    check("GroupNormalization", ins, opset=opset, consts=["scale", "bias"] if const else [],
          num_groups=groups, epsilon=1e-3)


def test_group_norm_rejects_bad_group_count():
    from kernorch.errors import UnsupportedOpError

    ins = {"x": f32(2, 6, 5), "scale": f32(6), "bias": f32(6)}
    model = node_model("GroupNormalization", ins, opset=21, consts=["scale", "bias"], num_groups=4)
    with pytest.raises(UnsupportedOpError, match="num_groups"):
        run_kernorch(model, {"x": ins["x"]})


# -- LRN ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("attrs", [{}, {"alpha": 1e-2, "beta": 0.5, "bias": 2.0}])
def test_lrn(size, attrs):
    check("LRN", {"x": f32(2, 7, 4, 5, scale=3)}, size=size, **attrs)


def _lrn_brute_force(x, size, alpha, beta, bias):
    """The ONNX formula, channel by channel (the onnx reference evaluator's LRN loops over the
    batch instead of the channels and only takes 4-D inputs, so it cannot serve here)."""
    c_total = x.shape[1]
    out = np.empty_like(x)
    for c in range(c_total):
        lo, hi = max(0, c - (size - 1) // 2), min(c_total - 1, c + -(-(size - 1) // 2))
        sq = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha / size * sq) ** beta
    return out


@pytest.mark.parametrize("size", [2, 3, 4, 9])
@pytest.mark.parametrize("shape", [(2, 7, 4, 5), (2, 7, 6), (3, 5)], ids=str)
def test_lrn_even_size_and_other_ranks(size, shape):
    """onnxruntime implements odd sizes on 4-D inputs only: compare with the formula itself."""
    x = f32(*shape, scale=3)
    model = node_model("LRN", {"x": x}, size=size, alpha=1e-2, beta=0.6, bias=1.5)
    out = run_kernorch(model, {"x": x})[0]
    np.testing.assert_allclose(out, _lrn_brute_force(x, size, 1e-2, 0.6, 1.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_norm(p, axis):
    x = f32(3, 4, 5)
    x[1, 2] = 0.0  # zero rows along the last axis normalize to zero
    check("LpNormalization", {"x": x}, opset=18, p=p, axis=axis)


@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [2, 3]], ids=str)  # default: conformance test_mvn
def test_mean_variance_norm(axes):
    attrs = {} if axes is None else {"axes": axes}
    check("MeanVarianceNormalization", {"x": f32(2, 3, 4, 5, scale=3, shift=5)}, **attrs)
