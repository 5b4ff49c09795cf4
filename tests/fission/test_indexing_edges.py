"""Indexing helpers checked exhaustively on small sizes (mutation testing, issue 44): Slice's
clamping against Python's own slices, every pad mode's map against np.pad, the range check of
constant indices at its bounds (and on no indices at all), int32 and int64 runtime indices."""

import itertools
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_oracle import check, node_model, run_ort, run_reference
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


# -- the rule bodies (mutation testing with the @rule bodies mutated) ----------------------------

def _bare(op, inputs, inits=None, opset=18, **attrs):
    """A node built by hand, no shape inference: ONNX refuses these nodes before kernorch sees them.
    ``inputs`` are (name, elem_type, shape), ``inits`` initializers by name."""
    inits = inits or {}
    names = [n for n, _, _ in inputs] + list(inits)
    node = helper.make_node(op, names, ["y"], **attrs)
    g_in = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    out = helper.make_tensor_value_info("y", inputs[0][1], inputs[0][2])
    graph = helper.make_graph([node], "g", g_in, [out], [numpy_helper.from_array(v, n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


F, I = TensorProto.FLOAT, TensorProto.INT64
X3 = ("x", F, [2, 5, 3])


@pytest.mark.parametrize("model,message", [
    (_bare("Tile", [X3, ("r", I, [3])]), "Tile node '': repeats (input 1) must be a constant"),
    (_bare("Tile", [X3], {"r": np.asarray([2, 1], np.int64)}), "Tile node '': 2 repeats for rank 3"),
    (_bare("CenterCropPad", [X3, ("s", I, [3])]), "CenterCropPad node '': shape (input 1) must be a constant"),
    (_bare("CenterCropPad", [X3], {"s": np.asarray([4], np.int64)}, axes=[3]),
     "CenterCropPad node '': axis 3 is out of range for rank 3"),
    (_bare("GatherND", [X3, ("i", I, [])]), "GatherND node '': indices shape () does not index data (2, 5, 3) "
                                            "with batch_dims=0"),
    (_bare("GatherND", [X3], {"i": np.zeros((1, 2, 0), np.int64)}),
     "GatherND node '': indices shape (1, 2, 0) does not index data (2, 5, 3) with batch_dims=0"),
    (_bare("GatherND", [X3, ("i", I, [2, 1, 4])]), "GatherND node '': indices shape (2, 1, 4) does not index data "
                                                   "(2, 5, 3) with batch_dims=0"),
    (_bare("GatherND", [X3, ("i", I, [3, 1])], batch_dims=1),
     "GatherND node '': indices shape (3, 1) does not index data (2, 5, 3) with batch_dims=1"),
    (_bare("ScatterElements", [X3, ("i", I, [1, 5, 3]), ("u", TensorProto.DOUBLE, [1, 5, 3])]),
     "ScatterElements node '': updates dtype float64 differs from data float32"),
])
def test_rule_refusals_are_one_exact_line(model, message):
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(message)}$"):
        import_onnx(model)


@pytest.mark.parametrize("target", [(5, 2), (2, 7), (6, 1)], ids=str)
def test_center_crop_pad_by_an_odd_amount_puts_the_odd_element_at_the_end(target):
    """3 rows padded (1 before, 2 after), 3 columns cropped (1 before, 2 after) and so on."""
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    check("CenterCropPad", {"x": x, "s": np.asarray(target, np.int64)}, consts=["s"], oracle=run_reference)


def test_gather_nd_with_indices_of_rank_3_reads_tuples_of_the_last_dim():
    """Indices (2, 3, 1): one index per tuple (q[-1], not q[1]), nine rows of 3 values each."""
    x = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    check("GatherND", {"x": x, "i": np.asarray([[[1], [0], [-1]], [[0], [1], [1]]], np.int64)})


def _not_const(op, name):
    """Slice (inputs s, e, a, t) or Pad (p, v, a; v alone without a) of x (2, 5, 3), input ``name`` a graph
    input, the others constants."""
    consts = {"Slice": {"s": [0], "e": [1], "a": [0], "t": [1]}, "Pad": {"p": [0, 1], "v": [0.0], "a": [1]}}[op]
    inits = {n: np.asarray(v, np.float32 if n == "v" else np.int64) for n, v in consts.items() if n != name}
    if (op, name) == ("Pad", "v"):  # without the axes input
        del consts["a"]
    node = helper.make_node(op, ["x", *consts], ["y"])
    g_in = [helper.make_tensor_value_info("x", F, [2, 5, 3]),
            helper.make_tensor_value_info(name, F if name == "v" else I, [len(consts[name])])]
    graph = helper.make_graph([node], "g", g_in, [helper.make_tensor_value_info("y", F, [2, 5, 3])],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op,name,what,index", [
    ("Slice", "s", "starts", 1), ("Slice", "e", "ends", 2), ("Slice", "a", "axes", 3), ("Slice", "t", "steps", 4),
    ("Pad", "p", "pads", 1), ("Pad", "v", "constant_value", 2), ("Pad", "a", "axes", 3)])
def test_inputs_that_must_be_constants_are_named(op, name, what, index):
    model = _not_const(op, name)
    message = f"{op} node '': {what} (input {index}) must be a constant"
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(message)}$"):
        import_onnx(model)


def _c(*v, dtype=np.int64):
    return np.asarray(v, dtype)


