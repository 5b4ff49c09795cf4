"""Edges of the Winograd F(6,3) template (codegen/winograd.py), by lowering alone (no compiler):
every refusal word for word, at its bounds (12 output columns and 17 output channels are taken,
one fewer is not); the spec it writes (name and key, the transformed weight's pack, the threaded
block loop whose blocks cover each image's tiles, the panels that cover the output channels, the
per-thread scratch sizes, the vectorized epilogue, the note, the variants it took); and the C text of
its helpers, whose input and output transforms evaluate to BT @ d and AT @ m."""

import re

import numpy as np
import pytest

from cg_util import THREADS, finish
from kernorch import codegen
from kernorch.codegen import gemm, winograd
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.gemm_helpers import NR
from kernorch.codegen.kernel import Loop, Parallel
from kernorch.codegen.winograd_transform import AT, BT, POINTS, TILE
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions


def _conv(n=1, h=5, w=30, cin=24, cout=40, kernel=(3, 3), strides=(1, 1), dil=(1, 1), pads=(1, 1, 1, 1),
          image=None, nchw_out=False, after=None, both=False):
    """conv(x) between channels-last tensors; ``image``: how x is read (default: a permuted input),
    ``after``: a prim applied to the channels-last output."""
    rng = np.random.default_rng(2)
    b = Builder()
    x = image(b) if image else b.permute(b.input((n, h, w, cin)), (0, 3, 1, 2))
    wt = b.constant(rng.standard_normal((cout, cin, *kernel)).astype(np.float32))
    y = b.conv(x, wt, None, ConvAttrs(strides, pads, dil, 1))
    if nchw_out:
        return finish(b, y)
    y = b.permute(y, (0, 2, 3, 1))
    if both:  # the convolution's output and its activation, the activation first
        return finish(b, b.unary(Op.SIGMOID, y), y)
    return finish(b, after(b, y) if after else y)


def _why(case, options=CodegenOptions()):
    g, members, outputs = case
    return winograd.why_not(g, kernel_prims(g, members), outputs, options)


def _sliced_channels(b):
    """The first 24 of 48 channels of a channels-last input: channels-last, but 48 floats apart."""
    x = b.input((1, 5, 30, 48))
    return b.permute(b.view(x, layout.slice_((1, 5, 30, 48), (0,) * 4, (1,) * 4, (1, 5, 30, 24))), (0, 3, 1, 2))


def test_refusals_word_for_word():
    assert _why(_conv(), CodegenOptions(winograd=False)) == "Winograd convolutions are switched off"
    for case in (_conv(kernel=(5, 5), pads=(2, 2, 2, 2)), _conv(strides=(2, 2)),
                 _conv(kernel=(3, 1), pads=(1, 0, 1, 0))):
        assert _why(case) == "not one 3x3 convolution with unit strides"
    dilated = "not a 3x3 convolution with unit strides and dilations, no groups"
    assert _why(_conv(dil=(2, 2), pads=(2, 2, 2, 2))) == dilated
    assert _why(_conv(dil=(1, 2), pads=(1, 2, 1, 2))) == dilated
    in_place = "the image is not read in place, channels-last"
    assert _why(_conv(image=lambda b: b.input((1, 24, 5, 30)))) == in_place  # NCHW: channels outermost
    assert _why(_conv(image=_sliced_channels)) == in_place
    few = f"fewer than {winograd.MIN_WIDTH} output columns or {winograd.MIN_CHANNELS} output channels"
    assert (winograd.MIN_WIDTH, winograd.MIN_CHANNELS) == (12, 17)
    assert _why(_conv(w=12)) is None and _why(_conv(cout=17)) is None
    assert _why(_conv(w=11)) == few and _why(_conv(cout=16)) == few


