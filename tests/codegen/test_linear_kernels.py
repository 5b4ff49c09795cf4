"""Linear kernels: matmul / batched matmul with a transposed operand view and bias adds (float32
ones are generated C GEMMs, codegen/gemm.py; float64 ones run through PyTorch), convolutions
(asymmetric pads, groups) with more taps than a C stencil takes (without groups: generated GEMMs
over their windows; grouped and transposed ones through PyTorch); and what can_generate refuses
around them."""

import numpy as np
import pytest

from cg_util import check, finish
from kernorch import codegen
from kernorch.codegen import linear
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op


def _matmul_bias(dtype="float32"):
    b = Builder()
    x = b.input((7, 16), dtype=dtype)
    w = b.constant(np.random.default_rng(0).standard_normal((16, 5)).astype(dtype))
    bias = b.constant(np.arange(5, dtype=dtype))
    return finish(b, b.binary(Op.ADD, b.matmul(x, w), bias))


def _matmul_transposed_weight():
    b = Builder()
    x = b.input((7, 16))
    w = b.input((5, 16))  # torch Linear layout: out x in
    return finish(b, b.matmul(x, b.permute(w, (1, 0))))


def _batched_transposed():
    b = Builder()
    q, k = b.input((2, 3, 9, 8)), b.input((2, 3, 11, 8))
    return finish(b, b.matmul(q, b.permute(k, (0, 1, 3, 2))))


def _batched_reshaped():
    b = Builder()
    x = b.input((6, 5, 4))
    y = b.input((2, 3, 4, 7))
    return finish(b, b.matmul(b.reshape(x, (2, 3, 5, 4)), y))


def _matmul_broadcast_batch():
    b = Builder()
    x, w = b.input((4, 3, 8)), b.input((8, 6))
    return finish(b, b.matmul(x, b.broadcast_to(b.reshape(w, (1, 8, 6)), (4, 8, 6))))


def _conv(pads=(1, 1, 1, 1), groups=1, bias=True, strides=(1, 1)):
    b = Builder()  # 16 input channels per group and more: past what the C generator writes out as a stencil
    x = b.input((2, 16 * groups, 9, 10))
    w = b.constant(np.random.default_rng(1).standard_normal((6 * groups, 16, 3, 3)).astype(np.float32))
    bb = b.constant(np.arange(6 * groups, dtype=np.float32)) if bias else None
    return finish(b, b.conv(x, w, bb, ConvAttrs(strides, pads, (1, 1), groups)))


def _conv_bias_add():
    b = Builder()
    x = b.input((1, 8, 8, 8))
    w = b.constant(np.random.default_rng(2).standard_normal((5, 8, 3, 3)).astype(np.float32))
    y = b.conv(x, w, None, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    bias = b.reshape(b.constant(np.arange(5, dtype=np.float32)), (1, 5, 1, 1))
    return finish(b, b.binary(Op.ADD, y, bias))


def _conv_transpose():
    b = Builder()
    x = b.input((1, 4, 5, 5))
    w = b.constant(np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float32))
    return finish(b, b.conv(x, w, None, ConvAttrs((2, 2), (1, 0, 1, 2), (1, 1), 1, (1, 1)), transpose=True))


CASES = {
    "matmul_bias": _matmul_bias, "matmul_float64_bias": lambda: _matmul_bias("float64"),
    "matmul_transposed_weight": _matmul_transposed_weight,
    "batched_transposed": _batched_transposed, "batched_reshaped": _batched_reshaped,
    "matmul_broadcast_batch": _matmul_broadcast_batch, "conv": _conv,
    "conv_asymmetric_pads": lambda: _conv(pads=(0, 1, 2, 1), strides=(2, 1)),
    "conv_groups_no_bias": lambda: _conv(groups=2, bias=False), "conv_bias_add": _conv_bias_add,
    "conv_transpose": _conv_transpose,
}


WINDOW_GEMMS = {"conv", "conv_asymmetric_pads", "conv_bias_add"}  # float32, no groups: gemm_product.Window


