"""oracle.verify end to end (mutation testing found these paths unguarded): a kernel may write a
value its own members also read, may take a scalar constant the subgraph kept as an immediate, and
sees the same data whether or not the caller computed the reference once for several kernels.
Oracle: NumPy on the feeds the kernel was handed."""

from __future__ import annotations

import numpy as np

from kernorch.ir import oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op


def _graph():
    """y = -exp(x) * 2 (2 a rank-0 constant), graph output y only."""
    b = Builder()
    x = b.input((3, 4))
    s = b.constant(np.array(2.0, np.float32))
    e = b.unary(Op.EXP, x)
    n = b.unary(Op.NEG, e)
    y = b.binary(Op.MUL, n, s)
    b.g.outputs = [y]
    return b.g, x, s, e, n, y


def test_a_kernel_may_write_a_value_its_members_read():
    g, x, s, e, n, y = _graph()

    def run(xs, wrong=1.0):
        ex = np.exp(xs[0])
        return [ex * wrong, -ex * xs[1]]

    assert oracle.verify(run, [x, s], [e, y], g, {e, n, y}) == (True, 0.0, "ok")
    ok, _, detail = oracle.verify(lambda xs: run(xs, 1.01), [x, s], [e, y], g, {e, n, y})
    assert not ok and detail.startswith(f"output %{e}:")


def test_a_scalar_constant_input_gets_its_real_value():
    g, x, s, e, n, y = _graph()
    seen = []

    def run(xs):
        seen.append(xs)
        return [-np.exp(xs[0]) * xs[1]]

    assert oracle.verify(run, [x, s], [y], g, {e, n, y})[0]
    assert seen[0][1].shape == () and seen[0][1] == 2.0


def test_the_kernel_sees_the_same_data_with_or_without_a_shared_reference():
    g, x, s, e, n, y = _graph()
    seen = []

    def run(xs):
        seen.append([a.copy() for a in xs])
        return [-np.exp(xs[0]) * xs[1]]

    oracle.verify(run, [x, s], [y], g, {e, n, y})
    oracle.verify(run, [x, s], [y], g, {e, n, y})
    shared = oracle.reference(g, g.subgraph({e, n, y}, [y]))  # what the measurer computes once
    oracle.verify(run, [x, s], [y], g, {e, n, y}, shared)
    assert all(np.array_equal(a, b) for other in seen[1:] for a, b in zip(seen[0], other))
    assert np.array_equal(seen[0][0], oracle.random_feeds(g, [x])[x])  # seeded: the same every run


def test_unsigned_gather_indices_start_at_zero():
    from kernorch.ir.graph import TensorType

    rng = np.random.default_rng(0)
    for limit, top in [(2, 2), (3, 3), (100, oracle.INT_HIGH)]:
        a = oracle.random_array(rng, TensorType((64, 64), "uint8"), limit)
        assert a.dtype == np.uint8 and a.min() == 0 and a.max() == top - 1  # valid indices, 0 included


def test_a_dtype_numpy_does_not_know_is_one_line():
    import pytest

    from kernorch.ir.graph import TensorType

    with pytest.raises(ValueError, match=r"^cannot make random values of dtype qint8$"):
        oracle.random_array(np.random.default_rng(0), TensorType((2,), "qint8"))


def test_a_fortran_ordered_constant_is_fed_in_c_order():
    """Kernels read raw data pointers: every feed is C-contiguous, whatever layout a constant has."""
    b = Builder()
    w = b.constant(np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    feed = oracle.random_feeds(b.g, [w])[w]
    assert feed.flags.c_contiguous and np.array_equal(feed, np.arange(6).reshape(2, 3))


def test_magnitude_of_integers_and_of_nothing_finite():
    assert oracle.magnitude(np.array([-128, 5], np.int8)) == 128.0  # no int8 wrap-around
    assert oracle.magnitude(np.array([np.nan, np.inf])) == 0.0
    allnan = np.full(4, np.nan, np.float32)
    assert oracle.compare(allnan.copy(), allnan)[:2] == (True, 0.0)


def test_compare_never_raises_and_reports_the_true_error():
    big = np.array([1e308, 0.0])
    with np.errstate(all="raise"):  # a caller's strict floating-point mode: still no exception
        ok, err, detail = oracle.compare(-big, big)
    assert not ok and err == np.inf and ">" in detail
    ok, err, detail = oracle.compare(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]))
    assert not ok and err == np.inf
    assert detail == "max abs error inf: an infinity of the reference differs (sign or value)"
    ok, err, _ = oracle.compare(np.array([0.5, 2.0]), np.array([0, 2]))  # an integer reference: exact
    assert not ok and err == 0.5


def test_tensors_that_require_grad_are_read():
    import torch

    t = torch.ones(3, requires_grad=True) * 2  # np.asarray alone refuses such a tensor
    assert np.array_equal(oracle.to_numpy(t), [2.0, 2.0, 2.0])
    assert oracle.check([1], [t], {1: np.full(3, 2.0, np.float32)})[0]


def test_kernel_inputs_in_their_own_order_and_the_detail_of_a_pass():
    b = Builder()
    x1, x2 = b.input((5,)), b.input((5,))
    y = b.binary(Op.SUB, x1, x2)
    b.g.outputs = [y]
    # the kernel lists its inputs in another order than the subgraph: each still gets its own data
    assert oracle.verify(lambda xs: [xs[1] - xs[0]], [x2, x1], [y], b.g, {y}) == (True, 0.0, "ok")
    assert oracle.compare(np.ones(3), np.ones(3))[2] == "max abs error 0 <= tolerance 1e-09"  # float64


def test_the_seed_chooses_the_data():
    g, x, s, e, n, y = _graph()
    seen = []

    def run(xs):
        seen.append(xs[0].copy())
        return [-np.exp(xs[0]) * xs[1]]

    assert oracle.verify(run, [x, s], [y], g, {e, n, y}, seed=5)[0]
    assert np.array_equal(seen[0], oracle.random_feeds(g, [x], seed=5)[x])
