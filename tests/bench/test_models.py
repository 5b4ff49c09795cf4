"""Fast checks of the bench models: small variants exported with both exporters, checked with onnxruntime.

Only candy, gpt2_block and vit_tiny (depth 2) at their small sizes: the whole file runs in well under 60 s
on 2 cores. resnet50 and mobilenetv3_large are exported only in the slow tests (about a minute together);
the fast suite pins their architectures by torchvision's parameter counts.
``python -m bench.export --all`` covers the full-size models.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` lives at the repo root, outside the kernorch package
    sys.path.insert(0, str(ROOT))

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from bench import export as bx  # noqa: E402
from bench.models import MODELS, build_model, resolve_size  # noqa: E402

CASES = [("candy", None), ("gpt2_block", None), ("vit_tiny", 2)]
CASES += [pytest.param(n, None, marks=pytest.mark.slow) for n in ("resnet50", "mobilenetv3_large")]
CASES += [("poolformer_s12", None), pytest.param("efficientnet_b0", None, marks=pytest.mark.slow)]
# resnet50's 53 BatchNorms, calibrated on a 128x128 image, leave float32 about 1e-4 (6e-5 relative) from float64
ATOL = {"resnet50": 1e-3}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("kernorch_models")


@pytest.mark.parametrize("exporter", bx.EXPORTERS)
@pytest.mark.parametrize("name,depth", CASES)
def test_export_small_matches_torch(name, depth, exporter, cache):
    if exporter == "dynamo":
        pytest.importorskip("onnxscript")
    atol = ATOL.get(name, 1e-4)
    info = bx.export_and_check(name, exporter, "small", cache, depth=depth, check=True, atol=atol, verbose=False)
    assert info["exported"] and info["path"].exists()
    assert info["max_abs_err"] <= atol
    proto = onnx.load(str(info["path"]))
    assert proto.opset_import[0].version == bx.OPSETS[exporter]
    # static shapes: input and output dims are all concrete
    for vi in list(proto.graph.input) + list(proto.graph.output):
        assert all(d.HasField("dim_value") and d.dim_value > 0 for d in vi.type.tensor_type.shape.dim), vi
    assert {"MatMul", "Conv"} & set(info["op_types"])
    # second call reuses the cached file
    again = bx.export_and_check(name, exporter, "small", cache, depth=depth, check=False, verbose=False)
    assert not again["exported"] and again["path"] == info["path"]


def test_builders_are_deterministic():
    m1, x1 = build_model("gpt2_block", size="small", depth=1, seed=3)
    m2, x2 = build_model("gpt2_block", size="small", depth=1, seed=3)
    assert not m1.training
    assert torch.equal(x1[0], x2[0])
    with torch.no_grad():
        assert torch.equal(m1(*x1), m2(*x2))
    assert tuple(x1[0].shape) == (1, resolve_size("gpt2_block", "small"), 768)


@pytest.mark.parametrize("name,params", [("resnet50", 25_557_032), ("mobilenetv3_large", 5_483_032)])
def test_torchvision_convnets(name, params):
    """Parameter counts of torchvision's resnet50 / mobilenet_v3_large (num_classes=1000)."""
    model, (x,) = build_model(name, size=64)
    assert sum(p.numel() for p in model.parameters()) == params
    with torch.no_grad():
        y = model(x)
    assert y.shape == (1, 1000) and torch.isfinite(y).all()


def test_registry_and_errors(tmp_path):
    assert set(MODELS) == {"candy", "segformer_b0", "efficientvit_b0", "vit_tiny", "gpt2_block",
                           "cspdarknet53_mish", "resnet50", "mobilenetv3_large", "gpt2", "bert_base",
                           "poolformer_s12", "efficientnet_b0"}
    with pytest.raises(KeyError):
        build_model("resnet_nope")
    with pytest.raises(ValueError):
        build_model("efficientvit_b0", depth=3)  # no depth knob
    with pytest.raises(ValueError):
        bx.export_onnx("candy", "tflite", "small", tmp_path)


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNORCH_MODEL_CACHE", str(tmp_path / "c"))
    assert bx.default_cache_dir() == tmp_path / "c"
    name = bx.onnx_filename("vit_tiny", "dynamo", "small", depth=2)
    assert name.startswith("vit_tiny-64-d2-") and name.endswith(".dynamo.opset18.onnx")


def test_light_models():
    light = bx.light_models()
    assert len(light) == 9 and "light_resnet50" in light
    feeds = bx.light_model_inputs(light["light_squeezenet"])
    assert [v.shape for v in feeds.values()] == [(1, 3, 224, 224)]
