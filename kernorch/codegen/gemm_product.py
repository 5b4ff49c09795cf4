"""The product a generated GEMM computes (codegen/gemm.py): a kernel's linear prim read as
``out[batch, m, n] = sum over k of A[batch, m, k] * B[batch, k, n]``, where A's rows lie, and
what may follow the product in the kernel.

Which operand is A decides the kernel's loops: a matmul's left operand; a 1x1 convolution's
weight (NCHW: B is the image's pixels), or its pixels when the image has contiguous channels
(channels-last, a 1x1 map) or is computed from channels-last reads; any other convolution's
pixels' windows (``Window``, im2row a row block at a time). A computed A (a prologue)
is allowed where its reads run contiguously along k, so a row block of it can be computed with
vector loads.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from kernorch.codegen import indexing
from kernorch.codegen.linear import VIEWS, layout_strides, operand_view, strided, view_map
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim
from kernorch.ir.tensors import holds_int8


MIN_WINDOW_COLUMNS = 8  # fewer output channels: dot products per pixel instead of 32-wide tiles


@dataclass(frozen=True)
class Window:
    """A 2-D convolution's image read as A (im2row): row ``p`` is output pixel p's window, ``K``
    ordered (kh, kw, channel) when the channels are contiguous (a run per tap) and (channel, kh,
    kw) otherwise, zeros where the window leaves the image (the pads). Fields in the order
    ``kn_window_rows`` (gemm.py) takes them."""

    channels: int
    height: int
    width: int
    strides: tuple[int, int, int]  # of the image's channel, row and column, in elements
    out_width: int
    kernel: tuple[int, int]
    conv_strides: tuple[int, int]
    pads: tuple[int, int]  # begins (the ends follow from the output size)
    dilations: tuple[int, int]

    @property
    def channels_inner(self) -> bool:
        return self.strides[0] == 1

    @property
    def weight_perm(self) -> tuple[int, ...]:
        """The weight's (Cout, Cin, KH, KW) dims in the order that reads it as B (K, Cout)."""
        return (2, 3, 1, 0) if self.channels_inner else (1, 2, 3, 0)

    @property
    def dot_perm(self) -> tuple[int, ...]:
        """The weight's dims in the order that reads each output channel's taps in K's order."""
        return (0, 2, 3, 1) if self.channels_inner else (0, 1, 2, 3)

    def span(self) -> int:
        """Elements from a window's first tap to its last (the largest of kn_window_offsets's)."""
        (kh, kw), (dh, dw), (cs, hs, ws) = self.kernel, self.dilations, self.strides
        return (self.channels - 1) * cs + (kh - 1) * dh * hs + (kw - 1) * dw * ws

    def args(self) -> tuple[int, ...]:
        return (self.channels, self.height, self.width, *self.strides, self.out_width, *self.kernel,
                *self.conv_strides, *self.pads, *self.dilations)


@dataclass(frozen=True)
class Product:
    """A linear prim as ``out[batch, m, n] = sum over k of A[batch, m, k] * B[batch, k, n]``:
    sizes, where A's rows lie (a kernel input, ``a_strides`` per A dim, rows contiguous) and how
    B's elements and the product's output index are written in the prim's own terms."""

    prim: Prim
    batch: tuple[int, ...]
    M: int
    K: int
    N: int
    a_src: int | None  # None: A is computed in the kernel, a row block at a time (``ap``)
    a_offset: int
    a_strides: tuple[int, ...]  # A's batch dims, then rows (A's columns are contiguous)
    a_batch_dims: tuple[int, ...]  # A's size along each of its batch dims (1: broadcast)
    # A 1x1 convolution whose image has contiguous channels (channels-last, or 1x1 maps): the
    # pixels are A's rows and the weight is B, so an NHWC output tile is 32 contiguous channels.
    pixel_rows: bool = False
    # Any other convolution: A's row for a pixel is its window of the image (``Window``), copied a
    # row block at a time into ``ap`` (pixel_rows is then True too).
    window: Window | None = None
    # int8 tiles (codegen/vnni.py): A is ``cast(xq: uint8) - a_zero``, xq read in place (a_src) or computed
    # (a_int: a value of A's shape, its rows computed as uint8); B a constant of int8 integers. None: A is
    # what the prim reads
    a_zero: int | None = None
    a_int: int | None = None

    @property
    def conv(self) -> bool:
        return self.prim.op is Op.CONV

    @property
    def weight_rows(self) -> bool:
        """A 1x1 convolution with the weight as A (its rows: output channels), B the pixels."""
        return self.conv and not self.pixel_rows

    @property
    def b_value(self) -> int:
        return self.prim.inputs[0] if self.weight_rows else self.prim.inputs[1]

    def out_index(self, g: Graph, bidx: list, m: ix.Expr, n: ix.Expr, sizes) -> list:
        if not self.conv:
            return [*bidx, m, n]
        spatial = g.types[self.prim.output].shape[2:]
        if self.pixel_rows:
            return [*bidx, n, *unflatten(m, spatial, sizes)]
        return [*bidx, m, *unflatten(n, spatial, sizes)]

    def b_index(self, g: Graph, bidx: list, k: ix.Expr, n: ix.Expr, sizes) -> list:
        p = self.prim
        if self.pixel_rows:
            return [n, k, *[ix.const(0)] * (len(g.types[p.inputs[1]].shape) - 2)]
        if not self.conv:
            shape = g.types[p.inputs[1]].shape
            return [*operand_batch(bidx, shape), k, n]
        out = unflatten(n, g.types[p.output].shape[2:], sizes)
        return [*bidx, k, *(indexing.normalize(o * st, sizes) for o, st in zip(out, p.attrs.strides))]


