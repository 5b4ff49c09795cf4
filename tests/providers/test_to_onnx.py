"""Every prim's ONNX export, round-tripped: onnxruntime on the exported model vs the interpreter."""

import numpy as np
import onnx
import pytest
from onnx import helper

from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import BINARY, UNARY, CastAttrs, ConvAttrs, Op
from kernorch.providers.base import verify
from kernorch.providers.ort import OrtProvider
from kernorch.providers.to_onnx import export

ORT = OrtProvider(threads=1)


def _check(b: Builder, outs, members=None):
    g = b.g
    g.outputs = list(outs)
    members = members if members is not None else [p.output for p in g.prims]
    built = ORT.build(g, members, list(outs))
    ok, err, detail = verify(built, g, members, list(outs), seed=1)
    assert ok, detail
    onnx.checker.check_model(export(g, members, list(outs)).model)
    return built


@pytest.mark.parametrize("op", sorted(UNARY - {Op.CAST}, key=lambda o: o.value))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_unary(op, dtype):
    if op in (Op.ISNAN, Op.ERF, Op.SOFTPLUS) and dtype == "int32":
        pytest.skip("onnxruntime has no float64 kernel for it; integer inputs never reach it in practice")
    b = Builder()
    x = b.input((3, 5), "bool" if op is Op.NOT else dtype)
    _check(b, [b.unary(op, x)])


@pytest.mark.parametrize("op", sorted(BINARY, key=lambda o: o.value))
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_binary(op, dtype):
    b = Builder()
    dt = "bool" if op in (Op.AND, Op.OR, Op.XOR) else dtype
    x, y = b.input((4, 6), dt), b.input((4, 6), dt)
    if op is Op.POW:
        # NumPy refuses negative integer exponents; negative float bases give NaN
        x, y = (b.unary(Op.ABS, x), y) if dt == "float32" else (x, b.unary(Op.ABS, y))
    _check(b, [b.binary(op, x, y)])


def test_binary_with_scalar_constant_of_another_dtype():
    b = Builder()
    x = b.input((2, 3))
    y = b.binary(Op.MUL, x, b.scalar(1.5, "float64"))
    z = b.binary(Op.ADD, y, b.scalar(2, "int32"))
    _check(b, [z])


def test_where_cast_and_compare():
    b = Builder()
    x, y = b.input((3, 4)), b.input((3, 4))
    c = b.binary(Op.GT, x, y)
    w = b.where(c, x, b.scalar(0.0))
    i = b.prim(Op.CAST, [w], CastAttrs("int32"))
    _check(b, [i, b.prim(Op.CAST, [c], CastAttrs("float32"))])


@pytest.mark.parametrize("op", [Op.SUM, Op.RMAX, Op.RMIN, Op.PROD])
@pytest.mark.parametrize("keep", [True, False])
def test_reduce(op, keep):
    b = Builder()
    x = b.input((2, 3, 4))
    _check(b, [b.reduce(op, x, [0, 2], keepdims=keep)])


def test_broadcast_concat_matmul():
    b = Builder()
    x, y = b.input((2, 1, 4)), b.input((2, 3, 4))
    e = b.broadcast_to(x, (2, 3, 4))
    c = b.concat([e, y], axis=1)
    m = b.matmul(c, b.input((4, 5)))
    _check(b, [m])


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (0, 1, 2, 0)])
def test_conv(transpose, pads):
    b = Builder()
    x = b.input((1, 4, 7, 7))
    w = b.constant(np.random.default_rng(0).standard_normal((4, 6, 3, 3) if transpose else (6, 4, 3, 3), dtype=np.float32))
    bias = b.constant(np.arange(6, dtype=np.float32) if not transpose else np.arange(12, dtype=np.float32))
    a = ConvAttrs((2, 2), pads, (1, 1), 2 if transpose else 1, (1, 0) if transpose else ())
    _check(b, [b.conv(x, w, bias, a, transpose=transpose)])


