"""3x3 convolutions as Winograd F(6,3) along the image's rows: 2.25x fewer multiply-adds.

Why: a 3x3 convolution with unit strides is most of a ResNet's time, and the generated GEMM
(gemm.py) already runs its windows near the two cores' peak, so only doing less arithmetic makes
it faster. Along each output row, six outputs of a kernel row's 1-D correlation with 3 taps are
``AT @ ((G @ g) * (BT @ d))`` over 8 inputs d: 8 products instead of 18. The three kernel rows
and the channels are the GEMM's k, so for each of the 8 transform points t the products are one
matrix product ``M_t = V_t @ U_t`` (V_t: the transformed input of a block of tiles, k = 3 * Cin;
U_t: the weight transformed once, at the first call, and packed in 32-column panels).

A tile is 6 outputs of one row (a row's last tile may reach past its end); a block is 6
consecutive tiles, the GEMM tile's rows, which may span rows (14 wide: 3 tiles a row, so a block
is two rows; a row block of a 14-wide image alone ran the 3-row tile at half speed). Its pixels
are one flat run of the output: ``kn_wino_in`` transforms the block's inputs once (zeros in the
pads), then for each panel of 32 output channels ``kn_wino_tile`` runs the 8 products and the
output transform into the same tile of pixels x 32 channels the GEMM's epilogue reads, so bias,
activation and residual add fuse as they do there (GemmLowerer's epilogue, inherited).

Taken for a 3x3 convolution with unit strides and dilations, no groups, a channels-last image
read in place from a kernel input, a constant weight, at least ``MIN_WIDTH`` output columns and
``MIN_CHANNELS`` output channels (narrower rows waste the tail tiles' work); everything else
stays with gemm.py. Points 0, +-1, +-2, +-1/2: fp32 error about 1e-6 of the output's magnitude.
"""

from __future__ import annotations

import math

import numpy as np

from kernorch.codegen import gemm, indexing
from kernorch.codegen.gemm import GemmLowerer
from kernorch.codegen.gemm_helpers import NR, NR_NARROW
from kernorch.codegen.gemm_product import product_of, unflatten
from kernorch.codegen.kernel import Call, Decl, KernelSpec, Loop, Parallel
from kernorch.codegen.template import Template
from kernorch.codegen.winograd_transform import AT, BT, POINTS, TILE, TRANSFORM
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

TILES = 6  # tiles per block: the rows of one GEMM tile
BLOCK = TILE * TILES  # output pixels per block, at most
MIN_WIDTH = 2 * TILE
MIN_CHANNELS = NR_NARROW + 1  # fewer: gemm.py's 16-column tiles waste less than 32-column panels


def why_not(g: Graph, prims: list[Prim], outputs, options: CodegenOptions = DEFAULT_CODEGEN) -> str | None:
    """None when a kernel that gemm.py writes as a GEMM is a 3x3 convolution this module computes
    instead (see the module doc), else why not."""
    if not options.winograd:
        return "Winograd convolutions are switched off"
    convs = [p for p in prims if p.op is Op.CONV]  # first the cheap test: feasibility asks for every candidate
    if len(convs) != 1 or g.types[convs[0].inputs[1]].shape[2:] != (3, 3) or convs[0].attrs.strides != (1, 1):
        return "not one 3x3 convolution with unit strides"
    as_gemm = gemm.why_not(g, prims, outputs)
    if as_gemm is not None:
        return as_gemm
    prod = product_of(g, prims)
    win = None if isinstance(prod, str) else prod.window
    if win is None or not prod.conv:
        return "not a convolution read as windows"
    if win.kernel != (3, 3) or win.conv_strides != (1, 1) or win.dilations != (1, 1) or prod.prim.attrs.groups != 1:
        return "not a 3x3 convolution with unit strides and dilations, no groups"
    if not win.channels_inner or win.strides[2] != win.channels or prod.a_src is None:
        return "the image is not read in place, channels-last"
    if prod.prim.inputs[1] not in g.constants:
        return "the weight is computed"
    if win.out_width < MIN_WIDTH or prod.N < MIN_CHANNELS:
        return f"fewer than {MIN_WIDTH} output columns or {MIN_CHANNELS} output channels"
    return None


