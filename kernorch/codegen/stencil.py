"""Convolutions with few taps as generated C: each output element is a sum over its window,
written out tap by tap (``cin_per_group x kernel volume`` multiply-adds, masked at the pads).

Why: a depthwise 3x3 convolution on a 14x14x256 tensor costs oneDNN ~90 us on this class of
machine (dispatch, a primitive lookup, a reorder on NCHW) for 0.45 M multiply-adds, and its
output makes a round trip through memory for the batch norm and activation after it. As a C
stencil it is a loop over output rows that the compiler vectorizes along the width, fused with
its prologue and epilogue like any elementwise prim, and it runs inside the native driver. The
solver decides per candidate: the library providers still price the same convolution, so the
stencil is chosen only where it measured faster. Depthwise, grouped with few channels per
group, the stem (3 input channels) and 1x1 convolutions with few input channels qualify; above
MAX_DENSE_MACS multiply-adds only those with one input channel per group (depthwise) do.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from kernorch.codegen.indexing import normalize
from kernorch.codegen.ssa import elementwise
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim

if TYPE_CHECKING:
    from kernorch.codegen.scalar import Inliner

MAX_TAPS = 64  # multiply-adds per output element written out in the loop body
# A convolution that mixes input channels (more than one per group) and costs more multiply-adds than
# this is left to the GEMM template: written tap by tap it rereads every input once per output channel
# where a GEMM tile reuses it from registers, and such candidates (a 1x1 convolution fused after a max
# pool, 51 M multiply-adds) were never in a plan of the bench models, while their loop nests took 80% of
# the C compiler's time and half of the lowering's in a cold ResNet-50 compile. The dense stencils the
# plans do pick are squeeze-excitation convolutions on 1x1 pixels (<= 3840 multiply-adds).
MAX_DENSE_MACS = 1 << 16
FLOAT = ("float32", "float64")


def taps(g: Graph, p: Prim) -> int:
    """Multiply-adds per output element: input channels per group times the kernel volume."""
    return math.prod(g.types[p.inputs[1]].shape[1:])


def why_not(g: Graph, p: Prim) -> str | None:
    """None when the C generator computes convolution ``p`` tap by tap, else why not."""
    if p.op is not Op.CONV:
        return f"{p.op.value} is not a convolution the C generator writes out"
    x = g.types[p.inputs[0]]
    if len(x.shape) < 3:
        return f"convolution {g.name(p.output)} has no spatial dims"
    if any(g.types[v].dtype not in FLOAT for v in (*p.inputs, p.output)):
        return f"convolution {g.name(p.output)} is not on floats"
    if taps(g, p) > MAX_TAPS:
        return f"convolution {g.name(p.output)} has {taps(g, p)} taps per output (C stencils take <= {MAX_TAPS})"
    cpg, macs = g.types[p.inputs[1]].shape[1], taps(g, p) * math.prod(g.types[p.output].shape)
    if cpg > 1 and macs > MAX_DENSE_MACS:
        return (f"convolution {g.name(p.output)} mixes {cpg} channels per group in {macs} multiply-adds "
                f"(C stencils of such take <= {MAX_DENSE_MACS}: a GEMM reuses their operands)")
    return None


def weight(g: Graph, p: Prim) -> int:
    """Recomputation weight of one output element (schedule.py's WEIGHT units)."""
    return 2 * taps(g, p)


def value(inl: "Inliner", p: Prim, idx: tuple[ix.Expr, ...]) -> str:
    """SSA name of the convolution's output at ``idx`` (N, C_out, spatial...): the taps summed in
    (input channel, kernel position) order, then the bias."""
    g, b, sizes = inl.g, inl.body, inl.sizes
    a = p.attrs
    dtype = g.types[p.output].dtype
    x_shape, w_shape = g.types[p.inputs[0]].shape, g.types[p.inputs[1]].shape
    cpg, kernel = w_shape[1], w_shape[2:]
    per_group = w_shape[0] // a.groups
    n, co, out = idx[0], idx[1], idx[2:]
    group = co if per_group == 1 else ix.floordiv(co, per_group, sizes)
    acc: str | None = None
    inl.stencil_depth += 1
    try:
        for ci in range(cpg):
            chan = normalize(group * cpg + ci, sizes) if cpg > 1 else group
            for pos in itertools.product(*(range(n_) for n_ in kernel)):
                spatial = [normalize(o * a.strides[d] + (pos[d] * a.dilations[d] - a.pads[d]), sizes)
                           for d, o in enumerate(out)]
                ok = inl.conds([(e, 0, x_shape[2 + d]) for d, e in enumerate(spatial)])
                if ok is False:
                    continue
                xv = inl.value(p.inputs[0], [n, chan, *spatial])
                if ok is not None:
                    xv = b.let("select", b.dtype[xv], (ok, xv, b.imm(0, b.dtype[xv])))
                wv = inl.value(p.inputs[1], [co, ix.const(ci), *(ix.const(q) for q in pos)])
                term = elementwise(b, Op.MUL, (xv, wv), dtype)
                acc = term if acc is None else elementwise(b, Op.ADD, (acc, term), dtype)
    finally:
        inl.stencil_depth -= 1
    if acc is None:
        acc = b.imm(0, dtype)
    if len(p.inputs) > 2:
        acc = elementwise(b, Op.ADD, (acc, inl.value(p.inputs[2], [co])), dtype)
    return acc
