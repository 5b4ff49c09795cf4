"""Horizontal merge of linear prims that share an input: ``x @ Wq, x @ Wk, x @ Wv`` become
``x @ concat(Wq, Wk, Wv)`` followed by slice views (Q/K/V projections); convolutions of one input
with equal attributes concatenate their filters when one is narrow (MERGE_CONV_BELOW_CHANNELS). ``merge_linear`` merges constant weights (the
concatenation is a new constant); ``merge_linear_concat`` also merges computed weights through a
CONCAT prim, which costs a copy of the weights on every run. Weights of different batch shapes are
broadcast to one first: in attention, ``e @ V`` and the softmax row sum ``e @ ones`` (after
``sum_to_matmul``) become ``e @ concat(V, ones)``, Korch's attention case."""

from __future__ import annotations

import math

import numpy as np

from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement


# Convolutions merge only when one of them has fewer output channels than this: a GEMM tile is
# 32 channels wide, so narrow ones fill each other's tiles, while wide ones gain nothing and the
# merged output's slices cannot take their own epilogues (a relu on one slice is a pass of its
# own). ResNet-50's downsample + conv1 (256 and 64 channels at 56x56) ran 1.02-1.06x faster
# unmerged end to end (three alternated A/Bs of one plan compiled both ways).
MERGE_CONV_BELOW_CHANNELS = 32


def merge_linear(p: Prim, ctx: Ctx) -> Replacement | None:
    if p.op is Op.MATMUL:
        return _merge_matmuls(p, ctx, constant=True)
    if p.op is Op.CONV:
        return _merge_convs(p, ctx)
    return None


def merge_linear_concat(p: Prim, ctx: Ctx) -> Replacement | None:
    return _merge_matmuls(p, ctx, constant=False) if p.op is Op.MATMUL else None


def _weight(ctx: Ctx, v: ValueId) -> np.ndarray | None:
    return ctx.const_value(v, ctx.options.fold_max_elements)


def _slices(ctx: Ctx, b: Builder, merged: ValueId, group: list[Prim], axis: int) -> Replacement:
    """Slice views of ``merged`` along ``axis``, one per member, replacing the members' outputs."""
    shape = ctx.shape(merged)
    extra: dict[ValueId, ValueId] = {}
    off = 0
    for q in group:
        out_shape = ctx.shape(q.output)
        starts = [0] * len(shape)
        starts[axis] = off
        extra[q.output] = b.view(merged, layout.slice_(shape, starts, [1] * len(shape), out_shape))
        off += out_shape[axis]
    return ctx.replace(b, None, extra)


def _merge_matmuls(p: Prim, ctx: Ctx, constant: bool) -> Replacement | None:
    x, w = p.inputs
    wt = ctx.type(w)
    out_lead = ctx.shape(p.output)[:-1]
    group = []
    for q in ctx.users(x):
        if q.op is not Op.MATMUL or q.inputs[0] != x or q.inputs[1] == x:
            continue
        qt = ctx.type(q.inputs[1])
        if qt.dtype != wt.dtype or qt.shape[-2] != wt.shape[-2]:
            continue
        if ctx.shape(q.output)[:-1] != out_lead:
            continue
        group.append(q)
    if len(group) < 2:
        return None
    group.sort(key=lambda q: ctx.position(q.output))
    weights = [q.inputs[1] for q in group]
    # Note [weights of different batch shapes]: ``e @ V`` (V: [B, H, K, N]) and ``e @ ones[K, 1]``
    # (a sum turned into a matmul) share ``e`` and their outputs' leading dims; the weights are
    # broadcast to one batch shape before they are concatenated along the last axis.
    batch = tuple(np.broadcast_shapes(*(ctx.shape(v)[:-2] for v in weights)))
    b = ctx.builder()
    if constant:
        arrays = [_weight(ctx, v) for v in weights]
        if any(a is None for a in arrays):
            return None
        if sum(math.prod(batch + a.shape[-2:]) for a in arrays) > ctx.options.fold_max_elements:
            return None
        wcat = b.constant(np.concatenate([np.broadcast_to(a, batch + a.shape[-2:]) for a in arrays], axis=-1))
    else:
        members = {q.output for q in group}
        if any(ctx.depends_on(v, members) for v in weights):
            return None
        wcat = b.concat([b.broadcast_to(v, batch + ctx.shape(v)[-2:]) for v in weights], axis=len(batch) + 1)
    merged = b.matmul(x, wcat)
    return _slices(ctx, b, merged, group, len(ctx.shape(merged)) - 1)


def _merge_convs(p: Prim, ctx: Ctx) -> Replacement | None:
    x, w = p.inputs[:2]
    wt = ctx.type(w)
    if p.attrs.groups != 1:
        return None
    group = []
    for q in ctx.users(x):
        if q.op is not Op.CONV or q.inputs[0] != x or q.attrs != p.attrs or q.inputs[1] == x:
            continue
        qt = ctx.type(q.inputs[1])
        if qt.dtype == wt.dtype and qt.shape[1:] == wt.shape[1:] and ctx.type(q.output).dtype == wt.dtype:
            group.append(q)
    if len(group) < 2 or all(ctx.shape(q.inputs[1])[0] >= MERGE_CONV_BELOW_CHANNELS for q in group):
        return None
    group.sort(key=lambda q: ctx.position(q.output))
    ws, bs = [], []
    for q in group:
        wq = _weight(ctx, q.inputs[1])
        bq = _weight(ctx, q.inputs[2]) if len(q.inputs) > 2 else np.zeros(ctx.shape(q.inputs[1])[0], wt.dtype)
        if wq is None or bq is None:
            return None
        ws.append(wq)
        bs.append(bq.astype(wt.dtype))
    b = ctx.builder()
    has_bias = any(len(q.inputs) > 2 for q in group)
    wv = b.constant(np.concatenate(ws, axis=0))
    bv = b.constant(np.concatenate(bs)) if has_bias else None
    merged = b.conv(x, wv, bv, p.attrs)
    return _slices(ctx, b, merged, group, 1)
