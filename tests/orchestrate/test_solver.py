"""The binary program over plain arrays: brute-force agreement, deadlock cuts, fallbacks."""

import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import profile

from kernorch.orchestrate import solver
from kernorch.orchestrate.solver import Problem, SolverError, order_kernels, solve


def brute_force(p: Problem) -> float:
    """Every subset of candidates; valid if required values are written and an order exists."""
    best = math.inf
    n = len(p.costs)
    for r in range(n + 1):
        for combo in itertools.combinations(range(n), r):
            total = sum(p.costs[k] for k in combo)
            if total >= best:
                continue
            ran, stuck, avail = order_kernels(p, combo)
            if not stuck and set(p.required) <= avail:
                best = total
    return best


@st.composite
def problems(draw):
    """Random programs over <= 6 values and <= 9 candidates, each writing 1-2 and reading 0-2 values."""
    rng = random.Random(draw(st.integers(0, 10**6)))
    n_values = rng.randint(2, 6)
    n = draw(st.sampled_from(range(9, 2, -1)))
    writes = [rng.sample(range(n_values), rng.randint(1, 2)) for _ in range(n)]
    reads = [rng.sample([v for v in range(n_values) if v not in w], min(rng.randint(0, 2), n_values - len(w))) for w in writes]
    costs = [float(rng.randint(1, 20)) for _ in range(n)]
    required = rng.sample(range(n_values), rng.randint(1, 2))
    return Problem(costs, writes, reads, required)


@profile(80)
@given(problems(), st.sampled_from(["highs", "scipy"]))
def test_matches_brute_force(p, backend):
    best = brute_force(p)
    if math.isinf(best):
        with pytest.raises(SolverError):
            solve(p, backend=backend, mip_rel_gap=0.0)
        return
    sol = solve(p, backend=backend, mip_rel_gap=0.0)
    ran, stuck, avail = order_kernels(p, sol.chosen)
    assert not stuck and list(ran) == list(sol.chosen), "chosen kernels come in an executable order"
    assert set(p.required) <= avail
    assert sol.report.optimal
    assert sol.report.objective == pytest.approx(best)


# Note [multi-output deadlock] example: values x, y, t1, t2, a, b; x->t1, x->a, y->t2, y->b,
# t1->b, t2->a. Kernel 0 = {x, t1, a} writes t1, a and reads t2; kernel 1 = {y, t2, b} writes
# t2, b and reads t1. Each needs the other's output. Kernels 2..5 are single nodes.
X, Y, T1, T2, A, B = range(6)
DEADLOCK = Problem(
    costs=[1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 4.0],
    writes=[(T1, A), (T2, B), (T1,), (T2,), (A,), (B,), (X,)],
    reads=[(T2,), (T1,), (X,), (), (X, T2), (T1,), ()],
    required=(A, B),
)


def test_naive_program_picks_the_deadlocked_pair():
    model = solver._Model(DEADLOCK)
    raw = solver._run_highs(model, [1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 4.0], 10.0, 0.0)
    chosen = [k for k in range(model.n_x) if raw.x[k] > 0.5]
    assert chosen == [0, 1]
    ran, stuck, _ = order_kernels(DEADLOCK, chosen)
    assert ran == [] and stuck == [0, 1]


@pytest.mark.parametrize("backend", ["highs", "scipy"])
def test_deadlock_is_cut_and_resolved(backend):
    sol = solve(DEADLOCK, backend=backend, mip_rel_gap=0.0)
    assert sol.report.cuts >= 1 and sol.report.rounds >= 2
    assert sol.report.objective == pytest.approx(brute_force(DEADLOCK)) == 5.0  # t2 alone, {x,t1,a}, {y,t2,b}
    ran, stuck, _ = order_kernels(DEADLOCK, sol.chosen)
    assert not stuck


def test_deadlock_cut_keeps_plans_that_add_an_unblocking_kernel():
    # Forbidding {0, 1} outright would lose the optimum 0 + 1 + 3 (kernel 3 writes t2 so kernel 0
    # can start, then kernel 1). The cut subtracts kernels that write a missing value.
    p = Problem(DEADLOCK.costs[:3] + [0.5] + DEADLOCK.costs[4:], DEADLOCK.writes, DEADLOCK.reads, DEADLOCK.required)
    sol = solve(p, mip_rel_gap=0.0)
    assert sorted(sol.chosen) == [0, 1, 3]
    assert sol.report.objective == pytest.approx(2.5) == pytest.approx(brute_force(p))


def test_missing_writer_is_an_error():
    with pytest.raises(SolverError, match="required value 'z' is written by no candidate"):
        solve(Problem([1.0], [("a",)], [()], ["z"]))


def test_time_limit_falls_back_to_start_when_nothing_better(monkeypatch):
    def no_solution(m, costs, limit, gap):
        return solver._Raw("Time limit reached", False, None, 0.0)

    monkeypatch.setattr(solver, "_run_highs", no_solution)
    sol = solve(DEADLOCK, start=[6, 2, 3, 4, 5])
    assert not sol.report.optimal and sol.report.status.startswith("fallback to start")
    assert sol.report.objective == 16.0
    with pytest.raises(SolverError, match="no start solution"):
        solve(DEADLOCK)


def test_start_never_loses():
    sol = solve(DEADLOCK, start=[6, 2, 3, 4, 5])
    assert sol.report.objective <= 16.0
