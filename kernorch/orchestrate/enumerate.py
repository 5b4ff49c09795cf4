"""Enumerate legal candidate kernels of one segment: convex, weakly connected sets of nodes, pruned
by kind rules, a size bound and the code generator's feasibility hook. Dag + segment -> candidates.

Note [growing convex sets]
Korch enumerates execution states (downsets) and takes differences of nested states; that visits
every pair of states, which grows with the segment's width. We grow sets instead: start from each
node and add one neighbour at a time, keeping only convex sets, deduplicated by bitset. This
yields exactly the weakly connected convex sets (up to `max_kernel_nodes`):
- removing a source or a sink of a convex set leaves it convex (a path through the removed node
  would have to enter it from outside, which convexity of the larger set forbids);
- a connected set of >= 2 nodes has a source or sink that is not a cut vertex (a leaf block of
  its block-cut tree has both a source and a sink, at most one of them the block's cut vertex);
- so every connected convex set shrinks to one node through connected convex sets, and growing
  reverses that chain. The kind rules and the size bound only shrink under removal, so pruning
  during growth loses nothing.
Sets with one sink grow by adding predecessors only: every member reaches the sink, so removing
any source keeps the set connected and single-sink.

Note [set budget]
A segment's sets are bounded (`max_sets`) because the binary program's difficulty grows with them.
The sets of one size are many where the segment is dense (rotary embeddings: views, negations,
concats around every head) and few along a chain (an embedding gather into its norm: one set per
size). When a size would overflow the budget, it keeps whole groups of sets (grouped by their
first node) from the smallest group up, within half the room left (the other half is for their
growth), and only those keep growing: a chain still reaches its full length while the dense
places stop early. Cutting every place at the same size instead
left a Llama decoder without its gather + RMS norm kernel (9 prims, budget reached at size 6).

Why connected only: a disconnected kernel is horizontal fusion of independent pieces. Its traffic
and arithmetic are the sum of its components', so it saves only a launch; enumerating it would
multiply the candidates by the number of combinations of unrelated pieces. We leave it out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.dag import Dag

CanGenerate = Callable[[Candidate], bool]


@dataclass
class EnumerationStats:
    """Counts of what enumeration kept and why it dropped the rest (shown by `explain`)."""

    sets: int = 0
    candidates: int = 0
    truncated_segments: int = 0
    rejected: Counter[str] = field(default_factory=Counter)


class _Segment:
    """Bitset view of a contiguous topological range of the dag: bit i is `nodes[i]`."""

    def __init__(self, dag: Dag, nodes: Sequence[int]) -> None:
        self.nodes = tuple(nodes)
        local = {n: i for i, n in enumerate(self.nodes)}
        m = len(self.nodes)
        self.pred_bits = [0] * m
        self.succ_bits = [0] * m
        self.ext_preds: list[frozenset[int]] = []
        self.leaks = [False] * m
        for i, n in enumerate(self.nodes):
            ext = []
            for p in dag.preds.get(n, ()):
                if p in local:
                    self.pred_bits[i] |= 1 << local[p]
                else:
                    ext.append(p)
            self.ext_preds.append(frozenset(ext))
            for s in dag.succs[n]:
                if s in local:
                    self.succ_bits[i] |= 1 << local[s]
                else:
                    self.leaks[i] = True
            self.leaks[i] = self.leaks[i] or n in dag.outputs
        self.desc = [0] * m
        for i in reversed(range(m)):
            bits = self.succ_bits[i]
            d = bits
            while bits:
                low = bits & -bits
                d |= self.desc[low.bit_length() - 1]
                bits ^= low
            self.desc[i] = d
        self.anc = [0] * m
        for i in range(m):
            bits = self.pred_bits[i]
            a = bits
            while bits:
                low = bits & -bits
                a |= self.anc[low.bit_length() - 1]
                bits ^= low
            self.anc[i] = a

    def members(self, s: int) -> list[int]:
        out = []
        while s:
            low = s & -s
            out.append(low.bit_length() - 1)
            s ^= low
        return out


def _grow(
    seg: _Segment, dag: Dag, max_nodes: int, preds_only: bool, stats: EnumerationStats, max_sets: int | None = None
) -> list[int]:
    """All connected convex bitsets of the segment obeying the kind rules, smallest first.
    See Note [growing convex sets]. With `max_sets`, a size whose sets would take the total past
    it keeps only what fits, sparsest places first (Note [set budget])."""
    kinds = [dag.kind[n] for n in seg.nodes]
    linear = [1 if k == "linear" else 0 for k in kinds]
    opaque = [k == "opaque" for k in kinds]
    nbr = seg.pred_bits if preds_only else [p | s for p, s in zip(seg.pred_bits, seg.succ_bits)]
    found = [1 << i for i in range(len(seg.nodes))]
    seen = set(found)
    level = [(1 << i, seg.desc[i], seg.anc[i], nbr[i], linear[i]) for i in range(len(seg.nodes)) if not opaque[i]]
    size = 1
    truncated = False
    while level and size < max_nodes:
        nxt = []
        for s, d, a, frontier, nlin in level:
            rem = frontier
            while rem:
                low = rem & -rem
                rem ^= low
                s2 = s | low
                if s2 in seen:
                    continue
                seen.add(s2)
                w = low.bit_length() - 1
                if opaque[w]:
                    stats.rejected["opaque with others"] += 1
                    continue
                if nlin + linear[w] > 1:
                    stats.rejected["two linear prims"] += 1
                    continue
                d2 = d | seg.desc[w]
                a2 = a | seg.anc[w]
                if d2 & a2 & ~s2:
                    stats.rejected["not convex"] += 1
                    continue
                found.append(s2)
                nxt.append((s2, d2, a2, (frontier | nbr[w]) & ~s2, nlin + linear[w]))
        if max_sets is not None and len(found) > max_sets:
            del found[len(found) - len(nxt):]
            kept = _sparsest(nxt, (max_sets - len(found) + 1) // 2)
            stats.rejected[f"set budget: size {size + 1}+"] += len(nxt) - len(kept)
            stats.truncated_segments += not truncated
            truncated = True
            found += [t[0] for t in kept]
            nxt = kept
        level = nxt
        size += 1
    return found


def _sparsest(level: list[tuple], room: int) -> list[tuple]:
    """The sets of one size that fit in `room`, taken in whole groups by lowest member, the
    groups with the fewest sets first (Note [set budget])."""
    groups: dict[int, list[tuple]] = {}
    for t in level:
        groups.setdefault(t[0] & -t[0], []).append(t)
    chosen, n = set(), 0
    for anchor in sorted(groups, key=lambda a: (len(groups[a]), a)):
        if n + len(groups[anchor]) > room:
            break
        chosen.add(anchor)
        n += len(groups[anchor])
    return [t for t in level if t[0] & -t[0] in chosen]


def convex_sets(
    dag: Dag, nodes: Sequence[int], *, max_kernel_nodes: int, single_sink: bool = False
) -> list[frozenset[int]]:
    """Weakly connected convex sets of `nodes` (a contiguous topological range of `dag`) with at
    most `max_kernel_nodes` nodes, at most one linear node, and no opaque node unless alone.
    With `single_sink`, only the sets with exactly one sink."""
    seg = _Segment(dag, nodes)
    bits = _grow(seg, dag, max_kernel_nodes, single_sink, EnumerationStats())
    return [frozenset(seg.nodes[i] for i in seg.members(s)) for s in bits]


def count_sets(dag: Dag, nodes: Sequence[int], *, max_kernel_nodes: int, multi_output: bool,
               max_sets: int | None = None) -> int:
    """How many sets `enumerate_candidates` would enumerate (before the generator's checks):
    cheap bitset work, used to share a tuning budget out by need."""
    return len(_grow(_Segment(dag, nodes), dag, max_kernel_nodes, not multi_output, EnumerationStats(), max_sets))


def enumerate_candidates(
    dag: Dag,
    nodes: Sequence[int],
    *,
    max_kernel_nodes: int,
    multi_output: bool,
    can_generate: CanGenerate | None = None,
    stats: EnumerationStats | None = None,
    max_sets: int | None = None,
) -> list[Candidate]:
    """Candidates of one segment, in a deterministic order.

    Single-output mode (Korch): one candidate per single-sink set, writing the sink.
    Multi-output mode: additionally one candidate per set writing every member needed outside it;
    for a single-sink set both flavours are kept when they differ, because writing fewer values
    can be cheaper when another kernel recomputes the rest. `max_sets` bounds the sets per
    segment by lowering the size bound for this segment (the binary program's difficulty grows
    quickly with its size; a dense segment gets smaller kernels rather than no answer)."""
    stats = stats if stats is not None else EnumerationStats()
    seg = _Segment(dag, nodes)
    bits = _grow(seg, dag, max_kernel_nodes, not multi_output, stats, max_sets)
    stats.sets += len(bits)
    out: list[Candidate] = []
    for s in bits:
        idx = seg.members(s)
        members = frozenset(seg.nodes[i] for i in idx)
        inputs = set().union(*(seg.ext_preds[i] for i in idx))
        sinks = []
        escaping = []
        for i in idx:
            inputs.update(seg.nodes[j] for j in seg.members(seg.pred_bits[i] & ~s))
            inside = seg.succ_bits[i] & s
            if not inside:
                sinks.append(seg.nodes[i])
            if seg.leaks[i] or seg.succ_bits[i] != inside:
                escaping.append(seg.nodes[i])
        ins = frozenset(inputs)
        flavours = []
        if len(sinks) == 1:
            flavours.append(frozenset(sinks))
        if multi_output:
            multi = frozenset(escaping).union(sinks)
            if not flavours or multi != flavours[0]:
                flavours.append(multi)
        for outs in flavours:
            cand = Candidate(members, outs, ins)
            if can_generate is not None and not can_generate(cand):
                stats.rejected["cannot generate"] += 1
                continue
            out.append(cand)
    stats.candidates += len(out)
    return out
