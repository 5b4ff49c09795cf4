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
    "1-D window": (lambda b: b.conv(b.input((1, 4, 9)), b.constant(_c(5, 4, 3)), None, ConvAttrs((1,), (1, 1), (1,), 1)),
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
    "scalar A": (lambda b: b.matmul(b.input((1, 1)), b.constant(_c(1, 4))), "%0 is a scalar"),
    "merging view after": (lambda b: b.reshape(b.matmul(b.input((2, 3, 8)), b.constant(_c(8, 4))), (6, 4)),
                           "view %3 after matmul %2 is not a permutation"),
    "product and its transpose": (_two_coords, "add after matmul %2 is not elementwise on its shape"),
    "reduction beside": (_reduce_beside, "sum cannot share a kernel with a generated GEMM"),
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
    assert gemm_product.product_of(g, g.prims) == f"{g.name(g.prims[-2].output)} feeding matmul is computed, not a view of an input"


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
    kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
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
