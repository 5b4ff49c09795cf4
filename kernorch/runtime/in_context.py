"""Pricing in context: kernels are priced alone, hot in cache, but run in a model after other
kernels that evicted their weights, next to Python dispatch and buffer adoption, and take longer
there, unevenly (``model.summary()`` and the bench's kn-own table show a plan priced both ways),
so a solver on prices timed alone compares numbers that are not the model's.

So a measured compile builds its plan and times every kernel *inside* real calls of it
(``Executable.profile_in_call``), prices those kernels at what they took there and every other
candidate at its measured price scaled by what being in the model did to the kernels seen of its
provider (PricedCandidates.price_in_context), and solves again. A new plan is built and timed
the same way. After ``Knobs.context_rounds`` plans (or when the solver returns a plan already
timed) the plans are raced end to end, interleaved, and the fastest is kept with its in-context
prices as its costs; ``report.priced_hot_s`` keeps the first plan's prices timed alone.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import Plan
from kernorch.orchestrate.strategies import orchestrate
from kernorch.runtime.benchmark import turn
from kernorch.runtime.executable import Executable

PROFILE_CALLS = 12  # calls timed step by step per plan (fewer past PROFILE_S, at least 3)
PROFILE_S = 1.0
RACE_ROUNDS, RACE_S = 7, 0.1  # the plans tried, raced end to end: at least this many rounds and seconds


def refine_in_context(dag: Dag, plan: Plan, built: Executable, measured, knobs: Knobs, feeds,
                      build: Callable[[Plan], Executable], rep) -> tuple[Plan, Executable]:
    """The fastest of the plans found by pricing in context, starting from ``plan`` (built as
    ``built``), with its in-context kernel times as its costs. ``measured``: the compile's
    PricedCandidates (every candidate the solver may pick is already priced; nothing is
    measured here). Records the rounds in ``rep.context_rounds``."""
    rep.priced_hot_s = sum(_hot(plan, measured))
    tried: list[tuple[Plan, Executable]] = []
    done: set[frozenset] = set()
    fallback, measured.fallback = measured.fallback, (lambda c: None)  # never measure here
    try:
        for r in range(max(1, knobs.context_rounds)):
            hot = _hot(plan, measured)
            priced, call_s = _priced_in_call(plan, built, feeds)
            tried.append((priced, built))
            rep.context_rounds.append((len(plan.kernels), sum(hot), call_s))
            if r + 1 == knobs.context_rounds:
                break
            done.add(_identity(plan))
            measured.price_in_context(dict(zip((measured.key(c) for c in plan.kernels), priced.costs)))
            nxt = orchestrate(dag, plan.strategy, measured, measured.can_generate, None, knobs)
            if _identity(nxt) in done or nxt.regions:
                break
            plan, built = nxt, build(nxt)
    finally:
        measured.fallback = fallback
    if len(tried) == 1:
        return tried[0]
    # Profiles taken one after the other differ by the machine's drift: race the plans
    # interleaved, and price the winner again now, as the compile is about to time it.
    med = race({str(k): ex for k, (_, ex) in enumerate(tried)}, feeds, RACE_ROUNDS, RACE_S)
    plan, built = tried[int(min(med, key=med.__getitem__))]
    return _priced_in_call(plan, built, feeds)[0], built


def _hot(plan: Plan, measured) -> list[float]:
    """The plan's kernel prices timed alone (0 where unknown)."""
    return [measured.hot(c) or 0.0 for c in plan.kernels]


def _priced_in_call(plan: Plan, built: Executable, feeds) -> tuple[Plan, float]:
    """(``plan`` with its kernels' in-call times as costs, seconds per call); the executable's
    kernel infos get the same times."""
    per_kernel, call_s = built.profile_in_call(feeds, PROFILE_CALLS, PROFILE_S)
    for info, t in zip(built.infos, per_kernel):
        info.seconds = t
    return dataclasses.replace(plan, costs=tuple(per_kernel), cost=sum(per_kernel)), call_s


def race(runs: dict[str, Executable], feeds, rounds: int = 7, min_seconds: float = 0.3,
         lead: bool = False) -> dict[str, float]:
    """Median seconds per call of each executable, called in turn round after round (so drift
    hits all alike), after two warm-up rounds, at least ``rounds`` rounds and ``min_seconds``.
    ``lead``: each timed call follows untimed calls of its own for benchmark.LEAD_S, as a deployed
    model runs (when other runtimes take part: their spinning threads would be timed instead)."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    end = math.inf
    for r in range(1000):
        for name, ex in runs.items():
            if r >= 2 and lead:
                turn(ex.run, feeds, times[name], 0.0)
                continue
            t = time.perf_counter()
            ex.run(feeds)
            if r >= 2:  # warm-up rounds
                times[name].append(time.perf_counter() - t)
        if r == 2:
            end = time.perf_counter() + min_seconds
        if r >= rounds + 1 and time.perf_counter() >= end:
            break
    return {k: statistics.median(v) for k, v in times.items()}


def _identity(plan: Plan) -> frozenset:
    return frozenset((c.nodes, c.outputs) for c in plan.kernels)
