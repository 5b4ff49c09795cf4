"""Indexing operators: Concat, Split, Slice, Pad, Tile, Gather, GatherElements, GatherND, Scatter*.

Each output is one view (an IndexMap) of its input, or one concat prim; pads, starts and sizes
must be constants so that the map is static. A gather with constant indices is a view (a table
lookup); with runtime indices (token embeddings) it is a GATHER prim, the layout prim whose map
reads an integer tensor. Scatters stay whole (opaque), see ``scatter``."""

from __future__ import annotations


import numpy as np
import onnx

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.shape_ops import int_list, norm_axis
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.graph import TensorType


@rule("Concat")
def concat(ctx: NodeContext):
    xs = [v for v in ctx.inputs if v is not None]
    rank = len(ctx.b.shape(xs[0]))
    return [ctx.b.concat(xs, norm_axis(ctx, ctx.attr("axis", 1), rank))]


@rule("Split")
def split(ctx: NodeContext):
    s = ctx.shape(0)
    axis = norm_axis(ctx, ctx.attr("axis", 0), len(s))
    n = s[axis]
    sizes = int_list(ctx, "split", 1, "split")
    if sizes is None:
        parts = ctx.attr("num_outputs") or len(ctx.node.output)
        chunk = -(-n // parts)
        sizes = [min(chunk, max(n - k * chunk, 0)) for k in range(parts)]
    if sum(sizes) != n or len(sizes) != len(ctx.node.output):
        raise ctx.unsupported(f"split sizes {sizes} do not divide axis {axis} of size {n} into "
                              f"{len(ctx.node.output)} outputs")
    outs, start = [], 0
    for size in sizes:
        starts = [start if d == axis else 0 for d in range(len(s))]
        shape = [size if d == axis else m for d, m in enumerate(s)]
        outs.append(ctx.b.view(ctx.x(0), layout.slice_(s, starts, [1] * len(s), shape)))
        start += size
    return outs


def clamp_slice(start: int, end: int, step: int, n: int) -> tuple[int, int]:
    """ONNX Slice semantics for one axis: the first index and the length."""
    if step == 0:
        raise ValueError("slice step 0")
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        length = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
        length = max(0, -(-(start - end) // -step))
    return start, length


@rule("Slice")
def slice_op(ctx: NodeContext):
    s = ctx.shape(0)
    if ctx.attr("starts") is not None:  # opset 1-9: attributes
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes, steps = ctx.attr("axes"), None
    else:
        starts = [int(v) for v in ctx.require_const(1, "starts").reshape(-1)]
        ends = [int(v) for v in ctx.require_const(2, "ends").reshape(-1)]
        axes = ctx.require_const(3, "axes").reshape(-1).tolist() if ctx.has_input(3) else None
        steps = ctx.require_const(4, "steps").reshape(-1).tolist() if ctx.has_input(4) else None
    axes = list(range(len(starts))) if axes is None else [norm_axis(ctx, int(a), len(s)) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(v) for v in steps]
    first, step, shape = [0] * len(s), [1] * len(s), list(s)
    for a, st, en, sp in zip(axes, starts, ends, steps):
        if sp == 0:
            raise ctx.unsupported("slice step 0")
        first[a], shape[a] = clamp_slice(int(st), int(en), sp, s[a])
        step[a] = sp
    return [ctx.b.view(ctx.x(0), layout.slice_(s, first, step, shape))]


def _pad_map(in_shape, begin, end, mode: str, value: float) -> layout.IndexMap:
    """layout.pad for constant/edge/reflect within one period; wrap and wider reflect through mod."""
    wide = mode == "reflect" and any(max(b, e) > n - 1 for n, b, e in zip(in_shape, begin, end))
    if mode in ("constant", "edge") or (mode == "reflect" and not wide):
        return layout.pad(in_shape, begin, end, mode, value)
    if mode not in ("wrap", "reflect"):
        raise ValueError(f"pad mode {mode!r}")
    out_shape = [n + b + e for n, b, e in zip(in_shape, begin, end)]
    idx = []
    for d, n in enumerate(in_shape):
        j = ix.var(d) - begin[d]
        if n == 0:  # an empty axis (never padded, the rule checks): the output is empty along it too
            pass
        elif mode == "wrap" or n == 1:
            j = ix.mod(j, n, out_shape)
        else:
            period = 2 * (n - 1)
            m = ix.mod(j, period, out_shape)
            j = (n - 1) - ix.maximum((n - 1) - m, m - (n - 1), out_shape)
        idx.append(j)
    return layout.make(out_shape, in_shape, idx)


@rule("Pad")
def pad(ctx: NodeContext):
    s = ctx.shape(0)
    mode = ctx.attr_str("mode", "constant")
    if ctx.attr("pads") is not None:  # opset 1-10: attributes
        pads = [int(p) for p in ctx.attr("pads")]
        value = float(ctx.attr("value", 0.0))
        axes = list(range(len(s)))
    else:
        pads = [int(p) for p in ctx.require_const(1, "pads").reshape(-1)]
        cv = ctx.const(2)
        if ctx.has_input(2) and cv is None:
            raise ctx.unsupported("constant_value (input 2) must be a constant")
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        axes = ctx.require_const(3, "axes").reshape(-1).tolist() if ctx.has_input(3) else list(range(len(s)))
        axes = [norm_axis(ctx, int(a), len(s)) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.unsupported(f"{len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * len(s), [0] * len(s)
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[len(axes) + k]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.unsupported(f"unknown pad mode {mode!r}")
    if mode != "constant" and any(n == 0 for n, b, e in zip(s, begin, end) if b > 0 or e > 0):
        raise ctx.unsupported(f"{mode} padding of an empty axis")
    return [ctx.b.view(ctx.x(0), _pad_map(s, begin, end, mode, value))]


@rule("CenterCropPad")
def center_crop_pad(ctx: NodeContext):
    """Crop or zero-pad each axis to the target size, centred (the odd element at the end): one
    pad view with negative pads where it crops."""
    s = ctx.shape(0)
    target = [int(t) for t in ctx.require_const(1, "shape").reshape(-1)]
    axes = ctx.attr("axes") or list(range(len(s)))
    begin, end = [0] * len(s), [0] * len(s)
    for a, t in zip(axes, target):
        a = norm_axis(ctx, int(a), len(s))
        d = t - s[a]
        begin[a] = d // 2 if d > 0 else -(-d // 2)
        end[a] = d - begin[a]
    return [ctx.b.view(ctx.x(0), layout.pad(s, begin, end, "constant", 0.0))]


@rule("Tile")
def tile(ctx: NodeContext):
    s = ctx.shape(0)
    reps = [int(r) for r in ctx.require_const(1, "repeats").reshape(-1)]
    if len(reps) != len(s):
        raise ctx.unsupported(f"{len(reps)} repeats for rank {len(s)}")
    out = [n * r for n, r in zip(s, reps)]
    idx = [ix.var(d) if r == 1 else ix.mod(ix.var(d), n, out) for d, (n, r) in enumerate(zip(s, reps))]
    return [ctx.b.view(ctx.x(0), layout.make(out, s, idx))]


def _index_input(ctx: NodeContext, i: int) -> int:
    x = ctx.x(i)
    if ctx.dtype(i) not in ("int32", "int64"):
        raise ctx.unsupported(f"indices (input {i}) have dtype {ctx.dtype(i)}; ONNX allows int32 and int64")
    return x


def _check_const_range(ctx: NodeContext, indices: np.ndarray, n: int, axis: int) -> None:
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise ctx.unsupported(f"indices out of range [-{n}, {n}) on axis {axis}")


@rule("Gather")
def gather(ctx: NodeContext):
    s = ctx.shape(0)
    axis = norm_axis(ctx, ctx.attr("axis", 0), len(s))
    n = s[axis]
    indices = ctx.const(1)
    if indices is not None:
        indices = np.asarray(indices, dtype=np.int64)
        _check_const_range(ctx, indices, n, axis)
        return [ctx.b.view(ctx.x(0), layout.take(s, axis, indices))]
    idx = _index_input(ctx, 1)
    if n == 0:
        raise ctx.unsupported(f"gather from the empty axis {axis}")
    data_map, maps = layout.gather_take(s, axis, ctx.shape(1))
    return [ctx.b.gather(ctx.x(0), [idx], data_map, [axis], maps)]


@rule("GatherElements")
def gather_elements(ctx: NodeContext):
    s, q = ctx.shape(0), ctx.shape(1)
    axis = norm_axis(ctx, ctx.attr("axis", 0), len(s))
    if len(q) != len(s) or any(a > b for d, (a, b) in enumerate(zip(q, s)) if d != axis):
        raise ctx.unsupported(f"indices shape {q} does not fit data {s} on axis {axis}")
    if ctx.const(1) is not None:
        _check_const_range(ctx, np.asarray(ctx.const(1)), s[axis], axis)
    if s[axis] == 0 and 0 not in q:
        raise ctx.unsupported(f"gather from the empty axis {axis}")
    data_map, maps = layout.gather_elements(s, axis, q)
    return [ctx.b.gather(ctx.x(0), [_index_input(ctx, 1)], data_map, [axis], maps)]


@rule("GatherND")
def gather_nd(ctx: NodeContext):
    s, q = ctx.shape(0), ctx.shape(1)
    batch = int(ctx.attr("batch_dims", 0))
    if not q or q[-1] < 1 or batch + q[-1] > len(s) or tuple(q[:batch]) != tuple(s[:batch]):
        raise ctx.unsupported(f"indices shape {q} does not index data {s} with batch_dims={batch}")
    k = q[-1]
    axes = list(range(batch, batch + k))
    if ctx.const(1) is not None:
        c = np.asarray(ctx.const(1))
        for m, a in enumerate(axes):
            _check_const_range(ctx, c[..., m], s[a], a)
    data_map, maps = layout.gather_nd(s, q, batch)
    idx = _index_input(ctx, 1)
    return [ctx.b.gather(ctx.x(0), [idx] * k, data_map, axes, maps)]


@rule("ScatterND", "ScatterElements", "Scatter")
def scatter(ctx: NodeContext):
    """Kept whole, by choice: a scatter writes where the data says, so no output element has an
    index map to its source (the inverse of the write map would be a search over all updates,
    and duplicate indices with ``reduction`` combine in order). As one opaque prim it runs
    natively (onnxruntime on the node) and the report counts it; the output shape is the data's,
    static. A fused scatter kernel would need a write-side map, which no other prim has."""
    s = ctx.shape(0)
    if ctx.dtype(2) != ctx.dtype(0):
        raise ctx.unsupported(f"updates dtype {ctx.dtype(2)} differs from data {ctx.dtype(0)}")
    node = onnx.NodeProto()
    node.CopyFrom(ctx.node)
    return [ctx.b.opaque(ctx.op_type, [ctx.x(0), _index_input(ctx, 1), ctx.x(2)], TensorType(s, ctx.dtype(0)),
                         node.SerializeToString(), ctx.opset)]
