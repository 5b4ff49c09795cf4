"""The onnx package's nine light CNNs (alexnet, densenet121, inception v1/v2, resnet50,
shufflenet, squeezenet, vgg19, zfnet512) import with no opaque prim and match onnxruntime.

Their weights are ConstantOfShape fills of one value (0.02): every logit is equal and the
softmax output is uniform whatever the code does. So each fill is replaced by random weights of
the same shape (scaled by fan-in to keep activations in range), and the softmax input is
compared as well as the output. The three nets with 100M-parameter classifiers are marked slow.
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.ir.prims import Op

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
SLOW = {"bvlc_alexnet", "vgg19", "zfnet512"}
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]


def _random_weight(shape, role: str, rng) -> np.ndarray:
    if role in ("bn_scale", "bn_var"):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    w = rng.standard_normal(shape, dtype=np.float32)  # float32 throughout: vgg19 has 140M weights
    w *= math.sqrt(1.0 / (math.prod(shape[1:]) or 1)) if role == "weight" else 0.1
    return w


def randomized(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The model with random constants for its ConstantOfShape fills, and the softmax input as a
    second output."""
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    roles: dict[str, str] = {}
    for n in model.graph.node:
        for k, name in enumerate(n.input):
            if n.op_type in ("Conv", "Gemm") and k == 1:
                roles[name] = "weight"
            elif n.op_type == "BatchNormalization" and k in (1, 4):
                roles[name] = "bn_scale" if k == 1 else "bn_var"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(s) for s in inits[n.input[0]])
            w = _random_weight(shape, roles.get(n.output[0], "other"), rng)
            m.graph.initializer.append(numpy_helper.from_array(w, n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.ir_version = max(m.ir_version, 4)  # initializers that are not graph inputs
    softmax = [n for n in keep if n.op_type == "Softmax"]
    if softmax and softmax[-1].output[0] == m.graph.output[0].name:
        logits = onnx.ValueInfoProto()
        logits.CopyFrom(m.graph.output[0])  # softmax keeps the shape
        logits.name = softmax[-1].input[0]
        m.graph.output.append(logits)
    return m


def _close(ours: np.ndarray, ref: np.ndarray, rel: float = 1e-4) -> None:
    assert ours.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ours.astype(np.float64) - ref).max())
    assert err <= rel * scale, f"max abs err {err:.3g} > {rel:g} * {scale:.3g}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_light_model_matches_onnxruntime(name):
    import onnxruntime as ort

    model = randomized(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")))
    g, report = import_onnx(model)
    assert not report.opaque, f"ops kept whole: {report.opaque}"
    assert not any(p.op is Op.OPAQUE for p in g.prims)
    x = np.random.default_rng(1).standard_normal(g.types[g.inputs[0]].shape).astype(np.float32)
    ours = interp.run(g, [x])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = sess.run(None, {g.name(g.inputs[0]): x})
    assert len(refs) == len(g.outputs)
    for v, ref in zip(g.outputs, refs):
        _close(ours[v], ref)
    assert np.std(refs[-1]) > 1e-3, "random weights should make the logits differ"
    del model, g, ours, sess
