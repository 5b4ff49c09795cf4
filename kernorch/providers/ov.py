"""OpenVINO as a kernel provider (optional: ``pip install kernorch[openvino]``).

OpenVINO reads the exported ONNX model directly and compiles it for the CPU. It is the strongest
CPU peer on convolution-heavy models, so it serves the linear kernels it wins. Precision is pinned
to f32 (``openvino``): on CPUs with bf16/AMX support OpenVINO would otherwise compute in bf16 by
default. ``openvino_bf16`` (``precision="bf16"`` adds it, on CPUs with bf16 arithmetic) lets it:
its regions are judged with the bf16 tolerance or the user's accuracy budget.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from kernorch.codegen import isa
from kernorch.ir import oracle
from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, default_threads
from kernorch.providers.ort import _views_detail, kept_shared_weights, onnx_from_state, onnx_state, without_weights
from kernorch.providers.to_onnx import OnnxKernel, export, unsupported

_CORE = None  # process-wide by design: one OpenVINO Core (its plugins and thread pool) per process


def _core():
    global _CORE
    if _CORE is None:
        import openvino as ov

        _CORE = ov.Core()
    return _CORE


class OpenVinoProvider(Provider):
    name = "openvino"

    def __init__(self, threads: int | None = None, bake_constants: bool = True, pin_threads: bool = False,
                 precision: str = "f32", tolerance: float | None = None) -> None:
        if precision not in ("f32", "bf16"):
            raise ValueError(f"OpenVINO precision {precision!r}: f32 or bf16")
        self.threads = threads or default_threads()
        self.bake_constants = bake_constants
        self.pin_threads = pin_threads
        self.precision = precision
        self.name = "openvino" if precision == "f32" else "openvino_bf16"
        self.tolerance = (tolerance or oracle.rel_tolerance("bfloat16")) if precision == "bf16" else None

    def available(self) -> bool:
        try:
            import openvino  # noqa: F401
        except ImportError:
            return False
        return self.precision == "f32" or isa.host().bf16

    @property
    def key_suffix(self) -> str:
        return f"+ovbf16@{self.tolerance:g}" if self.precision == "bf16" else ""

    def can_run(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> bool | str:
        if not self.available():
            return "openvino is not installed (pip install kernorch[openvino])"
        return unsupported(g, members) or True

    def config(self) -> dict:
        return {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                "INFERENCE_PRECISION_HINT": self.precision, "ENABLE_CPU_PINNING": self.pin_threads}

    def build(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> BuiltKernel:
        k = export(g, members, outputs, bake_constants=self.bake_constants)
        return self._kernel(g, k, k.model.SerializeToString())

    def saved_state(self, built: BuiltKernel) -> dict:
        return without_weights(built.state)

    def load(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId], state: dict) -> BuiltKernel:
        """A saved kernel: its ONNX model, checked, compiled again by OpenVINO (nothing is exported)."""
        prov = OpenVinoProvider(self.threads, self.bake_constants, bool(state.get("pin_threads")), self.precision,
                                self.tolerance)
        return kept_shared_weights(prov._kernel(g, *onnx_from_state(g, members, outputs, state)), state)

    def _kernel(self, g: Graph, k: OnnxKernel, data: bytes) -> BuiltKernel:
        core = _core()
        model = core.read_model(io.BytesIO(data))
        compiled = core.compile_model(model, "CPU", self.config())
        request = compiled.create_infer_request()
        by_name = {}
        for i, port in enumerate(compiled.inputs):
            for n in port.get_names():
                by_name[n] = i
        feeds = [(i, by_name[name]) for i, name in enumerate(k.feeds) if name is not None]
        out_ports = [compiled.output(name) for name in k.output_names]
        want = [np.dtype(g.types[v].dtype) for v in k.outputs]

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            res = request.infer({port: inputs[i].numpy() for i, port in feeds}, share_inputs=True)
            outs = []
            for p, dt in zip(out_ports, want):
                arr = res[p]
                outs.append(torch.from_numpy(np.ascontiguousarray(arr if arr.dtype == dt else arr.astype(dt))))
            return outs

        import openvino as ov

        bound: dict[tuple[str, int], int] = {}

        def bind(kind: str, port: int, t: torch.Tensor) -> None:
            """Point the request at ``t``'s memory, unless it already is (the runtime passes the
            same planned buffers every call, so binding is mostly skipped)."""
            ptr = t.data_ptr()
            if bound.get((kind, port)) != ptr:
                tensor = ov.Tensor(t.numpy(), shared_memory=True)
                (request.set_input_tensor if kind == "in" else request.set_output_tensor)(port, tensor)
                bound[(kind, port)] = ptr

        def run_into(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
            for i, port in feeds:
                bind("in", port, inputs[i])
            for k_, t in enumerate(outputs):
                bind("out", out_index[k_], t)
            request.infer()

        out_index = [list(compiled.outputs).index(p) for p in out_ports]
        same_types = all(np.dtype(str(p.get_element_type().to_dtype())) == dt for p, dt in zip(out_ports, want))
        return BuiltKernel(self.name, k.inputs, k.outputs, run, k.baked, _views_detail(k),
                           run_into=run_into if same_types else None, rel_tolerance=self.tolerance,
                           state=onnx_state(k, data, threads=self.threads, pin_threads=self.pin_threads))
