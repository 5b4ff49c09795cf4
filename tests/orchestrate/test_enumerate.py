"""Enumeration yields exactly the legal sets a brute force over all subsets finds."""

from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import convex_by_paths, legal_candidates, legal_sets, profile, small_dags

from kernorch.orchestrate.candidate import is_convex
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.enumerate import EnumerationStats, convex_sets, enumerate_candidates
from kernorch.orchestrate.synthetic import random_dag


@profile(60)
@given(small_dags(max_nodes=9), st.sampled_from(range(9, 1, -1)))
def test_convex_sets_match_brute_force(dag, k):
    got = convex_sets(dag, dag.nodes, max_kernel_nodes=k)
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) == legal_sets(dag, k)


@profile(40)
@given(small_dags(max_nodes=9), st.sampled_from(range(9, 1, -1)))
def test_single_sink_sets_match_brute_force(dag, k):
    got = convex_sets(dag, dag.nodes, max_kernel_nodes=k, single_sink=True)
    assert set(got) == legal_sets(dag, k, single_sink=True)


@profile(40)
@given(small_dags(max_nodes=8), st.booleans())
def test_candidates_match_brute_force(dag, multi):
    got = enumerate_candidates(dag, dag.nodes, max_kernel_nodes=8, multi_output=multi)
    assert len(got) == len(set(got))
    assert set(got) == legal_candidates(dag, 8, multi)


@profile(60)
@given(small_dags(max_nodes=9), st.data())
def test_is_convex_matches_path_definition(dag, data):
    s = frozenset(data.draw(st.sets(st.sampled_from(dag.nodes), min_size=1)))
    assert is_convex(dag, s) == convex_by_paths(dag, s)


def test_candidates_of_a_segment_read_values_before_it():
    d = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)})
    got = enumerate_candidates(d, (2, 3), max_kernel_nodes=4, multi_output=True)
    assert {(tuple(sorted(c.nodes)), tuple(sorted(c.inputs))) for c in got} == {((2,), (1,)), ((3,), (2,)), ((2, 3), (1,))}


def test_can_generate_hook_filters_and_counts():
    d = make_dag({0: (), 1: (0,), 2: (1,)})
    stats = EnumerationStats()
    got = enumerate_candidates(
        d, d.nodes, max_kernel_nodes=3, multi_output=False, can_generate=lambda c: len(c.nodes) < 3, stats=stats
    )
    assert max(len(c.nodes) for c in got) == 2
    assert stats.rejected["cannot generate"] == 1


def test_set_budget_lowers_the_size_bound_of_a_dense_segment():
    d = random_dag(3, 40, window=6, max_preds=3)
    full = convex_sets(d, d.nodes, max_kernel_nodes=8)
    stats = EnumerationStats()
    got = enumerate_candidates(d, d.nodes, max_kernel_nodes=8, multi_output=True, stats=stats, max_sets=len(full) // 2)
    sizes = {len(c.nodes) for c in got}
    assert stats.truncated_segments == 1
    assert stats.sets <= len(full) // 2
    assert sizes == set(range(1, max(sizes) + 1)) and max(sizes) < 8  # whole sizes kept, the largest dropped
