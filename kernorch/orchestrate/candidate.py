"""Candidate kernels: a set of dag nodes plus the values the kernel reads and writes.

Two flavours share one type. Single-output (Korch): the set has one sink and writes only it.
Multi-output: the kernel writes every member read outside the set or that is a graph output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernorch.orchestrate.dag import Dag


@dataclass(frozen=True)
class Candidate:
    """A kernel: computes `nodes`, writes `outputs` to memory, reads `inputs` (dag nodes outside
    `nodes` that some member reads). Members not in `outputs` live only inside the kernel."""

    nodes: frozenset[int]
    outputs: frozenset[int]
    inputs: frozenset[int]

    def __repr__(self) -> str:
        return f"Candidate(nodes={sorted(self.nodes)}, outputs={sorted(self.outputs)}, inputs={sorted(self.inputs)})"


def inputs_of(dag: Dag, nodes: Iterable[int]) -> frozenset[int]:
    """Nodes read by the set but outside it."""
    s = set(nodes)
    return frozenset(p for n in s for p in dag.preds.get(n, ()) if p not in s)


def sinks_of(dag: Dag, nodes: Iterable[int]) -> frozenset[int]:
    """Members that no other member reads."""
    s = set(nodes)
    return frozenset(n for n in s if not any(c in s for c in dag.succs[n]))


def escaping(dag: Dag, nodes: Iterable[int]) -> frozenset[int]:
    """Members whose value is needed outside the set: read by a non-member or a graph output."""
    s = set(nodes)
    return frozenset(n for n in s if n in dag.outputs or any(c not in s for c in dag.succs[n]))


def single_output(dag: Dag, nodes: Iterable[int]) -> Candidate | None:
    """The Korch flavour: only for sets with exactly one sink, which is the only value written."""
    s = frozenset(nodes)
    sinks = sinks_of(dag, s)
    if len(sinks) != 1:
        return None
    return Candidate(s, sinks, inputs_of(dag, s))


def multi_output(dag: Dag, nodes: Iterable[int]) -> Candidate:
    """The multi-output flavour: writes every member needed outside the set, and at least the
    sinks (a sink nobody reads is still the point of computing the set)."""
    s = frozenset(nodes)
    return Candidate(s, escaping(dag, s) | sinks_of(dag, s), inputs_of(dag, s))


def is_convex(dag: Dag, nodes: Iterable[int]) -> bool:
    """True iff no path leaves the set and comes back: no outside node is both a descendant and
    an ancestor of members. Plain search; the enumerator uses bitsets instead."""
    s = set(nodes)
    if not s:
        return True
    lo = min(dag.position[n] for n in s)
    hi = max(dag.position[n] for n in s)
    below: set[int] = set()
    for n in dag.nodes[lo : hi + 1]:
        if n not in s and any(p in s or p in below for p in dag.preds.get(n, ())):
            below.add(n)
    return not any(p in below for n in s for p in dag.preds.get(n, ()))


def is_connected(dag: Dag, nodes: Iterable[int]) -> bool:
    """True iff the set is weakly connected (edges taken in both directions)."""
    s = set(nodes)
    if not s:
        return False
    start = next(iter(s))
    seen = {start}
    todo = [start]
    while todo:
        n = todo.pop()
        for m in (*dag.preds.get(n, ()), *dag.succs[n]):
            if m in s and m not in seen:
                seen.add(m)
                todo.append(m)
    return len(seen) == len(s)
