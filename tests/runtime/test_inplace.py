"""Outputs written over dying inputs (runtime/inplace.py): only where every prim computed from the
input is elementwise or a view and reads it at the index of the output element it computes; and
a compiled model whose kernels overwrite their inputs computes what the interpreter computes."""

import numpy as np
import torch

from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.orchestrate.knobs import Knobs
from kernorch.runtime.compile import compile as kn_compile
from kernorch.runtime.inplace import overwritable


def _members(b, first):
    return [p.output for p in b.g.prims if p.output >= first]


def test_a_residual_add_after_a_matmul_may_overwrite_the_residual():
    b = Builder()
    x, r = b.input((8, 16)), b.input((8, 16))
    first = b.g.next_id()
    y = b.unary(Op.RELU, b.binary(Op.ADD, b.matmul(x, b.constant(np.ones((16, 16), np.float32))), r))
    assert overwritable(b.g, _members(b, first), [x, r], [y]) == ((y, r),)  # x feeds the matmul: never


def test_a_permutation_there_and_back_is_the_identity_but_one_way_is_not():
    b = Builder()
    x = b.input((2, 3, 4))
    first = b.g.next_id()
    back = b.permute(b.unary(Op.NEG, b.permute(x, (0, 2, 1))), (0, 2, 1))
    assert overwritable(b.g, _members(b, first), [x], [back]) == ((back, x),)
    b2 = Builder()
    x2 = b2.input((4, 4))
    first2 = b2.g.next_id()
    t = b2.unary(Op.NEG, b2.permute(x2, (1, 0)))  # same shape, other index: t[i, j] reads x[j, i]
    assert overwritable(b2.g, _members(b2, first2), [x2], [t]) == ()


def test_reads_at_other_indices_other_dtypes_and_other_outputs_forbid_it():
    b = Builder()
    x = b.input((4, 8))
    first = b.g.next_id()
    s = b.reduce(Op.SUM, x, [1])  # every x[i, :] read for s[i]
    y = b.binary(Op.SUB, x, b.broadcast_to(s, (4, 8)))
    assert overwritable(b.g, _members(b, first), [x], [y]) == ()
    c = Builder()
    x = c.input((4, 8))
    first = c.g.next_id()
    h = c.cast(c.unary(Op.NEG, x), "float64")
    assert overwritable(c.g, _members(c, first), [x], [h]) == ()
    d = Builder()
    x = d.input((4, 8))
    first = d.g.next_id()
    n = d.unary(Op.NEG, x)
    e = d.unary(Op.EXP, n)
    assert overwritable(d.g, _members(d, first), [x], [n, e]) == ()  # two outputs computed from x


def _residual_net():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, 1) for _ in range(4))

        def forward(self, x):
            h0 = torch.relu(self.convs[0](x))
            h1 = torch.relu(self.convs[1](h0))
            h2 = torch.relu(self.convs[2](h1) + h0)  # the residual h0 dies in this kernel
            return self.convs[3](h2)

    return Net().eval(), (torch.randn(1, 8, 12, 12),)


def test_a_compiled_model_that_overwrites_inputs_matches_the_interpreter(tmp_path):
    net, args = _residual_net()
    m = kn_compile(net, args, cost="model", providers=(), db=tmp_path / "t.db", progress=False,
                   knobs=Knobs(layouts=False))
    ex, slots = m.executable, m.executable.memory.slot_of
    shared = [k for k, kern in enumerate(ex.kernels)
              if any(o in slots[k] and slots[k][o] == slots[k].get(i) for o in kern.outputs for i in kern.inputs)]
    assert shared, "no kernel of the residual net writes over its input"
    want = interp.run(m.graph, {m.graph.inputs[0]: args[0].numpy()})[m.graph.outputs[0]]
    got = m(*args)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    ex.native = False
    np.testing.assert_array_equal(m(*args).numpy(), got.numpy())  # the Python loop, bit for bit
