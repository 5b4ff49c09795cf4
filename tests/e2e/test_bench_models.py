"""The benchmark models (small input sizes), exported with both exporters: the fissioned primitive
graph has no opaque prims and the reference interpreter matches onnxruntime."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` lives at the repo root, outside the package
    sys.path.insert(0, str(ROOT))

ort = pytest.importorskip("onnxruntime")

from kernorch.frontend.onnx_import import import_onnx  # noqa: E402
from kernorch.ir import interp  # noqa: E402

MODELS = ["candy", "segformer_b0", "efficientvit_b0", "vit_tiny", "gpt2_block", "cspdarknet53_mish"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bench_models")


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", MODELS)
def test_fissioned_model_matches_onnxruntime(name, exporter, cache):
    if name == "segformer_b0":
        pytest.importorskip("transformers")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript")
    from bench.export import export_onnx

    path = export_onnx(name, exporter, size="small", cache_dir=cache, verbose=False)
    graph, report = import_onnx(path)
    assert report.opaque == {} or sum(report.opaque.values()) == 0
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    want = sess.run(None, feeds)
    by_name = {graph.name(v): v for v in graph.inputs}
    got = interp.run(graph, {by_name[k]: a for k, a in feeds.items()})
    for v, w in zip(graph.outputs, want):
        scale = max(1.0, float(np.abs(w).max()))
        assert np.abs(got[v] - w).max() <= 1e-4 * scale, f"{name}/{exporter}: output {graph.name(v)}"