def is_bf16(g: Graph, p: Prim) -> bool:
    """``p`` multiplies bfloat16 operands into a bfloat16 result (a convolution's bias may be float32)."""
    dtypes = [g.types[v].dtype for v in (*p.inputs[:2], p.output)]
    return all(d == "bfloat16" for d in dtypes) and all(g.types[v].dtype in ("bfloat16", "float32") for v in p.inputs[2:])


def unflatten(n: ix.Expr, shape, sizes) -> list:
    """Row-major coordinates of flat index ``n`` in ``shape`` (the outermost one takes no modulo:
    ``n`` is in range)."""
    out, inner = [], 1
    for d in reversed(range(len(shape))):
        q = ix.floordiv(n, inner, sizes)
        out.insert(0, q if d == 0 else ix.mod(q, shape[d], sizes) if shape[d] > 1 else ix.const(0))
        inner *= shape[d]
    return out


def operand_batch(bidx: list, shape) -> list:
    """An operand's batch coordinates from the product's (right-aligned; size-1 dims read 0)."""
    n = len(shape) - 2
    own = bidx[len(bidx) - n:] if n else []
    return [e if s > 1 else ix.const(0) for e, s in zip(own, shape[:n])]


def product_of(g: Graph, prims: list[Prim], bf16: bool = False) -> Product | str:
    """The kernel's linear prim as a Product, or why it is not one. With ``bf16`` a product of
    bfloat16 operands to a bfloat16 result (a convolution's bias float32) is one too."""
    lin = [p for p in prims if p.kind is Kind.LINEAR]
    if len(lin) != 1 or lin[0].op not in (Op.MATMUL, Op.CONV):
        return "a generated GEMM holds exactly one matmul or convolution and no other linear prim"
    p = lin[0]
    if not (bf16 and is_bf16(g, p)) and any(g.types[v].dtype != "float32" for v in (*p.inputs, p.output)):
        return f"{p.op.value} {g.name(p.output)} is not on float32"
    producers = {q.output: q for q in prims}
    if p.op is Op.CONV:
        a = p.attrs
        x, w, out = (g.types[v].shape for v in (p.inputs[0], p.inputs[1], p.output))
        if a.groups != 1 or len(x) < 3:
            return f"convolution {g.name(p.output)} is grouped or has no spatial dims"
        if any(k != 1 for k in w[2:]) or any(a.pads):
            return window_rows(g, producers, p)
        pixels = _pixel_rows(g, producers, p) or _computed_pixel_rows(g, producers, p)
        if pixels is not None:
            return pixels
        if any(s != 1 for s in a.strides):  # a strided 1x1 (a downsampling shortcut): channels-last as a window
            window = window_rows(g, producers, p)
            if isinstance(window, Product) and window.window.channels_inner:
                return window
        a_value = p.inputs[1]
        batch, M, K, N = (out[0],), w[0], w[1], math.prod(out[2:])
    else:
        x, w, out = (g.types[v].shape for v in (*p.inputs, p.output))
        if len(x) < 2 or len(w) < 2:
            return f"matmul {g.name(p.output)} has a vector operand"
        a_value = p.inputs[0]
        batch, M, K, N = tuple(out[:-2]), out[-2], x[-1], out[-1]
    found = strided_operand(g, producers, a_value, p)
    if isinstance(found, str):
        if p.op is Op.MATMUL and a_value in producers and _reads_unit_stride(g, producers, a_value, None, -1, [64]):
            # A computed (an activation, a scale before the product) from rows read contiguously
            return Product(p, batch, M, K, N, None, 0, (0,) * (len(x) - 1), tuple(x[:-2]))
        return found
    src, offset, strides = found
    shape = g.types[a_value].shape
    if g.types[src].size == 1:
        return f"{g.name(a_value)} is a scalar"
    if p.op is Op.CONV:
        if strides[1] != 1 or strides[0] != K:
            return f"weight {g.name(a_value)} is not contiguous"
        return Product(p, batch, M, K, N, src, offset, (0, K), (1,))
    if strides[-1] != 1 and K > 1:
        return f"rows of {g.name(a_value)} are not contiguous"
    return Product(p, batch, M, K, N, src, offset, strides[:-1], tuple(shape[:-2]))


