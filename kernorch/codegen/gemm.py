"""Matrix products as generated C: a register-blocked GEMM with its epilogue fused.

Why: on this class of machine (2 vCPUs, ~20 GB/s to memory) a library GEMM called per kernel
runs 30-60% slower inside a model than alone, hot: its weights come cold from memory and
oneDNN/MKL pay a dispatch and a reorder per call. A plain C GEMM that packs each weight panel
as it streams it measured faster hot and much faster cold (``python -m bench.gemm_micro``,
197x192 @ 192x768 + bias: 293 vs 456 us hot, 396 vs 668 us cold, oneDNN with the weight
prepacked), it runs inside the native driver, and its epilogue (bias, activation, residual add,
scaling) is applied to each output tile while it is in cache instead of after a round trip
through memory. Large products (GPT-2's 768x3072) still run ~15% slower than oneDNN's.

The kernel: one MATMUL (float32, both operands at least 2-D, batch dims broadcast; A a strided
view of a kernel input with contiguous rows, or computed in the kernel from reads contiguous
along k, a row block at a time into ``ap``; B anything the inliner computes: a transposed
weight, a slice of an activation, a prologue) or one 1x1 CONV without pads or groups, and
elementwise prims of the product's shape after it, or views that only permute its dims (the tile
is then stored through the permutation). A convolution's image with contiguous channels and unit
strides (channels-last: the NHWC half of a layout pair, or a 1x1 map; or an image computed from
channels-last reads, a row block at a time like a computed A) gives A = its pixels and
B = the weight: the tile is 6 pixels x 32 channels, stored contiguously in NHWC. Otherwise A is
the contiguous weight and B the image's pixels, any stride. Threads split (batch, column panel,
row chunk) units; each unit packs its ``NR``-column panel of B (``bp``) unless B is a constant
weight, read from a copy packed once in zero-padded panels (``KernelSpec.packs``, packing.py);
then for every ``MR``-row block ``kn_gemm_tile`` (C header) sums the products into a tile and
the epilogue loop stores every kernel output from it. A constant weight's product at most
gemm_short_k long along k, or of a weight up to gemm_rows_first_bytes (CodegenOptions) with many row blocks, splits rows
only, every panel per row block, so each thread writes whole output rows in order. A product of
at most 16 columns (a stem to 16 channels, a 1x1 projection to 8..16) uses 12-row x 16-column
tiles (``kn_gemm_tile16``) and 16-column panels instead: a 32-column tile would spend half its
multiply-adds on zero padding.
Any other 2-D convolution without groups (KxK, pads, dilations, a strided 1x1 channels-last)
whose image is a strided view of a kernel input has A = its pixels' windows (gemm_product.Window):
a row block whose windows all lie inside the image (one output row, no pads) is read in place
through a table of the taps' offsets (``kn_window_tile``); one at the image's borders is copied
into ``ap`` first, zeros in the pads (``kn_window_rows``). A stem's windows are runs of a few
floats per channel, so the copy cost more than the products (ResNet-50's 7x7 3->64: 1816 us
copied, 1650 in place; MobileNetV3's 3x3/2 3->16: 185 vs 124 us; ``python -m bench.window_micro``).
A packed weight up to PANELS_INNER_BYTES is read whole for each row block, so each window is
copied (or found in cache) once.
A product of one row (a 1x1 map, one token) skips the panel: a dot product per column along k.
The solver still prices the library providers on the same candidate.
"""

from __future__ import annotations

import math

import numpy as np

from kernorch.codegen import amx, indexing, vnni
from kernorch.codegen.gemm_helpers import MR, MR_NARROW, NR, NR_NARROW
from kernorch.codegen.kernel import Accum, Arg, Call, Decl, KernelSpec, Let, Loop, Parallel, Store
from kernorch.codegen.gemm_product import (MIN_WINDOW_COLUMNS, Product, constant_b, coords_of, epilogue_why_not,
                                           integer_product, is_bf16, operand_batch, product_of, strided_operand,
                                           unflatten)
