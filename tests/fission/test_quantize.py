"""QuantizeLinear / DequantizeLinear against onnxruntime: per tensor and per axis, int8 and uint8,
with and without a zero point, ties (x / scale exactly k + 0.5 rounds to even) and saturation."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("zp_given", [True, False])
def test_quantize_per_tensor(dtype, zp_given):
    x = f32(2, 3, 5, scale=40.0)
    x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1000.0]  # ties to even, and one far past saturation
    zp = np.asarray(3 if dtype == "int8" else 128, dtype=dtype)
    if not zp_given and dtype == "int8":
        pytest.skip("without a zero point the output is uint8")
    inputs = {"x": x, "s": np.asarray(0.5 if zp_given else 1.0, np.float32), "zp": zp if zp_given else None}
    out = check("QuantizeLinear", inputs, consts=["s", "zp"], opset=13)
    assert out[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(axis):
    x = f32(4, 6, 5, scale=3.0)
    n = x.shape[axis]
    inputs = {"x": x, "s": RNG.uniform(0.01, 0.1, n).astype(np.float32),
              "zp": RNG.integers(-10, 10, n).astype(np.int8)}
    check("QuantizeLinear", inputs, consts=["s", "zp"], opset=13, axis=axis)


def test_quantize_runtime_scale():
    """A scale computed at run time (a graph input here) is read as a tensor, not folded."""
    check("QuantizeLinear", {"x": f32(3, 4, scale=5.0), "s": np.asarray(0.07, np.float32),
                             "zp": np.asarray(-4, np.int8)}, consts=["zp"], opset=13)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_dequantize_per_tensor(dtype):
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256) if dtype == "uint8" else (-100000, 100000)
    x = RNG.integers(lo, hi, (3, 7)).astype(dtype)
    zp = None if dtype == "int32" else np.asarray(5, dtype)
    check("DequantizeLinear", {"x": x, "s": np.asarray(0.031, np.float32), "zp": zp}, consts=["s", "zp"], opset=13)


@pytest.mark.parametrize("const_x", [False, True])
def test_dequantize_per_axis(const_x):
    """A constant input (a quantized weight) and a computed one give the same values."""
    x = RNG.integers(-128, 128, (8, 3, 3, 3)).astype(np.int8)
    inputs = {"x": x, "s": RNG.uniform(0.001, 0.01, 8).astype(np.float32), "zp": np.zeros(8, np.int8)}
    check("DequantizeLinear", inputs, consts=["s", "zp"] + (["x"] if const_x else []), opset=13, axis=0)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("DequantizeLinear", {"x": np.zeros((4, 4), np.int8), "s": np.ones((4, 2), np.float32)}, dict(axis=1, block_size=2)),
    ("QuantizeLinear", {"x": np.zeros((3, 4), np.float32), "s": np.ones((), np.float32)}, dict(output_dtype=17)),
])
def test_variants_without_prims_run_whole(op, inputs, attrs):
    """Blocked scales and float8 (output_dtype 17: float8e4m3fn) are kept whole, reported opaque."""
    from onnx_oracle import node_model
    from kernorch.frontend.onnx_import import import_onnx

    _, report = import_onnx(node_model(op, inputs, opset=21, consts=["s"], **attrs))
    assert report.opaque == {op: 1}
