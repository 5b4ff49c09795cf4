"""The provider interface: something that can build a candidate kernel into a runnable object.

Korch prices each candidate with several backends and keeps the fastest; a provider is one such
backend (onnxruntime, OpenVINO, PyTorch ops, kernorch's own code generator). Every built kernel is
checked against the reference interpreter (``verify``) before it may be timed or chosen.

Contract: a kernel's inputs are ``g.subgraph(members, outputs).inputs`` in that order (rank-0
constants are immediates; tensor constants are inputs). ``run`` takes and returns contiguous CPU
tensors. Providers may compile tensor constants in (``BuiltKernel.baked``): such a kernel ignores
the tensors passed at those positions and is valid only for the graph it was built from, not for
another kernel with the same ``kernel_key`` but different weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from kernorch.errors import KernorchError
from kernorch.ir import oracle
from kernorch.ir.graph import Graph, index_limits
from kernorch.ir.prims import ValueId
from kernorch.ir.tensors import to_torch


class ProviderError(KernorchError):
    """A provider cannot build or run a candidate kernel (the message says why)."""


@dataclass
class BuiltKernel:
    """A runnable kernel. ``run`` maps tensors for ``inputs`` to tensors for ``outputs``."""

    provider: str
    inputs: list[ValueId]
    outputs: list[ValueId]
    run: Callable[[list[torch.Tensor]], list[torch.Tensor]] = field(repr=False)
    baked: frozenset[ValueId] = frozenset()
    detail: str = ""  # what the provider chose (e.g. "conv+relu fused, channels_last")
    # Optional: write the results into preallocated contiguous ``outputs`` (no copy through a
    # temporary); the runtime uses it when present.
    run_into: Callable[[list[torch.Tensor], list[torch.Tensor]], None] | None = field(default=None, repr=False)
    # ``run`` returns new contiguous tensors that share memory with nothing else, so the runtime
    # may adopt them as the values' buffers for the call instead of copying them into its arena.
    fresh: bool = False
    # What ``Provider.load`` needs to rebuild this kernel in another process (a saved model):
    # JSON values, plus ``bytes`` that the saved format stores as files. Always ``threads``.
    state: dict = field(default_factory=dict, repr=False)
    # The relative tolerance the oracle judges this kernel by (ir/oracle.py), when its arithmetic is
    # of lower precision than its outputs' dtype (a bf16 step between float32 values); None: the
    # outputs' dtype's.
    rel_tolerance: float | None = None


class Provider:
    """Base class. Subclasses set ``name`` and implement ``can_run`` and ``build``."""

    name = "provider"
    # Runs on kernorch's own OpenMP pool (PyTorch's libgomp, which generated kernels share). A
    # provider with a pool of its own (onnxruntime, OpenVINO's TBB) costs a pool switch at every
    # boundary with the other kernels, so it serves whole regions, and single kernels only where
    # nothing on the own pool can run them.
    own_pool = False

    def available(self) -> bool:
        """Whether the optional dependency behind this provider is installed."""
        return True

    @property
    def key_suffix(self) -> str:
        """What this provider adds to the tuning database's target column: prices taken with it
        (a lower precision, its tolerance) never stand in for a compile without it."""
        return ""

    def can_run(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> bool | str:
        """``True``, or a one-line reason why this provider cannot run the candidate."""
        raise NotImplementedError

    def build(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> BuiltKernel:
        """Compile the candidate; raise ``ProviderError`` (or anything) on failure."""
        raise NotImplementedError

    def saved_state(self, built: BuiltKernel) -> dict:
        """What a saved model stores of ``built`` (default: its ``state``); ``load`` gets it back
        with the graph, so a provider may leave out what the graph holds (its weights)."""
        return built.state

    def load(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId], state: dict) -> BuiltKernel:
        """Rebuild a saved kernel from its ``BuiltKernel.state`` (read from a file: check what
        it holds). By default the kernel is built again from its prims."""
        return self.build(g, members, outputs)

    def __repr__(self) -> str:
        return f"<provider {self.name}>"


def reason_or_none(result: bool | str) -> str | None:
    """Normalize a ``can_run`` answer: None when it can run, else a reason."""
    if result is True:
        return None
    return str(result) if result else "cannot run (no reason given)"


def default_threads() -> int:
    return max(1, torch.get_num_threads())


# ---------------------------------------------------------------------------------------------
# Verification against the reference interpreter
# ---------------------------------------------------------------------------------------------

def random_inputs(g: Graph, sub: Graph, seed: int = 0) -> dict[ValueId, np.ndarray]:
    """The oracle's feeds for ``sub``'s inputs (real data of ``g``'s constants, random for the rest)."""
    return oracle.random_feeds(g, sub.inputs, seed, index_limits(sub))


reference_for = oracle.reference  # (feeds, interpreter outputs) of a candidate, shared by every provider


def verify(built: BuiltKernel, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId],
           seed: int = 0, reference: tuple[dict, dict] | None = None) -> tuple[bool, float, str]:
    """Run ``built`` on random inputs and compare with the interpreter on the same subgraph.
    ``reference`` = (feeds, interpreter outputs) computed once per candidate and shared by every
    provider (``reference_for``). Returns (ok, max abs error, detail); never raises."""
    try:
        sub = g.subgraph(members, outputs)
        if list(built.inputs) != list(sub.inputs):
            return False, math.inf, f"inputs {built.inputs} differ from the subgraph's {sub.inputs}"
        if list(built.outputs) != list(sub.outputs):
            return False, math.inf, f"outputs {built.outputs} differ from {sub.outputs}"
        got = oracle.verify(lambda xs: built.run([to_torch(x) for x in xs]), built.inputs, built.outputs,
                            g, members, reference, seed, rel=built.rel_tolerance)
    except Exception as e:  # noqa: BLE001 -- a failing provider is a result, not a crash
        return False, math.inf, f"run failed: {type(e).__name__}: {_one_line(e)}"
    return got


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:300]
