"""Note [clamps before a narrowing cast] (codegen/clamps.py): QuantizeLinear's tail is written
without NaN propagation only where that cannot change a result — checked against the
interpreter on NaN, infinities and values past both bounds, and on the C source it writes."""

import numpy as np
import pytest

from kernorch import codegen
from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from tests.codegen.cg_util import THREADS, finish

EXTREMES = np.array([np.nan, -np.nan, np.inf, -np.inf, -1e30, 1e30, -129.7, -0.6, -0.4, 0.0, 0.4, 0.6, 126.5,
                     127.5, 254.5, 255.5, 300.0, 3e9, -3e9], np.float32)


def _kernel(lo: float, hi: float, dtype: str, max_first: bool = True):
    b = Builder()
    x = b.input((len(EXTREMES),))
    y = b.unary(Op.ROUND, b.binary(Op.MUL, x, b.scalar(1.0)))
    first, second = ((Op.MAX, lo), (Op.MIN, hi)) if max_first else ((Op.MIN, hi), (Op.MAX, lo))
    y = b.binary(second[0], b.binary(first[0], y, b.scalar(first[1])), b.scalar(second[1]))
    out = b.cast(y, dtype)
    g, members, outputs = finish(b, out)
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    got = np.asarray(kern.run([EXTREMES])[0])
    ref = interp.run(g, [EXTREMES])[out]
    np.testing.assert_array_equal(got, ref)
    return kern.source


def test_uint8_quantize_clamps_are_plain():
    src = _kernel(0.0, 255.0, "uint8")
    assert "!=" not in src.split("void kn_")[-1], "the clamps still test for NaN"


def test_clamps_in_the_other_order_keep_nan_propagation():
    """min first: a NaN clamped plainly would become 255, where the cast of a NaN gives 0."""
    src = _kernel(0.0, 255.0, "uint8", max_first=False)
    assert "!=" in src.split("void kn_")[-1]


def test_int8_clamps_keep_nan_propagation():
    """int8's (-128, 127): a NaN clamped plainly would become -128, where the cast of a NaN gives 0."""
    src = _kernel(-128.0, 127.0, "int8")
    assert "!=" in src.split("void kn_")[-1]


def test_a_clamp_read_twice_keeps_nan_propagation():
    b = Builder()
    x = b.input((len(EXTREMES),))
    m = b.binary(Op.MAX, x, b.scalar(0.0))
    q = b.cast(b.binary(Op.MIN, m, b.scalar(255.0)), "uint8")
    g, members, outputs = finish(b, q, m)
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    got = [np.asarray(t) for t in kern.run([EXTREMES])]
    ref = interp.run(g, [EXTREMES])
    np.testing.assert_array_equal(got[0], ref[q])
    np.testing.assert_array_equal(got[1], ref[m])  # NaN stays NaN in the float output
