"""Planning on measured costs: the rounds of pricing by estimate, measuring what the plan picked and
solving again until every kernel of the plan is measured (``plan_kernels``), shared by every target."""

from __future__ import annotations

import dataclasses

from kernorch.errors import KernorchError
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate import learned_pricing
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import Plan
from kernorch.orchestrate.recheck import recheck
from kernorch.orchestrate.strategies import orchestrate
from kernorch.runtime.progress import progress_bar as _progress_bar
from kernorch.runtime.report import CompileReport, record_measurements

ESTIMATED_ROUNDS = 8  # measuring rounds whose plans may hold unmeasured kernels (plan_kernels)
LEARNED_ROUNDS = 12  # rounds measuring only the kernels the plan picked (learned tuning); then every candidate


def no_plan_error(e: Exception, measured) -> KernorchError:
    """The solver found no plan: say it in the user's terms (which kernels failed, what to try),
    not as the binary program's status."""
    failed = measured.stats.failed  # every target's measurer keeps MeasureStats
    first = (measured.stats.failures or [""])[0]
    why = (f"{failed} candidate kernel(s) failed to build or to match the reference interpreter"
           + (f" (first: {first[:160]})" if first else "")) if failed else \
        "no candidate kernel computes some part of it (an operator no kernel provider can run here)"
    return KernorchError(f"no kernel plan computes the whole model: {why}; run `kernorch check` on the model to "
                         f"see whether kernorch can run it at all")


def plan_kernels(dag, strategy: str, cost: str, rough, measured, key_fn, knobs: Knobs, rep: CompileReport,
                 progress: bool, where: str) -> Plan:
    """Orchestrate on modelled costs, or in passes on measured ones. Pass 1 prices kernels by an
    estimate and provider regions by measurement (regions.py) and records which candidates the
    strategy prices, leaving out those of segments it hands to a region: with regions, the
    estimate is the roofline scaled to this machine's measured per-operator kernels (their total
    measured time over their total roofline time), and a segment's plan is assumed no faster than
    its measured per-operator kernels divided by ``knobs.region_prune_gain``, so a segment is
    tuned only when its kernels might beat the region. The recorded candidates are measured in
    batches, the strategy runs again on measured costs (the estimate standing in for anything
    unmeasured), and any kernel of the plan still unmeasured is measured and the strategy rerun,
    so every kernel of the final plan was verified and timed; in a plan without regions, every join
    across segment cuts the round priced by the estimate is measured with it (joins chain, and one
    join a round ran out of rounds). Shared by every target."""
    if cost == "model":
        return orchestrate(dag, strategy, rough, measured.can_generate, key_fn, knobs)
    region_cost = measured.region if measured.providers else None
    floor = None
    if region_cost is not None and knobs.regions and strategy == "optimal":
        scale, per_op = _roofline_scale(dag, rough, measured, key_fn, knobs, progress, where)
        rep.roofline_scale = scale
        rough = _scaled(rough, scale)

        def floor(nodes: frozenset[int]) -> float:
            return sum(t for c, t in per_op if c.nodes <= nodes) / knobs.region_prune_gain
    seen: list[Candidate] = []

    def record(c: Candidate) -> float | None:
        seen.append(c)
        return rough(c)

    with _progress_bar(progress and region_cost is not None and knobs.regions, f"pricing provider regions{where}"):
        first = orchestrate(dag, strategy, record, measured.can_generate, key_fn, knobs, region_cost, floor)
    handed = {n for k in first.regions for n in first.kernels[k].nodes}
    todo = [c for c in seen if not c.nodes <= handed]
    rep.candidates = len(todo)
    if knobs.tuning == "learned" and strategy == "optimal":
        learned, rep.learned = learned_pricing.train(measured)
        if learned is not None:
            return _plan_learned(dag, strategy, measured, key_fn, knobs, rep, progress, where, region_cost,
                                 learned, seen)
    with _progress_bar(progress and bool(todo), f"tuning candidate kernels{where}") as update:
        measured.progress = update
        measured.prefetch(todo)
    measured.progress = None
    guessed: list[Candidate] = []  # what a round priced by the estimate

    def guess(c: Candidate) -> float | None:  # from round ESTIMATED_ROUNDS on, only measured kernels
        guessed.append(c)  # are offered: joins of joins can otherwise chain for as many rounds as kernels
        return rough(c) if round_ < ESTIMATED_ROUNDS else None

    measured.fallback = guess
    every: list[Candidate] = []  # the candidates of every segment, regions or not (collected on demand)

    def record_every(c: Candidate) -> float | None:
        every.append(c)
        return rough(c)

    rechecked: set[str] = set()  # keys re-timed beside a fusion the plan declined (recheck.py)
    try:
        for round_ in range(16):
            guessed.clear()
            plan = orchestrate(dag, strategy, measured, measured.can_generate, key_fn, knobs, region_cost)
            regions = set(plan.regions)
            missing = [c for k, c in enumerate(plan.kernels) if k not in regions and not measured.has(c)]
            if not missing:
                if strategy == "optimal" and knobs.recheck and recheck(dag, plan, measured, rechecked):
                    continue
                break
            # Segments the first pass handed to a region but this plan keeps on kernels: tune
            # them fully (measuring only the picked kernels can take one round per kernel). The
            # first pass never priced candidates of the segments it pruned, so they are collected
            # by a pass without regions.
            back = {n for k, c in enumerate(plan.kernels) if k not in regions for n in c.nodes} & handed
            handed -= back
            if back and not every:
                orchestrate(dag, strategy, record_every, measured.can_generate, key_fn,
                            dataclasses.replace(knobs, regions=False))
            more = missing + [c for c in seen + every if c.nodes & back]
            if not regions:  # joins across cuts (joins.py) chain: measure every join the round priced
                more += guessed
            if round_ == 2:  # still picking unpriced kernels: price every candidate around them
                near = {n for c in missing for n in c.nodes}
                more += [c for c in seen + every if c.nodes & near]
            elif round_ > 2:  # and still: rough prices keep undercutting measured ones, so price
                # every candidate the plan could pick (a full tuning, as without regions)
                if not every:
                    orchestrate(dag, strategy, record_every, measured.can_generate, key_fn,
                                dataclasses.replace(knobs, regions=False))
                more += seen + every
            with _progress_bar(progress, f"tuning kernels the plan picked{where}") as update:
                measured.progress = update
                measured.prefetch(more)
            measured.progress = None
        else:
            raise KernorchError("the plan kept picking unmeasured kernels (a bug: please report it)")
    finally:
        measured.fallback = None
    return record_measurements(plan, measured, rep)


