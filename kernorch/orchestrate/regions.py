"""Provider regions: runs of consecutive segments handed whole to one external runtime.

A segment's kernel plan pays one dispatch per kernel, and a vendor runtime (OpenVINO,
onnxruntime) compiling a large subgraph at once can fold, prepack and fuse across what are many
kernels here. So besides its optimal kernel plan, every run of consecutive segments i..j may run
as one *region* kernel (the union of the segments is convex: segments are ranges of one
topological order). Which runs to hand over is a shortest path over the segment chain:

    best[j + 1] = min(best[j] + plan_cost(j),  min_i best[i] + region_cost(i, j))

Pricing every run would measure O(n^2) subgraphs, so a run that has not been priced is estimated
as the sum of its segments' region prices minus ``join_saving_s`` per joint (one dispatch fewer).
The path is recomputed until every run it picks has been priced for real: each round prices at
least one new run, and the final choice rests on priced runs only.

Note [near ties stop the search]
The estimate makes every unpriced join look a little cheaper than its parts, and a priced join
comes out a few per cent above or below its estimate by measurement noise alone. On BERT-base
(38 segments, every run of layers alike) the search kept finding another near-whole-model run
estimated a hair cheaper than the last one priced, and priced it: 14 runs of 40-180 ms, each
exported, verified and timed on two runtimes, for 20+ minutes. So the search stops as soon as
the best path over priced runs is within ``tolerance`` of the estimated optimum: what more
pricing could win is below what it can measure. (The whole graph as one region is still tried
end to end after planning, runtime/compile.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Interval = tuple[int, int]  # (first segment, last segment), inclusive


def choose_regions(
    plan_costs: Sequence[float],
    region_cost: Callable[[int, int], float | None],
    join_saving_s: float = 20e-6,
    max_rounds: int = 64,
    tolerance: float = 0.0,
) -> list[Interval]:
    """The runs of segments to execute as regions (ascending); the other segments keep their
    kernel plans. ``plan_costs[s]`` is segment s's kernel plan cost; ``region_cost(i, j)`` prices
    segments i..j as one region (None: no provider can run it). The search ends when the best
    path over priced runs costs at most ``1 + tolerance`` times the estimated optimum
    (Note [near ties stop the search])."""
    n = len(plan_costs)
    priced: dict[Interval, float | None] = {}

    def price(i: int, j: int) -> float | None:
        if (i, j) not in priced:
            priced[(i, j)] = region_cost(i, j)
        return priced[(i, j)]

    single = [price(s, s) for s in range(n)]
    chosen: list[Interval] = []
    for _ in range(max_rounds):
        chosen = _shortest_path(plan_costs, single, priced, join_saving_s)
        fresh = [iv for iv in chosen if iv not in priced]
        if not fresh:
            return chosen
        sure = _shortest_path(plan_costs, single, priced, None)
        if _cost(plan_costs, sure, priced) <= (1 + tolerance) * _estimate(plan_costs, chosen, single, priced,
                                                                          join_saving_s):
            return sure
        for iv in fresh:
            price(*iv)
    # Out of rounds (not seen in practice): keep only what has been priced.
    return [iv for iv in _shortest_path(plan_costs, single, priced, None) if iv in priced]


def _estimate(plan_costs: Sequence[float], runs: Sequence[Interval], single: Sequence[float | None],
              priced: dict[Interval, float | None], join_saving_s: float) -> float:
    """The path's cost with unpriced runs estimated as in `_shortest_path`."""
    total = _cost(plan_costs, [iv for iv in runs if iv in priced], priced)
    for i, j in runs:
        if (i, j) not in priced:
            total += sum(single[i:j + 1]) - (j - i) * join_saving_s - sum(plan_costs[i:j + 1])  # type: ignore[arg-type]
    return total


def _cost(plan_costs: Sequence[float], runs: Sequence[Interval], priced: dict[Interval, float | None]) -> float:
    """Kernel plans outside the runs plus the runs' prices."""
    inside = {s for i, j in runs for s in range(i, j + 1)}
    return sum(c for s, c in enumerate(plan_costs) if s not in inside) + sum(priced[iv] or 0.0 for iv in runs)


def _shortest_path(plan_costs: Sequence[float], single: Sequence[float | None],
                   priced: dict[Interval, float | None], join_saving_s: float | None) -> list[Interval]:
    """Cheapest cover of the chain; unpriced runs are estimated (``join_saving_s``) or, when it is
    None, not allowed."""
    n = len(plan_costs)
    inf = float("inf")
    best = [0.0] + [inf] * n
    back: list[Interval | None] = [None] * (n + 1)
    for j in range(n):
        cand = best[j] + plan_costs[j]
        if cand < best[j + 1]:
            best[j + 1], back[j + 1] = cand, None
        run = 0.0
        for i in range(j, -1, -1):
            s = single[i]
            if s is None:
                break  # no longer run through segment i can be estimated; priced ones below
            run += s
            if (i, j) in priced:
                c = priced[(i, j)]
            elif join_saving_s is None:
                continue
            else:
                c = run - (j - i) * join_saving_s
            if c is not None and best[i] + c < best[j + 1]:
                best[j + 1], back[j + 1] = best[i] + c, (i, j)
    out: list[Interval] = []
    j = n
    while j > 0:
        iv = back[j]
        if iv is None:
            j -= 1
        else:
            out.append(iv)
            j = iv[0]
    return out[::-1]
