"""Building a plan for target "cuda" (planned by the one pipeline, runtime/compile.py, with
targets/cuda.py's costs): kernels built as Triton programs (memory-bound prims) or torch calls
on CUDA tensors (linear prims), in a CUDA executable (cuda_exec.py)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from kernorch.codegen.triton_kernel import HostKernel, TritonKernel, build_cuda, precompile
from kernorch.ir.graph import Graph
from kernorch.orchestrate.measure import ordered_outputs
from kernorch.orchestrate.plan import Plan
from kernorch.options import Env
from kernorch.runtime.cuda_exec import CudaExecutable
from kernorch.runtime.executable import plan_executable
from kernorch.targets.cuda_measure import CudaMeasuredCost, CudaOptions, config_of, verify_on_device


def build_plan_cuda(g: Graph, plan: Plan, device: torch.device, options: CudaOptions,
                    measured: CudaMeasuredCost | None = None, env: Env | None = None) -> tuple[Any, list[str]]:
    """Every kernel of the plan built for the device, Triton kernels with their best tile size.
    Kernels that were not measured (roofline costs) are checked against the interpreter on the
    GPU once built; one that fails to compile or verify runs on the host instead (reported).
    Returns the executable and the fallbacks."""
    env = env or Env.read()
    pos = {p.output: i for i, p in enumerate(g.prims)}
    kernels, fallbacks = [], []
    for cand in plan.kernels:
        outs = ordered_outputs(pos, cand)
        best = measured.best.get(measured.key(cand)) if measured is not None else None
        if best is not None and best.provider == "host":
            kernels.append(HostKernel(g, cand.nodes, outs, device))
            continue
        try:
            kernels.append(build_cuda(g, cand.nodes, outs, device, config_of(best.provider) if best else None, env))
        except Exception as e:  # noqa: BLE001 - a lowering bug must not sink the model
            fallbacks.append(f"{g.kernel_key(cand.nodes, outs)[:12]} build: {type(e).__name__}: {e}"[:300])
            kernels.append(HostKernel(g, cand.nodes, outs, device))
    precompile(kernels, env.compile_workers)  # in parallel, before the first run compiles them one by one
    if measured is None and device.type == "cuda":
        for k, (cand, kern) in enumerate(zip(plan.kernels, kernels)):
            if isinstance(kern, TritonKernel):
                reason = verify_on_device(g, kern, cand.nodes, device)
                if reason is not None:
                    fallbacks.append(f"{kern.key[:12]} {reason}")
                    kernels[k] = HostKernel(g, cand.nodes, ordered_outputs(pos, cand), device)
    if fallbacks:
        warnings.warn(f"kernorch: {len(fallbacks)} Triton kernel(s) run on the host instead: {fallbacks[0]}")
    return plan_executable(g, plan, kernels, CudaExecutable, device=device, options=options), fallbacks
