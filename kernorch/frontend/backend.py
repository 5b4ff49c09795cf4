"""An ``onnx.backend.base.Backend`` that runs models through import -> fission -> interpreter, so
the onnx package's own conformance tests exercise kernorch's fission rules."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp


# Inputs that only carry shape arguments (target shapes, axes, pads, sizes): the output shape
# (or a view's pad value) depends on their values, and kernorch compiles static graphs, so the harness binds them as
# constants -- what a user does by making them initializers. Data inputs are never bound.
SHAPE_ARGS: dict[str, set[int]] = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 2, 3}, "Squeeze": {1},
    "Unsqueeze": {1}, "Split": {1}, "Resize": {1, 2, 3}, "Upsample": {1}, "ConstantOfShape": {0},
    "TopK": {1}, "OneHot": {1}, "Range": {0, 1, 2}, "CenterCropPad": {1},
    "CumSum": {1}, "Trilu": {1},
    **{f"Reduce{r}": {1} for r in ("Sum", "Mean", "Max", "Min", "Prod", "L1", "L2", "LogSum", "LogSumExp",
                                   "SumSquare")},
}


def shape_arg_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs consumed only in shape-argument positions."""
    uses: dict[str, bool] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name:
                uses[name] = uses.get(name, True) and k in SHAPE_ARGS.get(node.op_type, ())
    return {i.name for i in model.graph.input if uses.get(i.name, False)}


class KernorchRep(BackendRep):
    """Runs the model through the reference interpreter. The feeds, the shape arguments bound as
    constants and one prepared model per (shapes, bound values) are handled here for every way of
    running it; a subclass changes only ``build`` (a model with its shape arguments bound, and the
    input shapes -> something runnable) and ``execute`` (that, the feeds -> outputs in order)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.static = shape_arg_inputs(model)
        self._built: dict[tuple, object] = {}

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = inputs
        else:
            init = {t.name for t in self.model.graph.initializer}
            names = [i.name for i in self.model.graph.input if i.name not in init]
            feeds = dict(zip(names, inputs))
        shapes = {k: np.asarray(v).shape for k, v in feeds.items()}
        bound = {k: np.asarray(v) for k, v in feeds.items() if k in self.static}
        key = (tuple(sorted(shapes.items())), tuple((k, v.tobytes()) for k, v in sorted(bound.items())))
        if key not in self._built:
            model = self.model
            if bound:
                model = onnx.ModelProto()
                model.CopyFrom(self.model)
                model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in bound.items())
            self._built[key] = self.build(model, shapes)
        return self.execute(self._built[key], {k: np.asarray(a) for k, a in feeds.items() if k not in bound})

    def build(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]):
        return import_onnx(model, input_shapes=shapes)[0]

    def execute(self, g, feeds: dict[str, np.ndarray]) -> list:
        by_name = {g.name(v): v for v in g.inputs}
        out = interp.run(g, {by_name[k]: a for k, a in feeds.items() if k in by_name})
        return [out[v] for v in g.outputs]


class KernorchBackend(Backend):
    rep = KernorchRep  # what ``prepare`` returns; a subclass of both runs the models another way

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        return cls.rep(model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("kernorch runs whole models")


prepare = KernorchBackend.prepare
run_model = KernorchBackend.run_model
supports_device = KernorchBackend.supports_device
