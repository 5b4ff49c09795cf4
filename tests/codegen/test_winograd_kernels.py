"""3x3 convolutions with unit strides are Winograd F(6,3) kernels (codegen/winograd.py): blocks of
36 pixels of a row, tail tiles past the row's end, pads of any width, channels that fill no
vector or panel, two images, the GEMM's epilogue (bias, activation, residual add, two outputs),
all against the reference interpreter under the tolerance policy every measured kernel meets.
What Winograd does not take (strides, 5x5, narrow rows or few output channels) stays a GEMM."""

import numpy as np
import pytest

from cg_util import THREADS, feeds, finish, inputs_for
from kernorch import codegen
from kernorch.codegen import winograd, winograd_transform
from kernorch.codegen.facts import kernel_prims
from kernorch.ir import interp, oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions


def _conv(n=1, h=7, w=30, cin=24, cout=40, pads=(1, 1, 1, 1), kernel=(3, 3), strides=(1, 1), bias=True,
          act=Op.RELU, residual=False, both=False):
    """relu(conv(x) [+ bias] [+ residual]) between channels-last tensors (the NHWC halves of
    layout pairs); ``both``: the convolution's own output is a kernel output too."""
    rng = np.random.default_rng(11)
    b = Builder()
    x = b.permute(b.input((n, h, w, cin)), (0, 3, 1, 2))
    wt = b.constant(rng.standard_normal((cout, cin, *kernel)).astype(np.float32))
    bv = b.constant(rng.standard_normal(cout).astype(np.float32)) if bias else None
    y = b.permute(b.conv(x, wt, bv, ConvAttrs(strides, pads, (1, 1), 1)), (0, 2, 3, 1))
    if residual:
        y = b.binary(Op.ADD, y, b.input(b.shape(y)))
    out = b.unary(act, y) if act else y
    return finish(b, *((y, out) if both else (out,)))


CASES = {
    "one_block_residual": lambda: _conv(residual=True),
    "two_blocks_and_a_tail_tile": lambda: _conv(h=4, w=50, cin=16, cout=33),
    "no_pads": lambda: _conv(h=6, w=40, pads=(0, 0, 0, 0), act=None),
    "uneven_pads": lambda: _conv(h=5, w=29, cin=9, cout=20, pads=(0, 2, 2, 1)),
    "two_images_no_bias": lambda: _conv(n=2, h=3, w=13, cin=70, cout=64, bias=False),
    "two_outputs": lambda: _conv(h=3, w=37, cin=5, cout=17, both=True, act=Op.SIGMOID),
    "resnet_layer": lambda: _conv(h=14, w=14, cin=64, cout=64, residual=True),
}
NOT_TAKEN = {
    "stride_two": lambda: _conv(h=9, w=30, strides=(2, 2)),
    "five_by_five": lambda: _conv(h=9, w=30, kernel=(5, 5), pads=(2, 2, 2, 2)),
    "narrow_rows": lambda: _conv(h=9, w=winograd.MIN_WIDTH - 1),
    "sixteen_channels": lambda: _conv(h=5, w=40, cout=16),
}


@pytest.fixture(scope="module")
def built():
    items = {name: fn() for name, fn in {**CASES, **NOT_TAKEN}.items()}
    kernels = codegen.build_many(list(items.values()), num_threads=THREADS)
    return {name: (*items[name], k) for name, k in zip(items, kernels)}


@pytest.mark.parametrize("name", list(CASES))
def test_winograd_matches_interpreter(built, name):
    g, members, outputs, kernel = built[name]
    assert winograd.why_not(g, kernel_prims(g, members), outputs) is None
    assert kernel.source.count("kn_wino_tile(") > 1 and any("Winograd" in n for n in kernel.spec.notes)  # called
    # the kernel is what lowering writes (lowered here too: each case's test reaches the lowering itself,
    # not only through the fixture, which mutmut credits to the first test alone)
    assert codegen.lower(g, members, outputs, num_threads=THREADS) == kernel.spec
    fed = feeds(g, seed=3)
    g.outputs = list(outputs)
    ref = interp.run(g, fed)
    got = kernel.run(inputs_for(kernel, g, fed))
    for v, t in zip(outputs, got):
        ok, err, detail = oracle.compare(t, ref[v])
        assert ok, f"{name}: {detail}"
        assert err <= 1e-5 * max(1.0, oracle.magnitude(ref[v])), f"{name}: {detail}"  # F(6,3)'s error: ~1e-6


@pytest.mark.parametrize("name", list(NOT_TAKEN))
def test_other_convolutions_stay_gemms(built, name):
    g, members, outputs, kernel = built[name]
    assert winograd.why_not(g, kernel_prims(g, members), outputs) is not None
    assert kernel.source.count("kn_wino_tile(") == 1  # the header's definition only
    fed = feeds(g, seed=3)
    g.outputs = list(outputs)
    ok, _, detail = oracle.compare(kernel.run(inputs_for(kernel, g, fed))[0], interp.run(g, fed)[outputs[0]])
    assert ok, detail


def test_switched_off_is_the_direct_gemm():
    g, members, outputs = CASES["one_block_residual"]()
    assert any("Winograd" in n for n in codegen.lower(g, members, outputs, num_threads=THREADS).notes)
    spec = codegen.lower(g, members, outputs, num_threads=THREADS, options=CodegenOptions(winograd=False))
    assert not any("Winograd" in n for n in spec.notes)


def test_transform_matrices_compute_the_correlation():
    """AT ((G g) * (BT d)) is the 6 outputs of a 3-tap correlation over 8 inputs, in float64."""
    rng = np.random.default_rng(0)
    d, taps = rng.standard_normal((50, 8)), rng.standard_normal((50, 3))
    got = ((d @ winograd_transform.BT.T) * (taps @ winograd_transform.G.T)) @ winograd_transform.AT.T
    ref = np.stack([(d[:, i:i + 3] * taps).sum(1) for i in range(6)], 1)
    np.testing.assert_allclose(got, ref, atol=1e-12)
