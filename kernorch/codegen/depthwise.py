"""Depthwise 2-D convolutions between channels-last tensors as register-blocked tiles.

Why: the loop-nest stencil (stencil.py inside loops.py) writes a depthwise convolution as one
flat loop over output pixels with a short SIMD loop over channels inside, so every pixel pays
for its tap masks (a blend per tap and vector, even where no tap leaves the image), its clamped
addresses and a division of the flat pixel index, and every partial sum makes a multiply and an
add. Here a unit of work is a run of one output row's pixels; for each 32-channel panel,
``kn_dw_tile`` sums the taps of the kernel rows that lie inside the image (decided once per row),
four pixels at a time with one FMA per tap and vector where the whole window lies inside the
row, one masked pixel at a time only at the borders, the weight read from panels packed once.
The tile then goes through the GEMM's epilogue (bias, batch norm, activation, residual, layout),
as Winograd's does.

Taken for a 2-D convolution with one input channel per group and no channel multiplier, on
float32, its image read in place from a kernel input with contiguous channels, a constant weight,
and only elementwise prims and permuting views after it; anything else stays a loop nest.
"""

from __future__ import annotations

import math

from kernorch.codegen import indexing
from kernorch.codegen.gemm import GemmLowerer
from kernorch.codegen.gemm_helpers import NR
from kernorch.codegen.gemm_product import Product, coords_of, unflatten, window_rows
from kernorch.codegen.kernel import Call, Decl, KernelSpec, Loop, Parallel
from kernorch.codegen.template import Template
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

BLOCK = 64  # output pixels of one row per tile, at most (a wider row is several tiles)
PIXELS = 4  # pixels summed at once inside the row (KN_DW_PIXELS in the helper)


def why_not(g: Graph, prims: list[Prim], outputs, options: CodegenOptions = DEFAULT_CODEGEN) -> str | None:
    """None when this module writes the kernel (see the module doc), else why not."""
    if not options.depthwise_tiles:
        return "depthwise tiles are switched off"
    convs = [p for p in prims if p.op is Op.CONV]
    if len(convs) != 1:
        return "not one convolution"
    p = convs[0]
    x, w = g.types[p.inputs[0]].shape, g.types[p.inputs[1]].shape
    if len(x) != 4 or p.attrs.groups != x[1] or w[0] != x[1] or w[1] != 1:
        return f"convolution {g.name(p.output)} is not a depthwise 2-D convolution without a channel multiplier"
    if any(g.types[v].dtype != "float32" for v in (*p.inputs, p.output)):
        return f"convolution {g.name(p.output)} is not on float32"
    prod = window_rows(g, {q.output: q for q in prims}, p)
    if isinstance(prod, str):
        return prod
    if not prod.window.channels_inner:
        return f"the image of convolution {g.name(p.output)} is not channels-last"
    coords = coords_of(g, prims, p)
    if isinstance(coords, str):
        return coords
    for q in prims:
        if q.output not in coords and q.kind in (Kind.REDUCE, Kind.LINEAR, Kind.OPAQUE):
            return f"{q.op.value} cannot share a kernel with a depthwise tile"
    if any(v not in coords for v in outputs):
        return "a depthwise tile writes only the convolution and values computed from it"
    return None


