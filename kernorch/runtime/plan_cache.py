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
    shape = dataclasses.replace(knobs, seeds=(), groups=(), transfer=())
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
    try:
        members = json.loads(rec.detail)
    except ValueError:
        return None
    return _priced_plan(g, dag, members, measured, stored=db)


def structure(g: Graph) -> tuple:
    """``g``'s prims without sizes: each one's op and where its inputs come from (a prim by
    position, a graph input, a constant). Equal for one model imported at different input sizes
    when fission and the rewrites did the same to it."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    where = {**{v: "i" for v in g.inputs}, **{v: "c" for v in g.constants}}
    return tuple((p.op.name, tuple(pos.get(v, where.get(v, "?")) for v in p.inputs)) for p in g.prims)


def hint(g: Graph, members: list[tuple[int, ...]]) -> tuple:
    """What ``transfer`` takes: ``g``'s structure and each kernel's prims (value ids in ``g``)."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    return structure(g), tuple(tuple(sorted(pos[v] for v in m)) for m in members)


def transfer(given: tuple, g: Graph, dag: Dag, measured) -> Plan | None:
    """The plan ``given`` (``hint`` of the same model at other sizes) on ``g``, its kernels
    measured here (only those), or None when ``g`` differs in structure or a kernel cannot run."""
    shape, members = given
    if shape != structure(g):
        return None
    return _priced_plan(g, dag, [list(m) for m in members], measured)


def _priced_plan(g: Graph, dag: Dag, members: list, measured, stored: TuningDB | None = None) -> Plan | None:
    """The plan of kernels ``members`` (prim positions) priced by ``measured`` (only when the
    database ``stored`` holds every price, if given), or None when it is no valid plan of ``g``."""
    order = [p.output for p in g.prims]
    try:
        kernels = [multi_output(dag, [order[i] for i in m]) for m in members]
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    if not kernels:
        return None
    if stored is not None:
        keys = [measured.key(c) for c in kernels]
        known = stored.get_many(keys, measured.target, measured.version)
        if not all(any(r.ok for r in known.get(k, {}).values()) for k in keys):
            return None
    measured.prefetch(kernels)  # stored prices are read, the others measured
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