from kernorch.codegen.linear import view_map
from kernorch.codegen.lower_base import KernelLowerer
from kernorch.codegen.scalar import Inliner
from kernorch.codegen.ssa import Body
from kernorch.codegen.template import Template
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

PANELS_INNER_BYTES = 1 << 20  # a packed window weight up to this size is read whole per row block
STAGE_BYTES = 2048  # output columns this far apart (times any integer) are stored through a staging tile
# Threads split a constant weight's product by rows, every panel per row block, so each thread writes
# whole output rows in order, when the product is short along k (a 1x1 convolution from 16 or 24
# channels: bound by its output's stream to memory) or its packed weight is small (stays in L2) and it
# has many row blocks. Split by panels instead, each thread writes a 128-byte stripe of every row.
# CodegenOptions.gemm_short_k and gemm_rows_first_bytes (kernorch/options.py) set those sizes.
# A one-off A/B (gemm_short_k 0 vs 32 alternated in one process, bench.gemm_micro's cases): MobileNetV3's
# 16->64 at 112x112, output cold, 517 us split by panels, 398 by rows; 24->64, 32->96 and 24->72
# 1.04-1.3x hot and cold. gemm_rows_first_bytes, a one-off A/B in ResNet-50's kn-own plan (kernels timed
# in the call, ABBA rounds, three runs): its 64->256, 256->64, 128->512 and 256->128 1x1s at 56x56
# and 28x28 ran 5-25% faster by rows; the model 50.3 vs 49.6 ms, 53.8 vs 58.4, 48.6 vs 51.0 (0.99-1.09x);
# MobileNetV3 1.02-1.04x; at 1 MiB (ResNet-50's 256->1024 at 14x14) rows ran 5-10% slower.
ROWS_FIRST_BLOCKS = 16  # row blocks per thread, at least, for a small weight's rows-first split
WINDOWS_READ = "read in place inside the image, copied per row block at its borders"
UNITS_PER_THREAD = 2  # split rows too when (batch x panels) gives fewer work units than this


def why_not(g: Graph, prims: list[Prim], outputs, options: CodegenOptions = DEFAULT_CODEGEN) -> str | None:
    """None when the C generator writes this kernel as a GEMM (see the module doc), else why not."""
    prod = integer_product(g, prims, outputs) or product_of(g, prims, bf16=amx.available())
    if isinstance(prod, str):
        return prod
    lin = prod.prim
    if is_bf16(g, lin):
        why = amx.why_not(g, prod)
        if why:
            return why
    return epilogue_why_not(g, prims, lin, outputs, "a generated GEMM", "the product")