def test_a_gemm_refusal_is_winograds_reason():
    """A sum after the convolution: gemm.py does not take the kernel, so Winograd says why in its words."""
    case = _conv(after=lambda b, y: b.reduce(Op.SUM, y, [3]))
    g, members, outputs = case
    reason = gemm.why_not(g, kernel_prims(g, members), outputs)
    assert reason and _why(case) == reason


# name -> (kernel, the variants it takes)
SPECS = {
    "one_image": (lambda: _conv(after=lambda b, y: b.unary(Op.RELU, y)), ("column remainder", "epilogue")),
    "tail_tiles_two_images": (lambda: _conv(n=2, h=3, w=13, cout=64), ("batched", "epilogue", "partial row tiles")),
    "whole_panels_whole_tiles": (lambda: _conv(h=2, w=24, cout=64), ("epilogue",)),
    "output_nchw": (lambda: _conv(h=4, w=18, cout=33, nchw_out=True), ("column remainder", "epilogue")),
    "two_outputs_last_first": (lambda: _conv(h=2, w=20, cin=5, cout=17, both=True),
                               ("column remainder", "epilogue", "partial row tiles")),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_the_spec(name):
    make, traits = SPECS[name]
    g, members, outputs = make()
    spec = codegen.lower(g, members, outputs, num_threads=THREADS)
    assert spec.template == "winograd" and spec.traits == traits
    assert spec.key == g.kernel_key(members, outputs) and spec.name == f"kn_{spec.key[:16]}"
    assert codegen.lower(g, members, outputs, name="kn_wino", num_threads=THREADS).name == "kn_wino"
    conv = next(p for p in g.prims if p.op is Op.CONV)
    assert spec.workspace == 0 and spec.comment
    assert spec.packs == ((spec.inputs.index(conv.inputs[1]), (0, 1, 2, 3), NR, "winograd63"),)
    (par,) = spec.body
    assert isinstance(par, Parallel) and par.threads is True
    fill, panels = par.body
    tile, epilogue = panels.body
    assert (fill.fn, tile.fn) == ("kn_wino_in", "kn_wino_tile")
    (columns,) = epilogue.body
    assert isinstance(columns, Loop) and columns.simd is True and not epilogue.simd
    k3 = 3 * g.types[conv.inputs[0]].shape[1]
    assert [(d.name, d.dtype, d.count) for d in par.arrays] == [  # per-thread scratch, sized for a whole block
        ("wv", "float32", POINTS * winograd.TILES * k3), ("wz", "float32", k3 // 3),
        ("wm", "float32", POINTS * winograd.TILES * NR), ("tl", "float32", winograd.BLOCK * NR)]
    n, _, oh, ow = g.types[conv.output].shape
    _blocks_cover_the_tiles(spec, par, fill, epilogue, n, oh, ow)
    _panels_cover_the_channels(spec, panels, columns, g.types[conv.output].shape[1])
    x, w = g.types[conv.inputs[0]].shape, g.types[conv.inputs[1]].shape
    assert spec.notes[0] == (
        f"Winograd F(6,3) 3x3 convolution {x[1]}->{w[0]} channels, {oh}x{ow} output: blocks of 6 tiles of "
        f"6 pixels of a row, 8 products of 6x{3 * x[1]} @ {3 * x[1]}x{NR} per block and panel of {NR} channels "
        "(the image read channels-last in place)")


def _blocks_cover_the_tiles(spec, par, fill, epilogue, n, oh, ow):
    """Each image's tiles (ceil(ow / 6) a row) in blocks of 6, the last block shorter: every unit's
    first tile and count, and its epilogue's rows (the pixels from its first tile to its end)."""
    per_row = -(-ow // TILE)
    tiles = oh * per_row
    blocks = -(-tiles // winograd.TILES)
    assert par.extent == n * blocks
    pixel = lambda t: t // per_row * ow + t % per_row * TILE  # noqa: E731
    for u in range(par.extent):
        env = [0] * len(spec.sizes)
        env[par.var] = u
        count, first = (ix.evaluate(e, env) for e in fill.args[:2])
        want_first = u % blocks * winograd.TILES
        assert (first, count) == (want_first, min(winograd.TILES, tiles - want_first))
        assert ix.evaluate(epilogue.hi, env) == pixel(first + count) - pixel(first)


def _panels_cover_the_channels(spec, panels, columns, n_out):
    """Panels of NR output channels, the last one shorter: the epilogue's columns in each."""
    npan = -(-n_out // NR)
    assert (ix.evaluate(panels.lo, []), ix.evaluate(panels.hi, [])) == (0, npan)
    for panel in range(npan):
        env = [0] * len(spec.sizes)
        env[panels.var] = panel
        assert ix.evaluate(columns.hi, env) == min(NR, n_out - panel * NR)


def _evaluate(c_expr: str, values: dict[str, float]) -> float:
    """A C expression of float literals ("2.5f"), names, +, - and * evaluated in float64."""
    assert re.fullmatch(r"-?([0-9.]+f \* )?[a-z][0-9]*( [-+] ([0-9.]+f \* )?[a-z][0-9]*)*", c_expr), c_expr
    return eval(re.sub(r"(\d)f\b", r"\1", c_expr), {}, dict(values))


def test_combination_is_the_row_product_in_c():
    names = ["a", "b", "c", "d", "e"]
    assert winograd._combination(np.array([1.0, 0.0, -2.5, -1.0, 0.0]), names) == "a - 2.5f * c - d"
    assert winograd._combination(np.array([0.0, -1.0, 4.0, 0.0, 1.0]), names) == "-b + 4.0f * c + e"
    assert winograd._combination(np.array([-0.5, 0.0, 0.0, 0.0, 1.0]), names) == "-0.5f * a + e"
    assert winograd._combination(np.array([0.0, 0.0, 0.0, 2.0, 0.0]), names) == "2.0f * d"
    rng = np.random.default_rng(0)
    for matrix in (BT, AT):
        cols = [f"v{j}" for j in range(matrix.shape[1])]
        for _ in range(3):
            vals = rng.standard_normal(matrix.shape[1])
            for row in matrix:
                got = _evaluate(winograd._combination(row, cols), dict(zip(cols, vals)))
                assert got == pytest.approx(float(row @ vals), rel=1e-12, abs=1e-12)


def test_helpers_transform_as_bt_and_at():
    text = winograd._helpers()
    lines = text.split("\n")
    ins = [re.fullmatch(rf"        o\[(\d) \* {winograd.TILES} \* K3 \+ c\] = (.*);", ln) for ln in lines]
    outs = [re.fullmatch(rf"      out\[(\d) \* {NR} \+ n\] = (.*);", ln) for ln in lines]
    ins, outs = [m for m in ins if m], [m for m in outs if m]
    assert [int(m[1]) for m in ins] == list(range(POINTS)) and [int(m[1]) for m in outs] == list(range(TILE))
    rng = np.random.default_rng(1)
    d, m = rng.standard_normal(POINTS), rng.standard_normal(POINTS)
    for t, match in enumerate(ins):
        assert _evaluate(match[2], {f"d{j}": d[j] for j in range(POINTS)}) == pytest.approx(BT[t] @ d, rel=1e-12)
    for p, match in enumerate(outs):
        assert _evaluate(match[2], {f"m{j}": m[j] for j in range(POINTS)}) == pytest.approx(AT[p] @ m, rel=1e-12)
    loads_in = " ".join(f"const float d{j} = p[{j}][c];" for j in range(POINTS))
    loads_out = " ".join(f"const float m{t} = m[({t} * {winograd.TILES} + i) * {NR} + n];" for t in range(POINTS))
    assert f"\n        {loads_in}\n" in text and f"\n      {loads_out}\n" in text
    assert text.count("static void kn_wino_in(") == 1 and text.count("static void kn_wino_tile(") == 1