def _plan_learned(dag, strategy: str, measured, key_fn, knobs: Knobs, rep: CompileReport, progress: bool,
                  where: str, region_cost, learned, seen: list[Candidate]) -> Plan:
    """plan_kernels with the learned cost model (learned_pricing.py): the candidates the database
    does not price stand at the model's optimistic price; each round solves, measures the plan's
    kernels that were only predicted, and solves again, until the plan holds measured kernels
    only (then every remaining candidate, even priced optimistically, loses). A plan still
    picking predicted kernels after LEARNED_ROUNDS rounds gets every candidate measured, as a full
    tuning would."""
    unknown = measured._unknown(seen, measured.version)  # those stored by earlier compiles are recalled
    learned.predict_many(list(unknown.values()))
    guessed: list[Candidate] = []  # what a round priced by the model (joins across cuts arise per round)

    def guess(c: Candidate) -> float | None:
        guessed.append(c)
        return learned(c)

    measured.fallback = guess
    rechecked: set[str] = set()
    missing: list[Candidate] = []
    try:
        for round_ in range(LEARNED_ROUNDS + 2):
            guessed.clear()
            plan = orchestrate(dag, strategy, measured, measured.can_generate, key_fn, knobs, region_cost)
            regions = set(plan.regions)
            missing = [c for k, c in enumerate(plan.kernels) if k not in regions and not measured.has(c)]
            if not missing:
                if knobs.recheck and round_ < LEARNED_ROUNDS and recheck(dag, plan, measured, rechecked):
                    continue
                break
            more = missing if round_ < LEARNED_ROUNDS else missing + seen + guessed  # then: a full tuning
            with _progress_bar(progress, f"tuning kernels the plan picked{where}") as update:
                measured.progress = update
                measured.prefetch(more)
            measured.progress = None
            learned.calibrate(list(unknown.values()) + guessed)  # out of sample: measured by this compile
    finally:
        measured.fallback = None
    if missing:
        raise KernorchError("the plan kept picking unmeasured kernels (a bug: please report it)")
    rep.learned = f"{learned.describe()}; {round_ + 1} rounds"
    rep.predicted = sum(not measured.has(c) for c in {key_fn(c): c for c in seen}.values())
    return record_measurements(plan, measured, rep)


def _scaled(cost, scale: float):
    def scaled(c: Candidate) -> float | None:
        x = cost(c)
        return None if x is None else scale * x

    return scaled


def _roofline_scale(dag, rough, measured, key_fn, knobs: Knobs, progress: bool, where: str):
    """Measured over roofline time, summed over the per-operator plan's kernels (measured here;
    the optimal strategy's candidates include them anyway), and those kernels with their times."""
    per_op = orchestrate(dag, "per-operator", rough, measured.can_generate, key_fn, knobs)
    with _progress_bar(progress, f"calibrating on the per-operator kernels{where}") as update:
        measured.progress = update
        measured.prefetch(per_op.kernels)
    measured.progress = None
    timed = [(c, measured(c), rough(c)) for c in per_op.kernels]
    timed = [(c, m, r) for c, m, r in timed if m is not None and r]
    scale = sum(m for _, m, _ in timed) / sum(r for _, _, r in timed) if timed else 1.0
    return scale, [(c, m) for c, m, _ in timed]
