"""Target "cuda": Triton programs for memory-bound kernels and torch calls (cuBLAS/cuDNN) for
linear prims on one device, measured by targets.cuda_measure (CUDA-graph timing on a GPU; under
TRITON_INTERPRET=1 the same path on CPU tensors, timed meaninglessly but exercised)."""

from __future__ import annotations

import dataclasses
import importlib.util
from contextlib import contextmanager
import torch

from kernorch.codegen.triton_kernel import cuda_device
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.knobs import Knobs
from kernorch.options import DEFAULT_PROVIDERS, Options
from kernorch.targets.base import Target, reject
from kernorch.targets.cuda_measure import CudaMeasuredCost, CudaOptions, time_on_device

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