@pytest.mark.parametrize("model,message", [
    (_bare("Concat", [X3, ("z", F, [2, 5, 3])], axis=3), "Concat node '': axis 3 is out of range for rank 3"),
    (_bare("Split", [X3], axis=-4), "Split node '': axis -4 is out of range for rank 3"),
    (_bare("Split", [X3, ("s", I, [2])]), "Split node '': split (input 1) must be a constant"),
    (_bare("Split", [X3], {"s": _c(1, 0)}), "Split node '': split sizes [1, 0] do not divide axis 0 of size 2 into "
                                            "1 outputs"),
    (_bare("Split", [X3], num_outputs=2), "Split node '': split sizes [1, 1] do not divide axis 0 of size 2 into "
                                          "1 outputs"),
    (_bare("Slice", [X3], {"s": _c(0), "e": _c(1), "a": _c(3)}), "Slice node '': axis 3 is out of range for rank 3"),
    (_bare("Pad", [X3], {"p": _c(0, 1), "v": _c(0.0, dtype=np.float32), "a": _c(3)}),
     "Pad node '': axis 3 is out of range for rank 3"),
    (_bare("Pad", [X3], {"p": _c(0, 1, 0, 1)}), "Pad node '': 4 pads for 3 axes"),
    (_bare("Pad", [X3], {"p": _c(0, 1, 0, 1, 0, 1)}, mode="mirror"), "Pad node '': unknown pad mode 'mirror'"),
    (_bare("Gather", [X3, ("i", I, [2])], axis=3), "Gather node '': axis 3 is out of range for rank 3"),
    (_bare("GatherElements", [X3, ("i", I, [2, 5, 3])], axis=-4),
     "GatherElements node '': axis -4 is out of range for rank 3"),
    (_bare("GatherElements", [X3, ("i", I, [2, 6, 3])]),
     "GatherElements node '': indices shape (2, 6, 3) does not fit data (2, 5, 3) on axis 0"),
    (_bare("Slice", [X3], {"s": _c(0), "e": _c(1), "a": _c(0), "t": _c(0)}), "Slice node '': slice step 0"),
    (_bare("Gather", [("x", F, [0, 3]), ("i", I, [2])]), "Gather node '': gather from the empty axis 0"),
    (_bare("GatherElements", [("x", F, [0, 3]), ("i", I, [1, 3])]),
     "GatherElements node '': gather from the empty axis 0"),
    (_bare("Pad", [("x", F, [0, 3])], {"p": _c(1, 0, 0, 0)}, mode="edge"),
     "Pad node '': edge padding of an empty axis"),
    (_bare("Pad", [("x", F, [0, 3])], {"p": _c(0, 0, 1, 0)}, mode="reflect"),
     "Pad node '': reflect padding of an empty axis"),
])
def test_more_rule_refusals(model, message):
    with pytest.raises(UnsupportedOpError, match=f"^{re.escape(message)}$"):
        import_onnx(model, input_shapes={"x": [0, 3]} if "empty" in message else None)


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_runtime_indices_into_an_axis_of_size_1(op):
    x = RNG.standard_normal((1, 3)).astype(np.float32)
    check(op, {"x": x, "i": np.zeros((2, 3), np.int64)})


def test_split_defaults_to_axis_0_and_a_short_last_part():
    """num_outputs 3 over 4 elements: parts of ceil(4/3) = 2, the last one empty (as onnxruntime)."""
    check("Split", {"x": RNG.standard_normal((4, 6)).astype(np.float32)}, n_outputs=2, opset=13)
    check("Split", {"x": RNG.standard_normal(4).astype(np.float32)}, n_outputs=3, opset=18, num_outputs=3)


def test_pad_defaults_constant_zero():
    x = RNG.standard_normal((2, 3)).astype(np.float32) + 5
    check("Pad", {"x": x, "p": _c(1, 0, 0, 2)}, consts=["p"])
    check("Pad", {"x": x}, opset=10, pads=[0, 1, 1, 0])


@pytest.mark.parametrize("mode", ["constant", "edge", "wrap"])
def test_padding_a_non_empty_axis_of_an_empty_tensor(mode):
    """The ONNX reference as the oracle: onnxruntime fails on the wrap case too ("Unexpected mode of 3")."""
    check("Pad", {"x": np.zeros((0, 3), np.float32), "p": _c(0, 1, 0, 2)}, consts=["p"], mode=mode,
          oracle=run_reference)


def test_constant_padding_of_an_empty_axis_is_accepted():
    model = node_model("Pad", {"x": np.zeros((0, 3), np.float32), "p": _c(1, 0, 2, 0), "v": _c(2.5, dtype=np.float32)},
                       consts=["p", "v"])
    g, _ = import_onnx(model, input_shapes={"x": [0, 3]})
    assert [g.types[v].shape for v in g.outputs] == [(3, 3)]


def test_constant_padding_of_an_empty_axis_runs():
    x = np.zeros((0, 3), np.float32)
    check("Pad", {"x": x, "p": _c(1, 0, 2, 0), "v": _c(2.5, dtype=np.float32)}, consts=["p", "v"])


def test_concat_before_opset_4_defaults_to_axis_1():
    """No oracle runs Concat-1 (onnxruntime from opset 4, the reference demands the axis): the operator's
    text (default axis 1) against NumPy."""
    a, z = RNG.standard_normal((2, 5, 3)).astype(np.float32), RNG.standard_normal((2, 1, 3)).astype(np.float32)
    node = helper.make_node("Concat", ["x", "z"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2, 5, 3]),
                                            helper.make_tensor_value_info("z", F, [2, 1, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 6, 3])])
    g, _ = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 3)]))
    (got,) = interp.run(g, [a, z]).values()
    np.testing.assert_array_equal(got, np.concatenate([a, z], axis=1))
