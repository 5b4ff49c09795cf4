"""Target "cpu": generated C/OpenMP kernels and the kernel providers (oneDNN through PyTorch,
onnxruntime, OpenVINO) on this machine's cores, measured by orchestrate.measure.MeasuredCost
(locally or on a Ray cluster)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from kernorch import codegen
from kernorch.errors import KernorchError
from kernorch.ir.graph import Graph
from kernorch.options import DEFAULT_CODEGEN, PRECISIONS, CodegenOptions, Env, Options
from kernorch.orchestrate.cluster import cluster_from
from kernorch.orchestrate.cost import RooflineCost, calibrate
from kernorch.orchestrate.measure import MeasuredCost, external_providers, ordered_outputs
from kernorch.orchestrate.plan import Plan
from kernorch.providers import Provider
from kernorch.providers.select import reason_or_none
from kernorch.targets import gemm_check
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
    races_regions = True

    def __init__(self, options: Options | None = None) -> None:
        self.options = options = options or Options()
        if options.cuda_options is not None:
            raise reject("cpu", "cuda_options", "they configure target 'cuda'")
        self.threads, self.env = options.cpu_threads, options.env
        self.provider_names, self.cluster, self.require_quiet = options.providers, options.cluster, \
            options.require_quiet
        if self.provider_names is not None:  # a lower precision adds its providers to the user's
            self.provider_names = (*self.provider_names, *PRECISIONS.get(options.precision, ()))
        self.bf16_tolerance = options.accuracy_budget

    def efficiency_note(self) -> str:
        try:
            return gemm_check.behind_note(gemm_check.cached(self.threads, self.env))
        except (KernorchError, RuntimeError, OSError) as e:  # no compiler, no oneDNN: the compile says so later
            return f"the generated GEMM could not be checked on this CPU ({e})"

    def host_cores(self, cost: str) -> int:
        return self.threads if cost == "measured" and self.cluster is None else 0

    def roofline(self) -> RooflineCost:
        return calibrate_cached()

    @contextmanager
    def measurer(self, g, db, rough):
        ext = external_providers(self.threads, self.provider_names, self.bf16_tolerance)
        with cluster_from(self.cluster, self.env) as workers:
            yield MeasuredCost(g, db, threads=self.threads, providers=ext, roofline=rough,
                               require_quiet=self.require_quiet, cluster=workers, env=self.env,
                               codegen_options=self.options.codegen)

    def build(self, g, plan, measured, providers):
        return build_kernels(g, plan, self.threads, measured, providers, self.env, self.options.codegen), []


def build_kernels(g: Graph, plan: Plan, threads: int, measured: MeasuredCost | None = None,
                  providers: Sequence[Provider] | None = None, env: Env | None = None,
                  codegen_options: CodegenOptions = DEFAULT_CODEGEN) -> list:
    """Every kernel of the plan built with the provider that won its measurement: kernorch's own
    code generator in one compiler call (C kernels), the others one by one (their BuiltKernels)."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    providers = {p.name: p for p in (providers if providers is not None else external_providers(threads))}
    chosen: list[str] = []
    regions = set(plan.regions)
    for k, c in enumerate(plan.kernels):
        outs = ordered_outputs(pos, c)
        key = None if measured is None else measured.region_key(c) if k in regions else measured.key(c)
        best = measured.best.get(key) if measured is not None else None
        if k in regions and (best is None or best.provider not in providers):
            raise KernorchError(f"provider region {k} has no measured provider among {sorted(providers)}")
        if best is not None and not best.provider.startswith("codegen") and best.provider in providers:
            chosen.append(best.provider)
        elif codegen.can_generate(g, c.nodes, outs):
            chosen.append("codegen")
        else:
            able = [p for p in providers.values() if reason_or_none(p.can_run(g, c.nodes, outs)) is None]
            chosen.append(next((p for p in able if p.own_pool), able[0]).name)
    own = [k for k, name in enumerate(chosen) if name == "codegen"]
    built = codegen.build_many([(g, set(plan.kernels[k].nodes), ordered_outputs(pos, plan.kernels[k])) for k in own],
                               threads, env=env, options=codegen_options)
    kernels: list = [None] * len(plan.kernels)
    for k, kern in zip(own, built):
        kernels[k] = kern
    for k, name in enumerate(chosen):
        if name != "codegen":
            c = plan.kernels[k]
            kernels[k] = providers[name].build(g, set(c.nodes), ordered_outputs(pos, c))
    return kernels
