"""The optimal strategy equals brute force over all executable sets of candidates."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import (
    cheapest_plan,
    cheapest_subset,
    legal_candidates,
    profile,
    random_cost,
    small_dags,
    structural_key,
)

from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.strategies import orchestrate
from kernorch.orchestrate.synthetic import transformer_dag

EXACT = Knobs(max_segment_nodes=64, max_kernel_nodes=10, mip_rel_gap=0.0)


def gated(cost, can_generate):
    return lambda c: cost(c) if can_generate(c) else None


@profile(100)
@given(small_dags(max_nodes=10), st.integers(0, 10**6), st.booleans(), st.booleans())
def test_optimal_equals_brute_force(dag, seed, multi, picky):
    cost = random_cost(seed)

    def can_generate(c: Candidate) -> bool:  # a code generator that refuses some fused kernels
        return not picky or len(c.nodes) == 1 or hash((seed, c.nodes)) % 3 != 0

    knobs = Knobs(**{**EXACT.__dict__, "multi_output": multi, "seed_baselines": multi})
    plan = orchestrate(dag, "optimal", cost, can_generate, knobs=knobs)
    check_plan(dag, plan)
    best = cheapest_plan(dag, legal_candidates(dag, 10, multi), gated(cost, can_generate))
    assert plan.cost == pytest.approx(best, rel=1e-9)
    assert plan.report.optimal


@profile(25)
@given(small_dags(max_nodes=4, min_nodes=2), st.integers(0, 10**6), st.booleans())
def test_optimal_equals_literal_subset_enumeration(dag, seed, multi):
    cost = random_cost(seed)
    plan = orchestrate(dag, "optimal", cost, knobs=Knobs(**{**EXACT.__dict__, "multi_output": multi, "seed_baselines": multi}))
    check_plan(dag, plan)
    cands = sorted(legal_candidates(dag, 10, multi), key=repr)
    assert plan.cost == pytest.approx(cheapest_subset(dag, cands, cost), rel=1e-9)


def deadlock_dag():
    # Note [multi-output deadlock]: x->t1, x->a, y->t2, y->b, t1->b, t2->a.
    x, y, t1, t2, a, b = range(6)
    return make_dag({x: (), y: (), t1: (x,), t2: (y,), a: (x, t2), b: (y, t1)}, outputs=[a, b])


def test_deadlock_pair_is_avoided():
    dag = deadlock_dag()
    cyclic = ({0, 2, 4}, {1, 3, 5})

    def cost(c: Candidate) -> float:
        return 1.0 if set(c.nodes) in cyclic and len(c.outputs) == 2 else 2.0 + len(c.nodes)

    plan = orchestrate(dag, "optimal", cost, knobs=Knobs(**{**EXACT.__dict__, "seed_baselines": False}))
    check_plan(dag, plan)
    assert plan.report.cuts >= 1, "the first solution was the deadlocked pair"
    assert plan.cost == pytest.approx(cheapest_plan(dag, legal_candidates(dag, 10, True), cost))
    assert plan.cost > 2.0


def test_recomputation_beats_writing_a_wide_value():
    # x broadcasts a small input to a wide value that two matmuls read. Recomputing x inside each
    # matmul's kernel reads 1 KiB twice; writing x once costs 64 MiB out and 2 x 64 MiB back in.
    x, a, b = range(3)
    dag = make_dag(
        {x: (), a: (x,), b: (x,)},
        kind={x: "broadcast", a: "linear", b: "linear"},
        nbytes={x: 64 << 20, a: 4096, b: 4096},
        input_bytes={x: 1024, a: 4096, b: 4096},
        flops={a: 1e6, b: 1e6},
    )
    cost = RooflineCost(bandwidth_bytes_per_s=1e10, peak_flops=1e12, launch_overhead_s=5e-6).bind(dag)
    plan = orchestrate(dag, "optimal", cost, knobs=EXACT)
    check_plan(dag, plan)
    assert sorted(sorted(k.nodes) for k in plan.kernels) == [[x, a], [x, b]]
    assert sum(x in k.nodes for k in plan.kernels) == 2
    assert plan.cost == pytest.approx(cheapest_plan(dag, legal_candidates(dag, 10, True), cost))
    assert plan.cost < orchestrate(dag, "unfused", cost).cost


def test_identical_layers_are_priced_and_solved_once():
    dag = transformer_dag(n_layers=4, seq=16, hidden=32, heads=2)
    calls = []
    roofline = RooflineCost().bind(dag)

    def cost(c):
        calls.append(c)
        return roofline(c)

    plan = orchestrate(dag, "optimal", cost, key_fn=structural_key(dag))
    check_plan(dag, plan)
    assert len(calls) == plan.stats["cost_calls"] == plan.stats["distinct_keys"]
    assert plan.stats["distinct_keys"] < plan.stats["candidates"] / 2
    assert plan.stats["distinct_segments"] < plan.stats["segments"]
    again = orchestrate(dag, "optimal", roofline)  # no key: every candidate priced on its own
    check_plan(dag, again)
    assert again.cost == pytest.approx(plan.cost)
