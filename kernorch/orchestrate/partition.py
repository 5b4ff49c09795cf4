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
"""

from __future__ import annotations

from dataclasses import dataclass

from kernorch.orchestrate.dag import Dag


@dataclass(frozen=True)
class Segment:
    """A contiguous range of the topological order. `width` values cross the cut at its end (0 for
    the last); `cut_values` are those of them computed in this segment, which it must write.
    `forced` means the cut was not narrow."""

    nodes: tuple[int, ...]
    width: int
    cut_values: frozenset[int]
    forced: bool


def cut_widths(dag: Dag) -> list[int]:
    """widths[p] = number of values crossing the cut before position p (p in 0..n)."""
    n = len(dag.nodes)
    delta = [0] * (n + 2)
    pos = dag.position
    for v in dag.nodes:
        last = max((pos[s] for s in dag.succs[v]), default=-1)
        if last > pos[v]:
            delta[pos[v] + 1] += 1
            delta[last + 1] -= 1
    widths, running = [], 0
    for p in range(n + 1):
        running += delta[p]
        widths.append(running)
    return widths


def _group_splits(dag: Dag) -> list[int]:
    """splits[p] = number of operator groups with nodes on both sides of the cut before p."""
    n = len(dag.nodes)
    span: dict[str, tuple[int, int]] = {}
    for i, v in enumerate(dag.nodes):
        g = dag.group[v]
        lo, _ = span.get(g, (i, i))
        span[g] = (lo, i)
    delta = [0] * (n + 2)
    for lo, hi in span.values():
        if hi > lo:
            delta[lo + 1] += 1
            delta[hi + 1] -= 1
    splits, running = [], 0
    for p in range(n + 1):
        running += delta[p]
        splits.append(running)
    return splits


def partition(dag: Dag, *, max_segment_nodes: int, max_cut_width: int) -> list[Segment]:
    """Segments of at most `max_segment_nodes` nodes. From each segment start, the cut is the
    best position in reach by, in order: narrow (width <= `max_cut_width`); splits no operator
    group (so per-operator kernels stay inside one segment); at least half the maximum size
    (no tiny segments); thinnest; latest."""
    if max_segment_nodes < 1:
        raise ValueError("max_segment_nodes must be >= 1")
    n = len(dag.nodes)
    widths = cut_widths(dag)
    splits = _group_splits(dag)
    segments: list[Segment] = []
    start = 0
    while start < n:
        end = min(n, start + max_segment_nodes)
        if end < n:
            half = start + max(1, max_segment_nodes // 2)
            end = min(
                range(start + 1, end + 1),
                key=lambda p: (widths[p] > max_cut_width, splits[p] > 0, p < half, widths[p], -p),
            )
        crossing = frozenset(
            v for v in dag.nodes[start:end] if any(dag.position[s] >= end for s in dag.succs[v])
        )
        segments.append(Segment(dag.nodes[start:end], widths[end], crossing, widths[end] > max_cut_width))
        start = end
    return segments
