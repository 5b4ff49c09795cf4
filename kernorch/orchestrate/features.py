"""What a learned cost model sees of a kernel (issue 47): a fixed vector of numbers computed from
the kernel's prims alone, so a price measured for one model teaches the model about kernels of
another.

Why these: the roofline terms (bytes moved, arithmetic) carry most of a price; what the roofline
misses is how the code runs — transcendental calls, reductions and their lengths, layout changes
(strided reads), linear prims and their shapes (a 3x3 convolution is not a matmul of the same
flops), narrow dtypes, the number of outputs and the parallel work there is. Everything is a
count or a log2 of a size (prices span six decades). The kernel's provider is not a feature here:
each provider's prices are learned apart (learned_cost.py).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from kernorch.codegen.facts import kernel_prims
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op
from kernorch.orchestrate.from_graph import prim_flops

TRANSCENDENTAL = frozenset({Op.EXP, Op.LOG, Op.TANH, Op.ERF, Op.SIGMOID, Op.SOFTPLUS, Op.POW, Op.SIN, Op.COS})
DIVIDING = frozenset({Op.DIV, Op.RECIP, Op.SQRT, Op.MOD})
NARROW = frozenset({"bfloat16", "float16", "int8", "uint8"})

# Stored with each kernel's features in the tuning database: a change to what is computed here
# bumps it, and features of the old version are no longer trained on.
FEATURES_VERSION = "f1"
FEATURE_NAMES: tuple[str, ...] = (
    "log_bytes_in", "log_bytes_out", "log_flops", "log_out_elems", "log_max_elems",
    "prims", "elementwise", "reduce", "broadcast", "layout", "linear", "opaque",
    "transcendental", "dividing", "gathers", "concats", "casts", "narrow_values",
    "log_reduce_len", "log_linear_k", "log_linear_n", "convs", "conv_taps", "matmuls",
    "inputs", "outputs", "threads",
)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -1.0


def kernel_features(g: Graph, members: Iterable[int], outputs: Sequence[int], threads: int) -> tuple[float, ...]:
    """The FEATURE_NAMES of the kernel computing ``members`` of ``g`` and writing ``outputs``,
    in that order."""
    prims = kernel_prims(g, members)
    inside = {p.output for p in prims}
    inputs = sorted({v for p in prims for v in p.inputs if v not in inside})
    counts = dict.fromkeys(("elementwise", "reduce", "broadcast", "layout", "linear", "opaque"), 0)
    transcendental = dividing = gathers = concats = casts = narrow = convs = taps = matmuls = 0
    reduce_len = linear_k = linear_n = 0
    for p in prims:
        counts[p.kind.value] += 1
        transcendental += p.op in TRANSCENDENTAL
        dividing += p.op in DIVIDING
        gathers += p.op is Op.GATHER
        concats += p.op is Op.CONCAT
        casts += p.op is Op.CAST
        narrow += g.types[p.output].dtype in NARROW
        src = g.types[p.inputs[0]] if p.inputs else g.types[p.output]
        if p.kind is Kind.REDUCE:
            reduce_len = max(reduce_len, src.size // max(g.types[p.output].size, 1))
        if p.kind is Kind.LINEAR:
            out = g.types[p.output]
            work = prim_flops(g, p) / 2
            k = work / max(out.size, 1)
            linear_k = max(linear_k, int(k))
            linear_n = max(linear_n, out.shape[1] if p.op is not Op.MATMUL and len(out.shape) > 1 else out.shape[-1])
            if p.op in (Op.CONV, Op.CONV_TRANSPOSE):
                convs += 1
                weight = g.types[p.inputs[1]].shape
                taps = max(taps, math.prod(weight[2:]))
            elif p.op is Op.MATMUL:
                matmuls += 1
    out_elems = sum(g.types[v].size for v in outputs)
    return (
        _log2(sum(g.types[v].nbytes for v in inputs)), _log2(sum(g.types[v].nbytes for v in outputs)),
        _log2(sum(prim_flops(g, p) for p in prims)), _log2(out_elems),
        _log2(max((g.types[p.output].size for p in prims), default=0)),
        float(len(prims)), *(float(counts[k]) for k in ("elementwise", "reduce", "broadcast", "layout", "linear",
                                                        "opaque")),
        float(transcendental), float(dividing), float(gathers), float(concats), float(casts), float(narrow),
        _log2(reduce_len), _log2(linear_k), _log2(linear_n), float(convs), float(taps), float(matmuls),
        float(len(inputs)), float(len(outputs)), float(threads),
    )
