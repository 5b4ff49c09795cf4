"""int8 linear steps on oneDNN (``torch.ops.onednn.qconv_pointwise`` / ``qlinear_pointwise``, the
ops Inductor's x86 int8 path uses): u8 activations with a zero point, s8 weights prepacked once,
int32 accumulation on VNNI / AMX, then scale, bias, ReLU and the requantization to u8 in one call.

It runs the prims of a quantized model after rewrite/quantized.py, inside one kernel:

    xf = cast(xq: uint8) [- zx]          the activation's integers, shifted by its zero point
    y  = conv(xf, Wq) | matmul(xf, Wq)   Wq: a constant of integers in [-128, 127]
    y  = y * c [+ bias] [relu]           c: one scale, or one per output channel
    [yq = cast(min(max(round(y / sy) [+ zy], 0), 255), uint8)]   the next QuantizeLinear

oneDNN computes ``acc * c + bias`` exactly as the prims do (up to float32 rounding) and
requantizes by multiplying with 1/sy where the prims divide by sy: a value on a rounding boundary
may land one step away, which the oracle allows for a quantized output (ir/oracle.py). A kernel
that does not have this shape returns None and the float32 steps run instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.ir.tensors import holds_int8
from kernorch.providers.activations import activation_after
from kernorch.providers.onednn import identity_views


@dataclass
class _Epilogue:
    """What the step computes after the integer product, and the value it writes."""

    out: ValueId
    scale: np.ndarray  # per output channel
    bias: torch.Tensor | None = None  # per output channel
    relu: bool = False
    out_scale: float = 1.0
    out_zp: int = 0
    out_dtype: torch.dtype = torch.float32
    skipped: list[ValueId] = field(default_factory=list)  # the values the step computes in passing


def conv_step(b, p: Prim, x: ValueId, padding: list[int], fixed: dict[int, torch.Tensor]) -> tuple[Callable, ValueId] | None:
    """A 2-D convolution of a quantized model as one int8 oneDNN call, or None."""
    a = p.attrs
    src = _activation(b, x)
    w = _integer_weight(fixed.get(b.s(p.inputs[1])))
    if src is None or w is None or len(b.sub.types[p.output].shape) != 4:
        return None
    n = b.sub.types[p.output].shape[1]
    epi = _epilogue(b, p, n, 1)
    if epi is None:
        return None
    xq, zx = _commit(b, src, epi)
    stride, dilation = list(a.strides), list(a.dilations)
    zeros = torch.zeros(n, dtype=torch.int64)
    scales = torch.tensor(epi.scale)
    packed = torch.ops.onednn.qconv_prepack(w, scales, 1.0, zx, stride, padding, dilation, a.groups,
                                            list(b.sub.types[x].shape))
    xs, o = b.s(xq), b.s(epi.out)
    attr = "relu" if epi.relu else "none"
    b.notes.append(f"oneDNN int8 conv (u8 x s8{', relu' if epi.relu else ''}, "
                   f"{'requantized to u8' if epi.out_dtype == torch.uint8 else 'float32 out'})")
    conv = torch.ops.onednn.qconv_pointwise

    def run(e):  # NHWC in (free when a layout pair's view hands it over), NHWC out
        e[o] = conv(e[xs].contiguous(memory_format=torch.channels_last), 1.0, zx, packed, scales, zeros, epi.bias,
                    stride, padding, dilation, a.groups, epi.out_scale, epi.out_zp, epi.out_dtype, attr, [], "")
    return run, epi.out


def linear_step(b, p: Prim, fixed: dict[int, torch.Tensor]) -> tuple[Callable, ValueId] | None:
    """``x @ Wq`` of a quantized model (a constant 2-D Wq) as one int8 oneDNN call, or None."""
    src = _activation(b, p.inputs[0])
    w = _integer_weight(fixed.get(b.s(p.inputs[1])))
    if src is None or w is None or w.dim() != 2:
        return None
    kdim, n = w.shape
    epi = _epilogue(b, p, n, len(b.sub.types[p.output].shape) - 1)
    if epi is None:
        return None
    xq, zx = _commit(b, src, epi)
    rows = max(1, b.sub.types[p.inputs[0]].size // kdim)
    packed = torch.ops.onednn.qlinear_prepack(w.t().contiguous(), [rows, kdim])
    zeros = torch.zeros(n, dtype=torch.int64)
    scales = torch.tensor(epi.scale)
    xs, o = b.s(xq), b.s(epi.out)
    out_shape = b.sub.types[p.output].shape
    attr = "relu" if epi.relu else "none"
    b.notes.append(f"oneDNN int8 linear (u8 x s8{', relu' if epi.relu else ''}, "
                   f"{'requantized to u8' if epi.out_dtype == torch.uint8 else 'float32 out'})")
    linear = torch.ops.onednn.qlinear_pointwise

    def run(e):
        y = linear(e[xs].reshape(-1, kdim), 1.0, zx, packed, scales, zeros, epi.bias, epi.out_scale, epi.out_zp,
                   epi.out_dtype, attr, [], "")
        e[o] = y.reshape(out_shape)
    return run, epi.out


def _commit(b, src: tuple[ValueId, int, list[ValueId]], epi: _Epilogue) -> tuple[ValueId, int]:
    """The step is taken: the prims it computes in passing are skipped by the builder."""
    b.skip.update(src[2])
    b.skip.update(epi.skipped)
    return src[0], src[1]


def _integer_weight(w: torch.Tensor | None) -> torch.Tensor | None:
    """The constant weight as int8 when it holds integers in [-128, 127], else None."""
    return w.to(torch.int8) if w is not None and w.dtype == torch.float32 and holds_int8(w.numpy()) else None


def _activation(b, x: ValueId) -> tuple[ValueId, int, list[ValueId]] | None:
    """(the uint8 value, its zero point, the values on the way that nothing else reads) when ``x``
    is ``cast(xq) [- zx]`` computed in this kernel from a uint8 ``xq``."""
    zx = 0
    p = b.prims.get(x)
    back = []  # a layout pair's two views on the way (rewrite/layouts.py), read in place
    while p is not None and p.op is Op.VIEW:
        back.insert(0, p)
        p = b.prims.get(p.inputs[0])
    if back and [q.output for q in identity_views(b, back[0].inputs[0])] != [q.output for q in back]:
        return None
    outward = back[::-1]  # the prims from the linear prim back to the cast
    if p is not None and p.op is Op.SUB:
        z = _scalar(b, p.inputs[1])
        if z is None or z != round(z) or not 0 <= z <= 255:
            return None
        outward.append(p)
        zx = int(z)
        p = b.prims.get(p.inputs[0])
    if p is None or p.op is not Op.CAST or b.sub.types[p.inputs[0]].dtype != "uint8":
        return None
    outward.append(p)
    skipped = []  # the step computes them in passing, as long as nothing else reads them
    for q in outward:
        if q.output in b.outputs or len(b.uses.get(q.output, [])) != 1:
            break
        skipped.append(q.output)
    return p.inputs[0], zx, skipped


def _epilogue(b, p: Prim, n: int, channel_dim: int) -> _Epilogue | None:
    """The scaling (required), bias, ReLU and requantization after linear prim ``p``, as far as
    they are there; the prims taken are skipped (their last value is what the step writes)."""
    taken: list[Prim] = identity_views(b, p.output)  # a layout pair's views, read in place
    mul = _only_reader(b, taken[-1].output if taken else p.output, taken)
    if mul is None or mul.op is not Op.MUL:
        return None
    found = _channel_constant(b, mul, mul.inputs[0], n, channel_dim)
    if found is None:
        return None
    taken.append(mul)
    epi = _Epilogue(mul.output, found[0], skipped=found[1])
    add = _only_reader(b, epi.out, taken)
    bias = _channel_constant(b, add, epi.out, n, channel_dim) if add is not None and add.op is Op.ADD else None
    if bias is not None:
        taken.append(add)
        epi.out, epi.bias = add.output, torch.tensor(bias[0])
        epi.skipped += bias[1]
    act = activation_after(b, epi.out)
    if act is not None and act.label == "relu":
        taken += list(act.prims)
        epi.out, epi.relu = act.prims[-1].output, True
    _requantize(b, epi, taken)
    epi.skipped += [q.output for q in taken if q.output != epi.out]
    return epi


def _requantize(b, epi: _Epilogue, taken: list[Prim]) -> None:
    """Extend ``epi`` by QuantizeLinear's prims to uint8 when they follow, all of them or none."""
    chain, v = [], epi.out
    for op in (Op.DIV, Op.ROUND, Op.ADD, Op.MAX, Op.MIN, Op.CAST):
        q = _only_reader(b, v, taken + chain)
        if q is None or q.op is not op:
            if op is Op.ADD:  # the zero point is optional
                continue
            return
        chain.append(q)
        v = q.output
    div, add = chain[0], next((q for q in chain if q.op is Op.ADD), None)
    sy = _scalar(b, div.inputs[1]) if div.inputs[0] == epi.out else None
    zy = 0.0 if add is None else _scalar(b, add.inputs[1])
    lo, hi = (_scalar(b, q.inputs[1]) for q in chain if q.op in (Op.MAX, Op.MIN))
    if (sy is None or not sy > 0 or zy is None or zy != round(zy) or not 0 <= zy <= 255 or (lo, hi) != (0, 255)
            or chain[-1].attrs.dtype != "uint8"):
        return
    taken += chain
    epi.out, epi.out_scale, epi.out_zp, epi.out_dtype = chain[-1].output, float(sy), int(zy), torch.uint8


