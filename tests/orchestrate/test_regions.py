"""Provider regions: the shortest path over the segment chain (regions.py) against brute force,
and the optimal strategy handing runs of segments to a region hook."""

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.regions import choose_regions
from kernorch.orchestrate.strategies import orchestrate
from kernorch.orchestrate.synthetic import random_dag, transformer_dag


def covers(n: int):
    """Every way to choose disjoint runs of 0..n-1 (the rest keep their kernel plans)."""
    for cuts in itertools.product([0, 1, 2], repeat=n):  # 0: plan, 1: starts a run, 2: continues one
        if any(c == 2 and (s == 0 or cuts[s - 1] == 0) for s, c in enumerate(cuts)):
            continue
        runs, s = [], 0
        while s < n:
            if cuts[s] == 0:
                s += 1
                continue
            j = s
            while j + 1 < n and cuts[j + 1] == 2:
                j += 1
            runs.append((s, j))
            s = j + 1
        yield runs


def total(plan_costs, runs, price):
    inside = {s for i, j in runs for s in range(i, j + 1)}
    return sum(c for s, c in enumerate(plan_costs) if s not in inside) + sum(price(i, j) for i, j in runs)


@given(st.integers(1, 6), st.integers(0, 10**6), st.floats(0.0, 0.5))
def test_exact_estimates_give_the_brute_force_optimum(n, seed, saving):
    """When joined runs cost what the estimate says, the path is the optimum over all covers."""
    rng = random.Random(seed)
    plan_costs = [rng.uniform(0.5, 2.0) for _ in range(n)]
    single = [rng.uniform(0.5, 2.0) if rng.random() < 0.8 else None for _ in range(n)]

    def price(i, j):
        if any(single[s] is None for s in range(i, j + 1)):
            return None
        return sum(single[i:j + 1]) - (j - i) * saving

    runs = choose_regions(plan_costs, price, join_saving_s=saving)
    feasible = [r for r in covers(n) if all(price(*iv) is not None for iv in r)]
    best = min(total(plan_costs, r, price) for r in feasible)
    assert total(plan_costs, runs, price) == pytest.approx(best)


@given(st.integers(1, 7), st.integers(0, 10**6))
def test_any_prices_give_disjoint_priced_runs_no_worse_than_singles(n, seed):
    """With arbitrary true prices the estimate may miss runs, but the choice only uses runs it
    priced, and is never worse than the best cover by single segments."""
    rng = random.Random(seed)
    plan_costs = [rng.uniform(0.5, 2.0) for _ in range(n)]
    table = {(i, j): (rng.uniform(0.2, 3.0) if rng.random() < 0.9 else None) for i in range(n) for j in range(i, n)}
    asked = []

    def price(i, j):
        asked.append((i, j))
        return table[(i, j)]

    runs = choose_regions(plan_costs, price)
    assert len(asked) == len(set(asked)), "each run is priced once"
    assert all(iv in asked and table[iv] is not None for iv in runs)
    flat = [s for i, j in runs for s in range(i, j + 1)]
    assert flat == sorted(set(flat))
    singles = sum(min(c, table[(s, s)]) if table[(s, s)] is not None else c for s, c in enumerate(plan_costs))
    assert total(plan_costs, runs, lambda i, j: table[(i, j)]) <= singles + 1e-12


def test_no_region_when_kernel_plans_are_cheaper():
    assert choose_regions([1.0, 1.0, 1.0], lambda i, j: 10.0 * (j - i + 1)) == []


def test_cheap_joined_run_is_found_through_the_estimate():
    # Singles cost more than the plans; the whole run is cheaper than everything.
    prices = {(0, 0): 1.5, (1, 1): 1.5, (2, 2): 1.5, (0, 2): 1.0}
    runs = choose_regions([1.4, 1.4, 1.4], lambda i, j: prices.get((i, j), 4.0), join_saving_s=0.6)
    assert runs == [(0, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_optimal_hands_cheap_segments_to_regions(seed):
    """A region hook that halves the roofline price of anything holding no opaque node: the plan
    is valid, and uses regions exactly where the hook offers them."""
    dag = random_dag(seed, 60)
    cost = RooflineCost().bind(dag)
    knobs = Knobs(max_segment_nodes=12)

    def region(c):
        if any(dag.kind[n] == "opaque" for n in c.nodes):
            return None
        return 0.5 * cost(c)

    plan = orchestrate(dag, "optimal", cost, knobs=knobs, region_cost=region)
    check_plan(dag, plan)
    plain = orchestrate(dag, "optimal", cost, knobs=knobs)
    assert plain.regions == ()
    assert plan.cost <= plain.cost + 1e-15
    for k in plan.regions:
        assert not any(dag.kind[n] == "opaque" for n in plan.kernels[k].nodes)
    if all(dag.kind[n] != "opaque" for n in dag.nodes):
        assert len(plan.regions) >= 1
    off = orchestrate(dag, "optimal", cost, knobs=Knobs(max_segment_nodes=12, regions=False), region_cost=region)
    assert off.regions == () and off.cost == pytest.approx(plain.cost)


def test_repeated_layers_join_into_one_region():
    dag = transformer_dag(n_layers=3, seq=16, hidden=32, heads=2)
    cost = RooflineCost().bind(dag)
    calls = []

    def region(c):
        calls.append(len(c.nodes))
        return 1e-6  # a runtime that runs anything in a microsecond: one region is best

    plan = orchestrate(dag, "optimal", cost, region_cost=region)
    check_plan(dag, plan)
    assert len(plan.kernels) == 1 and plan.regions == (0,)
    assert plan.kernels[0].nodes == frozenset(dag.without_dead().nodes)


def test_near_ties_stop_the_search():
    """Joined runs of alike segments priced a few per cent above their estimate (noise): with no
    tolerance the search prices run after run; within the tolerance it stops at the singles, and
    the choice is within the tolerance of the brute-force optimum (Note [near ties stop the search])."""
    n = 7
    plan_costs = [10.0] * n

    def price(i, j):
        asked.append((i, j))
        return 1.0 if i == j else (j - i + 1) * 1.03

    asked = []
    choose_regions(plan_costs, price, tolerance=0.0)
    assert len(asked) > 3 * n
    asked = []
    runs = choose_regions(plan_costs, price, tolerance=0.02)
    assert len(asked) == n and runs == [(s, s) for s in range(n)]
    best = min(total(plan_costs, r, price) for r in covers(n))
    assert total(plan_costs, runs, price) <= 1.02 * best
