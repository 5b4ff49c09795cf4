"""Automatic segmentation at narrow cuts."""

from hypothesis import given
from hypothesis import strategies as st
from orch_oracle import profile

from kernorch.orchestrate.partition import cut_widths, partition
from kernorch.orchestrate.synthetic import random_dag, transformer_dag


def brute_width(dag, p):
    before = set(dag.nodes[:p])
    return sum(1 for v in before if any(s not in before for s in dag.succs[v]))


@profile(30)
@given(st.integers(0, 10**6), st.sampled_from(range(60, 1, -1)), st.integers(1, 40), st.integers(0, 5))
def test_segments_tile_the_order_and_report_their_cut(seed, n, max_nodes, max_width):
    dag = random_dag(seed, n, window=5, max_preds=3)
    widths = cut_widths(dag)
    assert widths == [brute_width(dag, p) for p in range(n + 1)]
    segs = partition(dag, max_segment_nodes=max_nodes, max_cut_width=max_width)
    assert tuple(v for s in segs for v in s.nodes) == dag.nodes
    end = 0
    for s in segs:
        assert 1 <= len(s.nodes) <= max_nodes
        end += len(s.nodes)
        later = set(dag.nodes[end:])
        assert s.cut_values == {v for v in s.nodes if any(c in later for c in dag.succs[v])}
        assert s.width == widths[end] >= len(s.cut_values)
        assert s.forced == (s.width > max_width)
    assert segs[-1].width == 0


def test_transformer_is_cut_at_the_residual_stream():
    dag = transformer_dag(n_layers=3, seq=16, hidden=32, heads=2)
    segs = partition(dag, max_segment_nodes=64, max_cut_width=1)
    assert all(s.width <= 1 and not s.forced for s in segs)
    # a layer is 60 prims; cuts fall where only the residual value is live
    assert [len(s.nodes) for s in segs] == [61, 60, 60]
