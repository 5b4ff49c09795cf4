"""tanh(softplus(x)) (Mish's gate) becomes one exp and a division (rewrite/activations.py): the
rewritten graph matches the original's reference interpretation to float32 rounding over the whole
range, including the clamp, huge and tiny inputs, infinities and NaN; float16 is left alone and a
softplus with other readers is still computed for them."""

import numpy as np
import pytest

from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.rewrite import DEFAULT_RULES, apply_rewrites

EDGES = [-np.inf, -1e4, -104.0, -88.0, -30.0, -10.0, -1e-3, -0.0, 0.0, 1e-7, 0.5, 19.9, 20.0, 20.1, 88.0, 1e4, np.inf,
         np.nan]


def _mish(dtype="float32", extra_reader=False):
    b = Builder()
    x = b.input((1, 3, 4, len(EDGES) + 500), dtype=dtype)
    sp = b.unary(Op.SOFTPLUS, x)
    outs = [b.binary(Op.MUL, x, b.unary(Op.TANH, sp))]
    if extra_reader:
        outs.append(b.binary(Op.ADD, sp, b.scalar(1.0, dtype)))
    b.g.outputs = outs
    return b.g, x


def _feed(x_shape, dtype):
    rng = np.random.default_rng(0)
    vals = np.concatenate([np.array(EDGES), rng.uniform(-40, 40, 400), rng.standard_normal(100)])
    return np.broadcast_to(vals, x_shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mish_gate_is_one_exp_and_a_division(dtype):
    g, x = _mish(dtype)
    out, report = apply_rewrites(g, DEFAULT_RULES)
    assert report["tanh_softplus"] == 1
    ops = [p.op for p in out.prims]
    assert Op.TANH not in ops and Op.SOFTPLUS not in ops and ops.count(Op.EXP) == 1
    feed = _feed(g.types[x].shape, dtype)
    want = interp.run(g, [feed])[g.outputs[0]]
    got = interp.run(out, [feed])[out.outputs[0]]
    tol = 4e-7 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-3, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(want))


def test_float16_and_other_readers():
    g, _ = _mish("float16")
    _, report = apply_rewrites(g, DEFAULT_RULES)
    assert report["tanh_softplus"] == 0
    g, x = _mish(extra_reader=True)
    out, report = apply_rewrites(g, DEFAULT_RULES)
    assert report["tanh_softplus"] == 1 and [p.op for p in out.prims].count(Op.SOFTPLUS) == 1
    feed = _feed(g.types[x].shape, "float32")
    want, got = interp.run(g, [feed]), interp.run(out, [feed])
    for a, b in zip(g.outputs, out.outputs):
        np.testing.assert_allclose(got[b], want[a], rtol=4e-7, atol=1e-10, equal_nan=True)
