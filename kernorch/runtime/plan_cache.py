"""A measured compile's final plan, kept in the tuning database, so compiling the same model again
with the same options on the same machine (a new process, a restarted service) builds that plan
straight away instead of enumerating, re-timing, pricing in context and racing plans again.

The plan is one row of the costs table (provider and status ``plan``, no seconds: no schema change,
``kernorch db`` merges it like any row, and nothing reads it as a price): its key digests the whole
graph (``Graph.kernel_key`` over every prim: structure, shapes, dtypes, scalar constants; weights
only by shape, as they do not change what runs fastest) with the options that shape a plan; its detail lists each kernel's prims by
position in the graph. A stored plan is used only while every one of its kernels still has a
correct price in the database for this target and code generator (a new code-generator version or
a new machine signature drop it), never while the database distrusts prices (``kernorch db
retune`` compiles to measure them again), and only as a valid plan of this graph (``check_plan``);
otherwise the compile plans as usual and stores the new plan.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import Plan, PlanError, build_plan, check_plan
from kernorch.orchestrate.tuning_db import Record, TuningDB

PROVIDER = "plan"
PLANNER = 1  # bumped when the planner changes what it would choose: older plans are planned again


def plan_key(g: Graph, knobs: Knobs, opts) -> str:
    """The key of ``g``'s plan under ``opts`` and ``knobs`` (their seeds and groups follow from
    the graph, so they are left out of the digest)."""
    shape = dataclasses.replace(knobs, seeds=(), groups=())
    what = (PLANNER, g.kernel_key([p.output for p in g.prims], g.outputs), opts.strategy, opts.precision, opts.accuracy_budget,
            tuple(opts.providers or ()), opts.regions, opts.tuning_budget, repr(shape))
    return "plan:" + hashlib.sha1(repr(what).encode()).hexdigest()


def reuse(db: TuningDB, key: str, g: Graph, dag: Dag, measured) -> Plan | None:
    """The plan stored under ``key``, priced from the database (nothing is measured), or None when
    there is none or it can no longer be used."""
    if db.distrusted:  # kernorch db retune: the compile is there to measure those kernels again
        return None
    rec = db.get(key, measured.target, measured.version).get(PROVIDER)
    if rec is None or rec.status != PROVIDER:
        return None
    order = [p.output for p in g.prims]
    try:
        kernels = [multi_output(dag, [order[i] for i in members]) for members in json.loads(rec.detail)]
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    keys = [measured.key(c) for c in kernels]
    stored = db.get_many(keys, measured.target, measured.version)
    if not kernels or not all(any(r.ok for r in stored.get(k, {}).values()) for k in keys):
        return None
    measured.prefetch(kernels)  # every price is in the database: read, not measured
    costs = [measured(c) for c in kernels]
    if None in costs:
        return None
    plan = build_plan(dag, kernels, costs, "optimal")
    try:
        check_plan(dag, plan)
    except PlanError:
        return None
    return plan


def remember(db: TuningDB, key: str, g: Graph, plan: Plan, measured) -> None:
    """Store ``plan`` (one without provider regions) under ``key``, beside ``measured``'s prices."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    detail = json.dumps([sorted(pos[v] for v in c.nodes) for c in plan.kernels])
    db.put(key, measured.target, measured.version, Record(PROVIDER, None, PROVIDER, detail))  # not a price
