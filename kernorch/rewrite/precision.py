"""bfloat16 as a graph rewrite (``precision="bf16"``): explicit casts the orchestrator places.

Every linear prim (matmul, convolution; not a grouped one) with float32 operands computes on bf16 operands, keeping
float32 accumulation, and rounds its result to bf16; a cast widens that result back to float32,
keeping the prim's value id, so everything after it reads float32 as before. Constant weights
become bf16 constants (a convolution's bias stays float32: it is added before the rounding).
Values where a kernel is likely to end get a storage pair ``v -> bf16 -> float32``: a value several
prims read (a residual) or a reduction reads (a normalisation's input) — unless a normalisation would
subtract it from its own mean or maximum (``_cancelling``): a transformer's residual stream keeps
float32. A linear reader reads the bf16 half directly; every other reader gets its own widening,
placed just before it (as layouts.py places its views back), so the widening falls in the reader's
segment (partition.py) and a kernel there reads the bf16 half from memory: a residual add can join
the convolution before it.

Nothing else changes: elementwise and reduction arithmetic stays float32, casts are elementwise
prims like any other. A kernel that ends at a bf16 value writes half the bytes; one that ends at
its float32 neighbour writes float32; one that holds both computes the rounding in registers. So
which values travel through memory in bf16 is the solver's choice among measured kernels, as
Korch would have it: a cast pair costs nothing unless a cut falls between its halves.

Graph inputs and outputs keep their dtype (the model's signature does not change), and a value
the model returns is never rounded on its way out.
"""

from __future__ import annotations

import numpy as np

from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import CastAttrs, Kind, Op, Prim, ValueId
from kernorch.ir.tensors import BFLOAT16
from kernorch.rewrite.patterns import without_prims

LINEAR_OPS = (Op.MATMUL, Op.CONV, Op.CONV_TRANSPOSE)
KEEPS_STORAGE = (Op.VIEW, Op.BROADCAST, Op.CAST, *LINEAR_OPS)  # no pair: their value is a view or already paired


def bf16_storage(g: Graph, linear: set[ValueId] | None = None) -> tuple[Graph, int]:
    """A copy of ``g`` in bf16 as described above, and the number of prims rounded to bf16
    (linear prims and paired values). ``linear``: the outputs of the linear prims to compute in
    bf16 (providers/bf16_choice.py measures where bf16 is faster); None: every one that can."""
    out = without_prims(g)
    b = Builder(out)
    readers = g.consumers()
    kept = set(g.outputs) | _cancelling(g, readers)  # values never stored in bf16
    stored: dict[ValueId, ValueId] = {}  # a paired value -> its bf16 half
    narrow: dict[ValueId, ValueId] = {}  # a float32 value -> the bf16 value it was widened from
    weights: dict[ValueId, ValueId] = {}  # a float32 constant -> its bf16 copy
    rounded = 0

    def bf16_operand(v: ValueId) -> ValueId:
        if v in narrow:
            return narrow[v]
        if v in out.constants:
            if v not in weights:
                weights[v] = b.constant(np.asarray(out.constants[v]).astype(BFLOAT16))
            return weights[v]
        narrow[v] = b.cast(v, "bfloat16")
        return narrow[v]

    for p in g.prims:
        b.origin = p.origin
        dense = (p.op in LINEAR_OPS and _all_float32(g, p) and not _grouped(p)
                 and (linear is None or p.output in linear))
        if dense:
            ins = tuple(stored.get(v, v) for v in p.inputs)  # a linear reader takes the bf16 half itself
        else:  # each other reader widens the bf16 half of a pair just before it (in its own segment)
            widened = {v: b.cast(stored[v], "float32") for v in dict.fromkeys(p.inputs) if v in stored}
            ins = tuple(widened.get(v, v) for v in p.inputs)
        if dense:
            ops = tuple(v if (p.op is not Op.MATMUL and k == 2) else bf16_operand(v) for k, v in enumerate(ins))
            y16 = b.prim(p.op, ops, p.attrs)
            out.prims.append(Prim(Op.CAST, (y16,), p.output, CastAttrs("float32"), p.origin))
            narrow[p.output] = y16
            rounded += 1
            continue
        out.prims.append(Prim(p.op, ins, p.output, p.attrs, p.origin))
        if _is_cut(g, p, readers, kept):
            stored[p.output] = b.cast(p.output, "bfloat16")
            rounded += 1
    return out, rounded


def _cancelling(g: Graph, readers: dict[ValueId, list[Prim]]) -> set[ValueId]:
    """Values that reach, through elementwise prims and views only, a value a normalisation centres: one
    that a reduction reads and a subtraction reads (``x - mean(x)``, ``x - max(x)``). The subtraction
    cancels the leading digits, so bf16's relative error of 2^-9 in ``x`` becomes a large error in
    ``x - mean(x)``: BERT-base's output drifted to a max relative error of 2e-2 with its residual stream
    stored in bf16, 7e-3 without (OpenVINO bf16: 6e-3; ``python -m bench.bf16_rewrite``). A CNN's
    residuals feed convolutions and a global pool, which average rather than cancel: they keep their pairs."""
    producers = {p.output: p for p in g.prims}
    todo = [v for v, rs in readers.items()
            if any(r.kind is Kind.REDUCE for r in rs) and any(r.op is Op.SUB for r in rs)]
    seen: set[ValueId] = set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        p = producers.get(v)
        if p is not None and p.kind in (Kind.ELEMENTWISE, Kind.BROADCAST, Kind.LAYOUT):
            todo.extend(u for u in p.inputs if u not in g.constants)
    return seen


def _grouped(p: Prim) -> bool:
    """A grouped (depthwise) convolution: a few products per byte, memory-bound, nothing for the
    matrix units to do, and PyTorch 2.13's oneDNN has no bf16 binary post-op for it; it stays
    float32 (on MobileNetV3 in bf16 it ran 9x slower than in float32)."""
    return p.op in (Op.CONV, Op.CONV_TRANSPOSE) and p.attrs.groups > 1


def _all_float32(g: Graph, p: Prim) -> bool:
    return all(g.types[v].dtype == "float32" for v in (*p.inputs, p.output))


def _is_cut(g: Graph, p: Prim, readers: dict[ValueId, list[Prim]], kept: set[ValueId]) -> bool:
    """A float32 activation where a kernel is likely to end: several prims read it, or a reduction."""
    if p.op in KEEPS_STORAGE or p.kind is Kind.OPAQUE or p.output in kept:
        return False
    if g.types[p.output].dtype != "float32" or g.types[p.output].size < 2:
        return False
    rs = readers.get(p.output, [])
    return len(rs) > 1 or any(r.kind is Kind.REDUCE for r in rs)
