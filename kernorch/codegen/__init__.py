"""Code generation: candidate kernel (graph, members, outputs) -> runnable Kernel.

    can_generate(g, members, outputs) -> bool          cheap feasibility, no compilation
    why_not(g, members, outputs) -> str | None          the reason when it cannot
    lower(g, members, outputs) -> KernelSpec            loop-level description of a C kernel
    emit_module(specs) -> str                           C source of many kernels
    build_kernel(g, members, outputs, num_threads=None, env=None) -> Kernel
    build_many(items, num_threads=None, g=None, env=None) -> list[Kernel]   one compiler call per batch
    (``env``: the options.Env the caller's entry point read; None reads the environment now)
    Kernel.run(inputs, out=None) -> list[torch.Tensor]; .inputs / .outputs value ids; .source
"""

from kernorch.codegen.c import emit_module
from kernorch.codegen.feasible import CannotGenerate, why_not
from kernorch.codegen.kernel import KernelSpec
from kernorch.codegen.lower import lower
from kernorch.codegen.build import build_kernel, build_many
from kernorch.codegen.runner import Kernel


def can_generate(g, members, outputs) -> bool:
    """True when ``build_kernel`` can produce this kernel (see ``why_not`` for the reason otherwise)."""
    return why_not(g, members, outputs) is None


__all__ = ["CannotGenerate", "Kernel", "KernelSpec", "build_kernel", "build_many", "can_generate", "emit_module",
           "lower", "why_not"]
