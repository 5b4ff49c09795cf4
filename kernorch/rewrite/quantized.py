"""Integer linear prims for quantized models (QDQ, frontend/quantize.py): the scales move out of the
products, so a convolution or matmul multiplies the integers themselves.

A QDQ model computes ``linear((xq - zx) * sx, (wq - zw) * sw) + bias``: a dequantized activation
times a dequantized constant weight. With a per-tensor activation scale ``sx`` and a weight scale
``sw`` that varies only along the output channel, that equals

    linear(xq - zx, wq - zw) * (sx * sw) + bias

where both operands hold small integers (float32 values; the products are exact and their sums
are exact while they stay below 2^24, as in the integer kernels of onnxruntime or oneDNN). So the
linear prim reads integer-valued operands and the scaling, the bias, an activation and the
requantization of the next QuantizeLinear are elementwise prims after it: the epilogue the
orchestrator fuses, or that oneDNN's int8 convolution / matmul applies itself (providers/
onednn_int8.py: u8/s8 operands, int32 accumulation on VNNI / AMX).

Run before the other rewrites (the weight's dequantization is still a chain of prims on the int8
constant, before constant folding makes it a float constant). The result differs from the QDQ
model's float evaluation by float32 rounding only, which can move a value across a rounding
boundary of the next QuantizeLinear: one quantization step, as integer engines differ.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernorch.ir.graph import Builder, Graph, TensorType
from kernorch.ir.interp import eval_prim
from kernorch.ir.prims import Op, Prim, ValueId, ViewAttrs
from kernorch.ir.tensors import holds_int8
from kernorch.rewrite.dce import remove_dead
from kernorch.rewrite.patterns import without_prims


def integer_linear(g: Graph) -> tuple[Graph, int]:
    """A copy of ``g`` with every matching convolution / matmul on integer-valued operands as
    described above, and how many were rewritten."""
    out = without_prims(g)
    b = Builder(out)
    made = g.producers()
    n = 0
    for p in g.prims:
        m = _match(g, made, p) if p.op in (Op.CONV, Op.MATMUL) and g.types[p.output].dtype == "float32" else None
        if m is None:
            out.prims.append(p)
            continue
        x, sx, wq, sw = m
        b.origin = p.origin
        y = b.prim(p.op, (x, b.constant(wq)), p.attrs, g.types[p.output])
        shape = g.types[p.output].shape
        axis = 1 if p.op is Op.CONV else len(shape) - 1
        channel = [shape[axis] if d == axis else 1 for d in range(len(shape))]  # a vector along the channels
        scale = sx * sw
        scale = np.asarray(scale.reshape(()) if scale.size == 1 else scale.reshape(channel), np.float32)
        ops = b.broadcast_operands(y, b.constant(scale))
        if p.op is Op.CONV and len(p.inputs) > 2:  # the bias is added after the scaling
            y = b.prim(Op.MUL, ops)
            bias = b.reshape(p.inputs[2], channel)
            ops, op = b.broadcast_operands(y, bias), Op.ADD
        else:
            op = Op.MUL
        out.prims.append(Prim(op, tuple(ops), p.output, origin=p.origin))
        n += 1
    return out, n


def _match(g: Graph, made: dict[ValueId, Prim], p: Prim):
    """(the activation without its scale, that scale, the integer weight as float32, the weight
    scale per output channel or as one element) when ``p``'s weight is a dequantized constant,
    else None."""
    w = _dequantized_constant(g, made, p.inputs[1], 0 if p.op is Op.CONV else -1)
    if w is None:
        return None
    x, sx = p.inputs[0], np.float32(1.0)
    q = made.get(x)
    if q is not None and q.op is Op.MUL:
        s = _constant(g, made, q.inputs[1])
        if s is not None and s.size == 1 and g.types[q.inputs[1]].shape == ():
            x, sx = q.inputs[0], np.float32(s.reshape(()))
    return (x, sx, *w)


def _dequantized_constant(g: Graph, made: dict[ValueId, Prim], v: ValueId, axis: int):
    """(``q - zp`` as float32, the scale per output channel along ``axis``, or one element) when
    ``v`` is DequantizeLinear's ``(cast(q) - zp) * scale`` of an integer constant ``q``, possibly
    seen through views (Gemm's transposed weight), with a scale constant except along ``axis``."""
    full = _dequantized(g, made, v)
    if full is None:
        return None
    wq, scale = full
    axis %= wq.ndim
    if wq.ndim < 2 or np.abs(wq).max(initial=0) > 255:
        return None
    sw = np.moveaxis(scale, axis, 0).reshape(wq.shape[axis], -1)
    if not np.all(sw == sw[:, :1]):  # the scale varies along another axis than the output channels
        return None
    sw = sw[:, 0]
    return wq, (sw[:1] if np.all(sw == sw[0]) else sw).astype(np.float32)


def _dequantized(g: Graph, made: dict[ValueId, Prim], v: ValueId) -> tuple[np.ndarray, np.ndarray] | None:
    """(``q - zp``, ``scale``), both as float32 arrays of ``v``'s shape, when ``v`` is a
    dequantized integer constant or a view of one."""
    mul = made.get(v)
    if mul is not None and mul.op is Op.VIEW:
        inner = _dequantized(g, made, mul.inputs[0])
        if inner is None:
            return None
        t = g.types[v]
        return tuple(np.asarray(eval_prim(mul, [a], t.dtype, t.shape)) for a in inner)
    if mul is None or mul.op is not Op.MUL:
        return None
    scale = _constant(g, made, mul.inputs[1])
    t = made.get(mul.inputs[0])
    if scale is None or t is None:
        return None
    zp = np.zeros((), np.float32)
    if t.op is Op.SUB:
        zp = _constant(g, made, t.inputs[1])
        t = made.get(t.inputs[0])
        if zp is None or t is None:
            return None
    if t.op is not Op.CAST or t.inputs[0] not in g.constants:
        return None
    qv = np.asarray(g.constants[t.inputs[0]])
    if qv.dtype.kind not in "iu":
        return None
    shape = g.types[v].shape
    wq = np.broadcast_to(qv.astype(np.float32) - zp, shape).astype(np.float32)
    return wq, np.broadcast_to(np.asarray(scale, np.float32), shape)


def _constant(g: Graph, made: dict[ValueId, Prim], v: ValueId) -> np.ndarray | None:
    """The value of ``v`` when it is a constant or a broadcast of one (unexpanded), else None."""
    if v in g.constants:
        return np.asarray(g.constants[v])
    q = made.get(v)
    if q is not None and q.op is Op.BROADCAST and q.inputs[0] in g.constants:
        return np.asarray(g.constants[q.inputs[0]])
    return None


def split_dequantized(g: Graph) -> tuple[Graph, int]:
    """A copy of ``g`` in which every integer convolution / matmul (after ``integer_linear``) reads
    a dequantization ``cast(xq) [- zx]`` of its own, and how many were given one.

    A QDQ model dequantizes a tensor once for all its readers: a ResNet block's input feeds its
    first convolution (or the downsampling one) and the residual add. Shared, that float32 value is
    an output of any kernel computing it, so an int8 convolution kernel (which reads ``xq`` itself,
    providers/onednn_int8.py) had to write it as well, and the plans kept such convolutions in
    float32. A copy per convolution costs nothing (it is computed where it is read); cse would
    merge the copies back, so this runs after the rewrites."""
    made, readers = g.producers(), g.consumers()
    out = without_prims(g)
    b = Builder(out)
    n = 0
    for p in g.prims:
        chain = _shared_dequantization(g, made, readers, p)
        if chain:
            b.origin = p.origin
            v = chain[0].inputs[0]
            for q in chain:
                v = b.prim(q.op, (v, *q.inputs[1:]), q.attrs, g.types[q.output])
            p = Prim(p.op, (v, *p.inputs[1:]), p.output, p.attrs, p.origin)
            n += 1
        out.prims.append(p)
    return out, n


def _shared_dequantization(g: Graph, made: dict[ValueId, Prim], readers: dict[ValueId, list[Prim]],
                           p: Prim) -> list[Prim]:
    """``[cast, sub]`` (or ``[cast]``) when ``p`` is an integer linear prim reading ``cast(xq) [- zx]``
    of integers ``xq`` and another prim reads that chain too, else []."""
    if p.op not in (Op.CONV, Op.MATMUL) or p.inputs[1] not in g.constants or not holds_int8(g.constants[p.inputs[1]]):
        return []
    chain, q = [], made.get(p.inputs[0])
    if q is not None and q.op is Op.SUB and q.inputs[1] in g.constants and g.types[q.inputs[1]].shape == ():
        chain, q = [q], made.get(q.inputs[0])
    if q is None or q.op is not Op.CAST or g.types[q.inputs[0]].dtype not in ("uint8", "int8"):
        return []
    chain.insert(0, q)
    shared = any(len(readers.get(c.output, [])) > 1 or c.output in g.outputs for c in chain)
    return chain if shared else []


def integer_max_pools(g: Graph) -> tuple[Graph, int]:
    """A copy of ``g`` in which a max pooling (a window view and a max over it) of a dequantized
    tensor ``(cast(xq) [- zx]) * s`` with ``s > 0`` pools the integers ``xq`` and dequantizes the
    result, and how many were moved.

    Exact: dequantization is non-decreasing, so it commutes with max, and the window's padding
    (the integers' lowest value instead of -inf) never wins a window that holds a real element.
    The pooling then moves a quarter of the bytes, and an int8 plan keeps its integers (ResNet's
    stem: a float32 pooling between two int8 convolutions)."""
    made, readers = g.producers(), g.consumers()
    out = without_prims(g)
    b = Builder(out)
    n = 0
    for p in g.prims:
        chain = _pooled_dequantization(g, made, readers, p)
        if chain is None:
            out.prims.append(p)
            continue
        window, cast, rest = chain
        xq, dt = cast.inputs[0], g.types[cast.inputs[0]].dtype
        b.origin = p.origin
        m = dataclasses.replace(window.attrs.map, pad=float(np.iinfo(dt).min))
        w = b.prim(Op.VIEW, (xq,), ViewAttrs(m), TensorType(g.types[window.output].shape, dt))
        v = b.prim(Op.RMAX, (w,), p.attrs, TensorType(g.types[p.output].shape, dt))
        v = b.prim(Op.CAST, (v,), cast.attrs, g.types[p.output])
        for q in rest[:-1]:
            v = b.prim(q.op, (v, q.inputs[1]), q.attrs, g.types[p.output])
        out.prims.append(Prim(rest[-1].op, (v, rest[-1].inputs[1]), p.output, rest[-1].attrs, p.origin))
        n += 1
    return (remove_dead(out)[0] if n else out), n


def _pooled_dequantization(g: Graph, made: dict[ValueId, Prim], readers: dict[ValueId, list[Prim]], p: Prim):
    """(the window view, the cast, [sub,] mul) when ``p`` is a max over a window view, read by
    ``p`` only, of ``(cast(xq) [- zx]) * s`` with integers ``xq``, scalar constants and ``s > 0``."""
    window = made.get(p.inputs[0]) if p.op is Op.RMAX else None
    if window is None or window.op is not Op.VIEW or len(readers.get(window.output, [])) != 1:
        return None
    if (window.attrs.map.mask and window.attrs.map.pad != -np.inf) or window.output in g.outputs:
        return None  # a padding that could win a window
    rest, q = [], made.get(window.inputs[0])
    for op in (Op.MUL, Op.SUB):
        if q is not None and q.op is op and _scalar_constant(g, q.inputs[1]) is not None:
            rest.insert(0, q)
            q = made.get(q.inputs[0])
    if not rest or rest[-1].op is not Op.MUL or not _scalar_constant(g, rest[-1].inputs[1]) > 0:
        return None
    if q is None or q.op is not Op.CAST or g.types[q.inputs[0]].dtype not in ("uint8", "int8"):
        return None
    return window, q, rest


def _scalar_constant(g: Graph, v: ValueId) -> float | None:
    c = g.constants.get(v)
    return float(np.asarray(c).reshape(())) if c is not None and np.asarray(c).shape == () else None


def after_cleanups(g: Graph) -> tuple[Graph, dict[str, int]]:
    """The int8 rewrites that run on the cleaned graph (cse would merge ``split_dequantized``'s
    copies back), with how many places each changed."""
    g, split = split_dequantized(g)
    g, pools = integer_max_pools(g)
    return g, {"split_dequantized": split, "integer_max_pools": pools}
