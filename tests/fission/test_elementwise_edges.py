"""Elementwise helpers the rule tests do not pin down (mutation testing, issue 44): rank-0 constants
take the dtype of the value they combine with (a float32 1/3 in a float64 Mean is 3e-8 off), and a
constant parameter becomes a new constant of the wanted shape, not a view (PRelu before opset 7:
the slope per channel, checked against the ONNX reference, onnxruntime has no PRelu-6)."""

import numpy as np
import pytest

from onnx_oracle import check, node_model, run_reference
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

RNG = np.random.default_rng(47)


def test_float64_mean_scales_by_a_float64_reciprocal():
    ins = {k: RNG.standard_normal((3, 4)) for k in "abc"}
    (out,) = check("Mean", ins, oracle=run_reference, rel=1e-13)
    assert out.dtype == np.float64
    g, _ = import_onnx(node_model("Mean", ins))
    (third,) = [g.constants[v] for p in g.prims for v in p.inputs if v in g.constants]
    assert third.shape == () and third.dtype == np.float64 and third == 1 / 3


@pytest.mark.parametrize("const", [True, False])
def test_opset6_prelu_slope_applies_per_channel(const):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s = RNG.uniform(0.05, 0.5, (3,)).astype(np.float32)
    (out,) = check("PRelu", {"x": x, "s": s}, opset=6, consts=["s"] if const else [], oracle=run_reference)
    np.testing.assert_allclose(out, np.where(x < 0, x * s[:, None, None], x), rtol=1e-6)
    if const:  # the slope is one new (3, 1, 1) constant: no prim reshapes the initializer
        g, _ = import_onnx(node_model("PRelu", {"x": x, "s": s}, opset=6, consts=["s"]))
        shaped = [g.constants[v] for p in g.prims for v in p.inputs if v in g.constants and g.constants[v].ndim]
        assert [c.shape for c in shaped] == [(3, 1, 1)] and np.array_equal(shaped[0].reshape(-1), s)
        assert [p.op for p in g.prims].count(Op.VIEW) == 1


# -- Identity / Dropout / CastLike rule bodies (mutated since bench/mutation.sh rewrites @rule) -------

@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_identity_passes_its_input_through(dtype):
    x = (RNG.standard_normal((3, 4)) * 5).astype(dtype)
    (out,) = check("Identity", {"x": x})
    assert out.dtype == x.dtype and np.array_equal(out, x)


def test_inference_dropout_is_identity_with_an_all_true_mask():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    out, mask = check("Dropout", {"x": x}, n_outputs=2)
    assert np.array_equal(out, x) and mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()
    ratio, off = np.array(0.3, np.float32), np.array(False)
    (out,) = check("Dropout", {"x": x, "r": ratio, "t": off}, consts=["r", "t"])
    assert np.array_equal(out, x)


@pytest.mark.parametrize("const", [True, False])
def test_training_mode_dropout_is_refused_by_name(const):
    from kernorch.errors import UnsupportedOpError

    x = RNG.standard_normal((2, 5)).astype(np.float32)
    model = node_model("Dropout", {"x": x, "r": np.array(0.3, np.float32), "t": np.array(True)},
                       consts=["r", "t"] if const else ["r"])
    with pytest.raises(UnsupportedOpError, match="training-mode Dropout"):
        import_onnx(model)


def test_cast_like_folds_a_constant_truncating_floats_to_integers():
    x = np.array([1.7, -1.7, 2.5, -0.5, 3.0], np.float32)
    ins = {"x": x, "like": np.zeros(2, np.int32)}
    (out,) = check("CastLike", ins, consts=["x"])
    assert out.dtype == np.int32 and out.tolist() == [1, -1, 2, 0, 3]
    g, _ = import_onnx(node_model("CastLike", ins, consts=["x"]))
    assert not g.prims or all(p.op is not Op.CAST for p in g.prims)  # folded to a constant


@pytest.mark.parametrize("like", [np.float16, np.float64, np.int64])
def test_cast_like_of_a_runtime_value_is_a_cast_to_the_second_inputs_dtype(like):
    x = (RNG.standard_normal((3, 4)) * 4).astype(np.float32)
    ins = {"x": x, "like": np.zeros(1, like)}
    (out,) = check("CastLike", ins, rel=1e-3)
    assert out.dtype == np.dtype(like)
    g, _ = import_onnx(node_model("CastLike", ins))
    assert [p.op for p in g.prims] == [Op.CAST] and g.types[g.prims[0].output].dtype == np.dtype(like).name


def test_cast_like_leaves_a_large_constant_to_a_cast_prim():
    x = RNG.standard_normal((1 << 16) + 1).astype(np.float32)
    ins = {"x": x, "like": np.zeros(1, np.float64)}
    g, _ = import_onnx(node_model("CastLike", ins, consts=["x"]))
    assert any(p.op is Op.CAST for p in g.prims)
    (out,) = check("CastLike", ins, consts=["x"], rel=0)
    assert out.dtype == np.float64
