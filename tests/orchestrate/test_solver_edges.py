"""The solver's edges that brute-force agreement alone does not reach (mutation testing found them):
covers, deadlock cuts checked for validity against every executable selection, the sink components
against reachability, the report's fields, fallbacks to `start`, what reaches the backends (time
left, options) and a quiet stdout. Oracles: plain subset enumeration with a fixpoint executability
check written here, hand-derived numbers for the Note [multi-output deadlock] example, and fake
backends whose answers are known."""

from __future__ import annotations

import itertools
import math
import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernorch.orchestrate import solver
from kernorch.orchestrate.solver import Problem, SolverError, deadlock_cuts, order_kernels, solve

BACKENDS = ["highs", "scipy"]


def executable(p: Problem, combo) -> set | None:
    """Values written when every kernel of ``combo`` runs once its reads exist; None if some never can."""
    avail, todo = set(), set(combo)
    while todo:
        ready = [k for k in todo if set(p.reads[k]) <= avail]
        if not ready:
            return None
        for k in ready:
            avail.update(p.writes[k])
            todo.discard(k)
    return avail


def brute(p: Problem) -> float:
    """Least cost of an executable selection writing every required value and meeting every cover."""
    best = math.inf
    for r in range(len(p.costs) + 1):
        for combo in itertools.combinations(range(len(p.costs)), r):
            avail = executable(p, combo)
            if avail is not None and set(p.required) <= avail and all(set(c) & set(combo) for c in p.covers):
                best = min(best, sum(p.costs[k] for k in combo))
    return best


def random_problem(rng: random.Random, single_output: bool = False, scale: float = 1.0) -> Problem:
    n_values = rng.randint(2, 6)
    n = rng.randint(3, 8)
    writes = [rng.sample(range(n_values), 1 if single_output else rng.randint(1, 2)) for _ in range(n)]
    # single-output kernels of a dag read only values earlier in topological order (Note
    # [multi-output deadlock]); multi-output ones read anything they do not write
    pool = [[v for v in range(n_values) if (v < w[0] if single_output else v not in w)] for w in writes]
    reads = [rng.sample(vs, min(rng.randint(0, 2), len(vs))) for vs in pool]
    costs = [scale * rng.randint(1, 20) for _ in range(n)]
    return Problem(costs, writes, reads, rng.sample(range(n_values), rng.randint(1, 2)))


# the Note [multi-output deadlock] example, shared with test_solver.py
from test_solver import A, B, DEADLOCK, T1, T2, X, Y  # noqa: E402,F401
START = [6, 2, 3, 4, 5]  # executable, cost 16


# ---------------------------------------------------------------------------------------------
# Covers, single-output problems, costs at any scale
# ---------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(BACKENDS))
def test_covers_are_met_and_the_optimum_is_brute_forces(seed, backend):
    rng = random.Random(seed)
    p = random_problem(rng)
    covers = [rng.sample(range(len(p.costs)), rng.randint(1, 2)) for _ in range(rng.randint(1, 2))]
    p = Problem(p.costs, p.writes, p.reads, p.required, covers=covers)
    best = brute(p)
    if math.isinf(best):
        with pytest.raises(SolverError):
            solve(p, backend=backend, mip_rel_gap=0.0)
        return
    sol = solve(p, backend=backend, mip_rel_gap=0.0)
    assert all(set(c) & set(sol.chosen) for c in covers)
    assert sol.report.objective == pytest.approx(best)


def test_a_cover_of_one_candidate_forces_it():
    p = Problem([1.0, 5.0], [("a",), ("a",)], [(), ()], ["a"], covers=[[1]])
    for backend in BACKENDS:
        assert solve(p, backend=backend).chosen == (1,)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(BACKENDS))
def test_single_output_problems_never_need_a_cut(seed, backend):
    """Note [multi-output deadlock]: single-output kernels never deadlock, so one solve suffices."""
    p = random_problem(random.Random(seed), single_output=True)
    best = brute(p)
    if math.isinf(best):
        return
    sol = solve(p, backend=backend, mip_rel_gap=0.0)
    assert sol.report.rounds == 1 and sol.report.cuts == 0
    assert sol.report.objective == pytest.approx(best)


