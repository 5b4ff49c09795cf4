"""The provider interface's defaults and ``verify``: a kernel is checked on the oracle's data, in
the subgraph's input and output order, and every way it can fail is a result with a one-line
reason. The kernel under test is a hand-written torch function; the oracle is NumPy."""

import math

import numpy as np
import pytest
import torch

from kernorch.errors import KernorchError
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.providers.base import (BuiltKernel, Provider, ProviderError, _one_line, default_threads, random_inputs,
                                     reason_or_none, verify)

C = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], dtype=np.float32)


def _graph():
    """y = x * c - x (two outputs: the product and the difference)."""
    b = Builder()
    x = b.input((2, 3))
    c = b.constant(C)
    m = b.binary(Op.MUL, x, c)
    d = b.binary(Op.SUB, m, x)
    b.g.outputs = [m, d]
    return b.g, x, c, [m, d]


def _kernel(g, members, outputs, log=None, off=0.0):
    sub = g.subgraph(members, outputs)

    def run(xs):
        if log is not None:
            log.append([t.clone() for t in xs])
        x, c = xs
        m = x * c
        return [m, m - x + off]

    return BuiltKernel("hand", list(sub.inputs), list(sub.outputs), run)


def test_a_correct_kernel_passes_on_the_data_of_its_seed():
    g, x, c, members = _graph()
    log = []
    ok, err, detail = verify(_kernel(g, members, members, log), g, members, members, seed=5)
    assert (ok, detail) == (True, "ok") and err < 1e-5
    (xs,) = log
    want = random_inputs(g, g.subgraph(members, members), 5)
    np.testing.assert_array_equal(xs[0].numpy(), want[x])
    np.testing.assert_array_equal(xs[1].numpy(), C)  # a tensor constant: its real data
    other = random_inputs(g, g.subgraph(members, members), 0)
    assert not np.array_equal(want[x], other[x]), "the seed chooses the data"
    log.clear()
    verify(_kernel(g, members, members, log), g, members, members)  # default seed 0
    np.testing.assert_array_equal(log[0][0].numpy(), other[x])


def test_a_wrong_output_is_named_with_its_error():
    g, x, c, members = _graph()
    ok, err, detail = verify(_kernel(g, members, members, off=0.25), g, members, members)
    assert not ok and err == pytest.approx(0.25)
    assert detail.startswith(f"output %{members[1]}: max abs error 0.25 >")


def test_inputs_or_outputs_in_another_order_are_refused_with_both_orders():
    g, x, c, members = _graph()
    k = _kernel(g, members, members)
    swapped = BuiltKernel("hand", [c, x], k.outputs, k.run)
    assert verify(swapped, g, members, members) == (False, math.inf, f"inputs {[c, x]} differ from the "
                                                                     f"subgraph's {[x, c]}")
    flipped = BuiltKernel("hand", k.inputs, members[::-1], k.run)
    assert verify(flipped, g, members, members) == (False, math.inf, f"outputs {members[::-1]} differ from "
                                                                     f"{members}")


def test_a_kernel_that_raises_is_a_result_with_the_first_line():
    g, x, c, members = _graph()

    def boom(xs):
        raise RuntimeError("segfault avoided\nstack trace")

    k = BuiltKernel("hand", [x, c], members, boom)
    assert verify(k, g, members, members) == (False, math.inf, "run failed: RuntimeError: segfault avoided")


def test_a_shared_reference_is_used_as_given():
    g, x, c, members = _graph()
    sub = g.subgraph(members, members)
    feeds = {x: np.full((2, 3), 2.0, np.float32), c: C}
    outs = {members[0]: 2.0 * C, members[1]: 2.0 * C - 2.0}
    log = []
    assert verify(_kernel(g, members, members, log), g, members, members, reference=(feeds, outs))[0]
    np.testing.assert_array_equal(log[0][0].numpy(), feeds[x])
    outs[members[0]] = outs[members[0]] + 1
    ok, err, _ = verify(_kernel(g, members, members), g, members, members, reference=(feeds, outs))
    assert not ok and err == pytest.approx(1.0) and list(sub.inputs) == [x, c]


def test_reason_or_none():
    assert reason_or_none(True) is None
    assert reason_or_none("rank 7") == "rank 7"
    for no in (False, "", None):
        assert reason_or_none(no) == "cannot run (no reason given)"


def test_one_line_is_the_first_line_stripped_and_at_most_300_characters():
    assert _one_line(ValueError("\n  first\nsecond  ")) == "first"
    assert _one_line(ValueError("")) == ""
    assert _one_line(ValueError("x" * 400 + "\ny")) == "x" * 300


def test_default_threads_follows_torch():
    before = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            assert default_threads() == n
    finally:
        torch.set_num_threads(before)


def test_provider_defaults():
    class Minimal(Provider):
        pass

    p = Minimal()
    assert p.name == "provider" and p.own_pool is False and p.available() is True
    assert repr(p) == "<provider provider>"
    g, x, c, members = _graph()
    with pytest.raises(NotImplementedError):
        p.can_run(g, members, members)
    with pytest.raises(NotImplementedError):
        p.build(g, members, members)
    assert issubclass(ProviderError, KernorchError)


def test_saved_state_and_load_default_to_the_state_and_a_rebuild():
    class Builds(Provider):
        name = "builds"

        def build(self, g, members, outputs):
            self.args = (g, list(members), list(outputs))
            return _kernel(g, members, outputs)

    g, x, c, members = _graph()
    k = BuiltKernel("builds", [x, c], members, lambda xs: xs, state={"threads": 2})
    assert k.baked == frozenset() and k.detail == "" and k.run_into is None
    assert BuiltKernel("b", [], [], lambda xs: xs).state == {}
    p = Builds()
    assert p.saved_state(k) is k.state
    again = p.load(g, members, members, {"threads": 2})
    assert p.args == (g, members, members) and again.inputs == [x, c]


def test_random_inputs_draw_gather_indices_for_the_kernels_own_table():
    """An index value that also gathers from a smaller table outside the kernel gets the full range
    of the kernel's table ([-n, n), n = 10 here, not 3): the kernel is checked on every index it
    can see, and never on one out of range."""
    b = Builder()
    i = b.input((256,), "int64")
    inside = b.gather(b.input((10,)), [i], *_take(10))
    outside = b.gather(b.input((3,)), [i], *_take(3))
    b.g.outputs = [inside, outside]
    g = b.g
    sub = g.subgraph([inside], [inside])
    idx = random_inputs(g, sub, 2)[i]
    assert idx.min() >= -10 and idx.max() < 10 and np.abs(idx).max() > 3
    np.testing.assert_array_equal(random_inputs(g, sub)[i], random_inputs(g, sub, 0)[i])  # default seed 0


def _take(n):
    m, maps = layout.gather_take((n,), 0, (256,))
    return m, [0], maps


def test_requested_outputs_in_another_order_than_the_boundary_pass():
    """``verify`` holds the kernel to the outputs asked for, in that order, not to the boundary's."""
    b = Builder()
    x = b.input((2, 3))
    m = b.binary(Op.MUL, x, b.constant(C))
    d = b.binary(Op.SUB, m, x)
    b.g.outputs = [d, b.unary(Op.NEG, m)]  # m is read outside: boundary [m, d]
    g = b.g
    assert g.subgraph([m, d]).outputs == [m, d]
    k = _kernel(g, [m, d], [m, d])
    swapped = BuiltKernel("hand", k.inputs, [d, m], lambda xs: k.run(xs)[::-1])
    assert verify(swapped, g, [m, d], [d, m])[:1] == (True,)
