"""Reference-interpreter edges the rule tests do not reach (mutation testing, issue 44): integer
division and casts beyond float64's exact range, bfloat16 arithmetic carried in float32, an opaque
node onnx's reference cannot run (run natively instead), and the single-node models and sessions
behind opaque prims. Oracles: onnxruntime, or NumPy computing the documented rule directly."""

import warnings
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check, feeds_of, node_model, run_ort
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import ConvAttrs, Op

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_integer_division_is_exact_beyond_float64s_53_bits():
    """Truncation toward zero on int64 quotients that float64 division would round."""
    a = np.asarray([2**62 + 1, -(2**62 + 1), 2**53 + 1, -(2**53 + 3), 2**61 + 7, 7, -7, 0], np.int64)
    b = np.asarray([3, 3, 1, -1, -2, -2, 2, 5], np.int64)
    (out,) = check("Div", {"a": a, "b": b})
    assert out[0] == (2**62 + 1) // 3 and out[1] == -((2**62 + 1) // 3) and out[2] == 2**53 + 1


@pytest.mark.parametrize("src,dst,values", [
    ("int64", "int32", [2**40 + 7, -(2**40) - 9, 2**33 + 5, 2**53 + 1, -3]),  # wraps, no float detour
    ("int64", "int16", [2**40 + 7, 2**53 + 3, -(2**45) - 1]),
    ("float32", "int64", [3e9, -3e9, 2.0**40 + 2**17, -7.9, 7.9]),  # beyond int32, truncated
    ("float64", "int64", [2.0**52 + 0.5 * 2, -(2.0**50) - 0.75 * 4, 9.99, -9.99]),
])
def test_cast_of_values_beyond_int32(src, dst, values):
    x = np.asarray(values, src)
    (out,) = check("Cast", {"x": x}, to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
    assert out.dtype == np.dtype(dst)


def test_float_to_narrow_integer_truncates_then_wraps_through_int32():
    """The documented rule (``_cast``): toward zero, then modulo 2**bits (C's direct conversion of an
    out-of-range value is undefined, so the generated kernels convert the same way)."""
    x = np.asarray([200.7, 300.2, -200.5, -3.7, 70000.5, 2.9, -129.9, 255.99], np.float32)
    for dst in ("int8", "uint8", "int16", "uint16"):
        got = interp._cast(x, dst)
        bits = np.dtype(dst).itemsize * 8
        want = [(int(v) % 2**bits) - (2**bits if np.dtype(dst).kind == "i" and int(v) % 2**bits >= 2**(bits - 1)
                                      else 0) for v in x]
        assert got.dtype == np.dtype(dst) and got.tolist() == want, dst


def _bf16_graph(build, *shapes):
    b = Builder()
    ins = [b.input(s, "bfloat16") for s in shapes]
    out = build(b, *ins)
    b.g.outputs.append(out)
    return b.g


def test_bfloat16_reduction_and_matmul_accumulate_in_float32():
    """bf16 inputs are computed in float32 and rounded once to bf16: a long sum in bf16 itself would
    stop growing (8 significant bits) far below the float32 result."""
    x = np.full((1024,), 1 + 2**-7, BF16)
    g = _bf16_graph(lambda b, v: b.reduce(Op.SUM, v, [0], keepdims=False), (1024,))
    (got,) = interp.run(g, [x]).values()
    assert got.dtype == BF16 and float(got) == float(np.float32(1024 * (1 + 2**-7)).astype(BF16))
    a, w = np.full((2, 512), 1 + 2**-7, BF16), np.ones((512, 3), BF16)
    g = _bf16_graph(lambda b, u, v: b.matmul(u, v), (2, 512), (512, 3))
    (got,) = interp.run(g, [a, w]).values()
    want = (a.astype(np.float32) @ w.astype(np.float32)).astype(BF16)
    assert got.dtype == BF16 and np.array_equal(got.astype(np.float32), want.astype(np.float32))
    # float32, not float64: 256 + 1 + 2**-20 is 257 in float32, a tie that rounds to bf16's even
    # 256; float64 keeps the 2**-20 and rounds up to 258
    g = _bf16_graph(lambda b, v: b.reduce(Op.SUM, v, [0], keepdims=False), (3,))
    (got,) = interp.run(g, [np.asarray([256, 1, 2**-20], BF16)]).values()
    assert float(got) == 256.0


def test_ieee_results_come_without_numpy_warnings():
    """Division by zero, log of 0 and of negatives give inf/NaN silently (a caller may run with
    warnings as errors)."""
    b = Builder()
    x = b.input((4,), "float32")
    b.g.outputs += [b.binary(Op.DIV, b.scalar(1.0), x), b.unary(Op.LOG, x), b.unary(Op.SQRT, x)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, lg, sq = interp.run(b.g, [np.asarray([0.0, -1.0, 2.0, -0.0], np.float32)]).values()
    assert q.tolist() == [np.inf, -1.0, 0.5, -np.inf] and lg[0] == -np.inf and np.isnan(lg[1]) and np.isnan(sq[1])


def test_bfloat16_moves_stay_exact():
    x = (np.arange(12, dtype=np.float32) * 1.25 - 3).astype(BF16).reshape(3, 4)
    g = _bf16_graph(lambda b, v: b.concat([b.permute(v, (1, 0)), b.permute(v, (1, 0))], 1), (3, 4))
    (got,) = interp.run(g, [x]).values()
    want = np.concatenate([x.T, x.T], 1)
    assert got.dtype == BF16 and np.array_equal(got.astype(np.float32), want.astype(np.float32))


def test_an_opaque_node_without_a_reference_implementation_runs_natively():
    """Scatter-9 has no onnx.reference implementation: the interpreter runs it in onnxruntime, at the
    node's own opset (Scatter is gone from later opsets)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.asarray([[1, 0], [2, 3]], np.int64)
    u = np.asarray([[-5, -6], [-7, -8]], np.float32)
    model = node_model("Scatter", {"x": x, "i": i, "u": u}, opset=9, axis=1)
    g, report = import_onnx(model)
    assert report.opaque == {"Scatter": 1}
    (got,) = interp.run(g, [x, i, u]).values()
    (want,) = run_ort(model, feeds_of(model, {"x": x, "i": i, "u": u}))
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert want[0, 1] == -5 and want[1, 3] == -8


def test_single_node_model_types_inputs_and_only_the_first_output():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)
    types = [((2, 5), "float32"), ((1,), "int64")]
    m = interp.single_node_model(node, types, 11, "float16")
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 11)]
    assert [tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in m.graph.input] == [(2, 5), (1,)]
    assert [i.type.tensor_type.elem_type for i in m.graph.input] == [TensorProto.FLOAT, TensorProto.INT64]
    assert [o.type.tensor_type.elem_type for o in m.graph.output] == [TensorProto.FLOAT16, TensorProto.UNDEFINED]
    untyped = interp.single_node_model(node, types, 11)
    assert [o.type.tensor_type.elem_type for o in untyped.graph.output] == [TensorProto.UNDEFINED] * 2


@pytest.mark.parametrize("threads", [None, 1])
def test_node_session_runs_the_node_without_a_spinning_pool(threads):
    node = helper.make_node("Relu", ["x"], ["y"])
    s = interp.NodeSession(node, [((2, 5), "float32")], 14, "float32", threads=threads)
    opts = s.session.get_session_options()
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.intra_op_num_threads == (threads or 0)
    assert [(i.name, i.shape, i.type) for i in s.session.get_inputs()] == [("x", [2, 5], "tensor(float)")]
    assert [o.type for o in s.session.get_outputs()] == ["tensor(float)"]
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    assert np.array_equal(s.run([x]), np.maximum(x, 0))


def test_run_keeps_every_value_only_when_asked():
    """``keep``: every value (inputs, constants, each prim's result) by id; otherwise exactly the
    outputs, an input that is also an output included, whatever was freed on the way."""
    b = Builder()
    x = b.input((2, 3), "float32", name="x")
    one = b.scalar(1.0)
    a = b.binary(Op.ADD, x, one)
    y = b.binary(Op.MUL, a, a)  # a read twice by one prim, then no more
    z = b.binary(Op.SUB, y, x)
    b.g.outputs += [z, x, y]
    feed = np.arange(6, dtype=np.float64).reshape(2, 3)  # converted to the declared float32
    out = interp.run(b.g, {x: feed})
    assert list(out) == [z, x, y] and all(v.dtype == np.float32 for v in out.values())
    want_y = (feed + 1) ** 2
    assert np.array_equal(out[z], want_y - feed) and np.array_equal(out[y], want_y) and np.array_equal(out[x], feed)
    every = interp.run(b.g, [feed], keep=True)
    assert set(every) == {x, one, a, y, z} and np.array_equal(every[a], feed + 1) and every[one] == 1.0
    with pytest.raises(ValueError, match=r"^input x: shape \(3, 2\), expected \(2, 3\)$"):
        interp.run(b.g, [feed.T])


@pytest.mark.parametrize("transpose", [False, True])
def test_convolutions_hand_torch_writable_contiguous_copies(transpose):
    """Broadcast views are read-only and transposes not C-contiguous: torch warns on (once per
    process) or copies those, so ``_conv`` copies first; the result is NumPy's own brute force."""
    import torch

    rng = np.random.default_rng(50)
    x = np.broadcast_to(rng.standard_normal((1, 2, 1, 5)).astype(np.float32), (1, 2, 4, 5))
    w = np.asfortranarray(rng.standard_normal((2, 3, 3, 2) if transpose else (3, 2, 3, 2)).astype(np.float32))
    bias = np.broadcast_to(np.float32(0.5), (3,))
    seen = []
    real = torch.from_numpy

    def from_numpy(a):
        seen.append((a.flags.writeable, a.flags.c_contiguous))
        return real(a)

    attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
    with mock.patch.object(torch, "from_numpy", from_numpy):
        got = interp._conv(Op.CONV_TRANSPOSE if transpose else Op.CONV, [x, w, bias], attrs)
    assert seen == [(True, True)] * 3
    if not transpose:  # cross-correlation over every window
        want = np.stack([[[(x[0, :, i:i + 3, j:j + 2] * w[o]).sum() + 0.5 for j in range(4)] for i in range(2)]
                         for o in range(3)])[None]
    else:  # each input pixel scatters w[c, o] * x into the output
        want = np.full((1, 3, 6, 6), 0.5, np.float32)
        for c, i, j in np.ndindex(2, 4, 5):
            want[0, :, i:i + 3, j:j + 2] += x[0, c, i, j] * w[c]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("origin,what", [("", "gather prim"), ("Gather emb", "gather Gather emb")])
def test_an_index_out_of_range_names_the_gather(origin, what):
    b = Builder(origin=origin)
    x, i = b.input((3, 2)), b.input((2,), "int64")
    data_map, maps = layout.gather_take((3, 2), 0, (2,))
    b.g.outputs.append(b.gather(x, [i], data_map, [0], maps))
    with pytest.raises(layout.GatherIndexError, match=f"^{what}: index 3 is out of range \\[-3, 3\\) on data axis 0"):
        interp.run(b.g, [np.zeros((3, 2), np.float32), np.asarray([0, 3])])


def test_a_prim_that_breaks_its_declared_shape_is_an_assertion():
    b = Builder()
    x = b.input((2, 3))
    b.g.outputs.append(b.prim(Op.NEG, [x], out_type=TensorType((3, 2), "float32")))
    with pytest.raises(AssertionError, match=r"^neg produced shape \(2, 3\), declared \(3, 2\)$"):
        interp.run(b.g, [np.zeros((2, 3), np.float32)])


def test_run_frees_each_value_after_its_last_use():
    """A chain of 12 elementwise prims on 4 MB values peaks at a few values, not all 12 (constants
    and outputs stay)."""
    import tracemalloc

    b = Builder()
    v = x = b.input((1 << 20,))
    two = b.scalar(2.0)
    for _ in range(12):
        v = b.binary(Op.MUL, v, two)
    b.g.outputs.append(v)
    feed = np.ones(1 << 20, np.float32)
    tracemalloc.start()
    try:
        out = interp.run(b.g, {x: feed})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out[v][0] == 4096.0 and feed.nbytes * 2 <= peak < feed.nbytes * 4
