"""Activation rules against onnxruntime on random inputs, per attribute variant."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(7)
X = (RNG.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)

CASES = [
    ("HardSigmoid", {}, 18),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 18),
    ("HardSwish", {}, 18),
    ("Mish", {}, 18),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "none"}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
    ("LeakyRelu", {}, 18),
    ("LeakyRelu", {"alpha": 0.2}, 18),
    ("Elu", {}, 18),
    ("Elu", {"alpha": 0.5}, 18),
    ("Selu", {}, 18),
    ("Selu", {"alpha": 2.0, "gamma": 3.0}, 18),
    ("Celu", {}, 18),
    ("Celu", {"alpha": 2.0}, 18),
    ("ThresholdedRelu", {}, 18),
    ("ThresholdedRelu", {"alpha": 0.5}, 18),
    ("Softsign", {}, 18),
    ("Relu", {}, 18),
    ("Sigmoid", {}, 18),
    ("Softplus", {}, 18),
    ("Sqrt", {}, 18),
    ("Erf", {}, 18),
    ("Reciprocal", {}, 18),
]


@pytest.mark.parametrize("op,attrs,opset", CASES, ids=lambda c: str(c))
def test_activation(op, attrs, opset):
    x = np.abs(X) + 0.1 if op in ("Sqrt", "Reciprocal") else X
    check(op, {"x": x}, opset=opset, **attrs)


@pytest.mark.parametrize("dtype,rel", [("float64", 1e-5), ("float16", 2e-3)])
@pytest.mark.parametrize("op,attrs", [("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Mish", {}),
                                      ("HardSwish", {}), ("Elu", {}), ("LeakyRelu", {})])
def test_activation_keeps_dtype(op, attrs, dtype, rel):
    """Scalars take the input's dtype: float16/float64 results stay float16/float64 (onnxruntime
    lacks CPU kernels for several of these, so the oracle is its float32 result)."""
    from onnx_oracle import run_ort_float32

    x = X.astype(dtype)
    out = check(op, {"x": x}, opset=20, rel=rel, oracle=run_ort_float32, **attrs)
    assert out[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("slope_shape", [(1,), (5,), (4, 5), (3, 1, 1), (1, 3, 1, 1), (2, 3, 4, 5)])
@pytest.mark.parametrize("const", [True, False])
def test_prelu(slope_shape, const):
    slope = RNG.uniform(0.05, 0.5, slope_shape).astype(np.float32)
    check("PRelu", {"x": X, "slope": slope}, consts=["slope"] if const else [])


def test_prelu_rejects_slope_wider_than_x():
    from kernorch.errors import UnsupportedOpError
    from onnx_oracle import node_model, run_kernorch

    slope = np.ones((3, 4, 5), np.float32)
    x = np.ones((4, 5), np.float32)
    model = node_model("PRelu", {"x": x, "slope": slope}, consts=["slope"])
    with pytest.raises(UnsupportedOpError, match="slope shape"):
        run_kernorch(model, {"x": x})


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -1.0, "max": 2.0}])
def test_clip_opset6_attributes(attrs):
    check("Clip", {"x": X}, opset=6, **attrs)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("lo,hi", [(-1.0, 2.0), (None, 0.5), (-0.5, None), (None, None), (1.0, -1.0)])
@pytest.mark.parametrize("const", [True, False])
def test_clip_inputs(opset, lo, hi, const):
    ins = {"x": X, "lo": None if lo is None else np.asarray(lo, np.float32),
           "hi": None if hi is None else np.asarray(hi, np.float32)}
    check("Clip", ins, opset=opset, consts=["lo", "hi"] if const else [])


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "float64"])
def test_clip_dtypes(dtype):
    x = (X * 10).astype(dtype)
    lo, hi = np.asarray(-7, dtype), np.asarray(9, dtype)
    out = check("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13, consts=["lo", "hi"])
    assert out[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.5}, {"lambd": 1.0, "bias": 0.5}])
def test_shrink(attrs):
    check("Shrink", {"x": X}, **attrs)


def test_shrink_int():
    check("Shrink", {"x": (X * 3).astype(np.int32)}, lambd=1.5, bias=1.0)


@pytest.mark.parametrize("attrs", [{}, {"alpha": 1.702}])
def test_swish(attrs):
    from onnx_oracle import run_reference

    check("Swish", {"x": X}, opset=24, oracle=run_reference, **attrs)
