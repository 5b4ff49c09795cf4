"""A reduce read only through a permutation is computed in the permuted order.

Why: the C lowering iterates a reduce in its own logical order (for a pooling window, NCHW with
the output width innermost), so a max pool between channels-last tensors gathered its taps two
channels-widths apart and then block-transposed its NCHW result into NHWC: 64x112x112 -> 56x56
took 663 us, PyTorch's channels-last pool 141 us. Permuting the reduce's kept dims the way its
only reader permutes the result makes the channels the innermost loop: contiguous loads, and the
result stored in the order the kernel writes it. Kernel-local: only a kernel that holds both the
reduce and the permutation (and does not write the reduce's own result) is lowered this way; a
kernel writing the NCHW result keeps the NCHW loops, so both layouts stay candidates."""

from __future__ import annotations

from collections.abc import Sequence

from kernorch.codegen.facts import kernel_prims
from kernorch.ir import layout
from kernorch.ir.graph import Graph, TensorType
from kernorch.ir.layout import IndexMap
from kernorch.ir.prims import Kind, Op, Prim, ReduceAttrs, ViewAttrs


def permuted_reduces(g: Graph, members: set[int], outputs: Sequence[int]) -> tuple[Graph, set[int]]:
    """(graph, members) with every such reduce and its permutation replaced by a permutation of
    the reduce's operand and a reduce over its trailing dims, writing the permutation's value;
    ``(g, members)`` unchanged when the kernel has none."""
    inside = {p.output: p for p in kernel_prims(g, members)}
    readers: dict[int, list[Prim]] = {}
    for p in inside.values():
        for v in p.inputs:
            readers.setdefault(v, []).append(p)
    swaps: dict[int, tuple[Prim, tuple[int, ...]]] = {}
    for p in inside.values():
        r = inside.get(p.inputs[0]) if p.op is Op.VIEW else None
        if (r is None or r.kind is not Kind.REDUCE or r.attrs.keepdims or r.output in outputs
                or readers.get(r.output) != [p]):
            continue
        perm = permutation(p.attrs.map)
        if perm is not None and perm != tuple(range(len(perm))):
            swaps[p.output] = (r, perm)
    if not swaps:
        return g, members
    out = Graph()
    out.types, out.inputs, out.outputs = dict(g.types), g.inputs, g.outputs
    out.constants, out.names = g.constants, g.names
    members = set(members)
    fresh = max(g.types) + 1
    for q in g.prims:
        if q.output not in swaps:
            out.prims.append(q)
            continue
        r, perm = swaps[q.output]
        x = r.inputs[0]
        shape, axes = g.types[x].shape, r.attrs.axes
        kept = [d for d in range(len(shape)) if d not in axes]
        m = layout.permute(shape, [kept[k] for k in perm] + list(axes))
        out.types[fresh] = TensorType(tuple(m.out_shape), g.types[x].dtype)
        out.prims.append(Prim(Op.VIEW, (x,), fresh, ViewAttrs(m), r.origin))
        out.prims.append(Prim(r.op, (fresh,), q.output, ReduceAttrs(tuple(range(len(kept), len(shape))), False),
                              r.origin))
        members = (members - {r.output}) | {fresh}
        fresh += 1
    return out, members


def permutation(m: IndexMap) -> tuple[int, ...] | None:
    """``perm`` when ``m`` is ``layout.permute(m.in_shape, perm)`` (size-1 dims matched in order),
    else None."""
    if m.mask or len(m.in_shape) != len(m.out_shape):
        return None
    perm: list[int | None] = [None] * len(m.out_shape)
    ones = []
    for d, e in enumerate(m.index):
        if len(e.terms) == 1 and e.const == 0 and e.terms[0][1] == 1 and hasattr(e.terms[0][0], "i"):
            k = e.terms[0][0].i
            if perm[k] is not None or m.out_shape[k] != m.in_shape[d]:
                return None
            perm[k] = d
        elif not e.terms and e.const == 0 and m.in_shape[d] == 1:
            ones.append(d)
        else:
            return None
    free = [k for k, d in enumerate(perm) if d is None]
    if len(free) != len(ones) or any(m.out_shape[k] != 1 for k in free):
        return None
    for k, d in zip(free, ones):
        perm[k] = d
    return tuple(perm)
