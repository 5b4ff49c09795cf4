"""Scale smoke test: a transformer-shaped primitive graph of ~1500 nodes (width ~6) is enumerated
and solved. Prints the counts and the wall time; timings proper belong in bench/ (never asserted
here: a loaded machine would fail a correct plan). What is asserted is that the solver keeps to its
time budget (``Knobs.time_limit_s``): HiGHS stops on the wall clock, so load does not fail that."""

import time

import pytest
from orch_oracle import structural_key

from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.plan import check_plan
from kernorch.orchestrate.partition import cut_widths
from kernorch.orchestrate.strategies import orchestrate
from kernorch.orchestrate.synthetic import random_dag, transformer_dag


def run(dag, key_fn=None, knobs=Knobs()):
    cost = RooflineCost().bind(dag)
    t = time.perf_counter()
    plan = orchestrate(dag, "optimal", cost, key_fn=key_fn, knobs=knobs)
    wall = time.perf_counter() - t
    check_plan(dag, plan)
    baselines = {s: orchestrate(dag, s, cost).cost for s in ("unfused", "per-operator", "greedy")}
    s = plan.stats
    print(
        f"\n{len(dag.nodes)} nodes, max width {max(cut_widths(dag))}: {s['segments']} segments "
        f"({s['distinct_segments']} distinct), {s['sets']} sets, {s['candidates']} candidates, "
        f"{s['distinct_keys']} priced; enumerate {s['enumerate_s']:.2f}s, solve {s['solve_s']:.2f}s, "
        f"total {wall:.2f}s\n{plan.summary()}; baselines "
        + ", ".join(f"{k} {v:.6g}" for k, v in baselines.items())
    )
    assert plan.cost <= min(baselines.values())
    return plan, wall


def test_transformer_1500_nodes():
    dag = transformer_dag(n_layers=25)
    assert 1400 <= len(dag.nodes) <= 1600
    plan, wall = run(dag, structural_key(dag))
    assert plan.report.optimal
    assert plan.stats["distinct_segments"] < 10  # identical layers are solved once
    # wall time is printed above, a figure (bench/orchestration_scale.py tracks it), not asserted:
    # a loaded CI machine must not fail a correct plan


@pytest.mark.slow
def test_random_1500_nodes_within_the_time_budget():
    """37 distinct segments that HiGHS needs ~24 s to close on two cores: given 4 s, the solve
    phase stops near 4 s (the bound allows twice that) with a plan still no worse than the
    baselines (their kernels are the solver's start)."""
    dag = random_dag(7, 1500, window=4)
    budget = 4.0
    plan, _ = run(dag, knobs=Knobs(time_limit_s=budget))
    assert plan.stats["solve_s"] <= 2 * budget, plan.stats["solve_s"]
