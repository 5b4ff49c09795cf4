"""``precision="int8"``: the model quantized by onnxruntime's quantizer on the user's calibration
feeds (frontend/quantize.py) compiles, matches onnxruntime on that same QDQ model, reports its
accuracy against float32 and its calibration, saves and loads; bad calibration input is a
one-line error naming the culprit."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

import kernorch
from kernorch.errors import KernorchError
from kernorch.frontend.quantize import RANDOM_NOTE, quantize_int8
from tests.frontend.qdq_nets import ConvNet, feeds, float_model


def _calibration():
    return [feeds("convnet", 100 + k) for k in range(4)]


def test_int8_compile_matches_onnxruntime_reports_accuracy_and_saves(tmp_path):
    m = kernorch.compile(float_model("convnet"), precision="int8", calibration=_calibration(), cost="model",
                         db=tmp_path / "db.sqlite", progress=False, strict=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    qdq = quantize_int8(float_model("convnet"), _calibration())  # the same quantizer on the same feeds
    sess = ort.InferenceSession(qdq.SerializeToString(), so, providers=["CPUExecutionProvider"])
    f = feeds("convnet", 7)
    got = np.asarray(m(f["x"]))
    (want,) = sess.run(None, f)
    np.testing.assert_array_equal(got, want)
    assert m.report.rewrites["split_dequantized"] == 1 and m.report.rewrites["integer_max_pools"] == 1
    assert m.report.precision == "int8" and "4 batch(es) given by calibration= (minmax)" in m.report.calibration
    [acc] = m.report.accuracy
    assert 0.99 < acc["cosine"] <= 1.0 + 1e-6 and 0 < acc["max_rel_err"] < 0.2  # int8 is not float32, but close
    assert "int8 vs float32 reference, y: max rel err" in m.summary()
    m.save(tmp_path / "saved")
    loaded = kernorch.load(tmp_path / "saved")
    assert np.array_equal(np.asarray(loaded(f["x"])), got)
    assert loaded.report.accuracy == m.report.accuracy and loaded.report.calibration == m.report.calibration


def test_int8_compile_of_a_module_without_calibration_says_random(tmp_path):
    torch.manual_seed(0)
    m = kernorch.compile(ConvNet().eval(), torch.randn(1, 3, 16, 16), precision="int8", cost="model",
                         db=tmp_path / "db.sqlite", progress=False)
    assert m.report.calibration == RANDOM_NOTE and RANDOM_NOTE in m.summary()


@pytest.mark.parametrize("kwargs,match", [
    ({"precision": "f32", "calibration": [{}]}, "calibration= is for precision='int8'"),
    ({"precision": "int8", "calibration_method": "mse"}, "unknown calibration_method 'mse'"),
    ({"precision": "int8", "calibration": [{"x": np.zeros((2, 3), np.float32)}]},
     r"calibration batch 0: input 'x' has shape \[2,3\], expected \[1,3,16,16\]"),
    ({"precision": "int8", "calibration": []}, "calibration= gave no batches"),
])
def test_bad_calibration_is_one_line(kwargs, match, tmp_path):
    with pytest.raises(KernorchError, match=match) as e:
        kernorch.compile(float_model("convnet"), cost="model", db=tmp_path / "db.sqlite", progress=False, **kwargs)
    assert "\n" not in str(e.value)
