"""Index arithmetic the code generator needs on top of kernorch.ir.index: flat offsets, an extra
normalization that turns reshape chains back into affine offsets, and the split of an iteration
space into a parallel outer index and inner loops.

All expressions use kernel-wide variable ids; ``sizes[i]`` is the range of variable ``i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from kernorch.ir import index as ix
from kernorch.ir.index import Expr, FloorDiv, Mod


def strides(shape: Sequence[int]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


def flat(idx: Sequence[Expr], shape: Sequence[int], sizes: Sequence[int]) -> Expr:
    """Row-major flat offset of ``idx`` in ``shape``, normalized."""
    e = ix.const(0)
    for i, s, n in zip(idx, strides(shape), shape):
        if n != 1:
            e = e + i * s
    return normalize(e, sizes)


def normalize(e: Expr, sizes: Sequence[int]) -> Expr:
    """Simplify beyond ir.index so reshape chains turn back into affine offsets:

    - ``(g*y + r) // d == y // (d/g)`` and ``(g*y + r) % d == g*(y % (d/g)) + r`` when ``g | d``
      and ``0 <= r < g`` (ir.index only divides out whole multiples of d);
    - ``k*e*(x // (d*e)) + k*((x // d) % e) == k*(x // d)`` (ir.index collapses nested
      floor-divisions before it can recombine them).

    Keeping inner-loop offsets affine is what lets the C compiler vectorize through reshapes."""
    out = ix.const(e.const)
    for a, k in e.terms:
        out = out + _norm_atom(a, sizes) * k
    return _recombine(out)


def _norm_atom(a, sizes: Sequence[int]) -> Expr:
    if isinstance(a, ix.Var):
        return ix.var(a.i)
    if isinstance(a, (FloorDiv, Mod)):
        x = normalize(a.x, sizes)
        for g in sorted({math.gcd(a.d, abs(k)) for _, k in x.terms} | {math.gcd(a.d, abs(x.const))}, reverse=True):
            if g <= 1:
                continue
            y = ix.const(x.const // g)
            r = ix.const(x.const % g)
            for b, k in x.terms:
                if k % g == 0:
                    y = y + ix.Expr(((b, 1),), 0) * (k // g)
                else:
                    r = r + ix.Expr(((b, 1),), 0) * k
            lo, hi = ix.bounds(r, sizes)
            if lo >= 0 and hi < g:
                if isinstance(a, FloorDiv):
                    return ix.floordiv(y, a.d // g, sizes)
                return ix.mod(y, a.d // g, sizes) * g + r
        return ix.floordiv(x, a.d, sizes) if isinstance(a, FloorDiv) else ix.mod(x, a.d, sizes)
    if isinstance(a, ix.MinOf):
        return ix.minimum(normalize(a.a, sizes), normalize(a.b, sizes), sizes)
    if isinstance(a, ix.MaxOf):
        return ix.maximum(normalize(a.a, sizes), normalize(a.b, sizes), sizes)
    if isinstance(a, ix.Lookup):
        return ix.lookup(a.table, normalize(a.x, sizes), sizes)
    if isinstance(a, ix.Loaded):
        return ix.Expr(((a, 1),), 0)
    raise TypeError(a)


def _recombine(e: Expr) -> Expr:
    changed = True
    while changed:
        changed = False
        terms = dict(e.terms)
        for a, k in terms.items():
            inner = a.x.as_atom() if isinstance(a, Mod) else None
            if not isinstance(inner, FloorDiv):
                continue
            outer = FloorDiv(inner.x, inner.d * a.d)
            if terms.get(outer, 0) == k * a.d:
                rest = [(b, c) for b, c in terms.items() if b not in (a, outer)]
                e = ix.const(e.const) + _sum(rest) + ix.Expr(((inner, 1),), 0) * k
                changed = True
                break
    return e


def _sum(terms) -> Expr:
    out = ix.const(0)
    for a, k in terms:
        out = out + ix.Expr(((a, 1),), 0) * k
    return out


def split_candidates(shape: Sequence[int]) -> set[int]:
    """Every P for which the first P-th of the row-major order is a prefix split of ``shape``:
    products of leading dims times a divisor of the next dim."""
    out, p = {1}, 1
    for n in shape:
        if n == 1:
            continue
        out.update(p * f for f in _divisors(n))
        p *= n
    return out


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Iteration:
    """A stage's iteration space split as ``outer o`` (variable ``outer``, range P) times inner
    loops. ``natural[d]`` is the natural index of dim d over (o, loop vars); ``loops`` are
    (var, extent, dim) in natural dim order."""

    outer: int
    natural: tuple[Expr, ...]
    loops: tuple[tuple[int, int, int], ...]


def split(shape: Sequence[int], reduced: Sequence[int], P: int, outer: int,
          new_var, sizes: Sequence[int]) -> Iteration | None:
    """Split ``shape`` (reduced axes never go outer) so that outer index o covers the P leading
    elements of the non-reduced row-major order; None when P is not a prefix split.
    ``new_var(extent) -> id`` allocates loop variables."""
    red = set(reduced)
    rem = P
    full: list[int] = []
    part: tuple[int, int] | None = None
    for d, n in enumerate(shape):
        if d in red or n == 1 or rem == 1:
            continue
        if rem % n == 0:
            full.append(d)
            rem //= n
        elif n % rem == 0:
            part = (d, rem)
            rem = 1
        else:
            return None
    if rem != 1:
        return None
    o = ix.var(outer)
    natural: list[Expr | None] = [None] * len(shape)
    inner = part[1] if part else 1
    for d in reversed(full):
        natural[d] = ix.mod(ix.floordiv(o, inner, sizes), shape[d], sizes)
        inner *= shape[d]
    loops = []
    for d, n in enumerate(shape):
        if natural[d] is not None:
            continue
        if n == 1:
            natural[d] = ix.const(0)
            continue
        if part and part[0] == d:
            q = n // part[1]
            a = ix.mod(o, part[1], sizes) * q
            if q == 1:
                natural[d] = a
                continue
            v = new_var(q)
            loops.append((v, q, d))
            natural[d] = a + ix.var(v)
        else:
            v = new_var(n)
            loops.append((v, n, d))
            natural[d] = ix.var(v)
    return Iteration(outer, tuple(natural), tuple(loops))  # type: ignore[arg-type]
