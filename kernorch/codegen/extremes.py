"""Comparisons of a value with its own maximum or minimum, and what keeps them exact.

Note [extreme tests]
ArgMax/ArgMin (and Hardmax) are fissioned into ``m = rmax(x)``, ``hit = x == m`` and the first
position of a hit; a peak test ``x == maxpool(x)`` is the same shape. Such a test is only right
when the ``x`` it compares is, bit for bit, the ``x`` the reduction saw. A kernel that inlines
``x`` computes it again in every loop that reads it, and two evaluations of one expression may
differ: with libmvec a vectorized loop calls the SIMD ``expf`` and a scalar loop (or a scalar
epilogue) the scalar one, an ulp apart; a GEMM recomputed by another kernel sums in another
order. Then no element equals the extreme and ArgMin returns n, out of range (fuzz seed 102514).
The same holds across kernels: one kernel reduces its own evaluation of ``x``, another compares
its own. So, by construction, every reading goes through one stored evaluation:

- a kernel that holds the reduction and the comparison and computes ``x`` stores ``x`` once
  (schedule.make_schedule materializes it) and both read that;
- a kernel that holds only one of the two must read ``x`` from memory rather than compute it
  (feasible.why_not); the other kernel then reads the same buffer or computes and stores ``x`` itself.

Views and broadcasts between ``x`` and the reduction or the comparison are loads, exact anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernorch.ir.prims import Op, Prim

ORDERED = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})
EXTREMES = frozenset({Op.RMAX, Op.RMIN})
_LOADS = frozenset({Op.VIEW, Op.BROADCAST})


@dataclass(frozen=True)
class Test:
    """``compare`` compares ``value`` (through loads) with ``reduce``, a max/min of ``value``."""

    compare: int
    reduce: int
    value: int


def source(v: int, producers: Mapping[int, Prim]) -> int:
    """The value ``v`` loads from: ``v`` with views and broadcasts (among ``producers``) peeled off."""
    while v in producers and producers[v].op in _LOADS:
        v = producers[v].inputs[0]
    return v


def tests(prims: Iterable[Prim]) -> list[Test]:
    """Every comparison among ``prims`` of a value with a max/min reduction of that same value."""
    prims = list(prims)
    producers = {p.output: p for p in prims}
    out = []
    for p in prims:
        if p.op not in ORDERED:
            continue
        a, b = (source(v, producers) for v in p.inputs)
        for x, m in ((a, b), (b, a)):
            r = producers.get(m)
            if r is not None and r.op in EXTREMES and source(r.inputs[0], producers) == x:
                out.append(Test(p.output, m, x))
    return out


def split_test(found: Iterable[Test], members: set[int]) -> Test | None:
    """A test whose reduction and comparison ``members`` splits while computing the compared
    value itself (see Note [extreme tests]); None when there is none."""
    for t in found:
        if t.value in members and (t.compare in members) != (t.reduce in members):
            return t
    return None


def stored_values(prims: Iterable[Prim]) -> set[int]:
    """The values a kernel of ``prims`` must store once: compared with their own extreme, both
    computed in the kernel."""
    prims = list(prims)
    inside = {p.output for p in prims}
    return {t.value for t in tests(prims) if {t.compare, t.reduce, t.value} <= inside}
