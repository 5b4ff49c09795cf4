"""Small pattern helpers shared by the rules: looking through broadcasts to the value underneath,
and recognizing values that vary along one axis only (per-channel scales, row sums)."""

from __future__ import annotations

import numpy as np

from kernorch.ir.graph import FLOAT_DTYPES, Graph
from kernorch.ir.prims import Op, ValueId
from kernorch.rewrite.driver import Ctx


def is_float(ctx: Ctx, *vs: ValueId) -> bool:
    return all(ctx.type(v).dtype in FLOAT_DTYPES for v in vs)


def strip_broadcast(ctx: Ctx, v: ValueId) -> ValueId:
    """The value under a chain of BROADCAST prims (same rank, size-1 dims expanded)."""
    p = ctx.producer(v)
    while p is not None and p.op is Op.BROADCAST:
        v = p.inputs[0]
        p = ctx.producer(v)
    return v


def uniform_value(ctx: Ctx, v: ValueId) -> float | None:
    """The single value every element of ``v`` has, if ``v`` is a (broadcast) constant."""
    arr = ctx.const_value(strip_broadcast(ctx, v))
    if arr is None or arr.size == 0 or arr.dtype == np.bool_:
        return None
    first = arr.reshape(-1)[0]
    if not np.all(arr == first):
        return None
    return float(first)


def varies_only_along(arr: np.ndarray, axis: int) -> np.ndarray | None:
    """``arr`` restricted to index 0 on every axis but ``axis`` (kept as size-1 dims), if that
    slice broadcast back equals ``arr``; else None."""
    axis %= arr.ndim
    sub = arr[tuple(slice(None) if d == axis else slice(0, 1) for d in range(arr.ndim))]
    same = np.broadcast_to(sub, arr.shape) == arr
    if arr.dtype.kind == "f":
        same |= np.isnan(arr)
    return sub if bool(np.all(same)) else None


def per_axis_vector(ctx: Ctx, v: ValueId, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A vector ``s`` of length ``shape[axis]`` with ``v[..., i, ...] == s[i]`` everywhere, if ``v``
    is a scalar or (broadcast) constant that varies only along ``axis``; else None."""
    n = shape[axis]
    if ctx.shape(v) == ():
        arr = ctx.const_value(v)
        return None if arr is None else np.full(n, arr, dtype=arr.dtype)
    arr = ctx.const_value(strip_broadcast(ctx, v))
    if arr is None or arr.ndim != len(shape):
        return None
    sub = varies_only_along(arr, axis)
    if sub is None:
        return None
    vec = sub.reshape(-1)
    return np.repeat(vec, n) if vec.size == 1 else vec


def without_prims(g: Graph) -> Graph:
    """A copy of ``g`` (types, inputs, outputs, constants, names) without its prims: the start of a
    rewrite that appends them again, changed or not."""
    out = Graph()
    out.types, out.inputs, out.outputs = dict(g.types), list(g.inputs), list(g.outputs)
    out.constants, out.names = dict(g.constants), dict(g.names)
    return out
