"""The pipeline for target "cuda": the CPU pipeline's import, rewrites and orchestration, with
GPU costs (cuda_measure.py, or a roofline calibrated on the GPU) and kernels built as Triton
programs (memory-bound prims) or torch calls on CUDA tensors (linear prims)."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
import warnings
from typing import Any

import torch

from kernorch.codegen.triton_kernel import HostKernel, TritonKernel, build_cuda, cuda_device, precompile
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.measure import ordered_outputs
from kernorch.orchestrate.plan import Plan
from kernorch.orchestrate.tuning_db import TuningDB
from kernorch.rewrite.pipeline import apply_rewrites
from kernorch.runtime.cuda_exec import cuda_executable
from kernorch.runtime.cuda_measure import CudaMeasuredCost, CudaOptions, config_of, verify_on_device
from kernorch.runtime.executable import KernelInfo

_ROOFLINE: dict[str, RooflineCost] = {}


def gpu_roofline(device: torch.device) -> RooflineCost:
    """Bandwidth from a device copy, peak from a float32 matmul, overhead of one graph node;
    on the interpreter (CPU tensors) the CPU defaults."""
    key = str(device)
    if key not in _ROOFLINE:
        if device.type != "cuda":
            _ROOFLINE[key] = RooflineCost()
        else:
            from kernorch.runtime.cuda_measure import time_on_device

            src = torch.empty(64 << 20, dtype=torch.float32, device=device)
            dst = torch.empty_like(src)
            a = torch.randn(2048, 2048, device=device)
            copy = time_on_device(lambda: dst.copy_(src), device)
            mm = time_on_device(lambda: a @ a, device)
            _ROOFLINE[key] = RooflineCost(2 * src.numel() * 4 / copy, 2 * 2048 ** 3 / mm, 3e-6)
    return _ROOFLINE[key]


def compile_cuda(model: Any, example_inputs: Any, *, strategy: str, cost: str, db, input_shapes, rewrites,
                 knobs: Knobs | None, progress: bool, dynamo: bool, options: CudaOptions | None):
    """See runtime.compile.compile; ``options`` are the CUDA target's (CudaOptions)."""
    from kernorch.runtime.compile import load_graph, plan_kernels
    from kernorch.runtime.report import CompileReport
    from kernorch.runtime.model import CompiledModel

    options = options or CudaOptions()
    device = torch.device(options.device) if options.device else cuda_device()
    knobs = knobs or Knobs()
    if knobs.solver_backend == "highs" and importlib.util.find_spec("highspy") is None:
        knobs = dataclasses.replace(knobs, solver_backend="scipy")  # GPU images often lack highspy
    rep = CompileReport(strategy, cost)
    t0 = time.perf_counter()
    g, imp = load_graph(model, example_inputs, input_shapes, dynamo)
    rep.opaque = dict(imp.opaque)
    rep.seconds["import"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    g, rep.rewrites = apply_rewrites(g, rewrites)
    rep.prims = len(g.prims)
    rep.seconds["rewrite"] = time.perf_counter() - t1

    dag = dag_from_graph(g)
    pos = {p.output: i for i, p in enumerate(g.prims)}

    def key_fn(c: Candidate) -> str:
        return g.kernel_key(c.nodes, ordered_outputs(pos, c))

    t2 = time.perf_counter()
    rough = gpu_roofline(device).bind(dag)
    own_db = not isinstance(db, TuningDB)
    tdb = db if isinstance(db, TuningDB) else TuningDB(db)
    try:
        measured = CudaMeasuredCost(g, tdb, device, options)
        plan = plan_kernels(dag, strategy, cost, rough, measured, key_fn, knobs, rep, progress, f" on {device}")
    finally:
        if own_db:
            tdb.close()
    rep.seconds["orchestrate"] = time.perf_counter() - t2
    rep.plan_summary = plan.summary()
    t3 = time.perf_counter()
    ex, fallbacks = build_plan_cuda(g, plan, device, options, measured if cost == "measured" else None)
    rep.failed += len(fallbacks)
    rep.failures = (rep.failures + fallbacks)[:20]
    rep.seconds["build"] = time.perf_counter() - t3
    rep.seconds["total"] = time.perf_counter() - t0
    return CompiledModel(ex, rep, g)


def build_plan_cuda(g: Graph, plan: Plan, device: torch.device, options: CudaOptions,
                    measured: CudaMeasuredCost | None = None) -> tuple[Any, list[str]]:
    """Every kernel of the plan built for the device, Triton kernels with their best tile size.
    Kernels that were not measured (roofline costs) are checked against the interpreter on the
    GPU once built; one that fails to compile or verify runs on the host instead (reported).
    Returns the executable and the fallbacks."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    producers = g.producers()
    kernels, infos, fallbacks = [], [], []
    for cand in plan.kernels:
        outs = ordered_outputs(pos, cand)
        best = measured.best.get(measured.key(cand)) if measured is not None else None
        if best is not None and best.provider == "host":
            kernels.append(HostKernel(g, cand.nodes, outs, device))
            continue
        try:
            kernels.append(build_cuda(g, cand.nodes, outs, device, config_of(best.provider) if best else None))
        except Exception as e:  # noqa: BLE001 - a lowering bug must not sink the model
            fallbacks.append(f"{g.kernel_key(cand.nodes, outs)[:12]} build: {type(e).__name__}: {e}"[:300])
            kernels.append(HostKernel(g, cand.nodes, outs, device))
    precompile(kernels)  # in parallel, before the first run compiles them one by one
    if measured is None and device.type == "cuda":
        for k, (cand, kern) in enumerate(zip(plan.kernels, kernels)):
            if isinstance(kern, TritonKernel):
                reason = verify_on_device(g, kern, cand.nodes, device)
                if reason is not None:
                    fallbacks.append(f"{kern.key[:12]} {reason}")
                    kernels[k] = HostKernel(g, cand.nodes, ordered_outputs(pos, cand), device)
    for cand, kern, est in zip(plan.kernels, kernels, plan.costs):
        members = tuple(sorted(cand.nodes, key=pos.__getitem__))
        infos.append(KernelInfo(members, tuple(producers[v].op.value for v in members), kern.provider, est))
    if fallbacks:
        warnings.warn(f"kernorch: {len(fallbacks)} Triton kernel(s) run on the host instead: {fallbacks[0]}")
    return cuda_executable(g, kernels, infos, device, options), fallbacks