class WinogradLowerer(GemmLowerer):
    """KernelSpec of a Winograd 3x3 convolution (``why_not`` must have said None)."""

    def run(self, name: str | None) -> KernelSpec:
        g, vs = self.g, self.vs
        prod = self.prod = product_of(g, self.prims)
        lin, win = prod.prim, prod.window
        self.mr, self.nr = BLOCK, NR
        nb, N, C = math.prod(prod.batch), prod.N, win.channels
        k3, npan = 3 * C, -(-N // NR)
        ow = win.out_width
        per_row = -(-ow // TILE)  # tiles of an output row, the last one partial when 6 does not divide it
        tiles = (prod.M // ow) * per_row
        blocks = -(-tiles // TILES)

        self.inline = set(self.producers) - {lin.output}
        self.guarded = self._selected_inputs()
        args = self._buffers()
        weight = lin.inputs[1]
        self.pack(weight, tuple(range(4)), NR, TRANSFORM)

        # a block: TILES consecutive tiles of an image (row-major over output rows), which may span rows;
        # its pixels are one flat run of the output, from its first tile's first pixel to its last one's end
        u = vs.new(nb * blocks)
        sizes = vs.sizes
        bt = ix.floordiv(ix.var(u), blocks, sizes)
        first = indexing.normalize(ix.mod(ix.var(u), blocks, sizes) * TILES, sizes)
        end = ix.minimum(first + TILES, tiles, sizes)

        def pixel(tile: ix.Expr) -> ix.Expr:
            return indexing.normalize(ix.floordiv(tile, per_row, sizes) * ow
                                      + ix.mod(tile, per_row, sizes) * TILE, sizes)
        row0 = pixel(first)
        rows = indexing.normalize(pixel(end) - row0, sizes)
        panel = vs.new(npan)
        col0 = indexing.normalize(ix.var(panel) * NR, sizes)
        cols = ix.minimum(N - col0, NR, sizes)
        bidx = unflatten(bt, prod.batch, sizes)

        r, c = vs.new(BLOCK), vs.new(NR)
        self.tile_at = indexing.normalize(ix.var(r) * NR + ix.var(c), sizes)
        self.row = indexing.normalize(row0 + ix.var(r), sizes)
        self.col = indexing.normalize(col0 + ix.var(c), sizes)
        idx = prod.out_index(g, bidx, self.row, self.col, sizes)
        body, stores = self._tile_stores(idx, sizes)
        epilogue = Loop(r, ix.const(0), rows, (Loop(c, ix.const(0), cols, (*body.lets, *stores), simd=True),))

        image = (self.buf[prod.a_src], indexing.normalize(ix.const(prod.a_offset) + bt * prod.a_strides[0], sizes))
        _, hs, ws = win.strides
        count = indexing.normalize(end - first, sizes)
        fill = Call("kn_wino_in", (count, first, image, *map(ix.const, (per_row, C, win.height, win.width, hs, ws,
                                                                         *win.pads)), "wv", "wz"))
        u_at = (self.buf[weight], indexing.normalize(ix.var(panel) * (POINTS * k3 * NR), sizes))
        tile = Call("kn_wino_tile", (count, first, ix.const(per_row), ix.const(ow), ix.const(k3), "wv", u_at, "wm",
                                     "tl"))
        arrays = (Decl("wv", "float32", POINTS * TILES * k3), Decl("wz", "float32", C),
                  Decl("wm", "float32", POINTS * TILES * NR), Decl("tl", "float32", BLOCK * NR))
        par = Parallel(u, nb * blocks, (fill, Loop(panel, ix.const(0), ix.const(npan), (tile, epilogue))),
                       arrays, threads=True)
        comment, _ = self.describe()
        note = (f"Winograd F(6,3) 3x3 convolution {C}->{N} channels, {prod.M // ow}x{ow} output: blocks of {TILES} "
                f"tiles of {TILE} pixels of a row, {POINTS} products of {TILES}x{k3} @ {k3}x{NR} per block and "
                f"panel of {NR} channels (the image read channels-last in place)")
        key = g.kernel_key(set(self.producers), self.outputs)
        traits = {*(["partial row tiles"] if ow % TILE else []), *(["column remainder"] if N % NR else []),
                  *(["batched"] if nb > 1 else []), *(["epilogue"] if len(self.prims) > 1 else [])}
        return KernelSpec(name=name or f"kn_{key[:16]}", args=args, body=(par,), sizes=tuple(sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=0, notes=(note, *self.pack_notes()), packs=self.pack_specs(),
                          traits=tuple(sorted(traits)))


def _combination(row: np.ndarray, names: list[str]) -> str:
    """``sum of row[j] * names[j]`` as C, ones without a multiply, zeros left out."""
    terms = []
    for coef, name in zip(row, names):
        if coef == 0:
            continue
        mag = abs(float(coef))
        term = name if mag == 1.0 else f"{mag!r}f * {name}"
        terms.append(("- " if coef < 0 else "+ ") + term)
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _helpers() -> str:
    d = [f"d{j}" for j in range(POINTS)]
    m = [f"m{t}" for t in range(POINTS)]
    transform_in = "\n".join(f"        o[{t} * {TILES} * K3 + c] = {_combination(BT[t], d)};" for t in range(POINTS))
    transform_out = "\n".join(f"      out[{p} * {NR} + n] = {_combination(AT[p], m)};" for p in range(TILE))
    loads_in = " ".join(f"const float d{j} = p[{j}][c];" for j in range(POINTS))
    loads_out = " ".join(f"const float m{t} = m[({t} * {TILES} + i) * {NR} + n];" for t in range(POINTS))
    return f"""/* Winograd F(6,3) along output rows (codegen/winograd.py). Tile q of an output row: its outputs
   {TILE}q .. {TILE}q + {TILE - 1} (past the row's end on its last tile); tile number tau = row * per_row + q. kn_wino_in:
   v[(t*{TILES} + i)*K3 + ky*C + c] = the transformed inputs of tile first + i (i < count <= {TILES}), kernel row
   ky, channel c; the image x is channels-last (element strides hs, ws), zeros (z, C floats) outside it. */
static void kn_wino_in(int64_t count, int64_t first, const float *restrict x, int64_t per_row, int64_t C,
                       int64_t H, int64_t W, int64_t hs, int64_t ws, int64_t ph, int64_t pw, float *restrict v,
                       float *restrict z) {{
  const int64_t K3 = 3 * C;
  memset(z, 0, C * sizeof(float));
  for (int64_t i = 0; i < count; i++)
    for (int64_t ky = 0; ky < 3; ky++) {{
      const int64_t ih = (first + i) / per_row - ph + ky, iw0 = (first + i) % per_row * {TILE} - pw;
      const float *p[{POINTS}];
      for (int j = 0; j < {POINTS}; j++)
        p[j] = ih >= 0 && ih < H && iw0 + j >= 0 && iw0 + j < W ? x + ih * hs + (iw0 + j) * ws : z;
      float *restrict o = v + i * K3 + ky * C;
#pragma omp simd
      for (int64_t c = 0; c < C; c++) {{
        {loads_in}
{transform_in}
      }}
    }}
}}
/* tile[r*{NR} + n]: the outputs of tiles first .. first + count - 1 as one run of pixels (r: from the first
   tile's first pixel; a row's last tile holds only OW - {TILE}q of them) for one panel of {NR} output channels,
   u its transformed weight ({POINTS} matrices of K3 x {NR}); m holds the {POINTS} products. Every tile writes
   {TILE} rows in order, so the rows past a partial tile's end are overwritten by the next tile's. */
static void kn_wino_tile(int64_t count, int64_t first, int64_t per_row, int64_t OW, int64_t K3,
                         const float *restrict v, const float *restrict u, float *restrict m, float *restrict tile) {{
  for (int t = 0; t < {POINTS}; t++)
    kn_gemm_tile(count, K3, v + t * {TILES} * K3, K3, u + t * K3 * {NR}, m + t * {TILES} * {NR}, 0);
  const int64_t start = first / per_row * OW + first % per_row * {TILE};
  for (int64_t i = 0; i < count; i++) {{
    float *restrict out = tile + ((first + i) / per_row * OW + (first + i) % per_row * {TILE} - start) * {NR};
#pragma omp simd
    for (int n = 0; n < {NR}; n++) {{
      {loads_out}
{transform_out}
    }}
  }}
}}
"""


HELPERS = _helpers()


def lower(g: Graph, members: set[int], outputs: list[int], threads: int, options: CodegenOptions,
          name: str | None) -> KernelSpec:
    """The Winograd kernel's KernelSpec (``why_not`` must have said None)."""
    return WinogradLowerer(g, members, outputs, threads, options).run(name)


TEMPLATE = Template("winograd", why_not, lower, reads=("winograd",),
                    doc="3x3 convolutions with unit strides as Winograd F(6,3) along rows, the GEMM's epilogue")
