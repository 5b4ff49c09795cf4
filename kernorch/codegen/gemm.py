"""Matrix products as generated C: a register-blocked GEMM with its epilogue fused.

Why: on this class of machine (2 vCPUs, ~20 GB/s to memory) a library GEMM called per kernel
runs 30-60% slower inside a model than alone, hot: its weights come cold from memory and
oneDNN/MKL pay a dispatch and a reorder per call. A plain C GEMM that packs each weight panel
as it streams it measured faster hot and much faster cold (197x192 @ 192x768: 307 vs 350 us
hot, 415 vs 625 us cold, oneDNN with prepacked weights), it runs inside the native driver, and
its epilogue (bias, activation, residual add, scaling) is applied to each output tile while it
is in registers' reach instead of after a round trip through memory.

The kernel: one MATMUL (float32, both operands at least 2-D, batch dims broadcast), its A
operand a strided view of a kernel input with contiguous rows, its B operand anything the
inliner computes (a transposed weight, a slice of an activation, a prologue), and elementwise
prims of the product's shape after it. Threads split (batch, column panel, row chunk) units;
each unit packs its ``NR``-column panel of B once (``bp``), then for every ``MR``-row block
``kn_gemm_tile`` (C header) sums the products into a tile and the epilogue loop stores every
kernel output from it. The solver still prices the library providers on the same candidate.
"""

from __future__ import annotations

import math

from kernorch.codegen import indexing
from kernorch.codegen.kernel import Arg, Call, Decl, KernelSpec, Loop, Parallel, Store
from kernorch.codegen.linear import layout_strides, operand_view
from kernorch.codegen.lower_base import KernelLowerer
from kernorch.codegen.scalar import Body, Inliner
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim

MR, NR = 6, 32  # tile rows x columns: 12 accumulators of 16 floats (kn_gemm_tile in c.py)
UNITS_PER_THREAD = 2  # split rows too when (batch x panels) gives fewer work units than this

HELPERS = r"""#include <string.h>
typedef float kn_v16 __attribute__((vector_size(64), aligned(4)));
/* tile[r][0:%(nr)d] = sum over k of a[r*lda + k] * bp[k*%(nr)d + 0:%(nr)d], r < mr <= %(mr)d: the register
   block of the generated GEMMs (codegen/gemm.py). Multiply-adds contract to FMAs here only. */
#if defined(__clang__)
static void kn_gemm_tile(int64_t mr, int64_t K, const float *restrict a, int64_t lda,
                         const float *restrict bp, float *restrict tile) {
#pragma clang fp contract(fast)
#else
__attribute__((optimize("fp-contract=fast")))
static void kn_gemm_tile(int64_t mr, int64_t K, const float *restrict a, int64_t lda,
                         const float *restrict bp, float *restrict tile) {
#endif
  kn_v16 acc[%(mr)d][2];
  for (int r = 0; r < %(mr)d; r++) { acc[r][0] = (kn_v16){0}; acc[r][1] = (kn_v16){0}; }
  if (mr == %(mr)d) {
    for (int64_t k = 0; k < K; k++) {
      kn_v16 b0, b1; memcpy(&b0, bp + k * %(nr)d, 64); memcpy(&b1, bp + k * %(nr)d + 16, 64);
#pragma GCC unroll %(mr)d
      for (int r = 0; r < %(mr)d; r++) { float x = a[r * lda + k]; acc[r][0] += x * b0; acc[r][1] += x * b1; }
    }
  } else {
    for (int64_t k = 0; k < K; k++) {
      kn_v16 b0, b1; memcpy(&b0, bp + k * %(nr)d, 64); memcpy(&b1, bp + k * %(nr)d + 16, 64);
      for (int r = 0; r < mr; r++) { float x = a[r * lda + k]; acc[r][0] += x * b0; acc[r][1] += x * b1; }
    }
  }
  for (int r = 0; r < mr; r++) { memcpy(tile + r * %(nr)d, &acc[r][0], 64); memcpy(tile + r * %(nr)d + 16, &acc[r][1], 64); }
}
""" % {"mr": MR, "nr": NR}


