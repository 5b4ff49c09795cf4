"""Dead-code removal as a pass of its own: prims that no graph output depends on are dropped, and
so are constants nothing reads. (The rewrite driver also removes dead prims as it goes, so that use
counts stay exact for the rules; this function is for callers that only want the cleanup.)"""

from __future__ import annotations

from kernorch.ir.graph import Graph, verify
from kernorch.ir.prims import ValueId


def live_values(g: Graph) -> set[ValueId]:
    """Output ids of prims that some graph output depends on."""
    producers = g.producers()
    live: set[ValueId] = set()
    stack = [v for v in g.outputs if v in producers]
    while stack:
        v = stack.pop()
        if v in live:
            continue
        live.add(v)
        stack.extend(i for i in producers[v].inputs if i in producers)
    return live


def remove_dead(g: Graph) -> tuple[Graph, int]:
    """A new graph without dead prims and unread constants; inputs and outputs are kept as they
    are. Returns it and the number of prims removed."""
    live = live_values(g)
    out = Graph()
    out.prims = [p for p in g.prims if p.output in live]
    used = set(g.inputs) | set(g.outputs)
    for p in out.prims:
        used.add(p.output)
        used.update(p.inputs)
    out.types = {v: t for v, t in g.types.items() if v in used}
    out.inputs = list(g.inputs)
    out.outputs = list(g.outputs)
    out.constants = {v: a for v, a in g.constants.items() if v in used}
    out.names = {v: n for v, n in g.names.items() if v in used}
    verify(out)
    return out, len(g.prims) - len(out.prims)
