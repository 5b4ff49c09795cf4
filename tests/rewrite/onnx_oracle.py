"""Shared by the rewrite tests that build small ONNX models: finish a graph into a model whose
outputs carry inferred shapes, and check a default-rules rewrite against onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.rewrite import DEFAULT_RULES, apply_rewrites


def model_of(graph: onnx.GraphProto) -> onnx.ModelProto:
    """Opset 17, with the outputs' shapes filled in by shape inference (import needs them)."""
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    known = {v.name: v for v in model.graph.value_info}
    for o in model.graph.output:
        if o.name in known:
            o.CopyFrom(known[o.name])
    return model


def rewrite_matches_ort(model: onnx.ModelProto, rule: str, fired: int, rtol: float = 1e-4, atol: float = 1e-4):
    """Apply DEFAULT_RULES; ``rule`` fired ``fired`` times and the result matches onnxruntime on
    random inputs. Returns the rewritten graph."""
    g = import_onnx(model)
    g = g[0] if isinstance(g, tuple) else g
    out, report = apply_rewrites(g, DEFAULT_RULES)
    assert report[rule] == fired
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = interp.run(out, [feeds[out.names[v]] for v in out.inputs])
    for w, v in zip(want, out.outputs):
        np.testing.assert_allclose(got[v], w, rtol=rtol, atol=atol)
    return out
