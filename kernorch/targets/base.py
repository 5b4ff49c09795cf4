"""The Target seam: what one device kind (CPU, CUDA; room for more) brings to the one pipeline.

runtime/compile.py imports, rewrites and orchestrates once for every target; a Target supplies
what differs: the options it honours (anything else is rejected with a one-line error before
work starts), knob adjustments, the cores the busy-machine check wants free, the roofline that prices candidates
before measurement, and the measurer (feasibility, building, verifying and timing candidates).
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

    def knobs(self, knobs: Knobs) -> Knobs:
        """The orchestration knobs as this target runs them."""
        return knobs

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


def reject(target: str, option: str, why: str) -> KernorchError:
    """The one-line error for an option ``target`` cannot honour."""
    return KernorchError(f"target {target!r} does not take {option}: {why}")
