"""Which linear prims compute in bf16: the ones oneDNN runs faster in bf16 here, measured.

bf16 on the matrix units (AMX) pays off for large products: a ResNet-50 convolution runs 3-5x faster
than in float32 on a Sapphire Rapids Xeon. A small one loses: AMX's per-call set-up and the bf16
reorders cost more than the arithmetic saved, and MobileNetV3's small 1x1 convolutions ran 2-3x
slower in bf16, its whole model 2.6x. The graph rewrite (rewrite/precision.py) fixes each prim's
dtype before orchestration, so the choice is made here, per prim, by timing the very oneDNN call a
kernel would make (prepacked weight, channels-last activation) in both dtypes: the prim is rewritten
to bf16 only where bf16 is faster by ``MARGIN``. About a millisecond of timing per prim.

Without AMX (AVX512-BF16: Zen 4, Cooper Lake) there is no set-up to pay: VDPBF16PS does twice the
float32 FMA's products, and the generated bf16 tile fuses the casts into its epilogue. On a Zen 4
VM (2 threads, ``python -m bench.amx_micro``) oneDNN's bf16 call ran ResNet-50's and BERT's products
1.6-2.1x faster than its float32 call, and the generated tile 1.6-2.0x faster than the generated
float32 GEMM; smaller products gain less. A product goes bf16 where oneDNN's call is at least 1.25x
faster, so the ones that barely gain keep float32's accuracy.
"""

from __future__ import annotations

import torch

from kernorch.codegen import amx
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.providers.timing import MedianTimer

MARGIN = 0.8  # bf16 must take at most this share of the float32 time (AMX takes its products untimed)


def bf16_faster(g: Graph, threads: int) -> set[ValueId]:
    """Outputs of the float32 matmuls and dense 2-D convolutions of ``g`` that run faster in bf16.
    Where the CPU has AMX, every product the generated AMX tiles take is one, without timing: they ran
    every product 3-10x faster than the float32 GEMM (``python -m bench.amx_micro``), and the solver
    still weighs them against oneDNN's bf16 call."""
    timer = MedianTimer(warmup=2, repeats=5)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            return {p.output for p in g.prims
                    if _candidate(g, p) and (_on_tiles(g, p) or _faster(g, p, timer))}
    finally:
        torch.set_num_threads(before)


def _on_tiles(g: Graph, p: Prim) -> bool:
    """A product the generated AMX tiles may take, on a CPU with AMX bf16: a matmul (a constant
    weight packed once, an activation packed per work unit: attention's scores and values) or a
    convolution by a constant weight."""
    return amx.matrix_units() and (p.op is Op.MATMUL or p.inputs[1] in g.constants)


def _candidate(g: Graph, p: Prim) -> bool:
    if any(g.types[v].dtype != "float32" for v in (*p.inputs, p.output)):
        return False
    if p.op is Op.CONV:
        return len(g.types[p.output].shape) == 4 and p.attrs.groups == 1
    return p.op is Op.MATMUL


def _faster(g: Graph, p: Prim, timer: MedianTimer) -> bool:
    """bf16 within ``MARGIN`` of float32's time. A product that misses is timed again and judged on each
    dtype's better median: on a Zen 4 VM one of ResNet-50's 54 products, a different one per compile,
    missed the margin on one measurement (its ratio 0.45-0.65 in repeated ones) and stayed float32, 2x slower."""
    calls = {dtype: _call(g, p, dtype) for dtype in (torch.float32, torch.bfloat16)}
    seconds = {dtype: timer(fn).seconds for dtype, fn in calls.items()}
    if seconds[torch.bfloat16] > MARGIN * seconds[torch.float32]:
        seconds = {dtype: min(seconds[dtype], timer(fn).seconds) for dtype, fn in calls.items()}
    return seconds[torch.bfloat16] <= MARGIN * seconds[torch.float32]


def _call(g: Graph, p: Prim, dtype: torch.dtype):
    x_type, w_type = g.types[p.inputs[0]], g.types[p.inputs[1]]
    x = torch.randn(x_type.shape).to(dtype)
    if p.op is Op.MATMUL:
        if p.inputs[1] not in g.constants or len(w_type.shape) != 2:
            w = torch.randn(w_type.shape).to(dtype)
            return lambda: torch.matmul(x, w)
        k, n = w_type.shape
        rows = max(1, x_type.size // k)
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k).to(dtype), rows)
        x2 = x.reshape(rows, k)
        return lambda: torch.ops.mkldnn._linear_pointwise(x2, packed, None, "none", [], "")
    a = p.attrs
    pads, strides, dilations = list(a.pads[:2]), list(a.strides), list(a.dilations)
    x = x.contiguous(memory_format=torch.channels_last)
    packed = torch.ops.mkldnn._reorder_convolution_weight(torch.randn(w_type.shape).to(dtype), pads, strides,
                                                          dilations, 1, list(x_type.shape))
    return lambda: torch.ops.mkldnn._convolution_pointwise(x, packed, None, pads, strides, dilations, 1, "none",
                                                           [], "")
