"""`orchestrate`: dag + strategy + the code generator's hooks -> Plan. Strategies: unfused,
per-operator, greedy (rules in baselines.py) and optimal (partition, enumerate, price, solve).
All of them price kernels with the same memoized cost, so their plans compare fairly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable, Sequence

from kernorch.errors import KernorchError
from kernorch.orchestrate.baselines import (
    greedy_blocks,
    operator_blocks,
    order_blocks,
    unfused_blocks,
)
from kernorch.orchestrate.candidate import Candidate, multi_output
from kernorch.orchestrate.contract import contract
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.enumerate import EnumerationStats, count_sets, enumerate_candidates
from kernorch.orchestrate.joins import join_across_cuts
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.partition import Segment, partition
from kernorch.orchestrate.plan import Plan, build_plan
from kernorch.orchestrate.pricing import CanGenerate, CostFn, KeyFn, Pricer
from kernorch.orchestrate.regions import choose_regions
from kernorch.orchestrate.solver import Problem, Solution, SolverError, SolveReport, solve

STRATEGIES = ("unfused", "per-operator", "greedy", "optimal")


class OrchestrationError(KernorchError):
    """No plan exists: some prim cannot be generated even as a kernel of its own."""


def orchestrate(
    dag: Dag,
    strategy: str = "optimal",
    cost: CostFn | None = None,
    can_generate: CanGenerate | None = None,
    key_fn: KeyFn | None = None,
    knobs: Knobs = Knobs(),
    region_cost: CostFn | None = None,
    plan_floor: Callable[[frozenset[int]], float] | None = None,
) -> Plan:
    """Plan `dag` with `strategy`. `cost(candidate)` gives seconds or None (cannot be built);
    `can_generate` is the code generator's feasibility hook; `key_fn` gives a canonical kernel
    key, and both hooks and the cost run once per distinct key. Nodes no output depends on are
    dropped first (Dag.without_dead). `region_cost(candidate)` prices a run of whole segments in
    an external runtime; given (and `knobs.regions`), `optimal` may hand such runs over
    (regions.py). `plan_floor(segment nodes)`, if given, is a lower bound the region choice
    assumes for a segment's kernel plan (for choosing what to tune before measuring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if cost is None:
        raise ValueError("orchestrate needs a cost function, e.g. RooflineCost().bind(dag)")
    live = dag.without_dead()
    if knobs.groups:
        c = contract(live, knobs.groups)
        try:
            plan = orchestrate(c.dag, strategy, c.lift(cost), c.lift(can_generate), c.lift(key_fn), c.knobs(knobs),
                               c.lift(region_cost), plan_floor and (lambda nodes: plan_floor(c.expand_nodes(nodes))))
        except (SolverError, OrchestrationError):  # no plan keeps every group whole (its kernels failed)
            return orchestrate(live, strategy, cost, can_generate, key_fn, dataclasses.replace(knobs, groups=()),
                               region_cost, plan_floor)
        return c.expand_plan(plan)
    pricer = Pricer(cost, can_generate, key_fn, region_cost if knobs.regions else None)
    t0 = time.perf_counter()
    if strategy == "optimal":
        return _optimal(live, pricer, knobs, t0, plan_floor)
    blocks = _baseline_blocks(live, strategy, pricer, knobs)
    kernels = order_blocks(live, blocks)
    return build_plan(live, kernels, _prices(pricer, kernels), strategy, stats=_stats(pricer, t0))


def _baseline_blocks(dag: Dag, strategy: str, pricer: Pricer, knobs: Knobs) -> list[frozenset[int]]:
    def generatable(nodes: frozenset[int]) -> bool:
        return pricer.price(multi_output(dag, nodes)) is not None

    if strategy == "unfused":
        return unfused_blocks(dag)
    units = operator_blocks(dag, generatable)
    if strategy == "per-operator":
        return units
    ordered = [c.nodes for c in order_blocks(dag, units)]
    return greedy_blocks(dag, ordered, generatable, knobs.greedy_max_kernel_nodes)


