"""A hypothesis strategy for random small, valid primitive graphs that contain what the rewrite
rules look for: elementwise/reduce/broadcast/view/matmul/concat prims, constants and constant-only
chains, duplicated prims, view chains, identity views, conv + per-channel affine, projections that
share an input, sums over trailing axes and divisions by row sums before a matmul."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import BroadcastAttrs, ConvAttrs, Op, ViewAttrs


def any_rank(v):
    return True


SHAPES = [(2, 3, 4), (3, 4), (4, 4), (2, 2, 3), (2, 3, 4, 4), (6,)]
UNARY = [Op.NEG, Op.ABS, Op.TANH, Op.SIGMOID, Op.RELU, Op.SIN]
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN]
STEPS = ["unary", "binary", "binary_const", "reduce", "softmaxish", "view", "view", "identity", "matmul",
         "matmul_shared", "div_matmul", "sum_last", "duplicate", "const_chain", "concat", "conv_bn", "conv_bn",
         "noop_broadcast", "double_broadcast"]


@st.composite
def prim_graphs(draw, max_steps: int = 10):
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    b = Builder()

    def const(shape):
        return b.constant(rng.uniform(-1.5, 1.5, size=shape).astype("float32"))

    pool = []
    for k in range(draw(st.integers(1, 2))):
        pool.append(b.input(draw(st.sampled_from(SHAPES)), name=f"in{k}"))

    def pick(pred=lambda v: True):
        cands = [v for v in pool if pred(v) and (b.shape(v) != () or pred is any_rank)]
        return draw(st.sampled_from(cands)) if cands else None

    for _ in range(draw(st.integers(3, max_steps))):
        step = draw(st.sampled_from(STEPS))
        new = _step(draw, b, rng, step, pick, const)
        pool += [] if new is None else new if isinstance(new, list) else [new]
    used = {v for p in b.g.prims for v in p.inputs}
    sinks = [p.output for p in b.g.prims if p.output not in used]
    outs = sinks[-4:] or [pool[0]]
    for v in draw(st.lists(st.sampled_from(pool), max_size=2)):
        if v not in outs:
            outs.append(v)
    b.g.outputs = outs
    for k, v in enumerate(outs):
        b.g.names.setdefault(v, f"out{k}")
    return b.g


def _step(draw, b: Builder, rng, step, pick, const):
    shape = b.shape
    if step == "unary":
        return b.unary(draw(st.sampled_from(UNARY)), pick(any_rank))
    if step == "binary":
        x = pick()
        y = pick(lambda v: shape(v) == shape(x))
        op = draw(st.sampled_from(BINARY + [Op.DIV]))
        if op is Op.DIV:
            y = b.binary(Op.ADD, b.unary(Op.ABS, y), b.scalar(1.0))
        return b.binary(op, x, y)
    if step == "binary_const":
        x = pick()
        c = draw(st.sampled_from(["scalar", "one", "zero", "full", "row"]))
        if c == "scalar":
            k = b.scalar(float(rng.uniform(0.5, 2.0)))
        elif c in ("one", "zero"):
            k = b.constant(np.full(shape(x)[-1:], 1.0 if c == "one" else 0.0, dtype="float32"))
        elif c == "full":
            k = const(shape(x))
        else:
            k = const(shape(x)[-1:])
        op = draw(st.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.DIV]))
        if op is Op.DIV:
            k = b.binary(Op.ADD, b.unary(Op.ABS, k), b.scalar(1.0))
        return b.binary(op, x, k) if draw(st.booleans()) or op in (Op.SUB, Op.DIV) else b.binary(op, k, x)
    if step == "reduce":
        x = pick()
        r = len(shape(x))
        axes = draw(st.lists(st.integers(0, r - 1), min_size=1, max_size=r, unique=True))
        return b.reduce(draw(st.sampled_from([Op.SUM, Op.RMAX])), x, axes, keepdims=draw(st.booleans()))
    if step == "softmaxish":
        x = b.unary(Op.TANH, pick())
        e = b.unary(Op.EXP, b.binary(Op.SUB, x, b.reduce(Op.RMAX, x, [-1])))
        return b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [-1]))
    if step == "view":
        return _view(draw, b, pick())
    if step == "identity":
        x = pick()
        return b.prim(Op.VIEW, [x], ViewAttrs(layout.identity(shape(x))))
    if step == "double_broadcast":
        x = pick()
        s = shape(x)
        r = b.reduce(Op.RMAX, x, range(len(s)))
        mid = b.broadcast_to(r, s[:1] + (1,) * (len(s) - 1))
        return b.binary(Op.SUB, x, b.broadcast_to(mid, s))
    if step == "noop_broadcast":
        x = pick()
        return b.prim(Op.BROADCAST, [x], BroadcastAttrs(shape(x)))
    if step in ("matmul", "matmul_shared"):
        x = pick(lambda v: len(shape(v)) >= 2)
        if x is None:
            return None
        k = shape(x)[-1]
        return [b.matmul(x, const((k, draw(st.integers(1, 4))))) for _ in range(1 if step == "matmul" else 3)]
    if step == "div_matmul":
        x = pick(lambda v: len(shape(v)) >= 2)
        if x is None:
            return None
        e = b.unary(Op.EXP, b.unary(Op.TANH, x))
        left = draw(st.booleans())
        axis = -1 if left else -2
        how = draw(st.sampled_from(["sum", "row", "col", "scalar", "full", "value"]))
        if how == "sum":
            r = b.reduce(Op.SUM, e, [axis])
        elif how in ("row", "col"):
            r = b.binary(Op.ADD, b.unary(Op.ABS, const(shape(e)[-1:] if how == "row" else shape(e)[-2:-1] + (1,))),
                         b.scalar(1.0))
        elif how == "scalar":
            r = b.scalar(1.5)
        elif how == "full":
            r = b.binary(Op.ADD, b.unary(Op.ABS, const(shape(e))), b.scalar(1.0))
        else:
            r = b.binary(Op.ADD, b.unary(Op.SIGMOID, e), b.scalar(1.0))
        p = b.binary(draw(st.sampled_from([Op.DIV, Op.MUL])), e, r)
        if left:
            return b.matmul(p, const((shape(x)[-1], draw(st.integers(1, 2)))))
        return b.matmul(const((draw(st.integers(1, 2)), shape(x)[-2])), p)
    if step == "sum_last":
        x = pick()
        r = len(shape(x))
        n = draw(st.integers(1, r))
        return b.reduce(Op.SUM, x, list(range(r - n, r)), keepdims=draw(st.booleans()))
    if step == "duplicate":
        if not b.g.prims:
            return None
        p = draw(st.sampled_from(b.g.prims))
        return b.prim(p.op, p.inputs, p.attrs)
    if step == "const_chain":
        x = pick(lambda v: len(shape(v)) >= 2)
        if x is None:
            return None
        k = shape(x)[-1]
        w = b.permute(const((3, k)), (1, 0))
        w = b.binary(Op.MUL, w, b.scalar(0.5))
        return b.matmul(x, w)
    if step == "concat":
        x = pick()
        axis = draw(st.integers(0, len(shape(x)) - 1))
        y = pick(lambda v: len(shape(v)) == len(shape(x))
                 and all(a == c for d, (a, c) in enumerate(zip(shape(v), shape(x))) if d != axis))
        cat = b.concat([x, y], axis)
        n = shape(x)[axis]
        starts = [0] * len(shape(x))
        starts[axis] = draw(st.sampled_from([0, n]))
        part = list(shape(x) if starts[axis] == 0 else shape(y))
        return b.view(cat, layout.slice_(shape(cat), starts, [1] * len(starts), part))
    if step == "conv_bn":
        x = pick(lambda v: len(shape(v)) == 4)
        if x is None:
            return None
        c = shape(x)[1]
        co = draw(st.integers(1, 3))
        bias = const((co,)) if draw(st.booleans()) else None
        y = b.conv(x, const((co, c, 3, 3)), bias, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
        y = b.binary(Op.MUL, y, b.reshape(const((co,)), (co, 1, 1)))
        return b.binary(Op.ADD, y, const((co, 1, 1)))
    raise AssertionError(step)


def _view(draw, b: Builder, x):
    s = b.shape(x)
    kind = draw(st.sampled_from(["permute", "flatten", "split", "slice", "flip", "pad", "chain"]))
    if kind == "permute":
        return b.permute(x, draw(st.permutations(range(len(s)))))
    if kind == "flatten":
        return b.reshape(x, (math.prod(s),))
    if kind == "split":
        n = math.prod(s)
        d = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
        return b.reshape(x, (d, n // d))
    if kind == "slice":
        starts = [draw(st.integers(0, n - 1)) for n in s]
        out = [n - st_ for n, st_ in zip(s, starts)]
        return b.view(x, layout.slice_(s, starts, [1] * len(s), out))
    if kind == "flip":
        return b.view(x, layout.flip(s, [len(s) - 1]))
    if kind == "pad":
        return b.view(x, layout.pad(s, [0] * (len(s) - 1) + [1], [0] * (len(s) - 1) + [1], "constant", 0.0))
    y = b.permute(x, list(reversed(range(len(s)))))
    return b.permute(y, list(reversed(range(len(s)))))
