"""A value compared with its own max/min (ArgMax/ArgMin fission, a peak test x == maxpool(x)) is
read from one stored evaluation, never recomputed (codegen/extremes.py, Note [extreme tests]).

The compared values are softmaxes and sigmoids: their expf is the SIMD variant in a vectorized loop
and the scalar one elsewhere, an ulp apart with libmvec. Kernels that recomputed them compared a
value the reduction never saw: ArgMin gave n (out of range, fuzz seed 102514) and a row of the hit
mask had no hit. Every case checks against the reference interpreter on several inputs; ties come
from exp(relu(x - 1)), 1 wherever x <= 1."""

import numpy as np
import pytest

from cg_util import THREADS, check, feeds, finish, inputs_for, softmax, window_reduce
from kernorch import codegen
from kernorch.codegen import extremes
from kernorch.codegen.facts import kernel_prims
from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op


def _arg_extreme(b: Builder, x: int, axis: int, argmax: bool, last: bool):
    """fission/rules/reduce.py's ArgMax/ArgMin: (extreme, hit mask, index)."""
    shape = b.shape(x)
    n = shape[axis]
    m = b.reduce(Op.RMAX if argmax else Op.RMIN, x, [axis], keepdims=True)
    hit = b.binary(Op.OR, b.binary(Op.EQ, x, m), b.unary(Op.ISNAN, x))
    iota = b.constant(np.arange(n, dtype=np.int64).reshape([n if d == axis else 1 for d in range(len(shape))]))
    pos = b.where(hit, iota, b.scalar(-1 if last else n, "int64"))
    return m, hit, b.reduce(Op.RMAX if last else Op.RMIN, pos, [axis], keepdims=True)


def _softmax_arg(shape, softmax_axis, axis, argmax=False, last=False, out="index"):
    """ArgMin/ArgMax along ``axis`` of a softmax along ``softmax_axis``, one kernel writing the
    index or the hit mask (what the two kernels of seed 102514's plan wrote)."""
    b = Builder()
    s = softmax(b, b.input(shape), softmax_axis)
    _, hit, pos = _arg_extreme(b, s, axis, argmax, last)
    return finish(b, pos if out == "index" else hit)


def _tied_arg(shape, axis, argmax=False, last=False, out="index"):
    """The same over exp(relu(x - 1)): ties (exp(0) = 1, exact) in most rows."""
    b = Builder()
    r = b.unary(Op.EXP, b.unary(Op.RELU, b.binary(Op.SUB, b.input(shape), b.scalar(1.0))))
    _, hit, pos = _arg_extreme(b, r, axis, argmax, last)
    return finish(b, pos if out == "index" else hit)


def _peaks(shape=(1, 3, 9, 11)):
    """CenterNet's peak test: heat = sigmoid(x), kept where heat == maxpool3x3(heat)."""
    b = Builder()
    heat = b.unary(Op.SIGMOID, b.input(shape))
    hmax = window_reduce(b, heat, Op.RMAX, 3, 1, 1, -np.inf)
    return finish(b, b.binary(Op.MUL, heat, b.cast(b.binary(Op.EQ, heat, hmax), "float32")))


CASES = {
    "argmin_index_seed_102514": lambda: _softmax_arg((5, 6), 0, 1),
    "argmin_hits_seed_102514": lambda: _softmax_arg((5, 6), 0, 1, out="hits"),
    "argmax_hits": lambda: _softmax_arg((5, 6), 0, 1, argmax=True, out="hits"),
    "argmax_last_index": lambda: _softmax_arg((17, 5), 0, 1, argmax=True, last=True),
    "argmin_hits_short_rows": lambda: _softmax_arg((17, 5), 0, 1, out="hits"),
    "argmax_index_rows": lambda: _softmax_arg((9, 100), 1, 0, argmax=True),
    "argmin_first_tie_index": lambda: _tied_arg((6, 37), 1),
    "argmin_last_tie_index": lambda: _tied_arg((6, 37), 1, last=True),
    "argmax_tie_hits": lambda: _tied_arg((37, 6), 0, argmax=True, out="hits"),
    "peaks": _peaks,
}


