"""Which output of a generated kernel may be written over one of its inputs.

Why: a residual add fused into a convolution's epilogue reads the residual (ResNet-50's layer 1:
3.2 MB) and writes as much again to another buffer; a buffer not in cache is read from memory
before it is written, so the kernel moves three tensors where one read and one write of the same
lines would do. onnxruntime's FusedConv adds its Sum input in place; in a model (weights and
activations competing for the cache) our conv + add + relu took 756-852 us where onnxruntime's
took 565-575 (same process, alternated).

An output ``o`` may take the buffer of an input ``u`` of the same dtype and size when every prim
of the kernel that depends on ``u`` is elementwise or a view, ``o`` is the only kernel output among
them, and every path from ``u`` to ``o`` composes to the identity index map: then ``o[i]`` is the
only element computed from ``u[i]``, and it is computed from it before it is stored, so no element
of ``u`` is read after its bytes were overwritten. Whether ``u`` is still needed after the kernel
is the memory planner's question (memory.py: only a value whose last reader this is gives its
slot away). Only kernorch's generated C kernels are asked: library kernels return new buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernorch.ir import layout
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim

OVERWRITING_PROVIDERS = ("c",)


def overwritable(g: Graph, members: Sequence[int], inputs: Sequence[int], outputs: Sequence[int],
                 every: dict[int, Prim] | None = None) -> tuple[tuple[int, int], ...]:
    """(output, input) pairs: the output may be written over the input's buffer. Each input and
    each output at most once. ``every``: ``g.producers()``, when the caller has it."""
    every = g.producers() if every is None else every
    producers = {v: every[v] for v in members}
    readers: dict[int, list[Prim]] = {}
    for p in producers.values():
        for x in dict.fromkeys(p.inputs):
            readers.setdefault(x, []).append(p)
    pairs: list[tuple[int, int]] = []
    taken: set[int] = set()
    for u in inputs:
        dependent = _dependents(u, readers)
        if dependent is None:
            continue
        outs = [o for o in outputs if o in dependent]
        if len(outs) != 1 or outs[0] in taken:
            continue
        o = outs[0]
        same = g.types[o].dtype == g.types[u].dtype and tuple(g.types[o].shape) == tuple(g.types[u].shape)
        if same and _identity_paths(o, u, producers, dependent, layout.identity(g.types[o].shape)):
            pairs.append((o, u))
            taken.add(o)
    return tuple(pairs)


def _dependents(u: int, readers: dict[int, list[Prim]]) -> set[int] | None:
    """The values computed from ``u`` inside the kernel, or None when one of them is computed by
    a prim that is neither elementwise nor a view (it may read ``u`` at other indices)."""
    seen: set[int] = set()
    todo = [u]
    while todo:
        for p in readers.get(todo.pop(), ()):
            if p.kind is not Kind.ELEMENTWISE and p.op is not Op.VIEW:
                return None
            if p.output not in seen:
                seen.add(p.output)
                todo.append(p.output)
    return seen


def _identity_paths(v: int, u: int, producers: dict[int, Prim], dependent: set[int], m: layout.IndexMap) -> bool:
    """Whether every path from ``u`` to ``v`` (through ``dependent`` values, elementwise prims and
    views) reads ``u`` at the index of ``v`` it computes: ``m`` maps the index of the output the
    walk started from to ``v``'s index (the identity at the start)."""
    if v == u:
        return m.is_identity()
    p = producers[v]
    if p.op is Op.VIEW:
        inner = m.compose(p.attrs.map)
        return inner is not None and _identity_paths(p.inputs[0], u, producers, dependent, inner)
    return all(_identity_paths(x, u, producers, dependent, m) for x in dict.fromkeys(p.inputs)
               if x == u or x in dependent)