@pytest.mark.parametrize("scale", [1e-6, 3e-3, 7.0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_costs_at_any_scale_give_the_optimum_and_a_matching_bound(scale, backend):
    """Kernel costs are seconds (1e-6 .. 1e-2); the report's bound and gap are in the same units."""
    for seed in range(6):
        p = random_problem(random.Random(seed), scale=scale)
        p = Problem([c + scale * 0.25 * (k % 3) for k, c in enumerate(p.costs)], p.writes, p.reads, p.required)
        best = brute(p)
        if math.isinf(best):
            continue
        r = solve(p, backend=backend, mip_rel_gap=0.0).report
        assert r.objective == pytest.approx(best, rel=1e-9)
        assert r.bound == pytest.approx(best, rel=1e-6) and r.bound <= r.objective
        assert 0.0 <= r.gap <= 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_free_candidates(backend):
    """Zero costs (a kernel already paid for) are allowed, alone or next to positive ones."""
    zero = Problem([0.0, 0.0], [("a",), ("b",)], [(), ("a",)], ["b"])
    assert solve(zero, backend=backend).report.objective == 0.0
    mixed = Problem([0.0, 2e-6, 1e-6], [("a",), ("b",), ("b",)], [(), ("a",), ()], ["b"])
    sol = solve(mixed, backend=backend, mip_rel_gap=0.0)
    assert 2 in sol.chosen and 1 not in sol.chosen and sol.report.objective == pytest.approx(1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_candidates_outside_every_row_and_problems_without_rows(backend):
    # the last candidate writes a value nobody needs: its column appears in no row
    p = Problem([1.0, 2.0], [("a",), ("z",)], [(), ()], ["a"])
    assert solve(p, backend=backend).chosen == (0,)
    empty = Problem([1.0], [("a",)], [()], [])  # nothing required: no rows at all
    sol = solve(empty, backend=backend)
    assert sol.chosen == () and sol.report.objective == 0.0


def test_default_gap_is_tight():
    """With default settings the answer is optimal to within a part per million."""
    for seed in range(40):
        p = random_problem(random.Random(1000 + seed))
        best = brute(p)
        if not math.isinf(best):
            assert solve(p).report.objective == pytest.approx(best, rel=1e-6), seed


# ---------------------------------------------------------------------------------------------
# Ordering, sink components, deadlock cuts
# ---------------------------------------------------------------------------------------------

def test_order_key_decides_among_ready_kernels():
    p = Problem([1.0] * 4, [("a",), ("b",), ("c",), ("d",)], [(), (), (), ("a",)], ["a", "b", "c", "d"],
                order_key=[5.0, 1.0, 3.0, 0.0])
    ran, stuck, _ = order_kernels(p, [0, 1, 2, 3])
    assert ran == [1, 2, 0, 3] and stuck == []  # d reads a: smallest key, but only after a
    assert solve(p).chosen == (1, 2, 0, 3)


def sccs_by_reachability(nodes, edges):
    reach = {v: set() for v in nodes}
    for v in nodes:
        todo = list(edges[v])
        while todo:
            w = todo.pop()
            if w not in reach[v]:
                reach[v].add(w)
                todo.extend(edges[w])
    comps = {frozenset([v] + [w for w in nodes if w in reach[v] and v in reach[w]]) for v in nodes}
    return {c for c in comps if all(w in c for v in c for w in edges[v])}


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6))
def test_sink_components_match_reachability(seed):
    rng = random.Random(seed)
    nodes = rng.sample(range(20), rng.randint(1, 8))
    edges = {v: sorted(set(rng.sample(nodes, rng.randint(0, min(3, len(nodes)))))) for v in nodes}
    got = solver._sink_components(nodes, edges)
    assert sorted(map(sorted, got)) == sorted(map(sorted, sccs_by_reachability(nodes, edges)))


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**6))
def test_deadlock_cuts_hold_for_every_executable_selection_and_cut_off_the_stuck_one(seed):
    """Each cut (M, W): every executable selection that writes a value of M contains a kernel of W,
    and the selection it was made from contains none (so the cut removes it)."""
    rng = random.Random(seed)
    p = random_problem(rng)
    chosen = rng.sample(range(len(p.costs)), rng.randint(1, len(p.costs)))
    cuts = deadlock_cuts(p, chosen)
    stuck = order_kernels(p, chosen)[1]
    assert bool(cuts) == bool(stuck)
    for lacking, entry in cuts:
        assert lacking and not set(entry) & set(chosen)
        for r in range(len(p.costs) + 1):
            for combo in itertools.combinations(range(len(p.costs)), r):
                avail = executable(p, combo)
                if avail is not None and set(lacking) & avail:
                    assert set(combo) & set(entry), (lacking, entry, combo)


