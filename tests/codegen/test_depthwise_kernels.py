"""Depthwise convolutions between channels-last tensors as register-blocked row tiles
(codegen/depthwise.py): every path of kn_dw_tile (pixels inside the row four at a time over one or
two vectors, border pixels, kernel rows outside the image, the channel remainder, rows split into
tiles) and the GEMM's epilogue after it, against the reference interpreter; the same kernels with
the template off (the loop-nest stencil) agree, and what the template refuses goes to the loops."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish
from kernorch import codegen
from kernorch.codegen import depthwise, templates
from kernorch.codegen.facts import kernel_prims
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions


def _depthwise(shape=(1, 9, 9, 40), k=3, strides=(1, 1), pads=None, dil=(1, 1), bias=True, residual=False,
               channels_last_out=True, prologue=None, multiplier=1, zero_point=None):
    """NHWC input -> (prologue) -> depthwise conv -> relu (+ a residual) -> NHWC (or NCHW) output. With a
    ``zero_point``, a quantized model's image: uint8 NHWC input -> NCHW view -> cast - zero_point, integer weights."""
    b = Builder()
    rng = np.random.default_rng(7)
    n, h, w, c = shape
    kh, kw = (k, k) if isinstance(k, int) else k
    pads = pads if pads is not None else (kh // 2, kw // 2, kh // 2, kw // 2)
    x = b.input(shape, "uint8" if zero_point is not None else "float32")
    if prologue is not None:
        x = b.unary(prologue, x)
    x = b.permute(x, (0, 3, 1, 2))
    wt = rng.standard_normal((c * multiplier, 1, kh, kw)).astype(np.float32)
    if zero_point is not None:
        x = b.binary(Op.SUB, b.cast(x, "float32"), b.scalar(float(zero_point)))
        wt = rng.integers(-128, 128, wt.shape).astype(np.float32)
    wt = b.constant(wt)
    bb = b.constant(rng.standard_normal(c * multiplier).astype(np.float32)) if bias else None
    y = b.unary(Op.RELU, b.conv(x, wt, bb, ConvAttrs(strides, pads, dil, c)))
    if residual:
        y = b.binary(Op.ADD, y, b.input(g_shape(b, y)))
    return finish(b, b.permute(y, (0, 2, 3, 1)) if channels_last_out else y)


def g_shape(b: Builder, v: int) -> tuple[int, ...]:
    return b.g.types[v].shape


CASES = {
    "3x3, two vectors and a remainder vector": dict(shape=(1, 9, 9, 40)),
    "5x5 stride 2, odd sizes": dict(shape=(2, 11, 13, 24), k=5, strides=(2, 2)),
    "channel remainder below a vector": dict(shape=(1, 8, 10, 13)),
    "channels past one panel": dict(shape=(1, 7, 7, 72), k=5),
    "rows wider than a tile": dict(shape=(1, 3, 150, 16)),
    "kernel rows all outside for some outputs": dict(shape=(1, 2, 12, 8), k=5, pads=(3, 2, 3, 2)),
    "no pads, no bias": dict(shape=(1, 9, 12, 16), pads=(0, 0, 0, 0), bias=False),
    "asymmetric pads, 3x5 kernel": dict(shape=(1, 10, 11, 16), k=(3, 5), pads=(0, 1, 2, 3)),
    "dilated": dict(shape=(1, 12, 12, 16), dil=(2, 2), pads=(2, 2, 2, 2)),
    "pads wider than the image": dict(shape=(1, 3, 3, 8), k=5, pads=(4, 4, 4, 4)),
    "residual, NCHW output": dict(shape=(2, 8, 9, 24), residual=True, channels_last_out=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_depthwise_tile_matches_interpreter_and_the_loop_nest(name):
    g, members, outputs = _depthwise(**CASES[name])
    prims = kernel_prims(g, members)
    assert templates.first(g, prims, outputs).name == "depthwise"
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.spec.template == "depthwise" and kernel.spec.packs
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)
    check(kernel, g, outputs, seed=3, rtol=1e-4, atol=1e-4)  # the packed weight reused
    off = CodegenOptions(depthwise_tiles=False)
    assert templates.first(g, prims, outputs, off).name == "loops"
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS, options=off), g, outputs,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["3x3, two vectors and a remainder vector", "5x5 stride 2, odd sizes",
                                  "channel remainder below a vector", "channels past one panel",
                                  "rows wider than a tile", "kernel rows all outside for some outputs", "dilated",
                                  "asymmetric pads, 3x5 kernel", "residual, NCHW output"])
@pytest.mark.parametrize("zero_point", [0, 131])
def test_uint8_image_of_a_quantized_model(name, zero_point):
    """``cast(xq: uint8) - zx`` read as the image: its rows widened per unit (kn_dw_tile_u8), full-range bytes."""
    g, members, outputs = _depthwise(**CASES[name], zero_point=zero_point)
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.spec.template == "depthwise" and "uint8 image" in kernel.spec.traits, kernel.spec.traits
    rng = np.random.default_rng(zero_point)
    fed = [rng.integers(0, 256, g.types[v].shape).astype(np.uint8) if g.types[v].dtype == "uint8" else
           rng.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs]
    check(kernel, g, outputs, rtol=1e-5, atol=1e-2, fed=fed)  # sums of integers up to 2^17: float32's last digits


@pytest.mark.parametrize("threads", [1, 3])
def test_any_thread_count(threads):
    g, members, outputs = _depthwise(shape=(2, 6, 70, 40), k=3)
    check(codegen.build_kernel(g, members, outputs, num_threads=threads), g, outputs, rtol=1e-4, atol=1e-4)


REFUSED = {
    "a prologue before the convolution": (dict(prologue=Op.TANH), "is computed, not a view of an input"),
    "a channel multiplier": (dict(multiplier=2), "without a channel multiplier"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_template_refuses_goes_to_the_loop_nest(name):
    kwargs, reason = REFUSED[name]
    g, members, outputs = _depthwise(shape=(1, 6, 6, 8), **kwargs)
    prims = kernel_prims(g, members)
    why = depthwise.why_not(g, prims, outputs)
    assert why is not None and reason in why, why
    assert templates.first(g, prims, outputs).name == "loops"
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-4, atol=1e-4)


def test_nchw_image_and_switch_off_are_refused_with_reasons():
    b = Builder()
    rng = np.random.default_rng(1)
    x = b.input((1, 8, 6, 6))
    y = b.conv(x, b.constant(rng.standard_normal((8, 1, 3, 3)).astype(np.float32)), None,
               ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8))
    g, members, outputs = finish(b, y)
    prims = kernel_prims(g, members)
    assert "not channels-last" in depthwise.why_not(g, prims, outputs)
    g, members, outputs = _depthwise()
    prims = kernel_prims(g, members)
    assert depthwise.why_not(g, prims, outputs, CodegenOptions(depthwise_tiles=False)) == \
        "depthwise tiles are switched off"
