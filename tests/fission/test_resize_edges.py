"""Resize edges test_resize.py does not reach: axes resized to length 1 (align_corners,
pytorch_half_pixel, tf_crop_and_resize), extrapolation on a leading axis and by default,
antialias when upsampling, the default mode, Upsample's old mode names, float16/float64 inputs,
and the one-line errors; plus the helpers against brute force: the neighbour selection of
axis_taps for any tap count, fit_floordiv's smallest divisor, and tap_map's views (in range,
tables where no floor division fits)."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_one_dtype_per_elementwise_prim, check, node_model, run_reference
from kernorch.errors import UnsupportedOpError
from kernorch.fission.rules.resize import axis_taps, fit_floordiv, tap_map
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import index as ix
from kernorch.ir.prims import Op

RNG = np.random.default_rng(44)
X = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)


def f32(*v):
    return np.array(v, dtype=np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_align_corners_to_length_1_reads_the_first_element(mode):
    check("Resize", {"x": X, "roi": None, "scales": f32(1, 1, 0.25, 1 / 6)}, consts=["scales"], opset=13, mode=mode,
          coordinate_transformation_mode="align_corners")
    check("Resize", {"x": X, "roi": None, "scales": None, "sizes": i64(1, 2, 1, 3)}, consts=["sizes"], opset=13,
          mode=mode, coordinate_transformation_mode="align_corners")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_pytorch_half_pixel_to_length_1(mode):
    """The ONNX reference reads position -0.5 there. onnxruntime (and the operator's text) read 0:
    the same element for nearest and linear (the taps clamp to the edge), not for cubic, which is
    checked against the reference only."""
    ins = {"x": X, "roi": None, "scales": None, "sizes": i64(1, 2, 1, 1)}
    if mode != "cubic":
        check("Resize", ins, consts=["sizes"], opset=13, mode=mode, coordinate_transformation_mode="pytorch_half_pixel")
    check("Resize", ins, consts=["sizes"], opset=13, mode=mode, coordinate_transformation_mode="pytorch_half_pixel",
          oracle=run_reference)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("roi,sizes", [
    (f32(0, 0, 0.3, -0.5, 1, 1, 0.8, 1.5), (1, 2, 1, 1)),  # length 1: the middle of the roi
    (f32(0, 0, 0.3, 0.25, 1, 1, 0.3, 0.75), (1, 2, 1, 1)),
    (f32(0, 0, -0.5, 0.1, 1, 1, 1.4, 0.9), (1, 2, 7, 5)),  # outside on axis 2, not the last
])
def test_tf_crop_and_resize_edges(mode, roi, sizes):
    ins = {"x": X, "roi": roi, "scales": None, "sizes": i64(*sizes)}
    check("Resize", ins, consts=["roi", "sizes"], opset=13, mode=mode,
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)
    # no extrapolation_value: 0
    check("Resize", ins, consts=["roi", "sizes"], opset=13, mode=mode,
          coordinate_transformation_mode="tf_crop_and_resize")


def test_tf_crop_and_resize_on_some_axes():
    ins = {"x": X, "roi": f32(0.2, 0.9), "scales": None, "sizes": i64(5)}
    check("Resize", ins, consts=["roi", "sizes"], opset=18, mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize", axes=[3])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1.5, 0.6), (2.0, 1.25)], ids=str)
def test_antialias_when_upsampling_is_the_plain_filter(mode, scales):
    check("Resize", {"x": X, "roi": None, "scales": f32(1, 1, *scales)}, consts=["scales"], opset=18, mode=mode,
          antialias=1)


def test_default_mode_is_nearest():
    ins = {"x": X, "roi": None, "scales": f32(1, 1, 1.5, 2)}
    check("Resize", ins, consts=["scales"], opset=13)
    g, _ = import_onnx(node_model("Resize", ins, consts=["scales"], opset=13))
    assert {p.op for p in g.prims} == {Op.VIEW}


@pytest.mark.parametrize("old,x", [("bilinear", X),
                                   ("trilinear", RNG.standard_normal((1, 1, 3, 4, 2)).astype(np.float32))])
def test_upsample_old_mode_names_are_linear(old, x):
    """onnxruntime refuses them; kernorch reads them as linear, so both give the same prims."""
    s = f32(1, 1, *([2.0, 1.5, 2.0][:x.ndim - 2]))
    ref = check("Upsample", {"x": x, "s": s}, consts=["s"], opset=9, mode="linear")
    g_old, _ = import_onnx(node_model("Upsample", {"x": x, "s": s}, consts=["s"], opset=9, mode=old))
    g_lin, _ = import_onnx(node_model("Upsample", {"x": x, "s": s}, consts=["s"], opset=9, mode="linear"))
    assert [p.op for p in g_old.prims] == [p.op for p in g_lin.prims]
    from kernorch.ir import interp

    np.testing.assert_array_equal(interp.run(g_old, {g_old.inputs[0]: x})[g_old.outputs[0]], ref[0])


@pytest.mark.parametrize("dtype,rel", [(np.float64, 1e-9), (np.float16, 1e-2)])
def test_float16_and_float64_weights_and_extrapolation_in_the_input_dtype(dtype, rel):
    """onnxruntime has no float64 Resize: the ONNX reference is the oracle."""
    ins = {"x": X.astype(dtype), "roi": f32(0, 0, -0.5, 0.1, 1, 1, 1.4, 0.9), "scales": None, "sizes": i64(1, 2, 7, 5)}
    attrs = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.3)
    check("Resize", ins, consts=["roi", "sizes"], opset=13, oracle=run_reference, rel=rel, **attrs)
    assert_one_dtype_per_elementwise_prim(node_model("Resize", ins, consts=["roi", "sizes"], opset=13, **attrs))


def test_taps_of_weight_1_are_not_multiplied():
    """Downsampling by 2 with asymmetric coordinates reads every other element: one view, no
    arithmetic."""
    ins = {"x": X, "roi": None, "scales": f32(1, 1, 0.5, 0.5)}
    model = node_model("Resize", ins, consts=["scales"], opset=13, mode="linear",
                       coordinate_transformation_mode="asymmetric")
    check("Resize", ins, consts=["scales"], opset=13, mode="linear", coordinate_transformation_mode="asymmetric")
    g, _ = import_onnx(model)
    assert [p.op for p in g.prims] == [Op.VIEW, Op.VIEW]



@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("roi", [f32(0, 0, 0, 0.25, 1, 1, 0.5, 1), f32(0, 0, 0, 1, 1, 0.5, 1, 1)], ids=["hw", "c"])
def test_tf_crop_and_resize_at_scale_1_still_crops(mode, roi):
    """Scales of 1 keep the size, not the content: the roi crops [0, 0.5] of H and [0.25, 1] of W
    and stretches them back. The first row's and last column's coordinates fall exactly on the
    input's edges (0 and n - 1): inside, not extrapolated. Then the channels cropped to [0, 0.5]
    beside W reduced to its last column (a start of 1). The ONNX reference is the oracle:
    onnxruntime 1.32 returns the input unchanged whenever every scale is 1, roi or not."""
    ins = {"x": X, "roi": roi, "scales": f32(1, 1, 1, 1)}
    check("Resize", ins, consts=["roi", "scales"], opset=13, mode=mode, oracle=run_reference,
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)


def test_tf_crop_and_resize_outside_with_exclude_outside():
    """Rows whose taps all fall outside the input (roi from -1): excluded taps leave no weight, the
    extrapolation value stands there."""
    ins = {"x": X, "roi": f32(0, 0, -1, 0, 1, 1, 1, 1), "scales": None, "sizes": i64(1, 2, 6, 6)}
    check("Resize", ins, consts=["roi", "sizes"], opset=13, mode="linear", exclude_outside=1,
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.5, oracle=run_reference)


@pytest.mark.parametrize("case", ["scales", "roi", "not_larger", "not_smaller"])
def test_axes_leave_the_other_axes_alone(case):
    """With ``axes`` (opset 18) the scales, sizes and roi name only those axes; the channels (2
    of them) keep their size, scale 1 and the whole roi."""
    if case == "scales":
        ins, attrs = {"x": X, "roi": None, "scales": f32(1.5, 0.5)}, {}
    elif case == "roi":
        ins, attrs = ({"x": X, "roi": f32(0.2, 0.1, 0.9, 0.6), "scales": None, "sizes": i64(3, 5)},
                      {"coordinate_transformation_mode": "tf_crop_and_resize"})
    else:
        ins, attrs = {"x": X, "roi": None, "scales": None, "sizes": i64(7, 9)}, {"keep_aspect_ratio_policy": case}
    consts = [n for n, a in ins.items() if a is not None and n != "x"]
    ours = check("Resize", ins, consts=consts, opset=18, mode="linear", axes=[2, 3], **attrs)
    assert ours[0].shape[:2] == (1, 2)


def test_only_nearest_moves_integers():
    ins = {"x": np.arange(24, dtype=np.int32).reshape(1, 1, 4, 6), "roi": None, "scales": f32(1, 1, 2, 2)}
    check("Resize", ins, consts=["scales"], opset=13, mode="nearest")
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(node_model("Resize", ins, consts=["scales"], opset=13, mode="linear"))
    assert str(e.value).endswith("linear interpolation of int32 tensors (only nearest moves integers)")

# -- one-line errors ----------------------------------------------------------------------------

def _model(x_shape, inputs, runtime=(), opset=13, op="Resize", **attrs):
    """inputs: name -> array (None: omitted); names in ``runtime`` are graph inputs. No shape
    inference: ONNX refuses some of these nodes before kernorch sees them."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    node = helper.make_node(op, ["x"] + names, ["y"], **attrs)
    g_in = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inits = []
    for n, a in inputs.items():
        if a is None:
            continue
        dt = TensorProto.INT64 if a.dtype == np.int64 else TensorProto.FLOAT
        if n in runtime:
            g_in.append(helper.make_tensor_value_info(n, dt, a.shape))
        else:
            inits.append(helper.make_tensor(n, dt, a.shape, a.reshape(-1).tolist()))
    graph = helper.make_graph([node], "g", g_in, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


S4 = f32(1, 1, 2, 2)


@pytest.mark.parametrize("model,msg", [
    (_model([1, 2, 4, 6], {"roi": f32(0, 0, 0, 0, 1, 1, 1, 1), "scales": S4}, runtime=["roi"]),
     ": roi (input 1) must be a constant"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": S4}, runtime=["scales"]), ": scales (input 2) must be a constant"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": None, "sizes": i64(1, 2, 8, 8)}, runtime=["sizes"]),
     ": sizes (input 3) must be a constant"),
    (_model([1, 2, 4, 6], {"scales": S4}, runtime=["scales"], opset=9, op="Upsample"),
     ": scales (input 1) must be a constant"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": None, "sizes": i64(8, 8)}, opset=18, axes=[2, 3],
            keep_aspect_ratio_policy="fit"), "unknown keep_aspect_ratio_policy 'fit'"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": f32(), "sizes": None}), "neither scales nor sizes is given"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": S4}, opset=18, antialias=1),
     "antialias applies to linear and cubic modes only"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": S4}, mode="area"), "unknown mode 'area'"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": f32(2, 2)}, opset=18, axes=[2, 4]),
     "axis 4 is out of range for rank 4"),
    (_model([1, 2, 4, 6], {"roi": None, "scales": S4}, mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize needs roi"),
])
def test_one_line_errors(model, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert str(e.value).endswith(msg) and "\n" not in str(e.value)


def test_unknown_coordinate_mode_is_named():
    model = _model([1, 2, 4, 6], {"roi": None, "scales": S4}, mode="linear", coordinate_transformation_mode="weird")
    with pytest.raises((ValueError, UnsupportedOpError), match="unknown coordinate_transformation_mode 'weird'"):
        import_onnx(model)


# -- the helpers against brute force -------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_axis_taps_are_the_n_nearest_positions_ties_to_the_smaller(n):
    """The ONNX reference's rule (onnx/reference/ops/op_resize.py, _get_neighbor): the n integer
    positions nearest x, ties to the smaller one. The reference picks them among the input
    padded by ceil(n / 2) (edge mode); at that padding's border it can only pick inward, where
    kernorch's taps go on and clamp to the same edge element."""
    n_in, pad = 5, -(-n // 2)
    xs = np.concatenate([np.arange(-1, n_in + 0.01, 0.25), RNG.uniform(-1, n_in, 40)])
    taps, weights = axis_taps(xs, n_in, 1.0, lambda ratio, scale: np.full(n, 1.0 / n), False)
    for x, got in zip(xs, taps):
        near = sorted(range(-pad - n, n_in + pad + n), key=lambda i: (abs(x - i), i))[:n]
        np.testing.assert_array_equal(got, np.sort(near), err_msg=f"x={x}")
    assert weights.shape == (len(xs), n)


def _brute_fit(t):
    n = len(t)
    i = np.arange(n)
    for d in range(1, n + 1):
        span = 3 * d * (abs(int(t.max())) + abs(int(t.min())) + 1)
        for p in range(-span, span + 1):
            lo, hi = int((d * t - p * i).max()), int((d * t + d - 1 - p * i).min())
            if lo <= hi:
                return d
    return None


def test_fit_floordiv_finds_the_smallest_divisor():
    seqs = [np.array(s) for s in ([3], [0, 0], [0, 5], [2, 1], [0, 1, 1, 2], [0, 0, 1, 1, 1, 2], [0, 2, 1, 3],
                                  [0, 0, 0, 1, 2, 3, 3, 3], [5, 4, 2, 1, 0], [-2, -1, 1, 2])]
    for n in (2, 3, 5, 7):
        for _ in range(30):
            p, q, d = int(RNG.integers(-7, 8)), int(RNG.integers(-9, 10)), int(RNG.integers(1, n + 1))
            seqs.append((p * np.arange(n) + q) // d)
        seqs += [RNG.integers(-3, 4, n) for _ in range(20)]
    for t in seqs:
        fit = fit_floordiv(t)
        want = _brute_fit(t)
        if want is None:
            assert fit is None, t
            continue
        p, q, d = fit
        np.testing.assert_array_equal((p * np.arange(len(t)) + q) // d, t)
        assert d == want, (t, fit)


@pytest.mark.parametrize("taps", [[0, 1, 2, 3], [-2, -1, 0, 1, 2], [3, 4, 5, 6], [0, 0, 0, 1, 2, 3, 3, 3],
                                  [0, 2, 1, 3, 0], [-1, 3, 0, 5, 2, 2], [1, 1, 1], [4]])
def test_tap_map_reads_the_clamped_taps_and_stays_in_range(taps):
    taps = np.array(taps)
    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    m = tap_map(x.shape, 1, taps)
    np.testing.assert_array_equal(m.gather(x), np.take(x, np.clip(taps, 0, 3), axis=1))
    lo, hi = ix.bounds(m.index[1], m.out_shape)
    assert 0 <= lo and hi <= 3
    if fit_floordiv(np.clip(taps, 0, 3)) is None and fit_floordiv(taps) is None:
        assert "T" in repr(m.index[1])  # a constant table


def test_tap_map_tables_for_irregular_taps():
    """No floor division fits [0, 2, 1, 3, 0] (clamped or not): the view reads a table."""
    assert fit_floordiv(np.array([0, 2, 1, 3, 0])) is None
    m = tap_map((4,), 0, np.array([0, 2, 1, 3, 0]))
    assert "T" in repr(m.index[0])
    np.testing.assert_array_equal(m.gather(np.arange(4.0)), [0.0, 2.0, 1.0, 3.0, 0.0])


def test_every_coordinate_of_exact_grids_is_in_range():
    """All views of a resize read inside the input for every mode, coordinate mode and a few
    scales (the interpreter clamps reads, a generated kernel would not)."""
    for mode, coord, scales in itertools.product(["nearest", "linear", "cubic"],
                                                 ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"],
                                                 [(2.0, 0.5), (1.5, 2.5), (0.75, 3.0)]):
        g, _ = import_onnx(node_model("Resize", {"x": X, "roi": None, "scales": f32(1, 1, *scales)}, consts=["scales"],
                                      opset=13, mode=mode, coordinate_transformation_mode=coord))
        for p in g.prims:
            if p.op is Op.VIEW and not p.attrs.map.mask:
                m = p.attrs.map
                for d, e in enumerate(m.index):
                    lo, hi = ix.bounds(e, m.out_shape)
                    assert 0 <= lo and hi < m.in_shape[d], (mode, coord, scales, e)
