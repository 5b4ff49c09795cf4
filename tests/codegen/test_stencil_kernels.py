"""Convolutions with few taps per output are C kernels (codegen/stencil.py): depthwise, grouped,
strided, dilated, padded asymmetrically, 1-D, the 3-channel stem and narrow 1x1 convolutions,
fused with their prologue and epilogue, all against the reference interpreter. Past MAX_TAPS a
convolution stays a library kernel, and the Triton generator never takes one."""

import numpy as np
import pytest
import torch

from cg_util import THREADS, check, finish
from kernorch import codegen
from kernorch.codegen import stencil
from kernorch.codegen.feasible import kernel_kind
from kernorch.codegen.triton import why_not_triton
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Kind, Op


def _conv(shape=(1, 8, 13, 11), cout=None, groups=None, k=3, strides=(1, 1), pads=(1, 1, 1, 1), dil=(1, 1),
          bias=True, prologue=Op.RELU, epilogue=Op.TANH):
    """x -> prologue -> conv -> epilogue; depthwise unless ``groups`` says otherwise."""
    b = Builder()
    cin = shape[1]
    cout = cout or cin
    groups = groups or cin
    spatial = len(shape) - 2
    rng = np.random.default_rng(1)
    x = b.input(shape)
    w = b.constant(rng.standard_normal((cout, cin // groups, *([k] * spatial))).astype(np.float32))
    bb = b.constant(rng.standard_normal(cout).astype(np.float32)) if bias else None
    y = b.conv(b.unary(prologue, x) if prologue else x, w, bb, ConvAttrs(strides, pads, dil, groups))
    return finish(b, b.unary(epilogue, y) if epilogue else y)


def _channels_last_depthwise(shape=(1, 9, 9, 40), k=5, strides=(1, 1)):
    """A depthwise convolution between channels-last tensors (the halves of layout pairs): the
    loops run along channels, so the weight is read from a (kh, kw, 1, C) copy packed once."""
    b = Builder()
    rng = np.random.default_rng(2)
    c = shape[-1]
    x = b.permute(b.input(shape), (0, 3, 1, 2))
    w = b.constant(rng.standard_normal((c, 1, k, k)).astype(np.float32))
    y = b.conv(x, w, b.constant(rng.standard_normal(c).astype(np.float32)),
               ConvAttrs(strides, (k // 2,) * 4, (1, 1), c))
    return finish(b, b.permute(b.unary(Op.RELU, y), (0, 2, 3, 1)))


CASES = {
    "depthwise_channels_last": lambda: _channels_last_depthwise(),
    "depthwise_channels_last_stride2": lambda: _channels_last_depthwise(shape=(2, 8, 11, 19), k=3, strides=(2, 2)),
    "depthwise": lambda: _conv(),
    "depthwise_stride2": lambda: _conv(strides=(2, 2)),
    "depthwise_5x5": lambda: _conv(k=5, pads=(2, 2, 2, 2)),
    "depthwise_7x7_no_bias": lambda: _conv(k=7, pads=(3, 3, 3, 3), bias=False),
    "depthwise_dilated": lambda: _conv(dil=(2, 2), pads=(2, 2, 2, 2)),
    "depthwise_multiplier_2": lambda: _conv(cout=16),
    "depthwise_asymmetric_pads": lambda: _conv(strides=(2, 2), pads=(0, 1, 2, 0)),
    "depthwise_odd_size_no_pad": lambda: _conv(shape=(2, 5, 7, 3), pads=(0, 0, 0, 0), epilogue=None),
    "conv1d": lambda: _conv(shape=(2, 6, 17), strides=(2,), pads=(1, 2), dil=(1,)),
    "grouped_1x1": lambda: _conv(shape=(1, 32, 7, 7), cout=16, groups=2, k=1, pads=(0, 0, 0, 0)),
    "stem_3_channels_prologue": lambda: _conv(shape=(1, 3, 16, 16), cout=8, groups=1, strides=(2, 2)),
    "narrow_1x1": lambda: _conv(shape=(1, 8, 9, 9), cout=12, groups=1, k=1, pads=(0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_stencil_matches_interpreter(name):
    g, members, outputs = CASES[name]()
    assert codegen.why_not(g, members, outputs) is None
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    assert bool(kernel.spec.packs) == name.startswith("depthwise")  # 2-D depthwise weights are read channels-last
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)  # the packed copy is reused


def test_packed_weight_follows_a_new_weight_tensor():
    """A packed copy belongs to the tensor it was made from: another weight tensor at the same
    input position is packed again, never served the stale copy."""
    g, members, outputs = _channels_last_depthwise()
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    (pos, _, _, _), = kernel.spec.packs
    rng = np.random.default_rng(7)
    ins = [rng.standard_normal(t.shape).astype(np.float32) for t in kernel.in_types]
    tensors = [torch.from_numpy(a) for a in ins]
    first = kernel.run(tensors)[0].clone()
    tensors[pos] = torch.from_numpy(-ins[pos])
    second = kernel.run(tensors)[0]
    assert not torch.equal(first, second)
    tensors[pos] = torch.from_numpy(ins[pos])
    assert torch.equal(kernel.run(tensors)[0], first)


def test_too_many_taps_stay_a_library_kernel():
    # grouped, 144 taps: no stencil, and no generated GEMM (those take no groups)
    g, members, outputs = _conv(shape=(1, 32, 8, 8), cout=4, groups=2, prologue=None, epilogue=None)
    conv = next(p for p in g.prims if p.op is Op.CONV)
    assert f"144 taps per output (C stencils take <= {stencil.MAX_TAPS})" in stencil.why_not(g, conv)
    kernel = codegen.build_kernel(g, members, outputs)
    assert kernel.provider == "linear"
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)
    g, members, outputs = _conv(shape=(1, 32, 8, 8), cout=4, groups=2)  # and with a prologue: no kernel at all
    assert "computed, not a view" in codegen.why_not(g, members, outputs)


def test_triton_never_takes_a_convolution():
    g, members, outputs = _conv(prologue=None, epilogue=None)
    assert kernel_kind(g, members, outputs, why_not_triton, "Triton") is Kind.LINEAR
    assert kernel_kind(g, members, outputs, codegen.why_not) is None


def test_costly_prologue_read_by_overlapping_windows_is_stored():
    g, members, outputs = _conv(prologue=Op.EXP, epilogue=None)
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    assert any(n.startswith("stored to avoid recomputation") for n in spec.notes), spec.notes
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-4, atol=1e-4)
