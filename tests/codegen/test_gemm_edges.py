"""Edges of the generated GEMM (codegen/gemm.py, gemm_product.py) that its kernel tests do not
reach: every reason it refuses a kernel, word for word; the budget of a computed operand's reads;
views after the product; the product's fields against brute force; all checked against the
reference interpreter where a kernel is built."""

from __future__ import annotations

import numpy as np
import pytest

from cg_util import THREADS, check, finish
from kernorch import codegen
from kernorch.codegen import gemm, gemm_product
from kernorch.codegen.kernel import Call, Loop, Parallel, Store
from kernorch.ir import index as ix, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op

_RNG = np.random.default_rng(0)


def _c(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _conv(x, w, pads=(0, 0, 0, 0), groups=1, strides=(1, 1)):
    return lambda b: b.conv(b.input(x), b.constant(_c(*w)), None, ConvAttrs(strides, pads, (1,) * len(strides), groups))


def _two_coords(b):
    y = b.matmul(b.input((4, 8)), b.constant(_c(8, 4)))
    return b.binary(Op.ADD, y, b.permute(y, (1, 0)))


def _reduce_beside(b):
    x = b.input((4, 8))
    s = b.reduce(Op.SUM, x, (1,))
    return b.binary(Op.ADD, b.matmul(x, b.constant(_c(8, 4))), b.broadcast_to(s, (4, 4)))


REFUSED = {
    "grouped": (_conv((1, 4, 5, 5), (4, 2, 1, 1), groups=2), "convolution %2 is grouped or has no spatial dims"),
    "no spatial dims": (lambda b: b.conv(b.input((1, 4)), b.constant(_c(3, 4)), None, ConvAttrs((), (), (), 1)),
                        "convolution %2 is grouped or has no spatial dims"),
    "1-D window": (lambda b: b.conv(b.input((1, 4, 9)), b.constant(_c(5, 4, 3)), None,
                                    ConvAttrs((1,), (1, 1), (1,), 1)),
                   "convolution %2 is not a 2-D convolution"),
    "computed window weight": (lambda b: b.conv(b.input((1, 4, 6, 6)), b.input((5, 4, 3, 3)), None,
                                                ConvAttrs((1, 1), (1,) * 4, (1, 1), 1)),
                               "the weight of convolution %2 is computed, not a constant"),
    "one-element window weight": (_conv((1, 1, 6, 6), (1, 1, 1, 1), pads=(1,) * 4),
                                  "the weight of convolution %2 is one element"),
    "one-element image": (_conv((1, 1, 1, 1), (4, 1, 3, 3), pads=(1,) * 4), "the image of convolution %2 is a scalar"),
    "strided weight": (lambda b: b.conv(b.input((1, 4, 5, 5)), b.permute(b.constant(_c(4, 6, 1, 1)), (1, 0, 2, 3)),
                                        None, ConvAttrs((1, 1), (0,) * 4, (1, 1), 1)), "weight %2 is not contiguous"),
    "strided rows": (lambda b: b.matmul(b.permute(b.input((8, 6)), (1, 0)), b.constant(_c(8, 4))),
                     "rows of %1 are not contiguous"),
    "strided rows, k = 2": (lambda b: b.matmul(b.permute(b.input((2, 9)), (1, 0)), b.constant(_c(2, 40))),
                            "rows of %1 are not contiguous"),
    # rows K apart but channels 2 apart (an affine view of a flat constant): not a contiguous weight
    "weight channels 2 apart": (lambda b: b.conv(b.input((1, 4, 5, 5)), b.view(b.constant(_c(168)), layout.make(
        (40, 4, 1, 1), (168,), (ix.var(0) * 4 + ix.var(1) * 2 + ix.var(2),))), None, _1X1),
                                "weight %2 is not contiguous"),
    "scalar A": (lambda b: b.matmul(b.input((1, 1)), b.constant(_c(1, 4))), "%0 is a scalar"),
    "merging view after": (lambda b: b.reshape(b.matmul(b.input((2, 3, 8)), b.constant(_c(8, 4))), (6, 4)),
                           "view %3 after matmul %2 is not a permutation"),
    # a reduction over a size-1 axis keeps the shape, but is no elementwise prim
    "reduction after, same shape": (lambda b: b.reduce(Op.SUM, b.matmul(b.input((1, 4, 8)), b.constant(_c(8, 6))),
                                                       (0,)),
                                    "sum after matmul %2 is not elementwise on its shape"),
    "product and its transpose": (_two_coords, "add after matmul %2 is not elementwise on its shape"),
    "reduction beside": (_reduce_beside, "sum cannot share a kernel with a generated GEMM"),
    "float64": (lambda b: b.matmul(b.input((8, 16), dtype="float64"), b.constant(np.ones((16, 4), np.float64))),
                "matmul %2 is not on float32"),
    "transposed convolution": (lambda b: b.conv(b.input((1, 4, 5, 5)), b.constant(_c(4, 6, 3, 3)), None,
                                                ConvAttrs((1, 1), (0,) * 4, (1, 1), 1), transpose=True),
                               "a generated GEMM holds exactly one matmul or convolution and no other linear prim"),
    "two products": (lambda b: b.matmul(b.matmul(b.input((4, 8)), b.constant(_c(8, 8))), b.constant(_c(8, 3))),
                     "a generated GEMM holds exactly one matmul or convolution and no other linear prim"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_why_not_says_what_the_gemm_does_not_take(name):
    make, why = REFUSED[name]
    b = Builder()
    g, members, outputs = finish(b, make(b))
    assert gemm.why_not(g, g.prims, outputs) == why


def test_an_output_not_computed_from_the_product_is_refused():
    b = Builder()
    x = b.input((4, 8))
    g, members, outputs = finish(b, b.matmul(x, b.constant(_c(8, 4))), b.unary(Op.EXP, x))
    assert gemm.why_not(g, g.prims, outputs) == "a generated GEMM writes only the product and values computed from it"


def _kernel(g, members, outputs):
    """The GEMM built, once its spec's stores are checked (each output element once, the per-thread
    arrays in bounds: ``_writes``): a wrong index fails here instead of corrupting memory when the
    kernel runs."""
    for buf, n in _writes(codegen.lower(g, members, outputs, num_threads=THREADS)).items():
        assert (n == 1).all(), (buf, np.flatnonzero(n != 1)[:5], n[n != 1][:5])
    return codegen.build_kernel(g, members, outputs, num_threads=THREADS)


def _chain(n: int):
    """x -> n negations -> @ w: A computed through n elementwise prims."""
    b = Builder()
    a = b.input((5, 8))
    for _ in range(n):
        a = b.unary(Op.NEG, a)
    return finish(b, b.matmul(a, b.constant(_c(8, 6))))


def test_a_computed_operand_is_followed_for_64_reads():
    """A prologue's reads are traced through at most 64 values: a chain of 63 prims and its input
    (64) is a computed A; one more prim, and the GEMM refuses the operand as computed."""
    g, members, outputs = _chain(63)
    prod = gemm_product.product_of(g, g.prims)
    assert isinstance(prod, gemm_product.Product) and prod.a_src is None
    g, members, outputs = _chain(64)
    why = f"{g.name(g.prims[-2].output)} feeding matmul is computed, not a view of an input"
    assert gemm_product.product_of(g, g.prims) == why


def _nhwc_chain(n: int):
    """A 1x1 convolution of a channels-last image computed through n negations."""
    b = Builder()
    x = b.input((1, 3, 4, 8))
    for _ in range(n):
        x = b.unary(Op.NEG, x)
    img = b.permute(x, (0, 3, 1, 2))
    return finish(b, b.conv(img, b.constant(_c(40, 8, 1, 1)), None, ConvAttrs((1, 1), (0,) * 4, (1, 1), 1)))


def test_a_computed_image_is_followed_for_64_reads():
    """The same budget for a convolution's computed image: within it the pixels are A's rows,
    past it the weight is A and the image's pixels B."""
    g, members, outputs = _nhwc_chain(62)  # the permute, 62 negations and the input: 64 reads
    prod = gemm_product.product_of(g, g.prims)
    assert prod.pixel_rows and prod.a_src is None
    g, members, outputs = _nhwc_chain(63)
    prod = gemm_product.product_of(g, g.prims)
    assert not prod.pixel_rows and prod.weight_rows


def _computed(make_a):
    b = Builder()
    return finish(b, b.matmul(make_a(b), b.constant(_c(8, 40))))


COMPUTED = {
    # a one-element A (a scalar times a row) is computed like any other
    "one element": lambda b: b.unary(Op.EXP, b.input((1, 1))),
    # a vector broadcast along k reads each row's one element (stride 0): still a row read contiguously
    "broadcast along k": lambda b: b.binary(Op.ADD, b.broadcast_to(b.input((5, 1)), (5, 8)), b.input((5, 8))),
    # two rows: each row block's rows computed at their own index
    "two rows": lambda b: b.unary(Op.RELU, b.input((2, 8))),
    # two transposes in a row give back the input's rows: the views compose
    "transposed twice": lambda b: b.unary(Op.NEG, b.permute(b.permute(b.input((5, 8)), (1, 0)), (1, 0))),
}


@pytest.mark.parametrize("name", list(COMPUTED))
def test_operands_computed_from_rows_read_contiguously(name):
    make = COMPUTED[name]
    if name == "one element":
        b = Builder()
        g, members, outputs = finish(b, b.matmul(make(b), b.constant(_c(1, 40))))
    else:
        g, members, outputs = _computed(make)
    prod = gemm_product.product_of(g, g.prims)
    assert isinstance(prod, gemm_product.Product) and prod.a_src is None
    kernel = _kernel(g, members, outputs)
    assert "(A computed per row block)" in kernel.spec.notes[0]
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_an_operand_computed_by_a_reduction_is_not_a_prologue():
    g, members, outputs = _computed(lambda b: b.reduce(Op.SUM, b.input((5, 8, 3)), (2,), keepdims=False))
    assert gemm_product.product_of(g, g.prims) == "%1 feeding matmul is computed, not a view of an input"


def _shape_by_hand(g, name: str) -> tuple[int, int, int, int]:
    """(M, K, N, batch) of a kernel test's product, from its prim's shapes and the role the test
    says its operands play (the pixels as A's rows, or the weight)."""
    from test_gemm_kernels import PIXEL_ROWS

    (lin,) = [p for p in g.prims if p.op in (Op.MATMUL, Op.CONV)]
    out = g.types[lin.output].shape
    if lin.op is Op.MATMUL:
        return out[-2], g.types[lin.inputs[0]].shape[-1], out[-1], int(np.prod(out[:-2]))
    w = g.types[lin.inputs[1]].shape
    pixels, taps = int(np.prod(out[2:])), int(np.prod(w[1:]))
    return (pixels, taps, w[0], out[0]) if name in PIXEL_ROWS else (w[0], taps, pixels, out[0])


def test_the_note_states_the_product_counted_by_hand():
    """Every kernel test's GEMM: its note's sizes and batch against the shapes; its threads' units
    (the Parallel loop) cover every batch and panel, and the row chunks split the row blocks."""
    from test_gemm_kernels import CASES, NARROW

    for name, make in CASES.items():
        g, members, outputs = make()
        spec = codegen.lower(g, members, outputs, num_threads=THREADS)
        M, K, N, batch = _shape_by_hand(g, name)
        assert spec.notes[0].startswith(f"GEMM {M}x{K} @ {K}x{N}, batch {batch}: "), (name, spec.notes[0])
        nr = 16 if name in NARROW else 32
        panels = -(-N // nr)
        assert f": {panels} panels of {nr} columns x " in spec.notes[0], (name, spec.notes[0])
        chunks = int(spec.notes[0].split(" row chunks")[0].rsplit(" ", 1)[1])
        blocks = -(-M // (12 if name in NARROW else 6))
        assert 1 <= chunks <= blocks, (name, spec.notes[0])
        (par,) = spec.body
        upan = 1 if "every panel per row block" in spec.notes[0] else panels
        assert par.extent == batch * upan * chunks, (name, par.extent)


_1X1 = ConvAttrs((1, 1), (0,) * 4, (1, 1), 1)
_3X3 = ConvAttrs((1, 1), (1,) * 4, (1, 1), 1)


def _nhwc_view(shape, starts, out):
    """A channels-last image: a slice of an NHWC input, as NCHW."""
    def make(b):
        x = b.input(shape)
        if tuple(out) != tuple(shape):
            x = b.view(x, layout.slice_(shape, starts, (1,) * 4, out))
        return b.permute(x, (0, 3, 1, 2))
    return make


def _conv_of(image, cout, cin, k=1):
    def make(b):
        return b.conv(image(b), b.constant(_c(cout, cin, k, k)), None, _1X1 if k == 1 else _3X3)
    return make


# convolutions whose image is an unusual view, the role the GEMM gives their operands (in its note),
# all checked against the interpreter
ROLES = {
    # one element: an immediate, never A's rows (the weight is)
    "one-element image": (_conv_of(lambda b: b.input((1, 1, 1, 1)), 40, 1), "(1x1 convolution: A is the weight)"),
    # channels-last, a slice along W: the pixels are no single run, so the rows are computed per block
    "slice along W": (_conv_of(_nhwc_view((1, 5, 9, 8), (0, 0, 2, 0), (1, 5, 4, 8)), 40, 8),
                      "(1x1 convolution: A's rows are the pixels, computed per row block)"),
    # part of one row of a channels-last image (H = 1): its pixels are one run, read in place
    "part of one row": (_conv_of(_nhwc_view((1, 5, 9, 8), (0, 2, 3, 0), (1, 1, 4, 8)), 40, 8),
                "(1x1 convolution: A's rows are the pixels)"),
    # two columns: rows and columns both size > 1 matter
    "two columns": (_conv_of(_nhwc_view((1, 3, 2, 8), (0,) * 4, (1, 3, 2, 8)), 40, 8),
                    "(1x1 convolution: A's rows are the pixels)"),
    # a slice of the channels: rows one W stride (12) apart, 8 floats each
    "channel slice": (_conv_of(_nhwc_view((1, 3, 5, 12), (0,) * 4, (1, 3, 5, 8)), 40, 8),
                      "(1x1 convolution: A's rows are the pixels)"),
    # NCHW of one row, of one channel, of two channels: only one channel may be read as rows
    "NCHW one row": (_conv_of(lambda b: b.input((1, 8, 1, 9)), 40, 8), "(1x1 convolution: A is the weight)"),
    "NCHW one channel": (_conv_of(lambda b: b.input((1, 1, 4, 9)), 40, 1),
                         "(1x1 convolution: A's rows are the pixels)"),
    "NCHW two channels": (_conv_of(lambda b: b.input((1, 2, 4, 9)), 40, 2), "(1x1 convolution: A is the weight)"),
    # three spatial dims (a 1x1 3-D convolution): the pixels' flat index unflattened over all three
    "NCDHW": (lambda b: b.conv(b.input((1, 8, 3, 4, 5)), b.constant(_c(40, 8, 1, 1, 1)), None,
                               ConvAttrs((1, 1, 1), (0,) * 6, (1, 1, 1), 1)), "(1x1 convolution: A is the weight)"),
    # windows: one channel (grayscale) read in place by dot products; NCHW of one row, of two channels
    "grayscale 3x3 to RGB": (_conv_of(lambda b: b.input((1, 1, 9, 11)), 3, 1, 3), "3x3 windows, read in place)"),
    "NCHW one row 3x3": (_conv_of(lambda b: b.input((1, 4, 1, 9)), 40, 4, 3), f"3x3 windows, {gemm.WINDOWS_READ})"),
    # a 3x1 kernel without pads: a window along h only, no 1x1
    "3x1 kernel": (lambda b: b.conv(b.input((1, 4, 7, 9)), b.constant(_c(40, 4, 3, 1)), None, _1X1),
                   f"3x1 windows, {gemm.WINDOWS_READ})"),
    "NCHW two channels 3x3": (_conv_of(lambda b: b.input((1, 2, 5, 9)), 40, 2, 3),
                              f"3x3 windows, {gemm.WINDOWS_READ})"),
}


@pytest.mark.parametrize("name", list(ROLES))
def test_images_read_as_views(name):
    make, role = ROLES[name]
    b = Builder()
    g, members, outputs = finish(b, make(b))
    assert codegen.why_not(g, members, outputs) is None
    kernel = _kernel(g, members, outputs)
    assert kernel.spec.notes[0].endswith(role), kernel.spec.notes[0]
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_a_window_of_a_computed_image_is_refused_by_name():
    b = Builder()
    g, members, outputs = finish(b, _conv_of(lambda b: b.unary(Op.RELU, b.input((1, 4, 6, 6))), 40, 4, 3)(b))
    assert gemm_product.product_of(g, g.prims) == "%1 feeding conv is computed, not a view of an input"


def _after(view):
    """y = x @ w (1, 4, 6), then ``view`` of it."""
    b = Builder()
    y = b.matmul(b.input((1, 4, 8)), b.constant(_c(8, 6)))
    return b, view(b, y)


VIEWS_AFTER = {  # views after the product: those that only permute, add or drop size-1 dims are stored
    "squeeze": (lambda b, y: b.reshape(y, (4, 6)), None),
    "unsqueeze": (lambda b, y: b.view(y, layout.make((1, 4, 1, 6), (1, 4, 6), (ix.const(0), ix.var(1), ix.var(3)))),
                  None),
    "transpose": (lambda b, y: b.permute(y, (0, 2, 1)), None),
    "slice": (lambda b, y: b.view(y, layout.slice_((1, 4, 6), (0, 0, 1), (1, 1, 1), (1, 4, 3))),
              "view %3 after matmul %2 is not a permutation"),
    "slice from 0": (lambda b, y: b.view(y, layout.slice_((1, 4, 6), (0, 0, 0), (1, 1, 1), (1, 4, 3))),
                     "view %3 after matmul %2 is not a permutation"),
    "one row": (lambda b, y: b.view(y, layout.make((1, 6), (1, 4, 6), (ix.const(0), ix.const(2), ix.var(1)))),
                "view %3 after matmul %2 is not a permutation"),
}


@pytest.mark.parametrize("name", list(VIEWS_AFTER))
def test_views_after_the_product(name):
    view, why = VIEWS_AFTER[name]
    b, y = _after(view)
    g, members, outputs = finish(b, b.unary(Op.RELU, y))
    assert gemm.why_not(g, g.prims, outputs) == why
    if why is None:
        check(_kernel(g, members, outputs), g, outputs, rtol=1e-4, atol=1e-4)


def test_window_span_with_strided_taps():
    """Window.span when a tap is several elements from the next (channels-last: ws = channels)."""
    w = gemm_product.Window(channels=3, height=20, width=30, strides=(1, 90, 3), out_width=15, kernel=(2, 4),
                            conv_strides=(1, 1), pads=(0, 0), dilations=(3, 2))
    taps = [c + kh * 3 * 90 + kw * 2 * 3 for c in range(3) for kh in range(2) for kw in range(4)]
    assert w.span() == max(taps)


def _note_numbers(note: str) -> tuple[int, int, int]:
    """(K, panels, row chunks) from a GEMM note."""
    k = int(note.split(" @ ")[1].split("x")[0])
    panels = int(note.split(": ")[1].split(" panels")[0])
    chunks = int(note.split(" row chunks")[0].rsplit(" ", 1)[1])
    return k, panels, chunks


@pytest.mark.parametrize("name", ["exact_tiles", "transposed_weight", "long_k", "bias_tanh"])
def test_each_unit_prefetches_the_next_panel_in_its_first_block_only(name):
    """The tile's prefetch distance, evaluated for every unit and each of its row blocks: one panel
    (K x 32 floats) while a next panel exists and the block is the unit's first, else 0."""
    from test_gemm_kernels import CASES

    g, members, outputs = CASES[name]()
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    K, panels, chunks = _note_numbers(spec.notes[0])
    assert panels > 1 and "every panel per row block" not in spec.notes[0]
    (par,) = spec.body
    (blocks,) = [s for s in par.body if isinstance(s, Loop)]
    (tile,) = [s for s in blocks.body if isinstance(s, Call) and s.fn == "kn_gemm_tile"]
    env = [0] * len(spec.sizes)
    for u in range(par.extent):
        for block in range(spec.sizes[blocks.var]):  # the row blocks a unit may have
            env[par.var], env[blocks.var] = u, block
            nxt = (u // chunks) % panels < panels - 1
            assert ix.evaluate(tile.args[-1], env) == (K * gemm.NR if nxt and block == 0 else 0), (u, block)


def _broadcast_batch(a_shape, b_shape):
    b = Builder()
    return finish(b, b.unary(Op.RELU, b.matmul(b.input(a_shape), b.input(b_shape))))


BATCHED = {  # a size-1 batch dim of either operand is read at 0 for every batch of the product
    "B broadcast over the outer batch": ((2, 3, 7, 9), (1, 3, 9, 40)),
    "A broadcast over the inner batch": ((2, 1, 7, 9), (2, 3, 9, 40)),
    "A of one batch, B of two": ((1, 7, 9), (2, 9, 40)),
    "three batch dims": ((2, 3, 2, 5, 8), (2, 3, 2, 8, 40)),
}
IMAGES = {  # two images of one channel: the window's or the pixels' batch stride
    "two computed one-channel images 1x1": lambda b: b.conv(
        b.permute(b.unary(Op.RELU, b.input((2, 4, 9, 1))), (0, 3, 1, 2)), b.constant(_c(40, 1, 1, 1)), None, _1X1),
    "two grayscale images 3x3": lambda b: b.conv(b.input((2, 1, 7, 9)), b.constant(_c(40, 1, 3, 3)), None, _3X3),
    "two grayscale images 1x1": lambda b: b.conv(b.input((2, 1, 4, 9)), b.constant(_c(40, 1, 1, 1)), None, _1X1),
}


@pytest.mark.parametrize("name", list(BATCHED) + list(IMAGES))
def test_batches_broadcast_and_images_of_one_channel(name):
    if name in BATCHED:
        g, members, outputs = _broadcast_batch(*BATCHED[name])
    else:
        b = Builder()
        g, members, outputs = finish(b, IMAGES[name](b))
    assert codegen.why_not(g, members, outputs) is None
    kernel = _kernel(g, members, outputs)
    assert "GEMM" in kernel.spec.notes[0] and kernel.provider == "c"
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def _mm(a, w):
    """x (a) @ w(b): ``w`` builds B."""
    b = Builder()
    return finish(b, b.matmul(b.input(a), w(b)))


# B operands a constant weight does not cover: packed per unit (no copy packed once), read in bounds
OPERANDS = {
    "B padded (a masked view)": (lambda: _mm((5, 8), lambda b: b.view(b.input((6, 40)),
                                                                       layout.pad((6, 40), (1, 0), (1, 0)))), False),
    "B a slice of a constant (an offset)": (lambda: _mm((5, 8), lambda b: b.view(
        b.constant(_c(12, 40)), layout.slice_((12, 40), (2, 0), (1, 1), (8, 40)))), False),
    "B every second column of a constant": (lambda: _mm((5, 8), lambda b: b.view(
        b.constant(_c(8, 80)), layout.slice_((8, 80), (0, 0), (1, 2), (8, 40)))), False),
    "B a 2-D constant with a batch dim": (lambda: _mm((1, 5, 8), lambda b: b.reshape(b.constant(_c(8, 40)),
                                                                                     (1, 8, 40))), False),
    "B a 3-D constant reshaped": (lambda: _mm((5, 8), lambda b: b.reshape(b.constant(_c(2, 4, 40)), (8, 40))), False),
    "one row, B computed": (lambda: _mm((1, 9), lambda b: b.unary(Op.RELU, b.input((9, 40)))), False),
    "B a square constant, transposed": (lambda: _mm((5, 40), lambda b: b.permute(b.constant(_c(40, 40)), (1, 0))),
                                        True),
    "A computed, batched": (lambda: (lambda b: finish(b, b.matmul(b.unary(Op.RELU, b.input((2, 7, 9))),
                                                                  b.constant(_c(9, 40)))))(Builder()), True),
    "pixels' weight computed": (lambda: (lambda b: finish(b, b.conv(b.permute(b.input((1, 3, 5, 8)), (0, 3, 1, 2)),
                                                                    b.input((40, 8, 1, 1)), None, _1X1)))(Builder()),
                                False),
}


@pytest.mark.parametrize("name", list(OPERANDS))
def test_operands_packed_per_unit_or_once(name):
    make, once = OPERANDS[name]
    g, members, outputs = make()
    kernel = _kernel(g, members, outputs)
    notes = "\n".join(kernel.spec.notes)
    assert "GEMM" in notes and ("in panels of 32 columns" in notes) == once, notes
    if name.startswith("B padded"):  # the select loads the pad's branch too: clamped into the input
        loads = [ln for ln in kernel.source.splitlines() if "= in" in ln and "[" in ln]
        assert loads and all("kn_min" in ln for ln in loads), loads
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_few_channels_dilated_along_w_copy_their_windows():
    """Dot products read a channels-last image in place only where a kernel row is one run: a
    dilation along w breaks the run, so the windows are copied."""
    b = Builder()
    x = b.permute(b.input((1, 9, 11, 4)), (0, 3, 1, 2))
    dilated = ConvAttrs((1, 1), (1, 2, 1, 2), (1, 2), 1)
    g, members, outputs = finish(b, b.conv(x, b.constant(_c(3, 4, 3, 3)), None, dilated))
    kernel = _kernel(g, members, outputs)
    assert kernel.spec.notes[0].endswith("3x3 windows, copied per row block)"), kernel.spec.notes[0]
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def _lowered(m, k, n, options=None):
    b = Builder()
    g, members, outputs = finish(b, b.matmul(b.input((m, k)), b.constant(_c(k, n))))
    return codegen.lower(g, members, outputs, num_threads=THREADS, **({"options": options} if options else {}))


@pytest.mark.parametrize("m, k, n, options, rows_first", [
    (60, 32, 64, None, True), (60, 33, 64, None, False),  # short along k: k <= gemm_short_k (32)
    (192, 64, 64, None, True), (186, 64, 64, None, False),  # a small weight: at least 16 row blocks per thread
    (192, 1024, 64, None, True), (192, 1025, 64, None, False),  # ... up to gemm_rows_first_bytes (256 KiB) packed
    (12, 4096, 64, "long", True), (12, 4097, 64, "long", False),  # every panel per row block up to 1 MiB packed
    (6, 16, 64, None, False),  # one row block: nothing to split by rows
])
def test_rows_first_at_its_boundaries(m, k, n, options, rows_first):
    import dataclasses

    from kernorch.options import DEFAULT_CODEGEN

    opts = dataclasses.replace(DEFAULT_CODEGEN, gemm_short_k=1 << 30) if options == "long" else None
    note = _lowered(m, k, n, opts).notes[0]
    assert ("every panel per row block" in note) == rows_first, note


def test_a_narrow_product_of_two_rows_uses_the_narrow_tile():
    assert "tiles of 12 rows" in _lowered(2, 40, 16).notes[0]
    assert "one row: a dot product per column" not in _lowered(2, 40, 16).notes[0]


def _writes(spec) -> dict[str, np.ndarray]:
    """How often each element of each kernel output is stored, counted by walking the spec's loops
    with their bounds evaluated (the innermost loop's iterations at once, as arrays); a store
    outside its output fails here, before any kernel runs."""
    counts = {a.name: np.zeros(a.size, np.int64) for a in spec.args if a.role == "out"}
    # the per-thread arrays (the packed panel, a row block of A, the tile, the staging tile): in bounds
    arrays = {d.name: d.count for p in spec.body if isinstance(p, Parallel) for d in p.arrays}
    env: list = [0] * len(spec.sizes)

    def stores(stmts) -> bool:
        return any(isinstance(s, Store) and (s.buf in counts or s.buf in arrays) or stores(getattr(s, "body", ()) or ())
                   for s in stmts)

    def walk(stmts) -> None:
        for s in stmts:
            if isinstance(s, Store) and s.buf in counts:
                off = np.broadcast_to(np.asarray(ix.evaluate(s.offset, env), np.int64), np.shape(env[inner[-1]]) if
                                      inner else ())
                assert ((0 <= off) & (off < counts[s.buf].size)).all(), f"a store to {s.buf} leaves it: {s.offset}"
                np.add.at(counts[s.buf], off.reshape(-1), 1)
            elif isinstance(s, Store) and s.buf in arrays:
                off = np.asarray(ix.evaluate(s.offset, env), np.int64)
                assert ((0 <= off) & (off < arrays[s.buf])).all(), f"a store to {s.buf} leaves it: {s.offset}"
            elif isinstance(s, (Loop, Parallel)) and stores(s.body):
                lo, hi = (0, s.extent) if isinstance(s, Parallel) else (ix.evaluate(s.lo, env), ix.evaluate(s.hi, env))
                if isinstance(s, Loop) and not any(isinstance(t, Loop) for t in s.body):  # innermost: vectorized
                    env[s.var] = np.arange(int(lo), int(hi))
                    inner.append(s.var)
                    walk(s.body)
                    inner.pop()
                else:
                    for v in range(int(lo), int(hi)):
                        env[s.var] = v
                        walk(s.body)

    inner: list[int] = []
    walk(spec.body)
    return counts


def test_every_output_element_is_stored_exactly_once():
    """Every kernel test's GEMM, lowered only: its loops store each element of each output once,
    never twice (a double store is invisible in the values) and never outside the output; its
    per-thread arrays (panel, rows of A, tile) are stored inside them too."""
    from test_gemm_kernels import CASES

    for name, make in CASES.items():
        g, members, outputs = make()
        spec = codegen.lower(g, members, outputs, num_threads=THREADS)
        for buf, n in _writes(spec).items():
            assert (n == 1).all(), (name, buf, np.flatnonzero(n != 1)[:5], n[n != 1][:5])


def test_a_product_along_one_k_reads_a_transposed_row():
    """k = 1: A's column stride does not matter (a transposed row vector is A)."""
    b = Builder()
    g, members, outputs = finish(b, b.matmul(b.permute(b.input((1, 9)), (1, 0)), b.constant(_c(1, 40))))
    assert gemm.why_not(g, g.prims, outputs) is None
    kernel = _kernel(g, members, outputs)
    assert kernel.spec.notes[0].startswith("GEMM 9x1 @ 1x40")
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_rows_of_a_and_the_panel_are_filled_by_vector_loops():
    """The loops that compute a row block of A into ``ap`` or pack B's panel into ``bp`` run
    along contiguous memory: each innermost one is marked simd (vectorized)."""
    from test_gemm_kernels import CASES

    def innermost(stmts):
        for s in stmts:
            if isinstance(s, Loop) and not any(isinstance(t, Loop) for t in s.body):
                yield s
            yield from innermost(getattr(s, "body", ()) or ())

    seen = set()
    graphs = [CASES[name]() for name in ("matmul_computed_a", "conv1x1_channels_last_computed_image",
                                         "batched_activations", "conv1x1_prologue")]
    for name, (g, members, outputs) in zip(("computed A", "computed image", "batched", "prologue", "computed weight"),
                                           graphs + [OPERANDS["pixels' weight computed"][0]()]):
        for lp in innermost(codegen.lower(g, members, outputs, num_threads=THREADS).body):
            bufs = {t.buf for t in lp.body if isinstance(t, Store)} & {"ap", "bp"}
            if bufs:
                seen |= bufs
                assert lp.simd is True, (name, bufs)
    assert seen == {"ap", "bp"}


@pytest.mark.parametrize("name, options", [("exact_tiles", "prefetch off"), ("conv1x1_channels_last_many_rows", None),
                                           ("conv3x3_channels_last", None), ("narrow_dense", None)])
def test_no_prefetch_when_switched_off_every_panel_per_block_or_one_panel(name, options):
    """Tiles prefetch nothing (0 for every unit and block) with gemm_prefetch off, when each row
    block runs every panel (the panels stay in cache), or with one panel only."""
    import dataclasses

    from kernorch.options import DEFAULT_CODEGEN
    from test_gemm_kernels import CASES

    g, members, outputs = CASES[name]()
    opts = dataclasses.replace(DEFAULT_CODEGEN, gemm_prefetch=False) if options else DEFAULT_CODEGEN
    spec = codegen.lower(g, members, outputs, num_threads=THREADS, options=opts)
    assert options or "every panel per row block" in spec.notes[0] or " 1 panels of" in spec.notes[0]
    (par,) = spec.body
    (tile,) = set(_tile_calls(spec.body))
    assert tile.args[-1] == ix.const(0), tile.args[-1]


def _tile_calls(stmts):
    for s in stmts:
        if isinstance(s, Call) and s.fn.startswith(("kn_gemm_tile", "kn_window_tile")):
            yield s
        yield from _tile_calls(getattr(s, "body", ()) or ())


def _nchw_conv(h, w, two_outputs=False):
    b = Builder()
    y = b.conv(b.input((1, 4, h, w)), b.constant(_c(20, 4, 3, 3)), None, _3X3)
    return finish(b, y, b.unary(Op.RELU, y)) if two_outputs else finish(b, y)


@pytest.mark.parametrize("h, w, two, staged", [(32, 16, False, True),  # channels 2 KiB apart: staged
                                               (16, 16, False, False),  # 1 KiB apart: stored row by row
                                               (32, 16, True, False)])  # two outputs: never staged
def test_an_nchw_output_is_staged_only_at_2_kib_strides_and_alone(h, w, two, staged):
    g, members, outputs = _nchw_conv(h, w, two)
    kernel = _kernel(g, members, outputs)
    assert ("staging tile" in kernel.spec.notes[0]) == staged, kernel.spec.notes[0]
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("keys", [(3, 40, 64), (1, 40, 64)], ids=["B per batch", "B broadcast"])
def test_one_row_per_batch_is_a_dot_product_per_column(keys):
    """A decoding step's attention scores: per head (a batch), one query row times that head's
    keys transposed (B contiguous along k). The one-row path must read each batch's own keys (or
    batch 0's, broadcast)."""
    b = Builder()
    k_t = b.permute(b.input(keys), (0, 2, 1))
    g, members, outputs = finish(b, b.matmul(b.input((3, 1, 64)), k_t))
    kernel = _kernel(g, members, outputs)
    assert "one row: a dot product per column" in kernel.spec.notes[0], kernel.spec.notes
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_the_units_run_on_the_thread_pool():
    """Every GEMM splits its output into units shared by the kernel's threads: one OpenMP parallel
    region, sized by the caller's thread count."""
    g, members, outputs = _mm((64, 64), lambda b: b.constant(_c(64, 96)))
    kernel = _kernel(g, members, outputs)
    assert kernel.source.count("#pragma omp parallel num_threads(nthreads)") == 1, kernel.source
    # what the fuzzer and the plan page count: 64 rows are not whole 6-row tiles, 96 columns are
    # whole panels; one batch, float32 (no AMX tiles), no staging
    assert set(kernel.spec.traits) == {"A in place", "row remainder"}, kernel.spec.traits
    check(kernel, g, outputs, rtol=1e-4, atol=1e-4)
