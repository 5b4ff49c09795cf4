"""Joins across segment cuts: the binary program sees one segment at a time (partition.py), so a
kernel straddling a cut is never one of its candidates. Where a cut falls between an elementwise
tail and its reader (SegFormer's decode head: four upsampled branches summed, more prims than a
segment holds), the plan writes a full-size tensor to memory and reads it back in the next segment.

So after the segments are solved, every pair of plan kernels on the two sides of a cut where one
reads what the other writes is priced joined (the multi-output flavour: it still writes what other
kernels read). The join saving the most replaces its pair, and the search repeats until no join is
cheaper than its pair. Joins are priced with the same cost as every candidate, so they are measured
and checked against the interpreter like the rest; a join the cost cannot price is never taken.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernorch.orchestrate.baselines import kind_rules_ok
from kernorch.orchestrate.candidate import Candidate, is_convex, multi_output
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.partition import Segment
from kernorch.orchestrate.pricing import Pricer


def join_across_cuts(dag: Dag, segments: Sequence[Segment], kernels: Sequence[Candidate], costs: Sequence[float],
                     pricer: Pricer, max_nodes: int) -> tuple[list[Candidate], list[float], int]:
    """(kernels, costs, joins made): ``kernels`` (an executable order) with pairs across segment
    cuts replaced by their join while that is cheaper, in an executable order again. A join holds
    at most ``max_nodes`` prims, at most one linear prim, no opaque prim, and is convex."""
    segment_of = {n: i for i, s in enumerate(segments) for n in s.nodes}
    kernels, costs = list(kernels), list(costs)
    priced: dict[frozenset[int], tuple[Candidate, float] | None] = {}
    joins = 0
    while True:
        best = None
        writer: dict[int, int] = {}
        for k, cand in enumerate(kernels):
            for v in cand.outputs:
                writer.setdefault(v, k)
        for j, b in enumerate(kernels):
            for v in sorted(b.inputs):
                i = writer.get(v)
                if i is None or i == j or len({segment_of[n] for n in kernels[i].nodes | b.nodes}) == 1:
                    continue  # a pair inside one segment: the binary program weighed its joins already
                nodes = kernels[i].nodes | b.nodes
                if nodes not in priced:
                    priced[nodes] = _priced_join(dag, nodes, pricer, max_nodes)
                found = priced[nodes]
                if found is not None and found[1] < costs[i] + costs[j]:
                    saving = costs[i] + costs[j] - found[1]
                    if best is None or saving > best[0]:
                        best = (saving, i, j, *found)
        if best is None:
            return kernels, costs, joins
        _, i, j, joined, price = best
        rest = [(c, p) for k, (c, p) in enumerate(zip(kernels, costs)) if k not in (i, j)]
        order = _executable_order(dag, [c for c, _ in rest] + [joined])
        if order is None:
            priced[joined.nodes] = None  # no order runs it: the pair stays apart
            continue
        pairs = rest + [(joined, price)]
        kernels, costs = [pairs[k][0] for k in order], [pairs[k][1] for k in order]
        joins += 1


def _priced_join(dag: Dag, nodes: frozenset[int], pricer: Pricer, max_nodes: int) -> tuple[Candidate, float] | None:
    """The join of ``nodes`` and its price, or None when it breaks a rule or has no price."""
    if len(nodes) > max_nodes or not kind_rules_ok(dag, nodes) or not is_convex(dag, nodes):
        return None
    joined = multi_output(dag, nodes)
    price = pricer.price(joined)
    return None if price is None else (joined, price)


def _executable_order(dag: Dag, kernels: Sequence[Candidate]) -> list[int] | None:
    """Indices of ``kernels`` in an order where every kernel's inputs are written before it (or
    are graph inputs), keeping the given order where it can; None if there is none."""
    placed: list[int] = []
    written: set[int] = set()
    left = list(range(len(kernels)))
    while left:
        k = next((k for k in left if all(v in written or v not in dag.position for v in kernels[k].inputs)), None)
        if k is None:
            return None
        left.remove(k)
        placed.append(k)
        written |= kernels[k].outputs
    return placed
