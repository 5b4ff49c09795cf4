"""Matrix products and 1x1 convolutions are generated C GEMMs (codegen/gemm.py), fused with
their epilogue: bias, activation, residual add, scaling; weights plain or transposed;
attention-style batched products of two activations, strided views as operands, a prologue on
the convolution's input, strides, odd sizes around the tile edges; all against the reference
interpreter. What the GEMM does not take stays a library kernel or a stencil."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish
from kernorch import codegen
from kernorch.codegen import gemm, gemm_product
from kernorch.codegen.feasible import kernel_kind
from kernorch.codegen.kernel import Call
from kernorch.codegen.triton import why_not_triton
from kernorch.ir import index as ix, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Kind, Op


def _dense(m=37, k=39, n=45, batch=(), transposed=False, bias=True, act=Op.TANH, residual=False, scale=None):
    """x (batch.., m, k) @ w (k, n) [+ bias] [* scale] [act] [+ residual]."""
    b = Builder()
    rng = np.random.default_rng(2)
    x = b.input((*batch, m, k))
    if transposed:  # Gemm(transB=1): the weight is stored (n, k)
        w = b.permute(b.constant(rng.standard_normal((n, k)).astype(np.float32)), (1, 0))
    else:
        w = b.constant(rng.standard_normal((k, n)).astype(np.float32))
    y = b.matmul(x, w)
    if bias:
        y = b.binary(Op.ADD, y, b.constant(rng.standard_normal(n).astype(np.float32)))
    if scale is not None:
        y = b.binary(Op.MUL, y, b.constant(np.float32(scale)))
    if act:
        y = b.unary(act, y)
    if residual:
        y = b.binary(Op.ADD, y, b.input((*batch, m, n)))
    return finish(b, y)


def _computed_a(m=37, k=53, n=45, transposed=False):
    """hardswish(x + residual) @ w + bias: A computed (a prologue) from rows read contiguously,
    each row block into a buffer before the tile (or the dot products of one row) reads it."""
    rng = np.random.default_rng(7)
    b = Builder()
    x = b.binary(Op.ADD, b.input((m, k)), b.input((m, k)))
    gate = b.binary(Op.MIN, b.binary(Op.MAX, b.binary(Op.ADD, x, b.constant(np.float32(3))), b.constant(np.float32(0))),
                    b.constant(np.float32(6)))
    a = b.binary(Op.MUL, x, gate)
    if transposed:
        w = b.permute(b.constant(rng.standard_normal((n, k)).astype(np.float32)), (1, 0))
    else:
        w = b.constant(rng.standard_normal((k, n)).astype(np.float32))
    y = b.binary(Op.ADD, b.matmul(a, w), b.constant(rng.standard_normal(n).astype(np.float32)))
    return finish(b, y)


def _attention_scores(heads=3, tokens=29, dim=16, scale=0.25):
    """q @ k^T of heads sliced out of one packed qkv activation, scaled: the operands are
    strided views of a kernel input, as in a transformer's attention."""
    b = Builder()
    qkv = b.input((1, tokens, 3, heads, dim))
    q = b.permute(_take(b, qkv, 0), (0, 2, 1, 3))  # (1, heads, tokens, dim)
    kt = b.permute(_take(b, qkv, 1), (0, 2, 3, 1))  # (1, heads, dim, tokens)
    s = b.binary(Op.MUL, b.matmul(q, kt), b.constant(np.float32(scale)))
    return finish(b, s)


def _take(b, x, part):
    """x[:, :, part] of a (1, tokens, 3, heads, dim) tensor, as views."""
    shape = b.shape(x)
    one = (shape[0], shape[1], 1, *shape[3:])
    return b.reshape(b.view(x, layout.slice_(shape, (0, 0, part, 0, 0), (1,) * 5, one)), (*one[:2], *one[3:]))


def _pointwise_conv(shape=(1, 80, 5, 7), cout=12, strides=(1, 1), bias=True, prologue=None, add=None):
    """A 1x1 convolution (A is the weight, B the image's pixels) with its epilogue."""
    rng = np.random.default_rng(3)
    b = Builder()
    x = b.input(shape)
    if prologue:
        x = b.unary(prologue, x)
    w = b.constant(rng.standard_normal((cout, shape[1], *([1] * (len(shape) - 2)))).astype(np.float32))
    bb = b.constant(rng.standard_normal(cout).astype(np.float32)) if bias else None
    y = b.conv(x, w, bb, ConvAttrs(strides, (0,) * (2 * len(strides)), (1,) * len(strides), 1))
    out = b.shape(y)
    if add == "residual":
        y = b.binary(Op.ADD, y, b.input(out))
    elif add == "per_channel":
        y = b.binary(Op.MUL, b.reshape(b.constant(rng.standard_normal(cout).astype(np.float32)), (cout, 1, 1)), y)
    return finish(b, b.unary(Op.RELU, y))