def test_cuts_for_values_of_any_hashable_type_and_values_nobody_writes():
    # values named by strings and tuples (not mutually orderable); kernels 0 and 1 wait for each
    # other, kernel 2 needs "w", which no picked kernel writes
    p = Problem([1.0, 1.0, 1.0, 2.0, 5.0], [(("t", 1), "a"), ("t2", "b"), ("c",), ("w",), ("t2",)],
                [("t2",), (("t", 1),), ("w",), (), ()], ["a", "b", "c"])
    cuts = {tuple(map(repr, m)): e for m, e in deadlock_cuts(p, [0, 1, 2])}
    assert cuts == {tuple(sorted([repr(("t", 1)), repr("t2")])): [4], (repr("w"),): [3]}
    sol = solve(p, mip_rel_gap=0.0)
    assert sol.report.objective == pytest.approx(brute(p)) == 10.0


def test_the_deadlock_example_takes_one_cut_round_of_two_rows():
    """By hand: the first solve picks {0, 1}; its one sink component lacks t1 and t2 (two rows)."""
    for backend in BACKENDS:
        r = solve(DEADLOCK, backend=backend, mip_rel_gap=0.0).report
        assert (r.rounds, r.cuts) == (2, 2)
        # columns: 7 kernels + "is written" for each read value that has a writer (x, t1, t2)
        assert r.n_vars == 10 and r.n_rows >= 2 + 3 + 5 + 2
        assert r.backend == backend and isinstance(r.time_s, float) and r.time_s >= 0


# ---------------------------------------------------------------------------------------------
# Fallbacks and the report
# ---------------------------------------------------------------------------------------------

def test_status_names_the_backend_answer():
    assert solve(DEADLOCK, mip_rel_gap=0.0).report.status == "Optimal"
    assert "Optimal" in solve(DEADLOCK, backend="scipy", mip_rel_gap=0.0).report.status


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="unknown solver backend 'cplex'"):
        solve(DEADLOCK, backend="cplex")


def _fake(x_of, status="Feasible", optimal=False, bound=8.0):
    def run(m, costs, limit, gap):
        x = np.zeros(m.n_cols)
        x[list(x_of)] = 1.0
        for v, col in m.y_of.items():  # y as the program defines it: the value is written
            x[col] = float(any(v in DEADLOCK.writes[k] for k in x_of))
        return solver._Raw(status, optimal, x, bound)
    return run


def test_a_cheaper_start_wins_and_says_so(monkeypatch):
    # the backend answers kernels 6, 2, 3, 4, 5, 0: executable, cost 17; start costs 16
    monkeypatch.setattr(solver, "_run_highs", _fake([6, 2, 3, 4, 5, 0], "Time limit reached", True, 8.0))
    sol = solve(DEADLOCK, start=START)
    r = sol.report
    assert sorted(sol.chosen) == sorted(START) and isinstance(sol.chosen, tuple)
    assert r.status == "fallback to start (Time limit reached, start is better)"
    assert r.optimal is True  # the backend proved its own answer optimal, and start is no worse
    assert r.objective == 16.0 and r.bound == 8.0 and r.gap == pytest.approx(0.5)


def test_the_gap_is_relative_to_the_objective(monkeypatch):
    monkeypatch.setattr(solver, "_run_highs", _fake([6, 2, 3, 4, 5, 0], bound=12.0))
    r = solve(DEADLOCK, start=START).report
    assert r.optimal is False and r.bound == 12.0 and r.gap == pytest.approx(0.25)
    monkeypatch.setattr(solver, "_run_highs", _fake([6, 2, 3, 4, 5, 0], bound=math.nan))
    r = solve(DEADLOCK, start=START).report
    assert math.isnan(r.bound) and r.gap == math.inf  # no bound: no gap
    monkeypatch.setattr(solver, "_run_highs", _fake([6, 2, 3, 4, 5, 0], bound=16.0 * (1 + 1e-9)))
    r = solve(DEADLOCK, start=START).report  # a bound above the objective by the solver's tolerance
    assert r.bound == 16.0 and r.gap == 0.0


