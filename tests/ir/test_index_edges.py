"""The index algebra's normal form, bounds and printing, pinned where brute-force evaluation alone
cannot see a bug: a simplification that is skipped still evaluates right (so the normal form is
compared structurally), loose bounds still contain every value (so bounds are checked to be
reached), and printing options the C printer never passes (Triton's) are checked on their own.
Semantic checks compare against plain integer arithmetic over every point of small ranges."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernorch.ir import index as ix
from kernorch.ir.index import FloorDiv, Lookup, Loaded, MaxOf, MinOf, Mod, Var

SETTINGS = dict(max_examples=200, deadline=None, derandomize=True)
i0, i1 = ix.var(0), ix.var(1)


def _grid(sizes):
    return list(itertools.product(*[range(s) for s in sizes]))


def _atom(a):
    return ix.Expr(((a, 1),), 0)


# ---------------------------------------------------------------------------------------------
# Expressions: arithmetic and normal form
# ---------------------------------------------------------------------------------------------

def test_repr_is_the_readable_sum():
    assert repr(i0 * 2 + i1 + 3) == "2*i0 + i1 + 3"
    assert repr(ix.const(0)) == "0" and repr(ix.const(-4)) == "-4" and repr(i0) == "i0"
    assert repr(FloorDiv(i0, 3)) == "(i0 // 3)" and repr(Mod(i1 + 1, 4)) == "(i1 + 1 % 4)"
    assert repr(MinOf(i0, i1)) == "min(i0, i1)" and repr(MaxOf(i0, ix.const(2))) == "max(i0, 2)"
    assert repr(Loaded("idx", 5)) == "$idx"
    t = (1, 5, 2)
    assert repr(Lookup(t, i0)) == f"T3#{hash(t) & 0xffff:04x}[i0]"


def test_arithmetic_with_ints_on_either_side():
    sizes = (5, 4)
    cases = [(i0 + 3, lambda a, b: a + 3), (3 + i0, lambda a, b: a + 3), (i0 - i1, lambda a, b: a - b),
             (7 - i0, lambda a, b: 7 - a), (i0 - 2, lambda a, b: a - 2), (i1 * 3, lambda a, b: 3 * b),
             (-2 * i1, lambda a, b: -2 * b), (i0 * np.int64(4), lambda a, b: 4 * a)]
    for e, f in cases:
        for a, b in _grid(sizes):
            assert ix.evaluate(e, [a, b]) == f(a, b), e
    assert i0 - i0 == ix.const(0) and (i0 + 2) * 0 == ix.const(0)
    assert (7 - i0).terms == ((Var(0), -1),) and (7 - i0).const == 7


def test_only_integers_scale_an_expression():
    for k in (1.5, 2.0, "2", None):
        with pytest.raises(TypeError, match="^index expressions only scale by integers$"):
            i0 * k
    assert isinstance((i0 * np.int32(3)).terms[0][1], int)


def test_is_const_and_as_atom():
    assert ix.const(3).is_const and not i0.is_const and not (i0 * 0 + i1).is_const
    assert i0.as_atom() == Var(0)
    assert (i0 * 2).as_atom() is None and (i0 + 1).as_atom() is None and (i0 + i1).as_atom() is None
    assert ix.const(0).as_atom() is None


def test_like_terms_collect_and_vanish_and_order_does_not_matter():
    assert i0 + i1 == i1 + i0
    assert (i0 + i1 + i0).terms == ((Var(0), 2), (Var(1), 1))
    assert (i0 + i1 - i1) == i0 and (i0 - i1 + i1 - i0) == ix.const(0)
    a = ix.floordiv(i0, 3, (9,))
    assert i1 + a + i0 == i0 + i1 + a == a + i0 + i1


@pytest.mark.parametrize("k", [1, 2, -3])
@pytest.mark.parametrize("c", [0, 5, -2])
@pytest.mark.parametrize("d", [2, 4, 7])
def test_quotient_and_remainder_recombine(k, c, d):
    """``k*d*(x // d) + k*(x % d)`` is ``k*x`` in the normal form, also with a constant in x."""
    sizes = (13, 3)
    x = i0 + i1 * 13 + c
    q, r = _atom(FloorDiv(x, d)), _atom(Mod(x, d))
    assert ix.floordiv(x, d, sizes) * d + ix.mod(x, d, sizes) == x
    assert q * (k * d) + r * k == x * k
    assert r * k + q * (k * d) + 1 == x * k + 1
    # the coefficients must match exactly: otherwise both atoms stay
    near = q * (k * d + 1) + r * k
    assert len(near.terms) == 2 and {type(a) for a, _ in near.terms} == {FloorDiv, Mod}
    assert q * (k * d) + r * (k + 1) != x * k


def test_recombination_adds_to_existing_terms_and_repeats():
    sizes = (9, 7)
    q0, r0 = _atom(FloorDiv(i0, 4)), _atom(Mod(i0, 4))
    q1, r1 = _atom(FloorDiv(i1 + 2, 3)), _atom(Mod(i1 + 2, 3))
    assert i0 + q0 * 4 + r0 == i0 * 2
    assert (q0 * 4 + q1 * 3) + (r0 + r1) == i0 + i1 + 2  # two pairs met in one sum
    assert q1 * 6 + i1 + r1 * 2 - 4 == i1 * 3
    for p in ((0, 0), (8, 6), (5, 3)):
        assert ix.evaluate(q0 * 4 + r0 + q1 * 3 + r1, list(p)) == p[0] + p[1] + 2
    # a raw x % 1 (mod() never builds one) adds like any other atom
    m1 = _atom(Mod(i0, 1))
    assert (m1 + 1).terms == ((Mod(i0, 1), 1),) and (m1 + 1).const == 1
    assert ix.bounds(m1, sizes) == (0, 0)


# ---------------------------------------------------------------------------------------------
# Simplifying constructors: structure
# ---------------------------------------------------------------------------------------------

def test_division_by_one_and_by_non_positive_constants():
    e = i0 * 3 + 2
    assert ix.floordiv(e, 1, (5,)) == e and ix.mod(e, 1, (5,)) == ix.const(0)
    for d in (0, -2):
        with pytest.raises(ValueError, match="^floordiv by a non-positive constant$"):
            ix.floordiv(e, d, (5,))
        with pytest.raises(ValueError, match="^mod by a non-positive constant$"):
            ix.mod(e, d, (5,))
    assert ix.floordiv(7, 2, ()) == ix.const(3) and ix.mod(7, 2, ()) == ix.const(1)
    assert ix.floordiv(-7, 2, ()) == ix.const(-4) and ix.mod(-7, 2, ()) == ix.const(1)


def test_multiples_of_the_divisor_leave_the_division():
    sizes = (5, 4)
    assert ix.floordiv(i0 * 8 + i1 + 9, 4, sizes) == i0 * 2 + 2 + _atom(FloorDiv(i1 + 1, 4))
    assert ix.mod(i0 * 8 + i1 + 9, 4, sizes) == _atom(Mod(i1 + 1, 4))
    assert ix.floordiv(i0 * 8 + i1 * 4 + 5, 4, sizes) == i0 * 2 + i1 + 1
    assert ix.mod(i0 * 8 + i1 * 4 + 5, 4, sizes) == ix.const(1)


def test_nested_divisions_fold():
    sizes = (50,)
    assert ix.floordiv(ix.floordiv(i0, 3, sizes), 4, sizes) == _atom(FloorDiv(i0, 12))
    assert ix.mod(ix.mod(i0, 12, sizes), 4, sizes) == _atom(Mod(i0, 4))
    assert ix.mod(ix.mod(i0, 12, sizes), 5, sizes) == _atom(Mod(_atom(Mod(i0, 12)), 5))
    # a shifted inner division is not one atom: kept as it is
    shifted = ix.floordiv(ix.floordiv(i0, 3, sizes) + 1, 4, sizes)
    assert shifted == _atom(FloorDiv(_atom(FloorDiv(i0, 3)) + 1, 4))


def test_mod_of_a_range_inside_one_period_is_a_shift():
    assert ix.mod(i0 + 4, 4, (4,)) == i0
    assert ix.mod(i0 + 9, 4, (3,)) == i0 + 1
    assert ix.mod(i0 - 4, 4, (4,)) == i0
    assert ix.mod(-1 - i0, 8, (8,)) == 7 - i0
    assert ix.floordiv(i0 + 9, 4, (3,)) == ix.const(2)
    assert ix.floordiv(i0 - 4, 4, (4,)) == ix.const(-1)
    # a dividend whose remainder part lies in one period below zero (only atoms get there)
    t = _atom(Lookup((-3, -2, -1), i0))
    assert ix.floordiv(t, 4, (3,)) == ix.const(-1) and ix.mod(t, 4, (3,)) == t + 4
    assert ix.floordiv(t * 3 + 12, 4, (3,)) == _atom(FloorDiv(t * 3, 4)) + 3


def test_min_max_drop_the_operand_the_ranges_rule_out_and_are_canonical():
    sizes = (4, 6)
    assert ix.minimum(i0, i1 + 3, sizes) == i0 and ix.minimum(i1 + 3, i0, sizes) == i0
    assert ix.maximum(i0, i1 + 3, sizes) == i1 + 3 and ix.maximum(i1 + 3, i0, sizes) == i1 + 3
    assert ix.minimum(i0, 3, sizes) == i0 and ix.maximum(i0, 0, sizes) == i0
    assert ix.minimum(5, i0, sizes) == i0 and ix.maximum(i0, 5, sizes) == ix.const(5)
    kept = ix.minimum(i0, i1, sizes)
    assert kept == ix.minimum(i1, i0, sizes) == _atom(MinOf(i0, i1))
    assert ix.maximum(i1, i0, sizes) == ix.maximum(i0, i1, sizes) == _atom(MaxOf(i0, i1))


def test_lookup_simplifies_the_part_of_the_table_it_reads():
    sizes = (3,)
    assert ix.lookup([7, 8, 9], 1, sizes) == ix.const(8)
    assert ix.lookup([7, 8, 9], 5, sizes) == ix.const(9) and ix.lookup([7, 8, 9], -2, sizes) == ix.const(7)
    assert ix.lookup([4, 1, 9, 9, 9], i0 + 2, sizes) == ix.const(9)
    assert ix.lookup([5, 2, -1, 0, 0], i0, sizes) == 5 - i0 * 3
    assert ix.lookup([0, 5, 2, -1, 0], i0 + 1, sizes) == 5 - i0 * 3
    assert ix.lookup(np.array([1, 4, 2]), i0, sizes) == _atom(Lookup((1, 4, 2), i0))
    assert all(type(t) is int for t in ix.lookup(np.array([1, 4, 2]), i0, sizes).terms[0][0].table)
    # the progression must hold over every step, not just the first
    assert isinstance(ix.lookup([0, 1, 2, 4], i0 + ix.floordiv(i0, 2, (4,)), (4,)).as_atom(), Lookup)


# ---------------------------------------------------------------------------------------------
# Free variables; bounds: contain every value and are reached on simple shapes
# ---------------------------------------------------------------------------------------------

def test_free_vars_see_through_every_atom():
    e = (_atom(FloorDiv(ix.var(0), 2)) + _atom(Mod(ix.var(1), 2)) + _atom(Lookup((1, 2), ix.var(2)))
         + _atom(MinOf(ix.var(3), ix.const(1))) + _atom(MaxOf(ix.const(0), ix.var(4))) + ix.loaded("g", 2) + 3)
    assert ix.free_vars(e) == {0, 1, 2, 3, 4}
    assert ix.free_vars(ix.const(2)) == set() and ix.free_vars(ix.var(6) * 2) == {6}


def test_bounds_of_each_atom():
    assert ix.bounds(i0, (1,)) == (0, 0) and ix.bounds(i0, (0,)) == (0, 0)
    assert ix.bounds(i0 * -2 + 1, (4,)) == (-5, 1)
    assert ix.bounds(_atom(Lookup((3, -2, 8), i0)), (3,)) == (-2, 8)
    assert ix.bounds(ix.loaded("g", 7) * 2 + 1, ()) == (1, 13) and ix.bounds(ix.loaded("g", 0), ()) == (0, 0)
    assert ix.bounds(_atom(Mod(i0 - 3, 4)), (3,)) == (0, 3)
    assert ix.bounds(_atom(Mod(i0 + 1, 4)), (3,)) == (1, 3)
    assert ix.bounds(_atom(Mod(i0, 4)), (5,)) == (0, 3)
    assert ix.bounds(_atom(Mod(i0, 4)), (3,)) == (0, 2)
    assert ix.bounds(_atom(FloorDiv(i0 - 5, 2)), (4,)) == (-3, -1)
    assert ix.bounds(_atom(MinOf(i0, i1 + 2)), (6, 2)) == (0, 3)
    assert ix.bounds(_atom(MaxOf(i0, i1 + 2)), (6, 2)) == (2, 5)
    with pytest.raises(TypeError, match="object object at"):
        ix.bounds(_atom(object()), ())


affine_st = st.tuples(st.integers(-4, 4).filter(bool), st.integers(-9, 9))


@settings(**SETTINGS)
@given(st.integers(1, 9), st.integers(1, 9), affine_st, affine_st, st.integers(1, 6),
       st.sampled_from(["floordiv", "mod", "min", "max", "lookup"]))
def test_bounds_of_one_atom_over_independent_variables_are_reached(n0, n1, a, b, d, op):
    """Over ``k*i + c`` (one variable per operand) every bound computed is a value taken: the
    floor of a monotone function, a mod whose dividend covers a whole period, min/max of
    independent operands, a table read at every index."""
    sizes = (n0, n1)
    x, y = i0 * a[0] + a[1], i1 * b[0] + b[1]
    if op == "floordiv":
        e, f = ix.floordiv(x, d, sizes), lambda p: (a[0] * p[0] + a[1]) // d
    elif op == "mod":
        if abs(a[0]) != 1:
            return
        e, f = ix.mod(x, d, sizes), lambda p: (a[0] * p[0] + a[1]) % d
    elif op == "min":
        e, f = ix.minimum(x, y, sizes), lambda p: min(a[0] * p[0] + a[1], b[0] * p[1] + b[1])
    elif op == "max":
        e, f = ix.maximum(x, y, sizes), lambda p: max(a[0] * p[0] + a[1], b[0] * p[1] + b[1])
    else:
        table = tuple((7 * t * t + 3 * t) % 11 - 4 for t in range(n0))
        e, f = ix.lookup(table, i0, sizes), lambda p: table[p[0]]
    vals = [f(p) for p in _grid(sizes)]
    assert [int(ix.evaluate(e, list(p))) for p in _grid(sizes)] == vals, e
    assert ix.bounds(e, sizes) == (min(vals), max(vals)), (e, sizes)


# ---------------------------------------------------------------------------------------------
# Simplified against unsimplified (atoms built by hand) over every point
# ---------------------------------------------------------------------------------------------

def _raw(data, sizes, depth):
    """(unsimplified expression built from raw atoms, simplified expression through the
    constructors), both over the same variables."""
    if depth <= 0 or data.draw(st.integers(0, 3)) == 0:
        if data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(sizes) - 1))
            return ix.var(i), ix.var(i)
        c = data.draw(st.integers(-5, 5))
        return ix.const(c), ix.const(c)
    op = data.draw(st.sampled_from(["lin", "floordiv", "mod", "min", "max"]))
    ra, sa = _raw(data, sizes, depth - 1)
    if op == "lin":
        rb, sb = _raw(data, sizes, depth - 1)
        k, m = data.draw(st.integers(-3, 3)), data.draw(st.integers(-3, 3))
        return ix.Expr(ra.terms + tuple((t, c * k) for t, c in rb.terms) + (((Var(0), m),) if m else ()),
                       ra.const + k * rb.const), sa + sb * k + ix.var(0) * m
    if op in ("floordiv", "mod"):
        d = data.draw(st.integers(1, 6))
        raw = _atom(FloorDiv(ra, d) if op == "floordiv" else Mod(ra, d))
        return raw, (ix.floordiv if op == "floordiv" else ix.mod)(sa, d, sizes)
    rb, sb = _raw(data, sizes, depth - 1)
    if op == "min":
        return _atom(MinOf(ra, rb)), ix.minimum(sa, sb, sizes)
    return _atom(MaxOf(ra, rb)), ix.maximum(sa, sb, sizes)


