"""A reduce read only through a permutation is lowered in the permuted order (codegen/reduce_order.py):
pools between channels-last tensors, against the reference interpreter, and the cases left alone."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish, window_reduce
from kernorch import codegen
from kernorch.codegen.reduce_order import permutation, permuted_reduces
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _pool(op=Op.RMAX, shape=(2, 19, 11, 9), k=3, s=2, p=1, nhwc_in=True, nhwc_out=True, relu=False, both=False):
    """A pooling window between layouts (NHWC shape given as N, C, H, W); ``both``: the kernel
    also writes the NCHW result."""
    n, c, h, w = shape
    b = Builder()
    x = b.permute(b.input((n, h, w, c)), TO_NCHW) if nhwc_in else b.input(shape)
    if relu:
        x = b.unary(Op.RELU, x)
    y = window_reduce(b, x, op, k, s, p, -np.inf if op is Op.RMAX else 0.0)
    outs = [b.permute(y, TO_NHWC) if nhwc_out else y]
    if both:
        outs.append(y)
    return finish(b, *outs)


CASES = {
    "max_nhwc": lambda: _pool(),
    "max_nchw_to_nhwc": lambda: _pool(nhwc_in=False, shape=(1, 33, 14, 15)),
    "avg_nhwc_relu_prologue": lambda: _pool(op=Op.SUM, relu=True, shape=(1, 40, 7, 8), k=2, s=2, p=0),
    "max_5x5_stride1_odd": lambda: _pool(shape=(1, 17, 13, 13), k=5, s=1, p=2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_permuted_pool_matches_interpreter(name):
    g, members, outputs = CASES[name]()
    g2, members2 = permuted_reduces(g, members, outputs)
    assert g2 is not g and members2 != members  # lowered in the permuted order
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    check(kernel, g, outputs)


@pytest.mark.parametrize("case", [lambda: _pool(nhwc_out=False), lambda: _pool(both=True)])
def test_a_reduce_written_as_it_is_keeps_its_order(case):
    """Writing the reduce's own (NCHW) result, or no permutation after it: nothing to reorder,
    and the kernel still matches."""
    g, members, outputs = case()
    assert permuted_reduces(g, members, outputs) == (g, members)
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs)


def test_permutation_reads_a_view_map():
    assert permutation(layout.permute((1, 8, 5, 6), TO_NHWC)) == TO_NHWC
    assert permutation(layout.permute((2, 8, 5, 1), (3, 1, 0, 2))) == (3, 1, 0, 2)
    assert permutation(layout.reshape((4, 6), (24,))) is None
    assert permutation(layout.slice_((8,), (1,), (2,), (3,))) is None
