"""Cut a dag into segments at narrow points of its topological order. Dag -> list[Segment].

A cut between positions p-1 and p is crossed by every value computed before p and read at or
after p. Candidates never cross a cut, so every crossing value is written to memory; with dead
nodes removed (`Dag.without_dead`) every node must be computed, so each crossing value is a
required output of its segment and the segments' programs are independent: the optimum of the
whole is the sum of the segments' optima (over the candidates that cross no cut).

Knobs (see `Knobs`):
- `max_segment_nodes`: the largest segment. It bounds each binary program, not enumeration
  (which is local, see Note [growing convex sets]); larger segments lose fewer candidates.
- `max_cut_width`: a cut crossed by at most this many values is "narrow". Cuts are chosen
  automatically; a forced cut (no narrow point in reach) is flagged on the segment.
- `max_kernel_nodes`: the largest candidate. Among narrow cuts, the one forbidding the fewest
  fusions wins (Note [fusable width]).

Note [fusable width]
Not every crossing value costs a fusion. A value v read by s across the cut could share a kernel
with s only if the convex hull of {v, s} (v, s and every node on a path between them) is a legal
candidate: at most `max_kernel_nodes` nodes, at most one linear node, no opaque node. A residual
stream value read a whole attention block later can never share a kernel with its reader, so a
cut it crosses costs nothing; an embedding gather read by the norm right after it can. Counting
raw widths, a Llama decoder was cut between its token embedding (width 1: only the embedding is
live) and the RMS norm, so the gather + norm kernel was never enumerated. Hence cuts are ranked by
the values with a fusable crossing read.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernorch.orchestrate.dag import Dag


@dataclass(frozen=True)
class Segment:
    """A contiguous range of the topological order. `width` values cross the cut at its end (0 for
    the last); `cut_values` are those of them computed in this segment, which it must write.
    `forced` means the cut was not narrow (see `partition`)."""

    nodes: tuple[int, ...]
    width: int
    cut_values: frozenset[int]
    forced: bool


def cut_widths(dag: Dag) -> list[int]:
    """widths[p] = number of values crossing the cut before position p (p in 0..n)."""
    pos = dag.position
    return _widths(dag, lambda v: max((pos[s] for s in dag.succs[v]), default=-1))


def fusable_widths(dag: Dag, max_kernel_nodes: int, reach: int) -> list[int]:
    """widths[p] = number of values computed before p that some node at or after p reads and
    could share a kernel with (Note [fusable width]). Reads spanning `reach` or more positions are
    never fusable: no segment holds both ends."""
    pos = dag.position
    return _widths(dag, lambda v: max((pos[s] for s in dag.succs[v] if pos[s] - pos[v] < reach
                                       and _fusable(dag, v, s, max_kernel_nodes)), default=-1))


def _widths(dag: Dag, last_reader) -> list[int]:
    """widths[p] = number of values v with position(v) < p <= last_reader(v) (a position)."""
    n = len(dag.nodes)
    pos = dag.position
    delta = [0] * (n + 2)
    for v in dag.nodes:
        last = last_reader(v)
        if last > pos[v]:
            delta[pos[v] + 1] += 1
            delta[last + 1] -= 1
    widths, running = [], 0
    for p in range(n + 1):
        running += delta[p]
        widths.append(running)
    return widths


def _fusable(dag: Dag, v: int, s: int, max_kernel_nodes: int) -> bool:
    """Whether the convex hull of the read v -> s is a legal candidate (size and kind rules)."""
    pos = dag.position
    lo, hi = pos[v], pos[s]
    down = {v}  # v and its descendants before s
    for u in dag.nodes[lo + 1:hi]:
        if any(p in down for p in dag.preds.get(u, ())):
            down.add(u)
    hull = {s}
    stack = [s]
    while stack:
        for p in dag.preds.get(stack.pop(), ()):
            if p in down and p not in hull:
                hull.add(p)
                stack.append(p)
    kinds = [dag.kind[u] for u in hull]
    return len(hull) <= max_kernel_nodes and "opaque" not in kinds and kinds.count("linear") <= 1


def _group_splits(dag: Dag, reach: int | None = None) -> list[int]:
    """splits[p] = number of operator groups with nodes on both sides of the cut before p. A group
    spanning `reach` or more positions fits in no segment and is left out: common-subexpression
    elimination shares one prim between layers (a rotary embedding's broadcast cos/sin), and such
    a group would otherwise make every cut of a whole layer count as splitting it."""
    n = len(dag.nodes)
    span: dict[str, tuple[int, int]] = {}
    for i, v in enumerate(dag.nodes):
        g = dag.group[v]
        lo, _ = span.get(g, (i, i))
        span[g] = (lo, i)
    delta = [0] * (n + 2)
    for lo, hi in span.values():
        if hi > lo and (reach is None or hi - lo < reach):
            delta[lo + 1] += 1
            delta[hi + 1] -= 1
    splits, running = [], 0
    for p in range(n + 1):
        running += delta[p]
        splits.append(running)
    return splits


def partition(dag: Dag, *, max_segment_nodes: int, max_cut_width: int,
              max_kernel_nodes: int | None = None) -> list[Segment]:
    """Segments of at most `max_segment_nodes` nodes. From each segment start, the cut is the
    best position in reach by, in order: narrow (width <= `max_cut_width`); splits no operator
    group (so per-operator kernels stay inside one segment); at least half the maximum size
    (no tiny segments); thinnest; latest. Given `max_kernel_nodes`, narrow and thin count only
    the crossing values that could share a kernel with a reader (Note [fusable width]); a
    segment's `width` is always the raw count."""
    if max_segment_nodes < 1:
        raise ValueError("max_segment_nodes must be >= 1")
    n = len(dag.nodes)
    widths = cut_widths(dag)
    thin = widths if max_kernel_nodes is None else fusable_widths(dag, max_kernel_nodes, max_segment_nodes)
    splits = _group_splits(dag, None if max_kernel_nodes is None else max_segment_nodes)
    segments: list[Segment] = []
    start = 0
    while start < n:
        end = min(n, start + max_segment_nodes)
        if end < n:
            half = start + max(1, max_segment_nodes // 2)
            end = min(
                range(start + 1, end + 1),
                key=lambda p: (thin[p] > max_cut_width, splits[p] > 0, p < half, thin[p], -p),
            )
        crossing = frozenset(
            v for v in dag.nodes[start:end] if any(dag.position[s] >= end for s in dag.succs[v])
        )
        segments.append(Segment(dag.nodes[start:end], widths[end], crossing, thin[end] > max_cut_width))
        start = end
    return segments
