"""int8 products on VNNI tiles (codegen/vnni.py) against the interpreter: a quantized model's
``linear(cast(xq: uint8) - zx, wq)`` with its scale, bias and requantization — matmuls (batched,
one row, K not a multiple of 4, N not whole panels, no zero point, A computed in the kernel) and 1x1 convolutions on
channels-last pixels — on VPDPBUSD where the CPU has it and always on the scalar loop the same
function compiles to without it. The sums are exact integers either way (the interpreter's
float32 sums are exact too while they stay below 2^24, which these sizes keep): so float32
results agree to float32 rounding and a requantized uint8 output exactly."""

import numpy as np
import pytest

from kernorch import codegen
from kernorch.codegen import isa, vnni
from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from tests.codegen.cg_util import THREADS, finish

PATHS = {"vnni": ("vnni", ""), "scalar": (None, "-mno-avx512vnni -mno-avxvnni")}


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    needs, flags = PATHS[request.param]
    if needs and needs not in isa.host().extras:
        pytest.skip(f"this CPU has no {needs} (the scalar case still runs)")
    monkeypatch.setenv("KERNORCH_CFLAGS", flags)
    return request.param


def _epilogue(b: Builder, y: int, n: int, axis: int, rng, requantize: bool) -> int:
    """``y * scale + bias`` per output channel (dim ``axis`` of y), then QuantizeLinear's prims to uint8."""
    shape = [1] * len(b.shape(y))
    shape[axis] = n
    y = b.binary(Op.MUL, y, b.constant(rng.uniform(1e-4, 1e-3, shape).astype(np.float32)))
    y = b.binary(Op.ADD, y, b.constant(rng.standard_normal(shape).astype(np.float32)))
    if not requantize:
        return y
    y = b.unary(Op.ROUND, b.binary(Op.DIV, y, b.scalar(0.02)))
    y = b.binary(Op.MIN, b.binary(Op.MAX, b.binary(Op.ADD, y, b.scalar(128.0)), b.scalar(0.0)), b.scalar(255.0))
    return b.cast(y, "uint8")


def _integers(b: Builder, shape, zx: int) -> tuple[int, int]:
    xq = b.input(shape, "uint8")
    x = b.cast(xq, "float32")
    return xq, (b.binary(Op.SUB, x, b.scalar(float(zx))) if zx else x)


def _check(b: Builder, out: int, seed: int = 0):
    g, members, outputs = finish(b, out)
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kern.spec.template == "gemm" and "int8 tiles" in kern.spec.traits, (kern.spec.template, kern.spec.traits)
    rng = np.random.default_rng(seed)
    fed = [rng.integers(0, 256, g.types[v].shape).astype(np.uint8) for v in g.inputs]
    env = {**dict(zip(g.inputs, fed)), **g.constants}
    got = np.asarray(kern.run([env[v] for v in kern.inputs])[0])
    ref = interp.run(g, fed)[out]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == np.uint8:
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    return kern


@pytest.mark.parametrize("M,K,N,zx", [(64, 64, 64, 120), (70, 42, 50, 3), (1, 768, 96, 128), (33, 101, 17, 0),
                                      (8, 7, 40, 255)])
@pytest.mark.parametrize("requantize", [False, True])
def test_matmul_on_int8_tiles(path, M, K, N, zx, requantize):
    rng = np.random.default_rng(M + K + N)
    b = Builder()
    _, x = _integers(b, (M, K), zx)
    y = b.matmul(x, b.constant(rng.integers(-128, 128, (K, N)).astype(np.float32)))
    kern = _check(b, _epilogue(b, y, N, 1, rng, requantize))
    assert "A in place" in kern.spec.traits
    assert any(n.startswith(f"in1 packed once as its {vnni.TRANSFORM} transform") for n in kern.spec.notes)
    assert ("column remainder" in kern.spec.traits) == bool(N % vnni.NR)


@pytest.mark.parametrize("M", [1, 3, 40])
def test_matmul_of_integers_computed_in_the_kernel(path, M):
    """A classifier's head: the activation requantized to uint8 in the kernel, its rows computed as bytes per row block."""
    rng = np.random.default_rng(M)
    b = Builder()
    h = b.input((M, 200))
    q = b.unary(Op.ROUND, b.binary(Op.DIV, b.binary(Op.MAX, h, b.scalar(0.0)), b.scalar(0.01)))
    q = b.cast(b.binary(Op.MIN, b.binary(Op.MAX, b.binary(Op.ADD, q, b.scalar(5.0)), b.scalar(0.0)), b.scalar(255.0)),
               "uint8")
    x = b.binary(Op.SUB, b.cast(q, "float32"), b.scalar(5.0))
    y = b.matmul(x, b.constant(rng.integers(-128, 128, (200, 70)).astype(np.float32)))
    g, members, outputs = finish(b, _epilogue(b, y, 70, 1, rng, False))
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert "int8 tiles" in kern.spec.traits and "A computed" in kern.spec.traits, kern.spec.traits
    fed = [(rng.standard_normal((M, 200)) * 3).astype(np.float32)]
    got = np.asarray(kern.run(fed + [g.constants[v] for v in kern.inputs[1:]])[0])
    np.testing.assert_allclose(got, interp.run(g, fed)[outputs[0]], rtol=1e-5, atol=1e-4)


def test_batched_matmul_of_a_transformer_linear(path):
    rng = np.random.default_rng(5)
    b = Builder()
    _, x = _integers(b, (2, 45, 96), 17)
    y = b.matmul(x, b.constant(rng.integers(-128, 128, (96, 80)).astype(np.float32)))
    _check(b, _epilogue(b, y, 80, 2, rng, True))


@pytest.mark.parametrize("cin,cout,hw,zx", [(24, 72, 9, 128), (40, 33, 5, 0), (3, 16, 7, 200)])
def test_pointwise_convolution_on_channels_last_pixels(path, cin, cout, hw, zx):
    """A 1x1 convolution whose uint8 image is an NHWC buffer viewed as NCHW (a layout pair's view)."""
    rng = np.random.default_rng(cin)
    b = Builder()
    xq = b.input((1, hw, hw, cin), "uint8")
    image = b.permute(xq, (0, 3, 1, 2))
    x = b.cast(image, "float32")
    x = b.binary(Op.SUB, x, b.scalar(float(zx))) if zx else x
    w = b.constant(rng.integers(-128, 128, (cout, cin, 1, 1)).astype(np.float32))
    y = b.conv(x, w, None, ConvAttrs(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1))
    kern = _check(b, _epilogue(b, y, cout, 1, rng, True))
    assert "(1x1 convolution: A's rows are the pixels)" in kern.spec.notes[0]


def test_not_int8_when_the_weight_is_not_integers():
    """A weight with a fraction (or past int8's range) keeps the float32 tile: the integers' sums would be wrong."""
    rng = np.random.default_rng(0)
    for w in (rng.integers(-128, 128, (32, 32)) + 0.5, rng.integers(-200, 200, (32, 32))):
        b = Builder()
        _, x = _integers(b, (32, 32), 3)
        y = b.matmul(x, b.constant(w.astype(np.float32)))
        g, members, outputs = finish(b, y)
        kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
        assert kern.spec.template == "gemm" and "int8 tiles" not in kern.spec.traits
