"""The compiled model on target "cuda": device buffers planned from lifetimes (memory.py, as on
CPU), constants uploaded once, and the whole plan captured once as a CUDA graph and replayed.

Calls take NumPy arrays or tensors on any device and answer on the device of the inputs (NumPy in
-> NumPy out). With a graph, inputs are copied into static device buffers, the graph is replayed
and the static outputs are cloned (so results survive the next call). No graph is used under the
Triton interpreter (CPU tensors) or when a kernel runs on the host (an opaque prim).

Saved like the CPU model (model.py, saved.py): a Triton kernel's record holds its tile
configuration; loading lowers it again from its prims and emits it for the device at hand (no
generated source is read back); nothing is re-tuned.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from kernorch.codegen.triton_kernel import (CudaLinearKernel, CudaOpaqueKernel, HostKernel, TritonKernel, build_cuda,
                                            cuda_device, precompile)
from kernorch.codegen.triton_lower import TritonConfig
from kernorch.errors import KernorchError
from kernorch.frontend.inputs import check_inputs
from kernorch.ir.graph import Graph
from kernorch.options import Env
from kernorch.targets.cuda_measure import CudaOptions, tf32
from kernorch.runtime.executable import Executable, KernelInfo, Signature, executable_for
from kernorch.runtime.records import kernel_info, kernel_members

TARGET = "cuda"


class CudaExecutable(Executable):
    """Runs the kernels of a plan on one device, replaying a CUDA graph when it can."""

    target = TARGET

    adopts_fresh = False  # every kernel writes planned buffers (CUDA graphs replay fixed addresses)
    overwrites_inputs = False  # inplace.py vets generated C kernels only

    def __init__(self, sig: Signature, kernels: Sequence, infos: Sequence[KernelInfo],
                 types: dict[int, tuple[tuple[int, ...], str]], constants: dict[int, Any], device: torch.device,
                 options: CudaOptions = CudaOptions()) -> None:
        super().__init__(sig, kernels, infos, types, constants)
        self.device, self.options = device, options
        self.constants = {v: t.to(device) for v, t in self.constants.items()}
        self.use_graph = (options.graph and device.type == "cuda"
                          and all(getattr(k, "capturable", True) for k in self.kernels))
        self._graph = None
        self._result: dict[int, torch.Tensor] = {}
        self._static_in: dict[int, torch.Tensor] = {}
        self._static_out: dict[int, torch.Tensor] = {}

    def _execute(self, feeds: dict[int, torch.Tensor], outs: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Run every kernel; graph outputs are written into ``outs`` (allocated when missing)."""
        views = self._arena()
        env: dict[int, torch.Tensor] = dict(self.constants)
        env.update(feeds)
        out_set = self.memory.output_values
        for k, kern in enumerate(self.kernels):
            vk = views[k]
            ins = [vk[v] if v in vk else env[v] for v in kern.inputs]
            res = []
            for v in kern.outputs:
                if v in out_set:
                    if v not in outs:
                        outs[v] = self._empty(v)
                    env[v] = outs[v]
                    res.append(outs[v])
                else:
                    res.append(vk[v])
            kern._run(ins, res)
        return {v: env[v] for v in self.sig.graph.outputs}

    def run_ids(self, feeds: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        feeds = {v: t.to(self.device).contiguous() for v, t in feeds.items()}
        with tf32(self.options.allow_tf32):
            if not self.use_graph:
                return self._execute(feeds, {})
            if self._graph is None:
                self._capture(feeds)
            for v, t in feeds.items():
                self._static_in[v].copy_(t)
            self._graph.replay()
            return {v: t.clone() for v, t in self._result.items()}

    def _capture(self, feeds: dict[int, torch.Tensor]) -> None:
        """Warm up (compiles every Triton kernel) on a side stream, then capture one run."""
        self._static_in = {v: t.clone() for v, t in feeds.items()}
        self._static_out = {v: self._empty(v) for v in self.sig.graph.outputs if v not in feeds}
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._execute(self._static_in, self._static_out)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._result = self._execute(self._static_in, self._static_out)
        self._graph = graph

    def _answer(self, out: dict[int, torch.Tensor], like: list) -> list:
        """Results on the device of the inputs: CUDA tensors stay, the rest go to the host."""
        on_device = any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in like)
        vals = [out[v] for v in self.sig.graph.outputs]
        if not on_device:
            vals = [t.cpu() for t in vals]
        if like and all(isinstance(a, np.ndarray) for a in like):
            vals = [t.numpy() for t in vals]
        return vals

    def _feeds(self, checked: dict[int, Any]) -> dict[int, torch.Tensor]:
        return {v: a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
                for v, a in checked.items()}

    def run(self, feeds) -> dict[str, torch.Tensor]:
        checked = check_inputs(self.sig.graph, feeds)
        out = self.run_ids(self._feeds(checked))
        vals = self._answer(out, [a for a in checked.values() if isinstance(a, torch.Tensor)] or [None])
        return {self.sig.graph.name(v): t for v, t in zip(self.sig.graph.outputs, vals)}

    def __call__(self, *args):
        checked = check_inputs(self.sig.graph, list(args))
        vals = self._answer(self.run_ids(self._feeds(checked)), list(args))
        return vals[0] if len(vals) == 1 else tuple(vals)

    # -- the device side (see Executable.profile) ----------------------------------------
    def _device_feeds(self, checked: dict[int, Any]) -> dict[int, torch.Tensor]:
        return {v: t.to(self.device) for v, t in self._feeds(checked).items()}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _device_mode(self):
        return tf32(self.options.allow_tf32)


