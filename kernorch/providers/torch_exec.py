"""Turn a prim subgraph into a short list of PyTorch calls (the torch provider's program).

Each prim becomes one closure over a slot list; the fusions that make the linear + epilogue
kernels cheap are decided here, once, at build time (see ``torch_ops`` for the list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from kernorch.codegen.linear import gemm_1x1, pointwise_conv
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Op, Prim, ValueId
from kernorch.providers import onednn, onednn_int8
from kernorch.providers.base import random_inputs
from kernorch.providers.torch_views import view_step
from kernorch.providers.views import plan_view
from kernorch.ir.tensors import BFLOAT16, to_torch

_UNARY: dict[Op, Callable] = {
    Op.NEG: torch.neg, Op.ABS: torch.abs, Op.EXP: torch.exp, Op.LOG: torch.log, Op.SQRT: torch.sqrt,
    Op.RECIP: torch.reciprocal, Op.TANH: torch.tanh, Op.ERF: torch.special.erf, Op.SIGMOID: torch.sigmoid,
    Op.RELU: torch.relu, Op.FLOOR: torch.floor, Op.CEIL: torch.ceil, Op.ROUND: torch.round, Op.SIN: torch.sin,
    Op.COS: torch.cos, Op.SIGN: torch.sign, Op.NOT: torch.logical_not, Op.ISNAN: torch.isnan,
}
_BINARY: dict[Op, Callable] = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.POW: torch.pow, Op.MAX: torch.maximum,
    Op.MIN: torch.minimum, Op.MOD: torch.remainder, Op.EQ: torch.eq, Op.NE: torch.ne, Op.LT: torch.lt,
    Op.LE: torch.le, Op.GT: torch.gt, Op.GE: torch.ge, Op.AND: torch.logical_and, Op.OR: torch.logical_or,
    Op.XOR: torch.logical_xor,
}
# ops that may write into an operand's buffer (``out=``) without changing the result
_INPLACE = {Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.ERF, Op.SIGMOID, Op.SIN, Op.COS, Op.ADD, Op.SUB,
            Op.MUL, Op.DIV, Op.MAX, Op.MIN, Op.RELU}
_TORCH_DTYPE = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64,
                "bfloat16": torch.bfloat16, "bool": torch.bool, "int8": torch.int8, "int16": torch.int16,
                "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}


@dataclass
class Program:
    inputs: list[ValueId]
    outputs: list[ValueId]
    baked: frozenset[ValueId]
    detail: str
    steps: list[Callable[[list], None]] = field(repr=False)
    n_slots: int = 0
    in_slots: list[int] = field(default_factory=list)
    out_slots: list[int] = field(default_factory=list)
    fixed: list[tuple[int, torch.Tensor]] = field(default_factory=list, repr=False)
    # random inputs to trace with (providers/torch_ops.py's jit variant): made on demand, since random
    # copies of every input, weights included, were a fifth of what pricing a library kernel cost
    example: Callable[[], list[torch.Tensor]] = field(default=list, repr=False)

    # Per output: it is written by a computing prim of this kernel, not a view of an input or of
    # another output, so it shares memory with nothing (set by the builder; None: check per call).
    fresh_outputs: list[bool] | None = None

    def run(self, inputs: Sequence[torch.Tensor | None], finish: bool = True) -> list[torch.Tensor]:
        env, live = self._template()
        for s, i in live:
            env[s] = inputs[i]
        for step in self.steps:
            step(env)
        outs = [env[s] for s in self.out_slots]
        if not finish:
            return outs
        if self.fresh_outputs is not None and all(self.fresh_outputs):
            return [o.contiguous() for o in outs]
        seen = {x.untyped_storage().data_ptr() for x in inputs if x is not None}
        done = []
        for o in outs:  # no output shares memory with an input or another output
            o = o.clone(memory_format=torch.contiguous_format) if o.untyped_storage().data_ptr() in seen \
                else o.contiguous()
            seen.add(o.untyped_storage().data_ptr())
            done.append(o)
        return done

    def _template(self) -> tuple[list, list[tuple[int, int]]]:
        """(a new slot list with the fixed tensors in place, (slot, input position) of the inputs
        that are not fixed); both are worked out once."""
        ready = self.__dict__.get("_ready")
        if ready is None:
            filled = [None] * self.n_slots
            for s, t in self.fixed:
                filled[s] = t
            fixed = {s for s, _ in self.fixed}
            ready = self.__dict__["_ready"] = filled, [(s, i) for i, s in enumerate(self.in_slots) if s not in fixed]
        return ready[0].copy(), ready[1]


def build_program(g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId], *, bake: bool = True,
                  channels_last: bool = False, inplace: bool = True, onednn: bool = False) -> Program:
    """``onednn``: linear prims with constant weights become fused oneDNN calls (onednn.py), in
    the dtype the graph gives them (float32, or bfloat16 after rewrite/precision.py)."""
    return _Builder(g, set(members), list(outputs), bake, channels_last, inplace, onednn).build()


class _Builder:
    def __init__(self, g, members, outputs, bake, channels_last, inplace, onednn=False) -> None:
        self.g, self.members, self.outputs = g, members, outputs
        self.sub = g.subgraph(members, outputs)
        self.bake, self.cl, self.inplace, self.onednn = bake, channels_last, inplace, onednn
        self.prims = {p.output: p for p in self.sub.prims}
        self.uses: dict[ValueId, list[Prim]] = {}
        for p in self.sub.prims:
            for v in p.inputs:
                self.uses.setdefault(v, []).append(p)
        self.slot: dict[ValueId, int] = {}
        self.deferred: dict[ValueId, Callable] = {}  # a fused linear step runs where its bias add was
        self.skip: set[ValueId] = set()
        self.notes: list[str] = []

    def s(self, v: ValueId) -> int:
        if v not in self.slot:
            self.slot[v] = len(self.slot)
        return self.slot[v]

    def temp(self, v: ValueId, consumer: Prim) -> bool:
        """``v`` is a fresh buffer of this kernel that only ``consumer`` reads."""
        p = self.prims.get(v)
        return (p is not None and v not in self.outputs and p.op not in (Op.VIEW, Op.BROADCAST)
                and len(self.uses.get(v, [])) == 1 and self.uses[v][0] is consumer)

    def build(self) -> Program:
        sub, g = self.sub, self.g
        baked = frozenset(v for v in sub.inputs if self.bake and v in g.constants)
        def example() -> list[torch.Tensor]:
            feeds = random_inputs(g, sub, 0)
            return [to_torch(feeds[v]) for v in sub.inputs]

        fixed = []
        for v in sub.inputs:
            if v in baked:
                fixed.append((self.s(v), read_only_tensor(g.constants[v])))
        for v, arr in sub.constants.items():
            fixed.append((self.s(v), to_torch(np.array(arr))))
        in_slots = [self.s(v) for v in sub.inputs]
        linear = {p.output: self.step(p, dict(fixed)) for p in sub.prims if p.op in (Op.CONV, Op.CONV_TRANSPOSE, Op.MATMUL)}
        steps = []
        for p in sub.prims:  # linear steps first decided which neighbours they absorb (skip, deferred)
            if p.output in self.skip:
                continue
            steps.append(linear[p.output] if p.output in linear else self.step(p, dict(fixed)))
        steps = [st for st in steps if st is not None]
        if self.cl:
            fixed = [(s, t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 and self._is_weight(s) else t)
                     for s, t in fixed]
        prog = Program(list(sub.inputs), list(sub.outputs), baked, ", ".join(self.notes), steps, len(self.slot),
                       in_slots, [self.s(v) for v in sub.outputs], fixed, example)
        prog.fresh_outputs = self._fresh_outputs()
        return prog

    def _fresh_outputs(self) -> list[bool]:
        """Per output: computed here, or a view of a value computed here that no other output
        views (a view of an input may share its memory)."""
        def root(v):
            while v in self.prims and self.prims[v].op in (Op.VIEW, Op.BROADCAST):
                v = self.prims[v].inputs[0]
            return v
        roots = [root(v) for v in self.sub.outputs]
        return [r in self.prims and self.prims[r].op is not Op.CAST and roots.count(r) == 1 for r in roots]

    def _is_weight(self, slot: int) -> bool:
        return any(p.op is Op.CONV and self.s(p.inputs[1]) == slot for p in self.sub.prims)

    # -- one prim -------------------------------------------------------------------------------
    def step(self, p: Prim, fixed: dict[int, torch.Tensor]):
        if p.output in self.deferred:
            return self.deferred.pop(p.output)
        o = self.s(p.output)
        ins = [self.s(v) for v in p.inputs]
        dtype = _TORCH_DTYPE[self.sub.types[p.output].dtype]
        op = p.op
        if op is Op.CONV:
            return self._conv(p, fixed)
        if op is Op.CONV_TRANSPOSE:
            return self._conv_transpose(p)
        if op is Op.MATMUL:
            return self._matmul(p, fixed)
        if op is Op.BROADCAST:
            shape = p.attrs.shape
            return _set(o, lambda e: e[ins[0]].expand(shape))
        if op is Op.VIEW:
            plan = plan_view(p.attrs.map)
            fns = [view_step(st) for st in plan.steps]

            def view(e, x=ins[0]):
                t = e[x]
                for f in fns:
                    t = f(t)
                e[o] = t
            return view
        if op is Op.CONCAT:
            axis = p.attrs.axis
            return _set(o, lambda e: torch.cat([e[i] for i in ins], dim=axis))
        if op is Op.CAST:
            return _set(o, lambda e: _cast(e[ins[0]], dtype))
        if op is Op.WHERE:
            return _set(o, lambda e: _fit(torch.where(e[ins[0]].bool(), e[ins[1]], e[ins[2]]), dtype))
        if op is Op.SOFTPLUS:
            return _set(o, lambda e: _fit(torch.logaddexp(e[ins[0]], torch.zeros((), dtype=e[ins[0]].dtype)), dtype))
        fn = _UNARY.get(op) or _BINARY.get(op)
        if op is Op.DIV:
            integer = self.sub.types[p.output].dtype.startswith(("int", "uint"))
            fn = (lambda a, b, **kw: torch.div(a, b, rounding_mode="trunc", **kw)) if integer else torch.div
        if op in (Op.RECIP,) and not self.sub.types[p.inputs[0]].dtype.startswith("float"):
            return _set(o, lambda e: _fit(torch.reciprocal(e[ins[0]].to(torch.float32)), dtype))
        target = next((v for v in p.inputs if self.inplace and op in _INPLACE and self.temp(v, p)
                       and self.sub.types[v] == self.sub.types[p.output]), None)
        if target is not None:
            t = self.s(target)
            if op is Op.RELU:
                def relu_(e):
                    e[o] = torch.relu_(e[t])
                return relu_

            def inplace(e):
                e[o] = fn(*[e[i] for i in ins], out=e[t])
            return inplace
        return _set(o, lambda e: _fit(fn(*[e[i] for i in ins]), dtype))

    def _bias_of(self, y: ValueId, lin: Prim, channel_dim: int):
        """If ``y`` is only read by an ADD whose other operand broadcasts a vector along
        ``channel_dim``, return (the ADD, the slot of the vector's source)."""
        uses = self.uses.get(y, [])
        if y in self.outputs or len(uses) != 1 or uses[0].op is not Op.ADD:
            return None
        add = uses[0]
        if self.sub.types[add.output] != self.sub.types[y] or add.inputs[0] == add.inputs[1]:
            return None
        other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        bp = self.prims.get(other)
        if bp is None or bp.op is not Op.BROADCAST or other in self.outputs or len(self.uses[other]) != 1:
            return None
        shape = self.sub.types[bp.inputs[0]].shape
        n = self.sub.types[y].shape[channel_dim]
        if not all(s == (n if d % len(shape) == channel_dim % len(shape) else 1) for d, s in enumerate(shape)):
            return None
        if self.sub.types[bp.inputs[0]].dtype != self.sub.types[y].dtype:
            return None
        return add, bp

    def _conv(self, p: Prim, fixed):
        a = p.attrs
        k = len(self.sub.types[p.output].shape) - 2
        x = p.inputs[0]
        pads = list(a.pads)
        xp = self.prims.get(x)
        if xp is not None and xp.op is Op.VIEW and self.temp_view(x, p):
            plan = plan_view(xp.attrs.map)
            st = plan.steps[0] if len(plan.steps) == 1 else None
            if (st is not None and st.op == "pad" and st.mode == "constant" and st.value == 0.0
                    and not any(st.begins[:2]) and not any(st.ends[:2])):
                pads = [pb + b for pb, b in zip(pads[:k], st.begins[2:])] + [pe + e for pe, e in zip(pads[k:], st.ends[2:])]
                self.skip.add(x)
                x = xp.inputs[0]
                self.notes.append("pad folded into conv")
        if self.onednn and pads[:k] == pads[k:]:
            step = onednn_int8.conv_step(self, p, x, pads[:k], fixed)
            if step is not None:
                return self._place(step[0], p, step[1])
        out_v, pre = onednn.widened(self, p) if self.onednn else (p.output, [])
        bias_slot = self.s(p.inputs[2]) if len(p.inputs) > 2 else None
        fused = self._bias_of(out_v, p, 1) if bias_slot is None else None
        if fused is not None:
            add, bp = fused
            self.skip.add(bp.output)
            out_v = add.output
            bias_slot = self.s(bp.inputs[0])
            self.notes.append("bias add folded into conv")
        begin, end = pads[:k], pads[k:]
        sym = begin == end
        torch_pad = []
        for d in reversed(range(k)):
            torch_pad += [begin[d], end[d]]
        fused_step = onednn.conv_step(self, p, x, begin if sym else [0] * k, bias_slot, out_v, fixed,
                                      None if sym else torch_pad, pre) if self.onednn else None
        if fused_step is not None:
            return self._place(fused_step[0], p, fused_step[1])
        if pre:  # the plain path computes the bf16 prim alone; its widening and bias add run as steps
            if fused is not None:
                self.skip.discard(fused[1].output)
                self.notes.remove("bias add folded into conv")
                bias_slot = None
            out_v = p.output
        xs, ws, o = self.s(x), self.s(p.inputs[1]), self.s(out_v)
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
        cl = self.cl
        if cl:
            self.notes.append("channels_last")
        n_out = self.sub.types[p.output].shape[1]
        if not cl and not any(pads) and pointwise_conv(self.sub, p) and self.sub.types[x].dtype != "bfloat16":  # BLAS on NCHW as it lies (codegen/linear.py)
            shape = self.sub.types[p.output].shape

            def gemm(e):
                bias = None if bias_slot is None else e[bias_slot].reshape(n_out, 1)
                e[o] = gemm_1x1(e[xs], e[ws], bias).view(shape)
            self.notes.append("1x1 convolution as a GEMM")
            return self._place(gemm, p, out_v)

        def run(e):
            xt = e[xs]
            if not sym:
                xt = F.pad(xt, torch_pad)
            if cl:
                xt = xt.contiguous(memory_format=torch.channels_last)
            b = e[bias_slot].reshape(n_out).to(xt.dtype) if bias_slot is not None else None
            e[o] = conv(xt, e[ws], b, a.strides, begin if sym else 0, a.dilations, a.groups)
        return self._place(run, p, out_v)

    def _place(self, run, lin: Prim, out_v: ValueId):
        """A linear step fused with its bias add runs at the add's position, when the bias is ready."""
        if out_v == lin.output:
            return run
        self.deferred[out_v] = run
        return None

    def temp_view(self, v: ValueId, consumer: Prim) -> bool:
        return v not in self.outputs and len(self.uses.get(v, [])) == 1 and self.uses[v][0] is consumer

    def _conv_transpose(self, p: Prim):
        a = p.attrs
        k = len(self.sub.types[p.output].shape) - 2
        ins = [self.s(v) for v in p.inputs]
        o = self.s(p.output)
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[k]
        begin, end = list(a.pads[:k]), list(a.pads[k:])
        sym = [min(b, e) for b, e in zip(begin, end)]
        outpad = list(a.output_padding) if a.output_padding else [0] * k

        def run(e):
            b = e[ins[2]].to(e[ins[0]].dtype) if len(ins) > 2 else None
            y = fn(e[ins[0]], e[ins[1]], b, a.strides, sym, outpad, a.groups, a.dilations)
            sl = [slice(None), slice(None)] + [slice(begin[s] - sym[s], y.shape[2 + s] - (end[s] - sym[s]))
                                               for s in range(k)]
            e[o] = y[tuple(sl)]
        return run

    def _matmul(self, p: Prim, fixed):
        a_s, w_s = self.s(p.inputs[0]), self.s(p.inputs[1])
        wshape = self.sub.types[p.inputs[1]].shape
        out_shape = self.sub.types[p.output].shape
        if self.onednn:
            step = onednn_int8.linear_step(self, p, fixed)
            if step is not None:
                return self._place(step[0], p, step[1])
        start, pre = onednn.widened(self, p) if self.onednn else (p.output, [])
        fused = self._bias_of(start, p, -1) if len(wshape) == 2 else None
        if self.onednn:
            bias_slot = self.s(fused[1].inputs[0]) if fused else None
            fused_step = onednn.linear_step(self, p, bias_slot, fused[0].output if fused else start, fixed, pre)
            if fused_step is not None:
                if fused:
                    self.skip.add(fused[1].output)
                return self._place(fused_step[0], p, fused_step[1])
            if pre:
                fused = None  # the bias add reads the widening, which runs as its own step
        if fused is None:
            o = self.s(p.output)
            return _set(o, lambda e: torch.matmul(e[a_s], e[w_s]))
        add, bp = fused
        self.skip.add(bp.output)
        o = self.s(add.output)
        b_s = self.s(bp.inputs[0])
        kdim, n = wshape
        self.notes.append("matmul + bias as addmm")

        def run(e):
            a = e[a_s]
            e[o] = torch.addmm(e[b_s].reshape(n), a.reshape(-1, kdim), e[w_s]).reshape(out_shape)
        return self._place(run, p, add.output)


def _set(o: int, fn: Callable[[list], torch.Tensor]):
    def step(e):
        e[o] = fn(e)
    return step


def _fit(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """As the interpreter casts (interp._cast): truncation, through int32 to a narrow integer."""
    if t.is_floating_point() and not dtype.is_floating_point and dtype is not torch.bool:
        t = torch.trunc(t)
        if dtype in (torch.int8, torch.uint8, torch.int16, torch.uint16):
            t = t.to(torch.int32)
    return t.to(dtype)


def read_only_tensor(arr) -> torch.Tensor:
    """A tensor over a constant's memory without a copy. Constants from ONNX are read-only
    arrays; they are never written, so PyTorch's warning about that is silenced here."""
    import warnings

    arr = np.ascontiguousarray(arr)
    if arr.dtype == BFLOAT16:  # no zero-copy path for ml_dtypes' arrays: a copy through the int16 view
        return to_torch(np.array(arr))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr)
