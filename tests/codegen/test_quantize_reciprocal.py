"""A quotient by a constant that is only rounded to an integer (QuantizeLinear's round(x / scale))
is generated as a product with the reciprocal (codegen/scalar.py, Note [quantize by reciprocal]):
the requantizing kernel holds no division, and matches the interpreter as the oracle judges a
rounding kernel (one step at most, only where x / scale lies on a half-integer within a rounding
error); a quotient that is read as a float stays an exact division."""

import numpy as np

from cg_util import THREADS, feeds, finish, inputs_for
from kernorch import codegen
from kernorch.ir import interp, oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op


def _dequantize(b, x, zero: float, scale: float):
    return b.binary(Op.MUL, b.binary(Op.SUB, b.cast(x, "float32"), b.scalar(zero)), b.scalar(scale))


def _residual_add(also_float: bool):
    """uint8 + uint8 dequantized, added, requantized to uint8 (a ResNet block's residual add in a
    QDQ model); ``also_float``: the quotient is an output too."""
    b = Builder()
    x, y = b.input((1, 37, 9, 64), "uint8"), b.input((1, 37, 9, 64), "uint8")
    s = b.binary(Op.ADD, _dequantize(b, x, 131.0, 0.0564), _dequantize(b, y, 134.0, 0.0478))
    q = b.binary(Op.DIV, s, b.scalar(0.0337))
    r = b.binary(Op.ADD, b.unary(Op.ROUND, q), b.scalar(3.0))
    out = b.cast(b.binary(Op.MIN, b.binary(Op.MAX, r, b.scalar(0.0)), b.scalar(255.0)), "uint8")
    return finish(b, out, q) if also_float else finish(b, out)


def _checked(g, members, outputs):
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    fed = feeds(g, seed=4)
    ref = interp.run(g, fed)
    for v, t in zip(outputs, kernel.run(inputs_for(kernel, g, fed))):
        ok, _, detail = oracle.compare(t, ref[v], quantized=True)
        assert ok, detail
        if ref[v].dtype == np.uint8:
            assert np.abs(t.numpy().astype(int) - ref[v].astype(int)).max() <= 1
    return kernel


def test_a_requantizing_kernel_divides_nothing():
    kernel = _checked(*_residual_add(False))
    body = kernel.source[kernel.source.index(f"void {kernel.spec.name}("):]
    assert " / " not in body and "29.6735" in body  # 1 / 0.0337 multiplies instead


def test_a_quotient_read_as_a_float_stays_a_division():
    kernel = _checked(*_residual_add(True))
    body = kernel.source[kernel.source.index(f"void {kernel.spec.name}("):]
    assert " / " in body