def integer_product(g: Graph, prims: list[Prim], outputs) -> Product | None:
    """The kernel's product on int8 tiles (codegen/vnni.py), or None: a matmul, or a 1x1
    convolution with its pixels as rows, of ``cast(xq: uint8) [- zx]`` (xq read in place, the
    cast and the subtraction read by the product alone) and a constant weight of int8 integers."""
    lin = [p for p in prims if p.kind is Kind.LINEAR]
    if len(lin) != 1 or lin[0].op not in (Op.MATMUL, Op.CONV) or len(lin[0].inputs) > 2:
        return None
    p, producers = lin[0], {q.output: q for q in prims}
    found = uint8_operand(g, producers, prims, p.inputs[0], outputs)
    if found is None:
        return None
    xq, zx = found
    x, w, out = (g.types[v].shape for v in (p.inputs[0], p.inputs[1], p.output))
    if p.op is Op.CONV:
        a = p.attrs
        if a.groups != 1 or any(a.pads) or any(k != 1 for k in w[2:]):
            return None
        prod = _pixel_rows(g, producers, p, xq)
    elif len(x) >= 2 and len(w) == 2:
        view = strided_operand(g, producers, xq, p)
        if isinstance(view, str) and xq in producers:  # computed in the kernel: a row block at a time
            prod = Product(p, tuple(out[:-2]), out[-2], x[-1], out[-1], None, 0, (0,) * (len(x) - 1), tuple(x[:-2]))
        else:
            prod = (Product(p, tuple(out[:-2]), out[-2], x[-1], out[-1], view[0], view[1], view[2][:-1],
                            tuple(x[:-2])) if not isinstance(view, str) and (view[2][-1] == 1 or x[-1] == 1) else None)
    else:
        return None
    if prod is None:
        return None
    ext = {i for q in prims for i in q.inputs} - producers.keys()
    weight = constant_b(g, producers, ext, prod)
    if weight is None or not holds_int8(g.constants[weight[0]]):
        return None
    return dataclasses.replace(prod, a_zero=zx, a_int=xq)


def uint8_operand(g: Graph, producers: dict[int, Prim], prims: list[Prim], v: int, outputs) -> tuple[int, int] | None:
    """(xq, zx) when ``v`` is ``cast(xq: uint8) [- zx]`` computed in the kernel (zx a constant
    integer in 0..255), its values read by the next prim of that chain alone; else None."""
    zx, chain, q = 0, [], producers.get(v)
    if q is not None and q.op is Op.SUB:
        c = g.constants.get(q.inputs[1])
        z = float(np.asarray(c).reshape(-1)[0]) if c is not None and np.size(c) == 1 else -1.0
        if z != round(z) or not 0 <= z <= 255 or g.types[q.output].shape != g.types[q.inputs[0]].shape:
            return None
        zx, chain, q = int(z), [q], producers.get(q.inputs[0])
    if q is None or q.op is not Op.CAST or g.types[q.inputs[0]].dtype != "uint8" or g.types[q.output].dtype != "float32":
        return None
    chain.insert(0, q)
    for u in chain:
        readers = [r for r in prims for i in r.inputs if i == u.output]
        if u.output in outputs or len(readers) != 1:
            return None
    return q.inputs[0], zx


def strided_operand(g: Graph, producers: dict[int, Prim], v: int, user: Prim) -> tuple[int, int, tuple[int, ...]] | str:
    """Operand ``v`` of ``user`` as (the kernel input it views, offset, strides per dim of ``v``),
    or why it is not a strided view of a kernel input (``linear.operand_view``)."""
    found = operand_view(g, producers, v, user)
    if isinstance(found, str):
        return found
    src, view, _ = found
    if view is None:
        return src, 0, tuple(layout_strides(g.types[v].shape))
    return src, view[2], tuple(view[1])