@pytest.mark.parametrize("name", list(CASES))
def test_linear_matches_interpreter(name):
    g, members, outputs = CASES[name]()
    assert codegen.can_generate(g, members, outputs), codegen.why_not(g, members, outputs)
    kernel = codegen.build_kernel(g, members, outputs)
    gemm = (name.startswith(("matmul", "batched")) and "float64" not in name) or name in WINDOW_GEMMS
    assert kernel.provider == ("c" if gemm else "linear")
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_preallocated_outputs_are_filled():
    g, members, outputs = _matmul_bias("float64")
    kernel = codegen.build_kernel(g, members, outputs)
    import torch
    out = torch.empty((7, 5), dtype=torch.float64)
    x = np.ones((7, 16), np.float64)
    res = kernel.run([x] + [g.constants[v] for v in kernel.inputs[1:]], out=[out])
    assert res[0] is out and float(out.abs().sum()) > 0


def test_linear_refusals_name_the_reason():
    b = Builder()
    x, w = b.input((4, 8)), b.input((8, 3))
    mm = b.matmul(x, w)
    y = b.unary(Op.RELU, mm)
    g, members, outs = finish(b, y)
    assert "relu cannot share a kernel with matmul" in linear.why_not(g, members, outs)
    assert codegen.why_not(g, members, outs) is None  # a generated GEMM takes the epilogue
    assert linear.why_not(g, {mm}, [mm]) is None

    b = Builder()
    x, w = b.input((8, 4)), b.input((8, 3))
    mm = b.matmul(b.unary(Op.EXP, b.permute(x, (1, 0))), w)  # A computed from reads strided along k
    g, members, outs = finish(b, mm)
    assert "computed, not a view" in codegen.why_not(g, members, outs)
    assert "computed, not a view" in linear.why_not(g, members, outs)

    b = Builder()
    x, w, w2 = b.input((4, 8)), b.input((8, 3)), b.input((3, 2))
    g, members, outs = finish(b, b.matmul(b.matmul(x, w), w2))
    assert "at most one linear prim" in codegen.why_not(g, members, outs)

    b = Builder()
    x = b.input((4, 8))
    w = b.input((8, 3))
    flipped = b.view(w, layout.flip((8, 3), (0,)))
    g, members, outs = finish(b, b.matmul(x, flipped))
    assert "not a strided view" in linear.why_not(g, members, outs)
    assert codegen.why_not(g, members, outs) is None  # the GEMM packs B through any view


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("add", [None, "residual", "per_channel", "per_column"])
def test_pointwise_conv_is_a_gemm_on_nchw(bias, add):
    """A float64 1x1 convolution (float32 ones are generated GEMMs, test_gemm_kernels.py) runs as
    addmm into the planned output, taking a residual or per-channel add with it; other adds take
    the general path."""
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input((1, 80, 5, 7), dtype="float64")
    w = b.constant(rng.standard_normal((12, 80, 1, 1)).astype(np.float64))
    bb = b.constant(rng.standard_normal(12).astype(np.float64)) if bias else None
    y = b.conv(x, w, bb, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    if add == "residual":
        y = b.binary(Op.ADD, y, b.input((1, 12, 5, 7), dtype="float64"))
    elif add == "per_channel":
        y = b.binary(Op.ADD, b.reshape(b.constant(rng.standard_normal(12).astype(np.float64)), (12, 1, 1)), y)
    elif add == "per_column":
        y = b.binary(Op.ADD, y, b.input((1, 1, 1, 7), dtype="float64"))
    g, members, outputs = finish(b, y)
    kernel = codegen.build_kernel(g, members, outputs)
    assert kernel.provider == "linear" and kernel.pointwise
    taken = []
    gemm = kernel._pointwise_gemm
    kernel._pointwise_gemm = lambda *a: taken.append(gemm(*a)) or taken[-1]
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)
    assert taken == [add != "per_column"]
