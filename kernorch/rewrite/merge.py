"""Horizontal merge of linear prims that share an input: ``x @ Wq, x @ Wk, x @ Wv`` become
``x @ concat(Wq, Wk, Wv)`` followed by slice views (Q/K/V projections); convolutions of one input
with equal attributes concatenate their filters. ``merge_linear`` merges constant weights (the
concatenation is a new constant); ``merge_linear_concat`` also merges computed weights through a
CONCAT prim, which costs a copy of the weights on every run."""

from __future__ import annotations

import numpy as np

from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement


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
    group = []
    for q in ctx.users(x):
        if q.op is not Op.MATMUL or q.inputs[0] != x or q.inputs[1] == x:
            continue
        qt = ctx.type(q.inputs[1])
        if qt.dtype != wt.dtype or qt.shape[:-1] != wt.shape[:-1]:
            continue
        group.append(q)
    if len(group) < 2:
        return None
    group.sort(key=lambda q: ctx.position(q.output))
    weights = [q.inputs[1] for q in group]
    b = ctx.builder()
    if constant:
        arrays = [_weight(ctx, v) for v in weights]
        if any(a is None for a in arrays):
            return None
        wcat = b.constant(np.concatenate(arrays, axis=-1))
    else:
        members = {q.output for q in group}
        if any(ctx.depends_on(v, members) for v in weights):
            return None
        wcat = b.concat(weights, axis=len(wt.shape) - 1)
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
    if len(group) < 2:
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
