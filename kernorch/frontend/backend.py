"""An ``onnx.backend.base.Backend`` that runs models through import -> fission -> interpreter, so
the onnx package's own conformance tests exercise kernorch's fission rules."""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp


class KernorchRep(BackendRep):
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self._graphs: dict[tuple, object] = {}

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = inputs
        else:
            init = {t.name for t in self.model.graph.initializer}
            names = [i.name for i in self.model.graph.input if i.name not in init]
            feeds = dict(zip(names, inputs))
        shapes = {k: np.asarray(v).shape for k, v in feeds.items()}
        key = tuple(sorted(shapes.items()))
        if key not in self._graphs:
            self._graphs[key] = import_onnx(self.model, input_shapes=shapes)[0]
        g = self._graphs[key]
        by_name = {g.name(v): v for v in g.inputs}
        out = interp.run(g, {by_name[k]: np.asarray(a) for k, a in feeds.items() if k in by_name})
        return [out[v] for v in g.outputs]


class KernorchBackend(Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        return KernorchRep(model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("kernorch runs whole models")


prepare = KernorchBackend.prepare
run_model = KernorchBackend.run_model
supports_device = KernorchBackend.supports_device
