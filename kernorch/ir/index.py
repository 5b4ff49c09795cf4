"""Symbolic index algebra: affine integer expressions with floor-div, mod, min, max and table lookups.

Layout primitives are index maps (output index -> input index) built from these expressions, and the
code generators print them. Expressions are immutable, hashable and kept in a normal form:
``sum(coef * atom) + const`` with atoms sorted. Simplification uses the ranges of the variables
(variable ``i`` ranges over ``[0, sizes[i])``), which is what turns ``(4*i + j) // 4`` into ``i``
when ``j < 4`` and ``4*(f // 4) + f % 4`` back into ``f`` -- the two facts that make chains of
reshapes, transposes and slices collapse into one cheap index computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


class _Memo:
    """Room for an expression's hash and repr, worked out once (``_memoize``): both recurse
    through the whole tree, and normal forms sort and look up atoms by them on every
    addition -- most of a code generator's time in lowering a kernel, before they were kept."""

    __slots__ = ("_h", "_r")


class Atom(_Memo):
    """A non-affine leaf of an expression."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Var(Atom):
    i: int

    def __repr__(self) -> str:
        return f"i{self.i}"


@dataclass(frozen=True, slots=True)
class FloorDiv(Atom):
    x: Expr
    d: int

    def __repr__(self) -> str:
        return f"({self.x!r} // {self.d})"


@dataclass(frozen=True, slots=True)
class Mod(Atom):
    x: Expr
    d: int

    def __repr__(self) -> str:
        return f"({self.x!r} % {self.d})"


@dataclass(frozen=True, slots=True)
class MinOf(Atom):
    a: Expr
    b: Expr

    def __repr__(self) -> str:
        return f"min({self.a!r}, {self.b!r})"


@dataclass(frozen=True, slots=True)
class MaxOf(Atom):
    a: Expr
    b: Expr

    def __repr__(self) -> str:
        return f"max({self.a!r}, {self.b!r})"


@dataclass(frozen=True, slots=True)
class Lookup(Atom):
    """``table[x]``: a constant integer table indexed by an expression (gather with constant indices)."""

    table: tuple[int, ...]
    x: Expr

    def __repr__(self) -> str:
        return f"T{len(self.table)}#{hash(self.table) & 0xffff:04x}[{self.x!r}]"


@dataclass(frozen=True, slots=True)
class Loaded(Atom):
    """An index read at run time (a gather's index): the kernel scalar named ``name``, which the
    code generator has already wrapped and clamped into ``[0, n)`` (Note [gather bounds] in
    ir/layout.py). Only code generators build these; it has no value outside a kernel body."""

    name: str
    n: int

    def __repr__(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True, slots=True)
class Expr(_Memo):
    """``sum(coef * atom for atom, coef in terms) + const`` in normal form."""

    terms: tuple[tuple[Atom, int], ...]
    const: int

    def __repr__(self) -> str:
        parts = []
        for atom, coef in self.terms:
            parts.append(repr(atom) if coef == 1 else f"{coef}*{atom!r}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)

    def __add__(self, other: Expr | int) -> Expr:
        other = _as_expr(other)
        if not other.terms or not self.terms:  # a constant added: the terms stay in normal form
            return Expr(self.terms or other.terms, self.const + other.const)
        return _make(list(self.terms) + list(other.terms), self.const + other.const)

    __radd__ = __add__

    def __sub__(self, other: Expr | int) -> Expr:
        return self + (-1) * _as_expr(other)

    def __rsub__(self, other: Expr | int) -> Expr:
        return _as_expr(other) + (-1) * self

    def __mul__(self, k: int) -> Expr:
        if not isinstance(k, (int, np.integer)):
            raise TypeError("index expressions only scale by integers")
        k = int(k)
        if k == 0:
            return Expr((), 0)
        return Expr(tuple((a, c * k) for a, c in self.terms), self.const * k)

    __rmul__ = __mul__

    @property
    def is_const(self) -> bool:
        return not self.terms

    def as_atom(self) -> Atom | None:
        """The atom if this expression is exactly one atom with coefficient 1."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None


def _memoize(cls: type) -> None:
    """Keep the first result of ``cls``'s (dataclass-made) ``__hash__`` and ``__repr__`` on the
    instance: the classes are immutable, so neither can change."""
    def memo(fn: Callable, slot: str) -> Callable:
        def kept(self):
            try:
                return object.__getattribute__(self, slot)
            except AttributeError:
                value = fn(self)
                object.__setattr__(self, slot, value)
                return value
        kept.__name__, kept.__doc__ = fn.__name__, fn.__doc__
        return kept

    cls.__hash__ = memo(cls.__hash__, "_h")
    cls.__repr__ = memo(cls.__repr__, "_r")


for _cls in (FloorDiv, Mod, MinOf, MaxOf, Lookup, Loaded, Expr):
    _memoize(_cls)


def const(c: int) -> Expr:
    return Expr((), int(c))


def var(i: int) -> Expr:
    return Expr(((Var(i), 1),), 0)


def loaded(name: str, n: int) -> Expr:
    return Expr(((Loaded(name, int(n)), 1),), 0)


def _as_expr(x: Expr | int) -> Expr:
    return x if isinstance(x, Expr) else const(int(x))


def _atom(a: Atom) -> Expr:
    return Expr(((a, 1),), 0)


def _make(terms: list[tuple[Atom, int]], c: int) -> Expr:
    """Collect like terms, recombine ``k*d*(x//d) + k*(x%d)`` into ``k*x``, sort."""
    acc: dict[Atom, int] = {}
    for a, k in terms:
        acc[a] = acc.get(a, 0) + k
    changed = any(type(a) is Mod for a in acc)
    while changed:
        changed = False
        for a in list(acc):
            if isinstance(a, Mod) and acc.get(a, 0):
                fd = FloorDiv(a.x, a.d)
                k = acc[a]
                if acc.get(fd, 0) == k * a.d:
                    del acc[a], acc[fd]
                    for xa, xk in a.x.terms:
                        acc[xa] = acc.get(xa, 0) + xk * k
                    c += a.x.const * k
                    changed = True
                    break
    items = [(a, k) for a, k in acc.items() if k != 0]
    if len(items) > 1:
        items.sort(key=lambda t: repr(t[0]))
    return Expr(tuple(items), int(c))


# ---------------------------------------------------------------------------------------------
# Bounds and simplifying constructors
# ---------------------------------------------------------------------------------------------

def bounds(e: Expr, sizes: Sequence[int]) -> tuple[int, int]:
    """Inclusive integer bounds of ``e`` when variable ``i`` ranges over ``[0, sizes[i])``."""
    lo = hi = e.const
    for a, k in e.terms:
        alo, ahi = _atom_bounds(a, sizes)
        if k >= 0:
            lo, hi = lo + k * alo, hi + k * ahi
        else:
            lo, hi = lo + k * ahi, hi + k * alo
    return lo, hi


def _atom_bounds(a: Atom, sizes: Sequence[int]) -> tuple[int, int]:
    if isinstance(a, Var):
        return 0, max(int(sizes[a.i]) - 1, 0)
    if isinstance(a, FloorDiv):
        lo, hi = bounds(a.x, sizes)
        return lo // a.d, hi // a.d
    if isinstance(a, Mod):
        lo, hi = bounds(a.x, sizes)
        if lo >= 0 and hi < a.d:
            return lo, hi
        return 0, a.d - 1
    if isinstance(a, (MinOf, MaxOf)):
        alo, ahi = bounds(a.a, sizes)
        blo, bhi = bounds(a.b, sizes)
        if isinstance(a, MinOf):
            return min(alo, blo), min(ahi, bhi)
        return max(alo, blo), max(ahi, bhi)
    if isinstance(a, Lookup):
        return min(a.table), max(a.table)
    if isinstance(a, Loaded):
        return 0, max(a.n - 1, 0)
    raise TypeError(a)


def floordiv(e: Expr | int, d: int, sizes: Sequence[int]) -> Expr:
    e = _as_expr(e)
    if d <= 0:
        raise ValueError("floordiv by a non-positive constant")
    if d == 1:
        return e
    q_terms, r_terms = [], []
    for a, k in e.terms:
        (q_terms.append((a, k // d)) if k % d == 0 else r_terms.append((a, k)))
    q = _make(q_terms, e.const // d)
    r = _make(r_terms, e.const % d)
    lo, hi = bounds(r, sizes)
    if lo // d == hi // d:
        return q + lo // d
    inner = r.as_atom()
    if isinstance(inner, FloorDiv):
        return q + _atom(FloorDiv(inner.x, inner.d * d))
    return q + _atom(FloorDiv(r, d))


def mod(e: Expr | int, d: int, sizes: Sequence[int]) -> Expr:
    e = _as_expr(e)
    if d <= 0:
        raise ValueError("mod by a non-positive constant")
    if d == 1:
        return const(0)
    r = _make([(a, k) for a, k in e.terms if k % d != 0], e.const % d)
    lo, hi = bounds(r, sizes)
    if lo >= 0 and hi < d:
        return r
    if lo // d == hi // d:
        return r - (lo // d) * d
    inner = r.as_atom()
    if isinstance(inner, Mod) and inner.d % d == 0:
        return mod(inner.x, d, sizes)
    return _atom(Mod(r, d))


def minimum(a: Expr | int, b: Expr | int, sizes: Sequence[int]) -> Expr:
    a, b = _as_expr(a), _as_expr(b)
    alo, ahi = bounds(a, sizes)
    blo, bhi = bounds(b, sizes)
    if ahi <= blo:
        return a
    if bhi <= alo:
        return b
    return _atom(MinOf(*sorted((a, b), key=repr)))


def maximum(a: Expr | int, b: Expr | int, sizes: Sequence[int]) -> Expr:
    a, b = _as_expr(a), _as_expr(b)
    alo, ahi = bounds(a, sizes)
    blo, bhi = bounds(b, sizes)
    if alo >= bhi:
        return a
    if blo >= ahi:
        return b
    return _atom(MaxOf(*sorted((a, b), key=repr)))


def lookup(table: Sequence[int], x: Expr | int, sizes: Sequence[int]) -> Expr:
    """``table[x]``, simplified to an affine expression when the used part of the table is one."""
    x = _as_expr(x)
    table = tuple(int(t) for t in table)
    lo, hi = bounds(x, sizes)
    lo, hi = max(lo, 0), min(hi, len(table) - 1)
    if x.is_const:
        return const(table[min(max(x.const, 0), len(table) - 1)])
    used = table[lo:hi + 1]
    if len(used) == 1:
        return const(used[0])
    step = used[1] - used[0]
    if all(used[i + 1] - used[i] == step for i in range(len(used) - 1)):
        return (x - lo) * step + used[0]
    return _atom(Lookup(table, x))


# ---------------------------------------------------------------------------------------------
# Substitution, evaluation, rendering
# ---------------------------------------------------------------------------------------------

def substitute(e: Expr, values: Sequence[Expr], sizes: Sequence[int]) -> Expr:
    """Replace variable ``i`` by ``values[i]``; ``sizes`` are the ranges of the new variables."""
    out = const(e.const)
    for a, k in e.terms:
        out = out + _subst_atom(a, values, sizes) * k
    return out


def _subst_atom(a: Atom, values: Sequence[Expr], sizes: Sequence[int]) -> Expr:
    if isinstance(a, Var):
        return values[a.i]
    if isinstance(a, FloorDiv):
        return floordiv(substitute(a.x, values, sizes), a.d, sizes)
    if isinstance(a, Mod):
        return mod(substitute(a.x, values, sizes), a.d, sizes)
    if isinstance(a, MinOf):
        return minimum(substitute(a.a, values, sizes), substitute(a.b, values, sizes), sizes)
    if isinstance(a, MaxOf):
        return maximum(substitute(a.a, values, sizes), substitute(a.b, values, sizes), sizes)
    if isinstance(a, Lookup):
        return lookup(a.table, substitute(a.x, values, sizes), sizes)
    if isinstance(a, Loaded):
        return _atom(a)
    raise TypeError(a)


def evaluate(e: Expr, env: Sequence):
    """Evaluate with Python/NumPy integer semantics (floor division); ``env[i]`` is variable i."""
    out = e.const
    for a, k in e.terms:
        out = out + k * _eval_atom(a, env)
    return out


def _eval_atom(a: Atom, env: Sequence):
    if isinstance(a, Var):
        return env[a.i]
    if isinstance(a, FloorDiv):
        return evaluate(a.x, env) // a.d
    if isinstance(a, Mod):
        return evaluate(a.x, env) % a.d
    if isinstance(a, MinOf):
        return np.minimum(evaluate(a.a, env), evaluate(a.b, env))
    if isinstance(a, MaxOf):
        return np.maximum(evaluate(a.a, env), evaluate(a.b, env))
    if isinstance(a, Lookup):
        idx = np.clip(evaluate(a.x, env), 0, len(a.table) - 1)
        return np.asarray(a.table, dtype=np.int64)[idx]
    raise TypeError(a)


def free_vars(e: Expr) -> set[int]:
    out: set[int] = set()
    for a, _ in e.terms:
        if isinstance(a, Var):
            out.add(a.i)
        elif isinstance(a, (FloorDiv, Mod, Lookup)):
            out |= free_vars(a.x)
        elif isinstance(a, (MinOf, MaxOf)):
            out |= free_vars(a.a) | free_vars(a.b)
    return out


def render(e: Expr, name: Callable[[int], str], sizes: Sequence[int],
           table: Callable[[tuple[int, ...]], str] | None = None,
           floordiv_fn: str = "kn_floordiv", mod_fn: str = "kn_mod",
           min_fn: str = "kn_min", max_fn: str = "kn_max", div: str = "/",
           lookup: Callable[[Lookup, str], str] | None = None) -> str:
    """Print ``e`` as C-like source (every printer's index arithmetic: C by default; Triton passes
    ``div="//"``, its helpers and ``lookup``). Plain ``div`` and ``%`` where the dividend is
    provably non-negative (truncation equals floor there), the given helper functions otherwise.
    A table lookup prints as ``table(t)[x]`` clamped where ``x`` may leave the table, or as
    ``lookup(atom, rendered x)``."""

    def go(e: Expr) -> str:
        parts = []
        for a, k in e.terms:
            s = atom(a)
            parts.append(s if k == 1 else f"{k} * {s}")
        if e.const or not parts:
            parts.append(str(e.const))
        return " + ".join(parts).replace("+ -", "- ")

    def atom(a: Atom) -> str:
        if isinstance(a, Var):
            return name(a.i)
        if isinstance(a, (FloorDiv, Mod)):
            x = go(a.x)
            nonneg = bounds(a.x, sizes)[0] >= 0
            if isinstance(a, FloorDiv):
                return f"(({x}) {div} {a.d})" if nonneg else f"{floordiv_fn}({x}, {a.d})"
            return f"(({x}) % {a.d})" if nonneg else f"{mod_fn}({x}, {a.d})"
        if isinstance(a, (MinOf, MaxOf)):
            fn = min_fn if isinstance(a, MinOf) else max_fn
            return f"{fn}({go(a.a)}, {go(a.b)})"
        if isinstance(a, Lookup):
            x = go(a.x)
            if lookup is not None:
                return lookup(a, x)
            if table is None:
                raise ValueError("rendering a table lookup needs a table printer")
            lo, hi = bounds(a.x, sizes)
            if lo < 0 or hi >= len(a.table):  # masked-out positions: stay inside the table (as evaluate clips)
                x = f"{min_fn}({max_fn}({x}, 0), {len(a.table) - 1})"
            return f"{table(a.table)}[{x}]"
        if isinstance(a, Loaded):
            return a.name
        raise TypeError(a)

    return go(e)
