"""Fusions the solver declined are timed again before the plan is final.

A price is the median of a few samples taken in one batch. On a machine whose speed drifts (a
shared VM), a batch timed in a slow phase prices every kernel in it high; when that batch held
fused kernels (a convolution with its relu or its residual add), the solver splits them, and as
identical blocks share one key, one unlucky batch splits every block alike. Seen on ResNet-50
(2 threads, a Zen 4 VM): a 1x1 convolution with its residual add and relu stored at 837 us against
530 us for the convolution alone, so all six layer-3 blocks ran the add and relu as kernels of
their own; timed again, in turn with its parts, the fused kernel took 513-542 us.

So once every kernel of the plan is measured, each fusion of two plan kernels that the solver
declined (one reads what the other writes, their union is a convex candidate with a price, and
that price exceeds the two apart) is timed again together with its two parts, all in turn
(``MeasuredCost.retime``: a slow phase then hits the three alike), and the plan is solved again.
A key is re-timed at most once per compile.
"""

from __future__ import annotations

from collections.abc import Callable

from kernorch.orchestrate.candidate import Candidate, is_convex, multi_output
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.plan import Plan

# At most this many candidates are re-timed per solve (the cheapest-looking fusions first).
RECHECK_MAX = 96


def declined_fusions(dag: Dag, plan: Plan, price: Callable[[Candidate], float | None]
                     ) -> list[tuple[Candidate, Candidate, Candidate]]:
    """(a, b, a+b) for each plan kernel b reading what plan kernel a writes (neither a provider
    region) whose union is convex and priced above a and b apart, by ``price`` (which must not
    measure); the fusions closest to paying first."""
    found: dict[frozenset[int], tuple[float, tuple[Candidate, Candidate, Candidate]]] = {}
    regions = set(plan.regions)
    for k, b in enumerate(plan.kernels):
        if k in regions:
            continue
        for j in sorted(set(plan.sources[k].values()) - regions):
            a = plan.kernels[j]
            nodes = a.nodes | b.nodes
            if nodes in found or not is_convex(dag, nodes):
                continue
            both = multi_output(dag, nodes)
            prices = [price(c) for c in (a, b, both)]
            if None in prices or prices[2] <= prices[0] + prices[1]:
                continue
            found[nodes] = (prices[2] / (prices[0] + prices[1]), (a, b, both))
    return [trio for _, trio in sorted(found.values(), key=lambda t: t[0])]


def recheck(dag: Dag, plan: Plan, measured, done: set[str]) -> bool:
    """Re-time the fusions ``plan`` declined and their parts (keys not in ``done``, which gains
    them); True when something was re-timed, so the plan must be solved again. A measurer
    without ``retime`` (one that does not time kernels one by one) re-times nothing."""
    retime = getattr(measured, "retime", None)
    if retime is None:
        return False
    todo: dict[str, Candidate] = {}
    for trio in declined_fusions(dag, plan, measured.hot):
        for c in trio:
            if len(todo) < RECHECK_MAX and measured.key(c) not in done:
                todo.setdefault(measured.key(c), c)
    if not todo:
        return False
    done.update(todo)
    retime(list(todo.values()))
    return True
