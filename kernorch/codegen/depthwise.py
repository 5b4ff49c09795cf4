"""Depthwise 2-D convolutions between channels-last tensors as register-blocked tiles.

Why: the loop-nest stencil (stencil.py inside loops.py) writes a depthwise convolution as one
flat loop over output pixels with a short SIMD loop over channels inside, so every pixel pays
for its tap masks (a blend per tap and vector, even where no tap leaves the image), its clamped
addresses and a division of the flat pixel index, and every partial sum makes a multiply and an
add. Here a unit of work is a run of one output row's pixels, every channel (a row is cut into
chunks of channels only where rows are too few to share among the threads). ``kn_dw_tile`` sums
the taps of the kernel rows that lie inside the image (decided once per row), four pixels x two
vectors of channels at a time (8 independent FMA chains) where the whole window lies inside the
row, and a border pixel over the taps inside the row only, a panel's vectors as separate chains;
the weight is read from 32-channel panels packed once. The tile then goes through the GEMM's
epilogue (bias, batch norm, activation, residual, layout), as Winograd's does.
On a 2-core Zen 3 VM, `python -m bench.depthwise_micro` (EfficientNet-B0's and MobileNetV3's layers with
bias and ReLU, 2 threads): 1.41x the loop nest's speed and 2.2x oneDNN's, geomean of 14 shapes; the
stride-2 and 3x3 layers at 14x14 are level with the loop nest (0.90-0.99x: reading the image bounds them).
End to end, EfficientNet-B0 kn-own 21.5 -> 20.0 ms (`python -m bench.switch_ab efficientnet_b0 --switch
depthwise-tiles`; onnxruntime 20.4 ms in the same run).

Taken for a 2-D convolution with one input channel per group and no channel multiplier, on
float32, its image read in place from a kernel input with contiguous channels, a constant weight,
and only elementwise prims and permuting views after it; anything else stays a loop nest.
Tried and dropped: a bf16 image (precision="bf16" storing the convolution's input in bf16) read in place
and widened in registers at every load ran 0.66-0.99x the float32 tile on six of MobileNetV3's layers (Zen 4
VM, 2 threads, hot; 0.88-1.33x with caches flushed): each image vector is loaded once per tap, so the widening
costs about what the bytes save. End to end (MobileNetV3 bf16, the depthwise images stored in bf16): 6.96 ms
median against 6.30 without, one interleaved run on a busy VM.
"""

from __future__ import annotations

import dataclasses
import math

from kernorch.codegen import indexing
from kernorch.codegen.gemm import GemmLowerer
from kernorch.codegen.gemm_helpers import NR
from kernorch.codegen.gemm_product import Product, epilogue_why_not, uint8_operand, unflatten, window_rows
from kernorch.codegen.kernel import Call, Decl, KernelSpec, Loop, Parallel
from kernorch.codegen.template import Template
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

BLOCK = 64  # output pixels of one row per tile, at most (a wider row is several tiles)
PIXELS = 4  # pixels summed at once inside the row (KN_DW_PIXELS in the helper)
TILE_FLOATS = 8192  # a tile's size, about (32 KiB: an L1 data cache); at least PIXELS pixels of every channel
UNITS_PER_THREAD = 4  # fewer rows than this many per thread: a row's tile is cut into chunks of panels


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
    prod = depthwise_product(g, prims, p, outputs)
    if isinstance(prod, str):
        return prod
    if not prod.window.channels_inner:
        return f"the image of convolution {g.name(p.output)} is not channels-last"
    return epilogue_why_not(g, prims, p, outputs, "a depthwise tile", "the convolution")


def depthwise_product(g: Graph, prims: list[Prim], p: Prim, outputs) -> Product | str:
    """The convolution's windows as a Product: its image a view of a kernel input, or (a quantized
    model) ``cast(xq: uint8) - zx`` of one, then ``a_zero`` is zx and the tile widens xq's rows."""
    producers = {q.output: q for q in prims}
    found = uint8_operand(g, producers, prims, p.inputs[0], outputs)
    if found is None:
        return window_rows(g, producers, p)
    prod = window_rows(g, producers, p, found[0])
    return prod if isinstance(prod, str) else dataclasses.replace(prod, a_zero=found[1])


