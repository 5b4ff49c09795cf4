"""Runnable kernels for target "cuda": Triton programs, linear prims through torch, opaque prims
through the reference, all on one torch device.

The device is a CUDA GPU, or the CPU when ``TRITON_INTERPRET=1`` (Triton's interpreter runs the
same programs on CPU tensors; it must be set before triton is first imported). Generated modules
are written once to ``<cache>/triton/`` (Triton's JIT reads a function's source from its file)
and imported from there; Triton caches the compiled binaries itself. Settings come from the Env
the caller's entry point read (kernorch/options.py). Process-wide by design: the imported modules
(``_MODULES``, like sys.modules) and the compile-worker pool (``_WORKERS``, costly to start).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from typing import Iterable, Sequence

import numpy as np
import torch

from kernorch.codegen import triton_warm
from kernorch.codegen.feasible import CannotGenerate, kernel_kind, kernel_prims
from kernorch.codegen.linear import LinearKernel
from kernorch.codegen.runner import TORCH_DTYPE, Kernel, OpaqueKernel, as_tensor
from kernorch.codegen.triton import emit_triton, tuning_space, why_not_triton
from kernorch.codegen.triton_lower import TritonConfig, TritonLowering, TritonSpec, lower_triton
from kernorch.errors import KernorchError
from kernorch.ir import interp
from kernorch.ir.graph import Graph
from kernorch.ir.prims import Kind
from kernorch.options import Env


def interpreting(env: Env | None = None) -> bool:
    return (env or Env.read()).triton_interpret


def cuda_device(env: Env | None = None) -> torch.device:
    """The device target "cuda" runs on: the current GPU, or the CPU under TRITON_INTERPRET=1."""
    if interpreting(env):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise KernorchError("target 'cuda' needs a CUDA GPU (or TRITON_INTERPRET=1 to run Triton's interpreter on CPU)")
    return torch.device("cuda", torch.cuda.current_device())


def device_name(device: torch.device) -> str:
    """What the tuning database keys costs by."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "interpreter"


INTERPRETER_CONFIG = TritonConfig(block=1 << 16, warps=8)  # big tiles: the interpreter pays per op and program


def default_config(device: torch.device) -> TritonConfig:
    """The tile size used when none was tuned."""
    return TritonConfig() if device.type == "cuda" else INTERPRETER_CONFIG


