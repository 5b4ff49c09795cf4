"""A 1x1 convolution moved before the upsampling that feeds it.

A 1x1 convolution (groups 1, stride 1, no pads) mixes channels only; an upsampling (Resize's
nearest, linear or cubic modes, after fission) mixes pixels only, each channel alike: gathers
along the spatial axes, products with coefficients that do not vary over channels, sums. Both are
linear, so they commute: conv(up(x)) = up(conv(x)), and the convolution then runs on the small
map. Segmentation decoders (SegFormer's all-MLP head, FPN/UPerNet-style fuse layers) upsample
several maps, concatenate them over channels and fuse them with a 1x1 convolution; a convolution
of a concatenation is the sum of the convolutions of its pieces (the weight cut by input
channels), so each upsampled piece gets its own convolution before its upsampling. On SegFormer-B0
(512x512) that turns the 1024->256 fuse at 128x128 (8.6 GFLOP) into 2.9 GFLOP.

The upsampling is recognised structurally, not by name: a chain of prims from one source value
in which every view keeps the channel axis in place (and reads nothing else from it), every
product has one coefficient operand (a constant broadcast along channels) and every sum adds two
chain values. The chain is replayed on the convolution's output with the channel count changed;
nothing else about it needs to be known. It is rewritten only when it enlarges the map (the
source has fewer pixels than its result), so the convolution's work shrinks.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.rewrite.driver import Ctx, Replacement

_LINEAR_SUMS = (Op.ADD, Op.SUB)


def conv_before_upsample(p: Prim, ctx: Ctx) -> Replacement | None:
    """``conv1x1(concat(up(a), .., x))`` -> ``up(conv1x1(a)) + .. + conv1x1(x)`` (weights cut by channels)."""
    if p.op is not Op.CONV or not _pointwise(p):
        return None
    x, w = p.inputs[:2]
    weight = ctx.const(w)
    if weight is None or set(weight.shape[2:]) != {1} or ctx.type(x).dtype not in ("float32", "float64"):
        return None
    if ctx.uses(x) != 1:
        return None
    q = ctx.producer(x)
    pieces = list(q.inputs) if q is not None and q.op is Op.CONCAT and q.attrs.axis == 1 else [x]
    chains = [_upsampling(ctx, v) for v in pieces]
    cout = weight.shape[0]
    if not any(c is not None and _pays(ctx, c, v, cout) for c, v in zip(chains, pieces)):
        return None
    b = ctx.builder()
    bias = p.inputs[2] if len(p.inputs) > 2 else None
    terms, start = [], 0
    for v, chain in zip(pieces, chains):
        cin = ctx.shape(v)[1]
        wv = b.constant(np.ascontiguousarray(weight[:, start:start + cin]))
        start += cin
        if chain is None:
            terms.append(b.conv(v, wv, bias, p.attrs))
            bias = None
        else:
            source, prims = chain
            terms.append(_replay(ctx, b, prims, source, b.conv(source, wv, None, p.attrs), cout))
    out = terms[0]
    for t in terms[1:]:
        out = b.binary(Op.ADD, out, t)
    if bias is not None:
        out = b.binary(Op.ADD, out, b.reshape(bias, (1, cout) + (1,) * (len(ctx.shape(x)) - 2)))
    return ctx.replace(b, out)


def _pointwise(p: Prim) -> bool:
    a = p.attrs
    return a.groups == 1 and set(a.strides) == {1} and set(a.dilations) == {1} and not any(a.pads)


def _pays(ctx: Ctx, chain, result: ValueId, cout: int) -> bool:
    """The convolution shrinks (the source has fewer pixels) by more than the chain grows (it
    carries ``cout`` channels instead of ``cin``; an upsampled element, written to memory, is
    counted as 4 multiply-adds)."""
    source, _ = chain
    cin = ctx.shape(result)[1]
    small, big = math.prod(ctx.shape(source)[2:]), math.prod(ctx.shape(result)[2:])
    saved = cout * cin * (big - small)
    grown = 4 * big * max(0, cout - cin)
    return small < big and saved > grown


def _upsampling(ctx: Ctx, result: ValueId) -> tuple[ValueId, list[Prim]] | None:
    """(source, prims in graph order) when ``result`` is a channel-wise linear chain of one source
    value whose intermediate values are read only inside the chain; else None."""
    if ctx.uses(result) != 1:
        return None
    chain: dict[ValueId, Prim] = {}
    sources: set[ValueId] = set()
    stack = [result]
    while stack:
        v = stack.pop()
        if v in chain or v in sources:
            continue
        q = ctx.producer(v)
        operands = _linear_operands(ctx, q) if q is not None else None
        if operands is None:
            sources.add(v)
            continue
        chain[v] = q
        stack.extend(operands)
    if not chain or len(sources) != 1:
        return None
    source = next(iter(sources))
    if ctx.shape(source)[:2] != ctx.shape(result)[:2] or ctx.type(source).dtype != ctx.type(result).dtype:
        return None
    inside = set(chain)
    for v in inside - {result}:
        if ctx.is_output(v) or any(u.output not in inside for u in ctx.users(v)):
            return None
    return source, sorted(chain.values(), key=lambda q: ctx.position(q.output))


def _linear_operands(ctx: Ctx, q: Prim) -> list[ValueId] | None:
    """The operands of ``q`` that must themselves be chain values, when ``q`` is channel-wise linear."""
    if q.op is Op.VIEW:
        return [q.inputs[0]] if _keeps_channels(q.attrs.map) else None
    if q.op is Op.BROADCAST:
        ok = ctx.shape(q.inputs[0])[1:2] == ctx.shape(q.output)[1:2] and ctx.const(q.inputs[0]) is None
        return [q.inputs[0]] if ok else None
    if q.op is Op.MUL:
        lin = [v for v in q.inputs if _coefficient(ctx, v) is None]
        return lin if len(lin) == 1 else None
    if q.op in _LINEAR_SUMS:
        return list(q.inputs) if all(_coefficient(ctx, v) is None for v in q.inputs) else None
    return None


def _keeps_channels(m) -> bool:
    if len(m.out_shape) != len(m.in_shape) or len(m.out_shape) < 3 or m.out_shape[1] != m.in_shape[1]:
        return False
    if m.index[1] != ix.var(1) or (m.mask and m.pad != 0):  # a nonzero pad is not linear
        return False
    others = [e for d, e in enumerate(m.index) if d != 1] + [c.expr for c in m.mask]
    return all(1 not in ix.free_vars(e) for e in others)


def _coefficient(ctx: Ctx, v: ValueId) -> ValueId | None:
    """The constant behind ``v`` when ``v`` is a constant broadcast along channels (one channel)."""
    q = ctx.producer(v)
    if q is None or q.op is not Op.BROADCAST:
        return None
    c = q.inputs[0]
    if ctx.shape(c)[1:2] != (1,) or ctx.const_value(c, ctx.options.const_probe_elements) is None:
        return None
    return c


def _replay(ctx: Ctx, b: Builder, prims: list[Prim], source: ValueId, start: ValueId, channels: int) -> ValueId:
    """Rebuild ``prims`` (a chain from ``source``) on ``start``, which has ``channels`` channels."""
    new = {source: start}

    def widened(shape):
        return (shape[0], channels) + tuple(shape[2:])

    for q in prims:
        if q.op is Op.VIEW:
            m = q.attrs.map
            m = dataclasses.replace(m, out_shape=widened(m.out_shape), in_shape=widened(m.in_shape))
            new[q.output] = b.view(new[q.inputs[0]], m)
        elif q.op is Op.BROADCAST:
            new[q.output] = b.broadcast_to(new[q.inputs[0]], widened(q.attrs.shape))
        elif q.op is Op.MUL:
            a, c = q.inputs
            shape = widened(ctx.shape(q.output))
            operands = [b.broadcast_to(_coefficient(ctx, v), shape) if v not in new else new[v] for v in (a, c)]
            new[q.output] = b.binary(Op.MUL, *operands)
        else:
            new[q.output] = b.binary(q.op, new[q.inputs[0]], new[q.inputs[1]])
    return new[prims[-1].output]
