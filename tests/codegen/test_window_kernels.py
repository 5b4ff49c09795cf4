"""Small window sums (poolings) are written out tap by tap in the C generator's loops
(codegen/window.py): average pools with and without padding, strided, 5x5, with a prologue read by
overlapping windows, a residual after them and the sum itself written out, all against the
reference interpreter; a max pool, a wide window and a global pool over a permuted view stay reduce
stages."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish, window_reduce
from kernorch import codegen
from kernorch.codegen import window
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.schedule import Vars, make_schedule
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op


def _pool(shape=(1, 8, 14, 14), k=3, s=1, p=1, op=Op.SUM, prologue=None, residual=True, keep_sum=False):
    """x -> prologue -> window reduce -> * 1/k^2 (- x): PoolFormer's token mixer when residual."""
    b = Builder()
    x = b.input(shape)
    src = b.unary(prologue, x) if prologue else x
    pooled = window_reduce(b, src, op, k, s, p, 0.0 if op is Op.SUM else -np.inf)
    y = b.binary(Op.MUL, pooled, b.scalar(1.0 / (k * k)))
    if residual:
        y = b.binary(Op.SUB, y, src)
    return finish(b, y, pooled) if keep_sum else finish(b, y)


CASES = {
    "avg3_residual": lambda: _pool(),
    "avg3_stride2_no_pad": lambda: _pool((2, 5, 15, 13), s=2, p=0, residual=False),
    "avg5_padded": lambda: _pool((1, 6, 9, 11), k=5, p=2, residual=False),
    "avg3_sigmoid_prologue": lambda: _pool(prologue=Op.SIGMOID),
    "avg3_writes_its_sum": lambda: _pool((1, 4, 7, 9), keep_sum=True),
    "avg3_wide_rows": lambda: _pool((1, 3, 40, 70)),
}


def _stages(g, members, outputs):
    prims = kernel_prims(g, members)
    producers = {p.output: p for p in prims}
    windows = {p.output for p in prims if window.is_window(g, p, producers)}
    sch = make_schedule(g, prims, outputs, Vars(), THREADS)
    return windows, {st.value for st in sch.stages if st.reduce}


@pytest.mark.parametrize("name", list(CASES))
def test_window_sum_matches_interpreter(name):
    g, members, outputs = CASES[name]()
    windows, reduce_stages = _stages(g, members, outputs)
    assert windows and not windows & reduce_stages  # written out, not a reduce stage
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    check(kernel, g, outputs, rtol=1e-5, atol=1e-5)


def test_max_pool_and_wide_sums_stay_reduce_stages():
    g, members, outputs = _pool(op=Op.RMAX, residual=False)
    windows, reduce_stages = _stages(g, members, outputs)
    assert not windows and reduce_stages
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs)
    g, members, outputs = _pool((1, 2, 30, 30), k=9, p=4, residual=False)  # 81 taps > MAX_TAPS
    windows, reduce_stages = _stages(g, members, outputs)
    assert not windows and reduce_stages
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-5, atol=1e-5)


def test_a_global_pool_over_a_permuted_view_stays_a_reduce_stage():
    """Channels-last 7x7 -> per-channel sums: 49 taps, but no coordinate moves with both a kept and a
    reduced index (no sliding window): the reduce loop reads its rows contiguously."""
    b = Builder()
    x = b.input((1, 7, 7, 24))
    v = b.view(x, layout.permute((1, 7, 7, 24), (0, 3, 1, 2)))
    g, members, outputs = finish(b, b.reduce(Op.SUM, v, [2, 3], keepdims=False))
    windows, reduce_stages = _stages(g, members, outputs)
    assert not windows and reduce_stages
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-5, atol=1e-5)
