"""What a learned cost model sees of a kernel (issue 47): a fixed vector of numbers computed from
the kernel's prims alone, so a price measured for one model teaches the model about kernels of
another.

Why these: the roofline terms (bytes moved, arithmetic) carry most of a price; what the roofline
misses is how the code runs — transcendental calls, reductions and their lengths, layout changes
(strided reads), linear prims and their shapes (a 3x3 convolution is not a matmul of the same
flops), narrow dtypes, the number of outputs and the parallel work there is. Everything is a
count or a log2 of a size (prices span six decades). The kernel's provider is not a feature here:
each provider's prices are learned apart (learned_cost.py).

Version f2 adds what f1 could not tell apart and plans turn on (leave-one-model-out on four
models' prices, docs/TUNING.md): views that transpose (a view's innermost step reading far
apart) and how far, reductions over the innermost axis or an outer one, depthwise convolutions,
linear prims reading or writing through a transposing view (channels-last against NCHW), the
rows of a product, the convolution's stride, and which code template writes the kernel.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from kernorch.codegen import templates
from kernorch.codegen.facts import kernel_prims
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op
from kernorch.orchestrate.from_graph import prim_flops

TRANSCENDENTAL = frozenset({Op.EXP, Op.LOG, Op.TANH, Op.ERF, Op.SIGMOID, Op.SOFTPLUS, Op.POW, Op.SIN, Op.COS})
DIVIDING = frozenset({Op.DIV, Op.RECIP, Op.SQRT, Op.MOD})
NARROW = frozenset({"bfloat16", "float16", "int8", "uint8"})

# Stored with each kernel's features in the tuning database: a change to what is computed here
# bumps it, and features of the old version are no longer trained on.
FEATURES_VERSION = "f2"
FEATURE_NAMES: tuple[str, ...] = (
    "log_bytes_in", "log_bytes_out", "log_flops", "log_out_elems", "log_max_elems",
    "prims", "elementwise", "reduce", "broadcast", "layout", "linear", "opaque",
    "transcendental", "dividing", "gathers", "concats", "casts", "narrow_values",
    "log_reduce_len", "log_linear_k", "log_linear_n", "convs", "conv_taps", "matmuls",
    "inputs", "outputs", "threads",
    "transposing_views", "log_view_stride", "inner_reduces", "outer_reduces", "depthwise", "log_linear_m",
    "layout_linear", "log_conv_stride", "t_winograd", "t_gemm", "t_depthwise", "t_loops",
)
TEMPLATE_NAMES = ("winograd", "gemm", "depthwise", "loops")  # codegen.templates' names, one column each


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -1.0


def view_step(m) -> int:
    """How many input elements apart a view reads two neighbours of its innermost output dim
    (ignoring dims of size 1): 1 for a contiguous copy or reshape, 0 for a broadcast, more for a
    transpose."""
    dims = [d for d, n in enumerate(m.out_shape) if n > 1]
    if not dims:
        return 1
    strides, s = [0] * len(m.in_shape), 1
    for d in range(len(m.in_shape) - 1, -1, -1):
        strides[d], s = s, s * m.in_shape[d]
    at = [0] * len(m.out_shape)
    here = sum(int(ix.evaluate(e, at)) * st for e, st in zip(m.index, strides))
    at[dims[-1]] = 1
    return abs(sum(int(ix.evaluate(e, at)) * st for e, st in zip(m.index, strides)) - here)


def kernel_features(g: Graph, members: Iterable[int], outputs: Sequence[int], threads: int) -> tuple[float, ...]:
    """The FEATURE_NAMES of the kernel computing ``members`` of ``g`` and writing ``outputs``,
    in that order."""
    prims = kernel_prims(g, members)
    inside = {p.output for p in prims}
    inputs = sorted({v for p in prims for v in p.inputs if v not in inside})
    counts = dict.fromkeys(("elementwise", "reduce", "broadcast", "layout", "linear", "opaque"), 0)
    transcendental = dividing = gathers = concats = casts = narrow = convs = taps = matmuls = 0
    reduce_len = linear_k = linear_n = 0
    views = inner_reduces = outer_reduces = depthwise = linear_m = layout_linear = conv_stride = 0
    steps = {p.output: view_step(p.attrs.map) for p in prims if p.op is Op.VIEW}
    view_stride = max(steps.values(), default=0)
    for p in prims:
        counts[p.kind.value] += 1
        transcendental += p.op in TRANSCENDENTAL
        dividing += p.op in DIVIDING
        gathers += p.op is Op.GATHER
        concats += p.op is Op.CONCAT
        casts += p.op is Op.CAST
        narrow += g.types[p.output].dtype in NARROW
        src = g.types[p.inputs[0]] if p.inputs else g.types[p.output]
        views += steps.get(p.output, 0) > 1
        if p.kind is Kind.REDUCE:
            wide = [d for d, n in enumerate(src.shape) if n > 1]
            inner = bool(wide) and wide[-1] in {a % len(src.shape) for a in p.attrs.axes}
            inner_reduces += inner
            outer_reduces += not inner
            reduce_len = max(reduce_len, src.size // max(g.types[p.output].size, 1))
        if p.kind is Kind.LINEAR:
            out = g.types[p.output]
            work = prim_flops(g, p) / 2
            k = work / max(out.size, 1)
            linear_k = max(linear_k, int(k))
            n = out.shape[1] if p.op is not Op.MATMUL and len(out.shape) > 1 else out.shape[-1]
            linear_n, linear_m = max(linear_n, n), max(linear_m, out.size // max(n, 1))
            around = [*p.inputs, *(q.output for q in prims if p.output in q.inputs)]
            layout_linear += any(steps.get(v, 0) > 1 for v in around)
            if p.op in (Op.CONV, Op.CONV_TRANSPOSE):
                convs += 1
                weight = g.types[p.inputs[1]].shape
                taps = max(taps, math.prod(weight[2:]))
                depthwise += p.attrs.groups > 1 and weight[1] == 1
                conv_stride = max(conv_stride, math.prod(p.attrs.strides))
            elif p.op is Op.MATMUL:
                matmuls += 1
    out_elems = sum(g.types[v].size for v in outputs)
    template = templates.first(g, prims, outputs)
    return (
        _log2(sum(g.types[v].nbytes for v in inputs)), _log2(sum(g.types[v].nbytes for v in outputs)),
        _log2(sum(prim_flops(g, p) for p in prims)), _log2(out_elems),
        _log2(max((g.types[p.output].size for p in prims), default=0)),
        float(len(prims)), *(float(counts[k]) for k in ("elementwise", "reduce", "broadcast", "layout", "linear",
                                                        "opaque")),
        float(transcendental), float(dividing), float(gathers), float(concats), float(casts), float(narrow),
        _log2(reduce_len), _log2(linear_k), _log2(linear_n), float(convs), float(taps), float(matmuls),
        float(len(inputs)), float(len(outputs)), float(threads),
        float(views), _log2(view_stride), float(inner_reduces), float(outer_reduces), float(depthwise),
        _log2(linear_m), float(layout_linear), _log2(conv_stride),
        *(float(template is not None and template.name == t) for t in TEMPLATE_NAMES),
    )