def test_opaque_node():
    b = Builder()
    x = b.input((2, 5))
    node = helper.make_node("Softmax", ["in"], ["out"], axis=1)
    y = b.opaque("Softmax", [x], TensorType((2, 5), "float32"), node.SerializeToString(), 13)
    _check(b, [b.unary(Op.EXP, y)])


VIEWS = {
    "identity-like reshape": (layout.reshape((2, 3, 4), (6, 4)), "reshape"),
    "permute": (layout.permute((2, 3, 4), (2, 0, 1)), "permute"),
    "permute then flatten": (layout.reshape((3, 4, 2), (12, 2)).compose(layout.permute((2, 3, 4), (1, 2, 0))),
                             "reshape-permute"),
    "channel shuffle": (layout.reshape((2, 3, 4), (2, 12)).compose(
        layout.permute((2, 4, 3), (0, 2, 1)).compose(layout.reshape((2, 12), (2, 4, 3)))), "reshape-permute"),
    "broadcast": (layout.broadcast((1, 3, 1), (2, 3, 4)), "broadcast"),
    "strided slice": (layout.slice_((7, 5), (1, 4), (2, -1), (3, 5)), "slice"),
    "reverse": (layout.flip((3, 4), (1,)), "slice"),
    "row then squeeze": (layout.reshape((1, 6), (6,)).compose(layout.slice_((4, 6), (1, 0), (1, 1), (1, 6))), "slice"),
    "pad constant": (layout.pad((1, 2, 5, 6), (0, 0, 1, 2), (0, 0, 2, 1), "constant", -1.5), "pad-constant"),
    "pad reflect": (layout.pad((1, 2, 5, 6), (0, 0, 1, 2), (0, 0, 2, 1), "reflect"), "pad-reflect"),
    "pad edge": (layout.pad((1, 2, 5, 6), (0, 0, 1, 2), (0, 0, 2, 1), "edge"), "pad-edge"),
    "crop and pad": (layout.pad((3, 5), (-1, 2), (1, -2), "constant", 0.0), "pad-constant"),
    "slice then split heads": (layout.permute((3, 2, 3), (1, 0, 2)).compose(layout.reshape((3, 6), (3, 2, 3)).compose(
        layout.slice_((3, 12), (0, 6), (1, 1), (3, 6)))), "box"),
    "upsample then reflect pad": (layout.pad((1, 2, 6, 8), (0, 0, 1, 1), (0, 0, 1, 1), "reflect").compose(
        layout.IndexMap((1, 2, 6, 8), (1, 2, 3, 4), (ix.var(0), ix.var(1), ix.floordiv(ix.var(2), 2, (1, 2, 6, 8)),
                                                      ix.floordiv(ix.var(3), 2, (1, 2, 6, 8))))), "upsample-pad-reflect"),
    "window (im2col)": (layout.window((1, 2, 5, 5), (3, 3), (2, 2), (1, 1), (1, 1), (3, 3)), "gather"),
    "take": (layout.take((4, 5), 1, np.array([[3, 0], [1, 1]])), "gather"),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_maps(name):
    m, kind = VIEWS[name]
    b = Builder()
    x = b.input(m.in_shape)
    v = b.view(x, m)
    built = _check(b, [b.unary(Op.NEG, v)])
    assert f"{kind} view" in built.detail


def test_views_of_bool_and_int_tensors():
    b = Builder()
    x = b.input((3, 5), "int32")
    c = b.binary(Op.GT, x, b.scalar(0, "int32"))
    v1 = b.view(c, layout.pad((3, 5), (1, 0), (0, 1), "constant", 0.0))
    v2 = b.view(x, layout.window((3, 5), (2,), (1,), (1,), (1,), (5,), -7.0))
    _check(b, [v1, v2])


def test_baked_constants_are_initializers_and_not_inputs():
    b = Builder()
    x = b.input((2, 3))
    w = b.constant(np.ones((3, 4), dtype=np.float32))
    g = b.g
    y = b.matmul(x, w)
    g.outputs = [y]
    k = export(g, [y], [y])
    assert k.inputs == [x, w] and k.feeds[1] is None and k.baked == {w}
    assert [i.name for i in k.model.graph.input] == [k.feeds[0]]
    k2 = export(g, [y], [y], bake_constants=False)
    assert len(k2.model.graph.input) == 2 and not k2.baked


# -- runtime gathers (Op.GATHER) --------------------------------------------------------------
# Index inputs get the verifier's random integers in [-5, 5]: gathered axes have >= 6 entries.

def _exported_ops(b: Builder, outs) -> list[str]:
    g = b.g
    return [n.op_type for n in export(g, [p.output for p in g.prims], list(outs)).model.graph.node]


@pytest.mark.parametrize("itype", ["int64", "int32"])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_take_exports_as_gather(axis, itype):
    b = Builder()
    x, i = b.input((7, 8, 3)), b.input((2, 5), itype)
    m, maps = layout.gather_take((7, 8, 3), axis, (2, 5))
    out = b.gather(x, [i], m, [axis], maps)
    _check(b, [out])
    assert "Gather" in _exported_ops(b, [out])


def test_gather_elements_exports_as_gather_elements():
    b = Builder()
    x, i = b.input((6, 7)), b.input((4, 7), "int64")
    m, maps = layout.gather_elements((6, 7), 0, (4, 7))
    out = b.gather(x, [i], m, [0], maps)
    _check(b, [out])
    assert "GatherElements" in _exported_ops(b, [out])


@pytest.mark.parametrize("itype", ["int64", "int32"])
def test_gather_nd_exports_as_gather_nd(itype):
    b = Builder()
    x, i = b.input((6, 7, 3)), b.input((5, 2), itype)
    m, maps = layout.gather_nd((6, 7, 3), (5, 2), 0)
    out = b.gather(x, [i, i], m, [0, 1], maps)
    _check(b, [out])
    assert "GatherND" in _exported_ops(b, [out])


def test_gather_with_composed_maps_exports_through_coordinates():
    """A map no single ONNX gather spells (the data index transposed): GatherND over explicit
    coordinates, still exact."""
    b = Builder()
    x, i = b.input((6, 9)), b.input((4,), "int64")
    m, maps = layout.gather_take((6, 9), 0, (4,))
    m = layout.make((9, 4), (6, 9), [ix.const(0), ix.var(0)])
    maps = (layout.make((9, 4), (4,), [ix.var(1)]),)
    out = b.unary(Op.EXP, b.gather(x, [i], m, [0], maps))
    _check(b, [out])
    assert "GatherND" in _exported_ops(b, [out])


@pytest.mark.parametrize("case", ["take", "elements", "nd"])
def test_gathers_run_on_openvino(case):
    """The embedding-style regions onnxruntime takes, OpenVINO takes too."""
    pytest.importorskip("openvino")
    from kernorch.providers.ov import OpenVinoProvider

    b = Builder()
    x = b.input((9, 8))
    if case == "take":
        i = b.input((2, 5), "int64")
        m, maps = layout.gather_take((9, 8), 0, (2, 5))
        out = b.gather(x, [i], m, [0], maps)
    elif case == "elements":
        i = b.input((4, 8), "int32")
        m, maps = layout.gather_elements((9, 8), 0, (4, 8))
        out = b.gather(x, [i], m, [0], maps)
    else:
        i = b.input((3, 2), "int64")
        m, maps = layout.gather_nd((9, 8), (3, 2), 0)
        out = b.gather(x, [i, i], m, [0, 1], maps)
    out = b.unary(Op.EXP, out)
    g = b.g
    g.outputs = [out]
    members = [p.output for p in g.prims]
    built = OpenVinoProvider(threads=1).build(g, members, [out])
    ok, err, detail = verify(built, g, members, [out], seed=2)
    assert ok, detail
