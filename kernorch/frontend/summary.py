"""What ``kernorch inspect`` reports about an imported model, as data (the CLI only formats it)."""

from __future__ import annotations

from dataclasses import dataclass

from kernorch.frontend.onnx_import import ImportReport
from kernorch.ir.graph import Graph


def graph_width(graph: Graph) -> int:
    """Max number of live values along the topological order of the prims.

    A graph input or prim output is live from its definition to its last use (to the end for graph
    outputs); constants (weights) are not counted. Candidate enumeration grows with this width."""
    last_use: dict[int, int] = {}
    for i, p in enumerate(graph.prims):
        for v in p.inputs:
            last_use[v] = i
    end = len(graph.prims)
    for v in graph.outputs:
        last_use[v] = end
    dies_at: dict[int, int] = {}
    for v, i in last_use.items():
        if v not in graph.constants:
            dies_at[i] = dies_at.get(i, 0) + 1
    live = sum(1 for v in graph.inputs if v in last_use)
    width = live
    for i, p in enumerate(graph.prims):
        if p.output in last_use:
            live += 1
        width = max(width, live)
        live -= dies_at.get(i, 0)
    return width


@dataclass
class ModelSummary:
    inputs: list[tuple[str, str]]      # (name, type) of graph inputs
    outputs: list[tuple[str, str]]
    op_histogram: dict[str, int]       # ONNX op type -> count, most frequent first
    prims_by_kind: dict[str, int]
    opaque: dict[str, int]             # ONNX op type -> count kept whole
    prims: int
    constants: int
    constant_bytes: int
    folded: int
    width: int
    import_seconds: float


def summarize(graph: Graph, report: ImportReport, import_seconds: float) -> ModelSummary:
    hist = dict(sorted(report.op_histogram.items(), key=lambda kv: (-kv[1], kv[0])))
    opaque = dict(sorted(((k, n) for k, n in report.opaque.items() if n > 0), key=lambda kv: (-kv[1], kv[0])))
    return ModelSummary(
        inputs=[(graph.name(v), repr(graph.types[v])) for v in graph.inputs],
        outputs=[(graph.name(v), repr(graph.types[v])) for v in graph.outputs],
        op_histogram=hist,
        prims_by_kind=graph.counts_by_kind(),
        opaque=opaque,
        prims=len(graph.prims),
        constants=len(graph.constants),
        constant_bytes=sum(graph.types[v].nbytes for v in graph.constants),
        folded=report.folded,
        width=graph_width(graph),
        import_seconds=import_seconds,
    )
