"""Which candidate kernels the code generator can produce, with a reason when it cannot.

Cheap and compile-free: the orchestrator asks for every candidate. A candidate is one of
- a C kernel: elementwise, reduce, broadcast and layout prims, and the linear prims a kernel
  template of templates.py writes itself (a GEMM with its epilogue, Winograd, stencils);
- a linear kernel: one MATMUL/CONV/CONV_TRANSPOSE plus free views and a bias add (linear.py);
- an opaque kernel: exactly one OPAQUE prim.
Whatever builds it, a kernel holding a max/min reduction or a comparison of a value with it, but
not both, reads that value rather than computing it (extremes.py, Note [extreme tests]).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from kernorch.codegen import extremes, linear, templates
from kernorch.codegen.facts import CannotGenerate, graph_facts, kernel_prims
from kernorch.codegen.ssa import BAD_ON_BOOL, DTYPES
from kernorch.ir import index as ix
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim

MAX_TABLE = 1 << 16  # longest constant gather table printed into C source


def kernel_kind(g: Graph, members: set[int], outputs: Sequence[int],
                why: Callable[[Graph, set[int], Sequence[int]], str | None], generator: str = "C") -> Kind | None:
    """How a target builds this kernel: Kind.OPAQUE (the node kept whole), Kind.LINEAR (a vendor
    library call) or None (generated code: memory-bound prims, and convolutions the C generator
    writes out as stencils, stencil.py); raises CannotGenerate with ``why``'s reason when the
    target's code generator cannot."""
    reason = why(g, members, outputs)
    if reason is not None:
        raise CannotGenerate(reason)
    prims = kernel_prims(g, members)
    kinds = {p.kind for p in prims}
    if Kind.OPAQUE in kinds:
        return Kind.OPAQUE
    if Kind.LINEAR in kinds and not (generator == "C" and _generated(g, prims, outputs)):
        return Kind.LINEAR
    return None


def why_not(g: Graph, members: Iterable[int], outputs: Sequence[int], generator: str = "C",
            prim_check: Callable[[Graph, Prim], str | None] | None = None) -> str | None:
    """None when the kernel can be built, else a one-line reason. The structure (outputs computed,
    an opaque prim alone, a linear prim as linear.py takes it) is every target's; each memory-bound
    prim must suit ``generator`` (dtypes, sizes, tables, then the generator's own ``prim_check``)."""
    members = set(members)
    info = graph_facts(g)
    if not members:
        return "empty kernel"
    missing = [v for v in members if v not in info.pos]
    if missing:
        return f"value {g.name(min(missing))} is not produced by a prim"
    if not outputs:
        return "kernel writes no output"
    for v in outputs:
        if v not in members:
            return f"output {g.name(v)} is not computed by the kernel"
    split = extreme_split(g, members)
    if split is not None:
        return split
    kinds = {info.kind[v] for v in members}
    if Kind.OPAQUE in kinds:
        if len(members) == 1:
            return None
        return f"opaque prim {_name(g, kernel_prims(g, members), Kind.OPAQUE)} must be alone in its kernel"
    if Kind.LINEAR in kinds and not (generator == "C" and _generated(g, kernel_prims(g, members), outputs)):
        return linear.why_not(g, members, outputs)
    for v in sorted(members, key=info.pos.__getitem__):
        key = (generator, v)
        if key not in info.prim_reason:
            p = g.prims[info.pos[v]]
            info.prim_reason[key] = _why_not_prim(g, p, generator) or (prim_check(g, p) if prim_check else None)
        if info.prim_reason[key] is not None:
            return info.prim_reason[key]
    return None


def extreme_split(g: Graph, members: Iterable[int]) -> str | None:
    """Why a kernel of ``members`` (by any generator or provider) would break a comparison of a
    value with its own max/min: it holds one of the two and computes the value itself
    (codegen/extremes.py, Note [extreme tests]); None when it does not."""
    split = extremes.split_test(graph_facts(g).tests, set(members))
    if split is None:
        return None
    x = g.name(split.value)
    return (f"{g.name(split.compare)} compares {x} with its extreme {g.name(split.reduce)} in another kernel: "
            f"{x} must be read from memory, not computed again")


def _generated(g: Graph, prims: list[Prim], outputs: Sequence[int]) -> bool:
    """The C generator writes the linear prims itself: some kernel template takes the kernel
    (templates.py: a GEMM with its epilogue, convolutions with few taps written out tap by tap)."""
    template = templates.first(g, prims, outputs)
    if any(g.types[v].dtype == "bfloat16" for p in prims if p.kind is Kind.LINEAR for v in (*p.inputs, p.output)):
        # bf16 products: AMX tiles in a GEMM (codegen/amx.py), else the vendor libraries
        return template is not None and template.name == "gemm"
    return template is not None


def _name(g: Graph, prims: list[Prim], kind: Kind) -> str:
    p = next(p for p in prims if p.kind is kind)
    return p.origin or g.name(p.output)


def _why_not_prim(g: Graph, p: Prim, generator: str) -> str | None:
    for v in (*p.inputs, p.output):
        t = g.types[v]
        if t.dtype not in DTYPES:
            return f"dtype {t.dtype} of {g.name(v)} is not supported by the {generator} generator"
        if 0 in t.shape:
            return f"{g.name(v)} is empty"
    if any(g.types[v].dtype == "bfloat16" for v in (*p.inputs, p.output)):
        if generator != "C":
            return f"bfloat16 values ({g.name(p.output)}) are not built for the {generator} generator"
        if p.kind is Kind.REDUCE:  # a bf16 accumulator would round at every step
            return f"a reduction over bfloat16 values ({g.name(p.output)}) is left to a float32 kernel"
    if p.op in BAD_ON_BOOL and any(g.types[v].dtype == "bool" for v in p.inputs):
        return f"{p.op.value} on bool operands ({g.name(p.output)})"
    if p.op is Op.VIEW and _table_len(p) > MAX_TABLE:
        return f"gather table of {g.name(p.output)} is longer than {MAX_TABLE}"
    return None


def _table_len(p: Prim) -> int:
    m = p.attrs.map
    exprs = list(m.index) + [c.expr for c in m.mask]
    longest = 0
    while exprs:
        e = exprs.pop()
        for a, _ in e.terms:
            if isinstance(a, ix.Lookup):
                longest = max(longest, len(a.table))
            if isinstance(a, (ix.FloorDiv, ix.Mod, ix.Lookup)):
                exprs.append(a.x)
            elif isinstance(a, (ix.MinOf, ix.MaxOf)):
                exprs += [a.a, a.b]
    return longest