class DepthwiseLowerer(GemmLowerer):
    """KernelSpec of a depthwise tile kernel (``why_not`` must have said None)."""

    def run(self, name: str | None) -> KernelSpec:
        g, vs = self.g, self.vs
        lin = next(p for p in self.prims if p.op is Op.CONV)
        prod: Product = depthwise_product(g, self.prims, lin, self.outputs)  # type: ignore[assignment]
        self.prod, win = prod, prod.window
        C, oh, ow = win.channels, g.types[lin.output].shape[2], win.out_width
        nb, npan, taps = math.prod(prod.batch), -(-C // NR), math.prod(win.kernel)
        # A tile holds every channel of a run of a row's pixels, so a unit reads its pixels' channels as one
        # stream (by 32-channel panels, a stride-2 layer of 96 channels read 2 of every 6 lines at a time and ran
        # 1.3x the loop nest). Only where rows are too few to share among the threads is a row's tile cut into
        # chunks of panels (7x7 outputs).
        rows = nb * oh
        chunks = min(npan, -(-UNITS_PER_THREAD * self.threads // rows)) if rows < UNITS_PER_THREAD * self.threads else 1
        per_chunk = -(-npan // chunks)
        chunks = -(-npan // per_chunk)
        channels = per_chunk * NR  # a tile's columns
        width = min(ow, BLOCK, max(PIXELS, TILE_FLOATS // channels // PIXELS * PIXELS))
        per_row = -(-ow // width)
        width = -(-ow // per_row)  # pixels per tile: a row's tiles as even as they go
        self.mr, self.nr = width, channels

        self.inline = set(self.producers) - {lin.output}
        self.guarded = self._selected_inputs()
        args = self._buffers()
        weight = lin.inputs[1]
        self.pack(weight, win.weight_perm, NR)

        units = rows * per_row * chunks  # chunks innermost: consecutive units read the same rows
        u = vs.new(units)
        sizes = vs.sizes
        bt = ix.floordiv(ix.var(u), oh * per_row * chunks, sizes)
        out_row = ix.mod(ix.floordiv(ix.var(u), per_row * chunks, sizes), oh, sizes)
        col_in_row = indexing.normalize(ix.mod(ix.floordiv(ix.var(u), chunks, sizes), per_row, sizes) * width, sizes)
        count = ix.minimum(ow - col_in_row, width, sizes)
        row0 = indexing.normalize(out_row * ow + col_in_row, sizes)
        chunk = ix.mod(ix.var(u), chunks, sizes)
        col0 = indexing.normalize(chunk * channels, sizes)
        cols = ix.minimum(C - col0, channels, sizes)
        bidx = unflatten(bt, prod.batch, sizes)

        r, c = vs.new(width), vs.new(channels)
        self.tile_at = indexing.normalize(ix.var(r) * channels + ix.var(c), sizes)
        self.row = indexing.normalize(row0 + ix.var(r), sizes)
        self.col = indexing.normalize(col0 + ix.var(c), sizes)
        idx = prod.out_index(g, bidx, self.row, self.col, sizes)
        body, stores = self._tile_stores(idx, sizes)
        epilogue = Loop(r, ix.const(0), count, (Loop(c, ix.const(0), cols, (*body.lets, *stores), simd=True),))

        _, hs, ws = win.strides
        first = ix.const(prod.a_offset) + bt * prod.a_strides[0] + col0  # the chunk's first channel, pixel (0, 0)
        image = (self.buf[prod.a_src], indexing.normalize(first, sizes))
        w_at = (self.buf[weight], indexing.normalize(chunk * (per_chunk * taps * NR), sizes))
        shape = (win.height, win.width, hs, ws, *win.kernel, *win.conv_strides, *win.pads, *win.dilations)
        arrays = (Decl("tl", "float32", width * channels),)
        if prod.a_zero is None:
            tile = Call("kn_dw_tile", (count, out_row, col_in_row, image, *map(ix.const, shape), w_at, cols,
                                       ix.const(channels), "tl"))
        else:  # the unit's rows of uint8 pixels widened into xs first (kn_dw_tile_u8)
            rows_read = (win.kernel[0] - 1) * win.dilations[0] + 1
            arrays += (Decl("xs", "float32", rows_read * win.width * channels),)
            tile = Call("kn_dw_tile_u8", (count, out_row, col_in_row, image, *map(ix.const, shape), w_at, cols,
                                          ix.const(channels), ix.const(prod.a_zero), "xs", "tl"))
        par = Parallel(u, units, (tile, epilogue), arrays, threads=True)
        comment, _ = self.describe()
        kh, kw = win.kernel
        note = (f"depthwise {kh}x{kw} convolution of {C} channels, {oh}x{ow} output: tiles of {width} pixels of a row "
                f"x {channels} channels, {PIXELS} pixels at a time inside the image (read channels-last in place)")
        key = g.kernel_key(set(self.producers), self.outputs)
        traits = {*(["row split"] if per_row > 1 else []), *(["uint8 image"] if prod.a_zero is not None else []), *(["channel chunks"] if chunks > 1 else []),
                  *(["column remainder"] if C % NR else []), *(["strided"] if win.conv_strides != (1, 1) else []),
                  *(["batched"] if nb > 1 else []), *(["epilogue"] if len(self.prims) > 1 else [])}
        return KernelSpec(name=name or f"kn_{key[:16]}", args=args, body=(par,), sizes=tuple(sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=0, notes=(note, *self.pack_notes()), packs=self.pack_specs(),
                          traits=tuple(sorted(traits)))


HELPERS = f"""/* Depthwise convolution tile (codegen/depthwise.py): tile[p*ld + c] = the taps' sum for output pixel
   (oh, ow0 + p), p < n, and channel c < cols from the one x and w point at. x: the image, channels contiguous,
   rows hs and pixels ws elements apart; w: panels of {NR} channels, channel c's tap (kh, kw) at
   (c / {NR})*KH*KW*{NR} + (kh*KW + kw)*{NR} + c % {NR}. Kernel rows outside the image are skipped for the whole
   row; pixels whose window lies inside the row sum KN_DW_PIXELS at a time over V vectors of channels
   (V * KN_DW_PIXELS independent FMA chains: an FMA's latency hidden), one FMA per tap and vector; a border
   pixel sums the taps inside the row only. Channels past the last whole vector are summed one at a time. */
#define KN_DW_PIXELS {PIXELS}
#define KN_DW_PANEL_VECS ({NR} / KN_VW < 4 ? {NR} / KN_VW : 4)
/* gcc's predictive commoning would carry each pixel's loads to the next tap (stride 1) in rotating registers:
   more live vectors than AVX2 has, an accumulator spilled in the loop (144 channels at 56x56: 1.3x slower) */
#if defined(__GNUC__) && !defined(__clang__)
#define KN_DW_OPT __attribute__((optimize("no-predictive-commoning")))
#else
#define KN_DW_OPT
#endif
KN_DW_OPT static inline __attribute__((always_inline)) void kn_dw_inside(const int V, const float *restrict x, int64_t hs,
    int64_t ws, int64_t kh0, int64_t kh1, int64_t KW, int64_t sw, int64_t dw, const float *restrict w,
    float *restrict tile, int64_t ld) {{
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
    for (int v = 0; v < V; v++) KN_STORE(tile + q * ld + v * KN_VW, acc[q][v]);
}}
/* one border pixel over V vectors of channels (V independent chains), its taps [kw0, kw1) of each kernel row */
static inline __attribute__((always_inline)) void kn_dw_pixel(const int V, const float *restrict x, int64_t hs,
    int64_t ws, int64_t kh0, int64_t kh1, int64_t kw0, int64_t kw1, int64_t KW, int64_t dw, const float *restrict w,
    float *restrict tile) {{
  kn_vec acc[4];
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) acc[v] = (kn_vec){{0}};
  for (int64_t kh = kh0; kh < kh1; kh++)
    for (int64_t kw = kw0; kw < kw1; kw++)
#pragma GCC unroll 4
      for (int v = 0; v < V; v++)
        acc[v] = KN_FMA(KN_LOAD(x + kh * hs + kw * dw * ws + v * KN_VW), KN_LOAD(w + (kh * KW + kw) * {NR} + v * KN_VW),
                        acc[v]);
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) KN_STORE(tile + v * KN_VW, acc[v]);
}}
KN_DW_OPT static void kn_dw_tile(int64_t n, int64_t oh, int64_t ow0, const float *restrict x, int64_t H, int64_t W,
                       int64_t hs, int64_t ws, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw, int64_t dh, int64_t dw, const float *restrict w, int64_t cols, int64_t ld,
                       float *restrict tile) {{
  int64_t kh0 = 0, kh1 = KH;
  while (kh0 < KH && oh * sh - ph + kh0 * dh < 0) kh0++;
  while (kh1 > kh0 && oh * sh - ph + (kh1 - 1) * dh >= H) kh1--;
  /* output columns whose every tap lies inside the row: [lo, hi) */
  const int64_t lo = (pw + sw - 1) / sw, last = W - 1 + pw - (KW - 1) * dw;
  const int64_t hi = last < 0 ? 0 : last / sw + 1;
  const int64_t nv = cols / KN_VW * KN_VW, panel = KH * KW * {NR};
  const float *restrict xrow = x + (oh * sh - ph) * hs;  /* kernel row kh at xrow + kh * dh * hs */
  int64_t p = 0;
  while (p < n) {{
    const int64_t ow = ow0 + p;
    const int block = ow >= lo && ow + KN_DW_PIXELS <= hi && p + KN_DW_PIXELS <= n ? KN_DW_PIXELS : 1;
    if (block == KN_DW_PIXELS) {{
      const float *restrict xp = xrow + (ow * sw - pw) * ws;
      for (int64_t c = 0; c < nv;) {{
        const float *restrict wc = w + c / {NR} * panel + c % {NR};
        if (c + 2 * KN_VW <= nv) {{
          kn_dw_inside(2, xp + c, dh * hs, ws, kh0, kh1, KW, sw, dw, wc, tile + p * ld + c, ld);
          c += 2 * KN_VW;
        }} else {{
          kn_dw_inside(1, xp + c, dh * hs, ws, kh0, kh1, KW, sw, dw, wc, tile + p * ld + c, ld);
          c += KN_VW;
        }}
      }}
    }} else {{
      /* a border pixel: the taps of each kernel row that lie inside the row, [kw0, kw1) */
      const int64_t left = pw - ow * sw, right = W - 1 + pw - ow * sw;
      const int64_t kw0 = left > 0 ? (left + dw - 1) / dw : 0;
      const int64_t kw1 = right < 0 ? 0 : (right / dw + 1 < KW ? right / dw + 1 : KW);
      const float *restrict xp = xrow + (ow * sw - pw) * ws;
      for (int64_t c = 0; c < nv;) {{
        const float *restrict wc = w + c / {NR} * panel + c % {NR};
        if (c % {NR} == 0 && c + {NR} <= nv) {{  /* a whole panel: {NR} / KN_VW chains, at most 4 */
          kn_dw_pixel(KN_DW_PANEL_VECS, xp + c, dh * hs, ws, kh0, kh1, kw0, kw1, KW, dw, wc, tile + p * ld + c);
          c += KN_DW_PANEL_VECS * KN_VW;
        }} else {{
          kn_dw_pixel(1, xp + c, dh * hs, ws, kh0, kh1, kw0, kw1, KW, dw, wc, tile + p * ld + c);
          c += KN_VW;
        }}
      }}
    }}
    for (int q = 0; q < block; q++)  /* channels past the last whole vector */
      for (int64_t c = nv; c < cols; c++) {{
        const float *restrict wc = w + c / {NR} * panel + c % {NR};
        float acc = 0;
        for (int64_t kh = kh0; kh < kh1; kh++)
          for (int64_t kw = 0; kw < KW; kw++) {{
            const int64_t iw = (ow + q) * sw - pw + kw * dw;
            if (iw >= 0 && iw < W)
              acc = KN_FMAF(xrow[kh * dh * hs + iw * ws + c], wc[(kh * KW + kw) * {NR}], acc);
          }}
        tile[(p + q) * ld + c] = acc;
      }}
    p += block;
  }}
}}
/* kn_dw_tile on a quantized model's uint8 image x, less its zero point zx: the rows and columns the tile reads
   widened first into xs (kernel row kh at xs + kh * dh * W * ld, pixel iw at + iw * ld, the tile's ld channels
   apart), which kn_dw_tile then reads as the image: each byte widened once per unit, not once per tap. */
static void kn_dw_tile_u8(int64_t n, int64_t oh, int64_t ow0, const uint8_t *restrict x, int64_t H, int64_t W,
                          int64_t hs, int64_t ws, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph,
                          int64_t pw, int64_t dh, int64_t dw, const float *restrict w, int64_t cols, int64_t ld,
                          int64_t zx, float *restrict xs, float *restrict tile) {{
  const int64_t r0 = oh * sh - ph, rs = W * ld;
  const int64_t c0 = ow0 * sw - pw > 0 ? ow0 * sw - pw : 0;
  const int64_t end = (ow0 + n - 1) * sw - pw + (KW - 1) * dw + 1, c1 = end < W ? end : W;
  const float z = (float)zx;
  for (int64_t kh = 0; kh < KH; kh++) {{
    const int64_t r = r0 + kh * dh;
    if (r < 0 || r >= H) continue;
    for (int64_t iw = c0; iw < c1; iw++) {{
      const uint8_t *restrict src = x + r * hs + iw * ws;
      float *restrict dst = xs + kh * dh * rs + iw * ld;
#pragma omp simd
      for (int64_t c = 0; c < cols; c++) dst[c] = (float)src[c] - z;
    }}
  }}
  kn_dw_tile(n, oh, ow0, xs - r0 * rs, H, W, rs, ld, KH, KW, sh, sw, ph, pw, dh, dw, w, cols, ld, tile);
}}
"""


def lower(g: Graph, members: set[int], outputs: list[int], threads: int, options: CodegenOptions,
          name: str | None) -> KernelSpec:
    """The depthwise tile kernel's KernelSpec (``why_not`` must have said None)."""
    return DepthwiseLowerer(g, members, outputs, threads, options).run(name)


TEMPLATE = Template("depthwise", why_not, lower, reads=("depthwise_tiles",),
                    doc="channels-last depthwise 2-D convolutions as register-blocked row tiles, the GEMM's epilogue")
