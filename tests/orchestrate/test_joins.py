"""Joins across segment cuts (joins.py): on a chain cut into segments the plan is as cheap as the
exact optimum over one segment holding it all; on random dags the joined plan is valid and never
costs more than the segments' plans alone."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import profile, random_cost

from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.strategies import orchestrate
from kernorch.orchestrate.synthetic import random_dag

CUT = Knobs(max_segment_nodes=3, max_kernel_nodes=3, mip_rel_gap=0.0, max_cut_width=1)


def test_a_chain_cut_into_segments_is_joined_into_the_one_segment_optimum():
    chain = make_dag({i: ((i - 1,) if i else ()) for i in range(9)}, nbytes=dict.fromkeys(range(9), 1 << 20))
    cost = RooflineCost().bind(chain)
    apart = orchestrate(chain, "optimal", cost, knobs=Knobs(**{**CUT.__dict__, "join_cuts": False}))
    joined = orchestrate(chain, "optimal", cost, knobs=CUT)
    whole = orchestrate(chain, "optimal", cost, knobs=Knobs(max_segment_nodes=9, max_kernel_nodes=9, mip_rel_gap=0.0))
    check_plan(chain, joined)
    assert apart.stats["segments"] == 3 and len(apart.kernels) == 3 and apart.stats["joins"] == 0
    assert len(joined.kernels) == len(whole.kernels) == 1 and joined.stats["joins"] == 2
    assert joined.cost == pytest.approx(whole.cost) and joined.cost < apart.cost
    assert "(2 joined across segment cuts)" in joined.summary() and "joined" not in apart.summary()


@profile(40)
@given(st.integers(0, 10**6), st.integers(6, 30), st.booleans())
def test_joins_keep_the_plan_valid_and_never_cost_more(seed, n, roofline):
    dag = random_dag(seed, n, window=4, max_preds=2)
    cost = RooflineCost().bind(dag) if roofline else random_cost(seed)
    knobs = Knobs(max_segment_nodes=5, max_kernel_nodes=4, mip_rel_gap=0.0)
    apart = orchestrate(dag, "optimal", cost, knobs=Knobs(**{**knobs.__dict__, "join_cuts": False}))
    joined = orchestrate(dag, "optimal", cost, knobs=knobs)
    check_plan(dag, joined)
    assert joined.cost <= apart.cost + 1e-12
    assert (joined.cost < apart.cost) == (joined.stats["joins"] > 0)
    assert joined.cost == pytest.approx(sum(cost(c) for c in joined.kernels))
