"""Reductions over small windows written out tap by tap, like a stencil (stencil.py).

Why: a pooling is a window view and a reduce over the window's few positions. As a
reduce stage the C lowering iterated the window positions outermost over a short row of outputs,
accumulating into a scratch array with every tap's bounds recomputed per element: a 3x3 average
pool on 320x14x14 took ~300 us where onnxruntime's AveragePool takes ~17. Written out as an
unrolled sum of the taps (each a masked load of the view), the reduce is one more elementwise value
of its consumers: computed in their loops, vectorized along the output row, fused with the scaling
and the residual around it, never stored. Only the C generator's CPU loops do this; the Triton
path keeps its reduce stages.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Mapping

from kernorch.codegen.stencil import MAX_TAPS
from kernorch.codegen.ssa import elementwise
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim

if TYPE_CHECKING:
    from kernorch.codegen.scalar import Inliner

# Sums only. A max pool written out this way ran no faster than its reduce stage (64x56x56, 3x3: 451 us
# vs 434, with the NaN-propagating max as a bitwise select; as "?:" gcc left the chain scalar: 1.7 ms).
COMBINE = {Op.SUM: Op.ADD}
FLOAT = ("float32", "float64")


def volume(g: Graph, p: Prim) -> int:
    """Positions reduced into each output element."""
    shape = g.types[p.inputs[0]].shape
    return math.prod(shape[a % len(shape)] for a in p.attrs.axes)


def is_window(g: Graph, p: Prim, producers: Mapping[int, Prim]) -> bool:
    """A sum over at most MAX_TAPS positions of sliding windows: a view computed in the same kernel
    with an input coordinate that moves with both a kept and a reduced index (a pooling's
    ``oh * stride + kh``). Global poolings and norms over a reshaped axis stay reduce stages: their
    taps are long contiguous rows, which a reduce loop reads best."""
    if p.kind is not Kind.REDUCE or p.op not in COMBINE or g.types[p.output].dtype not in FLOAT:
        return False
    src = producers.get(p.inputs[0])
    if src is None or src.op is not Op.VIEW or not 0 < volume(g, p) <= MAX_TAPS:
        return False
    reduced = {a % len(g.types[p.inputs[0]].shape) for a in p.attrs.axes}
    return any(free & reduced and free - reduced for free in map(ix.free_vars, src.attrs.map.index))


def weight(g: Graph, p: Prim) -> int:
    """Recomputation weight of one output element (schedule.py's WEIGHT units)."""
    return volume(g, p)


def value(inl: "Inliner", p: Prim, idx: tuple[ix.Expr, ...]) -> str:
    """SSA name of the reduce's output at ``idx``: its operand at every window position, added in
    row-major position order."""
    g = inl.g
    shape = g.types[p.inputs[0]].shape
    axes = sorted(a % len(shape) for a in p.attrs.axes)
    kept = [e for d, e in enumerate(idx) if d not in axes] if p.attrs.keepdims else list(idx)
    dtype = g.types[p.output].dtype
    acc: str | None = None
    inl.stencil_depth += 1
    try:
        for pos in itertools.product(*(range(shape[a]) for a in axes)):
            outer, taps = iter(kept), iter(pos)
            full = [ix.const(next(taps)) if d in axes else next(outer) for d in range(len(shape))]
            x = inl.value(p.inputs[0], full)
            acc = x if acc is None else elementwise(inl.body, COMBINE[p.op], (acc, x), dtype)
    finally:
        inl.stencil_depth -= 1
    assert acc is not None  # is_window: volume > 0
    return acc
