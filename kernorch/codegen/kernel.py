"""KernelSpec: the target-independent loop-level description of one fused kernel.

A kernel template (templates.py, through lower.py) builds it from (graph, members, outputs); c.py
prints it as C/OpenMP. Everything a printer needs is explicit here (loops, their parallel/SIMD/
reduction flags, per-thread arrays, SSA scalar statements, stores), so printers make no decisions. Index expressions are
kernorch.ir.index expressions over kernel-wide variable ids; ``KernelSpec.sizes[i]`` is the
range of variable ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from kernorch.ir.index import Expr
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions


@dataclass(frozen=True)
class Arg:
    """A kernel argument: ``role`` is "in" (read), "out" (written) or "ws" (scratch, carved from
    the workspace at ``offset`` bytes)."""

    name: str
    dtype: str
    size: int
    role: str
    offset: int = 0


@dataclass(frozen=True)
class Let:
    """``name = op(args)``: one SSA scalar of type ``dtype``. ``args`` name earlier Lets.
    Special ops and their ``attr``: "load" (buffer name, offset Expr), "imm" (value),
    "cond" (Expr, lo, hi: ``lo <= Expr < hi``), "cast" (no attr; the type is ``dtype``).
    Every other op is an elementwise scalar function named by ``kernorch.ir.prims.Op.value``
    or "select" (``args[0] ? args[1] : args[2]``)."""

    name: str
    dtype: str
    op: str
    args: tuple[str, ...] = ()
    attr: object = None


@dataclass(frozen=True)
class Store:
    """``buf[offset] = value`` (offset None: ``buf`` is a scalar variable)."""

    buf: str
    offset: Expr | None
    value: str


@dataclass(frozen=True)
class Accum:
    """``acc[offset] = combine_op(acc[offset], value)``; op in sum/prod/max/min."""

    acc: str
    offset: Expr | None
    op: str
    value: str
    dtype: str


@dataclass(frozen=True)
class Decl:
    """A scalar variable ``name`` (count 1) or per-thread array, set to ``init`` (None: unset)."""

    name: str
    dtype: str
    count: int = 1
    init: float | int | None = None


@dataclass(frozen=True)
class Loop:
    """``for var in [lo, hi)``. ``simd``: iterations are independent (reductions excepted);
    ``reductions``: (variable, op, dtype) combined across SIMD lanes."""

    var: int
    lo: Expr
    hi: Expr
    body: tuple["Stmt", ...]
    simd: bool = False
    reductions: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Parallel:
    """``for var in [0, extent)`` split across threads (when ``threads``); ``arrays`` are
    allocated once per thread and live across iterations."""

    var: int
    extent: int
    body: tuple["Stmt", ...]
    arrays: tuple[Decl, ...] = ()
    threads: bool = True


@dataclass(frozen=True)
class Call:
    """``fn(args...)``: a helper of the C header (the GEMM tile, codegen/gemm.py). Each argument
    is an index Expr, a name (a buffer or array), or (buffer, offset Expr) for ``buffer + offset``."""

    fn: str
    args: tuple


Stmt = Union[Let, Store, Accum, Decl, Loop, Parallel, Call]


def statements(body):
    """Every statement of ``body``, those inside loops and parallel loops too, in order."""
    for s in body:
        yield s
        if isinstance(s, (Loop, Parallel)):
            yield from statements(s.body)


@dataclass(frozen=True, kw_only=True)
class SpecHeader:
    """What every generated kernel's description states (the C KernelSpec below, the Triton
    TritonSpec): its name, arguments (inputs, outputs, scratch, in that order), variable ranges,
    graph value ids of ``inputs``/``outputs`` in argument order, canonical ``key``, a ``comment``
    describing the prims and the lowerer's ``notes``."""

    name: str
    args: tuple[Arg, ...]
    sizes: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    key: str = ""
    comment: str = ""
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, kw_only=True)
class KernelSpec(SpecHeader):
    """One C kernel: a body of Parallel groups executed in sequence and ``workspace`` bytes of
    scratch."""

    body: tuple[Stmt, ...]
    workspace: int = 0
    # (input position, permutation of its dims, panel width, transform): the kernel reads that
    # input, a constant weight, as ``x.permute(perm).contiguous()`` (panel 0), or that as a (K, N)
    # matrix cut into zero-padded panels of ``panel`` columns, (npanels, K, panel), or its
    # ``transform`` (packing.TRANSFORMS): a copy its runner makes once, in the order its loops
    # read it (``packing.packed_copy``)
    packs: tuple[tuple[int, tuple[int, ...], int, str], ...] = ()
    options: CodegenOptions = DEFAULT_CODEGEN  # the switches it was generated with (a saved model regenerates it so)
    template: str = ""  # the template that wrote it (templates.py), set by lower.lower
    traits: tuple[str, ...] = ()  # which of its template's variants it took (e.g. "window sums"): what fuzzing counts