def _prices(pricer: Pricer, kernels: Sequence[Candidate]) -> list[float]:
    out = []
    for cand in kernels:
        c = pricer.price(cand)
        if c is None:
            raise OrchestrationError(f"kernel {sorted(cand.nodes)} cannot be generated")
        out.append(c)
    return out


def _stats(pricer: Pricer, t0: float, **extra: float) -> dict[str, float]:
    return {
        "cost_calls": pricer.cost_calls,
        "generate_calls": pricer.generate_calls,
        "distinct_keys": pricer.distinct_keys,
        "total_s": time.perf_counter() - t0,
        **extra,
    }


def _optimal(dag: Dag, pricer: Pricer, knobs: Knobs, t0: float,
             plan_floor: Callable[[frozenset[int]], float] | None = None) -> Plan:
    """Per segment: enumerate, add baseline seeds, price, solve (once per distinct segment
    program); concatenate the segments' kernels (segments are independent, see partition.py),
    then join kernels across the cuts where that is cheaper (joins.py; plans without regions)."""
    segments = partition(dag, max_segment_nodes=knobs.max_segment_nodes, max_cut_width=knobs.max_cut_width,
                         max_kernel_nodes=knobs.max_kernel_nodes)
    seg_sets = budget_shares(dag, segments, pricer, knobs)
    baselines: list[list[frozenset[int]]] = []
    if knobs.seed_baselines:
        baselines = [_baseline_blocks(dag, s, pricer, knobs) for s in ("per-operator", "greedy")]
    seeds = [b for blocks in baselines for b in blocks] + list(knobs.seeds)
    estats = EnumerationStats()
    t = time.perf_counter()
    work = []
    for seg, sets in zip(segments, seg_sets):
        cands = _segment_candidates(dag, seg, seeds, pricer, dataclasses.replace(knobs, max_segment_sets=sets), estats)
        prices = [pricer.price(c) for c in cands]
        cands = [c for c, p in zip(cands, prices) if p is not None]
        priced = [p for p in prices if p is not None]
        problem = _segment_problem(dag, seg, cands, priced)
        work.append((seg, cands, priced, problem, _signature(dag, seg, problem)))
    t_enum = time.perf_counter() - t
    t = time.perf_counter()
    solved: dict[tuple[object, ...], Solution] = {}
    reports: list[SolveReport] = []
    distinct = len({w[4] for w in work})
    seg_kernels: list[list[Candidate]] = []
    seg_costs: list[list[float]] = []
    for seg, cands, prices, problem, signature in work:
        sol = solved.get(signature)
        if sol is None:
            left = knobs.time_limit_s - (time.perf_counter() - t)
            sol = solved[signature] = solve(
                problem,
                time_limit_s=max(0.05, left / (distinct - len(solved))),
                mip_rel_gap=knobs.mip_rel_gap,
                backend=knobs.solver_backend,
                start=_segment_start(dag, seg, cands, prices, baselines),
            )
            reports.append(sol.report)
        else:
            reports.append(dataclasses.replace(sol.report, time_s=0.0, rounds=0, cuts=0))
        seg_kernels.append([cands[k] for k in sol.chosen])
        seg_costs.append([prices[k] for k in sol.chosen])
    t_solve = time.perf_counter() - t
    t = time.perf_counter()
    kernels, costs, regions = _with_regions(dag, segments, seg_kernels, seg_costs, pricer, knobs, plan_floor)
    t_regions = time.perf_counter() - t
    t = time.perf_counter()
    joins = 0
    if knobs.join_cuts and not regions:
        kernels, costs, joins = join_across_cuts(dag, segments, kernels, costs, pricer, knobs.greedy_max_kernel_nodes)
    t_joins = time.perf_counter() - t
    n_cands = sum(len(w[1]) for w in work)
    stats = _stats(
        pricer,
        t0,
        segments=len(segments),
        distinct_segments=len(solved),
        forced_cuts=sum(s.forced for s in segments),
        sets=estats.sets,
        truncated_segments=estats.truncated_segments,
        candidates=n_cands,
        single_output=sum(1 for w in work for c in w[1] if len(c.outputs) == 1),
        enumerate_s=t_enum,
        solve_s=t_solve,
        regions=len(regions),
        region_nodes=sum(len(kernels[k].nodes) for k in regions),
        regions_s=t_regions,
        joins=joins,
        joins_s=t_joins,
        **{f"rejected: {k}": float(v) for k, v in sorted(estats.rejected.items())},
    )
    return build_plan(dag, kernels, costs, "optimal", _merge_reports(reports), stats, regions)


