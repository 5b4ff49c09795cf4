"""Activation layout as a plan choice: around every 2-D convolution, identity pairs of views
``x -> permute to NHWC -> permute back -> conv -> y -> permute to NHWC -> permute back``; a
paired value has one NHWC view and each of its readers its own view back.

The pair computes nothing, but it gives the orchestrator a value in channels-last order on each
side of the convolution. A kernel that ends at the NHWC value writes channels-last memory (a
convolution kernel hands oneDNN's NHWC result over without converting it; a generated kernel
writes through the permutation); a kernel that starts from it reads channels-last memory. Where
the solver cuts decides where layouts change, and a lone permutation kernel is a layout
conversion with its own measured cost. Kernels that hold both views of a pair see plain NCHW,
so every plan of the graph without the pairs is still a plan of the graph with them.

An elementwise value computed from a convolution's output (its activation, ahead of a squeeze-and-
excitation block's pooling or a residual's second reader) is paired too when a cut is likely there:
it has several readers or a reduction reads it. Unpaired, a kernel ending there had to write NCHW,
so MobileNetV3's depthwise convolutions stored their channels-last result transposed and its pooling
read it back across channels.

In a quantized model (rewrite/quantized.py) a convolution reads ``cast(xq) - zx``: the pair goes on
the integers ``xq`` instead, and on the integers its requantization writes, so int8 kernels pass
channels-last uint8 memory to each other (providers/onednn_int8.py) instead of converting it.

Applied after the rewrites (``view_chain`` would cancel each pair)."""

from __future__ import annotations

from kernorch.ir import layout
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import Kind, Op, Prim, ValueId

PAIR_ACTIVATION_CUTS = True  # pair activation_cuts too; off: an A/B switch
FLOATS = ("float32", "float64", "bfloat16")
QUANTIZED = ("uint8", "int8")
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def is_layout_pair_target(g: Graph, p: Prim) -> bool:
    """A 2-D convolution on float data whose activation is computed or fed at run time."""
    return (p.op is Op.CONV and len(g.types[p.output].shape) == 4
            and g.types[p.output].dtype in FLOATS)


def activation_cuts(g: Graph) -> set[ValueId]:
    """Elementwise values computed from convolution outputs (through elementwise prims only), 4-D
    floats with more than one pixel, that several prims or a reduction read: where kernels end."""
    readers = g.consumers()
    near = {p.output for p in g.prims if is_layout_pair_target(g, p)}
    cuts = set()
    for p in g.prims:
        t = g.types[p.output]
        if (p.kind is not Kind.ELEMENTWISE or not near.intersection(p.inputs) or len(t.shape) != 4
                or t.dtype not in FLOATS + QUANTIZED or t.shape[2] * t.shape[3] == 1):
            continue
        near.add(p.output)
        if t.dtype in QUANTIZED and p.op is Op.CAST:  # a requantization: int8 kernels end here
            cuts.add(p.output)
            continue
        if p.op is Op.CAST and g.types[p.inputs[0]].dtype in QUANTIZED:
            continue  # a dequantization: the integers it reads are paired, it is computed where it is read
        rs = readers.get(p.output, [])
        if len(rs) > 1 or any(r.kind is Kind.REDUCE for r in rs):
            cuts.add(p.output)
    return cuts


def _quantized_source(g: Graph, made: dict[ValueId, Prim], v: ValueId) -> ValueId:
    """The integers ``xq`` when ``v`` is their dequantization ``cast(xq) [- zx]``, else ``v``."""
    p = made.get(v)
    if p is not None and p.op is Op.SUB and p.inputs[1] in g.constants and g.types[p.inputs[1]].shape == ():
        p = made.get(p.inputs[0])
    if p is not None and p.op is Op.CAST and g.types[p.inputs[0]].dtype in QUANTIZED:
        return p.inputs[0]
    return v


def _epilogue_end(g: Graph, made: dict[ValueId, Prim], readers: dict[ValueId, list[Prim]],
                  v: ValueId) -> ValueId | None:
    """The last value of an int8 convolution's scaling, bias and ReLU (each the only reader of the
    one before, with a constant operand), or None when a requantization (a division) follows."""
    while True:
        rs = readers.get(v, [])
        if len(rs) != 1 or rs[0].op not in (Op.MUL, Op.ADD, Op.MAX, Op.RELU, Op.DIV) or g.types[rs[0].output] != g.types[v]:
            return v
        if rs[0].op is Op.DIV:
            return None
        if rs[0].op is Op.RELU:
            v = rs[0].output
            continue
        other = rs[0].inputs[1] if rs[0].inputs[0] == v else rs[0].inputs[0]
        q = made.get(other)
        if other not in g.constants and (q is None or q.op is not Op.BROADCAST or q.inputs[0] not in g.constants):
            return v
        v = rs[0].output


def channels_last_pairs(g: Graph) -> tuple[Graph, int]:
    """A copy of ``g`` with NHWC view pairs on both sides of every 2-D convolution, and the
    number of activations paired. Graph inputs, outputs and names are kept.

    A paired value gets one NHWC view, right after its producer, and every reader (not only the
    convolution) reads a view back of its own, placed just before it. So a residual add may read
    the same channels-last memory as the block's first convolution, and a segment cut between
    the two (partition.py) is crossed by the NHWC view or the plain value, never by a view back
    that would force NCHW memory on every reader. The NHWC view takes its producer's operator as
    origin and each view back its reader's, so the cut, which avoids splitting an operator,
    falls between the two views."""
    out = Graph()
    out.types = dict(g.types)
    out.inputs = list(g.inputs)
    out.outputs = list(g.outputs)
    out.constants = dict(g.constants)
    out.names = dict(g.names)
    b = Builder(out)
    made = g.producers()
    sources = {p.output: _quantized_source(g, made, p.inputs[0]) for p in g.prims if is_layout_pair_target(g, p)}
    # an int8 convolution's float output only feeds its epilogue: the epilogue's end is paired (or,
    # when it requantizes, the integers it writes: activation_cuts)
    readers = g.consumers()
    targets = {v if src == made[v].inputs[0] else _epilogue_end(g, made, readers, v) for v, src in sources.items()}
    targets.discard(None)
    targets |= {src for v, src in sources.items() if src not in g.constants}
    if PAIR_ACTIVATION_CUTS:
        targets |= activation_cuts(g)
    nhwc: dict[ValueId, ValueId] = {}  # paired activation -> its channels-last view

    def to_nhwc(v: ValueId, origin: str) -> None:
        b.origin = origin
        nhwc[v] = b.view(v, layout.permute(out.types[v].shape, TO_NHWC))

    for v in g.inputs:
        if v in targets:
            to_nhwc(v, next(p.origin for p in g.prims if v in p.inputs))
    for p in g.prims:
        b.origin = p.origin
        back = {v: b.view(nhwc[v], layout.permute(out.types[nhwc[v]].shape, TO_NCHW))
                for v in dict.fromkeys(p.inputs) if v in nhwc}
        ins = tuple(back.get(v, v) for v in p.inputs)
        out.prims.append(Prim(p.op, ins, p.output, p.attrs, p.origin))
        if p.output in targets:
            to_nhwc(p.output, p.origin)
    return out, len(nhwc)
