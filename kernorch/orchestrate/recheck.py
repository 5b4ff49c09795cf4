"""Alternatives the solver declined are timed again before the plan is final.

A price is the median of a few samples taken in one batch. On a machine whose speed drifts (a
shared VM), a batch timed in a slow phase prices every kernel in it high; when that batch held
fused kernels (a convolution with its relu or its residual add), the solver splits them, and as
identical blocks share one key, one unlucky batch splits every block alike. Seen on ResNet-50
(2 threads, a Zen 4 VM): a 1x1 convolution with its residual add and relu stored at 837 us against
530 us for the convolution alone, so all six layer-3 blocks ran the add and relu as kernels of
their own; timed again, in turn with its parts, the fused kernel took 513-542 us.

So once every kernel of the plan is measured, for each two plan kernels a and b where b reads
what a writes, the solver's declined alternatives over the same prims are timed again together
with a and b, all in turn (``MeasuredCost.retime``: a slow phase then hits them alike), and the
plan is solved again: their union (a fusion), and the memory-bound prims at their border moved
across it (b's elementwise prologue into a's epilogue, or a's elementwise epilogue into b's
prologue: ResNet-50's relu after a 1x1 convolution ran as the prologue of the next 3x3 one), each
where the alternative is convex, priced, and priced above a and b. A key is re-timed at most once
per compile, and an alternative re-timed with its kernels by an earlier compile on the same database
is not re-timed again (the prices carry the flag ``retimed``): a warm compile skips this step.
"""

from __future__ import annotations

from collections.abc import Callable

from kernorch.orchestrate.candidate import Candidate, is_convex, multi_output
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.plan import Plan

# At most this many candidates are re-timed per solve (the alternatives closest to paying first).
RECHECK_MAX = 96


MOVABLE = ("elementwise", "broadcast", "layout")  # kinds of prims a border move may carry


def declined(dag: Dag, plan: Plan, price: Callable[[Candidate], float | None]) -> list[tuple[Candidate, ...]]:
    """For plan kernels a and b (neither a provider region), b reading what a writes: (a, b, the
    alternative's kernels) for each alternative over their prims (their union; b's movable
    prologue into a; a's movable epilogue into b) that is convex and priced, by ``price`` (which
    must not measure), above a and b apart; the alternatives closest to paying first."""
    found: dict[tuple[frozenset[int], ...], tuple[float, tuple[Candidate, ...]]] = {}
    regions = set(plan.regions)
    for k, b in enumerate(plan.kernels):
        if k in regions:
            continue
        for j in sorted(set(plan.sources[k].values()) - regions):
            a = plan.kernels[j]
            pair = price(a), price(b)
            if None in pair:
                continue
            for alt in _alternatives(dag, a, b):
                ids = tuple(c.nodes for c in alt)
                if ids in found or not all(is_convex(dag, c.nodes) for c in alt):
                    continue
                prices = [price(c) for c in alt]
                if None not in prices and sum(prices) > sum(pair):
                    found[ids] = (sum(prices) / sum(pair), (a, b, *alt))
    return [cands for _, cands in sorted(found.values(), key=lambda t: t[0])]


def _alternatives(dag: Dag, a: Candidate, b: Candidate) -> list[tuple[Candidate, ...]]:
    """The other partitions of a's and b's prims that recheck() considers (see the module doc)."""
    alts = [(multi_output(dag, a.nodes | b.nodes),)]
    prologue: set[int] = set()
    for n in sorted(b.nodes, key=dag.position.__getitem__):  # computed from outside b by movable prims
        if dag.kind[n] in MOVABLE and all(p in prologue or p not in b.nodes for p in dag.preds.get(n, ())):
            prologue.add(n)
    epilogue: set[int] = set()
    for n in sorted(a.nodes, key=dag.position.__getitem__, reverse=True):  # read inside a by movable prims only
        if dag.kind[n] in MOVABLE and all(s in epilogue or s not in a.nodes for s in dag.succs[n]):
            epilogue.add(n)
    for moved, src, dst in ((prologue, b, a), (epilogue, a, b)):
        if moved and moved != src.nodes:
            alts.append((multi_output(dag, dst.nodes | moved), multi_output(dag, src.nodes - moved)))
    return alts


def recheck(dag: Dag, plan: Plan, measured, done: set[str]) -> bool:
    """Re-time the alternatives ``plan`` declined and the kernels they replace (keys not in
    ``done``, which gains them); True when something was re-timed, so the plan must be solved
    again. A measurer without ``retime`` (one that does not time kernels one by one) re-times
    nothing."""
    retime = getattr(measured, "retime", None)
    if retime is None:
        return False
    todo: dict[str, Candidate] = {}
    settled = getattr(measured, "settled", lambda c: False)
    for cands in declined(dag, plan, measured.hot):
        if all(settled(c) for c in cands):  # re-timed together before (a warm database): settled
            continue
        for c in cands:
            if len(todo) < RECHECK_MAX and measured.key(c) not in done:
                todo.setdefault(measured.key(c), c)
    if not todo:
        return False
    done.update(todo)
    retime(list(todo.values()))
    return True