def _with_regions(dag: Dag, segments: Sequence[Segment], seg_kernels: Sequence[Sequence[Candidate]],
                  seg_costs: Sequence[Sequence[float]], pricer: Pricer, knobs: Knobs,
                  plan_floor: Callable[[frozenset[int]], float] | None = None,
                  ) -> tuple[list[Candidate], list[float], list[int]]:
    """Concatenate the segments' kernel plans, with the runs of segments that are cheaper as one
    external-runtime region replaced by that region (regions.py). Returns kernels, costs and the
    indices of the region kernels."""
    runs: list[tuple[int, int]] = []
    if pricer.prices_regions and segments:
        def region(i: int, j: int) -> Candidate:
            return multi_output(dag, [n for s in segments[i:j + 1] for n in s.nodes])

        plan_costs = [sum(c) for c in seg_costs]
        if plan_floor is not None:
            plan_costs = [max(c, plan_floor(frozenset(seg.nodes))) for c, seg in zip(plan_costs, segments)]
        runs = choose_regions(plan_costs, lambda i, j: pricer.price_region(region(i, j)),
                              knobs.region_join_saving_s, tolerance=knobs.region_tolerance)
    starts = {i: j for i, j in runs}
    kernels: list[Candidate] = []
    costs: list[float] = []
    regions: list[int] = []
    s = 0
    while s < len(segments):
        if s in starts:
            j = starts[s]
            cand = multi_output(dag, [n for seg in segments[s:j + 1] for n in seg.nodes])
            price = pricer.price_region(cand)
            assert price is not None  # choose_regions picks priced runs only
            regions.append(len(kernels))
            kernels.append(cand)
            costs.append(price)
            s = j + 1
            continue
        kernels.extend(seg_kernels[s])
        costs.extend(seg_costs[s])
        s += 1
    return kernels, costs, regions