def cuda_executable(g: Graph, kernels, infos, device: torch.device, options: CudaOptions) -> CudaExecutable:
    return executable_for(g, kernels, infos, CudaExecutable, device=device, options=options)


# -- persistence (called by model.py) ---------------------------------------------------------
def kernel_record(kern, w) -> dict:
    """What rebuilds a kernel on target "cuda", by its kind: a Triton kernel is lowered again from
    its prims with its tile configuration (its source is never read back)."""
    if isinstance(kern, TritonKernel):
        return {"kind": "triton", "config": dataclasses.asdict(kern.spec.config), "key": kern.spec.key}
    for cls, kind in ((CudaLinearKernel, "linear"), (CudaOpaqueKernel, "reference"), (HostKernel, "host")):
        if isinstance(kern, cls):
            return {"kind": kind}
    raise KernorchError(f"cannot save a {type(kern).__name__} kernel")


def save_meta(ex: CudaExecutable) -> dict:
    return {"options": dataclasses.asdict(ex.options)}


def load_cuda(g: Graph, meta: dict, device: str | torch.device | None = None,
              env: Env | None = None) -> CudaExecutable:
    """Rebuild a saved CUDA model's kernels on ``device`` (default: options.device, else the
    current GPU, or the CPU under TRITON_INTERPRET=1); ``meta``: its model.json. model.load wraps
    the executable in its CompiledModel."""
    opts = meta.get("options") or {}
    fields = {f.name: f.type for f in dataclasses.fields(CudaOptions)}
    if not isinstance(opts, dict) or not set(opts) <= set(fields) or not all(
            isinstance(v, bool) if k != "device" else v is None or isinstance(v, str) for k, v in opts.items()):
        raise KernorchError("malformed CUDA options")
    options = CudaOptions(**opts)
    env = env or Env.read()
    dev = torch.device(device) if device is not None else (
        torch.device(options.device) if options.device else cuda_device(env))
    kernels, infos = [], []
    for k, rec in enumerate(meta["kernels"]):
        members, outputs = kernel_members(g, rec)
        kind = rec["kind"]
        if kind == "triton":
            config = {key: int(v) for key, v in rec["config"].items() if key in TritonConfig.__dataclass_fields__}
            kern = build_cuda(g, members, outputs, dev, TritonConfig(**config), env)
            if not isinstance(kern, TritonKernel) or kern.spec.key != rec["key"]:
                raise KernorchError(f"kernel {k}: lowered again, it is not the saved Triton kernel")
        elif kind == "linear":
            kern = CudaLinearKernel(g, members, outputs, dev)
        elif kind == "reference":
            kern = CudaOpaqueKernel(g, members, dev)
        elif kind == "host":
            kern = HostKernel(g, members, outputs, dev)
        else:
            raise KernorchError(f"kernel {k}: kind {str(kind)[:20]!r} cannot run on target cuda")
        kernels.append(kern)
        infos.append(kernel_info(rec["info"]))
    precompile(kernels, env.compile_workers)
    return cuda_executable(g, kernels, infos, dev, options)
