"""Elementwise helpers the rule tests do not pin down (mutation testing, issue 44): rank-0 constants
take the dtype of the value they combine with (a float32 1/3 in a float64 Mean is 3e-8 off), and a
constant parameter becomes a new constant of the wanted shape, not a view (PRelu before opset 7:
the slope per channel, checked against the ONNX reference, onnxruntime has no PRelu-6)."""

import numpy as np
import pytest

from onnx_oracle import check, node_model, run_reference
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

RNG = np.random.default_rng(47)


def test_float64_mean_scales_by_a_float64_reciprocal():
    ins = {k: RNG.standard_normal((3, 4)) for k in "abc"}
    (out,) = check("Mean", ins, oracle=run_reference, rel=1e-13)
    assert out.dtype == np.float64
    g, _ = import_onnx(node_model("Mean", ins))
    (third,) = [g.constants[v] for p in g.prims for v in p.inputs if v in g.constants]
    assert third.shape == () and third.dtype == np.float64 and third == 1 / 3


@pytest.mark.parametrize("const", [True, False])
def test_opset6_prelu_slope_applies_per_channel(const):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s = RNG.uniform(0.05, 0.5, (3,)).astype(np.float32)
    (out,) = check("PRelu", {"x": x, "s": s}, opset=6, consts=["s"] if const else [], oracle=run_reference)
    np.testing.assert_allclose(out, np.where(x < 0, x * s[:, None, None], x), rtol=1e-6)
    if const:  # the slope is one new (3, 1, 1) constant: no prim reshapes the initializer
        g, _ = import_onnx(node_model("PRelu", {"x": x, "s": s}, opset=6, consts=["s"]))
        shaped = [g.constants[v] for p in g.prims for v in p.inputs if v in g.constants and g.constants[v].ndim]
        assert [c.shape for c in shaped] == [(3, 1, 1)] and np.array_equal(shaped[0].reshape(-1), s)
        assert [p.op for p in g.prims].count(Op.VIEW) == 1