def _pixel_rows(g: Graph, producers: dict[int, Prim], p: Prim, image: int | None = None) -> Product | None:
    """The 1x1 convolution ``p`` with its pixels as A's rows, when its image (or ``image``, of
    its shape: what an int8 product reads) is a strided view of a kernel input with contiguous
    channels and pixels one stride apart (unit conv strides); else None. The weight, B, may be
    anything the inliner computes."""
    x, w, out = (g.types[v].shape for v in (p.inputs[0], p.inputs[1], p.output))
    if any(s != 1 for s in p.attrs.strides):
        return None
    found = strided_operand(g, producers, p.inputs[0] if image is None else image, p)
    if isinstance(found, str):
        return None
    src, offset, st = found
    spatial = [d for d in range(2, len(x)) if x[d] > 1]
    if (x[1] > 1 and st[1] != 1) or g.types[src].size == 1:
        return None
    if any(st[d] != st[e] * x[e] for d, e in zip(spatial, spatial[1:])):
        return None  # the pixels are not one flat run
    lda = st[spatial[-1]] if spatial else x[1]
    return Product(p, (out[0],), math.prod(out[2:]), x[1], w[0], src, offset, (st[0], lda),
                   (x[0],), pixel_rows=True)


def window_rows(g: Graph, producers: dict[int, Prim], p: Prim, image: int | None = None) -> Product | str:
    """The 2-D convolution ``p`` with its pixels' windows as A's rows (``Window``): its image (or
    ``image``, of its shape: what an int8 kernel reads) a strided view of a kernel input, its
    weight a constant (packed once in the window's order). Else why not."""
    x, w, out = (g.types[v].shape for v in (p.inputs[0], p.inputs[1], p.output))
    a, name = p.attrs, g.name(p.output)
    if len(x) != 4 or any(a.output_padding):
        return f"convolution {name} is not a 2-D convolution"
    if p.inputs[1] not in g.constants:
        return f"the weight of convolution {name} is computed, not a constant"
    if g.types[p.inputs[1]].size == 1:  # folded into the kernel as an immediate: no buffer to read
        return f"the weight of convolution {name} is one element"
    found = strided_operand(g, producers, p.inputs[0] if image is None else image, p)
    if isinstance(found, str):
        return found
    src, offset, st = found
    if g.types[src].size == 1:
        return f"the image of convolution {name} is a scalar"
    window = Window(x[1], x[2], x[3], (1 if x[1] == 1 else st[1], st[2], st[3]), out[3], (w[2], w[3]),
                    tuple(a.strides), (a.pads[0], a.pads[1]), tuple(a.dilations))
    return Product(p, (out[0],), out[2] * out[3], x[1] * w[2] * w[3], w[0], src, offset, (st[0], 0), (x[0],),
                   pixel_rows=True, window=window)


def _computed_pixel_rows(g: Graph, producers: dict[int, Prim], p: Prim) -> Product | None:
    """The 1x1 convolution ``p`` with its pixels as A's rows when its image is computed in the
    kernel (an activation, a squeeze-excitation scale, a layout pair over them) from inputs read
    with contiguous channels (channels-last activations, per-channel vectors broadcast, scalars):
    each row block of A is then computed into a buffer (``ap``) before the tile reads it. Else
    None (an image computed from channels-first inputs stays B, read along its pixels)."""
    x, w, out = (g.types[v].shape for v in (p.inputs[0], p.inputs[1], p.output))
    if any(s != 1 for s in p.attrs.strides) or p.inputs[0] not in producers:
        return None
    if not _reads_unit_stride(g, producers, p.inputs[0], None, 1, [64]):
        return None
    return Product(p, (out[0],), math.prod(out[2:]), x[1], w[0], None, 0, (0, 0), (x[0],), pixel_rows=True)