@settings(**SETTINGS)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_simplified_equals_unsimplified_everywhere_and_bounds_hold(sizes, data):
    raw, simp = _raw(data, sizes, depth=4)
    lo, hi = ix.bounds(simp, sizes)
    rlo, rhi = ix.bounds(raw, sizes)
    for p in _grid(sizes):
        want = int(ix.evaluate(raw, list(p)))
        assert int(ix.evaluate(simp, list(p))) == want, (raw, simp, p)
        assert lo <= want <= hi and rlo <= want <= rhi, (raw, simp, p)
    assert ix.free_vars(simp) <= ix.free_vars(raw) | {0}


# ---------------------------------------------------------------------------------------------
# Substitution and evaluation
# ---------------------------------------------------------------------------------------------

def test_substitution_resimplifies_under_the_new_ranges():
    sizes = (3, 4)
    e = ix.floordiv(i0, 4, (12,)) * 4 + ix.mod(i0, 4, (12,))
    assert e == i0
    f = _atom(FloorDiv(i0, 4)) + _atom(Mod(i0, 4)) * 3 + _atom(MinOf(i0, ix.const(5)))
    g = ix.substitute(f, [i0 * 4 + i1], sizes)
    assert g == i0 + i1 * 3 + ix.minimum(i0 * 4 + i1, 5, sizes)
    assert ix.substitute(_atom(MaxOf(i0, ix.const(1))), [i1 + 1], sizes) == i1 + 1
    assert ix.substitute(_atom(Lookup((4, 5, 6, 7), i0)), [i1], sizes) == i1 + 4
    assert ix.substitute(ix.loaded("j", 3) + i0, [i1], sizes) == ix.loaded("j", 3) + i1
    assert ix.substitute(ix.const(4), [], ()) == ix.const(4)
    with pytest.raises(TypeError, match="object object at"):
        ix.substitute(_atom(object()), [], ())