class GemmLowerer(KernelLowerer):
    """KernelSpec of a generated GEMM (``why_not`` must have said None)."""

    def __init__(self, g: Graph, members: set[int], outputs: list[int], threads: int,
                 options: CodegenOptions = DEFAULT_CODEGEN) -> None:
        super().__init__(g, members, outputs)
        self.threads, self.options = threads, options

    def run(self, name: str | None) -> KernelSpec:
        g, vs = self.g, self.vs
        prod = self.prod = integer_product(g, self.prims, self.outputs) or product_of(g, self.prims, bf16=True)
        lin = prod.prim
        M, K, N, batch = prod.M, prod.K, prod.N, prod.batch
        tiles = self.amx = is_bf16(g, lin)  # bf16 operands: AMX tiles (amx.py)
        i8 = prod.a_zero is not None  # uint8 x int8 integers: VNNI tiles (vnni.py)
        narrow = (not tiles and not i8 and N <= NR_NARROW and M > 1
                  and not (prod.window is not None and N < MIN_WINDOW_COLUMNS))
        self.mr, self.nr = ((amx.MR, amx.NR) if tiles else (vnni.MR, vnni.NR) if i8 else (MR_NARROW, NR_NARROW) if narrow
                            else (MR, NR))
        nb, npan = math.prod(batch), -(-N // self.nr)
        blocks = -(-M // self.mr)
        units = UNITS_PER_THREAD * self.threads
        # every panel per row block, while the packed weight stays in cache: a convolution's windows are
        # copied (or found in cache) once; a short product's threads each write whole output rows
        weight_bytes = K * npan * self.nr * (1 if i8 else 4)
        small = weight_bytes <= self.options.gemm_rows_first_bytes and blocks >= ROWS_FIRST_BLOCKS * self.threads
        rows_first = (K <= self.options.gemm_short_k or small) and M > self.mr and self._constant_b(prod) is not None
        inner = (prod.window is not None or rows_first) and npan > 1 and weight_bytes <= PANELS_INNER_BYTES
        upan = 1 if inner else npan  # panel groups that units split
        group_len = npan if inner else 1  # panels per group, each looped over per row block
        if ((tiles or i8) and not inner and npan > 1 and (prod.window is not None or prod.a_src is None)
                and self._constant_b(prod) is not None):
            # AMX tiles whose A is filled per row block (windows, computed rows): a group of panels per thread, one
            # fill per group, not per panel (ResNet-50's 3x3 512->512 at 7x7, 16 panels: 0.32 ms filled per panel)
            group_len = -(-npan // min(npan, self.threads))
            upan = -(-npan // group_len)
        grouped = group_len > 1 and not inner
        chunks = min(blocks, -(-units // (nb * upan))) if nb * upan < units else 1
        per_chunk = -(-blocks // chunks)
        chunks = -(-blocks // per_chunk)

        # buffers: the inputs and the outputs; the B panel and the tile are per-thread arrays
        self.inline = set(self.producers) - {lin.output}  # A is read through its pointer, never inlined
        self.guarded = self._selected_inputs()
        args = self._buffers()

        u = vs.new(nb * upan * chunks)
        sizes = vs.sizes
        bt = ix.floordiv(ix.var(u), upan * chunks, sizes)
        panel = vs.new(group_len) if inner or grouped else None
        group = ix.mod(ix.floordiv(ix.var(u), chunks, sizes), upan, sizes)
        pan = (ix.var(panel) if inner else indexing.normalize(group * group_len + ix.var(panel), sizes) if grouped
               else group)
        chunk = ix.mod(ix.var(u), chunks, sizes)
        bidx = unflatten(bt, batch, sizes)
        col0 = indexing.normalize(pan * self.nr, sizes)

        # B a constant weight: read from a copy packed once in panels (no pack per unit)
        gemv = None if tiles or i8 else self._dot_columns(prod, bidx, col0, sizes)
        dots = not tiles and prod.window is not None and N < MIN_WINDOW_COLUMNS  # a few output channels: dots per pixel
        weight = self._constant_b(prod) if gemv is None and not dots else None
        if weight is not None:
            self.pack(weight[0], weight[1], self.nr, amx.TRANSFORM if tiles else vnni.TRANSFORM if i8 else "")
        if dots:
            self.pack(prod.b_value, prod.window.dot_perm)

        cols = ix.minimum(N - col0, self.nr, sizes)
        pack = () if gemv is not None or weight is not None or dots else self._pack_panel(prod, bidx, col0, cols, sizes)

        # row blocks of the chunk: the tile, then the epilogue over its valid rows and columns
        mbl = vs.new(per_chunk)
        row0 = indexing.normalize((chunk * per_chunk + ix.var(mbl)) * self.mr, sizes)
        a_base = ix.const(prod.a_offset) + row0 * prod.a_strides[-1]
        a_batch = operand_batch(bidx, (*prod.a_batch_dims, 1, 1)) if not prod.weight_rows else []
        for e, stride in zip(a_batch, prod.a_strides):
            a_base = a_base + e * stride
        rows = ix.minimum(M - row0, self.mr, sizes)
        r, c = vs.new(self.mr), vs.new(self.nr)
        self.tile_at = indexing.normalize(ix.var(r) * self.nr + ix.var(c), sizes)
        self.row = indexing.normalize(row0 + ix.var(r), sizes)
        self.col = indexing.normalize(col0 + ix.var(c), sizes)
        idx = prod.out_index(g, bidx, self.row, self.col, sizes)
        body, stores = self._tile_stores(idx, sizes)
        staged = self._staged_store(stores, r, c, rows, cols) if gemv is None else None
        tile_stores = (staged[0],) if staged else tuple(stores)
        epilogue = (Loop(r, ix.const(0), rows, (Loop(c, ix.const(0), cols, (*body.lets, *tile_stores), simd=True),)),
                    *(staged[1:] if staged else ()))
        win = prod.window
        # dot products read in place when each kernel row of the (channels-last) image is one run
        direct = dots and win.channels_inner and win.strides[2] == win.channels and win.dilations[1] == 1
        image = (self.buf[prod.a_src], indexing.normalize(a_base, sizes)) if win is not None else None
        win_args = (rows, row0, image, *map(ix.const, win.args())) if win is not None else ()
        # tiles read row blocks inside the image in place, through int32 offsets of the taps
        in_place = (win is not None and not dots and not tiles and self.options.windows_in_place
                    and win.span() < 2 ** 31)
        if win is not None and not direct:  # a convolution's windows: a row block's into ap unless read in place
            copy = "kn_window_rows_bf16" if tiles else "kn_window_fill" if in_place else "kn_window_rows"
            fill = (Call(copy, (*win_args, "ap")),)
            a_at, lda = ("ap", ix.const(0)), K
        elif direct:
            fill, a_at, lda = (), image, K
        elif prod.a_src is None:  # A computed: this row block's rows into ap first
            fill = self._computed_rows(prod, bidx, row0, rows, sizes)
            a_at, lda = ("ap", ix.const(0)), K
        else:  # in place (kn_amx_tile copies a partial row block, or a K not in whole tiles, into ap itself)
            fill = ()
            a_at, lda = (self.buf[prod.a_src], indexing.normalize(a_base, sizes)), prod.a_strides[-1]
        panel_len = vnni.panel_floats(K) if i8 else (amx.padded_k(K) if tiles else K) * self.nr
        b_at = (self.buf[weight[0]], indexing.normalize(pan * panel_len, sizes)) if weight is not None else "bp"
        weight_at = (self.buf[prod.b_value], ix.const(0)) if dots else None
        tile = (Call("kn_amx_tile", (rows, ix.const(K), a_at, ix.const(lda), b_at, "tl", "ap")) if tiles else
                Call("kn_i8_tile", (rows, ix.const(K), a_at, ix.const(lda), b_at, ix.const(prod.a_zero), "tl")) if i8 else
                Call("kn_window_dots", (rows, row0, image, *map(ix.const, win.args()), ix.const(N), weight_at, "tl"))
                if direct else
                Call("kn_dot_rows", (rows, ix.const(K), a_at, ix.const(lda), ix.const(N), weight_at, "tl")) if dots else
                Call("kn_window_tile", (*win_args, ix.const(int(narrow)), "wo", "ap", b_at, "tl", self._prefetch(weight, inner or grouped, pan, npan, mbl, K))) if in_place else
                Call("kn_gemm_tile16" if narrow else "kn_gemm_tile",
                     (rows, ix.const(K), a_at, ix.const(lda), b_at, "tl", self._prefetch(weight, inner or grouped, pan, npan, mbl, K))))
        blocks_here = ix.minimum(blocks - chunk * per_chunk, per_chunk, sizes)
        arrays = ((Decl("ap", "bfloat16", self.mr * amx.padded_k(K)),) if tiles else
                  (Decl("ap", "uint8" if i8 else "float32", self.mr * K),) if fill else ())
        offsets = ()
        if in_place:  # the taps' offsets in a window, for the row blocks read in place
            arrays += (Decl("wo", "int32", K),)
            offsets = (Call("kn_window_offsets", (*map(ix.const, win.args()), "wo")),)
        if staged:
            arrays += (Decl("sg", g.types[self.outputs[0]].dtype, self.mr * self.nr),)
        if gemv is not None:  # one row: a dot product per column, written to the tile's first row
            dots = gemv(cols, a_at)
            body_unit = (Loop(mbl, ix.const(0), blocks_here, (*fill, *dots, *epilogue)),)
            arrays += (Decl("tl", "float32", self.mr * self.nr),)
        else:
            in_group = ix.minimum(npan - group * group_len, group_len, sizes) if grouped else ix.const(npan)
            per_block = (Loop(panel, ix.const(0), in_group, (tile, *epilogue)),) if inner or grouped else (tile, *epilogue)
            body_unit = (*pack, *offsets, Loop(mbl, ix.const(0), blocks_here, (*fill, *per_block)))
            if tiles:  # tiles are configured per unit: a library call between kernels may change them
                body_unit = (Call("kn_amx_begin", ()), *body_unit, Call("kn_amx_end", ()))
            bp = Decl("bp", "bfloat16", amx.padded_k(K) * self.nr) if tiles else Decl("bp", "float32", K * self.nr)
            arrays += ((bp,) if pack else ()) + (Decl("tl", "float32", self.mr * self.nr),)
        par = Parallel(u, nb * upan * chunks, body_unit, arrays, threads=True)
        comment, _ = self.describe()
        how = ("bf16 AMX tiles of 32 rows" if tiles else "int8 VNNI tiles of 32 rows" if i8 else "one row: a dot product per column" if gemv is not None else
               f"a dot product per row and column, {self.mr} rows at a time" if dots else f"tiles of {self.mr} rows")
        role = (" (1x1 convolution: A is the weight)" if prod.weight_rows else
                f" (convolution: A's rows are the pixels' {'x'.join(map(str, win.kernel))} windows, "
                f"{'read in place' if direct else WINDOWS_READ if in_place else 'copied per row block'})"
                if win else
                " (1x1 convolution: A's rows are the pixels, computed per row block)" if fill and prod.conv else
                " (1x1 convolution: A's rows are the pixels)" if prod.pixel_rows else
                " (A computed per row block)" if fill else "")
        order = (", every panel per row block" if inner else f", groups of {group_len} panels per row block" if grouped else "") + (", stored through a staging tile" if staged else "")
        note = (f"GEMM {M}x{K} @ {K}x{N}, batch {nb}: {npan} panels of {self.nr} columns x {chunks} row chunks{order}, "
                f"{how}{role}")
        key = g.kernel_key(set(self.producers), self.outputs)
        variant = ("one row" if gemv is not None else "window dots in place" if direct else "dot rows" if dots else
                   "windows in place" if in_place else "windows copied" if win is not None else
                   "A computed" if fill else "A in place")
        traits = {variant, *(["amx tiles"] if tiles else []), *(["int8 tiles"] if i8 else []), *(["narrow tiles"] if narrow else []), *(["row remainder"] if M % self.mr else []),
                  *(["column remainder"] if N % self.nr else []), *(["batched"] if nb > 1 else []),
                  *(["every panel per row block"] if inner else []), *(["panel groups"] if grouped else []), *(["staged stores"] if staged else []),
                  *(["epilogue"] if len(self.prims) > 1 else [])}
        return KernelSpec(name=name or f"kn_{key[:16]}", args=args, body=(par,), sizes=tuple(sizes),
                          inputs=tuple(self.ext), outputs=tuple(self.outputs), key=key, comment=comment,
                          workspace=0, notes=(note, *self.pack_notes()), packs=self.pack_specs(),
                          traits=tuple(sorted(traits)))

    def _buffers(self) -> tuple[Arg, ...]:
        """The kernel's arguments: inputs ``in0``.., then outputs ``out0``.. (their names in ``self.buf``)."""
        g, args = self.g, []
        self.buf = {}
        for role, vals in (("in", self.ext), ("out", self.outputs)):
            for k, v in enumerate(vals):
                self.buf[v] = f"{role}{k}"
                args.append(Arg(self.buf[v], g.types[v].dtype, g.types[v].size, role))
        return tuple(args)

    def _tile_stores(self, idx: list, sizes) -> tuple[Body, list[Store]]:
        """The epilogue of the tile element at (``self.row``, ``self.col``), the product's output
        index ``idx``: (its statements, a store of each kernel output at the element's position
        in that output's own dims)."""
        g = self.g
        body = Body(self.names)
        self.epilogue = inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
        coords = coords_of(g, self.prims, self.prod.prim)
        stores = []
        for v in self.outputs:
            own = [idx[d] if d is not None else ix.const(0) for d in coords[v]]
            stores.append(Store(self.buf[v], self._flat(v, own), body.cast(inl.value(v, own), g.types[v].dtype)))
        return body, stores

    def _staged_store(self, stores: list, r: int, c: int, rows: ix.Expr, cols: ix.Expr) -> tuple | None:
        """For one output stored with the tile's rows contiguous and its columns a multiple of
        STAGE_BYTES apart (an NCHW image of 224x224 from pixel rows): (the store into a
        transposed staging tile ``sg``, the loop that copies each column's run of rows out).
        Else None. Stored a tile row at a time, such columns all fall in one or two L1 sets and
        evict each other on every row (9x9 3->32 at 224x224: 8.4 ms NCHW out vs 2.7 channels-last,
        3.0 staged); at other strides the scattered row stores cost less than the staging pass."""
        dtype = self.g.types[self.outputs[0]].dtype
        if len(stores) != 1 or _stride(stores[0].offset, r) != 1 or _stride(stores[0].offset, c) in (0, 1):
            return None
        if _stride(stores[0].offset, c) * np.dtype(dtype).itemsize % STAGE_BYTES:
            return None
        st, vs = stores[0], self.vs
        sizes = vs.sizes
        staged = Store("sg", indexing.normalize(ix.var(c) * self.mr + ix.var(r), sizes), st.value)
        r2, c2 = vs.new(self.mr), vs.new(self.nr)
        name = f"t{next(self.names)}"
        load = Let(name, dtype, "load", (), ("sg", indexing.normalize(ix.var(c2) * self.mr + ix.var(r2), sizes)))
        out = Store(st.buf, vs.subst(st.offset, {r: ix.var(r2), c: ix.var(c2)}), name)
        return staged, Loop(c2, ix.const(0), cols, (Loop(r2, ix.const(0), rows, (load, out), simd=True),))

    def _prefetch(self, weight, inner: bool, pan: ix.Expr, npan: int, mbl: int, K: int) -> ix.Expr:
        """Floats past the tile's panel to prefetch while its first row block runs: the next panel
        of a constant weight packed once (the unit after this one reads it; a large weight comes
        from memory, and the first row block would otherwise wait for every line), else 0."""
        if weight is None or inner or npan == 1 or not self.options.gemm_prefetch:
            return ix.const(0)
        sizes = self.vs.sizes
        has_next = ix.minimum(npan - 1 - pan, 1, sizes)  # 1 unless this is the last panel
        first_block = 1 - ix.minimum(ix.var(mbl), 1, sizes)  # 1 in the unit's first row block
        return indexing.normalize(ix.minimum(has_next, first_block, sizes) * (K * self.nr), sizes)

    def _pack_panel(self, prod: Product, bidx: list, col0: ix.Expr, cols: ix.Expr, sizes) -> tuple:
        """The unit's B panel: ``bp[k*nr + j] = B[batch, k, col0 + j]`` over the valid columns,
        then zeros past N (no load leaves the value: contiguous loads, no clamps or selects). On AMX
        tiles in bf16 pairs (``amx.pairs``' order), with zero rows past K to whole k steps."""
        g, vs, K = self.g, self.vs, prod.K
        k, j, jz = vs.new(K), vs.new(self.nr), vs.new(self.nr)
        dtype = "bfloat16" if self.amx else "float32"

        def at(kk: ix.Expr, jj: ix.Expr) -> ix.Expr:
            if self.amx:  # element (k, j) of the pairs: row k // 2, column j, k % 2 within the pair
                return indexing.normalize(ix.floordiv(kk, 2, sizes) * (2 * self.nr) + jj * 2 + ix.mod(kk, 2, sizes), sizes)
            return indexing.normalize(kk * self.nr + jj, sizes)

        col = indexing.normalize(col0 + ix.var(j), sizes)
        body = Body(self.names)
        inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
        val = body.cast(inl.value(prod.b_value, prod.b_index(g, bidx, ix.var(k), col, sizes)), dtype)
        store = (*body.lets, Store("bp", at(ix.var(k), ix.var(j)), val))
        zero = f"t{next(self.names)}"
        zeros = Loop(jz, cols, ix.const(self.nr), (Let(zero, dtype, "imm", (), 0.0), Store("bp", at(ix.var(k), ix.var(jz)), zero)),
                     simd=True)
        if prod.pixel_rows:  # a computed weight, contiguous along k: read it in rows, scatter into the panel
            loops = (Loop(j, ix.const(0), cols, (Loop(k, ix.const(0), ix.const(K), store, simd=True),)),
                     Loop(k, ix.const(0), ix.const(K), (zeros,)))
        else:
            loops = (Loop(k, ix.const(0), ix.const(K), (Loop(j, ix.const(0), cols, store, simd=True), zeros)),)
        if not self.amx or amx.padded_k(K) == K:
            return loops
        kz, jk = vs.new(amx.padded_k(K)), vs.new(self.nr)  # zero rows past K, to whole k steps
        zero_k = f"t{next(self.names)}"
        return (*loops, Loop(kz, ix.const(K), ix.const(amx.padded_k(K)), (Loop(jk, ix.const(0), ix.const(self.nr), (
            Let(zero_k, dtype, "imm", (), 0.0), Store("bp", at(ix.var(kz), ix.var(jk)), zero_k))),)))

    def _constant_b(self, prod: Product) -> tuple[int, tuple[int, ...]] | None:  # gemm_product.constant_b
        return constant_b(self.g, self.producers, self.ext, prod)

    def _computed_rows(self, prod: Product, bidx: list, row0: ix.Expr, rows: ix.Expr, sizes) -> tuple:
        """``ap[r*K + k] = A[batch, row0 + r, k]`` for the block's rows: A (a matmul's first
        operand, a convolution's image with the pixels as rows) computed by the inliner (its
        prologue), vectorized along k."""
        g, vs = self.g, self.vs
        a = prod.a_int if prod.a_zero is not None else prod.prim.inputs[0]  # int8 tiles: xq's integers
        x = g.types[a].shape
        r, k = vs.new(self.mr), vs.new(prod.K)
        body = Body(self.names)
        inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
        row = indexing.normalize(row0 + ix.var(r), sizes)
        if prod.conv:
            index = [bidx[0] if x[0] > 1 else ix.const(0), ix.var(k), *unflatten(row, x[2:], sizes)]
        else:
            index = [*operand_batch(bidx, x), row if x[-2] > 1 else ix.const(0), ix.var(k)]
        dtype, row_len = (("bfloat16", amx.padded_k(prod.K)) if self.amx else ("uint8", prod.K) if prod.a_zero is not None
                          else ("float32", prod.K))
        val = body.cast(inl.value(a, index), dtype)
        store = Store("ap", indexing.normalize(ix.var(r) * row_len + ix.var(k), sizes), val)
        return (Loop(r, ix.const(0), rows, (Loop(k, ix.const(0), ix.const(prod.K), (*body.lets, store), simd=True),)),)

    def _dot_columns(self, prod: Product, bidx: list, col0: ix.Expr, sizes):
        """For a one-row product whose B is contiguous along k (a transposed weight; a 1x1
        convolution's weight with the pixels as rows), a builder of the statements that set
        ``tl[c] = sum over k of A[k] * B[k, col0 + c]`` for the unit's columns: a dot product per
        column, vectorized along k, reading each weight row once (no panel to pack). Else None."""
        if prod.M != 1 or prod.window or not self._b_contiguous_along_k(prod):
            return None
        g, vs = self.g, self.vs

        def build(cols: ix.Expr, a_at: tuple) -> tuple:
            c, k = vs.new(self.nr), vs.new(prod.K)
            col = indexing.normalize(col0 + ix.var(c), sizes)
            body = Body(self.names)
            inl = Inliner(g, self.producers, self.inline, sizes, body, self._leaf)
            b = body.cast(inl.value(prod.b_value, prod.b_index(g, bidx, ix.var(k), col, sizes)), "float32")
            a = body.let("load", "float32", (), (a_at[0], indexing.normalize(a_at[1] + ix.var(k), sizes)))
            part = f"a{next(self.names)}"
            term = body.let("mul", "float32", (a, b))
            dot = Loop(k, ix.const(0), ix.const(prod.K), (*body.lets, Accum(part, None, "sum", term, "float32")),
                       simd=True, reductions=((part, "sum", "float32"),))
            return (Loop(c, ix.const(0), cols, (Decl(part, "float32", 1, 0.0), dot, Store("tl", ix.var(c), part))),)
        return build

    def _b_contiguous_along_k(self, prod: Product) -> bool:
        if prod.pixel_rows:
            return True
        found = strided_operand(self.g, self.producers, prod.b_value, prod.prim)
        return not isinstance(found, str) and found[2][-2] == 1

    def _leaf(self, v: int, idx: tuple, body: Body) -> str:
        g, lin = self.g, self.prod.prim
        if v in self.imm:
            return body.imm(self.imm[v], g.types[v].dtype)
        if v == lin.output:
            acc = body.let("load", "float32", (), ("tl", self.tile_at))
            if self.prod.conv and len(lin.inputs) > 2:  # the convolution's own bias, per output channel
                channel = self.col if self.prod.pixel_rows else self.row
                bias = body.cast(self.epilogue.value(lin.inputs[2], [channel]), "float32")
                acc = body.let("add", "float32", (acc, bias))
            return body.cast(acc, g.types[v].dtype)  # a bf16 product is rounded once, as the interpreter does
        # Every loop runs over valid rows and columns only: plain offsets, contiguous loads; but a
        # select (a concat's pieces, a pad's mask) loads every branch, so those reads stay in bounds.
        flat = self._clamped_flat(v, idx) if v in self.guarded else self._flat(v, idx)
        return body.let("load", g.types[v].dtype, (), (self.buf[v], flat))

    def _selected_inputs(self) -> set[int]:
        """Kernel inputs read under a select (upstream of a concat or a masked view in the kernel):
        the branch not taken still loads, at an index that may leave the input."""
        marked, stack = set(), [u for p in self.prims if p.op is Op.CONCAT or (p.op is Op.VIEW and view_map(self.g, p).mask)
                                for u in p.inputs]
        while stack:
            u = stack.pop()
            if u not in marked:
                marked.add(u)
                stack.extend(self.producers[u].inputs if u in self.producers else ())
        return {u for u in marked if u not in self.producers}


def _stride(e: ix.Expr, i: int) -> int:
    """The coefficient of loop variable ``i`` in the affine index ``e`` (0 when absent)."""
    return sum(k for a, k in e.terms if isinstance(a, ix.Var) and a.i == i)


def lower(g: Graph, members: set[int], outputs: list[int], threads: int, options: CodegenOptions,
          name: str | None) -> KernelSpec:
    """The GEMM's KernelSpec (``why_not`` must have said None)."""
    return GemmLowerer(g, members, outputs, threads, options).run(name)


TEMPLATE = Template("gemm", why_not, lower, reads=("gemm_prefetch", "gemm_short_k", "gemm_rows_first_bytes",
                                                    "windows_in_place"),
                    doc="one matmul or convolution as packed-panel GEMM tiles (or dot products) with its epilogue")
