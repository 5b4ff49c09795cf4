"""Target "cuda": Triton programs for memory-bound kernels and torch calls (cuBLAS/cuDNN) for
linear prims on one device, measured by targets.cuda_measure (CUDA-graph timing on a GPU; under
TRITON_INTERPRET=1 the same path on CPU tensors, timed meaninglessly but exercised), built by
``build_kernels`` for the CUDA executable (runtime/cuda_exec.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from contextlib import contextmanager
import torch

from kernorch.codegen.triton_kernel import HostKernel, TritonKernel, build_cuda, cuda_device, precompile
from kernorch.ir.graph import Graph
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.measure import ordered_outputs
from kernorch.orchestrate.plan import Plan
from kernorch.options import DEFAULT_PROVIDERS, Env, Options
from kernorch.targets.base import Target, reject
from kernorch.targets.cuda_measure import CudaMeasuredCost, CudaOptions, config_of, time_on_device, verify_on_device

_ROOFLINE: dict[str, RooflineCost] = {}  # process-wide by design: each device's constants


def gpu_roofline(device: torch.device) -> RooflineCost:
    """Bandwidth from a device copy, peak from a float32 matmul, overhead of one graph node;
    on the interpreter (CPU tensors) the CPU defaults."""
    key = str(device)
    if key not in _ROOFLINE:
        if device.type != "cuda":
            _ROOFLINE[key] = RooflineCost()
        else:
            src = torch.empty(64 << 20, dtype=torch.float32, device=device)
            dst = torch.empty_like(src)
            a = torch.randn(2048, 2048, device=device)
            copy = time_on_device(lambda: dst.copy_(src), device)
            mm = time_on_device(lambda: a @ a, device)
            _ROOFLINE[key] = RooflineCost(2 * src.numel() * 4 / copy, 2 * 2048 ** 3 / mm, 3e-6)
    return _ROOFLINE[key]


class CudaTarget(Target):
    """From ``options``: ``cuda_options``, a CudaOptions. CPU-only options are rejected:
    ``threads`` (kernels run on the GPU), explicit ``providers`` (no external provider runs on
    CUDA here), ``cluster`` (its workers measure CPU kernels) and ``require_quiet`` (it checks
    CPU cores)."""

    name = "cuda"

    def __init__(self, options: Options | None = None) -> None:
        options = options or Options(target="cuda")
        threads, providers, cluster = options.threads, options.providers, options.cluster
        require_quiet, cuda_options, self.env = options.require_quiet, options.cuda_options, options.env
        if threads is not None:
            raise reject("cuda", "threads", "kernels run on the GPU; threads sets CPU kernels' OpenMP threads")
        if providers and providers is not DEFAULT_PROVIDERS and tuple(providers) != tuple(DEFAULT_PROVIDERS):
            raise reject("cuda", f"providers={list(providers)}",
                         "no external kernel provider runs on CUDA (Triton and cuBLAS/cuDNN are built in)")
        if cluster is not None:
            raise reject("cuda", "cluster", "cluster workers measure CPU kernels")
        if require_quiet:
            raise reject("cuda", "require_quiet", "it checks free CPU cores; GPU timings replay CUDA graphs")
        self.options = cuda_options or CudaOptions()
        if not isinstance(self.options, CudaOptions):
            raise reject("cuda", f"cuda_options={self.options!r}", "pass a kernorch.targets.cuda_measure.CudaOptions")
        self.device = torch.device(self.options.device) if self.options.device else cuda_device(self.env)
        self.where = f" on {self.device}"

    def knobs(self, knobs: Knobs) -> Knobs:
        if knobs.solver_backend == "highs" and importlib.util.find_spec("highspy") is None:
            knobs = dataclasses.replace(knobs, solver_backend="scipy")  # GPU images often lack highspy
        if getattr(knobs, "layouts", False):  # channels-last pairs are a oneDNN (CPU) plan choice
            knobs = dataclasses.replace(knobs, layouts=False)
        return knobs

    def roofline(self) -> RooflineCost:
        return gpu_roofline(self.device)

    @contextmanager
    def measurer(self, g, db, rough):
        yield CudaMeasuredCost(g, db, self.device, self.options, env=self.env)

    def build(self, g, plan, measured, providers):
        return build_kernels(g, plan, self.device, measured, self.env)

    def device_args(self):
        return {"device": self.device, "options": self.options}


def build_kernels(g: Graph, plan: Plan, device: torch.device, measured: CudaMeasuredCost | None = None,
                  env: Env | None = None) -> tuple[list, list[str]]:
    """Every kernel of the plan built for the device, Triton kernels with their best tile size.
    Kernels that were not measured (roofline costs) are checked against the interpreter on the
    GPU once built; one that fails to compile or verify runs on the host instead (reported).
    Returns the kernels and the fallbacks."""
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
    return kernels, fallbacks
