"""Baseline rules (unfused, per-operator, greedy) and: optimal never costs more than them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import profile

from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.strategies import STRATEGIES, orchestrate
from kernorch.orchestrate.synthetic import random_dag, transformer_dag

ROOF = RooflineCost(bandwidth_bytes_per_s=2e10, peak_flops=2e11, launch_overhead_s=5e-6)


def blocks(plan):
    return sorted(sorted(k.nodes) for k in plan.kernels)


def plan_of(dag, strategy, can_generate=None):
    plan = orchestrate(dag, strategy, ROOF.bind(dag), can_generate)
    check_plan(dag, plan)
    return plan


def test_unfused_is_one_kernel_per_node():
    dag = random_dag(1, 12)
    assert blocks(plan_of(dag, "unfused")) == [[n] for n in dag.nodes]


def test_per_operator_splits_a_non_convex_group():
    # op B = {1, 3} but 1 -> 2 (op C) -> 3: not convex, so B runs as two kernels.
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, group={0: "A", 1: "B", 2: "C", 3: "B"})
    assert blocks(plan_of(dag, "per-operator")) == [[0], [1], [2], [3]]


def test_per_operator_splits_two_linears_into_maximal_pieces():
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, kind={0: "linear", 2: "linear"}, group=dict.fromkeys(range(4), "G"))
    assert blocks(plan_of(dag, "per-operator")) == [[0, 1], [2, 3]]


def test_per_operator_splits_what_the_generator_refuses():
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, group=dict.fromkeys(range(4), "G"))
    plan = plan_of(dag, "per-operator", can_generate=lambda c: len(c.nodes) <= 2)
    assert blocks(plan) == [[0, 1], [2, 3]]


def test_per_operator_breaks_a_deadlocked_pair_of_groups():
    # Note [multi-output deadlock]: each group is convex but each needs the other's output.
    dag = make_dag({0: (), 1: (), 2: (0,), 3: (1,), 4: (0, 3), 5: (1, 2)}, outputs=[4, 5],
                   group={0: "P", 2: "P", 4: "P", 1: "Q", 3: "Q", 5: "Q"})
    assert blocks(plan_of(dag, "per-operator")) == [[n] for n in range(6)]


def chain(kinds, groups, **kw):
    n = len(kinds)
    return make_dag({i: ((i - 1,) if i else ()) for i in range(n)}, kind=dict(enumerate(kinds)), group=dict(enumerate(groups)), **kw)


def test_greedy_fuses_epilogues_and_prologues_but_one_reduction():
    # gemm(linear + bias) -> gelu (2 elementwise) -> sum -> scale -> max -> exp
    dag = chain(
        ["linear", "elementwise", "elementwise", "elementwise", "reduce", "elementwise", "reduce", "elementwise"],
        ["gemm", "gemm", "gelu", "gelu", "sum", "scale", "max", "exp"],
    )
    assert blocks(plan_of(dag, "greedy")) == [[0, 1, 2, 3], [4, 5], [6, 7]]


def test_greedy_reduction_takes_its_injective_producer():
    dag = chain(["elementwise", "broadcast", "reduce"], ["add", "expand", "sum"])
    assert blocks(plan_of(dag, "greedy")) == [[0, 1, 2]]


def test_greedy_keeps_values_read_twice():
    # 0 is read by 1 and 2 (different operators): not its only consumer, so nothing fuses into 0.
    dag = make_dag({0: (), 1: (0,), 2: (0,)}, group={0: "a", 1: "b", 2: "c"})
    assert blocks(plan_of(dag, "greedy")) == [[0], [1], [2]]


def test_greedy_never_merges_into_or_from_opaque():
    dag = chain(["elementwise", "opaque", "elementwise"], ["a", "b", "c"])
    assert blocks(plan_of(dag, "greedy")) == [[0], [1], [2]]


def test_greedy_kernels_are_unions_of_operator_pieces():
    dag = transformer_dag(n_layers=2, seq=16, hidden=32, heads=2)
    units = {frozenset(b) for b in blocks(plan_of(dag, "per-operator"))}
    for kernel in blocks(plan_of(dag, "greedy")):
        inside = [u for u in units if u <= set(kernel)]
        assert set().union(*inside) == set(kernel)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown strategy 'fastest'"):
        orchestrate(random_dag(0, 3), "fastest", ROOF.bind(random_dag(0, 3)))


@profile(25)
@given(st.integers(0, 10**6), st.sampled_from(range(40, 5, -1)), st.integers(1, 3))
def test_optimal_never_costs_more_than_a_baseline(seed, n, max_preds):
    dag = random_dag(seed, n, max_preds=max_preds, window=4)
    costs = {s: plan_of(dag, s).cost for s in STRATEGIES}
    assert costs["optimal"] <= min(costs.values()) * (1 + 1e-12)
