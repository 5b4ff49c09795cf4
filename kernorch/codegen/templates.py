"""The kernel templates of the C code generator, in the order they are tried: the first that
takes a kernel writes it. Each is one module defining ``TEMPLATE`` (template.py says what that
holds); adding a kind of kernel is a module and one line here.

    winograd  3x3 convolutions with unit strides, Winograd F(6,3) (winograd.py)
    gemm      one matmul or convolution with its epilogue, packed-panel tiles (gemm.py)
    depthwise channels-last depthwise convolutions as register-blocked row tiles (depthwise.py)
    loops     loop nests of memory-bound prims, stencil convolutions (loops.py): the catch-all

Kernels no template takes are built elsewhere (build.py): a linear prim through the vendor
library (linear.py), an opaque prim by the reference interpreter.
"""

from __future__ import annotations

from typing import Sequence

from kernorch.codegen import depthwise, gemm, loops, winograd
from kernorch.codegen.template import Template
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Prim
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions

TEMPLATES: tuple[Template, ...] = (winograd.TEMPLATE, gemm.TEMPLATE, depthwise.TEMPLATE, loops.TEMPLATE)


def first(g: Graph, prims: list[Prim], outputs: Sequence[int],
          options: CodegenOptions = DEFAULT_CODEGEN) -> Template | None:
    """The template that writes this kernel (its prims in order), or None when none takes it."""
    return next((t for t in TEMPLATES if t.why_not(g, prims, outputs, options) is None), None)


def reasons(g: Graph, prims: list[Prim], outputs: Sequence[int],
            options: CodegenOptions = DEFAULT_CODEGEN) -> dict[str, str | None]:
    """Each template's answer for this kernel: None where it takes it, else why not."""
    return {t.name: t.why_not(g, prims, outputs, options) for t in TEMPLATES}
