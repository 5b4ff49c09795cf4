"""Generated C kernels on bfloat16 values (precision="bf16" stores activations as bf16): the rounding
cast bit for bit against ml_dtypes (ties to even, NaN, infinities, overflow), and kernels that load,
compute on and store bf16 through views, concatenation and elementwise chains, equal to the
interpreter exactly (both compute in float32 and round once per prim)."""

import numpy as np
import pytest

from kernorch import codegen
from kernorch.codegen.facts import CannotGenerate
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.ir.tensors import BFLOAT16, to_numpy
from tests.codegen.cg_util import THREADS, finish


def _run(g, members, outputs, fed):
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    env = dict(zip(g.inputs, fed))
    got = [to_numpy(t) for t in kern.run([env[v] for v in kern.inputs])]
    g.outputs = list(outputs)
    ref = interp.run(g, fed)
    return got, [ref[v] for v in outputs], kern


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def test_rounding_cast_is_bit_exact():
    """float32 -> bf16 rounds to nearest, ties to even; NaN stays NaN; values past bf16's largest
    finite round to infinity, as ml_dtypes (and the interpreter) round."""
    b = Builder()
    x = b.input((4096,))
    y = b.cast(x, "bfloat16")
    g, members, outputs = finish(b, y)
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895314e38, -3.3895314e38, 3.4e38, 1e-40, -1e-45],
                       np.float32)
    ties = (np.arange(64, dtype=np.uint32) << 16 | 0x8000).view(np.float32)  # exactly half-way: even wins
    random = rng.standard_normal(4096 - special.size - ties.size).astype(np.float32) * 10.0 ** rng.integers(-30, 30)
    data = np.concatenate([special, ties, random]).astype(np.float32)
    (got,), (ref,), _ = _run(g, members, outputs, [data])
    assert got.dtype == BFLOAT16
    nan = np.isnan(ref.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(ref)[~nan])


@pytest.mark.parametrize("case", ["transpose", "concat", "chain", "widen_compute_round", "broadcast_add"])
def test_bf16_kernels_equal_the_interpreter(case):
    b = Builder()
    x = b.input((3, 40, 24), "bfloat16")
    if case == "transpose":
        out = b.view(x, layout.permute((3, 40, 24), (0, 2, 1)))
    elif case == "concat":
        out = b.concat([x, b.input((3, 40, 24), "bfloat16")], axis=1)
    elif case == "chain":  # elementwise on bf16 values: float32 arithmetic, each result rounded
        out = b.unary(Op.RELU, b.binary(Op.MUL, b.binary(Op.ADD, x, x), b.scalar(0.3, "bfloat16")))
    elif case == "widen_compute_round":  # what precision.py produces: widen, float32 work, round to store
        w = b.cast(x, "float32")
        out = b.cast(b.unary(Op.RELU, b.binary(Op.ADD, w, b.scalar(0.1))), "bfloat16")
    else:
        out = b.binary(Op.ADD, x, b.broadcast_to(b.input((1, 1, 24), "bfloat16"), (3, 40, 24)))
    g, members, outputs = finish(b, out)
    rng = np.random.default_rng(1)
    fed = [rng.standard_normal(g.types[v].shape).astype(np.float32).astype(BFLOAT16) for v in g.inputs]
    (got,), (ref,), kern = _run(g, members, outputs, fed)
    assert "uint16_t" in kern.source and got.dtype == BFLOAT16
    np.testing.assert_array_equal(_bits(got), _bits(ref))


def test_widened_reduction_reads_bf16_and_accumulates_in_float32():
    """A reduction over widened bf16 values (a normalisation after a bf16 residual) loads bf16 and
    sums in float32 or wider; a reduction on bf16 values themselves is left to other kernels."""
    b = Builder()
    x = b.input((8, 512), "bfloat16")
    s = b.reduce(Op.SUM, b.cast(x, "float32"), [1])
    g, members, outputs = finish(b, s)
    fed = [np.random.default_rng(2).standard_normal((8, 512)).astype(np.float32).astype(BFLOAT16)]
    (got,), (ref,), _ = _run(g, members, outputs, fed)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    b2 = Builder()
    y = b2.input((8, 512), "bfloat16")
    g2, members2, outputs2 = finish(b2, b2.reduce(Op.SUM, y, [1]))
    with pytest.raises(CannotGenerate, match="reduction over bfloat16"):
        codegen.build_kernel(g2, members2, outputs2, num_threads=THREADS)


def test_bf16_exact_values_are_not_rounded_again():
    """Note [bf16-exact values] (c.py): a widened bf16 value through ReLU, max with a bf16-exact
    constant, negation and a select is still a bf16 value: its rounding cast is the identity and it
    is stored as its top half. Bit for bit with the interpreter (NaNs where it has NaNs, whatever their
    payload); a value that is not exact (a sum) is still rounded."""
    b = Builder()
    x = b.input((3, 256), "bfloat16")
    w = b.cast(x, "float32")
    exact = b.binary(Op.MAX, b.unary(Op.NEG, b.unary(Op.RELU, w)), b.scalar(-0.5))
    out_exact = b.cast(exact, "bfloat16")
    out_sum = b.cast(b.binary(Op.ADD, w, b.scalar(0.25)), "bfloat16")  # exact operands, an inexact sum
    g, members, outputs = finish(b, out_exact, out_sum)
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 256)).astype(np.float32).astype(BFLOAT16)
    bits = data.view(np.uint16)
    bits[0, :4] = [0x7FC1, 0xFFC0, 0x7F80, 0xFF80]  # NaNs with payloads, +-inf
    got, ref, kern = _run(g, members, outputs, [data])
    for a, r in zip(got, ref):
        nan = np.isnan(r.astype(np.float32))
        assert nan.any() and np.array_equal(np.isnan(a.astype(np.float32)), nan)
        np.testing.assert_array_equal(_bits(a)[~nan], _bits(r)[~nan])
    function = kern.source[kern.source.index(f"void {kern.spec.name}("):]
    assert function.count("kn_bf16_round(") == 1 and "kn_bf16_high(" in function  # the sum's rounding only
