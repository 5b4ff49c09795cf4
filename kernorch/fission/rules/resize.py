"""Resize and Upsample, one axis at a time (the interpolation is separable).

Per axis, the coordinate transform and the interpolation mode give every output position a few
input taps with constant weights (computed here in float64, as the ONNX reference does). Nearest
has one tap of weight 1: a view through a constant index table, which the index algebra turns
into an affine map when the table is an arithmetic progression (integer scales). Linear, cubic
and antialiased filters sum ``take(x, taps_k) * weight_k`` over their taps: views combined with
broadcast constant weight tensors. tf_crop_and_resize's out-of-range positions become a mask
(nearest) or a ``where`` against the extrapolation value.
"""

from __future__ import annotations

import math

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.shape_ops import norm_axis
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import Cond
from kernorch.ir.prims import Op


# -- per-output coefficients (ratio = x_ori - floor(x_ori), 1 when x_ori is an integer) ---------

def _nearest(mode: str):
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        pick_ceil = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                     "floor": False, "ceil": True, "simple": scale < 1}[mode]
        return np.array([0.0, 1.0]) if pick_ceil else np.array([1.0, 0.0])
    return coeffs


def _linear(antialias: bool):
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic(a: float, antialias: bool):
    def kernel(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return np.where(x <= 1, near, np.where(x < 2, far, 0.0))

    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return kernel(np.array([1 + ratio, ratio, 1 - ratio, 2 - ratio]))
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        c = kernel(scale * (np.arange(start, 2 - start) - ratio))
        return c / c.sum()
    return coeffs


def source_coords(mode: str, n_in: int, n_out: int, scale: float, roi) -> np.ndarray:
    """ONNX coordinate_transformation_mode: input coordinate of every output position."""
    y = np.arange(n_out, dtype=np.float64)
    out_f = scale * n_in
    if mode == "align_corners":
        return np.zeros(n_out) if out_f == 1 else y * (n_in - 1) / (out_f - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        if out_f == 1:
            x = np.full(n_out, (roi[1] - roi[0]) * (n_in - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (n_in - 1) / (out_f - 1)
        return x + roi[0] * (n_in - 1)
    if mode == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if out_f == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_f)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nearest":
        return (y + 0.5) / scale
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def axis_taps(x_ori: np.ndarray, n_in: int, scale: float, coeff_fn, exclude_outside: bool):
    """Input indices [out, taps] (to be clamped: edge padding) and weights [out, taps], the ONNX
    reference's neighbour selection: the taps nearest x_ori, ties to the smaller index."""
    fl = np.floor(x_ori)
    ratios = np.where(x_ori == fl, 1.0, x_ori - fl)
    coeffs = np.stack([np.asarray(coeff_fn(float(r), scale), dtype=np.float64) for r in ratios])
    n = coeffs.shape[1]
    pad = int(math.ceil(n / 2))
    xp = x_ori + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    taps = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= n_in), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return taps, coeffs


def fit_floordiv(t: np.ndarray) -> tuple[int, int, int] | None:
    """``(p, q, d)`` with ``t[i] == (p*i + q) // d`` for every i (smallest d), or None. Nearest
    and linear taps of a rational scale have this form: a floor division, not a table."""
    t = np.asarray(t, dtype=np.int64)
    n = len(t)
    if n == 1:
        return 0, int(t[0]), 1
    i = np.arange(n)
    for d in range(1, n + 1):
        slope = d * (int(t[-1]) - int(t[0])) / (n - 1)
        for p in range(math.floor(slope) - 1, math.ceil(slope) + 2):
            lo, hi = int((d * t - p * i).max()), int((d * t + d - 1 - p * i).min())
            if lo <= hi:
                return p, lo, d
    return None


def tap_map(in_shape, axis: int, taps: np.ndarray) -> layout.IndexMap:
    """A view reading ``in[..., clamp(taps[i], 0, n - 1), ...]`` at output position i of ``axis``:
    affine or floor-div index arithmetic when the taps follow one, a constant table otherwise."""
    n = in_shape[axis]
    out_shape = list(in_shape)
    out_shape[axis] = len(taps)
    clamped = np.clip(taps, 0, n - 1)
    v = ix.var(axis)
    expr = None
    for table, clamp in ((clamped, False), (taps, True)):
        fit = fit_floordiv(table)
        if fit is not None:
            p, q, d = fit
            expr = ix.floordiv(v * p + q, d, out_shape)
            if clamp:
                expr = ix.minimum(ix.maximum(expr, 0, out_shape), n - 1, out_shape)
            break
    if expr is None:
        expr = ix.lookup(clamped, v, out_shape)
    index = [expr if k == axis else ix.var(k) for k in range(len(in_shape))]
    return layout.make(out_shape, in_shape, index)


def _opt_const(ctx: NodeContext, i: int, what: str) -> np.ndarray | None:
    """A constant optional input; an empty tensor counts as absent."""
    if not ctx.has_input(i):
        return None
    c = ctx.require_const(i, what)
    return c if c.size else None


def _plan(ctx: NodeContext):
    """Scales and output sizes per dim, the axes to resize, coefficient function and options."""
    s = ctx.shape(0)
    r = len(s)
    mode = ctx.attr_str("mode", "nearest")
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    old = ctx.op_type == "Upsample" or ctx.opset < 11
    if old:  # Upsample and Resize-10: asymmetric coordinates, scales only
        scales = ctx.attr("scales")
        if scales is None:
            scales = ctx.require_const(1, "scales").reshape(-1)
        scales, sizes, roi, axes = [float(v) for v in scales], None, None, list(range(r))
        coord, exclude, extrap, antialias, policy = "asymmetric", False, 0.0, False, "stretch"
    else:
        roi = _opt_const(ctx, 1, "roi")
        scales = _opt_const(ctx, 2, "scales")
        sizes = _opt_const(ctx, 3, "sizes")
        coord = ctx.attr_str("coordinate_transformation_mode", "half_pixel")
        exclude = bool(ctx.attr("exclude_outside", 0))
        extrap = float(ctx.attr("extrapolation_value", 0.0))
        antialias = bool(ctx.attr("antialias", 0))
        policy = ctx.attr_str("keep_aspect_ratio_policy", "stretch")
        axes = ctx.attr("axes")
        axes = list(range(r)) if axes is None else [norm_axis(ctx, int(a), r) for a in axes]
        if scales is not None:
            full = [1.0] * r
            for i, d in enumerate(axes):
                full[d] = float(scales[i])
            scales = full
        if sizes is not None:
            full = list(s)
            for i, d in enumerate(axes):
                full[d] = int(sizes[i])
            sizes = full
        if roi is not None:
            full = [0.0] * r + [1.0] * r
            for i, d in enumerate(axes):  # numpy scalars: roi terms are computed in roi's dtype,
                full[d], full[r + d] = roi[i], roi[len(axes) + i]  # as the ONNX reference does
            roi = full
    if sizes is not None:
        scales = [sizes[d] / s[d] for d in range(r)]
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            k = pick(scales[d] for d in axes)
            scales = [k if d in axes else 1.0 for d in range(r)]
            sizes = [int(k * s[d] + 0.5) if d in axes else s[d] for d in range(r)]
        elif policy != "stretch":
            raise ctx.unsupported(f"unknown keep_aspect_ratio_policy {policy!r}")
    elif scales is not None:
        sizes = [int(sc * n) for sc, n in zip(scales, s)]
    else:
        raise ctx.unsupported("neither scales nor sizes is given")
    if mode == "nearest":
        nearest = ctx.attr_str("nearest_mode", "round_prefer_floor")
        if old:  # onnxruntime's opset < 11 rule: floor when upsampling, ceil when downsampling
            nearest = "simple"
        if antialias:
            raise ctx.unsupported("antialias applies to linear and cubic modes only")
        fn = _nearest(nearest)
    elif mode == "linear":
        fn = _linear(antialias)
    elif mode == "cubic":
        fn = _cubic(float(ctx.attr("cubic_coeff_a", -0.75)), antialias)
    else:
        raise ctx.unsupported(f"unknown mode {mode!r}")
    return mode, scales, sizes, roi, axes, coord, fn, exclude, extrap


@rule("Resize", "Upsample")
def resize(ctx: NodeContext):
    b = ctx.b
    mode, scales, sizes, roi, axes, coord, fn, exclude, extrap = _plan(ctx)
    dtype = ctx.dtype(0)
    if mode != "nearest" and np.dtype(dtype).kind != "f":
        raise ctx.unsupported(f"{mode} interpolation of {dtype} tensors (only nearest moves integers)")
    y = ctx.x(0)
    r = len(ctx.shape(0))
    for d in axes:
        n_in, n_out, scale = b.shape(y)[d], sizes[d], float(scales[d])
        ident_roi = roi is None or (math.isclose(roi[d], 0.0) and math.isclose(roi[r + d], 1.0))
        if math.isclose(scale, 1.0) and n_out == n_in and ident_roi:
            continue
        axis_roi = None if roi is None else (roi[d], roi[r + d])
        if coord == "tf_crop_and_resize" and axis_roi is None:
            raise ctx.unsupported("tf_crop_and_resize needs roi")
        x_ori = source_coords(coord, n_in, n_out, scale, axis_roi)
        taps, weights = axis_taps(x_ori, n_in, scale, fn, exclude)
        outside = (x_ori < 0) | (x_ori > n_in - 1) if coord == "tf_crop_and_resize" else np.zeros(n_out, bool)
        y = _resize_axis(ctx, y, d, taps, weights, outside, extrap, mode == "nearest")
    return [y]


def _resize_axis(ctx: NodeContext, y, d: int, taps, weights, outside, extrap: float, nearest: bool):
    b = ctx.b
    s = b.shape(y)
    if nearest:
        idx = taps[np.arange(len(taps)), np.argmax(weights, axis=1)]
        m = tap_map(s, d, idx)
        if outside.any():
            ok = ix.lookup((~outside).astype(np.int64), ix.var(d), m.out_shape)
            m = layout.make(m.out_shape, m.in_shape, m.index, [Cond(ok, 1, 2)], extrap)
        return b.view(y, m)
    bshape = tuple(len(taps) if k == d else 1 for k in range(len(s)))
    acc = None
    for k in range(taps.shape[1]):
        w = weights[:, k]
        if not w.any():
            continue
        term = b.view(y, tap_map(s, d, taps[:, k]))
        if not (w == 1).all():
            term = b.binary(Op.MUL, term, b.constant(w.astype(ctx.dtype(0)).reshape(bshape)))
        acc = term if acc is None else b.binary(Op.ADD, acc, term)
    if outside.any():
        acc = b.where(b.constant(outside.reshape(bshape)), b.scalar(extrap, ctx.dtype(0)), acc)
    return acc
