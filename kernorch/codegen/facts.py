"""Facts about one graph that every kernel template and check reads: prim positions and kinds,
each kernel's member prims in order, the comparisons of a value with its own max/min; computed
once per graph and held weakly by it. The bottom of the code generator: it imports no template.
"""

from __future__ import annotations

import weakref
from typing import Iterable

from kernorch.codegen import extremes
from kernorch.errors import KernorchError
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Prim


class CannotGenerate(KernorchError):
    """The code generator cannot produce this kernel; the message says why."""


class GraphFacts:
    """Per-graph facts the checks need, computed once: prim positions, kinds, and the per-prim
    reason (or None) a kernel of each generator could not hold it."""

    def __init__(self, g: Graph) -> None:
        self.n = len(g.prims)
        self.pos = {p.output: k for k, p in enumerate(g.prims)}
        self.kind = {p.output: p.kind for p in g.prims}
        self.prim_reason: dict[tuple[str, int], str | None] = {}  # (generator, value) -> reason
        # comparisons of a computed value with its own max/min (Note [extreme tests])
        self.tests = [t for t in extremes.tests(g.prims) if t.value in self.pos]


_FACTS: "weakref.WeakKeyDictionary[Graph, GraphFacts]" = weakref.WeakKeyDictionary()


def graph_facts(g: Graph) -> GraphFacts:
    info = _FACTS.get(g)
    if info is None or info.n != len(g.prims):
        info = _FACTS[g] = GraphFacts(g)
    return info


def kernel_prims(g: Graph, members: Iterable[int]) -> list[Prim]:
    """The member prims in graph (topological) order; O(members) after the first call per graph,
    since the orchestrator asks about thousands of candidates of one graph."""
    pos = graph_facts(g).pos
    return [g.prims[k] for k in sorted(pos[v] for v in members if v in pos)]
