"""Resize and Upsample against onnxruntime: every coordinate mode with nearest (each rounding
mode), linear and cubic, integer and non-integer scales, sizes, axes, and opsets 10 to 19.
Nearest must stay a pure view; integer scales give affine index maps (no tables)."""

import numpy as np
import pytest

from onnx_oracle import check, node_model, run_kernorch, run_reference
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir.prims import Op

RNG = np.random.default_rng(15)
X = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
COORDS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# Against onnxruntime: dyadic scales with integral scale * length. onnxruntime computes source
# coordinates in float32 and align_corners from the integer output length; the ONNX definition
# (and its reference, which the conformance data come from) uses float64 and scale * length. Both
# agree on these scales; the inexact ones are checked against the ONNX reference below.
SCALES = [(2.0, 2.0), (0.5, 0.5), (1.5, 2.5), (0.75, 1.5), (3.0, 1.0), (2.0, 0.5)]
INEXACT = [(1.7, 2.3), (0.6, 1.4), (0.8, 0.3)]


def f32(*v):
    return np.array(v, dtype=np.float32)


def resize_inputs(scales=None, sizes=None, roi=None):
    ins = {"x": X, "roi": roi, "scales": None, "sizes": None}
    if scales is not None:
        ins["scales"] = f32(1, 1, *scales)
    if sizes is not None:
        ins["sizes"] = np.array([1, 2, *sizes], dtype=np.int64)
    return ins


@pytest.mark.parametrize("scales", SCALES, ids=str)
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_resize_nearest(scales, coord, nearest_mode):
    ins = resize_inputs(scales=scales)
    attrs = dict(mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest_mode)
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=13, **attrs)
    g, _ = import_onnx(node_model("Resize", ins, consts=["roi", "scales", "sizes"], opset=13, **attrs))
    assert {p.op for p in g.prims} == {Op.VIEW}


@pytest.mark.parametrize("scales", SCALES, ids=str)
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_interpolating(scales, coord, mode):
    ins = resize_inputs(scales=scales)
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=13, mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize("scales", INEXACT, ids=str)
@pytest.mark.parametrize("coord", COORDS + ["half_pixel_symmetric"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_matches_onnx_definition(scales, coord, mode):
    """Inexact scales and half_pixel_symmetric (which onnxruntime lacks) against the ONNX reference."""
    ins = resize_inputs(scales=scales)
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=19, mode=mode,
          coordinate_transformation_mode=coord, oracle=run_reference)


def _nearest_brute_force(x, scales, coord_fn, nearest_mode):
    """The ONNX definition, one output element at a time."""
    rnd = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
           "floor": np.floor, "ceil": np.ceil}[nearest_mode]
    out_shape = [int(n * s) for n, s in zip(x.shape, scales)]
    out = np.empty(out_shape, x.dtype)
    for o in np.ndindex(*out_shape):
        src = [int(np.clip(rnd(coord_fn(i, s)), 0, n - 1)) if s != 1 else i
               for i, s, n in zip(o, scales, x.shape)]
        out[o] = x[tuple(src)]
    return out


@pytest.mark.parametrize("scales", SCALES, ids=str)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_resize_tf_half_pixel_for_nearest(scales, nearest_mode):
    """Only in Resize-11 (dropped in 13), and neither onnxruntime nor the ONNX reference runs it:
    checked against the definition x_original = (x_resized + 0.5) / scale."""
    ins = resize_inputs(scales=scales, roi=np.zeros(0, np.float32))  # roi is required in Resize-11
    model = node_model("Resize", ins, consts=["roi", "scales", "sizes"], opset=11, mode="nearest",
                       coordinate_transformation_mode="tf_half_pixel_for_nearest", nearest_mode=nearest_mode)
    (ours,) = run_kernorch(model, {"x": X})
    ref = _nearest_brute_force(X, (1, 1, *scales), lambda i, s: (i + 0.5) / s, nearest_mode)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("sizes", [(8, 12), (2, 3), (7, 9), (3, 4)])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_sizes(sizes, mode):
    check("Resize", resize_inputs(sizes=sizes), consts=["roi", "scales", "sizes"], opset=13, mode=mode)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio(policy):
    ins = {"x": X, "roi": None, "scales": None, "sizes": np.array([8, 8], dtype=np.int64)}
    check("Resize", ins, consts=["sizes"], opset=18, mode="linear", axes=[2, 3], keep_aspect_ratio_policy=policy)


def test_resize_axes_attribute():
    ins = {"x": X, "roi": None, "scales": f32(2.0, 1.5)}
    check("Resize", ins, consts=["scales"], opset=18, mode="linear", axes=[3, 2])


def test_resize_antialias_downsampling():
    ins = resize_inputs(scales=(0.6, 0.45))
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=18, mode="linear", antialias=1)
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=18, mode="cubic", antialias=1)


def test_resize_cubic_exclude_outside():
    ins = resize_inputs(scales=(1.6, 0.7))
    check("Resize", ins, consts=["roi", "scales", "sizes"], opset=13, mode="cubic", exclude_outside=1,
          cubic_coeff_a=-0.5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize(mode):
    roi = f32(0, 0, 0.25, -0.375, 1, 1, 0.875, 1.25)
    ins = {"x": X, "roi": roi, "scales": None, "sizes": np.array([1, 2, 6, 7], dtype=np.int64)}
    check("Resize", ins, consts=["roi", "sizes"], opset=13, mode=mode,
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)


@pytest.mark.parametrize("scales", [(2.0, 3.0), (0.5, 0.5), (1.5, 2.5)], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10(scales, mode):
    check("Resize", {"x": X, "scales": f32(1, 1, *scales)}, consts=["scales"], opset=10, mode=mode)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(2.0, 3.0), (1.5, 2.5)], ids=str)
def test_upsample(mode, scales):
    check("Upsample", {"x": X, "scales": f32(1, 1, *scales)}, consts=["scales"], opset=9, mode=mode)
    check("Upsample", {"x": X}, opset=7, mode=mode, scales=[1.0, 1.0, *scales])  # scales attribute


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(2.0, 3.0), (0.5, 1.5), (1.7, 0.6)], ids=str)
def test_rational_scales_need_no_tables(coord, mode, scales):
    """Taps of a scale p/q follow floor((a*i + b) / d): index arithmetic, no constant table."""
    ins = resize_inputs(scales=scales)
    g, _ = import_onnx(node_model("Resize", ins, consts=["roi", "scales", "sizes"], opset=13, mode=mode,
                                  coordinate_transformation_mode=coord))
    views = [p for p in g.prims if p.op is Op.VIEW]
    assert views and all("T" not in repr(p.attrs.map.index) for p in views)


def test_nearest_of_integers():
    x = RNG.integers(0, 100, (1, 1, 3, 4)).astype(np.uint8)
    check("Resize", {"x": x, "roi": None, "scales": f32(1, 1, 1.5, 2)}, consts=["scales"], opset=13, mode="nearest")
