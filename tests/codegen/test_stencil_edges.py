"""Edges of the convolutions written out tap by tap (codegen/stencil.py): the refusal reasons word
for word (no spatial dims, not floats, too many taps, a channel-mixing convolution of more than
MAX_DENSE_MACS multiply-adds) and the bound itself (MAX_TAPS taps are
written out), two input channels per group, outputs whose every tap lies in the padding (only the
bias, or zero), the recomputation weight, against the reference interpreter; and the count of how
often an operand is computed (Inliner.repeats): its distinct taps inside a convolution's window,
nothing outside one, and through a convolution inside another's window."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish, inputs_for
from kernorch import codegen
from kernorch.codegen import stencil
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.schedule import Vars, make_schedule
from kernorch.ir import layout
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import ConvAttrs, Op


def _weight(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv_prim(b, x, w_shape, out_shape, out_dtype="float32", name="y"):
    """A CONV prim of the given types as an importer could write it (no shape inference)."""
    k = len(w_shape) - 2
    attrs = ConvAttrs((1,) * k, (0,) * 2 * k, (1,) * k, 1)
    y = b.prim(Op.CONV, [x, b.constant(_weight(w_shape))], attrs, out_type=TensorType(out_shape, out_dtype))
    b.g.names[y] = name
    return next(p for p in b.g.prims if p.output == y)


def test_refusal_reasons_name_the_convolution():
    b = Builder()
    flat = _conv_prim(b, b.input((2, 4)), (4, 4, 3), (2, 4), name="flat")  # a 3-D weight, but a 2-D input
    ints = _conv_prim(b, b.input((1, 4, 6), "int32"), (4, 4, 3), (1, 4, 4), name="ints")
    wide = _conv_prim(b, b.input((1, 5, 6, 6)), (2, 5, 3, 5), (1, 2, 4, 2), name="wide")
    g = b.g
    assert stencil.why_not(g, flat) == "convolution flat has no spatial dims"
    assert stencil.why_not(g, ints) == "convolution ints is not on floats"
    assert stencil.why_not(g, wide) == "convolution wide has 75 taps per output (C stencils take <= 64)"
    dense = _conv_prim(b, b.input((1, 64, 32, 32)), (64, 64, 1, 1), (1, 64, 32, 32), name="dense")
    assert stencil.why_not(g, dense) == ("convolution dense mixes 64 channels per group in 4194304 multiply-adds "
                                         "(C stencils of such take <= 65536: a GEMM reuses their operands)")
    # the bound: a squeeze-excitation convolution on one pixel, and a depthwise one of any size, are stencils
    excite = _conv_prim(b, b.input((1, 32, 1, 1)), (120, 32, 1, 1), (1, 120, 1, 1), name="excite")
    at_bound = _conv_prim(b, b.input((1, 64, 1, 1)), (1024, 64, 1, 1), (1, 1024, 1, 1), name="at_bound")
    over = _conv_prim(b, b.input((1, 64, 1, 1)), (1025, 64, 1, 1), (1, 1025, 1, 1), name="over")
    assert stencil.why_not(g, excite) is None and stencil.why_not(g, at_bound) is None
    assert "65600 multiply-adds" in stencil.why_not(g, over)
    depthwise = b.conv(b.input((1, 256, 64, 64)), b.constant(_weight((256, 1, 5, 5))), None,
                       ConvAttrs((1, 1), (2, 2, 2, 2), (1, 1), 256))
    assert stencil.why_not(g, next(p for p in g.prims if p.output == depthwise)) is None
    mm = b.matmul(b.input((3, 4)), b.input((4, 2)))
    matmul = next(p for p in g.prims if p.output == mm)
    assert stencil.why_not(g, matmul) == "matmul is not a convolution the C generator writes out"


def _depthwise(b, x, k, pads, bias=True, seed=1):
    c = b.shape(x)[1]
    w = b.constant(_weight((c, 1, k, k), seed))
    bb = b.constant(_weight((c,), seed + 1)) if bias else None
    return b.conv(x, w, bb, ConvAttrs((1, 1), pads, (1, 1), c))


def test_max_taps_are_written_out_and_weigh_two_per_tap():
    b = Builder()
    y = _depthwise(b, b.input((1, 3, 12, 11)), 8, (3, 4, 4, 3))
    g, members, outputs = finish(b, b.unary(Op.TANH, y))
    conv = next(p for p in g.prims if p.op is Op.CONV)
    assert stencil.taps(g, conv) == stencil.MAX_TAPS and stencil.why_not(g, conv) is None
    assert stencil.weight(g, conv) == 2 * stencil.MAX_TAPS
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpg", [2, 3])
def test_few_channels_per_group(cpg):
    """Grouped convolutions with 2 and 3 input channels per group, two output channels each."""
    b = Builder()
    groups = 3
    x = b.input((2, cpg * groups, 7, 6))
    w = b.constant(_weight((2 * groups, cpg, 3, 3)))
    y = b.conv(b.unary(Op.RELU, x), w, None, ConvAttrs((1, 1), (1, 0, 1, 2), (1, 1), groups))
    g, members, outputs = finish(b, y)
    assert stencil.weight(g, next(p for p in g.prims if p.op is Op.CONV)) == 2 * 9 * cpg
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_every_tap_in_the_padding(bias):
    """A 1x1 input padded by 1 and read with stride 3: the one output's only tap is a pad, so the
    output is the bias (or zero); and a 2x2 kernel on a 1x1 input with pads 1 where one tap in four
    is inside."""
    b = Builder()
    x = b.input((1, 4, 1, 1))
    c = 4
    y1 = b.conv(x, b.constant(_weight((c, 1, 1, 1))), b.constant(_weight((c,), 2)) if bias else None,
                ConvAttrs((3, 3), (1, 1, 1, 1), (1, 1), c))
    y2 = _depthwise(b, x, 2, (1, 1, 1, 1), bias=bias)
    assert b.shape(y1) == (1, 4, 1, 1) and b.shape(y2) == (1, 4, 2, 2)
    g, members, outputs = finish(b, b.unary(Op.NEG, y1), y2)
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    check(kernel, g, outputs, rtol=1e-5, atol=1e-5)
    got = kernel.run(inputs_for(kernel, g, [np.ones((1, 4, 1, 1), np.float32)]))[0].numpy()
    want = -g.constants[next(p for p in g.prims if p.output == y1).inputs[2]] if bias else np.zeros(4)
    np.testing.assert_array_equal(got.reshape(4), want)


def _schedule(g, members, outputs):
    return make_schedule(g, kernel_prims(g, members), outputs, Vars(), THREADS)


def test_operands_count_their_taps_inside_windows_only():
    """relu(x) is computed at the 9 taps of each output's window; the negation read at two indices
    after the convolution (itself and a mirrored copy) is outside any window and not counted."""
    b = Builder()
    x = b.input((1, 4, 8, 8))
    r = b.unary(Op.RELU, x)
    y = _depthwise(b, r, 3, (1, 1, 1, 1))
    e = b.unary(Op.NEG, x)
    mirrored = b.view(e, layout.slice_((1, 4, 8, 8), (0, 0, 0, 7), (1, 1, 1, -1), (1, 4, 8, 8)))
    out = b.binary(Op.ADD, b.binary(Op.ADD, y, e), mirrored)
    g, members, outputs = finish(b, out)
    sch = _schedule(g, members, outputs)
    assert sch.mat == {out}
    assert next(st for st in sch.stages if st.value == out).repeats == {r: 9}
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-5, atol=1e-5)


def test_a_convolution_inside_a_convolutions_window_counts_its_taps():
    """Two depthwise 3x3 convolutions in a row: the first is computed at the 9 taps of each window of
    the second, 18 multiply-adds each time, so the schedule stores it."""
    b = Builder()
    x = b.input((1, 8, 14, 14))
    y1 = _depthwise(b, x, 3, (1, 1, 1, 1), seed=3)
    y2 = _depthwise(b, y1, 3, (1, 1, 1, 1), seed=5)
    g, members, outputs = finish(b, b.unary(Op.RELU, y2))
    sch = _schedule(g, members, outputs)
    assert y1 in sch.mat
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    assert any(n.startswith("stored to avoid recomputation") for n in spec.notes), spec.notes
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-4, atol=1e-4)
