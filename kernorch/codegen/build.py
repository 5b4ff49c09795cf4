"""Build kernels: many C kernels per compiler call (one translation unit, one shared library per
batch, cached by source hash in toolchain.py), linear kernels through torch, opaque kernels
through the reference implementation. Every result is a runner.Kernel.

Threads: a C kernel is scheduled for and runs with ``num_threads`` OpenMP threads, fixed when it
is built: by default ``env.threads`` ($KERNORCH_NUM_THREADS, else the CPUs this process may use).
``env`` is the Env the caller's entry point read (kernorch/options.py): cache directory, compiler.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence, Union

from kernorch.codegen import toolchain
from kernorch.codegen.c import HEADER, emit_kernel
from kernorch.codegen.feasible import kernel_kind, why_not
from kernorch.codegen.kernel import KernelSpec
from kernorch.codegen.linear import LinearKernel
from kernorch.codegen.lower import lower
from kernorch.codegen.runner import CKernel, Kernel, OpaqueKernel
from kernorch.codegen.toolchain import cache_dir, compile_source, default_threads, function, load  # noqa: F401
from kernorch.errors import CompilerError
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions, Env


Item = Union[KernelSpec, tuple]


def build_many(items: Sequence[Item], num_threads: int | None = None, g: Graph | None = None,
               env: Env | None = None, options: CodegenOptions = DEFAULT_CODEGEN) -> list[Kernel]:
    """Build many kernels with one compiler call. ``items`` are KernelSpecs (then pass the graph
    ``g`` they came from) or ``(graph, members, outputs)`` triples (C, linear or opaque), the C
    ones generated with ``options``."""
    env = env or Env.read()
    threads = num_threads or env.threads
    out: list[Kernel | None] = [None] * len(items)
    specs: list[tuple[int, KernelSpec, Graph]] = []
    for k, item in enumerate(items):
        if isinstance(item, KernelSpec):
            if g is None:
                raise ValueError("build_many needs the graph when given KernelSpecs")
            specs.append((k, item, g))
            continue
        graph, members, outputs = item
        members = set(members)
        kind = kernel_kind(graph, members, outputs, why_not)
        if kind is Kind.OPAQUE:
            out[k] = OpaqueKernel(graph, members)
        elif kind is Kind.LINEAR:
            out[k] = LinearKernel(graph, members, outputs)
        else:
            specs.append((k, lower(graph, members, outputs, num_threads=threads, options=options), graph))
    if specs:
        for k, kern in zip([k for k, _, _ in specs], _build_c([(s, gr) for _, s, gr in specs], threads, env)):
            out[k] = kern
    return out  # type: ignore[return-value]


def _build_c(specs: list[tuple[KernelSpec, Graph]], threads: int, env: Env) -> list[CKernel]:
    sources: dict[str, str] = {}
    for k, (spec, gr) in enumerate(specs):
        src = emit_kernel(spec)
        if sources.setdefault(spec.name, src) != src:  # same kernel scheduled differently
            spec = dataclasses.replace(spec, name=f"{spec.name}_{k}")
            specs[k] = (spec, gr)
            sources[spec.name] = emit_kernel(spec)
    where = toolchain.compiled_kernels(sources, env, header=HEADER)  # compiled before, in another unit
    todo = {name: src for name, src in sources.items() if name not in where}
    if todo:
        path = _compile(todo, env)
        toolchain.remember_kernels(todo, path, env, header=HEADER)
        where.update(dict.fromkeys(todo, path))
    libs = {name: toolchain.load(path) for name, path in where.items()}
    return [CKernel(spec, toolchain.function(libs[spec.name], spec.name), libs[spec.name],
                    HEADER + "\n" + sources[spec.name], threads, gr.types) for spec, gr in specs]


def _compile(sources: dict[str, str], env: Env):
    """One translation unit of ``sources``; a compiler error names the kernel that caused it."""
    try:
        return toolchain.compile_source("\n".join(sources.values()), env, header=HEADER)
    except CompilerError:
        for name, src in sources.items():  # find the culprit for the message
            try:
                toolchain.compile_source(src, env, header=HEADER)
            except CompilerError as err:
                raise CompilerError(f"kernel {name}: {err}") from None
        raise


def build_kernel(g: Graph, members: Iterable[int], outputs: Sequence[int], num_threads: int | None = None,
                 env: Env | None = None, options: CodegenOptions = DEFAULT_CODEGEN) -> Kernel:
    """Build one kernel (C, linear or opaque)."""
    return build_many([(g, set(members), list(outputs))], num_threads, env=env, options=options)[0]
