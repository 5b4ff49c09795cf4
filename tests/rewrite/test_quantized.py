"""rewrite/quantized.py against the reference interpreter: a QDQ model's convolutions and matmuls
multiply the integers themselves (the scales move after them) and compute what the QDQ model
computes, up to float32 rounding (one quantization step where a value sits on a rounding boundary)."""

import numpy as np
import pytest

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp, layout, oracle
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.rewrite.pipeline import apply_rewrites
from kernorch.rewrite.quantized import integer_linear, integer_max_pools, split_dequantized
from kernorch.ir.tensors import holds_int8
from tests.frontend.qdq_nets import NETS, qdq_model


@pytest.mark.parametrize("name,linear", [("convnet", 4), ("block", 4)])
def test_quantized_linear_prims_multiply_integers(name, linear):
    g, _ = import_onnx(qdq_model(name))
    out, n = integer_linear(g)
    assert n == linear
    for p in out.prims:
        if p.op in (Op.CONV, Op.MATMUL) and p.inputs[1] in out.constants:
            w = out.constants[p.inputs[1]]
            assert np.array_equal(w, np.round(w)) and np.abs(w).max() <= 127
    for seed in range(3):
        feeds = oracle.random_feeds(g, seed=seed)
        want, got = interp.run(g, feeds), interp.run(out, feeds)
        for v in g.outputs:
            step = np.abs(np.diff(np.unique(want[v]))).min()  # the output's quantization step
            assert np.abs(got[v] - want[v]).max() <= step * 1.01


def _dequantized_conv(scale: np.ndarray):
    g = Graph()
    b = Builder(g)
    x = b.input((1, 4, 6, 6))
    q = b.constant(np.random.default_rng(0).integers(-127, 128, (8, 4, 3, 3)).astype(np.int8))
    w = b.binary(Op.MUL, b.cast(q, "float32"), b.constant(scale))
    g.outputs = [b.conv(x, w, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))]
    return g


def test_a_scale_varying_along_input_channels_is_left_alone():
    per_input = np.linspace(0.01, 0.02, 4, dtype=np.float32).reshape(1, 4, 1, 1)
    assert integer_linear(_dequantized_conv(per_input))[1] == 0
    per_output = np.linspace(0.01, 0.02, 8, dtype=np.float32).reshape(8, 1, 1, 1)
    g = _dequantized_conv(per_output)
    out, n = integer_linear(g)
    assert n == 1
    feeds = oracle.random_feeds(g, seed=0)
    np.testing.assert_allclose(interp.run(out, feeds)[g.outputs[0]], interp.run(g, feeds)[g.outputs[0]], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name,shared", [("convnet", 1), ("block", 2)])
def test_each_integer_linear_prim_gets_a_dequantization_of_its_own(name, shared):
    """The residual's dequantized input is shared with a convolution / matmul in the QDQ model (and
    after cse); split, each integer linear prim reads a cast [- zero point] nothing else reads, and
    the graph computes exactly what it computed."""
    g, _ = apply_rewrites(integer_linear(import_onnx(qdq_model(name))[0])[0])
    out, n = split_dequantized(g)
    assert n == shared
    made, readers = out.producers(), out.consumers()
    for p in out.prims:
        if p.op in (Op.CONV, Op.MATMUL) and p.inputs[1] in out.constants and holds_int8(out.constants[p.inputs[1]]):
            q = made[p.inputs[0]]
            chain = [q] + ([made[q.inputs[0]]] if q.op is Op.SUB else [])
            assert chain[-1].op is Op.CAST and out.types[chain[-1].inputs[0]].dtype == "uint8"
            assert all(len(readers[c.output]) == 1 for c in chain)
    assert split_dequantized(out)[1] == 0
    feeds = oracle.random_feeds(g, seed=0)
    want, got = interp.run(g, feeds), interp.run(out, feeds)
    for v in g.outputs:
        np.testing.assert_array_equal(got[v], want[v])


def test_max_pooling_of_a_dequantized_tensor_pools_the_integers():
    """ConvNet's max pooling reads a dequantized int8 convolution: it pools the uint8 values (the
    padding their lowest value) and the graph computes exactly what it computed."""
    g, _ = apply_rewrites(integer_linear(import_onnx(qdq_model("convnet"))[0])[0])
    out, n = integer_max_pools(g)
    assert n == 1
    pools = [p for p in out.prims if p.op is Op.RMAX]
    assert [out.types[p.output].dtype for p in pools] == ["uint8"]
    assert integer_max_pools(out)[1] == 0
    for seed in range(3):
        feeds = oracle.random_feeds(g, seed=seed)
        want, got = interp.run(g, feeds), interp.run(out, feeds)
        for v in g.outputs:
            np.testing.assert_array_equal(got[v], want[v])


def test_padding_never_wins_a_window():
    """A padded 3x3 pooling over a dequantized tensor whose values are all at the integers' lowest
    (every real element equals the padding's dequantized value) and one with a negative zero point."""
    for zx, fill in ((0, 0), (17, 3)):
        g = Graph()
        b = Builder(g)
        xq = b.input((1, 2, 5, 5), "uint8")
        d = b.binary(Op.SUB, b.cast(xq, "float32"), b.scalar(float(zx)))
        d = b.binary(Op.MUL, d, b.scalar(0.5))
        m = layout.window((1, 2, 5, 5), (3, 3), (2, 2), (1, 1), (1, 1), (3, 3), -np.inf)
        g.outputs = [b.reduce(Op.RMAX, b.view(d, m), (4, 5), keepdims=False)]
        out, n = integer_max_pools(g)
        assert n == 1
        feeds = {g.inputs[0]: np.full((1, 2, 5, 5), fill, np.uint8)}
        feeds2 = oracle.random_feeds(g, seed=1)
        for f in (feeds, feeds2):
            np.testing.assert_array_equal(interp.run(out, f)[g.outputs[0]], interp.run(g, f)[g.outputs[0]])