def _channels_last_conv(n=1, h=5, w=7, cin=24, cout=40, residual=True, bias=True):
    """A 1x1 convolution between channels-last tensors (the halves of layout pairs around it):
    the pixels are A's rows, the tile is stored through the output's permutation, and the
    residual add and relu after it work in NHWC."""
    rng = np.random.default_rng(4)
    b = Builder()
    x = b.permute(b.input((n, h, w, cin)), (0, 3, 1, 2))
    wt = b.constant(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    bb = b.constant(rng.standard_normal(cout).astype(np.float32)) if bias else None
    y = b.permute(b.conv(x, wt, bb, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)), (0, 2, 3, 1))
    if residual:
        y = b.binary(Op.ADD, y, b.input((n, h, w, cout)))
    return finish(b, b.unary(Op.RELU, y))


def _scaled_channels_last_conv(n=1, h=5, w=7, cin=40, cout=37, residual=True):
    """The projection of a squeeze-excitation block, channels-last: relu(x) * scale (a
    per-channel vector broadcast over the pixels) is the image of a 1x1 convolution. The image
    is computed (a prologue) from channels-last reads, so A's rows are still the pixels, each
    row block computed into a buffer before the tile reads it."""
    rng = np.random.default_rng(6)
    b = Builder()
    x = b.permute(b.unary(Op.RELU, b.input((n, h, w, cin))), (0, 3, 1, 2))
    scale = b.broadcast_to(b.input((n, cin, 1, 1)), (n, cin, h, w))
    img = b.permute(b.permute(b.binary(Op.MUL, x, scale), (0, 2, 3, 1)), (0, 3, 1, 2))  # a layout pair
    wt = b.constant(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    y = b.conv(img, wt, b.constant(rng.standard_normal(cout).astype(np.float32)), ConvAttrs((1, 1), (0,) * 4, (1, 1), 1))
    y = b.permute(y, (0, 2, 3, 1))
    if residual:
        y = b.binary(Op.ADD, y, b.input((n, h, w, cout)))
    return finish(b, y)


def _window_conv(n=1, h=9, w=11, cin=5, cout=40, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1),
                 dilations=(1, 1), channels_last=True, act=Op.RELU, residual=False):
    """A convolution with a KxK window (or a strided 1x1): each pixel's window of the image is a
    row of A, copied a row block at a time (zeros in the pads), the weight packed once in the
    window's order; channels-last (a copy per tap) or NCHW (the network's input)."""
    rng = np.random.default_rng(8)
    b = Builder()
    x = b.permute(b.input((n, h, w, cin)), (0, 3, 1, 2)) if channels_last else b.input((n, cin, h, w))
    wt = b.constant(rng.standard_normal((cout, cin, *kernel)).astype(np.float32))
    y = b.conv(x, wt, b.constant(rng.standard_normal(cout).astype(np.float32)), ConvAttrs(strides, pads, dilations, 1))
    if channels_last:
        y = b.permute(y, (0, 2, 3, 1))
    if residual:
        y = b.binary(Op.ADD, y, b.input(b.shape(y)))
    return finish(b, b.unary(act, y) if act else y)


def _squeeze_excite(cin=72, cout=24, images=1):
    """The 1x1 convolution of a squeeze-excitation block on a 1x1 map: one pixel, one A row, a
    dot product per output channel."""
    rng = np.random.default_rng(5)
    b = Builder()
    x = b.input((images, cin, 1, 1))
    wt = b.constant(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32))
    y = b.conv(x, wt, b.constant(rng.standard_normal(cout).astype(np.float32)), ConvAttrs((1, 1), (0,) * 4, (1, 1), 1))
    return finish(b, b.unary(Op.SIGMOID, y))


