"""Shape operators (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Expand, DepthToSpace,
SpaceToDepth) against onnxruntime; each must come out as a single view or broadcast prim."""

import numpy as np
import pytest

from onnx_oracle import check, node_model
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.ir.prims import Op

RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


def prim_ops(model):
    g, _ = import_onnx(model)
    return [p.op for p in g.prims]


@pytest.mark.parametrize("perm", [None, [0, 1, 2, 3], [3, 2, 1, 0], [0, 2, 3, 1], [1, 0, 3, 2]])
def test_transpose(perm):
    attrs = {} if perm is None else {"perm": perm}
    check("Transpose", {"x": X}, **attrs)


@pytest.mark.parametrize("shape,allowzero", [
    ((6, 20), 0), ((-1,), 0), ((0, -1), 0), ((2, 0, 20), 0), ((0, 3, 0, 5), 0), ((5, 4, 3, 2), 0),
    ((2, 3, 20), 1), ((-1, 5), 1),
])
def test_reshape(shape, allowzero):
    check("Reshape", {"x": X, "shape": i64(*shape)}, consts=["shape"], allowzero=allowzero)


def test_reshape_allowzero_keeps_zero_dims():
    x = np.zeros((0, 3, 4), dtype=np.float32)
    model = node_model("Reshape", {"x": x, "shape": i64(3, 4, 0)}, consts=["shape"], allowzero=1)
    g, _ = import_onnx(model, input_shapes={"x": (0, 3, 4)})  # a 0 dim reads as unknown unless pinned
    (out,) = interp.run(g, [x]).values()
    assert out.shape == (3, 4, 0)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, 4, -1, -2, -4])
def test_flatten(axis):
    check("Flatten", {"x": X}, axis=axis)


@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 5), None), ((1, 3, 1, 5), [0]), ((1, 3, 1, 5), [-2, 0]),
                                        ((2, 1), [1])])
def test_squeeze_axes_input(shape, axes):
    x = RNG.standard_normal(shape).astype(np.float32)
    ins = {"x": x} if axes is None else {"x": x, "axes": i64(*axes)}
    check("Squeeze", ins, consts=["axes"], opset=13)


def test_squeeze_axes_attribute():
    x = RNG.standard_normal((1, 3, 1, 5)).astype(np.float32)
    check("Squeeze", {"x": x}, opset=11, axes=[2, -4])


@pytest.mark.parametrize("axes", [[0], [4], [-1], [1, 3], [5, 0, 2]])
def test_unsqueeze(axes):
    check("Unsqueeze", {"x": X, "axes": i64(*axes)}, consts=["axes"], opset=13)
    check("Unsqueeze", {"x": X}, opset=11, axes=axes)


@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 4), (1, 3, 1)),
                                          ((4,), (2, 1, 4)), ((3, 4), (3, 4))])
def test_expand(xshape, shape):
    x = RNG.standard_normal(xshape).astype(np.float32)
    check("Expand", {"x": x, "shape": i64(*shape)}, consts=["shape"])


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"),
                                     ("SpaceToDepth", None)])
@pytest.mark.parametrize("bs", [2, 3])
def test_block_rearrangement_is_one_view(op, mode, bs):
    shape = (2, 2 * bs * bs, 3, 2) if op == "DepthToSpace" else (2, 3, 2 * bs, 3 * bs)
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = {"blocksize": bs} | ({"mode": mode} if mode else {})
    check(op, {"x": x}, **attrs)
    assert prim_ops(node_model(op, {"x": x}, **attrs)) == [Op.VIEW]

