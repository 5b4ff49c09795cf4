"""Where a compile's primitive graph comes from: an ONNX model or a PyTorch module imported as is,
or, for ``precision="int8"``, the QDQ model onnxruntime's quantizer makes of it (and the knobs an
int8 graph is orchestrated with); and the float32 graph a reduced-precision compile's accuracy is
judged against."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from kernorch.errors import KernorchError
from kernorch.frontend.onnx_import import ImportReport, import_onnx
from kernorch.frontend.quantize import calibration_feeds, quantize_int8
from kernorch.frontend.torch_import import export_torch, import_torch
from kernorch.ir.graph import Graph
from kernorch.options import Options
from kernorch.orchestrate.knobs import Knobs
from kernorch.providers.onednn_int8 import int8_kernels

from kernorch.runtime.whole import source_model


def load_graph(model: Any, example_inputs: Any = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
               dynamo: bool | None = None) -> tuple[Graph, ImportReport]:
    """ONNX path / ModelProto, or an nn.Module with example inputs."""
    try:
        import torch

        is_module = isinstance(model, torch.nn.Module)
    except ImportError:  # pragma: no cover - torch is a dependency
        is_module = False
    if is_module:
        if example_inputs is None:
            raise KernorchError("compiling an nn.Module needs example_inputs (a tensor or a tuple of tensors)")
        return import_torch(model, example_inputs, dynamo=dynamo)
    return import_onnx(model, input_shapes=input_shapes)


@dataclasses.dataclass(frozen=True)
class Sources:
    """What a compile's graph came from: the float32 graph reduced-precision kernels are judged
    against (runtime/accuracy.py), and the ONNX model behind it when it is not the user's (the
    QDQ model of an int8 compile)."""

    reference: Graph
    derived: Any = None

    def onnx(self, model: Any):
        """The ONNX model a whole-graph region runs (whole.py), or None."""
        return self.derived if self.derived is not None else source_model(model)


def load_int8_graph(model: Any, example_inputs: Any, opts: Options) -> tuple[Graph, ImportReport, Sources, str]:
    """The int8 compile's graph: the QDQ model onnxruntime's quantizer makes of ``model``
    (frontend/quantize.py), imported; its sources (the float32 graph it is judged against, the
    QDQ model); the calibration note."""
    proto = source_model(model)
    if proto is None:
        if example_inputs is None:
            raise KernorchError("compiling an nn.Module needs example_inputs (a tensor or a tuple of tensors)")
        proto = export_torch(model, example_inputs, dynamo=opts.dynamo)
    reference, _ = import_onnx(proto, input_shapes=opts.input_shapes)
    feeds, note = calibration_feeds(reference, opts.calibration)
    qdq = quantize_int8(proto, feeds, opts.calibration_method)
    g, imp = import_onnx(qdq, input_shapes=opts.input_shapes)
    return g, imp, Sources(reference, qdq), note or f"calibrated on {len(feeds)} batch(es) given by calibration= ({opts.calibration_method})"


def int8_knobs(knobs: Knobs, g: Graph) -> Knobs:
    """An int8 compile's knobs: each whole int8 kernel offered as a seed (providers/onednn_int8.py)."""
    return dataclasses.replace(knobs, seeds=knobs.seeds + int8_kernels(g))
