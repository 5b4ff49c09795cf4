"""Targets: one pipeline, one seam per device kind (targets/base.py). ``make`` picks one by the
options' ``target`` and hands it every option (kernorch/options.py); a target rejects what it
cannot honour with one line."""

from __future__ import annotations

from kernorch.errors import KernorchError
from kernorch.options import Options
from kernorch.targets.base import Target
from kernorch.targets.cpu import CpuTarget
from kernorch.targets.cuda import CudaTarget

TARGETS = ("cpu", "cuda")


def make(options: Options) -> Target:
    """The target ``options.target`` configured with ``options``."""
    if options.target == "cpu":
        return CpuTarget(options)
    if options.target == "cuda":
        return CudaTarget(options)
    raise KernorchError(f"unknown target {options.target!r}; choose 'cpu' or 'cuda'")


__all__ = ["TARGETS", "Target", "make"]
