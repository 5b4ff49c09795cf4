"""Runtime gathers (Op.GATHER) in generated C kernels: fused with the elementwise, reduce and
layout prims around them, checked against the interpreter on negative and boundary indices,
int32 and int64; out-of-range indices read the clamped row (Note [gather bounds])."""

import numpy as np
import pytest

from cg_util import THREADS, build_cases, check, layer_norm, softmax
from kernorch import codegen
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op

RNG = np.random.default_rng(5)
VOCAB, SEQ, D = 50, 16, 32


def take(b, data, idx, axis):
    m, maps = layout.gather_take(b.shape(data), axis, b.shape(idx))
    return b.gather(data, [idx], m, [axis], maps)


def embed_pos_norm(b, itype="int64"):
    """GPT-2's first kernel: token embedding + position embedding, then layer norm."""
    wte = b.constant(RNG.standard_normal((VOCAB, D)).astype(np.float32))
    wpe = b.constant(RNG.standard_normal((1, SEQ, D)).astype(np.float32))
    ids = b.input((1, SEQ), itype)
    return layer_norm(b, b.binary(Op.ADD, take(b, wte, ids, 0), wpe))


CASES = {
    "embed_pos_norm_int64": lambda b: embed_pos_norm(b, "int64"),
    "embed_pos_norm_int32": lambda b: embed_pos_norm(b, "int32"),
    # a middle axis, 2-d indices, the data a transposed view, then exp
    "take_middle_axis": lambda b: b.unary(
        Op.EXP, take(b, b.permute(b.input((6, 5, 4)), [2, 0, 1]), b.input((3, 2), "int32"), 1)),
    # a gather feeding a reduction (sum of gathered rows)
    "take_then_sum": lambda b: b.reduce(Op.SUM, take(b, b.input((VOCAB, D)), b.input((2, 8), "int64"), 0), [2]),
    "gather_elements": lambda b: b.binary(
        Op.MUL, b.gather(b.input((4, 7)), [b.input((4, 3), "int64")], *_ge((4, 7), 1, (4, 3))), b.scalar(2.0)),
    "gather_nd": lambda b: b.gather(b.input((3, 4, 5)), [b.input((6, 2), "int64")] * 2, *_nd((3, 4, 5), (6, 2), 0)),
    # rows of a softmax computed in the same kernel: the gather reads reduced values at runtime rows
    "softmax_then_take": lambda b: take(b, softmax(b, b.input((12, 40)), -1), b.input((5,), "int64"), 0),
    # elementwise index arithmetic inside the kernel: position ids = ids + 1
    "computed_indices": lambda b: take(b, b.input((VOCAB, 8)),
                                       b.binary(Op.ADD, b.input((2, 5), "int64"), b.scalar(1, "int64")), 0),
}


def _ge(shape, axis, ishape):
    m, maps = layout.gather_elements(shape, axis, ishape)
    return m, [axis], maps


def _nd(shape, ishape, batch):
    m, maps = layout.gather_nd(shape, ishape, batch)
    return m, list(range(batch, batch + ishape[-1])), maps


GROUPS = {"embed_pos_norm_int64": 1, "embed_pos_norm_int32": 1}


@pytest.fixture(scope="module")
def built():
    return build_cases(CASES)


def in_range_feeds(g, low_margin: int = 0, high_margin: int = 0):
    """Random feeds whose integer inputs are valid indices for every gather reading them (both
    ends of the range included: -n and n - 1)."""
    limit = {}
    for p in g.prims:
        if p.op is Op.GATHER:
            for v, ax in zip(p.inputs[1:], p.attrs.axes):
                n = p.attrs.data.in_shape[ax]
                limit[v] = min(limit.get(v, n), n)
    consumers = {v: p for p in g.prims for v in p.inputs}
    fed = []
    for v in g.inputs:
        t = g.types[v]
        if t.dtype.startswith("int"):
            n = limit.get(v) or limit.get(consumers[v].output, 2) - 1  # computed_indices adds 1
            a = RNG.integers(-n, n, size=t.shape)
            a.reshape(-1)[0], a.reshape(-1)[-1] = -n, n - 1
            fed.append(a.astype(t.dtype))
        else:
            fed.append(RNG.standard_normal(t.shape).astype(t.dtype))
    return fed


@pytest.mark.parametrize("name", list(CASES))
def test_gather_kernels_match_interpreter(name, built):
    g, members, outputs, kernel = built[name]
    for seed in range(3):
        check(kernel, g, outputs, rtol=2e-5, atol=2e-5, fed=in_range_feeds(g))


@pytest.mark.parametrize("name", list(GROUPS))
def test_embedding_position_norm_is_one_kernel(name, built):
    kernel = built[name][3]
    assert len(kernel.spec.body) == GROUPS[name], kernel.spec.notes
    src = kernel.source
    assert "INT64_C(49)" in src  # the clamp to the last row


def test_out_of_range_indices_are_clamped_in_generated_code():
    b = Builder()
    data = b.input((5, 3))
    ids = b.input((4,), "int64")
    g_out = take(b, data, ids, 0)
    b.g.outputs = [g_out]
    g = b.g
    kernel = codegen.build_kernel(g, {p.output for p in g.prims}, [g_out], num_threads=THREADS)
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([7, -9, 4, -5], np.int64)
    got = kernel.run([x, idx])[0].numpy()
    np.testing.assert_array_equal(got, x[[4, 0, 4, 0]])  # wrap once, then clamp to [0, n-1]
