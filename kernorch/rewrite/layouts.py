"""Activation layout as a plan choice: around every 2-D convolution, an identity pair of views
``x -> permute to NHWC -> permute back -> conv -> y -> permute to NHWC -> permute back``.

The pair computes nothing, but it gives the orchestrator a value in channels-last order on each
side of the convolution. A kernel that ends at the NHWC value writes channels-last memory (a
convolution kernel hands oneDNN's NHWC result over without converting it; a generated kernel
writes through the permutation); a kernel that starts from it reads channels-last memory. Where
the solver cuts decides where layouts change, and a lone permutation kernel is a layout
conversion with its own measured cost. Kernels that hold both views of a pair see plain NCHW,
so every plan of the graph without the pairs is still a plan of the graph with them.

Applied after the rewrites (``view_chain`` would cancel each pair)."""

from __future__ import annotations

from kernorch.ir import layout
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import Op, Prim, ValueId

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def is_layout_pair_target(g: Graph, p: Prim) -> bool:
    """A 2-D convolution on float data whose activation is computed or fed at run time."""
    return (p.op is Op.CONV and len(g.types[p.output].shape) == 4
            and g.types[p.output].dtype in ("float32", "float64"))


def channels_last_pairs(g: Graph) -> tuple[Graph, int]:
    """A copy of ``g`` with NHWC view pairs on both sides of every 2-D convolution, and the
    number of pairs inserted. Graph inputs, outputs and names are kept."""
    out = Graph()
    out.types = dict(g.types)
    out.inputs = list(g.inputs)
    out.outputs = list(g.outputs)
    out.constants = dict(g.constants)
    out.names = dict(g.names)
    b = Builder(out)
    rename: dict[ValueId, ValueId] = {}
    paired: dict[ValueId, ValueId] = {}  # activation -> its permuted-back twin (one pair per value)
    count = 0

    def pair(v: ValueId, origin: str) -> ValueId:
        nonlocal count
        if v not in paired:
            b.origin = origin
            shape = out.types[v].shape
            nhwc = b.view(v, layout.permute(shape, TO_NHWC))
            paired[v] = b.view(nhwc, layout.permute(out.types[nhwc].shape, TO_NCHW))
            count += 1
        return paired[v]

    for p in g.prims:
        ins = tuple(rename.get(v, v) for v in p.inputs)
        if is_layout_pair_target(g, p) and ins[0] not in g.constants:
            ins = (pair(ins[0], p.origin),) + ins[1:]
        out.prims.append(Prim(p.op, ins, p.output, p.attrs, p.origin))
        if is_layout_pair_target(g, p):
            rename[p.output] = pair(p.output, p.origin)
    return out, count
