"""PyTorch as a kernel provider for linear kernels: one matmul / conv / conv-transpose plus an
elementwise epilogue (and the views, broadcasts and concatenations around it), run with PyTorch's
oneDNN / MKL ops.

What it does beyond running prim by prim: a zero spatial pad in front of a convolution becomes the
convolution's own padding; ``matmul + per-column bias`` becomes one ``addmm``; a ``conv + per-channel
bias`` folds the add into the convolution; epilogue ops write into their operand's buffer when that
operand is a temporary. Variants: ``eager`` (NCHW), ``channels_last`` (NHWC convolution, weights
converted once), ``jit`` (traced, frozen and ``optimize_for_inference``: oneDNN conv with fused
activations and prepacked weights) and ``onednn`` (onednn.py's fused steps, float32 or, in a
``precision="bf16"`` graph, bfloat16 on the CPU's matrix units).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, ValueId
from kernorch.providers.base import BuiltKernel, Provider, default_threads
from kernorch.providers.torch_exec import Program, build_program

VARIANTS = {"eager": "torch", "channels_last": "torch_cl", "jit": "torch_jit", "onednn": "torch_onednn"}
_LINEAR = (Op.MATMUL, Op.CONV, Op.CONV_TRANSPOSE)
_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "bool", "int8", "int16", "int32", "int64", "uint8"})


class TorchProvider(Provider):
    own_pool = True

    def __init__(self, variant: str = "eager", threads: int | None = None, bake_constants: bool = True) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown torch variant {variant!r}; choose from {sorted(VARIANTS)}")
        self.variant = variant
        self.name = VARIANTS[variant]
        self.threads = threads or default_threads()
        self.bake_constants = bake_constants

    def can_run(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> bool | str:
        members = set(members)
        prims = [p for p in g.prims if p.output in members]
        linear = [p for p in prims if p.op in _LINEAR]
        if len(linear) != 1:
            return f"needs exactly one linear prim, has {len(linear)}"
        for p in prims:
            if p.kind not in (Kind.ELEMENTWISE, Kind.BROADCAST, Kind.LINEAR) and p.op not in (Op.VIEW, Op.CONCAT):
                return f"{p.op.value} is not part of a linear + elementwise epilogue kernel"
        for v in set(g.boundary(members)[0]) | members:
            if g.types[v].dtype not in _DTYPES:
                return f"dtype {g.types[v].dtype} of %{v} unsupported"
        lin = linear[0]
        if self.variant in ("channels_last", "jit") and (lin.op is not Op.CONV or len(g.types[lin.output].shape) != 4):
            return f"the {self.variant} variant serves 2-D convolutions only"
        if self.variant == "onednn":
            return _onednn_fits(g, lin)
        return True

    def build(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> BuiltKernel:
        reason = self.can_run(g, members, outputs)
        if reason is not True:
            raise ValueError(reason)
        prog = build_program(g, members, outputs, bake=self.bake_constants,
                             channels_last=self.variant == "channels_last", inplace=self.variant != "jit",
                             onednn=self.variant == "onednn")
        run = _jit_runner(prog) if self.variant == "jit" else prog.run
        threads = self.threads

        def call(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            with torch.no_grad():
                return run(inputs)

        def call_into(inputs: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
            """Results copied straight into the planned buffers: one pass, whatever the memory
            format a library left them in (a channels-last convolution result into NCHW)."""
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            with torch.no_grad():
                for o, r in zip(outs, prog.run(inputs, finish=False)):
                    o.copy_(r.reshape(o.shape))

        return BuiltKernel(self.name, prog.inputs, prog.outputs, call, prog.baked, prog.detail,
                           run_into=None if self.variant == "jit" else call_into, fresh=self.variant != "jit",
                           state={"threads": threads})  # loading builds it again


def _onednn_fits(g: Graph, lin) -> bool | str:
    """The oneDNN variant: a 2-D convolution or a matmul by a 2-D matrix, float32 or bfloat16, with
    a constant weight (prepacked once)."""
    w = lin.inputs[1]
    if w not in g.constants or g.types[w].dtype not in ("float32", "bfloat16"):
        return "the onednn variant needs a constant float32 or bfloat16 weight"
    if lin.op is Op.CONV and len(g.types[lin.output].shape) == 4:
        return True
    if lin.op is Op.MATMUL and len(g.types[w].shape) == 2:
        return True
    return "the onednn variant serves 2-D convolutions and matmuls by a matrix"


def _jit_runner(prog: Program):
    """Trace the program as a module with its constants as frozen attributes, then let PyTorch
    turn convolutions into prepacked oneDNN ops with fused activations."""
    live = [i for i, v in enumerate(prog.inputs) if v not in prog.baked]

    class Kernel(torch.nn.Module):
        def forward(self, *xs):
            full: list = [None] * len(prog.inputs)
            for i, x in zip(live, xs):
                full[i] = x
            return tuple(prog.run(full, finish=False))

    every = prog.example()
    example = [every[i] for i in live]
    with torch.no_grad():
        traced = torch.jit.trace(Kernel().eval(), tuple(example), check_trace=False)
        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        outs = frozen(*[inputs[i] for i in live])
        return [o.contiguous() for o in outs]

    return run

