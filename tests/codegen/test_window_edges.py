"""Edges of the window sums written out tap by tap (codegen/window.py): the bounds of the window
volume (1 and MAX_TAPS taps are written out), kept reduced dims and window dims that are not the
last ones, float64, a sum of a kernel input (no view: a reduce stage), all against the reference
interpreter; and the count of how often a window's operand is computed (Inliner.repeats), which
decides what the schedule stores: the operand's distinct taps inside a window, nothing outside one,
and through a window inside a convolution's window."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish, window_reduce
from kernorch import codegen
from kernorch.codegen import stencil, window
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.schedule import Vars, make_schedule
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op


def _schedule(g, members, outputs):
    prims = kernel_prims(g, members)
    producers = {p.output: p for p in prims}
    windows = {p.output for p in prims if window.is_window(g, p, producers)}
    return windows, make_schedule(g, prims, outputs, Vars(), THREADS)


def _built(g, members, outputs, **tol):
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    check(kernel, g, outputs, **(tol or {"rtol": 1e-5, "atol": 1e-5}))
    return kernel


def _middle_window(b, x, k, keepdims):
    """Windows of ``x`` (N, C, H, W) as (N, C, kh, kw, OH, OW), k x k, pads k // 2, summed over the
    kernel dims (2, 3): the window dims are not the last ones."""
    n, c, h, w = b.shape(x)
    p = k // 2
    oh, ow = h + 2 * p - k + 1, w + 2 * p - k + 1
    rows, cols = ix.var(4) + ix.var(2) - p, ix.var(5) + ix.var(3) - p
    m = layout.make((n, c, k, k, oh, ow), (n, c, h, w), (ix.var(0), ix.var(1), rows, cols),
                    (layout.Cond(rows, 0, h), layout.Cond(cols, 0, w)), 0.0)
    return b.reduce(Op.SUM, b.view(x, m), [2, 3], keepdims=keepdims)


@pytest.mark.parametrize("middle", [False, True])
@pytest.mark.parametrize("keepdims", [False, True])
def test_kept_dims_and_window_dims_anywhere(middle, keepdims):
    b = Builder()
    x = b.unary(Op.NEG, b.input((1, 3, 7, 10)))
    if middle:
        s = _middle_window(b, x, 3, keepdims)
    else:
        n, c, h, w = b.shape(x)
        v = b.view(x, layout.window((n, c, h, w), (3, 3), (1, 1), (1, 1), (1, 1), (h, w), 0.0))
        s = b.reduce(Op.SUM, v, [4, 5], keepdims=keepdims)
    assert b.shape(s) == ((1, 3, 1, 1, 7, 10) if middle else (1, 3, 7, 10, 1, 1)) if keepdims else (1, 3, 7, 10)
    g, members, outputs = finish(b, b.unary(Op.EXP, s), s)
    windows, sch = _schedule(g, members, outputs)
    assert windows == {s} and not any(st.reduce for st in sch.stages)
    _built(g, members, outputs)


@pytest.mark.parametrize("k", [1, 8])
def test_one_and_max_taps_are_written_out(k):
    """A 1x1 window (a strided subsampling summed over one tap) and an 8x8 one (MAX_TAPS taps)."""
    assert k * k in (1, stencil.MAX_TAPS)
    b = Builder()
    x = b.input((1, 2, 17, 19))
    s = window_reduce(b, x, Op.SUM, k, 2, k // 2, 0.0)
    g, members, outputs = finish(b, b.binary(Op.MUL, s, b.scalar(0.5)))
    windows, sch = _schedule(g, members, outputs)
    assert windows == {s} and window.volume(g, _prim(g, s)) == k * k
    assert not any(st.reduce for st in sch.stages)
    _built(g, members, outputs)


def test_float64_windows_are_written_out():
    b = Builder()
    x = b.input((1, 3, 9, 8), "float64")
    s = window_reduce(b, x, Op.SUM, 3, 1, 1, 0.0)
    g, members, outputs = finish(b, b.binary(Op.SUB, s, x))
    windows, _ = _schedule(g, members, outputs)
    assert windows == {s}
    _built(g, members, outputs, rtol=1e-12, atol=1e-12)


def test_a_sum_of_a_kernel_input_is_a_reduce_stage():
    b = Builder()
    x = b.input((4, 6))
    s = b.reduce(Op.SUM, x, [1])
    g, members, outputs = finish(b, b.binary(Op.SUB, x, s))
    windows, sch = _schedule(g, members, outputs)
    assert not windows and any(st.reduce for st in sch.stages)
    _built(g, members, outputs)


def _prim(g, v):
    return next(p for p in g.prims if p.output == v)


def _stage(sch, v):
    return next(st for st in sch.stages if st.value == v)


def test_operands_count_their_taps_inside_windows_only():
    """relu(x) (and its window view) is computed at the 9 taps of each output's window; the negation read at two indices
    after the window (itself and a mirrored copy) is outside any window and not counted."""
    b = Builder()
    x = b.input((1, 4, 8, 8))
    r = b.unary(Op.RELU, x)
    s = window_reduce(b, r, Op.SUM, 3, 1, 1, 0.0)
    e = b.unary(Op.NEG, x)
    mirrored = b.view(e, layout.slice_((1, 4, 8, 8), (0, 0, 0, 7), (1, 1, 1, -1), (1, 4, 8, 8)))
    y = b.binary(Op.ADD, b.binary(Op.ADD, s, e), mirrored)
    g, members, outputs = finish(b, y)
    windows, sch = _schedule(g, members, outputs)
    assert windows == {s} and sch.mat == {y}
    assert _stage(sch, y).repeats == {r: 9, _prim(g, s).inputs[0]: 9}  # relu and the window view
    _built(g, members, outputs)


def test_a_window_inside_a_convolutions_window_counts_its_taps():
    """A 3x3 average pool read by a depthwise 3x3 convolution: the pool is computed at the 9 taps of
    each convolution window, 9 window additions each time, so the schedule stores it."""
    rng = np.random.default_rng(8)
    b = Builder()
    x = b.input((1, 8, 14, 14))
    s = window_reduce(b, x, Op.SUM, 3, 1, 1, 0.0)
    w = b.constant(rng.standard_normal((8, 1, 3, 3)).astype(np.float32))
    y = b.conv(s, w, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8))
    g, members, outputs = finish(b, b.unary(Op.RELU, y))
    prims = kernel_prims(g, members)
    windows, sch = _schedule(g, members, outputs)
    assert windows == {s}
    assert s in sch.mat  # stored: recomputing it costs 9 taps x 8 extra evaluations per element
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    assert any(n.startswith("stored to avoid recomputation") for n in spec.notes), spec.notes
    assert len(prims) == 4
    _built(g, members, outputs, rtol=1e-4, atol=1e-4)


def test_a_window_of_no_taps_is_not_written_out():
    """value() needs a tap to start its sum: an empty window (a 0 x 3 kernel) is no window sum, and
    feasibility refuses its empty view before any template sees it."""
    b = Builder()
    x = b.input((1, 2, 6, 6))
    v = b.view(x, layout.window((1, 2, 6, 6), (0, 3), (1, 1), (0, 1), (1, 1), (6, 6), 0.0))
    s = b.reduce(Op.SUM, v, [4, 5], keepdims=False)
    g, members, outputs = finish(b, b.binary(Op.ADD, s, x))
    p = _prim(g, s)
    assert window.volume(g, p) == 0 and not window.is_window(g, p, {v: _prim(g, v)})
    assert codegen.why_not(g, members, outputs) == f"{g.name(v)} is empty"
