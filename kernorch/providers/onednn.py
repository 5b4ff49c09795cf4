"""Fused linear steps on oneDNN, the ops Inductor's CPU freezing path uses: a convolution or a
matmul with constant weights prepacked once at build time (``mkldnn._reorder_*_weight``), its
bias, and a post-op chain applied while the output is hot: a residual ``add`` (or ``mul``/``sub``)
with a same-shaped tensor, then ``relu``/``sigmoid``/``tanh``.

In a ``precision="bf16"`` graph (rewrite/precision.py) the step's activation and weight are bf16:
the weight is prepacked in bf16, the bias stays float32, the products accumulate in float32 on the
CPU's matrix units (AMX, AVX512-BF16) and oneDNN rounds the result to bf16. The graph's widening
cast after the prim is absorbed (post-ops apply to the unrounded sum, within the bf16 tolerance
the oracle then judges the kernel by), and so is the rounding cast after the post-ops, so the
step hands its bf16 result on as it is.

A convolution keeps the memory format of its input: fed a channels-last view (the NHWC side of a
layout pair, rewrite/layouts.py) it computes and returns channels-last, so consecutive kernels
can stay in NHWC. Used by the ``onednn`` variant of the torch provider (torch_ops.py); a step
that does not fit returns None and the plain PyTorch op runs instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.providers.activations import Activation, activation_after

BINARY_POST_OPS = {Op.ADD: "add", Op.MUL: "mul", Op.SUB: "sub"}


def post_ops(b, y: ValueId) -> tuple[Prim | None, ValueId | None, Activation | None, list[Prim]]:
    """The post-op chain after value ``y`` in builder ``b`` (torch_exec._Builder): (binary prim,
    its other operand, the activation, the identity view pairs passed on the way), None when
    absent. A post-op must be the only reader of its input, which must not be a kernel output; the
    other operand has ``y``'s type (no broadcast) and for ``sub`` is the subtrahend."""
    binary = other = None
    passed: list[Prim] = []
    reader, read, views = _only_reader(b, y)
    if reader is not None and reader.inputs.count(read) == 1:
        o = reader.inputs[1] if reader.inputs[0] == read else reader.inputs[0]
        if b.sub.types[o] == b.sub.types[read] and (reader.op is not Op.SUB or reader.inputs[0] == read):
            binary, other = reader, o
            passed += views
            y = reader.output
    views = identity_views(b, y)
    act = activation_after(b, views[-1].output if views else y)
    if act is not None:
        passed += views
    return binary, other, act, passed


def identity_views(b, v: ValueId) -> list[Prim]:
    """The chain of views from ``v`` whose composition reads every element in place (the two
    halves of a layout pair inside one kernel), when ``v``'s only reader starts one; else []."""
    chain: list[Prim] = []
    m = None
    while True:
        uses = b.uses.get(v, [])
        if v in b.outputs or len(uses) != 1 or uses[0].op is not Op.VIEW:
            return []
        q = uses[0]
        m = q.attrs.map if m is None else q.attrs.map.compose(m)
        chain.append(q)
        v = q.output
        if m is None:
            return []
        if m.is_identity():
            return chain


def _only_reader(b, v: ValueId) -> tuple[Prim | None, ValueId, list[Prim]]:
    """(the binary post-op that alone reads ``v``, through identity views, or None; the value it
    reads; those views)."""
    views = identity_views(b, v)
    if views:
        v = views[-1].output
    uses = b.uses.get(v, [])
    if v in b.outputs or len(uses) != 1 or uses[0].op not in BINARY_POST_OPS:
        return None, v, []
    return (uses[0], v, views) if b.sub.types[uses[0].output] == b.sub.types[v] else (None, v, [])


def cast_after(b, v: ValueId, dtype: str) -> list[Prim]:
    """The identity views from ``v`` and the CAST to ``dtype`` that alone reads them ([] when
    absent): the widening after a bf16 linear prim, or the rounding before a bf16 value is stored."""
    views = identity_views(b, v)
    end = views[-1].output if views else v
    uses = b.uses.get(end, [])
    if end in b.outputs or len(uses) != 1 or uses[0].op is not Op.CAST or uses[0].attrs.dtype != dtype:
        return []
    return views + [uses[0]]


