"""What a kernel template of the C code generator is: a name, when it takes a kernel (with the
reason when it does not), how it lowers one to a KernelSpec (which c.py prints, whatever its
template) and the CodegenOptions fields it reads. Each template module defines one ``TEMPLATE``;
templates.py lists them in the order they are tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from kernorch.codegen.kernel import KernelSpec
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Prim
from kernorch.options import CodegenOptions

# (graph, the kernel's prims in order, its outputs, options) -> None when the template takes it, else why not
WhyNot = Callable[[Graph, list[Prim], Sequence[int], CodegenOptions], "str | None"]
# (graph, members, outputs, threads, options, name) -> the kernel's KernelSpec
Lower = Callable[[Graph, set[int], list[int], int, CodegenOptions, "str | None"], KernelSpec]


@dataclass(frozen=True)
class Template:
    """One kind of generated C kernel (see the module doc)."""

    name: str
    why_not: WhyNot
    lower: Lower
    reads: tuple[str, ...] = ()  # the CodegenOptions fields that change its code
    doc: str = ""  # one line: what it writes
