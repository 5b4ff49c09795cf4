"""Groups planned as one node (orchestrate/contract.py): the contracted dag is the quotient the
module describes, and the optimal plan with groups equals brute force over the candidates that
keep every group whole."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import cheapest_plan, legal_candidates, profile, random_cost, small_dags

from kernorch.orchestrate.contract import contract
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.strategies import orchestrate

EXACT = Knobs(max_segment_nodes=64, max_kernel_nodes=10, mip_rel_gap=0.0)


def test_a_group_becomes_its_root_reading_what_its_members_read():
    # 0 -> 2 -> 3 -> {4, 5};  1 -> 3;  group {2, 3} (2 read only by 3); {0, 4} is no in-tree (0 is read by 2)
    dag = make_dag({0: (), 1: (), 2: (0,), 3: (2, 1), 4: (3,), 5: (3,)}, outputs=[4, 5])
    c = contract(dag, [frozenset({2, 3}), frozenset({0, 4})])
    assert c.dag.nodes == (0, 1, 3, 4, 5)
    assert c.dag.preds[3] == (0, 1) and c.dag.preds[4] == (3,) and c.dag.outputs == dag.outputs
    assert c.members[3] == (2, 3) and c.members[0] == (0,)
    assert c.dag.nbytes[3] == dag.nbytes[3] and c.dag.flops[3] == dag.flops[2] + dag.flops[3]


def test_a_member_read_outside_its_group_or_an_output_leaves_the_group_alone():
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (1,)}, outputs=[2, 3])
    assert contract(dag, [frozenset({1, 2})]).dag.nodes == dag.nodes  # 1 is read by 3 too
    dag = make_dag({0: (), 1: (0,), 2: (1,)}, outputs=[1, 2])
    assert contract(dag, [frozenset({1, 2})]).dag.nodes == dag.nodes  # 1 is a graph output


def chains(dag):
    """Groups as a quantized model has them: each elementwise node joins its only reader's group
    when that reader is elementwise too."""
    root = {}
    for n in reversed(dag.nodes):
        succ = dag.succs[n]
        joins = (len(succ) == 1 and n not in dag.outputs and dag.kind[n] == "elementwise"
                 and dag.kind[succ[0]] == "elementwise")
        root[n] = root[succ[0]] if joins else n
    groups = {}
    for n, r in root.items():
        groups.setdefault(r, set()).add(n)
    return tuple(frozenset(g) for g in groups.values() if len(g) > 1)


@profile(80)
@given(small_dags(max_nodes=10), st.integers(0, 10**6), st.booleans())
def test_optimal_with_groups_equals_brute_force_over_plans_keeping_groups_whole(dag, seed, multi):
    groups = chains(dag)
    cost = random_cost(seed)
    knobs = Knobs(**{**EXACT.__dict__, "multi_output": multi, "seed_baselines": multi, "groups": groups})
    plan = orchestrate(dag, "optimal", cost, knobs=knobs)
    check_plan(dag, plan)
    assert not any(0 < len(k.nodes & g) < len(g) for k in plan.kernels for g in groups)
    whole = [c for c in legal_candidates(dag, 10, multi) if not any(0 < len(c.nodes & g) < len(g) for g in groups)]
    assert plan.cost == pytest.approx(cheapest_plan(dag, whole, cost), rel=1e-9)


def test_seeds_map_to_roots_and_a_seed_cutting_a_group_is_dropped():
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, outputs=[3])
    c = contract(dag, [frozenset({1, 2})])
    knobs = c.knobs(Knobs(seeds=(frozenset({0, 1, 2}), frozenset({1, 3})), groups=(frozenset({1, 2}),)))
    assert knobs.seeds == (frozenset({0, 2}),) and knobs.groups == ()


def test_when_no_plan_keeps_the_groups_whole_the_plan_splits_them():
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, outputs=[3])  # a chain: one group {0..3}
    knobs = Knobs(**{**EXACT.__dict__, "groups": (frozenset(range(4)),)})
    plan = orchestrate(dag, "optimal", lambda c: 1.0, lambda c: len(c.nodes) == 1, knobs=knobs)  # fused kernels fail
    check_plan(dag, plan)
    assert [sorted(k.nodes) for k in plan.kernels] == [[0], [1], [2], [3]]