def test_a_time_limit_without_a_solution_falls_back_and_says_why(monkeypatch):
    monkeypatch.setattr(solver, "_run_highs", lambda m, c, t, g: solver._Raw("Time limit reached", False, None, -1.0))
    sol = solve(DEADLOCK, start=START)
    assert sol.report.status == "fallback to start (Time limit reached)" and sol.report.optimal is False
    assert isinstance(sol.chosen, tuple) and executable(DEADLOCK, sol.chosen) is not None
    assert list(sol.chosen) == order_kernels(DEADLOCK, START)[0]
    with pytest.raises(SolverError, match=r"start solution is not executable: kernels \[0, 1\] never become ready"):
        solve(DEADLOCK, start=[0, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cut_rounds_are_bounded(backend):
    sol = solve(DEADLOCK, backend=backend, start=START, max_rounds=1)
    r = sol.report
    assert r.status == "fallback to start (deadlock cuts exhausted)" and not r.optimal
    assert r.objective == 16.0 and r.bound <= 16.0 and r.rounds == 1
    with pytest.raises(SolverError, match="deadlock cuts exhausted"):
        solve(DEADLOCK, backend=backend, max_rounds=1)
    assert solve(DEADLOCK, backend=backend, max_rounds=2).report.rounds == 2  # two rounds suffice


# ---------------------------------------------------------------------------------------------
# What reaches the backends
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_each_round_gets_at_most_the_time_left(monkeypatch, backend):
    name = {"highs": "_run_highs", "scipy": "_run_scipy"}[backend]
    real, limits = getattr(solver, name), []

    def spy(m, costs, limit, gap):
        limits.append(limit)
        return real(m, costs, limit, gap)

    monkeypatch.setattr(solver, name, spy)
    solve(DEADLOCK, backend=backend, time_limit_s=0.5)
    assert len(limits) == 2 and all(0 < t <= 0.5 for t in limits) and limits[1] < 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_obey_a_zero_time_limit(backend):
    """Their time limit is passed on: at zero, neither may report a proven optimum."""
    run = {"highs": solver._run_highs, "scipy": solver._run_scipy}[backend]
    p = random_problem(random.Random(3))
    m = solver._Model(p)
    raw = run(m, np.asarray(p.costs), 0.0, 0.0)
    assert not raw.optimal and "time limit" in str(raw.status).lower()


@pytest.mark.parametrize("backend", BACKENDS)
def test_solving_is_quiet_and_leaves_stdout_working(capfd, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. scipy's "Unrecognized options"
        solve(DEADLOCK, backend=backend, mip_rel_gap=0.0)
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert out == "after\n" and err == ""


def test_highs_refuses_a_bad_option(monkeypatch):
    import highspy

    real = highspy.Highs.setOptionValue
    monkeypatch.setattr(highspy.Highs, "setOptionValue",
                        lambda self, k, v: real(self, "mip_rel_gapp" if k == "mip_rel_gap" else k, v))
    with pytest.raises(SolverError, match="HiGHS rejected option mip_rel_gap"):
        solve(DEADLOCK)


QUIET = """
import os
from kernorch.orchestrate.solver import Problem, solve
solve(Problem([1.0], [("a",)], [()], ["a"]))  # the process's first HiGHS instance prints its banner
os.write(1, b"after\\n")
"""


def test_highs_banner_stays_off_stdout_and_stdout_is_restored():
    """In a fresh process (HiGHS prints its banner once, from C++, at the first instance)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "after\n" and "HiGHS" not in r.stderr


def test_a_model_highs_refuses_is_an_error(monkeypatch):
    import highspy

    monkeypatch.setattr(highspy.Highs, "passModel", lambda self, lp: highspy.HighsStatus.kWarning)
    with pytest.raises(SolverError, match="^HiGHS rejected the model$"):
        solve(DEADLOCK)


def test_backends_see_costs_scaled_to_one_and_report_in_seconds(monkeypatch):
    """Kernel costs are microseconds: the backend gets them scaled (cheapest positive cost 1) and
    its bound comes back in seconds, with the gap relative to the objective (well below 1)."""
    us = Problem([c * 1e-6 for c in DEADLOCK.costs], DEADLOCK.writes, DEADLOCK.reads, DEADLOCK.required)
    seen = []
    fake = _fake([6, 2, 3, 4, 5, 0], bound=12.0)

    def spy(m, costs, limit, gap):
        seen.append(min(costs))
        return fake(m, costs, limit, gap)

    monkeypatch.setattr(solver, "_run_highs", spy)
    r = solve(us, start=START).report
    assert seen == [pytest.approx(1.0)]
    assert r.objective == pytest.approx(16e-6) and r.bound == pytest.approx(12e-6) and r.gap == pytest.approx(0.25)
