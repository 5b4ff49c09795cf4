"""The binary program over plain arrays: pick candidates of least total cost that write every
required value and whose reads are all written by picked candidates, in an executable order.
Problem -> Solution. Knows nothing of dags or the IR.

Note [multi-output deadlock]
Covering constraints do not give an order: two multi-output kernels may each read a value only
the other writes (x->t1, x->a, y->t2, y->b, t1->b, t2->a; kernels {x,t1,a} and {y,t2,b}). After
each solve we run the picked kernels (any whose reads are available) until none can start. If
some are stuck, take a sink strongly connected component C of "stuck r needs a value that stuck
q would write" and let M be the values its members need but nobody has written. In any
executable plan that writes some value of M, the first kernel to write a value of M reads none
(none is in memory yet). So, with y_m = "m is written",
    y_m <= sum of x_q over W = {q : q writes a value of M and reads no value of M}, m in M,
holds for every executable plan. The current solution violates it: y_m = 1 (a member of C reads
m), and no picked kernel is in W (a picked writer of M is stuck, hence in C, and reads M). Add
these rows and solve again: like subtour elimination, the rows name a set of values that needs
an entry, not particular kernels, so one row rules out every kernel pair with the same cycle.
(Forbidding the stuck kernels, sum_{c in C} x_c <= |C| - 1, is weaker and can even remove an
executable plan: one that adds a kernel writing a value of M first.)
Single-output kernels never deadlock: a kernel reading a value v = sink(p) contains a reader
of v, and every member reaches the kernel's own sink, so sink(p) precedes its sink in
topological order; running kernels by sink position is always executable.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from kernorch.errors import KernorchError


class SolverError(KernorchError):
    """The binary program has no solution (a required value no candidate writes) or none was
    found in the time limit."""


@dataclass(frozen=True)
class Problem:
    """Candidate k costs `costs[k]`, writes the values `writes[k]` and needs `reads[k]` written by
    another picked candidate (values available from outside are simply not listed). `order_key`
    (optional) breaks ties when ordering picked kernels: smaller runs first. `covers` are
    optional valid cuts: each lists candidates at least one of which every solution picks (e.g.
    "some kernel computes node n" when every node is needed); they tighten the relaxation."""

    costs: Sequence[float]
    writes: Sequence[Sequence[Hashable]]
    reads: Sequence[Sequence[Hashable]]
    required: Sequence[Hashable]
    order_key: Sequence[float] | None = None
    covers: Sequence[Sequence[int]] = ()


@dataclass(frozen=True)
class SolveReport:
    """What the solver did: `optimal` is False after a time limit or a fallback to `start`."""

    backend: str
    status: str
    optimal: bool
    objective: float
    bound: float
    gap: float
    time_s: float
    rounds: int
    cuts: int
    n_vars: int
    n_rows: int


@dataclass(frozen=True)
class Solution:
    """Picked candidate indices in an executable order."""

    chosen: tuple[int, ...]
    report: SolveReport


@dataclass(frozen=True)
class _Raw:
    status: str
    optimal: bool
    x: np.ndarray | None
    bound: float


class _Model:
    """Rows of the program in CSR form. Column k < n is x_k; column n + j is y_j, "the j-th read
    value is written" (x_k <= y_j <= sum of its writers). y is implied integral, but declaring it
    binary lets the solver branch on "is this value in memory", which splits the search better
    than branching on single kernels; it also keeps rows short (no writer list per reader)."""

    def __init__(self, p: Problem) -> None:
        n = len(p.costs)
        writers: dict[Hashable, list[int]] = {}
        for k, ws in enumerate(p.writes):
            for v in dict.fromkeys(ws):
                writers.setdefault(v, []).append(k)
        readers: dict[Hashable, list[int]] = {}
        for k, rs in enumerate(p.reads):
            for v in dict.fromkeys(rs):
                readers.setdefault(v, []).append(k)
        self.upper = np.ones(n)
        y_of = {}
        for v, ks in readers.items():
            if v in writers:
                y_of[v] = n + len(y_of)
            else:
                self.upper[ks] = 0.0
        self.n_x = n
        self.n_cols = n + len(y_of)
        self.indptr, self.indices, self.data, self.lo, self.hi = [0], [], [], [], []
        for v in dict.fromkeys(p.required):
            if v not in writers:
                raise SolverError(f"required value {v!r} is written by no candidate")
            self.add_row(writers[v], [1.0] * len(writers[v]), 1.0, math.inf)
        for v, col in y_of.items():
            self.add_row([col, *writers[v]], [1.0] + [-1.0] * len(writers[v]), -math.inf, 0.0)
            for k in readers[v]:
                self.add_row([k, col], [1.0, -1.0], -math.inf, 0.0)
        for ks in p.covers:
            self.add_row(list(ks), [1.0] * len(ks), 1.0, math.inf)
        self.y_of = y_of

    def add_row(self, cols: Sequence[int], vals: Sequence[float], lo: float, hi: float) -> None:
        self.indices.extend(cols)
        self.data.extend(vals)
        self.indptr.append(len(self.indices))
        self.lo.append(lo)
        self.hi.append(hi)


def order_kernels(p: Problem, chosen: Sequence[int]) -> tuple[list[int], list[int], set[Hashable]]:
    """Run picked kernels whose reads are available, smallest `order_key` first, until none can
    start. Returns (ran in order, stuck, values written by the kernels that ran)."""
    key = p.order_key if p.order_key is not None else range(len(p.costs))
    missing = {k: set(p.reads[k]) for k in chosen}
    waiting: dict[Hashable, list[int]] = {}
    for k, ms in missing.items():
        for v in ms:
            waiting.setdefault(v, []).append(k)
    ready = [(key[k], k) for k, ms in missing.items() if not ms]
    heapq.heapify(ready)
    avail: set[Hashable] = set()
    ran: list[int] = []
    while ready:
        _, k = heapq.heappop(ready)
        ran.append(k)
        for v in p.writes[k]:
            if v in avail:
                continue
            avail.add(v)
            for r in waiting.pop(v, ()):
                missing[r].discard(v)
                if not missing[r]:
                    heapq.heappush(ready, (key[r], r))
    done = set(ran)
    return ran, [k for k in chosen if k not in done], avail


def deadlock_cuts(p: Problem, chosen: Sequence[int]) -> list[tuple[list[Hashable], list[int]]]:
    """(M, W) per sink component of the stuck kernels: values needing an entry writer and the
    kernels that could be it. See Note [multi-output deadlock]."""
    _, stuck, avail = order_kernels(p, chosen)
    if not stuck:
        return []
    stuck_set = set(stuck)
    miss = {r: [v for v in dict.fromkeys(p.reads[r]) if v not in avail] for r in stuck}
    writers: dict[Hashable, list[int]] = {}
    for q in stuck:
        for v in p.writes[q]:
            writers.setdefault(v, []).append(q)
    edges = {r: sorted({q for v in miss[r] for q in writers.get(v, ()) if q in stuck_set}) for r in stuck}
    cuts = []
    for comp in _sink_components(stuck, edges):
        lacking = {v for c in comp for v in miss[c]}
        entry = [
            q
            for q in range(len(p.costs))
            if not lacking.isdisjoint(p.writes[q]) and lacking.isdisjoint(p.reads[q])
        ]
        cuts.append((sorted(lacking, key=repr), entry))
    return cuts


def _sink_components(nodes: Sequence[int], edges: dict[int, list[int]]) -> list[list[int]]:
    """Strongly connected components with no edge to another component (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp_of: dict[int, int] = {}
    comps: list[list[int]] = []
    stack: list[int] = []
    on_stack: set[int] = set()
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, i = work[-1]
            if i < len(edges[v]):
                work[-1] = (v, i + 1)
                w = edges[v][i]
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp_of[w] = len(comps)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    return [c for i, c in enumerate(comps) if all(comp_of[w] == i for v in c for w in edges[v])]


def solve(
    p: Problem,
    *,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-6,
    backend: str = "highs",
    start: Sequence[int] | None = None,
    max_rounds: int = 100,
) -> Solution:
    """Minimum-cost executable selection. `start` (an executable selection, e.g. a baseline) is
    returned if the solver finds nothing cheaper in time (or within its gap), so the answer never
    costs more than `start`. It is not passed to HiGHS as a warm start: with a user solution,
    HiGHS 1.16 returned that solution labelled optimal next to a wrong, lower objective (found
    by test_optimal_equals_brute_force). Deadlocks are cut and re-solved (Note [multi-output
    deadlock])."""
    run = {"highs": _run_highs, "scipy": _run_scipy}.get(backend)
    if run is None:
        raise ValueError(f"unknown solver backend {backend!r}; use 'highs' or 'scipy'")
    log = _Log(p, _Model(p), backend, start)
    costs = np.asarray(p.costs, dtype=float)
    scale = _cost_scale(costs)
    while True:
        log.rounds += 1
        raw = run(log.model, costs * scale, max(0.01, time_limit_s - log.elapsed()), mip_rel_gap)
        bound = raw.bound / scale
        if raw.x is None:
            return log.fallback(raw.status, bound)
        chosen = [k for k in range(log.model.n_x) if raw.x[k] > 0.5]
        found = deadlock_cuts(p, chosen)
        if not found:
            ordered, _, _ = order_kernels(p, chosen)
            obj = float(costs[ordered].sum())
            if start is not None and sum(p.costs[k] for k in start) < obj:
                return log.fallback(f"{raw.status}, start is better", bound, raw.optimal)
            return Solution(tuple(ordered), log.report(raw.status, raw.optimal, obj, bound))
        if log.rounds >= max_rounds or log.elapsed() > time_limit_s:
            return log.fallback("deadlock cuts exhausted", bound)
        for lacking, entry in found:
            for v in lacking:
                log.model.add_row([log.model.y_of[v], *entry], [1.0] + [-1.0] * len(entry), -math.inf, 0.0)
                log.cuts += 1


def _cost_scale(costs: np.ndarray) -> float:
    """Scale so the cheapest positive cost is 1: kernel costs in seconds (1e-6..1e-2) sit near
    the solver's absolute tolerances (1e-6 .. 1e-7), which would blur small differences."""
    pos = costs[costs > 0]
    return 1.0 / float(pos.min()) if pos.size else 1.0


class _Log:
    """What one `solve` call has done so far, turned into its report."""

    def __init__(self, p: Problem, model: _Model, backend: str, start: Sequence[int] | None) -> None:
        self.p, self.model, self.backend, self.start = p, model, backend, start
        self.t0 = time.perf_counter()
        self.rounds = 0
        self.cuts = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def report(self, status: str, optimal: bool, obj: float, bound: float) -> SolveReport:
        bound = min(bound, obj) if math.isfinite(bound) else bound
        gap = abs(obj - bound) / max(abs(obj), 1e-300) if math.isfinite(bound) else math.inf
        m = self.model
        return SolveReport(
            self.backend, status, optimal, obj, bound, gap, self.elapsed(), self.rounds, self.cuts, m.n_cols, len(m.lo)
        )

    def fallback(self, status: str, bound: float, optimal: bool = False) -> Solution:
        """`start` as the answer: optimal only when the solver proved its own answer optimal
        (within the gap) and `start` is no worse."""
        if self.start is None:
            raise SolverError(f"no executable solution found ({status}) and no start solution given")
        ordered, stuck, _ = order_kernels(self.p, self.start)
        if stuck:
            raise SolverError(f"start solution is not executable: kernels {stuck} never become ready")
        obj = float(sum(self.p.costs[k] for k in ordered))
        return Solution(tuple(ordered), self.report(f"fallback to start ({status})", optimal, obj, bound))


def _run_highs(m: _Model, costs: np.ndarray, time_limit_s: float, gap: float) -> _Raw:
    import highspy

    h = _quiet_highs(highspy)
    ok = highspy.HighsStatus.kOk
    # HiGHS answers a misspelt option or a bad value with a status, not an exception: check it, or
    # a solve would silently run without its time limit or gap.
    for name, value in [("output_flag", False), ("time_limit", float(time_limit_s)), ("mip_rel_gap", float(gap)),
                        ("threads", 1)]:
        if h.setOptionValue(name, value) != ok:
            raise SolverError(f"HiGHS rejected option {name}={value!r}")
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = m.n_cols
    lp.num_row_ = len(m.lo)
    lp.col_cost_ = np.concatenate([costs, np.zeros(m.n_cols - m.n_x)])
    lp.col_lower_ = np.zeros(m.n_cols)
    lp.col_upper_ = np.concatenate([m.upper, np.ones(m.n_cols - m.n_x)])
    lp.row_lower_ = np.array([max(v, -inf) for v in m.lo])
    lp.row_upper_ = np.array([min(v, inf) for v in m.hi])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(m.indptr, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(m.indices, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(m.data, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * m.n_cols
    if h.passModel(lp) != ok:  # e.g. arrays of the wrong length (HiGHS warns and goes on)
        raise SolverError("HiGHS rejected the model")
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    has_x = info.primal_solution_status == 2
    x = np.asarray(h.getSolution().col_value) if has_x else None
    return _Raw(status, status == "Optimal", x, float(info.mip_dual_bound))


def _run_scipy(m: _Model, costs: np.ndarray, time_limit_s: float, gap: float) -> _Raw:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    a = csr_array((m.data, m.indices, m.indptr), shape=(len(m.lo), m.n_cols))
    integrality = np.ones(m.n_cols)
    res = milp(
        np.concatenate([costs, np.zeros(m.n_cols - m.n_x)]),
        integrality=integrality,
        bounds=Bounds(np.zeros(m.n_cols), np.concatenate([m.upper, np.ones(m.n_cols - m.n_x)])),
        constraints=[LinearConstraint(a, np.array(m.lo), np.array(m.hi))] if m.lo else [],
        options={"time_limit": float(time_limit_s), "mip_rel_gap": float(gap), "disp": False},
    )
    bound = getattr(res, "mip_dual_bound", None)
    return _Raw(res.message, res.status == 0, res.x, float(math.nan if bound is None else bound))


def _quiet_highs(highspy):
    """A Highs instance without its start-up banner (printed by C++ before options can be set)."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
