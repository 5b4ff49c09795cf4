"""Lowering: (graph, members, outputs) -> KernelSpec, through the first kernel template that takes
the kernel (templates.py)."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from kernorch.codegen import templates
from kernorch.codegen.facts import CannotGenerate, kernel_prims
from kernorch.codegen.feasible import kernel_kind, why_not
from kernorch.codegen.kernel import KernelSpec
from kernorch.codegen.toolchain import default_threads
from kernorch.ir.graph import Graph
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions


def lower(g: Graph, members: Iterable[int], outputs: Sequence[int], name: str | None = None,
          num_threads: int | None = None, options: CodegenOptions = DEFAULT_CODEGEN) -> KernelSpec:
    """The KernelSpec of a C kernel scheduled for ``num_threads`` (default: toolchain.default_threads())
    and generated with ``options``; raises CannotGenerate with the reason otherwise."""
    members = set(members)
    reason = why_not(g, members, outputs)
    if reason is None and kernel_kind(g, members, outputs, why_not) is not None:
        reason = "linear and opaque kernels are not C kernels"
    if reason is not None:
        raise CannotGenerate(reason)
    template = templates.first(g, kernel_prims(g, members), outputs, options)
    if template is None:  # feasible.py took the kernel, so the catch-all template should have
        raise CannotGenerate("; ".join(f"{n}: {r}" for n, r in templates.reasons(g, kernel_prims(g, members),
                                                                                 outputs, options).items()))
    spec = template.lower(g, members, list(outputs), num_threads or default_threads(), options, name)
    return dataclasses.replace(spec, options=options, template=template.name)
