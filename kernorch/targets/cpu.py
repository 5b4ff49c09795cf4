"""Target "cpu": generated C/OpenMP kernels and the kernel providers (oneDNN through PyTorch,
onnxruntime, OpenVINO) on this machine's cores, measured by orchestrate.measure.MeasuredCost
(locally or on a Ray cluster)."""

from __future__ import annotations

from contextlib import contextmanager

from kernorch.orchestrate.cluster import cluster_from
from kernorch.orchestrate.cost import RooflineCost, calibrate
from kernorch.orchestrate.measure import MeasuredCost, external_providers
from kernorch.options import Options
from kernorch.targets.base import Target, reject

_ROOFLINE: RooflineCost | None = None  # process-wide by design: this machine's constants


def calibrate_cached() -> RooflineCost:
    """The machine's roofline constants, measured once per process."""
    global _ROOFLINE
    if _ROOFLINE is None:
        _ROOFLINE = calibrate()
    return _ROOFLINE


class CpuTarget(Target):
    """From ``options``: ``threads`` per kernel (default: $KERNORCH_NUM_THREADS, else the usable
    CPUs); ``providers``: names of the external kernel providers to try; ``cluster``: measure on
    a Ray cluster; ``require_quiet``: refuse to measure on a busy machine."""

    name = "cpu"

    def __init__(self, options: Options | None = None) -> None:
        self.options = options = options or Options()
        if options.cuda_options is not None:
            raise reject("cpu", "cuda_options", "they configure target 'cuda'")
        self.threads, self.env = options.cpu_threads, options.env
        self.provider_names, self.cluster, self.require_quiet = options.providers, options.cluster, \
            options.require_quiet

    def host_cores(self, cost: str) -> int:
        return self.threads if cost == "measured" and self.cluster is None else 0

    def roofline(self) -> RooflineCost:
        return calibrate_cached()

    @contextmanager
    def measurer(self, g, db, rough):
        ext = external_providers(self.threads, self.provider_names)
        with cluster_from(self.cluster, self.env) as workers:
            yield MeasuredCost(g, db, threads=self.threads, providers=ext, roofline=rough,
                               require_quiet=self.require_quiet, cluster=workers, env=self.env)