def _matmul(prims: list[Prim]) -> Prim | None:
    lin = [p for p in prims if p.kind is Kind.LINEAR]
    return lin[0] if len(lin) == 1 and lin[0].op is Op.MATMUL else None


def _epilogue(prims: list[Prim], mm: Prim) -> set[int]:
    """The product and every member computed from it."""
    after = {mm.output}
    for p in prims:
        if any(v in after for v in p.inputs):
            after.add(p.output)
    return after


def why_not(g: Graph, prims: list[Prim], outputs) -> str | None:
    """None when the C generator writes this kernel as a GEMM (see the module doc), else why not."""
    mm = _matmul(prims)
    if mm is None:
        return "a generated GEMM holds exactly one matmul and no other linear prim"
    a, b, out = (g.types[v] for v in (*mm.inputs, mm.output))
    if any(t.dtype != "float32" for t in (a, b, out)):
        return f"matmul {g.name(mm.output)} is not on float32"
    if len(a.shape) < 2 or len(b.shape) < 2:
        return f"matmul {g.name(mm.output)} has a vector operand"
    producers = {p.output: p for p in prims}
    found = operand_view(g, producers, mm.inputs[0], mm)
    if isinstance(found, str):
        return found
    if g.types[found[0]].size == 1:
        return f"{g.name(mm.inputs[0])} is a scalar"
    if _a_strides(g, mm, found)[-1] != 1 and a.shape[-1] > 1:
        return f"rows of {g.name(mm.inputs[0])} are not contiguous"
    after = _epilogue(prims, mm)
    for p in prims:
        if p.output == mm.output:
            continue
        if p.output in after and (p.kind is not Kind.ELEMENTWISE or g.types[p.output].shape != out.shape):
            return f"{p.op.value} after matmul {g.name(mm.output)} is not elementwise on its shape"
        if p.kind in (Kind.REDUCE, Kind.LINEAR, Kind.OPAQUE):
            return f"{p.op.value} cannot share a kernel with a generated GEMM"
    if any(v not in after for v in outputs):
        return "a generated GEMM writes only the product and values computed from it"
    return None


def _a_strides(g: Graph, mm: Prim, found) -> tuple[int, ...]:
    _, view, _ = found
    return tuple(view[1]) if view is not None else tuple(layout_strides(g.types[mm.inputs[0]].shape))


