"""A plan: the kernels to run in order, where each kernel's inputs come from, and how long each
written value must live. `check_plan` is the validity oracle every strategy and test goes through.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kernorch.errors import KernorchError
from kernorch.orchestrate.candidate import Candidate, inputs_of, is_convex
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.solver import SolveReport


class PlanError(KernorchError):
    """A plan is not executable or does not match its dag."""


@dataclass(frozen=True)
class Plan:
    """Kernels in execution order. `sources[k][v]` is the earlier kernel whose write of dag value v
    kernel k reads (values from outside the dag are not listed). `lifetimes[v]` is (index of the
    first kernel writing v, index of the last kernel reading it); graph outputs live to
    `len(kernels)`. `cost` is the sum of `costs`, one per kernel. `regions` lists the kernels that
    are provider regions (whole runs of segments for an external runtime, regions.py)."""

    kernels: tuple[Candidate, ...]
    costs: tuple[float, ...]
    sources: tuple[Mapping[int, int], ...]
    lifetimes: Mapping[int, tuple[int, int]]
    cost: float
    strategy: str
    report: SolveReport | None = None
    stats: Mapping[str, float] = field(default_factory=dict)
    regions: tuple[int, ...] = ()

    def summary(self) -> str:
        """One line for logs and benchmarks."""
        opt = "" if self.report is None else f", optimal={self.report.optimal}, gap={self.report.gap:.2g}"
        reg = ""
        if self.regions:
            inside = sum(len(self.kernels[k].nodes) for k in self.regions)
            total = len(set().union(*(c.nodes for c in self.kernels)))
            reg = f" ({len(self.regions)} provider regions covering {inside} of {total} prims)"
        joins = int(self.stats.get("joins", 0))
        joined = f" ({joins} joined across segment cuts)" if joins else ""
        return f"{self.strategy}: {len(self.kernels)} kernels{reg}{joined}, cost {self.cost:.6g}{opt}"


def build_plan(
    dag: Dag,
    kernels: Sequence[Candidate],
    costs: Sequence[float],
    strategy: str,
    report: SolveReport | None = None,
    stats: Mapping[str, float] | None = None,
    regions: Sequence[int] = (),
) -> Plan:
    """Wire up ordered kernels: each input comes from the first earlier kernel writing it."""
    first_write: dict[int, int] = {}
    sources: list[dict[int, int]] = []
    last_read: dict[int, int] = {}
    for k, cand in enumerate(kernels):
        src = {}
        for v in sorted(cand.inputs):
            if v in dag.position and v in first_write:
                src[v] = first_write[v]
                last_read[v] = k
        sources.append(src)
        for v in cand.outputs:
            first_write.setdefault(v, k)
    end = len(kernels)
    lifetimes = {
        v: (w, end if v in dag.outputs else max(last_read.get(v, w), w)) for v, w in sorted(first_write.items())
    }
    return Plan(
        kernels=tuple(kernels),
        costs=tuple(float(c) for c in costs),
        sources=tuple(sources),
        lifetimes=lifetimes,
        cost=float(sum(costs)),
        strategy=strategy,
        report=report,
        stats=dict(stats or {}),
        regions=tuple(regions),
    )


def check_plan(dag: Dag, plan: Plan) -> None:
    """Raise PlanError unless: every kernel is a non-empty convex set of dag nodes whose inputs
    are exactly what it reads from outside and whose outputs are members; every dag input of a
    kernel was written by an earlier kernel (the recorded source); every graph output is written;
    lifetimes and cost match the kernels."""
    if not (len(plan.kernels) == len(plan.costs) == len(plan.sources)):
        raise PlanError("plan has mismatched numbers of kernels, costs and sources")
    written: dict[int, int] = {}
    for k, cand in enumerate(plan.kernels):
        if not cand.nodes or not cand.outputs:
            raise PlanError(f"kernel {k} computes or writes nothing")
        if not cand.nodes <= dag.position.keys():
            raise PlanError(f"kernel {k} has nodes {sorted(cand.nodes - dag.position.keys())} outside the dag")
        if not cand.outputs <= cand.nodes:
            raise PlanError(f"kernel {k} writes {sorted(cand.outputs - cand.nodes)}, which it does not compute")
        if cand.inputs != inputs_of(dag, cand.nodes):
            reads = sorted(inputs_of(dag, cand.nodes))
            raise PlanError(f"kernel {k} declares inputs {sorted(cand.inputs)}, reads {reads}")
        if not is_convex(dag, cand.nodes):
            raise PlanError(f"kernel {k} (nodes {sorted(cand.nodes)}) is not convex")
        for v in cand.inputs:
            if v not in written:
                raise PlanError(f"kernel {k} reads value {v} before any kernel writes it")
            src = plan.sources[k].get(v)
            if src is None or not 0 <= src < k or v not in plan.kernels[src].outputs:
                raise PlanError(f"kernel {k} records source {src} for value {v}, which does not write it earlier")
        if set(plan.sources[k]) != set(cand.inputs):
            raise PlanError(f"kernel {k} records sources for {sorted(plan.sources[k])}, reads {sorted(cand.inputs)}")
        if not math.isfinite(plan.costs[k]):
            raise PlanError(f"kernel {k} has cost {plan.costs[k]}")
        for v in cand.outputs:
            written.setdefault(v, k)
    missing = dag.outputs - written.keys()
    if missing:
        raise PlanError(f"graph outputs {sorted(missing)} are never written")
    expect = build_plan(dag, plan.kernels, plan.costs, plan.strategy)
    if dict(plan.lifetimes) != dict(expect.lifetimes):
        raise PlanError("buffer lifetimes do not match the kernels' writes and reads")
    if not math.isclose(plan.cost, sum(plan.costs), rel_tol=1e-9, abs_tol=1e-15):
        raise PlanError(f"plan cost {plan.cost} is not the sum of its kernels' costs {sum(plan.costs)}")