def test_evaluate_works_on_arrays_and_clips_table_reads():
    e = ix.minimum(i0, i1, (4, 4)) * 2 + ix.maximum(i0, i1, (4, 4)) + 1
    a, b = np.array([0, 3, 2]), np.array([1, 1, 2])
    np.testing.assert_array_equal(ix.evaluate(e, [a, b]), 2 * np.minimum(a, b) + np.maximum(a, b) + 1)
    t = _atom(Lookup((9, 8, 7), i0))
    np.testing.assert_array_equal(ix.evaluate(t, [np.array([-2, 0, 1, 2, 5])]), [9, 9, 8, 7, 7])
    assert ix.evaluate(ix.const(3), []) == 3
    with pytest.raises(TypeError, match=r"\$g"):
        ix.evaluate(ix.loaded("g", 3), [])


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def _name(i):
    return "xyzw"[i]


def test_render_c_defaults():
    sizes = (6, 4)
    assert ix.render(i0 * 3 - i1 + 2, _name, sizes) == "3 * x - 1 * y + 2"
    assert ix.render(i0 - 2, _name, sizes) == "x - 2"
    assert ix.render(ix.const(0), _name, sizes) == "0" and ix.render(ix.const(-3), _name, sizes) == "-3"
    assert ix.render(_atom(FloorDiv(i0 + 1, 4)), _name, sizes) == "((x + 1) / 4)"
    assert ix.render(_atom(Mod(i0 + 1, 4)), _name, sizes) == "((x + 1) % 4)"
    assert ix.render(_atom(FloorDiv(i0 - 1, 4)), _name, sizes) == "kn_floordiv(x - 1, 4)"
    assert ix.render(_atom(Mod(i0 - 1, 4)), _name, sizes) == "kn_mod(x - 1, 4)"
    assert ix.render(_atom(MinOf(i0, i1)), _name, sizes) == "kn_min(x, y)"
    assert ix.render(_atom(MaxOf(i0, i1)) * 2, _name, sizes) == "2 * kn_max(x, y)"
    assert ix.render(ix.loaded("g_3", 5) + 1, _name, sizes) == "g_3 + 1"


