"""The whole model as one region, on the user's original ONNX model (providers/original.py).

The compile times its solver's plan end to end against the whole graph as one region
(compile.py ``_faster_end_to_end``). Besides the region on kernorch's exported primitive graph,
the original model itself is a contender for each runtime that compiles whole models
(onnxruntime, OpenVINO), when the model came in as ONNX: built, verified against the reference
interpreter on the compiled graph (a wrong one is left out and said in the report's failures),
then timed with the others.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import onnx

from kernorch.frontend.onnx_import import load_model
from kernorch.ir import oracle
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.plan import Plan, build_plan
from kernorch.providers.base import verify
from kernorch.providers.original import build_original
from kernorch.runtime.executable import Executable, KernelInfo, ProviderKernel, executable_for

LABEL = {"ort": "original model (onnxruntime", "openvino": "original model (openvino",
         "openvino_bf16": "original model (openvino bf16"}  # + ")" or ", 1 thread)"


def source_model(model: Any):
    """The ONNX model a compile started from (a path, bytes or a ModelProto), else None."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike, bytes, bytearray)):
        try:
            return load_model(model)
        except Exception:  # noqa: BLE001 - the import read it a moment ago; without it, no contender
            return None
    return None


def original_regions(g: Graph, proto, providers: Sequence, failures: list[str]) -> list[tuple[str, Executable]]:
    """(label, executable) per provider that runs ``proto`` as the whole graph correctly; what
    failed goes to ``failures`` (one line each)."""
    members, outputs = _whole(g)
    if not members:
        return []
    out = []
    ref = None
    tries = [(p, LABEL[p.name] + ")", None) for p in providers if p.name in LABEL]
    # A small model can run faster on one thread than on several (waking threads costs more than
    # they save): onnxruntime on one thread is a contender too, timed like the rest.
    tries += [(p, LABEL[p.name] + ", 1 thread)", 1) for p in providers if p.name == "ort" and p.threads > 1]
    for p, label, threads in tries:
        try:
            built = build_original(p, g, proto, members, outputs, threads)
            if ref is None:
                ref = oracle.reference(g, g.subgraph(set(members), list(outputs)))
            ok, err, detail = verify(built, g, members, outputs, reference=ref)
        except Exception as e:  # noqa: BLE001 - a model a runtime cannot take is a line, not a crash
            ok, detail = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if not ok:
            failures.append(f"{label}: {detail}"[:300])
            continue
        pos = {q.output: i for i, q in enumerate(g.prims)}
        ordered = tuple(sorted(members, key=pos.__getitem__))
        producers = g.producers()
        info = KernelInfo(ordered, tuple(producers[v].op.value for v in ordered), built.provider, None)
        out.append((label, executable_for(g, [ProviderKernel(built)], [info])))
    return out


def region_plan(g: Graph, like: Plan, seconds: float) -> Plan:
    """The one-region plan of the whole graph (what the summary and report describe)."""
    live = dag_from_graph(g).without_dead()
    cand = multi_output(live, live.nodes)
    return build_plan(live, [cand], [seconds], like.strategy, like.report, like.stats, regions=[0])


def _whole(g: Graph) -> tuple[list[int], list[int]]:
    """Every prim some graph output depends on, and the graph's outputs."""
    producers = g.producers()
    live: set[int] = set()
    todo = list(g.outputs)
    while todo:
        v = todo.pop()
        if v in live or v not in producers:
            continue
        live.add(v)
        todo.extend(producers[v].inputs)
    return [p.output for p in g.prims if p.output in live], list(g.outputs)