def _reads_unit_stride(g: Graph, producers: dict[int, Prim], v: int, m, dim: int, budget: list[int]) -> bool:
    """Whether every kernel input that value ``v`` (of the operand's shape, reached through the
    index map ``m`` from the operand; None: the operand itself) is computed from is read with
    unit or zero stride along the operand's dim ``dim`` (a convolution image's channels, a
    matmul operand's k), through views and elementwise prims only: the operand's rows can then
    be computed with contiguous loads."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if g.types[v].size == 1:
        return True
    q = producers.get(v)
    if q is None:
        view = strided(m) if m is not None else (tuple(layout_strides(g.types[v].shape)), 0)
        return view is not None and view[0][dim] in (0, 1)
    if q.op in VIEWS:
        inner = view_map(g, q)
        return _reads_unit_stride(g, producers, q.inputs[0], inner if m is None else m.compose(inner), dim, budget)
    if q.kind is not Kind.ELEMENTWISE:
        return False
    shape = g.types[v].shape
    return all(g.types[u].size == 1 or (g.types[u].shape == shape and _reads_unit_stride(g, producers, u, m, dim, budget))
               for u in q.inputs)


def coords_of(g: Graph, prims: list[Prim], lin: Prim) -> dict[int, tuple[int | None, ...]] | str:
    """The product and every member computed from it, each with the product dim behind each of
    its own dims (None: a size-1 dim), or why a member cannot be written from the product's tile:
    after the product come elementwise prims and views that only permute dims (the two halves of
    a layout pair: the tile stored channels-last)."""
    rank = len(g.types[lin.output].shape)
    coords: dict[int, tuple[int | None, ...]] = {lin.output: tuple(range(rank))}
    for p in prims:
        seen = {coords[v] for v in p.inputs if v in coords}
        if not seen or p.output == lin.output:
            continue
        why = f"{p.op.value} after {lin.op.value} {g.name(lin.output)} is not elementwise on its shape"
        if len(seen) > 1:
            return why
        (c,) = seen
        if p.op is Op.VIEW:
            c = _permuted(p.attrs.map, c)
            if c is None:
                return f"view {g.name(p.output)} after {lin.op.value} {g.name(lin.output)} is not a permutation"
        elif p.kind is not Kind.ELEMENTWISE or any(v in coords and g.types[v].shape != g.types[p.output].shape
                                                   for v in p.inputs):
            return why
        coords[p.output] = c
    return coords


def epilogue_why_not(g: Graph, prims: list[Prim], lin: Prim, outputs, kernel: str, result: str) -> str | None:
    """None when every member after ``lin`` can be written from its tile (``coords_of``), no other
    reduction, linear or opaque prim is in the kernel and every output is computed from ``lin``;
    else why not, naming the ``kernel`` ("a generated GEMM") and what it computes ("the product")."""
    coords = coords_of(g, prims, lin)
    if isinstance(coords, str):
        return coords
    for p in prims:
        if p.output not in coords and p.kind in (Kind.REDUCE, Kind.LINEAR, Kind.OPAQUE):
            return f"{p.op.value} cannot share a kernel with {kernel}"
    if any(v not in coords for v in outputs):
        return f"{kernel} writes only {result} and values computed from it"
    return None


def _permuted(m, c: tuple[int | None, ...]) -> tuple[int | None, ...] | None:
    """The coords (see ``coords_of``) of a view's output from its input's, when the view only
    permutes dims and adds or drops size-1 dims; else None."""
    if m.mask:
        return None
    out: list[int | None] = [None] * len(m.out_shape)
    for j, e in enumerate(m.index):
        a = e.as_atom()
        if e.is_const and m.in_shape[j] == 1:
            continue
        if not isinstance(a, ix.Var) or out[a.i] is not None or m.out_shape[a.i] != m.in_shape[j]:
            return None
        out[a.i] = c[j]
    if any(o is None and m.out_shape[d] != 1 for d, o in enumerate(out)):
        return None
    return tuple(out)


def constant_b(g: Graph, producers: dict[int, Prim], ext, prod: Product) -> tuple[int, tuple[int, ...]] | None:
    """(constant kernel input, the order of its dims that reads it as B (K, N)) when B is a
    constant weight among the kernel's inputs ``ext``: a pixel-rows convolution's weight
    (Cout, Cin, 1..) as (Cin, .., Cout), a matmul's 2-D weight, plain or transposed. Else None
    (B is packed per unit)."""
    if prod.pixel_rows:
        w = prod.b_value
        perm = prod.window.weight_perm if prod.window else (*range(1, len(g.types[w].shape)), 0)
        return (w, perm) if w in ext and w in g.constants else None
    shape = g.types[prod.b_value].shape
    if prod.conv or len(shape) != 2:
        return None
    found = strided_operand(g, producers, prod.b_value, prod.prim)
    if isinstance(found, str):
        return None
    src, offset, strides = found
    if src not in ext or src not in g.constants or offset or len(g.types[src].shape) != 2:
        return None
    sshape, lay = g.types[src].shape, layout_strides(g.types[src].shape)
    perm = tuple(next((e for e in range(2) if lay[e] == strides[d] and sshape[e] == shape[d]), -1) for d in range(2))
    return (src, perm) if sorted(perm) == [0, 1] else None
