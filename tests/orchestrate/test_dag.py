"""Dag: validation, successors, sub-dags and dead-node removal."""

import pytest

from kernorch.orchestrate.candidate import is_connected, is_convex, multi_output, single_output
from kernorch.orchestrate.dag import make_dag


def diamond():
    # 0 -> 1 -> 3, 0 -> 2 -> 3, 4 dead (reads 1, feeds nothing that is an output)
    return make_dag({0: (), 1: (0,), 2: (0,), 3: (1, 2), 4: (1,)}, outputs=[3], nbytes={1: 100})


def test_succs_in_topological_order():
    d = diamond()
    assert d.succs[0] == (1, 2)
    assert d.succs[1] == (3, 4)
    assert d.succs[3] == ()


def test_rejects_reads_of_later_nodes():
    with pytest.raises(ValueError, match="node 0 reads 1, which is not an earlier node"):
        make_dag({0: (1,), 1: ()})


def test_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown kind 'fancy'"):
        make_dag({0: ()}, kind={0: "fancy"})


def test_subdag_turns_cut_reads_into_external_bytes_and_outputs():
    d = diamond()
    s = d.subdag([2, 3])
    assert s.nodes == (2, 3)
    assert s.preds[3] == (2,)
    assert s.input_bytes[3] == 100  # it read node 1 (100 bytes), now outside
    assert s.input_bytes[2] == 4096  # it read node 0
    assert s.outputs == {3}
    head = d.subdag([0, 1])
    assert head.outputs == {0, 1}  # both read by dropped nodes


def test_without_dead_drops_only_unneeded_nodes():
    d = diamond()
    live = d.without_dead()
    assert live.nodes == (0, 1, 2, 3)
    assert live.succs[1] == (3,)
    assert d.without_dead().without_dead() == live


def test_flavours_and_convexity():
    d = diamond()
    assert not is_convex(d, {0, 3})  # 0 -> 1 -> 3 leaves and comes back
    assert is_convex(d, {0, 1, 2, 3})
    assert not is_connected(d, {1, 2})
    assert single_output(d, {0, 1}).outputs == {1}
    assert single_output(d, {1, 2}) is None  # two sinks
    c = multi_output(d, {0, 1})
    assert c.outputs == {0, 1} and c.inputs == set()
