"""The index algebra against brute force: random expressions built through the simplifying
constructors (floordiv, mod, min, max, table lookups, substitution) are evaluated at every point of
small variable ranges and compared with plain integer arithmetic on the same points; ``bounds`` must
contain every value; ``render``'s C text, evaluated with C's truncating ``/`` and ``%``, must agree
too. Then random layout chains (reshape, permute, slice, pad of every mode, flip, broadcast, window,
take) composed into one map are compared with the chain applied by NumPy / explicit loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernorch.ir import index as ix
from kernorch.ir import layout

SETTINGS = dict(max_examples=150, deadline=None, derandomize=True)


# ---------------------------------------------------------------------------------------------
# Random expressions, each with its naive meaning
# ---------------------------------------------------------------------------------------------

def _grid(sizes):
    return list(itertools.product(*[range(s) for s in sizes]))


def _draw_expr(data, sizes, depth):
    """(simplified expression, naive function of a point)."""
    nvars = len(sizes)
    leaf = depth <= 0 or data.draw(st.integers(0, 3)) == 0
    if leaf:
        if data.draw(st.booleans()):
            i = data.draw(st.integers(0, nvars - 1))
            return ix.var(i), lambda p, i=i: p[i]
        c = data.draw(st.integers(-6, 6))
        return ix.const(c), lambda p, c=c: c
    op = data.draw(st.sampled_from(["add", "sub", "mul", "floordiv", "mod", "min", "max", "lookup", "affine"]))
    a, fa = _draw_expr(data, sizes, depth - 1)
    if op in ("add", "sub", "min", "max"):
        b, fb = _draw_expr(data, sizes, depth - 1)
        if op == "add":
            return a + b, lambda p: fa(p) + fb(p)
        if op == "sub":
            return a - b, lambda p: fa(p) - fb(p)
        if op == "min":
            return ix.minimum(a, b, sizes), lambda p: min(fa(p), fb(p))
        return ix.maximum(a, b, sizes), lambda p: max(fa(p), fb(p))
    if op == "mul":
        k = data.draw(st.integers(-3, 4))
        return a * k, lambda p: fa(p) * k
    if op == "affine":  # k*a + c: the shapes reshapes and slices produce
        k, c = data.draw(st.integers(1, 6)), data.draw(st.integers(-6, 6))
        return a * k + c, lambda p: fa(p) * k + c
    if op in ("floordiv", "mod"):
        d = data.draw(st.integers(1, 7))
        if op == "floordiv":
            return ix.floordiv(a, d, sizes), lambda p: fa(p) // d
        return ix.mod(a, d, sizes), lambda p: fa(p) % d
    # lookup: a table covering the values ``a`` takes (out-of-range reads are not defined)
    vals = [fa(p) for p in _grid(sizes)]
    lo, hi = min(vals), max(vals)
    if lo < 0 or hi > 12:
        return a, fa
    n = hi + 1 + data.draw(st.integers(0, 2))
    if data.draw(st.booleans()):  # an arithmetic progression (simplifies to affine) or random
        s0, step = data.draw(st.integers(-3, 3)), data.draw(st.integers(-2, 3))
        table = [s0 + step * t for t in range(n)]
    else:
        table = data.draw(st.lists(st.integers(-5, 9), min_size=n, max_size=n))
    return ix.lookup(table, a, sizes), lambda p, t=tuple(table): t[fa(p)]


sizes_st = st.lists(st.integers(1, 6), min_size=1, max_size=3)


class CInt:
    """An integer with C's truncating ``/`` and ``%`` (what render's plain operators mean)."""

    def __init__(self, v):
        self.v = int(v)

    def _o(self, x):
        return x.v if isinstance(x, CInt) else int(x)

    def __add__(self, x): return CInt(self.v + self._o(x))
    __radd__ = __add__
    def __sub__(self, x): return CInt(self.v - self._o(x))
    def __rsub__(self, x): return CInt(self._o(x) - self.v)
    def __mul__(self, x): return CInt(self.v * self._o(x))
    __rmul__ = __mul__
    def __neg__(self): return CInt(-self.v)
    def __index__(self): return self.v

    def __truediv__(self, x):
        a, b = self.v, self._o(x)
        q = abs(a) // abs(b)
        return CInt(q if (a >= 0) == (b > 0) else -q)

    def __mod__(self, x):
        a, b = self.v, self._o(x)
        return CInt(a - b * (self / b).v)


def _c_eval(e: ix.Expr, sizes, point) -> int:
    tables: dict[str, tuple] = {}

    def table(t):
        name = f"T{len(tables)}"
        tables[name] = t
        return name

    src = ix.render(e, lambda i: f"i{i}", sizes, table)
    env = {f"i{i}": CInt(v) for i, v in enumerate(point)}
    env.update(tables)
    env.update(kn_floordiv=lambda a, d: CInt(int(a) // d), kn_mod=lambda a, d: CInt(int(a) % d),
               kn_min=lambda a, b: a if int(a) <= int(b) else b, kn_max=lambda a, b: a if int(a) >= int(b) else b)
    for name, t in tables.items():
        env[name] = t
    out = eval(src, {"__builtins__": {}}, env)  # noqa: S307 - our own rendered arithmetic
    return int(out)


@settings(**SETTINGS)
@given(sizes_st, st.data())
def test_simplified_expressions_equal_brute_force(sizes, data):
    e, naive = _draw_expr(data, sizes, depth=4)
    lo, hi = ix.bounds(e, sizes)
    for p in _grid(sizes):
        want = naive(p)
        got = int(ix.evaluate(e, list(p)))
        assert got == want, (e, sizes, p, got, want)
        assert lo <= want <= hi, (e, sizes, p, (lo, hi), want)
        assert _c_eval(e, sizes, p) == want, (e, ix.render(e, lambda i: f"i{i}", sizes, lambda t: "T"), p)


@settings(**SETTINGS)
@given(sizes_st, sizes_st, st.data())
def test_substitution_equals_evaluating_the_substituted_values(sizes, new_sizes, data):
    """``substitute(e, values)`` (re-simplified under the new ranges) is e at the values."""
    e, naive = _draw_expr(data, sizes, depth=3)
    # values for e's variables: expressions over the new variables that stay inside e's ranges
    values, fvals = [], []
    for s in sizes:
        v, fv = _draw_expr(data, new_sizes, depth=2)
        v, fv = ix.mod(v, s, new_sizes), (lambda p, fv=fv, s=s: fv(p) % s)
        values.append(v)
        fvals.append(fv)
    sub = ix.substitute(e, values, new_sizes)
    for p in _grid(new_sizes):
        want = naive(tuple(f(p) for f in fvals))
        assert int(ix.evaluate(sub, list(p))) == want, (e, values, sub, p)
        assert _c_eval(sub, new_sizes, p) == want


@pytest.mark.parametrize("n", range(1, 11))
@pytest.mark.parametrize("d", range(1, 7))
@pytest.mark.parametrize("shift", [-2, -1, 0, 1, 2])
def test_mod_and_floordiv_at_every_bound_edge(n, d, shift):
    """``(i + shift) % d`` and ``// d`` for i in [0, n): covers hi == d - 1, hi == d, hi == d + 1,
    lo == -1 (the edges where a simplification may drop the mod or fold the quotient)."""
    e = ix.var(0) + shift
    m, q = ix.mod(e, d, (n,)), ix.floordiv(e, d, (n,))
    for i in range(n):
        assert ix.evaluate(m, [i]) == (i + shift) % d, (n, d, shift, m)
        assert ix.evaluate(q, [i]) == (i + shift) // d, (n, d, shift, q)
        assert _c_eval(m, (n,), (i,)) == (i + shift) % d
        assert _c_eval(q, (n,), (i,)) == (i + shift) // d


@pytest.mark.parametrize("n", [5, 6, 9, 13])
@pytest.mark.parametrize("d", range(2, 6))
@pytest.mark.parametrize("shift", [-1, 0, 1, 2, 3])
def test_negative_coefficients_at_every_bound_edge(n, d, shift):
    """``(shift - i) % d`` and ``// d``: dividends whose lower bound is -1, 0 or 1, where C's
    truncating operators and floor semantics part (render must use the helpers below 0)."""
    e = shift - ix.var(0)
    m, q = ix.mod(e, d, (n,)), ix.floordiv(e, d, (n,))
    for i in range(n):
        assert ix.evaluate(m, [i]) == (shift - i) % d and _c_eval(m, (n,), (i,)) == (shift - i) % d, (m, i)
        assert ix.evaluate(q, [i]) == (shift - i) // d and _c_eval(q, (n,), (i,)) == (shift - i) // d, (q, i)


@pytest.mark.parametrize("outer", ["floordiv", "mod"])
@pytest.mark.parametrize("inner", ["floordiv", "mod"])
@pytest.mark.parametrize("d1", [2, 3, 4, 6])
@pytest.mark.parametrize("d2", [2, 3, 4])
def test_nested_floordiv_and_mod(outer, inner, d1, d2):
    """``(x op1 d1) op2 d2`` over wide ranges (where nested divisions fold: (x//a)//b == x//(a*b),
    (x%a)%b == x%b only when b divides a)."""
    f = {"floordiv": (ix.floordiv, lambda a, d: a // d), "mod": (ix.mod, lambda a, d: a % d)}
    sizes = (40, 3)
    x = ix.var(0) + ix.var(1) * 40 - 7
    e = f[outer][0](f[inner][0](x, d1, sizes), d2, sizes)
    lo, hi = ix.bounds(e, sizes)
    for p in _grid(sizes):
        want = f[outer][1](f[inner][1](p[0] + 40 * p[1] - 7, d1), d2)
        assert ix.evaluate(e, list(p)) == want and _c_eval(e, sizes, p) == want, (e, p)
        assert lo <= want <= hi


def test_bounds_of_mod_and_floordiv_are_tight_on_simple_ranges():
    assert ix.bounds(ix.mod(ix.var(0), 4, (5,)), (5,)) == (0, 3)
    assert ix.bounds(ix.mod(ix.var(0) + 2, 4, (2,)), (2,)) == (2, 3)
    assert ix.bounds(ix.mod(ix.var(0) + 2, 4, (3,)), (3,)) == (0, 3)
    assert ix.bounds(ix.floordiv(ix.var(0), 4, (9,)), (9,)) == (0, 2)
    assert ix.bounds(ix.minimum(ix.var(0), 3, (9,)), (9,)) == (0, 3)
    assert ix.bounds(ix.maximum(ix.var(0), 3, (9,)), (9,)) == (3, 8)


def test_mod_keeps_the_mod_when_the_range_reaches_the_divisor():
    """The ``hi == d`` edge: i in [0, 5) mod 4 is not i (4 % 4 == 0)."""
    assert ix.mod(ix.var(0), 4, (4,)) == ix.var(0)
    kept = ix.mod(ix.var(0), 4, (5,))
    assert kept != ix.var(0) and ix.evaluate(kept, [4]) == 0
    assert ix.floordiv(ix.var(0), 4, (4,)) == ix.const(0)
    assert ix.evaluate(ix.floordiv(ix.var(0), 4, (5,)), [4]) == 1


@pytest.mark.parametrize("a_hi,b_lo", [(3, 3), (3, 4), (4, 3)])
def test_min_max_at_touching_ranges(a_hi, b_lo):
    """min/max drop an operand only when the ranges prove it (touching ranges included)."""
    sizes = (a_hi + 1, 3)
    a = ix.var(0)
    b = ix.var(1) + b_lo
    for f, g in ((ix.minimum, min), (ix.maximum, max)):
        e = f(a, b, sizes)
        for p in _grid(sizes):
            assert ix.evaluate(e, list(p)) == g(p[0], p[1] + b_lo)


# ---------------------------------------------------------------------------------------------
# Random layout chains against NumPy and explicit loops
# ---------------------------------------------------------------------------------------------

def _window_ref(x, kernel, strides, pads, dil, out_sp, pad_value):
    k = len(kernel)
    lead = x.shape[:-k]
    out = np.empty(lead + tuple(out_sp) + tuple(kernel), dtype=x.dtype)
    for idx in np.ndindex(*out.shape):
        o, w = idx[len(lead):len(lead) + k], idx[len(lead) + k:]
        src = [o[s] * strides[s] + w[s] * dil[s] - pads[s] for s in range(k)]
        if all(0 <= j < n for j, n in zip(src, x.shape[-k:])):
            out[idx] = x[idx[:len(lead)] + tuple(src)]
        else:
            out[idx] = pad_value
    return out


def _pad_ref(x, b, e, mode, value):
    """np.pad with negative widths meaning crops."""
    crop = tuple(slice(max(-bb, 0), x.shape[d] - max(-ee, 0)) for d, (bb, ee) in enumerate(zip(b, e)))
    x = x[crop]
    widths = [(max(bb, 0), max(ee, 0)) for bb, ee in zip(b, e)]
    kw = {"constant_values": value} if mode == "constant" else {}
    return np.pad(x, widths, mode=mode, **kw)


KINDS = ["reshape", "unsqueeze", "permute", "slice", "pad", "flip", "broadcast", "window", "take"]


def _step(data, shape, ref):
    """One random layout op: (its map, NumPy's result), or None when it does not apply."""
    kind = data.draw(st.sampled_from(KINDS))
    n_el = math.prod(shape)
    if kind == "reshape":
        divs = [d for d in range(1, n_el + 1) if n_el % d == 0]
        a = data.draw(st.sampled_from(divs))
        new = (a, n_el // a) if data.draw(st.booleans()) else (n_el,)
        return layout.reshape(shape, new), ref.reshape(new)
    if kind == "unsqueeze":
        if len(shape) >= 4:
            return None
        at = data.draw(st.integers(0, len(shape)))
        new = shape[:at] + (1,) + shape[at:]
        return layout.reshape(shape, new), ref.reshape(new)
    if kind == "permute":
        perm = data.draw(st.permutations(range(len(shape))))
        return layout.permute(shape, perm), ref.transpose(perm)
    if kind == "slice":
        starts, steps, outs, sl = [], [], [], []
        for n in shape:
            step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
            start = data.draw(st.integers(0, n - 1))
            cnt = len(range(start, n if step > 0 else -1, step))
            starts.append(start), steps.append(step), outs.append(cnt)
            sl.append(slice(start, None, step))
        return layout.slice_(shape, starts, steps, outs), ref[tuple(sl)]
    if kind == "pad":
        if n_el > 200:
            return None
        mode = data.draw(st.sampled_from(["constant", "edge", "reflect"]))
        lo = -1 if mode == "constant" else 0
        b = [data.draw(st.integers(lo, 2)) for _ in shape]
        e = [data.draw(st.integers(lo, 2)) for _ in shape]
        if mode == "constant" and any(n + bb + ee < 1 or -bb >= n or -ee >= n for n, bb, ee in zip(shape, b, e)):
            return None
        if mode == "reflect" and any(p >= n for p, n in zip(b + e, list(shape) * 2)):
            mode = "edge"
        value = data.draw(st.sampled_from([0.0, -1.0, -2.5]))
        return layout.pad(shape, b, e, mode, value), _pad_ref(ref, b, e, mode, value)
    if kind == "flip":
        axes = [d for d in range(len(shape)) if data.draw(st.booleans())]
        return layout.flip(shape, axes), (np.flip(ref, axes) if axes else ref)
    if kind == "broadcast":
        ones = [d for d, n in enumerate(shape) if n == 1]
        if not ones or n_el > 100:
            return None
        new = tuple(data.draw(st.integers(1, 3)) if d in ones else n for d, n in enumerate(shape))
        return layout.broadcast(shape, new), np.broadcast_to(ref, new)
    if kind == "window":
        k = data.draw(st.integers(1, min(2, len(shape))))
        if n_el > 60 or len(shape) + k > 6:
            return None
        kernel = [data.draw(st.integers(1, 3)) for _ in range(k)]
        strides = [data.draw(st.integers(1, 2)) for _ in range(k)]
        dil = [data.draw(st.integers(1, 2)) for _ in range(k)]
        pads = [data.draw(st.integers(0, kk - 1)) for kk in kernel]
        sp = shape[-k:]
        out_sp = [(n + 2 * p - d * (kk - 1) - 1) // s + 1 for n, p, d, kk, s in zip(sp, pads, dil, kernel, strides)]
        if min(out_sp) < 1:
            return None
        value = data.draw(st.sampled_from([0.0, -1.0, -np.inf]))
        m = layout.window(shape, kernel, strides, pads, dil, out_sp, value)
        return m, _window_ref(ref, kernel, strides, pads, dil, out_sp, value)
    # take: constant indices along an axis, negatives wrapping
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    ishape = data.draw(st.sampled_from([(1,), (3,), (2, 2)]))
    if len(shape) + len(ishape) - 1 > 5 or n_el * math.prod(ishape) > 300:
        return None
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=math.prod(ishape),
                                      max_size=math.prod(ishape)))).reshape(ishape)
    return layout.take(shape, axis, idx), np.take(ref, idx % n, axis=axis)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_random_layout_chains_compose_like_numpy(shape, data):
    """Compose every map of a random chain into one (symbolically, like views) and gather the
    input through it, both by the strided fast path and by explicit index arrays. Maps whose
    masks pad with different values cannot compose: then the chain is materialized there."""
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float64).reshape(shape)
    base = x  # the array the composed map reads
    composed = layout.identity(tuple(shape))
    ref = x
    for _ in range(data.draw(st.integers(1, 5))):
        step = _step(data, tuple(composed.out_shape), ref)
        if step is None:
            continue
        m, new_ref = step
        assert m.out_shape == new_ref.shape, (m, new_ref.shape)
        np.testing.assert_array_equal(m.gather(np.ascontiguousarray(ref)), new_ref)  # the map alone
        ref = new_ref
        nxt = m.compose(composed)
        if nxt is None:  # different pad values: only allowed when both are masked
            assert m.mask and composed.mask and m.pad != composed.pad
            base, composed = composed.gather_by_index(base), m
        else:
            composed = nxt
        np.testing.assert_array_equal(composed.gather(base), ref)
        np.testing.assert_array_equal(composed.gather_by_index(base), ref)


def test_differently_padded_maps_do_not_compose():
    a = layout.pad((3,), (1,), (1,), "constant", -1.0)
    b = layout.pad((5,), (1,), (0,), "constant", 0.0)
    assert b.compose(a) is None
    c = layout.pad((5,), (1,), (0,), "constant", -1.0)
    both = c.compose(a)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(both.gather(x), [-1, -1, 1, 2, 3, -1])