class DeviceKernel(Kernel):
    """A Kernel whose inputs and outputs live on ``self.device``."""

    device = torch.device("cpu")

    def run(self, inputs: Sequence, out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        ins = [as_tensor(x, t, f"input {k}").to(self.device) for k, (x, t) in enumerate(zip(inputs, self.in_types))]
        if out is None:
            outs = [torch.empty(t.shape, dtype=TORCH_DTYPE[t.dtype], device=self.device) for t in self.out_types]
        else:
            outs = list(out)
        self._run(ins, outs)
        return outs


_MODULES: dict[str, object] = {}


def load_module(source: str, name: str, env: Env | None = None):
    """Import generated source (written once to the cache, keyed by its hash)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    mod_name = f"kernorch_triton_{name}_{digest}"
    if mod_name in _MODULES:
        return _MODULES[mod_name]
    d = (env or Env.read()).build_dir() / "triton"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{mod_name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    _MODULES[mod_name] = mod
    return mod


class TritonKernel(DeviceKernel):
    """A generated kernel: one Triton program launch per group, scratch allocated at first run."""

    provider = "triton"

    def __init__(self, spec: TritonSpec, g_types, device: torch.device, env: Env | None = None) -> None:
        source, table = emit_triton(spec, interpret=device.type != "cuda")
        super().__init__(spec.inputs, spec.outputs, [g_types[v] for v in spec.inputs],
                         [g_types[v] for v in spec.outputs], source, spec.key)
        self.spec, self.device = spec, device
        mod = load_module(source, spec.name, env)
        self.path = mod.__file__
        self.fns = [getattr(mod, grp.name) for grp in spec.groups]
        self.table = torch.as_tensor(table).to(device) if len(table) else None
        self.scratch: list[torch.Tensor] | None = None

    def arg_dtypes(self) -> list[str]:
        return [a.dtype for a in self.spec.args] + ([str(self.table.dtype)[6:]] if self.table is not None else [])

    def _run(self, ins, outs) -> None:
        if self.scratch is None:
            self.scratch = [torch.empty(a.size, dtype=TORCH_DTYPE[a.dtype], device=self.device)
                            for a in self.spec.args if a.role == "ws"]
        args = [*ins, *outs, *self.scratch]
        if self.table is not None:
            args.append(self.table)
        if self.device.type == "cuda":
            for fn, grp in zip(self.fns, self.spec.groups):
                fn[(grp.grid,)](*args, num_warps=grp.warps)
            return
        with np.errstate(all="ignore"):  # the interpreter computes masked-out lanes too
            for fn, grp in zip(self.fns, self.spec.groups):
                fn[(grp.grid,)](*args, num_warps=grp.warps)


# -- parallel compilation (triton_warm.py) -------------------------------------------------------
_WORKERS = None


def _workers(n: int):
    """The pool of ``n`` workers (0: one per core but one, at most 16), started on first use and
    kept for the process (its first settings win)."""
    global _WORKERS
    if _WORKERS is None:
        _WORKERS = triton_warm.Workers(n or min(16, max(1, (os.cpu_count() or 2) - 1)))
    return _WORKERS


def precompile_async(kernels: Iterable, workers: int = 0) -> list:
    """Start compiling the GPU Triton kernels among ``kernels`` in ``workers`` processes (the
    Env's compile_workers); returns what ``wait`` needs (nothing on the interpreter, for fewer
    than two, or workers=1)."""
    jobs = [{"path": k.path, "fns": [(grp.name, grp.warps) for grp in k.spec.groups], "dtypes": k.arg_dtypes(),
             "device": k.device.index or 0}
            for k in kernels if isinstance(k, TritonKernel) and k.device.type == "cuda"]
    if len(jobs) < 2 or workers == 1:
        return []
    try:
        return _workers(workers).submit(jobs)
    except Exception:  # noqa: BLE001 - no workers: the first launch compiles instead
        return []


def wait(pending: list) -> None:
    try:
        triton_warm.wait(pending)
    except Exception:  # noqa: BLE001 - a broken worker: the launch compiles instead
        pass


def precompile(kernels: Iterable, workers: int = 0) -> None:
    wait(precompile_async(kernels, workers))


class CudaLinearKernel(LinearKernel, DeviceKernel):
    """A linear prim through torch on the device (cuBLAS / cuDNN)."""

    def __init__(self, g: Graph, members, outputs, device: torch.device) -> None:
        super().__init__(g, members, outputs)
        self.device = device


class CudaOpaqueKernel(OpaqueKernel, DeviceKernel):
    """An opaque prim run natively on the host (onnxruntime, one node), through host memory
    (cannot be captured in a CUDA graph)."""

    capturable = False

    def __init__(self, g: Graph, members, device: torch.device) -> None:
        super().__init__(g, members)
        self.device = device

    def _run(self, ins, outs) -> None:
        host = [torch.empty(o.shape, dtype=o.dtype) for o in outs]
        super()._run([t.cpu() for t in ins], host)
        for o, h in zip(outs, host):
            o.copy_(h)


class HostKernel(DeviceKernel):
    """A kernel's prims run by the reference interpreter on the host: the fallback for a Triton
    kernel that failed to compile or to verify on this GPU (slow, never captured in a graph)."""

    provider = "host"
    capturable = False

    def __init__(self, g: Graph, members, outputs: Sequence[int], device: torch.device) -> None:
        self.sub = g.subgraph(set(members), list(outputs))
        super().__init__(self.sub.inputs, outputs, [g.types[v] for v in self.sub.inputs],
                         [g.types[v] for v in outputs], "reference interpreter",
                         g.kernel_key(set(members), list(outputs)))
        self.device = device

    def _run(self, ins, outs) -> None:
        res = interp.run(self.sub, {v: t.cpu().numpy() for v, t in zip(self.inputs, ins)})
        for v, o in zip(self.outputs, outs):
            o.copy_(torch.from_numpy(np.ascontiguousarray(res[v])).reshape(o.shape))


def build_variants(g: Graph, members: Iterable[int], outputs: Sequence[int], device: torch.device,
                   tune: bool = False, env: Env | None = None) -> list[Kernel]:
    """The kernel for target "cuda" with the default tile size, then (``tune``, Triton kernels on a
    GPU) one per other tile size of its tuning space; the schedule is computed once."""
    members = set(members)
    reason = why_not_triton(g, members, outputs)
    if reason is not None:
        raise CannotGenerate(reason)
    if any(p.kind in (Kind.OPAQUE, Kind.LINEAR) for p in kernel_prims(g, members)):
        return [build_cuda(g, members, outputs, device, env=env)]
    low = TritonLowering(g, members, outputs)
    first = low.spec(default_config(device))
    out: list[Kernel] = [TritonKernel(first, g.types, device, env)]
    if tune and device.type == "cuda":
        out += [TritonKernel(low.spec(c), g.types, device, env) for c in tuning_space(first) if c != first.config]
    return out


def build_cuda(g: Graph, members: Iterable[int], outputs: Sequence[int], device: torch.device | None = None,
               config: TritonConfig | None = None, env: Env | None = None) -> Kernel:
    """One kernel for target "cuda" (Triton, torch linear or reference opaque)."""
    env = env or Env.read()
    device = device or cuda_device(env)
    members = set(members)
    kind = kernel_kind(g, members, outputs, why_not_triton, "Triton")
    if kind is Kind.OPAQUE:
        return CudaOpaqueKernel(g, members, device)
    if kind is Kind.LINEAR:
        return CudaLinearKernel(g, members, outputs, device)
    return TritonKernel(lower_triton(g, members, outputs, config or default_config(device)), g.types, device, env)
