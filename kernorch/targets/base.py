"""The Target seam: what one device kind (CPU, CUDA; room for more) brings to the one pipeline.

runtime/compile.py imports, rewrites and orchestrates once for every target; a Target supplies
what differs: the options it honours (anything else is rejected with a one-line error before
work starts), knob adjustments, the cores the busy-machine check wants free, the roofline that
prices candidates before measurement, the measurer (feasibility, building, verifying and timing
candidates) and the build step (a plan's kernels, built with the providers that won). The
runtime wraps the built kernels in the target's executable (runtime/compile.py, EXECUTABLES).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

from kernorch.errors import KernorchError
from kernorch.ir.graph import Graph
from kernorch.orchestrate.cost import RooflineCost
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.tuning_db import TuningDB


class Target(ABC):
    """One device kind. ``where`` is appended to progress labels (" on cuda:0")."""

    name: str = ""
    where: str = ""
    require_quiet: bool = False  # refuse to measure while host_cores() are busy
    races_regions: bool = False  # compile() times the plan against whole-graph provider regions

    def knobs(self, knobs: Knobs) -> Knobs:
        """The orchestration knobs as this target runs them."""
        return knobs

    def efficiency_note(self) -> str:
        """One line when this machine runs kernorch's generated code far behind the libraries
        (a per-machine check, cached), else ''."""
        return ""

    def host_cores(self, cost: str) -> int:
        """Cores of this machine that measuring with ``cost`` keeps busy, checked free before
        tuning (0: none, nothing to check)."""
        return 0

    @abstractmethod
    def roofline(self) -> RooflineCost:
        """The device's roofline constants (measured once per process)."""

    @abstractmethod
    def measurer(self, g: Graph, db: TuningDB, rough) -> AbstractContextManager[Any]:
        """A context yielding the measured cost of ``g``'s candidates: ``cost(candidate) ->
        seconds | None`` with ``can_generate``, ``prefetch``, ``key``, ``best``, ``stats`` and
        ``providers`` (external providers, possibly none); ``rough`` is the bound roofline."""

    @abstractmethod
    def build(self, g: Graph, plan, measured, providers) -> tuple[list, list[str]]:
        """Every kernel of ``plan``, in order, built with the provider that won its measurement
        (``measured`` None: roofline costs), and the fallbacks taken (one line each, reported).
        ``providers``: the measurer's external providers. A provider's kernel comes back as its
        BuiltKernel; the runtime adapts it."""

    def device_args(self) -> dict[str, Any]:
        """What the target's executable takes besides the kernels (its device, its options)."""
        return {}


def reject(target: str, option: str, why: str) -> KernorchError:
    """The one-line error for an option ``target`` cannot honour."""
    return KernorchError(f"target {target!r} does not take {option}: {why}")