def _batched(batch=(2, 3), m=13, k=40, n=33, b_batch=True):
    """Both operands activations (attention's probabilities @ values), or a shared B."""
    b = Builder()
    x = b.input((*batch, m, k))
    y = b.input((*batch, k, n) if b_batch else (k, n))
    return finish(b, b.unary(Op.RELU, b.matmul(x, y)))


CASES = {
    "bias_tanh": lambda: _dense(),
    "no_epilogue": lambda: _dense(bias=False, act=None),
    "transposed_weight": lambda: _dense(transposed=True, act=Op.RELU),
    "residual_scaled": lambda: _dense(scale=0.5, act=Op.SIGMOID, residual=True),
    "exact_tiles": lambda: _dense(m=gemm.MR * 4, k=48, n=gemm.NR * 3),
    "one_row": lambda: _dense(m=1, k=64, n=70),
    "batched_rows": lambda: _dense(batch=(2,), m=9, k=8, n=100, residual=True),
    "long_k": lambda: _dense(m=7, k=777, n=40, act=None),
    "attention_scores": lambda: _attention_scores(),
    "batched_activations": lambda: _batched(),
    "broadcast_b": lambda: _batched(b_batch=False),
    "conv1x1_bias_residual": lambda: _pointwise_conv(add="residual"),
    "conv1x1_no_bias_per_channel": lambda: _pointwise_conv(bias=False, add="per_channel"),
    "conv1x1_stride2_two_images": lambda: _pointwise_conv(shape=(2, 70, 9, 11), strides=(2, 2)),
    "conv1x1_prologue": lambda: _pointwise_conv(prologue=Op.SIGMOID),
    "conv1x1_narrow": lambda: _pointwise_conv(shape=(1, 8, 13, 13), cout=40),
    "conv1d_1x1": lambda: _pointwise_conv(shape=(1, 33, 50), cout=7, strides=(1,)),
    "conv1x1_channels_last": lambda: _channels_last_conv(),
    "conv1x1_channels_last_two_images": lambda: _channels_last_conv(n=2, h=3, w=11, cin=9, cout=70, residual=False),
    # a small weight (40x70) and 33 row blocks: rows first; a 256x288 weight (288 KiB) past ROWS_FIRST_BYTES: panels
    "conv1x1_channels_last_many_rows": lambda: _channels_last_conv(h=14, w=14, cin=40, cout=70),
    "conv1x1_channels_last_large_weight": lambda: _channels_last_conv(h=14, w=14, cin=256, cout=288),
    "conv1x1_channels_last_no_bias": lambda: _channels_last_conv(h=1, w=1, cin=33, cout=33, bias=False),
    "conv1x1_one_pixel": lambda: _squeeze_excite(),
    "conv1x1_one_pixel_two_images": lambda: _squeeze_excite(cin=100, cout=50, images=2),
    "one_row_transposed_weight": lambda: _dense(m=1, k=300, n=77, transposed=True, act=Op.RELU),
    "conv1x1_channels_last_computed_image": lambda: _scaled_channels_last_conv(),
    "conv1x1_channels_last_computed_two_images": lambda: _scaled_channels_last_conv(n=2, h=3, w=5, cin=67, cout=70,
                                                                                   residual=False),
    "conv1x1_computed_one_pixel": lambda: _scaled_channels_last_conv(h=1, w=1, cin=50, cout=45),
    "matmul_computed_a": lambda: _computed_a(),
    "matmul_computed_one_row": lambda: _computed_a(m=1, k=300, n=70, transposed=True),
    "conv3x3_channels_last": lambda: _window_conv(residual=True),
    "conv3x3_stride2_stem": lambda: _window_conv(n=2, h=15, w=13, cin=3, cout=16, strides=(2, 2), channels_last=False),
    "conv7x7_stride2_pad3": lambda: _window_conv(h=17, w=16, cin=3, cout=33, kernel=(7, 7), strides=(2, 2),
                                                 pads=(3, 3, 3, 3), act=None),
    "conv5x3_dilated_uneven_pads": lambda: _window_conv(h=12, w=10, cin=9, cout=70, kernel=(5, 3), pads=(2, 0, 3, 1),
                                                        dilations=(2, 1), channels_last=False, act=Op.SIGMOID),
    "conv3x3_channels_last_wide_pads": lambda: _window_conv(h=4, w=5, cin=8, cout=16, pads=(4, 3, 4, 5), act=None),
    "conv3x3_no_pads_one_pixel": lambda: _window_conv(h=3, w=3, cin=40, cout=50, pads=(0, 0, 0, 0)),
    "conv9x9_to_rgb_channels_last": lambda: _window_conv(h=12, w=11, cin=8, cout=3, kernel=(9, 9), pads=(4,) * 4,
                                                         act=Op.TANH),
    "conv5x5_stride2_wide_pads_to_rgb": lambda: _window_conv(h=9, w=8, cin=6, cout=3, kernel=(5, 5), strides=(2, 2),
                                                             pads=(1, 6, 2, 6), residual=True),
    "conv3x3_to_two_channels_nchw": lambda: _window_conv(n=2, h=7, w=9, cin=5, cout=2, channels_last=False),
    # rows wide enough for the 4- and 2-pixel blocks of kn_window_dots, runs with a scalar tail
    "conv3x3_to_rgb_wide_channels_last": lambda: _window_conv(h=5, w=23, cin=7, cout=3),
    "conv3x3_stride2_to_two_wide": lambda: _window_conv(h=6, w=29, cin=6, cout=2, strides=(2, 2)),
    "conv3x3_to_seven_wide": lambda: _window_conv(h=4, w=21, cin=16, cout=7, act=None),
    "conv1x1_stride2_channels_last": lambda: _window_conv(h=10, w=9, cin=24, cout=36, kernel=(1, 1), strides=(2, 2),
                                                          pads=(0, 0, 0, 0), residual=True),
    # at most 16 columns: 12-row x 16-column tiles (kn_gemm_tile16), row counts that leave a partial block
    "narrow_dense": lambda: _dense(m=29, k=40, n=16, act=Op.RELU),
    "conv1x1_channels_last_to_twelve": lambda: _channels_last_conv(h=5, w=7, cin=24, cout=12),
    "conv1x1_fifteen_pixels": lambda: _pointwise_conv(shape=(1, 24, 3, 5), cout=40, add="residual"),
    # wide rows: most row blocks lie inside the image and are read in place through the taps' offsets
    "conv7x7_stride2_wide_nchw_stem": lambda: _window_conv(h=21, w=70, cin=3, cout=40, kernel=(7, 7), strides=(2, 2),
                                                           pads=(3, 3, 3, 3), channels_last=False),
    "conv3x3_wide_channels_last_to_sixteen": lambda: _window_conv(h=5, w=61, cin=16, cout=16, residual=True),
    "conv3x3_dilated_wide_nchw": lambda: _window_conv(h=9, w=40, cin=5, cout=33, dilations=(2, 3), pads=(2, 3, 2, 3),
                                                      channels_last=False),
    # an NCHW output whose channels lie 2 KiB apart (32x16 pixels): stored through a staging tile
    "conv3x3_nchw_staged_store": lambda: _window_conv(h=32, w=16, cin=4, cout=20, channels_last=False),
}
# products of a packed weight short along k (gemm.SHORT_K), or small with many row blocks (gemm.ROWS_FIRST_BYTES):
# threads split rows, every panel per row block
ROWS_FIRST = {"batched_rows", "conv1x1_channels_last", "conv1x1_channels_last_two_images",
              "conv1x1_channels_last_many_rows"}