def _only_reader(b, v: ValueId, taken: list[Prim]) -> Prim | None:
    """The one prim of this kernel reading ``v`` (not a kernel output), else None."""
    uses = b.uses.get(v, [])
    if v in b.outputs or len(uses) != 1 or uses[0].inputs.count(v) != 1 or uses[0] in taken:
        return None
    return uses[0] if uses[0].inputs[0] == v else None


def _channel_constant(b, q: Prim, v: ValueId, n: int, channel_dim: int) -> tuple[np.ndarray, list[ValueId]] | None:
    """(the other operand of ``q``, which reads ``v``, as ``n`` float32 values; the broadcast on
    the way) when it is a constant, or a broadcast of one, that varies along ``channel_dim`` only."""
    other = q.inputs[1] if q.inputs[0] == v else q.inputs[0]
    skipped, c = [], _constant(b, other)
    bp = b.prims.get(other)
    if c is None and bp is not None and bp.op is Op.BROADCAST and len(b.uses.get(other, [])) == 1:
        skipped, c = [other], _constant(b, bp.inputs[0])
    if c is None:
        return None
    shape = b.sub.types[v].shape
    try:
        full = np.broadcast_to(c, shape)
    except ValueError:
        return None
    vec = np.moveaxis(full, channel_dim % len(shape), -1).reshape(-1, n)
    if not np.all(vec == vec[:1]):
        return None
    return np.ascontiguousarray(vec[0], np.float32), skipped