def test_render_with_another_printers_helpers():
    sizes = (6, 4)
    kw = dict(floordiv_fn="fd", mod_fn="md", min_fn="mn", max_fn="mx", div="//")
    e = (_atom(FloorDiv(i0, 4)) + _atom(FloorDiv(i0 - 1, 4)) + _atom(Mod(i0 - 1, 4))
         + _atom(MinOf(i0, i1)) + _atom(MaxOf(i0, i1)))
    out = ix.render(e, _name, sizes, **kw)
    assert out == "md(x - 1, 4) + fd(x - 1, 4) + ((x) // 4) + mx(x, y) + mn(x, y)"  # terms in normal-form order


def test_render_table_reads():
    sizes = (3,)
    inside, outside = _atom(Lookup((5, 6, 7, 9), i0)), _atom(Lookup((5, 6, 7), i0 - 1))
    above = _atom(Lookup((5, 6), i0))
    assert ix.render(inside, _name, sizes, table=lambda t: f"tab{len(t)}") == "tab4[x]"
    assert ix.render(outside, _name, sizes, table=lambda t: "t") == "t[kn_min(kn_max(x - 1, 0), 2)]"
    assert ix.render(above, _name, sizes, table=lambda t: "t", min_fn="mn", max_fn="mx") == "t[mn(mx(x, 0), 1)]"
    seen = []
    out = ix.render(inside + 1, _name, sizes, lookup=lambda a, x: seen.append((a, x)) or "L")
    assert out == "L + 1" and seen == [(inside.as_atom(), "x")]
    with pytest.raises(ValueError, match="^rendering a table lookup needs a table printer$"):
        ix.render(inside, _name, sizes)
    with pytest.raises(TypeError, match="object object at"):
        ix.render(_atom(object()), _name, sizes)