COMPUTED_A = {"matmul_computed_a", "matmul_computed_one_row"}
IN_PLACE = {"conv9x9_to_rgb_channels_last", "conv5x5_stride2_wide_pads_to_rgb",  # channels-last: no window copied
            "conv3x3_to_rgb_wide_channels_last", "conv3x3_stride2_to_two_wide", "conv3x3_to_seven_wide"}
WINDOW_DOTS = {*IN_PLACE, "conv3x3_to_two_channels_nchw"}  # fewer than 8 output channels
WIDE_WINDOWS = {"conv7x7_stride2_wide_nchw_stem", "conv3x3_wide_channels_last_to_sixteen", "conv3x3_dilated_wide_nchw"}
WINDOWS = {*WIDE_WINDOWS, "conv3x3_nchw_staged_store", "conv3x3_channels_last", "conv3x3_channels_last_wide_pads", "conv3x3_stride2_stem", "conv7x7_stride2_pad3", "conv5x3_dilated_uneven_pads",
           "conv3x3_no_pads_one_pixel", "conv1x1_stride2_channels_last", *WINDOW_DOTS}
COMPUTED_IMAGE = {"conv1x1_channels_last_computed_image", "conv1x1_channels_last_computed_two_images",
                  "conv1x1_computed_one_pixel"}
