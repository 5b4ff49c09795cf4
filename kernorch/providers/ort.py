"""onnxruntime as a kernel provider: the candidate exported as a one-kernel ONNX model, run in an
InferenceSession with all graph optimizations and a fixed intra-op thread count."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, default_threads
from kernorch.providers.to_onnx import OnnxKernel, export, unsupported


class OrtProvider(Provider):
    """``spin=False`` keeps ORT's worker threads from busy-waiting after a run: in a plan, the
    next kernel is often another provider's, and spinning threads would steal its cores."""

    name = "ort"

    def __init__(self, threads: int | None = None, bake_constants: bool = True, spin: bool = False) -> None:
        self.threads = threads or default_threads()
        self.bake_constants = bake_constants
        self.spin = spin

    def available(self) -> bool:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False
        return True

    def can_run(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> bool | str:
        return unsupported(g, members) or True

    def build(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> BuiltKernel:
        import onnxruntime as ort

        k = export(g, members, outputs, bake_constants=self.bake_constants)
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        if not self.spin:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(k.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return BuiltKernel(self.name, k.inputs, k.outputs, _runner(sess, k), k.baked, _views_detail(k),
                           run_into=_binder(sess, k))


def _runner(sess, k: OnnxKernel):
    feeds = [(i, name) for i, name in enumerate(k.feeds) if name is not None]
    names = list(k.output_names)

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        res = sess.run(names, {name: inputs[i].numpy() for i, name in feeds})
        return [torch.from_numpy(np.ascontiguousarray(r)) for r in res]

    return run


def _binder(sess, k: OnnxKernel):
    """Run with IOBinding straight from and into the runtime's tensors (no output copies)."""
    feeds = [(i, name) for i, name in enumerate(k.feeds) if name is not None]
    names = list(k.output_names)

    def run_into(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        b = sess.io_binding()
        for i, name in feeds:
            a = inputs[i].numpy()
            b.bind_input(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        for name, t in zip(names, outputs):
            a = t.numpy()
            b.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        sess.run_with_iobinding(b)

    return run_into


def _views_detail(k: OnnxKernel) -> str:
    return ", ".join(f"{n} {kind} view" for kind, n in sorted(k.views.items()))
