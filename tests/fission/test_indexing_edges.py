"""Indexing helpers checked exhaustively on small sizes (mutation testing, issue 44): Slice's
clamping against Python's own slices, every pad mode's map against np.pad, the range check of
constant indices at its bounds (and on no indices at all), int32 and int64 runtime indices."""

import itertools
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check, node_model, run_ort
from kernorch.errors import UnsupportedOpError
from kernorch.fission.rules.indexing import _pad_map, clamp_slice
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp, layout

RNG = np.random.default_rng(49)


def test_clamp_slice_matches_python_slices():
    """ONNX clamps start to [0, n] (or [0, n-1] stepping back) and end to [0, n] (or [-1, n-1]),
    after adding n to negative values: what Python's slice does, except that stepping back from a
    start below -n starts at 0 (Python's slice is empty then; onnxruntime agrees with ONNX)."""
    for n in range(6):
        for start, end in itertools.product(range(-n - 3, n + 4), repeat=2):
            for step in (-3, -2, -1, 1, 2, 3):
                want = list(range(n))[max(start, -n) if step < 0 else start:end:step]
                first, length = clamp_slice(start, end, step, n)
                assert length == len(want), (start, end, step, n)
                if want:
                    assert first == want[0], (start, end, step, n)


def test_clamp_slice_refuses_step_0():
    with pytest.raises(ValueError, match="^slice step 0$"):
        clamp_slice(0, 1, 0, 4)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_map_matches_np_pad(mode):
    """Every pad of 0..7 on each side of axes of 1..4 (reflect and wrap past one period too)."""
    for n in range(1, 5):
        x = np.arange(10, 10 + 2 * n, dtype=np.float32).reshape(2, n)
        for b, e in itertools.product(range(8), repeat=2):
            if mode == "reflect" and n == 1 and (b or e):
                continue  # np.pad reflects a single element as itself; checked below
            got = _pad_map((2, n), [0, b], [1, e], mode, -1.5).gather(x)
            kw = {"constant_values": -1.5} if mode == "constant" else {}
            want = np.pad(x, [(0, 1), (b, e)], mode=mode, **kw)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} n={n} pads=({b}, {e})")


def test_reflect_within_one_period_is_the_plain_pad_map():
    """Pads up to n - 1 reflect once: layout.pad's map (min/max folds), not the general modulo one."""
    for n in range(2, 5):
        for b, e in itertools.product(range(n), repeat=2):
            plain = layout.pad((2, n), [0, b], [1, e], "reflect", 0.0)
            assert _pad_map((2, n), [0, b], [1, e], "reflect", 0.0) == plain


def test_reflect_of_a_single_element_repeats_it():
    x = np.asarray([[4.0], [7.0]], np.float32)
    got = _pad_map((2, 1), [0, 3], [0, 2], "reflect", 0.0).gather(x)
    np.testing.assert_array_equal(got, np.repeat(x, 6, axis=1))


def test_pad_map_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="^pad mode 'mirror'$"):
        _pad_map((2, 3), [0, 1], [0, 1], "mirror", 0.0)


def _refused(op, ins, consts, message, **attrs):
    model = node_model(op, ins, consts=consts, **attrs)
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(f'{op} node {chr(39) * 2}: {message}')}$"):
        import_onnx(model)


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_constant_indices_at_the_bounds_pass_and_one_past_is_refused(op):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    ok = np.asarray([[-4, 3, 0], [3, -4, -1]], np.int64)
    check(op, {"x": x, "i": ok}, consts=["i"])
    for bad in (-5, 4):
        _refused(op, {"x": x, "i": np.asarray([[0, bad, 1], [2, 0, 0]], np.int64)}, ["i"],
                 "indices out of range [-4, 4) on axis 0")


def test_gather_nd_constant_indices_are_checked_per_indexed_axis():
    x = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    check("GatherND", {"x": x, "i": np.asarray([[-2, 4], [1, -5]], np.int64)}, consts=["i"])
    _refused("GatherND", {"x": x, "i": np.asarray([[0, 5], [1, 0]], np.int64)}, ["i"],
             "indices out of range [-5, 5) on axis 1")
    _refused("GatherND", {"x": x, "i": np.asarray([[0, 1], [-3, 0]], np.int64)}, ["i"],
             "indices out of range [-2, 2) on axis 0")


def test_no_constant_indices_gather_nothing():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    (out,) = check("Gather", {"x": x, "i": np.zeros((0,), np.int64)}, consts=["i"], axis=1)
    assert out.shape == (4, 0)


@pytest.mark.parametrize("op,idx,itype", [
    (op, idx, itype) for op, idx in [("Gather", [[2, -1], [0, 1]]), ("GatherElements", [[1, 0, 3], [-4, 2, 2]]),
                                     ("GatherND", [[1], [3]]), ("ScatterElements", [[1, 0, 3], [-4, 2, 2]])]
    for itype in (np.int32, np.int64) if not (op == "GatherND" and itype == np.int32)])  # GatherND: int64 only
def test_runtime_indices_of_either_integer_type(op, idx, itype):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    ins = {"x": x, "i": np.asarray(idx, itype)}
    if op.startswith("Scatter"):  # kept whole (opaque), so not through check()
        ins["u"] = np.ones((2, 3), np.float32)
        model = node_model(op, ins)
        g, _ = import_onnx(model)
        (got,) = interp.run(g, list(ins.values())).values()
        np.testing.assert_array_equal(got, run_ort(model, ins)[0])
    else:
        check(op, ins)


def test_runtime_indices_of_another_dtype_are_refused():
    """(Built by hand: ONNX's type constraints refuse float indices before kernorch sees them.)"""
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
           helper.make_tensor_value_info("i", TensorProto.FLOAT, [2])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph([node], "g", ins, [out]), opset_imports=[helper.make_opsetid("", 13)])
    message = "Gather node '': indices (input 1) have dtype float32; ONNX allows int32 and int64"
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(message)}$"):
        import_onnx(model)
