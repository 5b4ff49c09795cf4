"""from_graph.chained_prims on QDQ models from onnxruntime's quantizer: each QuantizeLinear's
prims (div, round, add, max, min, cast) are one group ending at the uint8 value, no group swallows
a uint8 value, and every member but the root is read only inside its group."""

import pytest

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Kind, Op
from kernorch.orchestrate.from_graph import chained_prims
from kernorch.rewrite.quantized import integer_linear
from tests.frontend.qdq_nets import qdq_model


@pytest.mark.parametrize("name", ["convnet", "block"])
def test_quantize_chains_are_groups_ending_at_the_integers(name):
    g, _ = integer_linear(import_onnx(qdq_model(name))[0])
    groups = chained_prims(g)
    made = {p.output: p for p in g.prims}
    readers = {}
    for p in g.prims:
        for v in set(p.inputs):
            readers.setdefault(v, []).append(p.output)
    root_of = {}
    for grp in groups:
        root = max(grp, key=[p.output for p in g.prims].index)
        for v in grp:
            root_of[v] = root
            if v != root:
                assert v not in g.outputs and set(readers[v]) <= grp
                assert made[v].kind in (Kind.ELEMENTWISE, Kind.BROADCAST) and g.types[v].dtype != "uint8"
    quantizers = [p for p in g.prims if p.op is Op.CAST and g.types[p.output].dtype == "uint8"]
    assert quantizers
    for cast in quantizers:  # walk back through min, max, [add], round, div: all in the cast's group
        v, ops = cast.inputs[0], []
        while made.get(v) is not None and made[v].op in (Op.MIN, Op.MAX, Op.ADD, Op.ROUND, Op.DIV):
            ops.append(made[v].op)
            assert root_of.get(v) == cast.output
            if made[v].op is Op.DIV:
                break
            v = made[v].inputs[0]
        assert ops[-1] is Op.DIV and Op.ROUND in ops
