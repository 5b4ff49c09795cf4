"""Enumeration yields exactly the legal sets a brute force over all subsets finds."""

from dataclasses import replace

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


def test_set_budget_keeps_every_smaller_size_and_stays_within_budget():
    d = random_dag(3, 40, window=6, max_preds=3)
    full = convex_sets(d, d.nodes, max_kernel_nodes=8)
    stats = EnumerationStats()
    got = enumerate_candidates(d, d.nodes, max_kernel_nodes=8, multi_output=True, stats=stats, max_sets=len(full) // 2)
    sets = {c.nodes for c in got}
    assert stats.truncated_segments == 1
    assert stats.sets <= len(full) // 2 and sets <= set(full)
    first_cut = min(int(k.split()[-1].rstrip("+")) for k in stats.rejected if k.startswith("set budget"))
    assert {s for s in full if len(s) < first_cut} <= sets and first_cut < 8


def test_set_budget_lets_a_chain_beside_a_dense_part_reach_full_length():
    """An embedding gather into its norm is a chain; rotary embeddings beside it are dense. The
    budget stops the dense part, not the chain (Note [set budget])."""
    dense = random_dag(5, 30, window=6, max_preds=3)
    preds = {i: ((i - 1,) if i else ()) for i in range(10)}
    preds.update({10 + n: tuple(10 + p for p in dense.preds[n]) + ((9,) if n == 0 else ()) for n in dense.nodes})
    d = make_dag(preds)
    chain = frozenset(range(10))
    full = convex_sets(d, d.nodes, max_kernel_nodes=10)
    budget = sum(len(s) < 6 for s in full) + 40  # reached at size 6; the chain has 10 nodes
    stats = EnumerationStats()
    got = enumerate_candidates(d, d.nodes, max_kernel_nodes=10, multi_output=True, stats=stats, max_sets=budget)
    assert stats.truncated_segments == 1 and stats.sets <= budget
    assert chain in {c.nodes for c in got}

def test_tuning_budget_is_water_filled_over_the_segments_by_need():
    """A segment that needs fewer sets than an even share of the budget leaves the rest to the
    dense ones (an even split dropped the large kernels of every convolution segment of
    MobileNetV3). Needs come from convex_sets, the brute-force-checked enumerator."""
    from kernorch.orchestrate.knobs import Knobs
    from kernorch.orchestrate.partition import partition
    from kernorch.orchestrate.pricing import Pricer
    from kernorch.orchestrate.strategies import budget_shares

    dense = random_dag(7, 30, window=6, max_preds=3)
    preds = {i: ((i - 1,) if i else ()) for i in range(24)}
    preds.update({24 + n: tuple(24 + p for p in dense.preds[n]) + ((23,) if n == 0 else ()) for n in dense.nodes})
    d = make_dag(preds)
    knobs = Knobs(max_segment_nodes=30, max_kernel_nodes=8, max_segment_sets=10_000)
    segments = partition(d, max_segment_nodes=30, max_cut_width=4, max_kernel_nodes=8)
    need = [len(convex_sets(d, s.nodes, max_kernel_nodes=8)) for s in segments]
    assert len(segments) >= 2 and min(need) < max(need) // 3
    budget = (sum(need) + len(segments) * min(need)) // 2
    shares = budget_shares(d, segments, Pricer(lambda c: 1.0), replace(knobs, max_candidates=budget))
    even = budget // len(segments)
    assert sum(min(n, s) for n, s in zip(need, shares)) <= budget
    assert all(s >= n for n, s in zip(need, shares) if n <= even)  # the sparse enumerate fully
    assert max(shares) > even  # and what they leave goes to the dense
    assert budget_shares(d, segments, Pricer(lambda c: 1.0), knobs) == [10_000] * len(segments)
