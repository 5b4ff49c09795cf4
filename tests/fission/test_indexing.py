"""Indexing operators (Concat, Split, Slice, Pad, Tile, Gather) against onnxruntime, per
attribute variant; every output is one view or concat prim."""

import numpy as np
import pytest

from onnx_oracle import check, node_model, run_reference
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

RNG = np.random.default_rng(12)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


def only_views(model) -> bool:
    g, _ = import_onnx(model)
    return all(p.op in (Op.VIEW, Op.CONCAT) for p in g.prims)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concat(axis):
    shapes = [list(X.shape) for _ in range(3)]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    ins = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check("Concat", ins, axis=axis)


@pytest.mark.parametrize("axis,split,n", [(0, None, 3), (2, [1, 4], 2), (1, [2, 0, 2], 3), (-1, [3, 1, 1], 3)])
def test_split_sizes_input(axis, split, n):
    ins = {"x": X} if split is None else {"x": X, "split": i64(*split)}
    check("Split", ins, n_outputs=n, consts=["split"], opset=13, axis=axis)


def test_split_attribute_opset11():
    check("Split", {"x": X}, n_outputs=2, opset=11, axis=2, split=[2, 3])


@pytest.mark.parametrize("n_out", [2, 3, 4])
def test_split_num_outputs_uneven(n_out):
    x = RNG.standard_normal((7, 2)).astype(np.float32)
    check("Split", {"x": x}, n_outputs=n_out, opset=18, axis=0, num_outputs=n_out)


SLICES = [
    ([0], [2], [0], None),
    ([1, -4], [100, -1], [0, 1], None),              # clamping, negative index
    ([-1], [-1000], [2], [-1]),                       # full reverse
    ([4, 2], [0, -100], [-1, 0], [-2, -1]),           # negative steps on two axes
    ([0, 1, 0], [3, 4, 5], [0, 1, 2], [2, 2, 3]),     # positive steps
    ([10], [20], [1], None),                          # start past the end: empty
    ([2], [1], [2], None),                            # start after end: empty
    ([0], [-1], [-1], [1]),                           # negative axis
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    ins = {"x": X, "starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes)}
    if steps is not None:
        ins["steps"] = i64(*steps)
    check("Slice", ins, consts=["starts", "ends", "axes", "steps"], opset=13)


def test_slice_default_axes():
    check("Slice", {"x": X, "starts": i64(1, 1), "ends": i64(3, 3)}, consts=["starts", "ends"], opset=13)


def test_slice_opset1_attributes():
    check("Slice", {"x": X}, opset=9, starts=[1, 0], ends=[3, -1], axes=[0, 2])


PADS = [
    ("constant", [1, 0, 2, 0, 3, 1], 0.0),
    ("constant", [0, 2, 0, 1, 0, 0], -2.5),
    ("constant", [-1, 1, 0, 0, -2, 1], 1.0),           # negative pads crop
    ("reflect", [1, 2, 3, 2, 1, 4]),
    ("reflect", [0, 0, 4, 0, 3, 4]),                    # pads of n - 1
    ("edge", [2, 1, 0, 3, 1, 2]),
    ("wrap", [1, 2, 3, 2, 1, 4]),
    ("wrap", [0, 5, 6, 0, 0, 0]),                       # more than one period
]


@pytest.mark.parametrize("case", PADS, ids=str)
def test_pad(case):
    mode, pads = case[0], case[1]
    ins = {"x": X, "pads": i64(*pads)}
    if len(case) > 2:
        ins["value"] = np.array(case[2], dtype=np.float32)
    check("Pad", ins, consts=["pads", "value"], opset=19, mode=mode)


def test_pad_reflect_beyond_one_period():
    """onnxruntime refuses pads >= n for reflect; the reference (np.pad) keeps reflecting."""
    ins = {"x": X, "pads": i64(0, 5, 9, 0, 7, 6)}
    check("Pad", ins, consts=["pads"], opset=19, mode="reflect", oracle=run_reference)


def test_pad_axes_input():
    ins = {"x": X, "pads": i64(1, 2, 3, 0), "value": np.array(4.0, np.float32), "axes": i64(-1, 0)}
    check("Pad", ins, consts=["pads", "value", "axes"], opset=18, mode="constant")


def test_pad_opset2_attributes():
    check("Pad", {"x": X}, opset=2, mode="constant", pads=[0, 1, 2, 1, 0, 0], value=3.0)
    check("Pad", {"x": X}, opset=2, mode="reflect", pads=[1, 1, 2, 1, 0, 2])


def test_pad_int_edge():
    x = RNG.integers(-9, 9, (4, 3)).astype(np.int64)
    check("Pad", {"x": x, "pads": i64(1, 2, 2, 1)}, consts=["pads"], opset=13, mode="edge")


@pytest.mark.parametrize("reps", [(1, 1, 1), (2, 1, 3), (1, 3, 1), (2, 2, 2)])
def test_tile(reps):
    check("Tile", {"x": X, "r": i64(*reps)}, consts=["r"])


@pytest.mark.parametrize("axis,indices", [
    (0, [2, 0]), (1, [[3, 0], [-1, 1]]), (2, 3), (-1, [-5, 4, 0, 0]), (1, np.zeros((0,), np.int64)),
    (0, [0, 1, 2]), (2, [0, 2, 4]),                     # arithmetic progressions: affine maps
])
def test_gather_constant_indices(axis, indices):
    idx = np.array(indices, dtype=np.int64)
    model = node_model("Gather", {"x": X, "i": idx}, consts=["i"], axis=axis)
    assert only_views(model)
    check("Gather", {"x": X, "i": idx}, consts=["i"], axis=axis)


def test_gather_progression_needs_no_table():
    model = node_model("Gather", {"x": X, "i": i64(0, 2, 4)}, consts=["i"], axis=2)
    g, _ = import_onnx(model)
    (p,) = g.prims
    assert "T" not in repr(p.attrs.map.index)


@pytest.mark.parametrize("shape,axes", [((2, 4, 7), None), ((5, 2, 3), None), ((3, 6), [1, 2]), ((2, 9), [-1, 0])])
def test_center_crop_pad(shape, axes):
    """onnxruntime has no CPU kernel for it: the ONNX reference is the oracle."""
    attrs = {} if axes is None else {"axes": axes}
    check("CenterCropPad", {"x": X, "s": i64(*shape)}, consts=["s"], oracle=run_reference, **attrs)
