"""Targets: one pipeline, one seam per device kind (targets/base.py). ``make`` picks one by name
and hands it every compile option; a target rejects what it cannot honour with one line."""

from __future__ import annotations

from typing import Any

from kernorch.errors import KernorchError
from kernorch.targets.base import Target

TARGETS = ("cpu", "cuda")


def make(name: str, **options: Any) -> Target:
    """The target called ``name`` configured with ``options`` (threads, providers, cluster,
    require_quiet, cuda_options)."""
    if name == "cpu":
        from kernorch.targets.cpu import CpuTarget

        return CpuTarget(**options)
    if name == "cuda":
        from kernorch.targets.cuda import CudaTarget

        return CudaTarget(**options)
    raise KernorchError(f"unknown target {name!r}; choose 'cpu' or 'cuda'")


__all__ = ["TARGETS", "Target", "make"]
