"""A compiled model whose plan holds a kernel of every provider, chosen by rule instead of by timing.

Measured compiles pick each kernel's provider by its timing on this machine, and since kernels go to
the providers on kernorch's own pool (PyTorch and its oneDNN variant) wherever those can run them,
onnxruntime and OpenVINO show up as regions when those time faster, and as single kernels only
where nothing on the own pool can run them. A save/load test
needs every provider in one plan whatever the machine, so this builds the plan with the compile's
own pieces (import, rewrites, layout pairs, ``orchestrate`` on roofline costs with small segments,
``build_plan``), with two deterministic stand-ins for measurement:

* region prices: the second segment and a later one of another structure (and any segment alike:
  prices are per kernel key) cost nearly nothing as a region and no other run of segments has
  one, so ``orchestrate`` hands those to regions (regions.py): the first kind to onnxruntime,
  the second to OpenVINO;
* per-kernel winners: ``MeasuredCost.best`` (what measuring records) is written by rule: in plan
  order, each kernel goes to the provider used least so far among those that can run it (the
  code generator, torch, torch_onednn where it fits; onnxruntime and OpenVINO too when the plan
  has no regions, as single kernels of a foreign pool).
"""

from __future__ import annotations

from kernorch import codegen
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.measure import MeasuredCost, external_providers, ordered_outputs
from kernorch.orchestrate.partition import partition
from kernorch.orchestrate.strategies import orchestrate
from kernorch.orchestrate.tuning_db import Record, TuningDB
from kernorch.providers.select import reason_or_none
from kernorch.rewrite.layouts import channels_last_pairs
from kernorch.rewrite.pipeline import DEFAULT_RULES, apply_rewrites
from kernorch.runtime.compile import build_plan
from kernorch.runtime.sources import load_graph
from kernorch.runtime.model import CompiledModel

PROVIDERS = ("ort", "openvino", "torch", "torch_onednn")
# what every plan must hold: generated C ("c"), and each provider's kernels
EVERY = ("c", "torch", "torch_onednn", "ort", "openvino")
TURNS = ("torch_onednn", "torch", "codegen", "ort", "openvino")  # ties go to the first
REGION_ONLY = ("ort", "openvino")  # in plans with regions, these serve the regions only
SEGMENT_NODES = 12  # segments of at most this many prims: small models still have several


def prepared_graph(model, example_inputs=None) -> Graph:
    """The graph ``compile`` plans: imported, rewritten, with channels-last layout pairs."""
    g, _ = load_graph(model, example_inputs)
    g, _ = apply_rewrites(g, DEFAULT_RULES)
    return channels_last_pairs(g)[0]


def steered_model(g: Graph, *, regions: bool, threads: int = 2) -> tuple[CompiledModel, tuple[int, ...]]:
    """Graph ``g`` (``prepared_graph``) compiled with every provider in its plan (see the module
    docstring), and the indices of its region kernels."""
    dag = dag_from_graph(g)
    pos = {p.output: i for i, p in enumerate(g.prims)}
    ext = external_providers(threads, PROVIDERS)
    assert sorted(p.name for p in ext) == sorted(PROVIDERS), "every provider must be installed"
    measured = MeasuredCost(g, TuningDB(":memory:"), threads=threads, providers=ext)
    # no joins across cuts: a join could swallow the one kernel steered to a provider
    knobs = Knobs(regions=regions, max_segment_nodes=SEGMENT_NODES, join_cuts=False)
    live = dag.without_dead()
    segments = partition(live, max_segment_nodes=knobs.max_segment_nodes, max_cut_width=knobs.max_cut_width,
                         max_kernel_nodes=knobs.max_kernel_nodes)  # as orchestrate's optimal strategy cuts
    assert len(segments) >= 4, f"{len(segments)} segments: too few for two regions between kernels"
    key = [g.kernel_key(c.nodes, ordered_outputs(pos, c)) for c in (multi_output(live, s.nodes) for s in segments)]
    last = next((i for i in range(len(segments) - 2, 1, -1) if key[i] != key[1]), None)
    assert last is not None, "no two segments of different structure for the two regions"
    cheap = {key[1], key[last]}  # two segments of different structure, between kernel plans

    def region_cost(cand):  # by kernel key, as measured prices are: equal segments get it too
        return 1e-12 if g.kernel_key(cand.nodes, ordered_outputs(pos, cand)) in cheap else None

    library = [p for p in ext if p.name in ("torch", "torch_onednn")]

    def can_generate(cand):  # a convolution joins a kernel only where the libraries can run it too (not
        # as a C stencil with a prologue only the code generator takes): kernels every turn can serve
        outs = ordered_outputs(pos, cand)
        if not measured.can_generate(cand):
            return False
        if not any(g.prims[pos[v]].op.value == "conv" for v in cand.nodes if v in pos):
            return True
        return any(reason_or_none(p.can_run(g, cand.nodes, outs)) is None for p in library)

    plan = orchestrate(dag, "optimal", RooflineCost().bind(dag), can_generate,
                       lambda c: g.kernel_key(c.nodes, ordered_outputs(pos, c)), knobs,
                       region_cost if regions else None)
    assert (len(plan.regions) >= 2) if regions else not plan.regions, plan.summary()
    by_name = {p.name: p for p in ext}
    used = dict.fromkeys(TURNS, 0)
    for k, c in enumerate(plan.kernels):
        outs = ordered_outputs(pos, c)
        able = {n for n, p in by_name.items() if reason_or_none(p.can_run(g, c.nodes, outs)) is None}
        if codegen.can_generate(g, c.nodes, outs):
            able.add("codegen")
        if k in plan.regions:
            name = "ort" if measured.key(c) == key[1] else "openvino"
            assert name in able, (name, able)
            measured.best[measured.region_key(c)] = Record(name, 1e-12, "ok")
            continue
        can = [n for n in TURNS if n in able and (not regions or n not in REGION_ONLY)]
        if can:
            name = min(can, key=lambda n: (used[n], TURNS.index(n)))
            used[name] += 1
            if name != "codegen":
                measured.best[measured.key(c)] = Record(name, 1e-6, "ok")
    return CompiledModel(build_plan(g, plan, threads, measured, ext), None, g), plan.regions


def providers_of(model: CompiledModel) -> set[str]:
    """The providers of a model's kernels, generated C as "c"."""
    return {i.provider for i in model.executable.infos}
