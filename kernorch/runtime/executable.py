"""The compiled model: an ordered list of built kernels over planned, reused buffers.

Calling it checks the inputs (one-line errors naming the input), runs each kernel on
preallocated slot tensors, and returns fresh output tensors (so results survive the next call).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from kernorch.frontend.inputs import check_inputs
from kernorch.ir.graph import Graph
from kernorch.runtime.inplace import OVERWRITING_PROVIDERS, overwritable
from kernorch.runtime.memory import MemoryPlan, Step, plan_memory
from kernorch.runtime.calls import NATIVE, CallPlan, as_tensor
from kernorch.ir.tensors import TORCH_DTYPES, to_torch


class RuntimeKernel(Protocol):
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def _run(self, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None: ...


def to_tensor(a: Any) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().contiguous()
    a = np.asarray(a)
    a = a if a.flags.c_contiguous else np.array(a, order="C")  # (ascontiguousarray makes rank 0 1-d)
    return to_torch(a)


class ProviderKernel:
    """Adapts a provider's BuiltKernel (``run(inputs) -> outputs``) to the runtime's
    ``_run(ins, outs)`` (outputs written into planned buffers)."""

    def __init__(self, built) -> None:
        self.built = built
        self.provider = built.provider
        self.inputs = tuple(built.inputs)
        self.outputs = tuple(built.outputs)
        if built.run_into is not None:
            self._run = built.run_into
        # Returns new tensors the executor adopts as the values' buffers (no copy into the arena).
        self.run_fresh = built.run if getattr(built, "fresh", False) else None
        # Returns fresh NumPy outputs (used when every output is a graph output: nothing to copy).
        self.run_numpy = getattr(built, "run_numpy", None)

    def _run(self, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        for o, r in zip(outs, self.built.run(ins)):
            o.copy_(r.reshape(o.shape))


@dataclass
class KernelInfo:
    """What the summary reports about one kernel."""

    members: tuple[int, ...]
    ops: tuple[str, ...]
    provider: str
    seconds: float | None


@dataclass
class Signature:
    """Just enough of the graph to check inputs and name outputs (no weights)."""

    graph: Graph
    output_names: list[str] = field(default_factory=list)

    @staticmethod
    def of(g: Graph) -> Signature:
        s = Graph()
        s.inputs = list(g.inputs)
        s.outputs = list(g.outputs)
        s.types = {v: g.types[v] for v in list(g.inputs) + list(g.outputs)}
        s.names = {v: g.name(v) for v in list(g.inputs) + list(g.outputs)}
        return Signature(s, [g.name(v) for v in g.outputs])


class Executable:
    """Runs kernels in order. ``types`` gives (shape, dtype) of every value a kernel touches."""

    adopts_fresh = True  # a call takes over buffers kernels return (calls.py); not the CUDA executor
    overwrites_inputs = True  # generated C kernels may write an output over a dying input (inplace.py)

    def __init__(self, sig: Signature, kernels: Sequence[RuntimeKernel], infos: Sequence[KernelInfo],
                 types: dict[int, tuple[tuple[int, ...], str]], constants: dict[int, Any],
                 overwrites: Sequence[tuple[tuple[int, int], ...]] = ()) -> None:
        """``overwrites``: per kernel, (output, input) pairs it may write over (inplace.py)."""
        self.sig = sig
        self.kernels = list(kernels)
        self.infos = list(infos)
        self.types = types
        self.constants = {v: to_tensor(a) for v, a in constants.items()}
        external = set(self.constants) | set(sig.graph.inputs)
        steps = [Step(tuple(k.inputs), tuple(k.outputs), tuple(over))
                 for k, over in itertools.zip_longest(self.kernels, overwrites, fillvalue=())]
        nbytes = {v: math.prod(s) * TORCH_DTYPES[d].itemsize for v, (s, d) in types.items()}
        self.fresh = fresh_values(self.kernels) - external if self.adopts_fresh else set()
        self.memory: MemoryPlan = plan_memory(steps, nbytes, external, set(sig.graph.outputs) | self.fresh)
        self._views: list[dict[int, torch.Tensor]] | None = None
        self._prog: list | None = None
        self._call_plans: dict[bool, CallPlan] = {}
        self.native = True  # runs of C kernels in one native call (see runtime/native.py)

    def _arena(self) -> list[dict[int, torch.Tensor]]:
        if self._views is None:
            slots = [torch.empty(-(-n // 64) * 64, dtype=torch.uint8, device=self.device) for n in self.memory.slots]
            self._views = [{v: self._slot_view(slots[s], v) for v, s in m.items()} for m in self.memory.slot_of]
        return self._views

    def _slot_view(self, slot: torch.Tensor, v: int) -> torch.Tensor:
        """Value ``v`` in the first bytes of its slot (slots hold values of any size and dtype)."""
        shape, dtype = self.types[v]
        t = TORCH_DTYPES[dtype]
        return slot[:math.prod(shape) * t.itemsize].view(t).view(shape)

    def _program(self) -> list[tuple[RuntimeKernel, list, list[tuple[int, int]], list, list[tuple[int, int]]]]:
        """Per kernel: its input and output tensors where they are fixed (arena slots,
        constants), and the positions filled per call (graph inputs and outputs), so a run does
        no dictionary work for the fixed ones."""
        if self._prog is None:
            views = self._arena()
            outs_set = self.memory.output_values
            prog = []
            for k, kern in enumerate(self.kernels):
                vk = views[k]
                ins = [vk.get(v, self.constants.get(v)) for v in kern.inputs]
                dyn_in = [(i, v) for i, v in enumerate(kern.inputs) if ins[i] is None]
                outs = [None if v in outs_set else vk[v] for v in kern.outputs]
                dyn_out = [(i, v) for i, v in enumerate(kern.outputs) if outs[i] is None]
                prog.append((kern, ins, dyn_in, outs, dyn_out))
            self._prog = prog
        return self._prog

    def _calls(self) -> CallPlan:
        """The prepared call for the current ``native`` setting (built at its first use)."""
        plan = self._call_plans.get(self.native)
        if plan is None:
            plan = self._call_plans[self.native] = CallPlan(self.sig.graph, self._program(), self.types, self.native,
                                                            self.fresh)
        return plan

    def _native_program(self) -> list:
        """The steps of a native call: runs of consecutive C kernels are ``NativeRun``s."""
        return [s[1] if s[0] == NATIVE else s for s in self._calls().steps]

    def run_ids(self, feeds: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Run the plan: runs of C kernels in one native call each (``native``), or every
        kernel from the Python loop (``native = False``: debugging and per-kernel profiles)."""
        outs = self._calls()([feeds[v] for v in self.sig.graph.inputs], False)
        return dict(zip(self.sig.graph.outputs, outs))

    def run(self, feeds) -> dict[str, torch.Tensor]:
        """``{input name: array}`` (or a list in input order) -> ``{output name: tensor}``."""
        g = self.sig.graph
        if isinstance(feeds, dict) and len(feeds) == len(g.inputs):
            try:
                args = [feeds[g.name(v)] for v in g.inputs]
            except KeyError:
                args = None
            vals = self._fast(args) if args is not None else None
            if vals is not None:
                return {g.name(v): as_tensor(t) for v, t in zip(g.outputs, vals)}
        checked = check_inputs(g, feeds)
        out = self.run_ids({v: to_tensor(a) for v, a in checked.items()})
        return {g.name(v): t for v, t in out.items()}

    def __call__(self, *args):
        vals = (self._call_plans.get(self.native) or self._calls()).fast(args)
        if vals is None:
            checked = check_inputs(self.sig.graph, list(args))
            vals = self._calls()([to_tensor(checked[v]) for v in self.sig.graph.inputs], False)
            if args and all(isinstance(a, np.ndarray) for a in args):
                vals = [t.numpy() for t in vals]
        return vals[0] if len(vals) == 1 else tuple(vals)

    def _fast(self, args) -> list | None:
        """The outputs when ``args`` need no conversion (``CallPlan.fast``), else None."""
        return (self._call_plans.get(self.native) or self._calls()).fast(args)

    def profile_in_call(self, feeds, repeat: int = 10, seconds: float | None = None,
                        warmup: int = 2) -> tuple[list[float], float]:
        """(seconds per kernel, seconds per call), medians over ``repeat`` calls timed kernel by
        kernel inside the real call: the kernels run as the model runs them, each after its
        predecessors, with the same buffers, dispatch and native runs (whose driver reads the
        clock after every kernel), so the times hold the caches' and the pool's state of the
        model. Gaps between kernels (the loop, adopting buffers, returning from a native run)
        count toward the kernel before. ``seconds``: stop after that long once 3 calls are timed
        (large models). ``warmup``: untimed calls first (first-call preparation, caches)."""
        calls = self._calls()
        args = [to_tensor(a) for a in (check_inputs(self.sig.graph, feeds)[v] for v in self.sig.graph.inputs)]
        for _ in range(warmup):
            calls(args, False)
        per_kernel: list[list[float]] = [[] for _ in self.kernels]
        totals: list[float] = []
        end = math.inf if seconds is None else time.perf_counter() + seconds
        while len(totals) < max(1, repeat) and (len(totals) < 3 or time.perf_counter() < end):
            clock: list[float] = []
            calls(args, False, clock)
            for k, ts in enumerate(per_kernel):
                ts.append(clock[k + 1] - clock[k])
            totals.append(clock[-1] - clock[0])
        return [float(np.median(ts)) for ts in per_kernel], float(np.median(totals))

    def profile(self, feeds, repeat: int = 10) -> list[float]:
        """Median seconds per kernel over ``repeat`` runs (kernel by kernel, synchronized around
        each). The device side (feeds, allocation, synchronization, math modes) is the hooks'."""
        feeds_t = self._device_feeds(check_inputs(self.sig.graph, feeds))
        times: list[list[float]] = [[] for _ in self.kernels]
        views = self._arena()
        with self._device_mode():
            for _ in range(repeat):
                env: dict[int, torch.Tensor] = dict(self.constants)
                env.update(feeds_t)
                for k, kern in enumerate(self.kernels):
                    vk = views[k]
                    ins = [vk[v] if v in vk else env[v] for v in kern.inputs]
                    outs = []
                    for v in kern.outputs:
                        if v not in vk:
                            env.setdefault(v, self._empty(v))
                        outs.append(vk.get(v, env.get(v)))
                    self._sync()
                    t0 = time.perf_counter()
                    kern._run(ins, outs)
                    self._sync()
                    times[k].append(time.perf_counter() - t0)
        return [float(np.median(t)) for t in times]

    # -- the device side (CPU here; runtime/cuda_exec.py overrides) -------------------------
    device: torch.device | None = None

    def _device_feeds(self, checked: dict[int, Any]) -> dict[int, torch.Tensor]:
        return {v: to_tensor(a) for v, a in checked.items()}

    def _empty(self, v: int) -> torch.Tensor:
        shape, dtype = self.types[v] if v in self.types else (self.sig.graph.types[v].shape,
                                                              self.sig.graph.types[v].dtype)
        return torch.empty(shape, dtype=TORCH_DTYPES[dtype], device=self.device)

    def _sync(self) -> None:
        pass

    def _device_mode(self):
        return contextlib.nullcontext()


