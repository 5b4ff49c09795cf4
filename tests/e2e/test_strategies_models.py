"""Every strategy compiles real models and matches onnxruntime (cost model, so no tuning).

The full matrix (all light models, all benchmark models) runs in the benchmark (`python -m bench`),
which checks every runtime's output before timing; this test keeps two small models in the suite."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ort = pytest.importorskip("onnxruntime")

import kernorch  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("strategy_models")


@pytest.mark.parametrize("strategy", ["unfused", "per-operator", "greedy", "optimal"])
@pytest.mark.parametrize("name", ["candy", "gpt2_block"])
def test_strategy_matches_onnxruntime(name, strategy, cache, tmp_path):
    from bench.export import export_onnx

    path = export_onnx(name, "torchscript", size="small", cache_dir=cache, verbose=False)
    model = kernorch.compile(path, strategy=strategy, cost="model", db=tmp_path / "db.sqlite", progress=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    want = sess.run(None, feeds)
    got = model.run(feeds)
    for name_, w in zip(model.output_names, want):
        scale = max(1.0, float(np.abs(w).max()))
        assert np.abs(got[name_].numpy() - w).max() <= 1e-4 * scale
