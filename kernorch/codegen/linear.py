"""Linear kernels through PyTorch (oneDNN/MKL): one MATMUL, CONV or CONV_TRANSPOSE prim, plus
what torch gives for free: VIEW/BROADCAST chains on its operands that are strided views of a
kernel input (a transposed weight, a reshaped batch), and one bias ADD on its result.

Generated C would rarely beat the vendor libraries on these, so the C path never sees them.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

from kernorch.codegen.facts import CannotGenerate, kernel_prims
from kernorch.codegen.indexing import normalize
from kernorch.codegen.runner import Kernel
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.graph import Graph
from kernorch.ir.layout import IndexMap
from kernorch.ir.prims import ConvAttrs, Kind, Op, Prim

VIEWS = (Op.VIEW, Op.BROADCAST)


def view_map(g: Graph, p: Prim) -> IndexMap:
    """The index map of a VIEW or BROADCAST prim: its output's index -> its input's."""
    if p.op is Op.VIEW:
        return p.attrs.map
    return layout.broadcast(g.types[p.inputs[0]].shape, p.attrs.shape)


def strided(m: IndexMap) -> tuple[tuple[int, ...], int] | None:
    """(strides, offset) in elements when ``m`` is an affine, unmasked map with non-negative
    strides, i.e. a torch.as_strided view; None otherwise."""
    if m.mask:
        return None
    in_strides = layout_strides(m.in_shape)
    out = [0] * len(m.out_shape)
    offset = 0
    for e, s in zip(m.index, in_strides):
        e = normalize(e, m.out_shape)
        offset += e.const * s
        for a, k in e.terms:
            if not isinstance(a, ix.Var):
                return None
            out[a.i] += k * s
    if offset < 0 or any(st < 0 for st in out):
        return None
    return tuple(out), offset


def layout_strides(shape: Sequence[int]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


class _Plan:
    """How the members map onto torch: operand value -> (source value, strided view or None)."""

    def __init__(self, g: Graph, members: set[int], outputs: Sequence[int]) -> None:
        prims = kernel_prims(g, members)
        self.reason: str | None = None
        lin = [p for p in prims if p.kind is Kind.LINEAR]
        if len(lin) != 1:
            self.reason = "a kernel holds at most one linear prim"
            return
        self.lin = lp = lin[0]
        producers = {p.output: p for p in prims}
        self.add: Prim | None = None
        adds = [p for p in prims if p.op is Op.ADD and p.inputs.count(lp.output) == 1]
        if adds:
            self.add = adds[0]
        used = {lp.output} | ({self.add.output} if self.add else set())
        self.operands: dict[int, tuple[int, tuple | None]] = {}
        roots = list(lp.inputs)
        if self.add:
            roots += [v for v in self.add.inputs if v != lp.output]
        for v in roots:
            found = operand_view(g, producers, v, lp)
            if isinstance(found, str):
                self.reason = found
                return
            src, view, chain = found
            used.update(chain)
            self.operands[v] = (src, view)
        extra = [p for p in prims if p.output not in used]
        if extra:
            self.reason = f"{extra[0].op.value} cannot share a kernel with {lp.op.value}"
            return
        for v in outputs:
            if v not in (lp.output, self.add.output if self.add else None):
                self.reason = f"a linear kernel writes only its result, not {g.name(v)}"
                return
        for v in lp.inputs:
            if g.types[v].dtype not in ("float32", "float64", "bfloat16"):
                self.reason = f"{lp.op.value} on {g.types[v].dtype} is not routed to torch"
                return
        self.inputs = list(dict.fromkeys(src for src, _ in self.operands.values()))


def operand_view(g: Graph, producers: dict[int, Prim], v: int, user: Prim
                 ) -> tuple[int, tuple | None, list[int]] | str:
    """Operand ``v`` of ``user`` as (source value, strided view of it or None when ``v`` is the
    source itself, the VIEW/BROADCAST members in between), or why it is not a strided view of a
    kernel input. A view is (shape, strides, offset) in elements."""
    src, maps, chain = v, [], []
    while src in producers and producers[src].op in VIEWS:
        chain.append(src)
        maps.append(view_map(g, producers[src]))
        src = producers[src].inputs[0]
    if src in producers:
        return f"{g.name(v)} feeding {user.op.value} is computed, not a view of an input"
    if not maps:
        return src, None, chain
    m: IndexMap | None = maps[0]
    for inner in maps[1:]:
        m = m.compose(inner) if m is not None else None
    view = strided(m) if m is not None else None
    if m is None or view is None:
        return f"operand {g.name(v)} of {user.op.value} is not a strided view"
    return src, (m.out_shape, *view), chain


def why_not(g: Graph, members: Iterable[int], outputs: Sequence[int]) -> str | None:
    return _Plan(g, set(members), outputs).reason


class LinearKernel(Kernel):
    provider = "linear"  # the code generator's linear kernels; "torch" is the PyTorch provider

    def __init__(self, g: Graph, members: Iterable[int], outputs: Sequence[int]) -> None:
        members = set(members)
        plan = _Plan(g, members, outputs)
        if plan.reason:
            raise CannotGenerate(plan.reason)
        self.plan = plan
        self.pointwise = pointwise_conv(g, plan.lin) and g.types[plan.lin.output].dtype != "bfloat16"
        super().__init__(plan.inputs, list(outputs), [g.types[v] for v in plan.inputs],
                         [g.types[v] for v in outputs], f"torch {plan.lin.op.value}", g.kernel_key(members, outputs))

    def _pointwise_gemm(self, args: list[torch.Tensor], env: dict[int, torch.Tensor],
                        out_of: dict[int, torch.Tensor]) -> bool:
        """A 1x1 convolution on one NCHW image is the GEMM W (Cout x Cin) @ x (Cin x HW): BLAS on
        the tensors as they lie, written into the planned output, the conv bias and then a
        following add (residual or per-channel) as addmm's input. oneDNN would reorder NCHW to a
        blocked layout and back and return a fresh buffer. False (the general path) when an
        operand does not fit."""
        lp, add = self.plan.lin, self.plan.add
        x, w = args[0], args[1]
        target = out_of.get(add.output if add is not None else lp.output)
        if target is None or (add is not None and lp.output in out_of) or not x.is_contiguous():
            return False
        cout, hw = w.shape[0], x[0, 0].numel()
        terms = [args[2].view(cout, 1)] if len(args) > 2 else []
        if add is not None:
            other = self._operand(next(v for v in add.inputs if v != lp.output), env)
            if other.numel() == cout * hw and other.is_contiguous():
                terms.append(other.view(cout, hw))
            elif _per_channel(other, cout, x.dim()):
                terms.append(other.reshape((1,) * (x.dim() - other.dim()) + tuple(other.shape))
                             [(0, slice(None)) + (0,) * (x.dim() - 2)].unsqueeze(1))
            else:
                return False
        out = gemm_1x1(x, w, terms[0] if terms else None, target)
        for t in terms[1:]:
            out.add_(t)
        return True

    def _operand(self, v: int, env: dict[int, torch.Tensor]) -> torch.Tensor:
        src, view = self.plan.operands[v]
        t = env[src]
        if view is None:
            return t
        shape, strides, offset = view
        return t.as_strided(shape, strides, offset)

    def _run(self, ins, outs) -> None:
        env = dict(zip(self.inputs, ins))
        lp, add = self.plan.lin, self.plan.add
        out_of = dict(zip(self.outputs, outs))
        args = [self._operand(v, env) for v in lp.inputs]
        if lp.op is Op.MATMUL:
            if add is not None and lp.output not in out_of and args[0].dim() == 2 and args[1].dim() == 2:
                bias = self._operand(next(v for v in add.inputs if v != lp.output), env)
                torch.addmm(bias, args[0], args[1], out=out_of[add.output])
                return
            res = out_of.get(lp.output)
            res = torch.matmul(args[0], args[1], out=res) if res is not None else torch.matmul(args[0], args[1])
        else:
            if self.pointwise and self._pointwise_gemm(args, env, out_of):
                return
            res = conv(lp.op, args, lp.attrs)
            if lp.output in out_of:
                out_of[lp.output].copy_(res)
        if add is not None:
            bias = self._operand(next(v for v in add.inputs if v != lp.output), env)
            torch.add(res, bias, out=out_of[add.output])


def _per_channel(t: torch.Tensor, channels: int, rank: int) -> bool:
    """``t`` (right-aligned to ``rank`` dims) varies along dim 1 only: a bias, maybe broadcast."""
    shape = (1,) * (rank - t.dim()) + tuple(t.shape)
    strides = (0,) * (rank - t.dim()) + tuple(t.stride())
    return shape[1] in (1, channels) and shape[0] == 1 and all(
        n == 1 or st == 0 for d, (n, st) in enumerate(zip(shape, strides)) if d != 1)


def gemm_1x1(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """A ``pointwise_conv`` on contiguous NCHW ``x``: ``W (Cout x Cin) @ x (Cin x HW)`` (+ ``bias``,
    anything broadcasting to Cout x HW), into ``out`` when given; returns the Cout x HW result."""
    cout, cin = w.shape[0], w.shape[1]
    w2, x2 = w.reshape(cout, cin), x.reshape(cin, -1)
    o = None if out is None else out.view(cout, -1)
    if bias is None:
        return torch.mm(w2, x2, out=o) if o is not None else torch.mm(w2, x2)
    return torch.addmm(bias, w2, x2, out=o) if o is not None else torch.addmm(bias, w2, x2)


def pointwise_conv(g: Graph, p: Prim) -> bool:
    """A 1x1 convolution of one image (stride 1, no pads, one group): a GEMM on NCHW as it lies."""
    if p.op is not Op.CONV or p.attrs.groups != 1 or any(p.attrs.pads) or any(s != 1 for s in p.attrs.strides):
        return False
    x, w = g.types[p.inputs[0]].shape, g.types[p.inputs[1]].shape
    return x[0] == 1 and all(k == 1 for k in w[2:]) and g.types[p.output].dtype == g.types[p.inputs[0]].dtype


def conv(op: Op, args: Sequence[torch.Tensor], a: ConvAttrs) -> torch.Tensor:
    """Convolution / transposed convolution with ONNX-style (possibly asymmetric) pads."""
    x, w = args[0], args[1]
    b = args[2].to(x.dtype) if len(args) > 2 else None  # a bf16 convolution's bias is float32 in the IR
    k = x.dim() - 2
    begin, end = list(a.pads[:k]), list(a.pads[k:])
    if op is Op.CONV:
        if begin != end:
            pad: list[int] = []
            for s in reversed(range(k)):
                pad += [begin[s], end[s]]
            x = F.pad(x, pad)
            begin = [0] * k
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
        return fn(x, w, b, stride=a.strides, padding=begin, dilation=a.dilations, groups=a.groups)
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[k]
    outpad = list(a.output_padding) if a.output_padding else [0] * k
    sym = [min(bb, ee) for bb, ee in zip(begin, end)]
    out = fn(x, w, b, stride=a.strides, padding=sym, output_padding=outpad, groups=a.groups, dilation=a.dilations)
    sl = [slice(None), slice(None)]
    for s in range(k):
        sl.append(slice(begin[s] - sym[s], out.shape[2 + s] - (end[s] - sym[s])))
    return out[tuple(sl)]