def budget_shares(dag: Dag, segments: Sequence[Segment], pricer: Pricer, knobs: Knobs) -> list[int]:
    """Sets each segment may enumerate: `max_segment_sets`, and under a tuning budget
    (`max_candidates`) its water-filled share. Identical segments (the layers of a transformer)
    share their candidates' keys and are priced once, so the budget is shared out over the
    distinct ones; a segment that needs less than an even share leaves the rest to the others.
    An even split starved the dense segments (a convolution with its layout views and its
    epilogue), whose cap then lowered their size bound and dropped exactly the large kernels."""
    cap = knobs.max_segment_sets
    if knobs.max_candidates is None or not segments:
        return [cap] * len(segments)
    keys = [pricer.key(multi_output(dag, seg.nodes)) for seg in segments]
    need: dict[object, int] = {}
    for key, seg in zip(keys, segments):
        if key not in need:
            need[key] = count_sets(dag, seg.nodes, max_kernel_nodes=knobs.max_kernel_nodes,
                                   multi_output=knobs.multi_output, max_sets=cap)
    budget, left, share = knobs.max_candidates, len(need), {}
    for key in sorted(need, key=need.__getitem__):
        share[key] = min(cap, max(50, budget // left))
        budget -= min(need[key], share[key])
        left -= 1
    return [share[k] for k in keys]


def _segment_candidates(
    dag: Dag, seg: Segment, seeds: Sequence[frozenset[int]], pricer: Pricer, knobs: Knobs, estats: EnumerationStats
) -> list[Candidate]:
    cands = enumerate_candidates(
        dag,
        seg.nodes,
        max_kernel_nodes=knobs.max_kernel_nodes,
        multi_output=knobs.multi_output,
        can_generate=pricer.can_generate,
        stats=estats,
        max_sets=knobs.max_segment_sets,
    )
    inside = set(seg.nodes)
    have = set(cands)
    for block in seeds:
        if block <= inside:
            cand = multi_output(dag, block)
            if cand not in have:
                have.add(cand)
                cands.append(cand)
    return cands


def _segment_problem(dag: Dag, seg: Segment, cands: Sequence[Candidate], prices: Sequence[float]) -> Problem:
    """Values from earlier segments are available (they are required outputs there). Every node
    of the segment feeds a required value (dead nodes are gone), so some kernel computes it: one
    cover row per node tightens the relaxation."""
    inside = set(seg.nodes)
    required = [v for v in seg.nodes if v in dag.outputs or v in seg.cut_values]
    computing: dict[int, list[int]] = {n: [] for n in seg.nodes}
    for k, c in enumerate(cands):
        for n in c.nodes:
            computing[n].append(k)
    return Problem(
        costs=list(prices),
        writes=[tuple(sorted(c.outputs)) for c in cands],
        reads=[tuple(sorted(v for v in c.inputs if v in inside)) for c in cands],
        required=required,
        order_key=[float(max(dag.position[n] for n in c.nodes)) for c in cands],
        covers=[computing[n] for n in seg.nodes],
    )


def _signature(dag: Dag, seg: Segment, p: Problem) -> tuple[object, ...]:
    """The segment's program in segment-relative positions. Repeated blocks (identical layers)
    give equal signatures and are solved once: equal programs have equal optima."""
    base = dag.position[seg.nodes[0]]

    def rel(vs: Sequence[Hashable]) -> tuple[int, ...]:
        return tuple(dag.position[int(v)] - base for v in vs)  # type: ignore[call-overload]

    return (
        tuple(p.costs),
        tuple(rel(w) for w in p.writes),
        tuple(rel(r) for r in p.reads),
        rel(p.required),
        tuple(tuple(c) for c in p.covers),
    )


def _segment_start(
    dag: Dag,
    seg: Segment,
    cands: Sequence[Candidate],
    prices: Sequence[float],
    baselines: Sequence[Sequence[frozenset[int]]],
) -> list[int] | None:
    """The cheapest baseline restricted to the segment, for the solver to fall back on: a
    baseline's kernels inside the segment plus one kernel per remaining node (refining a partition
    whose kernels can be ordered keeps it orderable). None if some kernel was not priced."""
    index = {c: k for k, c in enumerate(cands)}
    inside = set(seg.nodes)
    best: list[int] | None = None
    for partition_blocks in [[], *baselines]:
        blocks = [b for b in partition_blocks if b <= inside]
        covered = set().union(*blocks)
        blocks += [frozenset((n,)) for n in seg.nodes if n not in covered]
        picked = [index.get(multi_output(dag, b)) for b in blocks]
        if any(k is None for k in picked):
            continue
        start = [k for k in picked if k is not None]
        if best is None or sum(prices[k] for k in start) < sum(prices[k] for k in best):
            best = start
    return best


def _merge_reports(reports: Sequence[SolveReport]) -> SolveReport:
    """One report for the whole dag: sums over segments (a reused segment adds its objective and
    bound again, but no time)."""
    if not reports:
        return SolveReport("none", "empty dag", True, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0)
    obj = sum(r.objective for r in reports)
    bound = sum(r.bound for r in reports)
    optimal = all(r.optimal for r in reports)
    statuses = sorted({r.status for r in reports})
    gap = abs(obj - bound) / max(abs(obj), 1e-300) if math.isfinite(bound) else math.inf
    return SolveReport(
        backend=reports[0].backend,
        status="; ".join(statuses),
        optimal=optimal,
        objective=obj,
        bound=bound,
        gap=gap,
        time_s=sum(r.time_s for r in reports),
        rounds=sum(r.rounds for r in reports),
        cuts=sum(r.cuts for r in reports),
        n_vars=sum(r.n_vars for r in reports),
        n_rows=sum(r.n_rows for r in reports),
    )
