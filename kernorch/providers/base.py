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
from kernorch.ir import interp
from kernorch.ir.graph import Graph, index_limits
from kernorch.ir.prims import ValueId


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
    # What ``Provider.load`` needs to rebuild this kernel in another process (a saved model):
    # JSON values, plus ``bytes`` that the saved format stores as files. Always ``threads``.
    state: dict = field(default_factory=dict, repr=False)


class Provider:
    """Base class. Subclasses set ``name`` and implement ``can_run`` and ``build``."""

    name = "provider"

    def available(self) -> bool:
        """Whether the optional dependency behind this provider is installed."""
        return True

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
    """Feeds for ``sub``'s inputs: the real data of tensor constants of ``g``, random data of the
    declared dtype for the rest (integers non-zero, so integer division stays defined)."""
    rng = np.random.default_rng(seed)
    limits = index_limits(sub)  # gather indices stay in range: the interpreter rejects the rest
    feeds = {}
    for v in sub.inputs:
        t = sub.types[v]
        if v in g.constants:
            feeds[v] = np.array(g.constants[v], dtype=t.dtype, order="C")  # a writable copy
            continue
        dt = np.dtype(t.dtype)
        if dt == np.bool_:
            arr = rng.random(t.shape) < 0.5
        elif dt.kind in "iu":
            lo = 1 if dt.kind == "u" else -5
            arr = rng.integers(lo, 6, size=t.shape)
            if dt.kind == "i":
                arr = np.where(arr == 0, 1, arr)
            if v in limits:
                n = limits[v]
                arr = rng.integers(max(lo, -n), min(6, n), size=t.shape)
        elif dt in (np.float32, np.float64):
            arr = rng.standard_normal(t.shape, dtype=dt)  # generated in the dtype: no float64 detour
        else:
            arr = rng.standard_normal(t.shape)
        feeds[v] = np.ascontiguousarray(np.asarray(arr).astype(dt, copy=False))
    return feeds


def reference_for(g: Graph, sub: Graph, seed: int = 0) -> tuple[dict, dict]:
    """(random feeds, the interpreter's outputs on them) for the candidate ``sub``."""
    feeds = random_inputs(g, sub, seed)
    return feeds, interp.run(sub, feeds)


def tolerance(dtype: str, ref_max: float) -> float:
    """1e-4 relative to the largest reference magnitude (at least 1); 1e-2 for half precision."""
    rel = 1e-2 if dtype in ("float16", "bfloat16") else 1e-4
    return rel * max(1.0, ref_max)


def compare(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """Max abs error and the tolerance; NaNs must coincide and infinities must match exactly."""
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        return math.inf, 0.0
    gn, rn = np.isnan(g), np.isnan(r)
    if (gn != rn).any():
        return math.inf, 0.0
    finite = np.isfinite(r)
    if (~finite & ~rn).any() and not np.array_equal(g[~finite & ~rn], r[~finite & ~rn]):
        return math.inf, 0.0
    if not finite.any():
        return 0.0, tolerance(str(ref.dtype), 0.0)
    err = float(np.max(np.abs(g[finite] - r[finite]))) if finite.any() else 0.0
    return (err if not math.isnan(err) else math.inf), tolerance(str(ref.dtype), float(np.max(np.abs(r[finite]))))


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
        feeds, ref = reference if reference is not None else reference_for(g, sub, seed)
        got = built.run([torch.from_numpy(feeds[v]) for v in built.inputs])
    except Exception as e:  # noqa: BLE001 -- a failing provider is a result, not a crash
        return False, math.inf, f"run failed: {type(e).__name__}: {_one_line(e)}"
    if len(got) != len(sub.outputs):
        return False, math.inf, f"returned {len(got)} outputs, expected {len(sub.outputs)}"
    worst = 0.0
    for v, t in zip(sub.outputs, got):
        want = sub.types[v]
        arr = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if tuple(arr.shape) != want.shape:
            return False, math.inf, f"output %{v}: shape {tuple(arr.shape)}, expected {want.shape}"
        if str(arr.dtype) != want.dtype:
            return False, math.inf, f"output %{v}: dtype {arr.dtype}, expected {want.dtype}"
        err, tol = compare(arr, ref[v])
        worst = max(worst, err)
        if err > tol:
            return False, err, f"output %{v}: max abs error {err:.3g} > tolerance {tol:.3g}"
    return True, worst, "ok"


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:300]
