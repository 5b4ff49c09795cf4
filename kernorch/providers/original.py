"""The user's own ONNX model as the kernel of a whole-graph region.

A whole-graph region normally runs kernorch's primitive graph exported back to ONNX, which a
runtime compiles less well than the model it came from (a softmax exported as exp/sum/div prims
is no longer onnxruntime's fused Softmax). When the compiled graph still has the model's inputs
and outputs (same names; rewrites keep meaning), the original model can be that region's kernel
instead: its inputs are the graph's, its outputs the graph's outputs by name, and the weights
are the model's own initializers. It is verified against the reference interpreter on the
compiled graph like any region before it may be timed or chosen (runtime/whole.py).

Saved like any ONNX-backed kernel (ort.py ``onnx_state``): initializers bit-equal to a graph
constant of the same name are left out of the stored model (``shared_weights``) and put back on
load from the saved weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, ProviderError
from kernorch.providers.ort import OrtProvider
from kernorch.providers.ov import OpenVinoProvider
from kernorch.providers.to_onnx import OnnxKernel


def original_kernel(g: Graph, proto, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> OnnxKernel:
    """``proto`` as the kernel of prims ``members`` (all of ``g``'s live prims) with ``outputs``
    (``g``'s outputs); ProviderError when its inputs or outputs are not the graph's."""
    sub = g.subgraph(set(members), list(outputs))
    inits = {t.name for t in proto.graph.initializer}
    model_ins = {i.name for i in proto.graph.input if i.name not in inits}
    model_outs = [o.name for o in proto.graph.output]
    graph_ins = {g.name(v): v for v in g.inputs}
    if list(sub.outputs) != list(g.outputs) or len(set(g.outputs)) != len(g.outputs):
        raise ProviderError("the region does not compute exactly the graph's outputs")
    if model_ins != set(graph_ins) or not set(graph_ins.values()) <= set(sub.inputs):
        raise ProviderError(f"the model's inputs {sorted(model_ins)} are not the compiled graph's {sorted(graph_ins)}")
    names = [g.name(v) for v in g.outputs]
    if sorted(names) != sorted(model_outs):
        raise ProviderError(f"the model's outputs {model_outs} are not the compiled graph's {names}")
    feeds = [g.name(v) if v in g.inputs else None for v in sub.inputs]
    return OnnxKernel(proto, list(sub.inputs), feeds, list(sub.outputs), names, frozenset(), Counter())


SMALL = 1024  # bytes: initializers below this stay in the saved ONNX model


def shared_weights(g: Graph, proto) -> list[list]:
    """(position, value id, name) of each initializer of ``proto`` (of at least ``SMALL`` bytes)
    that is bit-equal to the graph constant of the same name: a saved model stores those once, in
    its weights file."""
    from onnx import numpy_helper

    by_name = {g.name(v): v for v in g.constants}
    out = []
    for i, t in enumerate(proto.graph.initializer):
        v = by_name.get(t.name)
        if v is None:
            continue
        a, b = numpy_helper.to_array(t), np.asarray(g.constants[v])
        if a.ndim == 0 or a.nbytes < SMALL:  # not worth it; and a saved graph may hold scalars as immediates
            continue
        if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
            out.append([i, v, t.name])
    return out


def build_original(provider: Provider, g: Graph, proto, members: Iterable[ValueId],
                   outputs: Sequence[ValueId], threads: int | None = None) -> BuiltKernel:
    """The original model compiled by ``provider`` (onnxruntime or OpenVINO), on ``threads``
    (default: the provider's). onnxruntime may spin its threads between calls: the region is the
    whole plan, nothing else wants the cores."""
    k = original_kernel(g, proto, members, outputs)
    data = proto.SerializeToString()
    if isinstance(provider, OrtProvider):
        built = OrtProvider(threads or provider.threads, provider.bake_constants, spin=True)._kernel(k, data)
    elif isinstance(provider, OpenVinoProvider):
        built = provider._kernel(g, k, data)
    else:
        raise ProviderError(f"provider {provider.name} does not run ONNX models")
    built.state["shared_weights"] = shared_weights(g, proto)
    built.detail = "the original ONNX model"
    return built
