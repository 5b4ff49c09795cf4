"""The onnx package's nine light CNNs (alexnet, densenet121, inception v1/v2, resnet50,
shufflenet, squeezenet, vgg19, zfnet512) import with no opaque prim and match onnxruntime.

Their weights are ConstantOfShape fills of one value (0.02): every logit is equal and the
softmax output is uniform whatever the code does. So each fill is replaced by random weights of
the same shape (bench.export.randomize_weights, shared with bench/check_strategies.py), and the
softmax input is compared as well as the output. The three nets with 100M-parameter classifiers
are marked slow.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` lives at the repo root, outside the kernorch package
    sys.path.insert(0, str(ROOT))

from bench.export import randomize_weights  # noqa: E402
from kernorch.frontend.onnx_import import import_onnx  # noqa: E402
from kernorch.ir import interp  # noqa: E402
from kernorch.ir.prims import Op  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
SLOW = {"bvlc_alexnet", "vgg19", "zfnet512"}
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]


def _close(ours: np.ndarray, ref: np.ndarray, rel: float = 1e-4) -> None:
    assert ours.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ours.astype(np.float64) - ref).max())
    assert err <= rel * scale, f"max abs err {err:.3g} > {rel:g} * {scale:.3g}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_light_model_matches_onnxruntime(name):
    import onnxruntime as ort

    model = randomize_weights(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")))
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