def widened(b, lin: Prim) -> tuple[ValueId, list[Prim]]:
    """(the value a bf16 linear prim's post-ops start from, the prims on the way): its float32
    widening (precision.py puts one after every bf16 linear prim), else its own output."""
    if b.sub.types[lin.output].dtype != "bfloat16":
        return lin.output, []
    widen = cast_after(b, lin.output, "float32")
    return (widen[-1].output, widen) if widen else (lin.output, [])


def absorb(b, lin: Prim, y: ValueId, pre: list[Prim] = ()) -> tuple[ValueId, int | None, str, Activation | None, bool]:
    """Take ``y``'s post-op chain into the linear step of ``lin`` (``y``: its output, its float32
    widening ``pre``, or the bias add folded into either): (the value the step now writes, slot of
    the binary operand or None, binary attr or "", the activation or None, whether the step writes
    oneDNN's bf16 result as it is). A bf16 step also absorbs the rounding of its last post-op to
    bf16, so it stores bf16. Absorbed prims but the last are skipped by the builder; the last
    one's position is where the step runs."""
    binary, other, act, views = post_ops(b, y)
    chain = ([binary] if binary is not None else []) + (list(act.prims) if act is not None else [])
    done = [q.output for q in pre] + ([y] if y != lin.output and y not in {q.output for q in pre} else [])
    done += [q.output for q in views + chain]
    native = b.sub.types[lin.output].dtype == "bfloat16"
    narrow = cast_after(b, done[-1], "bfloat16") if native and pre else []
    done += [q.output for q in narrow]
    for v in done[:-1]:
        b.skip.add(v)
    out = done[-1] if done else y
    names = [BINARY_POST_OPS[binary.op]] if binary is not None else []
    names += [act.label] if act is not None else []
    if names:
        b.notes.append("+".join(names) + " fused")
    keep_bf16 = native and (bool(narrow) or not pre)
    if native and other is not None:
        other = _bf16_source(b, other)
    return (out, b.s(other) if other is not None else None, BINARY_POST_OPS[binary.op] if binary is not None else "",
            act, keep_bf16)


def conv_step(b, p: Prim, x: ValueId, padding: list[int], bias_slot: int | None, out_v: ValueId,
              fixed: dict[int, torch.Tensor], pre_pad: list[int] | None = None,
              pre: list[Prim] = ()) -> tuple[Callable, ValueId] | None:
    """A 2-D convolution with a constant weight as one oneDNN call (prepacked weight, bias,
    post-ops); None when it does not fit. ``pre_pad`` (F.pad order): zero padding the convolution
    cannot express (asymmetric), applied to the input first. ``pre``: the widening of a bf16
    result (``widened``) on the way to ``out_v``."""
    a = p.attrs
    w_slot = b.s(p.inputs[1])
    w = fixed.get(w_slot)
    if len(b.sub.types[p.output].shape) != 4 or w is None or not _supported(w, b.sub.types[x].dtype):
        return None
    x_shape = list(b.sub.types[x].shape)
    if pre_pad:
        x_shape[2] += pre_pad[2] + pre_pad[3]
        x_shape[3] += pre_pad[0] + pre_pad[1]
    stride, dilation = list(a.strides), list(a.dilations)
    low = _Precision(w)
    if low.dtype == torch.bfloat16 and a.groups > 1 and post_ops(b, out_v)[0] is not None:
        return None  # PyTorch 2.13 has no bf16 add_relu for oneDNN's grouped binary convolution
    packed = torch.ops.mkldnn._reorder_convolution_weight(w.contiguous(), padding, stride, dilation,
                                                          a.groups, x_shape)
    out_v, other_slot, binary, act, keep_bf16 = absorb(b, p, out_v, pre)
    result = _identity if keep_bf16 else low.result
    xs, o = b.s(x), b.s(out_v)
    n_out = b.sub.types[p.output].shape[1]
    b.notes.append(f"oneDNN conv, prepacked {low.label} weight")
    fused = torch.ops.mkldnn._convolution_pointwise

    bias = _bias_reader(bias_slot, n_out, fixed)

    def inp(e):
        return low.read(F.pad(e[xs], pre_pad) if pre_pad else e[xs])

    unary, scalars, algorithm = act.attr if act is not None else ("none", [], "")
    if other_slot is None:
        def run(e):
            e[o] = result(fused(inp(e), packed, bias(e), padding, stride, dilation, a.groups, unary,
                                   scalars, algorithm))
    else:
        bias = _bias_reader(bias_slot, n_out, fixed, low.dtype)  # the binary op wants the input's dtype

        def run(e):
            xt = inp(e)
            other = low.read(e[other_slot]).contiguous(memory_format=_format_of(xt))
            e[o] = result(fused.binary(xt, other, packed, bias(e), padding, stride, dilation, a.groups,
                                   binary, None, None if act is None else unary, scalars, algorithm))
    return run, out_v


