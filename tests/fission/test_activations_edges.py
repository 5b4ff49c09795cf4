"""Activation-rule edges the grid of test_activations.py does not reach (mutation testing, issue
44): one-element bounds and slopes become rank-0 constants of X's dtype (immediates), runtime
bounds are cast to X's dtype without a float detour (int64 beyond 2**53), and a bound that is not
a scalar is refused with its message."""

import re

import numpy as np
import pytest

from onnx_oracle import check, node_model
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

BIG = 2**60


@pytest.mark.parametrize("const", [True, False])
def test_int64_clip_bounds_are_exact_beyond_2_53(const):
    x = np.asarray([BIG - 5, BIG - 1, BIG, BIG + 1, BIG + 3, BIG + 9, -BIG], np.int64)
    lo, hi = np.asarray(BIG - 1, np.int64), np.asarray(BIG + 3, np.int64)
    (out,) = check("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13, consts=["lo", "hi"] if const else [])
    assert out.tolist() == [BIG - 1, BIG - 1, BIG, BIG + 1, BIG + 3, BIG + 3, BIG - 1]


@pytest.mark.parametrize("op,ins", [
    ("Clip", {"x": np.linspace(-2, 2, 12, dtype=np.float64).reshape(3, 4), "lo": np.asarray([-0.1]),
              "hi": np.asarray([0.7])}),
    ("PRelu", {"x": np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), "slope": np.asarray([[0.1]], np.float32)}),
])
def test_one_element_constants_become_rank0_immediates_of_xs_dtype(op, ins):
    (out,) = check(op, ins, opset=13, consts=[k for k in ins if k != "x"])
    g, _ = import_onnx(node_model(op, ins, opset=13, consts=[k for k in ins if k != "x"]))
    assert [p.op for p in g.prims if p.op not in (Op.MAX, Op.MIN, Op.MUL, Op.LT, Op.WHERE)] == []
    scalars = [g.constants[v] for p in g.prims for v in p.inputs if v in g.constants]
    assert scalars and all(c.shape == () and c.dtype == ins["x"].dtype for c in scalars)
    if op == "Clip":  # float64 bounds, exactly (a float32 0.1 would sit 1.5e-9 away)
        assert out.min() == -0.1 and out.max() == 0.7


def test_a_bound_that_is_not_a_scalar_is_refused():
    x = np.zeros((3, 4), np.float32)
    model = node_model("Clip", {"x": x, "lo": np.zeros((2,), np.float32)}, opset=13, consts=["lo"])
    message = "Clip node '': input 1 must be a scalar, has shape (2,)"
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(message)}$"):
        import_onnx(model)