NARROW = {"conv3x3_wide_channels_last_to_sixteen", "narrow_dense", "conv1x1_channels_last_to_twelve", "conv1x1_fifteen_pixels", "conv3x3_stride2_stem",
          "conv3x3_channels_last_wide_pads"}
DOT_PER_COLUMN = {"conv1x1_one_pixel", "conv1x1_channels_last_no_bias", "conv1x1_one_pixel_two_images",
                  "one_row_transposed_weight", "conv1x1_computed_one_pixel", "matmul_computed_one_row"}

# tiles reading a constant weight: a matmul's (plain or transposed), a pixel-rows convolution's
PANEL_PACKED = {"bias_tanh", "no_epilogue", "transposed_weight", "residual_scaled", "exact_tiles", "one_row",
                "batched_rows", "long_k", "conv1x1_channels_last", "conv1x1_channels_last_two_images",
                "conv1x1_channels_last_many_rows", "conv1x1_channels_last_large_weight",
                "conv1x1_channels_last_computed_image", "conv1x1_channels_last_computed_two_images",
                "matmul_computed_a", "narrow_dense", "conv1x1_channels_last_to_twelve", *(WINDOWS - WINDOW_DOTS)}

PIXEL_ROWS = {"conv1x1_channels_last", "conv1x1_channels_last_many_rows", "conv1x1_channels_last_large_weight",
              "conv1x1_channels_last_to_twelve", "conv1x1_channels_last_two_images", "conv1x1_channels_last_no_bias",
              "conv1x1_one_pixel", "conv1x1_one_pixel_two_images", *COMPUTED_IMAGE, *WINDOWS}


@pytest.mark.parametrize("name", list(CASES))
def test_gemm_matches_interpreter(name):
    g, members, outputs = CASES[name]()
    assert codegen.why_not(g, members, outputs) is None
    assert kernel_kind(g, members, outputs, codegen.why_not) is None  # generated code, not a library call
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kernel.provider == "c"
    notes = "\n".join(codegen.lower(g, members, outputs, num_threads=THREADS).notes)
    assert "GEMM" in notes
    assert ("A's rows are the pixels" in notes) == (name in PIXEL_ROWS)
    assert ("a dot product per column" in notes) == (name in DOT_PER_COLUMN)
    assert ("computed per row block" in notes) == (name in COMPUTED_IMAGE | COMPUTED_A)
    assert (f"windows, {gemm.WINDOWS_READ})" in notes) == (name in WINDOWS - WINDOW_DOTS)
    assert ("windows, copied per row block" in notes) == (name in WINDOW_DOTS - IN_PLACE)
    assert ("windows, read in place)" in notes) == (name in IN_PLACE)
    # windows copied once for every 32-column panel (more than one) of a weight that stays in cache
    one_panel = {"conv3x3_wide_channels_last_to_sixteen", "conv3x3_stride2_stem", "conv3x3_channels_last_wide_pads", "conv3x3_nchw_staged_store", *WINDOW_DOTS}
    assert ("every panel per row block" in notes) == (name in (WINDOWS - one_panel) | ROWS_FIRST)
    assert ("a dot product per row and column" in notes) == (name in WINDOW_DOTS)
    assert ("tiles of 12 rows" in notes) == (name in NARROW)
    assert ("staging tile" in notes) == (name == "conv3x3_nchw_staged_store")
    # a constant weight read by the tile comes from a copy packed once in 32-column (16: narrow) panels
    assert (f"in panels of {16 if name in NARROW else 32} columns" in notes) == (name in PANEL_PACKED)
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_concat_pieces_are_read_in_bounds():
    """A select loads every branch: the B panel of a 1x1 convolution whose image is a concat (a
    decoder's fuse layer) reads each piece at the other pieces' channels too, so those loads are
    clamped into the piece (unclamped, SegFormer's 1024-channel fuse layer read far past its
    first piece and crashed)."""
    rng = np.random.default_rng(9)
    b = Builder()
    pieces = [b.binary(Op.ADD, b.input((1, 8, 4, 5)), b.input((1, 8, 4, 5)))] + [b.input((1, 8, 4, 5)) for _ in range(3)]
    img = b.permute(b.permute(b.concat(pieces, 1), (0, 2, 3, 1)), (0, 3, 1, 2))  # a layout pair
    wt = b.constant(rng.standard_normal((16, 32, 1, 1)).astype(np.float32))
    g, members, outputs = finish(b, b.conv(img, wt, None, ConvAttrs((1, 1), (0,) * 4, (1, 1), 1)))
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert "GEMM" in kernel.spec.notes[0]
    loads = [ln for ln in kernel.source.splitlines() if "= in" in ln and "[" in ln]
    assert loads and all("kn_min" in ln for ln in loads), loads
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_what_the_gemm_does_not_take():
    b = Builder()
    x = b.input((16, 8))
    w = b.constant(np.ones((16, 4), np.float32))
    # A computed from a transposed input (strided along k): neither a GEMM nor a library kernel
    y = b.matmul(b.unary(Op.EXP, b.permute(x, (1, 0))), w)
    g, members, outputs = finish(b, y)
    assert "computed, not a view" in codegen.why_not(g, members, outputs)
    b = Builder()
    x = b.input((8, 16))
    y = b.matmul(x, b.constant(np.ones((16, 4), np.float32)))
    s = b.reduce(Op.SUM, y, (1,))  # a reduction of the product
    g, members, outputs = finish(b, s)
    assert "is not elementwise on its shape" in gemm.why_not(g, g.prims, outputs)
    b = Builder()  # a one-element weight (one channel in and out) is an immediate, not a buffer to read
    y = b.conv(b.input((1, 1, 8, 6)), b.constant(np.ones((1, 1, 1, 1), np.float32)), None, ConvAttrs((2, 2), (0,) * 4, (1, 1), 1))
    g, members, outputs = finish(b, y)
    assert "is a scalar" in gemm.why_not(g, g.prims, outputs)
    b = Builder()
    x = b.input((8, 16), dtype="float64")
    y = b.matmul(x, b.constant(np.ones((16, 4), np.float64)))
    g, members, outputs = finish(b, y)
    assert "not on float32" in gemm.why_not(g, g.prims, outputs)
    kernel = codegen.build_kernel(g, members, outputs)
    assert kernel.provider == "linear"
    check(kernel, g, outputs)