def fresh_values(kernels: Sequence[RuntimeKernel]) -> set[int]:
    """Values every writer of which returns new buffers (``run_fresh``): they get no arena slot;
    each call adopts what their kernel returns."""
    writers: dict[int, list[bool]] = {}
    for k in kernels:
        for v in k.outputs:
            writers.setdefault(v, []).append(getattr(k, "run_fresh", None) is not None)
    return {v for v, w in writers.items() if all(w)}


def executable_for(g: Graph, kernels: Sequence[RuntimeKernel], infos: Sequence[KernelInfo],
                   cls: type[Executable] | None = None, **device: Any) -> Executable:
    """The Executable (or ``cls``, given its ``device`` arguments) of built ``kernels`` over graph
    ``g`` (its types and the constants they read)."""
    types = {v: (g.types[v].shape, g.types[v].dtype) for k in kernels for v in list(k.inputs) + list(k.outputs)}
    constants = {v: g.constants[v] for k in kernels for v in k.inputs if v in g.constants}
    cls = cls or Executable
    if cls.overwrites_inputs:
        every = g.producers()
        device["overwrites"] = [overwritable(g, i.members, k.inputs, k.outputs, every)
                                if i.provider in OVERWRITING_PROVIDERS else () for k, i in zip(kernels, infos)]
    return cls(Signature.of(g), kernels, infos, types, constants, **device)


def plan_executable(g: Graph, plan, kernels: Sequence[RuntimeKernel], cls: type[Executable] | None = None,
                    **device: Any) -> Executable:
    """``executable_for`` the built ``kernels`` of ``plan`` (one per plan kernel, in order), each
    reported with its prims, provider and planned cost: every target's last build step."""
    pos = {p.output: i for i, p in enumerate(g.prims)}
    producers = g.producers()
    infos = []
    for cand, kern, est in zip(plan.kernels, kernels, plan.costs):
        members = tuple(sorted(cand.nodes, key=pos.__getitem__))
        infos.append(KernelInfo(members, tuple(producers[v].op.value for v in members), kern.provider, est))
    return executable_for(g, kernels, infos, cls, **device)