def linear_step(b, p: Prim, bias_slot: int | None, out_v: ValueId, fixed: dict[int, torch.Tensor],
                pre: list[Prim] = ()) -> tuple[Callable, ValueId] | None:
    """``x @ W (+ bias)`` with a constant 2-D W as one oneDNN call (prepacked weight, post-ops);
    None when it does not fit. ``pre``: the widening of a bf16 result (``widened``) on the way."""
    w = fixed.get(b.s(p.inputs[1]))
    a_type = b.sub.types[p.inputs[0]]
    if w is None or w.dim() != 2 or not _supported(w, a_type.dtype):
        return None
    kdim, n = w.shape
    rows = max(1, a_type.size // kdim)
    binary_prim, _, act, _ = post_ops(b, out_v)
    if binary_prim is not None and act is not None:
        return None  # oneDNN's linear takes one post-op here; leave the chain to PyTorch
    low = _Precision(w)
    packed = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), rows)
    out_v, other_slot, binary, act, keep_bf16 = absorb(b, p, out_v, pre)
    result = _identity if keep_bf16 else low.result
    unary, scalars, algorithm = act.attr if act is not None else ("none", [], "")
    a_s, o = b.s(p.inputs[0]), b.s(out_v)
    out_shape = b.sub.types[p.output].shape
    b.notes.append(f"oneDNN linear, prepacked {low.label} weight")
    linear = torch.ops.mkldnn._linear_pointwise

    bias = _bias_reader(bias_slot, n, fixed)

    if other_slot is None:
        def run(e):
            e[o] = result(linear(low.read(e[a_s]).reshape(-1, kdim), packed, bias(e), unary, scalars,
                                   algorithm)).reshape(out_shape)
    else:
        def run(e):
            other = low.read(e[other_slot]).reshape(-1, n)
            e[o] = result(linear.binary(low.read(e[a_s]).reshape(-1, kdim), other, packed, bias(e),
                                   binary)).reshape(out_shape)
    return run, out_v


class _Precision:
    """What a step computes in, from its weight's dtype: float32 throughout, or bfloat16 (a
    ``precision="bf16"`` graph: the activation arrives in bf16, the weight is packed in bf16, the
    products accumulate in float32 on the CPU's matrix units and oneDNN rounds the result to bf16,
    which is widened to float32 unless the step stores it as it is (``absorb``))."""

    def __init__(self, w: torch.Tensor) -> None:
        self.dtype = w.dtype
        self.label = "bf16" if w.dtype == torch.bfloat16 else "f32"

    def read(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dtype)  # a residual operand widened in the graph goes back to the step's dtype

    @staticmethod
    def result(t: torch.Tensor) -> torch.Tensor:
        return t.float()


def _bf16_source(b, v: ValueId) -> ValueId:
    """The bf16 value a binary operand ``v`` was widened from inside this kernel (the widening then
    skipped: a bf16 step reads the bf16 value as it lies, without a float32 pass and a rounding
    back), else ``v``."""
    p = b.prims.get(v)
    if (p is None or p.op is not Op.CAST or v in b.outputs or len(b.uses.get(v, [])) != 1
            or b.sub.types[p.inputs[0]].dtype != "bfloat16"):
        return v
    b.skip.add(v)
    return p.inputs[0]


def _supported(w: torch.Tensor, x_dtype: str) -> bool:
    """A float32 step, or a bf16 one (precision.py's bf16 graph: bf16 activation and weight)."""
    return (w.dtype, x_dtype) in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16"))


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _bias_reader(slot: int | None, n: int, fixed: dict[int, torch.Tensor],
                 dtype: torch.dtype = torch.float32) -> Callable[[list], torch.Tensor | None]:
    """The bias vector of a step in ``dtype``: a constant one shaped once at build time, else per run."""
    if slot is None:
        return lambda e: None
    if slot in fixed:
        vector = fixed[slot].reshape(n).contiguous().to(dtype)
        return lambda e: vector
    return lambda e: e[slot].reshape(n).to(dtype)


def _format_of(t: torch.Tensor) -> torch.memory_format:
    return torch.channels_last if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) \
        and not t.is_contiguous() else torch.contiguous_format