@pytest.fixture(scope="module")
def built():
    items = {name: fn() for name, fn in CASES.items()}
    kernels = codegen.build_many(list(items.values()), num_threads=THREADS)
    return {name: (*items[name], k) for name, k in zip(items, kernels)}


@pytest.mark.parametrize("name", CASES)
def test_matches_interpreter(name, built):
    g, _, outputs, k = built[name]
    for seed in range(12):
        check(k, g, outputs, seed=seed)
    x = feeds(g)[0]
    check(k, g, outputs, fed=[-np.abs(x)])  # every element ties (or none, for the softmaxes)


@pytest.mark.parametrize("name", [n for n in CASES if "index" in n])
def test_index_is_in_range(name, built):
    g, _, outputs, k = built[name]
    pos = next(p for p in g.prims if p.output == outputs[0])
    n = g.types[pos.inputs[0]].shape[pos.attrs.axes[0]]
    for seed in range(12):
        got = k.run(inputs_for(k, g, feeds(g, seed)))[0].numpy()
        assert ((got >= 0) & (got < n)).all(), got


def test_the_compared_value_is_stored_once():
    g, members, outputs = _softmax_arg((5, 6), 0, 1, out="hits")
    prims = kernel_prims(g, members)
    (t,) = extremes.tests(prims)
    assert {p.output: p for p in prims}[t.value].op is Op.DIV  # the softmax, not its broadcast view
    assert extremes.stored_values(prims) == {t.value}
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    assert any(f"v{[p.output for p in prims].index(t.value)}" in n and "compared with its own" in n
               for n in spec.notes), spec.notes


def test_a_kernel_holding_one_side_reads_the_value_from_memory():
    """Another kernel's recomputation is no better: whoever holds the comparison (or the reduction)
    without the other must read the compared value, not compute it."""
    g, members, outputs = _softmax_arg((5, 6), 0, 1, out="hits")
    prims = kernel_prims(g, members)
    (t,) = extremes.tests(prims)
    producers = {p.output: p for p in prims}

    def cone(v, stop):
        seen, todo = set(), [v]
        while todo:
            u = todo.pop()
            if u in producers and u not in seen and u not in stop:
                seen.add(u)
                todo += producers[u].inputs
        return seen

    reduces = {p.output for p in prims if p.op in (Op.RMAX, Op.SUM) and p.output != t.reduce}
    compare_side = cone(outputs[0], reduces | {t.reduce})  # recomputes the softmax, reads the extreme
    reason = codegen.why_not(g, compare_side, outputs)
    assert reason is not None and "extreme" in reason, reason
    reduce_side = cone(t.reduce, reduces)  # recomputes the softmax, writes only the extreme
    assert "extreme" in codegen.why_not(g, reduce_side, [t.reduce])
    reading = compare_side - cone(t.value, reduces)  # the softmax read from memory
    assert codegen.why_not(g, reading, outputs) is None
    assert codegen.why_not(g, members, outputs) is None


def test_seed_102514s_two_kernels_give_a_valid_index():
    """The plan that failed: one kernel writes the hit mask of a softmax's ArgMin, the next turns it
    into the first index; the index must be the interpreter's (it was 6 of 6)."""
    g, members, (pos,) = _softmax_arg((5, 6), 0, 1)
    producers = {p.output: p for p in g.prims}
    where = producers[producers[pos].inputs[0]]
    hit = where.inputs[0]
    first = members - {pos, where.output} - {v for v in where.inputs if v != hit}
    a, b = codegen.build_many([(g, first, [hit]), (g, members - first, [pos])], num_threads=THREADS)
    for seed in range(12):
        fed = feeds(g, seed)
        env = dict(zip(g.inputs, fed))
        env.update(g.constants)
        env[hit] = a.run([env[v] for v in a.inputs])[0].numpy()
        got = b.run([env[v] for v in b.inputs])[0].numpy()
        g.outputs = [pos]
        np.testing.assert_array_equal(got, interp.run(g, fed)[pos])
