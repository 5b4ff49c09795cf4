"""The adapter from a primitive graph to the orchestrator's abstract Dag (node id = output value id)."""

from __future__ import annotations

import math

from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind, Op, Prim
from kernorch.orchestrate.dag import Dag


def prim_flops(g: Graph, p: Prim) -> float:
    """Arithmetic work of one prim: multiply-adds count 2, layout moves count 0."""
    out = g.types[p.output]
    if p.kind is Kind.ELEMENTWISE:
        return float(out.size)
    if p.kind is Kind.REDUCE:
        return float(g.types[p.inputs[0]].size)
    if p.op is Op.MATMUL:
        return 2.0 * out.size * g.types[p.inputs[0]].shape[-1]
    if p.op in (Op.CONV, Op.CONV_TRANSPOSE):
        w = g.types[p.inputs[1]].shape
        per_out = math.prod(w[1:]) if p.op is Op.CONV else w[0] // p.attrs.groups * math.prod(w[2:])
        return 2.0 * out.size * per_out
    if p.kind is Kind.OPAQUE:
        return float(out.size)
    return 0.0


def _read_bytes(g: Graph, p: Prim, v: int) -> int:
    """Bytes of ``v`` that ``p`` reads: all of it, except a gather's data (an embedding table),
    of which it reads at most one element per output element."""
    if p.op is Op.GATHER and v == p.inputs[0]:
        return min(g.types[v].nbytes, g.types[p.output].nbytes)
    return g.types[v].nbytes


def dag_from_graph(g: Graph) -> Dag:
    produced = {p.output for p in g.prims}
    nodes, preds, kind, group, nbytes, flops, ext = [], {}, {}, {}, {}, {}, {}
    for p in g.prims:
        n = p.output
        nodes.append(n)
        preds[n] = tuple(dict.fromkeys(v for v in p.inputs if v in produced))
        kind[n] = p.kind.value
        group[n] = p.origin or f"%{n}"
        nbytes[n] = g.types[n].nbytes
        flops[n] = prim_flops(g, p)
        ext[n] = sum(_read_bytes(g, p, v) for v in dict.fromkeys(p.inputs)
                     if v not in produced and g.types[v].shape != ())
    return Dag(tuple(nodes), preds, frozenset(g.outputs), kind, group, nbytes, flops, ext)


NARROW = ("uint8", "int8")  # quantized values: where an int8 kernel starts or ends, never merged away


def chained_prims(g: Graph) -> tuple[frozenset[int], ...]:
    """Groups for ``Knobs.groups`` (contract.py): an elementwise prim joins its only reader's group
    when that reader is elementwise and reads no other computed value (a chain: QuantizeLinear's
    div, round, add, max, min, cast; DequantizeLinear's cast, sub, mul), and a broadcast of
    constants joins its only reader's. A value of a narrow integer type ends its group: int8
    kernels read and write those from memory."""
    made, readers = g.producers(), g.consumers()

    def computed(p: Prim) -> set[int]:  # computed inputs, constant broadcasts aside
        return {v for v in p.inputs if v in made and not _constant_broadcast(made[v], made)}

    root: dict[int, int] = {}
    for p in reversed(g.prims):
        rs = readers.get(p.output, [])
        r = rs[0] if len(rs) == 1 else None
        joins = (r is not None and p.output not in g.outputs and r.kind is Kind.ELEMENTWISE
                 and ((p.kind is Kind.ELEMENTWISE and g.types[p.output].dtype not in NARROW
                       and computed(r) == {p.output}) or _constant_broadcast(p, made)))
        root[p.output] = root[r.output] if joins else p.output
    groups: dict[int, set[int]] = {}
    for v, r in root.items():
        groups.setdefault(r, set()).add(v)
    return tuple(frozenset(s) for s in groups.values() if len(s) > 1)


def _constant_broadcast(p: Prim, made: dict[int, Prim]) -> bool:
    return p.op is Op.BROADCAST and not any(v in made for v in p.inputs)