class DepthwiseLowerer(GemmLowerer):
    """KernelSpec of a depthwise tile kernel (``why_not`` must have said None)."""

    def run(self, name: str | None) -> KernelSpec:
        g, vs = self.g, self.vs
        lin = next(p for p in self.prims if p.op is Op.CONV)
        prod: Product = window_rows(g, self.producers, lin)  # type: ignore[assignment]
        self.prod, win = prod, prod.window
        C, oh, ow = win.channels, g.types[lin.output].shape[2], win.out_width
        nb = math.prod(prod.batch)
        per_row = -(-ow // BLOCK)
        width = -(-ow // per_row)  # pixels per tile: a row's tiles as even as they go
        self.mr, self.nr = width, NR
        npan = -(-C // NR)

        self.inline = set(self.producers) - {lin.output}
        self.guarded = self._selected_inputs()
        args = self._buffers()
        weight = lin.inputs[1]
        self.pack(weight, win.weight_perm, NR)

        # a unit: one tile of a row for one panel, panels innermost (a thread's run of units goes down the image,
        # its kernel rows still in cache from the row before); a 7x7 output of 960 channels has 7 x 30 units
        units = nb * oh * per_row * npan
        u = vs.new(units)
        sizes = vs.sizes
        bt = ix.floordiv(ix.var(u), oh * per_row * npan, sizes)
        out_row = ix.mod(ix.floordiv(ix.var(u), per_row * npan, sizes), oh, sizes)
        col_in_row = indexing.normalize(ix.mod(ix.floordiv(ix.var(u), npan, sizes), per_row, sizes) * width, sizes)
        count = ix.minimum(ow - col_in_row, width, sizes)
        row0 = indexing.normalize(out_row * ow + col_in_row, sizes)
        panel = ix.mod(ix.var(u), npan, sizes)
        col0 = indexing.normalize(panel * NR, sizes)
        cols = ix.minimum(C - col0, NR, sizes)
        bidx = unflatten(bt, prod.batch, sizes)

        r, c = vs.new(width), vs.new(NR)
        self.tile_at = indexing.normalize(ix.var(r) * NR + ix.var(c), sizes)
        self.row = indexing.normalize(row0 + ix.var(r), sizes)
        self.col = indexing.normalize(col0 + ix.var(c), sizes)
        idx = prod.out_index(g, bidx, self.row, self.col, sizes)
        body, stores = self._tile_stores(idx, sizes)
        epilogue = Loop(r, ix.const(0), count, (Loop(c, ix.const(0), cols, (*body.lets, *stores), simd=True),))

        _, hs, ws = win.strides
        first = ix.const(prod.a_offset) + bt * prod.a_strides[0] + col0  # the panel's first channel, pixel (0, 0)
        image = (self.buf[prod.a_src], indexing.normalize(first, sizes))
        w_at = (self.buf[weight], indexing.normalize(panel * (math.prod(win.kernel) * NR), sizes))
        shape = (win.height, win.width, hs, ws, *win.kernel, *win.conv_strides, *win.pads, *win.dilations)
        tile = Call("kn_dw_tile", (count, out_row, col_in_row, image, *map(ix.const, shape), w_at, cols, "tl"))
        par = Parallel(u, units, (tile, epilogue), (Decl("tl", "float32", width * NR),), threads=True)
        comment, _ = self.describe()
        kh, kw = win.kernel
        note = (f"depthwise {kh}x{kw} convolution of {C} channels, {oh}x{ow} output: tiles of {width} pixels of a row "
                f"x {NR} channels, {PIXELS} pixels at a time inside the image (read channels-last in place)")
        key = g.kernel_key(set(self.producers), self.outputs)
        traits = {*(["row split"] if per_row > 1 else []), *(["column remainder"] if C % NR else []),
                  *(["strided"] if win.conv_strides != (1, 1) else []), *(["batched"] if nb > 1 else []),
                  *(["epilogue"] if len(self.prims) > 1 else [])}
        return KernelSpec(name=name or f"kn_{key[:16]}", args=args, body=(par,), sizes=tuple(sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=0, notes=(note, *self.pack_notes()), packs=self.pack_specs(),
                          traits=tuple(sorted(traits)))


HELPERS = f"""/* Depthwise convolution tile (codegen/depthwise.py): tile[p*{NR} + c] = the taps' sum for output pixel
   (oh, ow0 + p), p < n, and channel c < cols of the panel whose first channel x and w point at. x: the image,
   channels contiguous, rows hs and pixels ws elements apart; w: the panel, (kh*KW + kw)*{NR} + c. Kernel rows
   outside the image are skipped for the whole row; pixels whose window lies inside the row sum
   KN_DW_PIXELS at a time over V vectors of channels (V * KN_DW_PIXELS independent FMA chains: an FMA's
   latency hidden), one FMA per tap and vector; the others check each tap. */
#define KN_DW_PIXELS {PIXELS}
static inline __attribute__((always_inline)) void kn_dw_inside(const int V, const float *restrict x, int64_t hs,
    int64_t ws, int64_t kh0, int64_t kh1, int64_t KW, int64_t sw, int64_t dw, const float *restrict w,
    float *restrict tile) {{
  kn_vec acc[KN_DW_PIXELS][2];
#pragma GCC unroll 8
  for (int q = 0; q < KN_DW_PIXELS; q++)
#pragma GCC unroll 2
    for (int v = 0; v < V; v++) acc[q][v] = (kn_vec){{0}};
  /* the taps stay loops: written out, gcc interleaves them into more live vectors than registers */
#pragma GCC unroll 1
  for (int64_t kh = kh0; kh < kh1; kh++) {{
    const float *restrict xr = x + kh * hs;
    const float *restrict wr = w + kh * KW * {NR};
#pragma GCC unroll 1
    for (int64_t kw = 0; kw < KW; kw++) {{
      kn_vec wk[2];
#pragma GCC unroll 2
      for (int v = 0; v < V; v++) {{ wk[v] = KN_LOAD(wr + kw * {NR} + v * KN_VW); KN_KEEP(wk[v]); }}
#pragma GCC unroll 8
      for (int q = 0; q < KN_DW_PIXELS; q++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
          acc[q][v] = KN_FMA(KN_LOAD(xr + (kw * dw + q * sw) * ws + v * KN_VW), wk[v], acc[q][v]);
    }}
  }}
#pragma GCC unroll 8
  for (int q = 0; q < KN_DW_PIXELS; q++)
#pragma GCC unroll 2
    for (int v = 0; v < V; v++) KN_STORE(tile + q * {NR} + v * KN_VW, acc[q][v]);
}}
static void kn_dw_tile(int64_t n, int64_t oh, int64_t ow0, const float *restrict x, int64_t H, int64_t W,
                       int64_t hs, int64_t ws, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw, int64_t dh, int64_t dw, const float *restrict w, int64_t cols,
                       float *restrict tile) {{
  int64_t kh0 = 0, kh1 = KH;
  while (kh0 < KH && oh * sh - ph + kh0 * dh < 0) kh0++;
  while (kh1 > kh0 && oh * sh - ph + (kh1 - 1) * dh >= H) kh1--;
  /* output columns whose every tap lies inside the row: [lo, hi) */
  const int64_t lo = (pw + sw - 1) / sw, last = W - 1 + pw - (KW - 1) * dw;
  const int64_t hi = last < 0 ? 0 : last / sw + 1;
  const int64_t nv = cols / KN_VW * KN_VW;
  const float *restrict xrow = x + (oh * sh - ph) * hs;  /* kernel row kh at xrow + kh * dh * hs */
  for (int64_t c = 0; c < nv;) {{
    const int V = c + 2 * KN_VW <= nv ? 2 : 1;
    int64_t p = 0;
    while (p < n) {{
      const int64_t ow = ow0 + p;
      if (ow >= lo && ow + KN_DW_PIXELS <= hi && p + KN_DW_PIXELS <= n) {{
        const float *restrict xp = xrow + (ow * sw - pw) * ws + c;
        if (V == 2) kn_dw_inside(2, xp, dh * hs, ws, kh0, kh1, KW, sw, dw, w + c, tile + p * {NR} + c);
        else kn_dw_inside(1, xp, dh * hs, ws, kh0, kh1, KW, sw, dw, w + c, tile + p * {NR} + c);
        p += KN_DW_PIXELS;
        continue;
      }}
      /* a border pixel: the taps of each kernel row that lie inside the row, [kw0, kw1) */
      const int64_t left = pw - ow * sw, right = W - 1 + pw - ow * sw;
      const int64_t kw0 = left > 0 ? (left + dw - 1) / dw : 0;
      const int64_t kw1 = right < 0 ? 0 : (right / dw + 1 < KW ? right / dw + 1 : KW);
      kn_vec acc[2] = {{(kn_vec){{0}}, (kn_vec){{0}}}};
      for (int64_t kh = kh0; kh < kh1; kh++)
        for (int64_t kw = kw0; kw < kw1; kw++) {{
          const float *restrict xp = xrow + kh * dh * hs + (ow * sw - pw + kw * dw) * ws + c;
          const float *restrict wp = w + (kh * KW + kw) * {NR} + c;
          for (int v = 0; v < V; v++) acc[v] = KN_FMA(KN_LOAD(xp + v * KN_VW), KN_LOAD(wp + v * KN_VW), acc[v]);
        }}
      for (int v = 0; v < V; v++) KN_STORE(tile + p * {NR} + c + v * KN_VW, acc[v]);
      p++;
    }}
    c += V * KN_VW;
  }}
  if (nv == cols) return;
  for (int64_t p = 0; p < n; p++) {{
    const int64_t ow = ow0 + p;
    float acc[KN_VW] = {{0}};
    for (int64_t kh = kh0; kh < kh1; kh++)
      for (int64_t kw = 0; kw < KW; kw++) {{
        const int64_t iw = ow * sw - pw + kw * dw;
        if (iw < 0 || iw >= W) continue;
        const float *restrict xp = xrow + kh * dh * hs + iw * ws;
        const float *restrict wp = w + (kh * KW + kw) * {NR};
        for (int64_t c = nv; c < cols; c++) acc[c - nv] = KN_FMAF(xp[c], wp[c], acc[c - nv]);
      }}
    for (int64_t c = nv; c < cols; c++) tile[p * {NR} + c] = acc[c - nv];
  }}
}}
"""


def lower(g: Graph, members: set[int], outputs: list[int], threads: int, options: CodegenOptions,
          name: str | None) -> KernelSpec:
    """The depthwise tile kernel's KernelSpec (``why_not`` must have said None)."""
    return DepthwiseLowerer(g, members, outputs, threads, options).run(name)


TEMPLATE = Template("depthwise", why_not, lower, reads=("depthwise_tiles",),
                    doc="channels-last depthwise 2-D convolutions as register-blocked row tiles, the GEMM's epilogue")
