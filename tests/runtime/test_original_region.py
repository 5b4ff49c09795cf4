"""The user's original ONNX model as the whole-graph region (runtime/whole.py): verified against
the reference interpreter before it may run, matching onnxruntime on the model file, leaving its
shared weights out of a saved model, and loading in a new process with the same results."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kernorch
from kernorch.frontend.onnx_import import import_onnx
from kernorch.providers.ort import OrtProvider
from kernorch.rewrite.pipeline import DEFAULT_RULES, apply_rewrites
from kernorch.runtime.model import CompiledModel
from kernorch.runtime.whole import original_regions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def _providers():
    out = [OrtProvider(2)]
    try:
        from kernorch.providers.ov import OpenVinoProvider

        if OpenVinoProvider(2).available():
            out.append(OpenVinoProvider(2))
    except ImportError:
        pass
    return out


@pytest.fixture(scope="module")
def graph():
    g, _ = import_onnx(EXAMPLE)
    return apply_rewrites(g, DEFAULT_RULES)[0]


def _onnxruntime(x):
    return ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def test_each_runtime_on_the_original_model_matches_onnxruntime(graph):
    failures = []
    contenders = dict(original_regions(graph, onnx.load(EXAMPLE), _providers(), failures))
    assert not failures, failures
    assert {"original model (onnxruntime)", "original model (onnxruntime, 1 thread)"} <= set(contenders)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = _onnxruntime(x)
    for label, ex in contenders.items():
        model = CompiledModel(ex, None, graph)
        first = model(x)
        np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5, err_msg=label)
        kept = first.copy()
        again = model(x * 2)  # a later call does not overwrite an earlier result
        assert np.array_equal(first, kept) and not np.shares_memory(first, again), label
        import torch

        assert np.array_equal(model(torch.from_numpy(x)).numpy(), first), label


def test_a_model_that_computes_something_else_is_refused(graph):
    """Same names, other weights: the reference interpreter on the compiled graph catches it."""
    proto = onnx.load(EXAMPLE)
    w = proto.graph.initializer[0]
    arr = onnx.numpy_helper.to_array(w) + 0.5
    w.CopyFrom(onnx.numpy_helper.from_array(arr, w.name))
    failures = []
    assert original_regions(graph, proto, [OrtProvider(2)], failures) == []
    assert failures and "original model (onnxruntime)" in failures[0]


def test_a_model_with_other_outputs_is_refused(graph):
    proto = onnx.load(EXAMPLE)
    old = proto.graph.output[0].name
    proto.graph.output[0].name = "renamed"
    for node in proto.graph.node:
        node.output[:] = ["renamed" if o == old else o for o in node.output]
    failures = []
    assert original_regions(graph, proto, [OrtProvider(2)], failures) == []
    assert "outputs" in failures[0]


LOAD_ONE = """
import sys, numpy as np, kernorch
m = kernorch.load(sys.argv[1])
assert [k.built.detail for k in m.kernels] == ["the original ONNX model"]
np.save(sys.argv[2], m(np.load(sys.argv[3])))
"""


def test_saved_original_region_loads_in_a_new_process(graph, tmp_path):
    contenders = dict(original_regions(graph, onnx.load(EXAMPLE), [OrtProvider(2)], []))
    model = CompiledModel(contenders["original model (onnxruntime)"], None, graph)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = model(x)
    d = model.save(tmp_path / "saved")
    (rec,) = json.loads((d / "model.json").read_text())["kernels"]
    assert rec["provider"] == "ort" and rec["state"]["weights_taken"], rec["state"].keys()
    blobs = sum(p.stat().st_size for p in (d / "blobs").iterdir())
    assert blobs < EXAMPLE.stat().st_size, "the saved ONNX model should not hold a second copy of the weights"
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", LOAD_ONE, str(d), str(tmp_path / "again.npy"),
                           str(tmp_path / "x.npy")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "again.npy"), got)
    resaved = kernorch.load(d).save(tmp_path / "again")  # saving a loaded model leaves the weights out again
    (rec2,) = json.loads((resaved / "model.json").read_text())["kernels"]
    assert rec2["state"]["weights_taken"] == rec["state"]["weights_taken"]


def test_compile_times_the_original_model_against_the_plan(tmp_path):
    model = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=2, progress=False,
                             providers=("ort", "openvino"))
    e2e = model.report.end_to_end
    assert "plan" in e2e and "original model (onnxruntime)" in e2e, e2e
    assert "choice" in model.summary()
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = model(x)
    np.testing.assert_allclose(got, _onnxruntime(x), rtol=1e-5, atol=1e-5)
    again = kernorch.load(model.save(tmp_path / "saved"))
    assert np.array_equal(again(x), got)
