"""Brute-force oracles for the orchestrator tests, written without the code under test: subsets
of nodes for candidates, shortest paths over available-value states and plain subset enumeration
for plans."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable, Sequence

from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.synthetic import random_dag
from hypothesis import settings
from hypothesis import strategies as st


def reaches(dag: Dag, a: int, b: int) -> bool:
    """Is there a path a -> ... -> b (length >= 1)?"""
    todo, seen = list(dag.succs[a]), set()
    while todo:
        n = todo.pop()
        if n == b:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(dag.succs[n])
    return False


def convex_by_paths(dag: Dag, s: frozenset[int]) -> bool:
    """No outside node lies on a path between two members."""
    return not any(
        o not in s and any(reaches(dag, a, o) for a in s) and any(reaches(dag, o, b) for b in s) for o in dag.nodes
    )


def connected(dag: Dag, s: frozenset[int]) -> bool:
    start = min(s)
    seen, todo = {start}, [start]
    while todo:
        n = todo.pop()
        for m in (*dag.preds[n], *dag.succs[n]):
            if m in s and m not in seen:
                seen.add(m)
                todo.append(m)
    return seen == s


def legal_sets(dag: Dag, max_nodes: int, single_sink: bool = False) -> set[frozenset[int]]:
    """Every subset that is convex, connected, within the size bound, with at most one linear node
    and no opaque node unless alone (and, with single_sink, exactly one sink)."""
    out = set()
    for r in range(1, min(max_nodes, len(dag.nodes)) + 1):
        for combo in itertools.combinations(dag.nodes, r):
            s = frozenset(combo)
            kinds = [dag.kind[n] for n in s]
            if kinds.count("linear") > 1 or ("opaque" in kinds and r > 1):
                continue
            if not connected(dag, s) or not convex_by_paths(dag, s):
                continue
            sinks = [n for n in s if not any(c in s for c in dag.succs[n])]
            if single_sink and len(sinks) != 1:
                continue
            out.add(s)
    return out


def legal_candidates(dag: Dag, max_nodes: int, multi: bool) -> set[Candidate]:
    """Both flavours, as the enumerator documents them."""
    out = set()
    for s in legal_sets(dag, max_nodes, single_sink=not multi):
        inputs = frozenset(p for n in s for p in dag.preds[n] if p not in s)
        sinks = frozenset(n for n in s if not any(c in s for c in dag.succs[n]))
        if len(sinks) == 1:
            out.add(Candidate(s, sinks, inputs))
        if multi:
            esc = frozenset(n for n in s if n in dag.outputs or any(c not in s for c in dag.succs[n]))
            out.add(Candidate(s, esc | sinks, inputs))
    return out


def cheapest_plan(dag: Dag, cands: Iterable[Candidate], cost: Callable[[Candidate], float | None]) -> float:
    """Least total cost of any executable plan: Dijkstra over sets of values in memory; a step
    runs one kernel whose inputs are all in memory. Any executable plan is such a path."""
    priced = [(c, cost(c)) for c in cands]
    steps = [(c, p) for c, p in priced if p is not None]
    bit = {n: 1 << i for i, n in enumerate(dag.nodes)}

    def mask(vs: Iterable[int]) -> int:
        return sum(bit[v] for v in vs)

    moves = [(mask(c.inputs), mask(c.outputs), p) for c, p in steps]
    goal = mask(dag.outputs)
    best = {0: 0.0}
    heap = [(0.0, 0)]
    while heap:
        d, state = heapq.heappop(heap)
        if state & goal == goal:
            return d
        if d > best.get(state, float("inf")):
            continue
        for need, give, p in moves:
            if need & state == need and give | state != state:
                nxt, nd = state | give, d + p
                if nd < best.get(nxt, float("inf")) - 1e-15:
                    best[nxt] = nd
                    heapq.heappush(heap, (nd, nxt))
    return float("inf")


def executable(dag: Dag, kernels: Sequence[Candidate]) -> bool:
    """Some order runs every kernel after its inputs are written, and the outputs get written."""
    avail: set[int] = set()
    left = list(kernels)
    while left:
        ready = [k for k in left if k.inputs <= avail]
        if not ready:
            return False
        for k in ready:
            avail |= k.outputs
            left.remove(k)
    return dag.outputs <= avail


def cheapest_subset(dag: Dag, cands: Sequence[Candidate], cost: Callable[[Candidate], float | None]) -> float:
    """Literal brute force: every subset of candidates, kept if executable."""
    priced = [(c, cost(c)) for c in cands]
    usable = [(c, p) for c, p in priced if p is not None]
    best = float("inf")
    for r in range(1, len(usable) + 1):
        for combo in itertools.combinations(usable, r):
            total = sum(p for _, p in combo)
            if total < best and executable(dag, [c for c, _ in combo]):
                best = total
    return best


def random_cost(seed: int) -> Callable[[Candidate], float]:
    """A fixed random price per candidate (depends only on its nodes and outputs)."""

    def cost(c: Candidate) -> float:
        rng = random.Random(f"{seed}:{sorted(c.nodes)}:{sorted(c.outputs)}")
        return round(rng.uniform(1.0, 10.0), 3)

    return cost


@st.composite
def small_dags(draw: st.DrawFn, max_nodes: int = 8, min_nodes: int = 4, opaque: bool = True) -> Dag:
    """Random narrow dags (see synthetic.random_dag) of min_nodes..max_nodes nodes, every sink an
    output."""
    n = draw(st.sampled_from(range(max_nodes, min(min_nodes, max_nodes) - 1, -1)))  # biggest first
    seed = draw(st.integers(0, 10**6))
    preds = draw(st.integers(1, 3))
    kinds = {"elementwise": 5, "reduce": 2, "broadcast": 1, "layout": 1, "linear": 1, "opaque": 0.3 if opaque else 0}
    return random_dag(seed, n, max_preds=preds, window=draw(st.integers(2, 5)), kinds=kinds)


def profile(examples: int) -> settings:
    """The deterministic hypothesis profile of these tests: fixed examples, no deadline, no database."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None)


def structural_key(dag: Dag) -> Callable[[Candidate], str]:
    """A canonical key like the IR's: kinds, sizes and wiring relative to the candidate, so the
    same kernel in two identical layers gets one key."""

    def key(c: Candidate) -> str:
        order = sorted(c.nodes, key=dag.position.__getitem__)
        local = {n: i for i, n in enumerate(order)}
        parts = []
        for n in order:
            ins = tuple(f"L{local[p]}" if p in local else f"X{dag.nbytes[p]}" for p in dag.preds[n])
            parts.append((dag.kind[n], dag.nbytes[n], dag.flops[n], dag.input_bytes[n], ins, n in c.outputs))
        return repr(parts)

    return key