class GemmLowerer(KernelLowerer):
    """KernelSpec of a generated GEMM (``why_not`` must have said None)."""

    def __init__(self, g: Graph, members: set[int], outputs: list[int], threads: int) -> None:
        super().__init__(g, members, outputs)
        self.threads = threads

    def run(self, name: str | None) -> KernelSpec:
        g, vs = self.g, self.vs
        mm = _matmul(self.prims)
        found = operand_view(g, self.producers, mm.inputs[0], mm)
        src, view, _ = found
        a_strides = _a_strides(g, mm, found)
        a_off = view[2] if view is not None else 0
        a_shape, b_shape, out_shape = (g.types[v].shape for v in (*mm.inputs, mm.output))
        M, K, N = out_shape[-2], a_shape[-1], out_shape[-1]
        batch = out_shape[:-2]
        nb, npan = math.prod(batch), -(-N // NR)
        blocks = -(-M // MR)
        chunks = min(blocks, -(-UNITS_PER_THREAD * self.threads // (nb * npan))) if nb * npan < UNITS_PER_THREAD * self.threads else 1
        per_chunk = -(-blocks // chunks)
        chunks = -(-blocks // per_chunk)

        # buffers: every external input and the outputs (no scratch; the tile and the panel are per thread)
        self.inline = set(self.producers) - {mm.output}  # A is read through its pointer, never inlined
        self.buf = {}
        self.arena = 0
        args = []
        for role, vals in (("in", self.ext), ("out", self.outputs)):
            for k, v in enumerate(vals):
                self.buf[v] = f"{role}{k}"
                args.append(Arg(self.buf[v], g.types[v].dtype, g.types[v].size, role))

        u = vs.new(nb * npan * chunks)
        sizes = vs.sizes
        bt = ix.floordiv(ix.var(u), npan * chunks, sizes)
        pan = ix.mod(ix.floordiv(ix.var(u), chunks, sizes), npan, sizes)
        chunk = ix.mod(ix.var(u), chunks, sizes)
        bidx, rest = [], bt
        for n in reversed(batch):  # batch coordinates of the unit
            bidx.insert(0, ix.mod(rest, n, sizes) if n > 1 else ix.const(0))
            rest = ix.floordiv(rest, n, sizes)
        col0 = indexing.normalize(pan * NR, sizes)

        # pack the B panel: bp[k*NR + j] = B[batch, k, col0 + j] (zero past N)
        k, j = vs.new(K), vs.new(NR)
        col = indexing.normalize(col0 + ix.var(j), sizes)
        body = Body(self.names)
        inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
        b_batch = self._operand_batch(bidx, b_shape)
        ok = inl.conds([(col, 0, N)])
        val = inl.value(mm.inputs[1], [*b_batch, ix.var(k), ix.minimum(col, N - 1, sizes)])
        if ok is not None:
            val = body.let("select", "float32", (ok, val, body.imm(0, "float32")))
        pack = Loop(k, ix.const(0), ix.const(K), (Loop(j, ix.const(0), ix.const(NR), (
            *body.lets, Store("bp", indexing.normalize(ix.var(k) * NR + ix.var(j), sizes), val)), simd=True),))

        # row blocks of the chunk: tile, then the epilogue over its valid rows and columns
        mbl = vs.new(per_chunk)
        row0 = indexing.normalize((chunk * per_chunk + ix.var(mbl)) * MR, sizes)
        a_base = ix.const(a_off) + row0 * a_strides[-2]
        for e, stride in zip(self._operand_batch(bidx, a_shape), a_strides):
            a_base = a_base + e * stride
        rows = ix.minimum(M - row0, MR, sizes)
        cols = ix.minimum(N - col0, NR, sizes)
        r, c = vs.new(MR), vs.new(NR)
        self.tile_at = indexing.normalize(ix.var(r) * NR + ix.var(c), sizes)
        idx = [*bidx, indexing.normalize(row0 + ix.var(r), sizes), indexing.normalize(col0 + ix.var(c), sizes)]
        body = Body(self.names)
        inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
        stores = [Store(self.buf[v], self._flat(v, idx), body.cast(inl.value(v, idx), g.types[v].dtype))
                  for v in self.outputs]
        epilogue = Loop(r, ix.const(0), rows, (Loop(c, ix.const(0), cols, (*body.lets, *stores), simd=True),))
        tile = Call("kn_gemm_tile", (rows, ix.const(K), (self.buf[src], indexing.normalize(a_base, sizes)),
                                     ix.const(a_strides[-2]), "bp", "tl"))
        blocks_here = ix.minimum(blocks - chunk * per_chunk, per_chunk, sizes)
        loop_rows = Loop(mbl, ix.const(0), blocks_here, (tile, epilogue))
        par = Parallel(u, nb * npan * chunks, (pack, loop_rows),
                       (Decl("bp", "float32", K * NR), Decl("tl", "float32", MR * NR)), threads=True)
        comment, _ = self.describe()
        note = (f"GEMM {M}x{K} @ {K}x{N}, batch {nb}: {npan} panels of {NR} columns x {chunks} row chunks, "
                f"tiles of {MR} rows")
        key = g.kernel_key(set(self.producers), self.outputs)
        return KernelSpec(name=name or f"kn_{key[:16]}", args=tuple(args), body=(par,), sizes=tuple(sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=0, notes=(note,))

    @staticmethod
    def _operand_batch(bidx: list, shape) -> list:
        """An operand's batch coordinates from the product's (right-aligned; size-1 dims read 0)."""
        n = len(shape) - 2
        own = bidx[len(bidx) - n:] if n else []
        return [e if s > 1 else ix.const(0) for e, s in zip(own, shape[:n])]

    def _leaf(self, v: int, idx: tuple, body: Body) -> str:
        g = self.g
        if v in self.imm:
            return body.imm(self.imm[v], g.types[v].dtype)
        if v == _matmul(self.prims).output:
            return body.let("load", "float32", (), ("tl", self.tile_at))
        return body.let("load", g.types[v].dtype, (), (self.buf[v], self._clamped_flat(v, idx)))