def _constant(b, v: ValueId) -> np.ndarray | None:
    c = b.sub.constants.get(v)
    if c is None:
        c = b.g.constants.get(v)
    return None if c is None else np.asarray(c)


def _scalar(b, v: ValueId) -> float | None:
    c = _constant(b, v)
    return float(c.reshape(())) if c is not None and c.size == 1 and c.ndim == 0 else None


def int8_kernels(g) -> tuple[frozenset[int], ...]:
    """For each convolution / matmul of ``g`` on integer weights, the prims of the kernel one int8
    call runs (the shape ``conv_step`` / ``linear_step`` take): from the uint8 activation (through
    the view back of its layout pair) to the requantized uint8 result (and its NHWC view), as
    orchestration seeds (Knobs.seeds): enumeration's size bound would otherwise rarely reach them."""
    made, readers = g.producers(), g.consumers()
    kernels = []
    for p in g.prims:
        if p.op not in (Op.CONV, Op.MATMUL) or p.inputs[1] not in g.constants:
            continue
        if not holds_int8(g.constants[p.inputs[1]]):
            continue
        members = {p.output}
        q, views = made.get(p.inputs[0]), 0
        while q is not None and q.op in (Op.VIEW, Op.SUB, Op.CAST) and views < 2:
            if g.types[q.output].dtype == "uint8" and (q.op is not Op.VIEW or views):
                break  # the integers themselves (or the pair's NHWC side): read from memory
            views += q.op is Op.VIEW and g.types[q.output].dtype == "uint8"
            members.add(q.output)
            q = made.get(q.inputs[0])
        v = p.output
        while True:
            rs = readers.get(v, [])
            if len(rs) != 1 or rs[0].op not in _EPILOGUE or v in g.outputs:
                break
            r = rs[0]
            members.add(r.output)
            members.update(o for o in r.inputs if o in made and made[o].op is Op.BROADCAST)
            v = r.output
            if r.op is Op.CAST:
                nhwc = [x for x in readers.get(v, []) if x.op is Op.VIEW]
                if len(nhwc) == 1 and len(readers.get(v, [])) == 1:
                    members.add(nhwc[0].output)
                break
        kernels.append(frozenset(members))
    return tuple(kernels)


_EPILOGUE = (Op.MUL, Op.ADD, Op.RELU, Op.MAX, Op.MIN, Op.DIV, Op.ROUND, Op.CAST, Op.VIEW)