def test_triton_never_takes_a_matmul():
    g, members, outputs = _dense(act=None)
    assert kernel_kind(g, members, outputs, why_not_triton, "Triton") is Kind.LINEAR


def _tile_calls(stmts):
    for s in stmts:
        if isinstance(s, Call) and s.fn.startswith(("kn_gemm_tile", "kn_window_tile")):
            yield s
        yield from _tile_calls(getattr(s, "body", ()))


@pytest.mark.parametrize("name, prefetches", [("exact_tiles", True), ("transposed_weight", True),
                                              ("conv3x3_stride2_stem", False), ("batched_activations", False)])
def test_tiles_prefetch_the_next_panel_of_a_packed_weight(name, prefetches):
    """A constant weight packed in several panels: each unit's first tile prefetches the next
    panel (a non-constant offset); one panel, or B packed per unit: nothing to prefetch (0)."""
    g, members, outputs = CASES[name]()
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    (call,) = set(_tile_calls(spec.body))
    pf = call.args[-1]
    assert (pf != ix.const(0)) == prefetches


def test_a_window_span_past_int32_offsets_copies_every_row_block(monkeypatch):
    """The taps' offsets are int32: a window spanning more elements than that is copied per row
    block, never read in place, and still matches the interpreter."""
    g, members, outputs = CASES["conv7x7_stride2_wide_nchw_stem"]()
    monkeypatch.setattr(gemm_product.Window, "span", lambda self: 2 ** 31)
    notes = "\n".join(codegen.lower(g, members, outputs, num_threads=THREADS).notes)
    assert "windows, copied per row block)" in notes
    check(codegen.build_kernel(g, members, outputs, num_threads=THREADS), g, outputs, rtol=1e-4, atol=1e-4)


def test_window_span_is_the_farthest_tap():
    """Window.span against every tap's offset, counted out."""
    w = gemm_product.Window(channels=3, height=20, width=30, strides=(600, 30, 1), out_width=15, kernel=(5, 3),
                            conv_strides=(2, 2), pads=(1, 1), dilations=(2, 3))
    taps = [c * 600 + kh * 2 * 30 + kw * 3 for c in range(3) for kh in range(5) for kw in range(3)]
    assert w.span() == max(taps)
