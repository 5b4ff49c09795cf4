"""Groups of prims planned as one node: a quantized model has a chain of five or six elementwise
prims per QuantizeLinear and three per DequantizeLinear, so its graph holds about five times the
prims of the float model and enumeration (every candidate measured) grows with it. Where a prim's
only reader is the next prim of a short chain, no plan gains by cutting between them (the cut
writes a full tensor that is read straight back), so such groups are contracted before planning
and expanded in the plan: the enumeration sees a model of the float model's size.

Each group is an in-tree: every member but its root has exactly one reader, inside the group,
and is no graph output, so only the root's value is read outside it. The contracted node takes
the root's id, which is the value other kernels read, so a contracted candidate expands to the
original one by replacing its nodes and keeping its inputs and outputs. Which prims form groups
is the caller's (IR-aware) decision (orchestrate/from_graph.py ``chained_prims``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import Plan, build_plan


@dataclass(frozen=True)
class Contraction:
    """``dag`` with each group replaced by its root; ``members[root]`` lists the original nodes."""

    original: Dag
    dag: Dag
    members: Mapping[int, tuple[int, ...]]

    def expand(self, c: Candidate) -> Candidate:
        return Candidate(self.expand_nodes(c.nodes), c.outputs, c.inputs)

    def expand_nodes(self, nodes: Iterable[int]) -> frozenset[int]:
        return frozenset(m for n in nodes for m in self.members[n])

    def lift(self, fn: Callable | None) -> Callable | None:
        """``fn`` of an original candidate, as a function of a contracted one."""
        return None if fn is None else (lambda c: fn(self.expand(c)))

    def knobs(self, knobs: Knobs) -> Knobs:
        """``knobs`` for the contracted dag: no groups left, and each seed that is a union of
        whole groups mapped to its roots (a seed cutting a group is dropped)."""
        root = {m: r for r, ms in self.members.items() for m in ms}
        seeds = []
        for s in knobs.seeds:
            roots = frozenset(root[n] for n in s if n in root)
            if roots and self.expand_nodes(roots) == s:
                seeds.append(roots)
        return dataclasses.replace(knobs, groups=(), seeds=tuple(seeds))

    def expand_plan(self, plan: Plan) -> Plan:
        return build_plan(self.original, [self.expand(c) for c in plan.kernels], plan.costs, plan.strategy,
                          plan.report, plan.stats, plan.regions)


def contract(dag: Dag, groups: Iterable[Iterable[int]]) -> Contraction:
    """Contract each group of ``dag`` that is an in-tree of its nodes (see the module docstring);
    a group that is not one here (a member dead or read outside, say) is left alone."""
    root: dict[int, int] = {}
    for group in groups:
        nodes = [n for n in group if n in dag.position]
        if len(nodes) < 2 or len(nodes) != len(set(group)) or any(n in root for n in nodes):
            continue  # dead members, or overlapping another group
        top = max(nodes, key=dag.position.__getitem__)
        inside = set(nodes)
        if all(n == top or (n not in dag.outputs and set(dag.succs[n]) <= inside) for n in nodes):
            root.update((n, top) for n in nodes if n not in root)
    members: dict[int, list[int]] = {}
    for n in dag.nodes:
        members.setdefault(root.get(n, n), []).append(n)
    order = tuple(n for n in dag.nodes if root.get(n, n) == n)
    preds = {r: tuple(dict.fromkeys(root.get(p, p) for m in ms for p in dag.preds.get(m, ()) if root.get(p, p) != r))
             for r, ms in members.items()}
    small = Dag(order, preds, dag.outputs, {r: dag.kind[r] for r in order}, {r: dag.group[r] for r in order},
                {r: dag.nbytes[r] for r in order}, {r: sum(dag.flops[m] for m in members[r]) for r in order},
                {r: sum(dag.input_bytes[m] for m in members[r]) for r in order})
    return Contraction(dag, small, {r: tuple(ms) for r, ms in members.items()})
