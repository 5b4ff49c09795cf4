"""Shape operators that only move data: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Expand,
DepthToSpace, SpaceToDepth. Each becomes one view (an IndexMap) or one broadcast prim; chains a
rule would emit (reshape -> permute -> reshape) are composed into a single map first."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.layout import IndexMap
from kernorch.ir.prims import ValueId


def view_chain(b: Builder, x: ValueId, maps: Sequence[IndexMap]) -> ValueId:
    """Apply ``maps`` in order (the first reads ``x``) as few view prims as composition allows:
    one, unless two masked maps with different pad values meet."""
    acc: IndexMap | None = None
    for m in maps:
        if acc is None:
            acc = m
            continue
        both = m.compose(acc)
        if both is None:
            x = b.view(x, acc)
            acc = m
        else:
            acc = both
    return b.view(x, acc) if acc is not None else x


def int_list(ctx: NodeContext, attr: str, input_index: int, what: str) -> list[int] | None:
    """An integer list given as attribute ``attr`` (older opsets) or constant input ``input_index``
    (newer ones); None when neither is present."""
    v = ctx.attr(attr)
    if v is not None:
        return [int(a) for a in v]
    if ctx.has_input(input_index):
        return [int(a) for a in ctx.require_const(input_index, what).reshape(-1)]
    return None


def norm_axis(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


@rule("Transpose")
def transpose(ctx: NodeContext):
    rank = len(ctx.shape(0))
    perm = ctx.attr("perm") or list(reversed(range(rank)))
    return [ctx.b.permute(ctx.x(0), [int(p) for p in perm])]


def reshape_target(ctx: NodeContext, in_shape: Sequence[int], shape: Sequence[int], allowzero: bool) -> list[int]:
    """ONNX Reshape's target: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    out = [int(in_shape[i]) if s == 0 and not allowzero else int(s) for i, s in enumerate(shape)]
    if out.count(-1) > 1:
        raise ctx.unsupported(f"shape {list(shape)} has more than one -1")
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        total = math.prod(in_shape)
        out[out.index(-1)] = total // known if known else 0
    if math.prod(out) != math.prod(in_shape):
        raise ctx.unsupported(f"cannot reshape {tuple(in_shape)} to {list(shape)}")
    return out


@rule("Reshape")
def reshape(ctx: NodeContext):
    shape = int_list(ctx, "shape", 1, "shape")
    if shape is None:
        raise ctx.unsupported("no target shape")
    out = reshape_target(ctx, ctx.shape(0), shape, bool(ctx.attr("allowzero", 0)))
    return [ctx.b.reshape(ctx.x(0), out)]


@rule("Flatten")
def flatten(ctx: NodeContext):
    s = ctx.shape(0)
    axis = ctx.attr("axis", 1)
    axis = axis + len(s) if axis < 0 else axis
    return [ctx.b.reshape(ctx.x(0), (math.prod(s[:axis]), math.prod(s[axis:])))]


@rule("Squeeze")
def squeeze(ctx: NodeContext):
    s = ctx.shape(0)
    axes = int_list(ctx, "axes", 1, "axes")
    if axes is None:
        axes = [d for d, n in enumerate(s) if n == 1]
    axes = {norm_axis(ctx, a, len(s)) for a in axes}
    for a in axes:
        if s[a] != 1:
            raise ctx.unsupported(f"cannot squeeze axis {a} of size {s[a]}")
    return [ctx.b.reshape(ctx.x(0), [n for d, n in enumerate(s) if d not in axes])]


@rule("Unsqueeze")
def unsqueeze(ctx: NodeContext):
    s = list(ctx.shape(0))
    axes = int_list(ctx, "axes", 1, "axes")
    if axes is None:
        raise ctx.unsupported("no axes")
    rank = len(s) + len(axes)
    axes = sorted({norm_axis(ctx, a, rank) for a in axes})
    for a in axes:
        s.insert(a, 1)
    return [ctx.b.reshape(ctx.x(0), s)]


@rule("Expand")
def expand(ctx: NodeContext):
    shape = [int(d) for d in ctx.require_const(1, "shape").reshape(-1)]
    try:
        out = np.broadcast_shapes(ctx.shape(0), tuple(shape))
    except ValueError:
        raise ctx.unsupported(f"cannot expand {ctx.shape(0)} to {shape}") from None
    return [ctx.b.broadcast_to(ctx.x(0), out)]


def _block_args(ctx: NodeContext) -> tuple[int, int, int, int, int, str]:
    s = ctx.shape(0)
    if len(s) != 4:
        raise ctx.unsupported(f"expects a rank-4 input, got {s}")
    return (*s, int(ctx.attr("blocksize")), ctx.attr_str("mode", "DCR"))


@rule("DepthToSpace")
def depth_to_space(ctx: NodeContext):
    n, c, h, w, bs, mode = _block_args(ctx)
    cc = c // (bs * bs)
    if mode == "DCR":
        tmp, perm = (n, bs, bs, cc, h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp, perm = (n, cc, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise ctx.unsupported(f"unknown mode {mode!r}")
    return [_reshape_permute_reshape(ctx, tmp, perm, (n, cc, h * bs, w * bs))]


@rule("SpaceToDepth")
def space_to_depth(ctx: NodeContext):
    n, c, h, w, bs, mode = _block_args(ctx)
    tmp = (n, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        perm = (0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        perm = (0, 1, 3, 5, 2, 4)
    else:
        raise ctx.unsupported(f"unknown mode {mode!r}")
    return [_reshape_permute_reshape(ctx, tmp, perm, (n, c * bs * bs, h // bs, w // bs))]


def _reshape_permute_reshape(ctx: NodeContext, tmp, perm, final) -> ValueId:
    m1 = layout.reshape(ctx.shape(0), tmp)
    m2 = layout.permute(tmp, perm)
    m3 = layout.reshape(m2.out_shape, final)
    return view_chain(ctx.b, ctx.x(0), [m1, m2, m3])
