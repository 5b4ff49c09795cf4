"""Linear-rule edges the attribute grid of test_linear.py does not reach (mutation testing, issue 44):
SAME padding of an even total at unit stride (where a wrong split changes the output size), an
explicit empty auto_pad, the pads a Conv prim carries (2 per spatial axis, begins then ends), and
the rejections, each message matched whole."""

import re

import numpy as np
import pytest

from onnx_oracle import check, node_model
from kernorch.errors import UnsupportedOpError
from kernorch.fission.rules.linear import same_pads
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

RNG = np.random.default_rng(46)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_attrs(op, ins, **attrs):
    g, _ = import_onnx(node_model(op, ins, consts=["w"], **attrs))
    (p,) = [p for p in g.prims if p.op in (Op.CONV, Op.CONV_TRANSPOSE)]
    return p.attrs


@pytest.mark.parametrize("total,upper,lower", [(0, (0, 0), (0, 0)), (1, (0, 1), (1, 0)), (2, (1, 1), (1, 1)),
                                               (3, (1, 2), (2, 1)), (4, (2, 2), (2, 2)), (7, (3, 4), (4, 3))])
def test_same_pads_split(total, upper, lower):
    assert same_pads("SAME_UPPER", total) == upper and same_pads("SAME_LOWER", total) == lower


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padding_at_unit_stride_keeps_the_size(auto_pad):
    """Kernel 5 x 4 at stride 1: totals 4 and 3 split (2, 2) and (1, 2) / (2, 1)."""
    ins = {"x": rand(1, 2, 6, 5), "w": rand(3, 2, 5, 4)}
    (out,) = check("Conv", ins, consts=["w"], auto_pad=auto_pad)
    assert out.shape == (1, 3, 6, 5)
    want = (2, 1, 2, 2) if auto_pad == "SAME_UPPER" else (2, 2, 2, 1)
    assert conv_attrs("Conv", ins, auto_pad=auto_pad).pads == want


def test_an_explicit_empty_auto_pad_is_notset():
    ins = {"x": rand(1, 2, 6, 5), "w": rand(3, 2, 3, 3)}
    check("Conv", ins, consts=["w"], auto_pad="", pads=[1, 0, 1, 2])
    assert conv_attrs("Conv", ins, auto_pad="", pads=[1, 0, 1, 2]).pads == (1, 0, 1, 2)


@pytest.mark.parametrize("attrs", [{}, {"auto_pad": "VALID"}, {"auto_pad": "NOTSET"}])
def test_conv_without_padding_carries_two_zero_pads_per_axis(attrs):
    ins = {"x": rand(1, 2, 6, 5, 4), "w": rand(3, 2, 3, 3, 2)}
    check("Conv", ins, consts=["w"], **attrs)
    a = conv_attrs("Conv", ins, **attrs)
    assert a.pads == (0,) * 6 and a.strides == (1, 1, 1) and a.dilations == (1, 1, 1) and a.groups == 1


def test_conv_transpose_without_padding_carries_two_zero_pads_per_axis():
    ins = {"x": rand(1, 2, 4, 5), "w": rand(2, 3, 3, 3)}
    for attrs in ({}, {"auto_pad": "VALID"}):
        check("ConvTranspose", ins, consts=["w"], **attrs)
        a = conv_attrs("ConvTranspose", ins, **attrs)
        assert a.pads == (0,) * 4 and a.output_padding == (0, 0) and a.strides == (1, 1)


def _refused(op, ins, message, **attrs):
    model = node_model(op, ins, consts=["w"], **attrs) if "w" in ins else node_model(op, ins, **attrs)
    with pytest.raises(UnsupportedOpError, match=f"^{op} node '': {re.escape(message)}$"):
        import_onnx(model)


def test_unknown_auto_pad_is_refused():
    _refused("Conv", {"x": rand(1, 2, 6, 5), "w": rand(3, 2, 3, 3)}, "unknown auto_pad 'SAME'", auto_pad="SAME")
