"""check_plan accepts built plans and names what is wrong with broken ones."""

import dataclasses

import pytest

from kernorch.orchestrate.candidate import Candidate, multi_output
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.plan import PlanError, build_plan, check_plan


def dag():
    return make_dag({0: (), 1: (0,), 2: (1,), 3: (0, 2)}, outputs=[3])


def good():
    d = dag()
    return build_plan(d, [multi_output(d, {0, 1}), multi_output(d, {2}), multi_output(d, {3})], [1.0, 2.0, 3.0], "test")


def test_built_plan_is_valid_with_sources_and_lifetimes():
    plan = good()
    check_plan(dag(), plan)
    assert plan.sources == ({}, {1: 0}, {0: 0, 2: 1})
    assert plan.lifetimes == {0: (0, 2), 1: (0, 1), 2: (1, 2), 3: (2, 3)}
    assert plan.cost == 6.0


def broken(**changes):
    return dataclasses.replace(good(), **changes)


@pytest.mark.parametrize(
    "plan, message",
    [
        (lambda p: dataclasses.replace(p, kernels=p.kernels[::-1], sources=p.sources[::-1]), "kernel 0 reads value 0 before"),
        (lambda p: dataclasses.replace(p, kernels=p.kernels[:2], costs=p.costs[:2], sources=p.sources[:2]), "graph outputs [3] are never written"),
        (lambda p: dataclasses.replace(p, kernels=(Candidate(frozenset({0, 1}), frozenset({0, 1}), frozenset({2})),) + p.kernels[1:]), "kernel 0 declares inputs [2], reads []"),
        (lambda p: dataclasses.replace(p, sources=({}, {1: 2}, p.sources[2])), "kernel 1 records source 2 for value 1"),
        (lambda p: dataclasses.replace(p, cost=7.0), "plan cost 7.0 is not the sum"),
        (lambda p: dataclasses.replace(p, lifetimes={}), "buffer lifetimes do not match"),
        (lambda p: dataclasses.replace(p, costs=(1.0, float("nan"), 3.0)), "kernel 1 has cost nan"),
    ],
)
def test_broken_plans_are_rejected(plan, message):
    with pytest.raises(PlanError) as err:
        check_plan(dag(), plan(good()))
    assert message in str(err.value)


def test_non_convex_kernel_is_rejected():
    d = dag()
    k = Candidate(frozenset({0, 3}), frozenset({3}), frozenset({2}))
    plan = build_plan(d, [multi_output(d, {0, 1}), multi_output(d, {2}), k], [1.0, 1.0, 1.0], "test")
    with pytest.raises(PlanError, match=r"kernel 2 \(nodes \[0, 3\]\) is not convex"):
        check_plan(d, plan)
