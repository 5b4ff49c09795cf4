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
prices as its costs; ``report.priced_hot_s`` keeps the first plan's prices timed alone. The compile
then times the kept plan end to end and prices it once more in the same rounds (``CallProfiles``
passed to ``race``), one profiled call after each timed turn: a profile taken a second before or
after the timing would see another state of a machine whose speed drifts (a shared VM's 1.6x).
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
from kernorch.orchestrate.solver import SolverError
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
            try:
                nxt = orchestrate(dag, plan.strategy, measured, measured.can_generate, None, knobs)
            except SolverError:  # no plan of measured kernels only: keep the plans found so far
                break
            if _identity(nxt) in done or nxt.regions:
                break
            plan, built = nxt, build(nxt)
    finally:
        measured.fallback = fallback
    if len(tried) == 1:
        return tried[0]
    # Profiles taken one after the other differ by the machine's drift: race the plans
    # interleaved (the compile prices the winner again as it times it: CallProfiles).
    med = race({str(k): ex for k, (_, ex) in enumerate(tried)}, feeds, RACE_ROUNDS, RACE_S)
    return tried[int(min(med, key=med.__getitem__))]


def _hot(plan: Plan, measured) -> list[float]:
    """The plan's kernel prices timed alone (0 where unknown)."""
    return [measured.hot(c) or 0.0 for c in plan.kernels]


def _priced_in_call(plan: Plan, built: Executable, feeds) -> tuple[Plan, float]:
    """(``plan`` with its kernels' in-call times as costs, seconds per call); the executable's
    kernel infos get the same times."""
    per_kernel, call_s = built.profile_in_call(feeds, PROFILE_CALLS, PROFILE_S)
    return _costed(plan, built, per_kernel), call_s


def _costed(plan: Plan, built: Executable, per_kernel: list[float]) -> Plan:
    """``plan`` with ``per_kernel`` as its kernels' costs, and ``built``'s kernel infos with them."""
    for info, t in zip(built.infos, per_kernel):
        info.seconds = t
    return dataclasses.replace(plan, costs=tuple(per_kernel), cost=sum(per_kernel))


class CallProfiles:
    """One executable profiled one call at a time (``race`` calls it after each of its turns), so its
    in-call prices and its end-to-end time come from the same rounds of the same machine state."""

    def __init__(self, built: Executable, feeds) -> None:
        self.built, self.feeds = built, feeds
        self.calls: list[list[float]] = []

    def __call__(self) -> None:
        self.calls.append(self.built.profile_in_call(self.feeds, 1, warmup=0)[0])

    def priced(self, plan: Plan) -> Plan:
        """``plan`` (the one ``built`` runs) costed at the median of each kernel's profiled times."""
        return _costed(plan, self.built, [statistics.median(ts) for ts in zip(*self.calls)])


def race(runs: dict[str, Executable], feeds, rounds: int = 7, min_seconds: float = 0.3,
         lead: bool = False, profile: CallProfiles | None = None) -> dict[str, float]:
    """Median seconds per call of each executable, called in turn round after round (so drift
    hits all alike), after two warm-up rounds, at least ``rounds`` rounds and ``min_seconds``.
    ``lead``: each timed call follows untimed calls of its own for benchmark.LEAD_S, as a deployed
    model runs (when other runtimes take part: their spinning threads would be timed instead).
    ``profile``: called after each timed turn of the executable it profiles."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    end = math.inf
    for r in range(1000):
        for name, ex in runs.items():
            if r >= 2 and lead:
                turn(ex.run, feeds, times[name], 0.0)
            else:
                t = time.perf_counter()
                ex.run(feeds)
                if r >= 2:  # warm-up rounds
                    times[name].append(time.perf_counter() - t)
            if r >= 2 and profile is not None and ex is profile.built:
                profile()
        if r == 2:
            end = time.perf_counter() + min_seconds
        if r >= rounds + 1 and time.perf_counter() >= end:
            break
    return {k: statistics.median(v) for k, v in times.items()}


def _identity(plan: Plan) -> frozenset:
    return frozenset((c.nodes, c.outputs) for c in plan.kernels)
