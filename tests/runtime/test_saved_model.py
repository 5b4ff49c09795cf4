"""Saved models: a round trip through a new process gives bit-identical outputs for plans holding a
kernel of every kind (generated C, the code generator's linear and reference kernels, the PyTorch,
onnxruntime and OpenVINO providers, provider regions), and the files are data, not code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernorch
from kernorch.orchestrate.knobs import Knobs
from saved_net import favour, net_and_input

ROOT = Path(__file__).resolve().parents[2]


# case -> compile options, and the provider that the case's timer favours (None: roofline costs).
# Plans of own kernels skip the in-context rounds (runtime/in_context.py): they race plans by time,
# which a save/load test does not need, and they cost each of these compiles seconds.
OWN = dict(regions=False, knobs=Knobs(context_rounds=0))
CASES = {
    "roofline": (dict(cost="model", regions=False, providers=()), None),  # own kernels only
    "torch": (dict(providers=("torch",), **OWN), "torch"),
    "torch_jit": (dict(providers=("torch_jit",), **OWN), "torch_jit"),
    "ort": (dict(providers=("ort",), **OWN), "ort"),
    "openvino": (dict(providers=("openvino",), **OWN), "openvino"),
    "ort_region": (dict(providers=("ort",)), "ort"),
    "openvino_region": (dict(providers=("openvino",)), "openvino"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (directory, input, in-process output, kernel kinds, model)."""
    net, x = net_and_input()
    want = net(x).detach().numpy()
    root = tmp_path_factory.mktemp("saved")
    out = {}
    for case, (opts, favoured) in CASES.items():
        with pytest.MonkeyPatch.context() as mp:
            if favoured:
                favour(mp, favoured)
            model = kernorch.compile(net, x, db=root / f"{case}.sqlite", threads=2, progress=False, **opts)
        got = model(x.numpy())
        assert np.abs(got - want).max() <= 1e-4, f"{case}: the compiled model disagrees with PyTorch"
        d = model.save(root / case)
        kinds = [(k["kind"], k.get("provider")) for k in json.loads((d / "model.json").read_text())["kernels"]]
        np.save(root / f"{case}.npy", got)
        out[case] = (d, x.numpy(), got, kinds, model)
    return out


def test_every_kernel_kind_is_in_some_plan(saved):
    kinds = {kind for case in saved.values() for kind in case[3]}
    for want in [("c", None), ("linear", None), ("reference", None), ("provider", "torch"),
                 ("provider", "torch_jit"), ("provider", "ort"), ("provider", "openvino")]:
        assert want in kinds, f"no plan has a {want} kernel: {sorted(kinds, key=str)}"
    for case in ("ort_region", "openvino_region"):
        assert "provider region" in saved[case][4].report.plan_summary, saved[case][4].summary()


def test_pytorch_provider_kernel_with_a_computed_conv_operand_round_trips(saved):
    """Issue 14: relu + conv by the PyTorch provider was reloaded as the code generator's linear
    kernel, which cannot take a computed operand ('%32 feeding conv is computed')."""
    d, x, got, kinds, model = saved["torch"]
    relu_conv = [i for i in model.executable.infos if i.provider == "torch" and {"relu", "conv"} <= set(i.ops)]
    assert relu_conv, model.summary()
    again = kernorch.load(d)
    assert np.array_equal(again(x), got)
    assert [k.provider for k in again.kernels] == [k.provider for k in model.kernels]


LOADER = """
import sys, numpy as np, kernorch
root = sys.argv[1]
x = np.load(root + "/x.npy")
for case in sys.argv[2:]:
    np.save(f"{root}/{case}.again.npy", kernorch.load(f"{root}/{case}")(x))
"""


def test_round_trip_in_a_new_process_is_bit_identical(saved):
    root = next(iter(saved.values()))[0].parent
    np.save(root / "x.npy", next(iter(saved.values()))[1])
    proc = subprocess.run([sys.executable, "-c", LOADER, str(root), *saved], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for case, (_, _, got, _, _) in saved.items():
        again = np.load(root / f"{case}.again.npy")
        assert again.dtype == got.dtype and np.array_equal(again, got), case
    run = subprocess.run([sys.executable, "-m", "kernorch", "run", str(saved["torch"][0]), "--repeat", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0 and "error" not in run.stderr, run.stderr


def test_trusted_libraries_load_the_saved_code(saved):
    d, x, got, kinds, _ = saved["roofline"]
    assert ("c", None) in kinds
    assert np.array_equal(kernorch.load(d, trust_libraries=True)(x), got)


def test_saved_directory_holds_json_safetensors_and_hashed_blobs(saved):
    d = saved["ort"][0]
    m = json.loads((d / "model.json").read_text())
    assert m["format"] == "kernorch-model" and m["version"] == kernorch.runtime.saved.VERSION
    assert sorted(p.name for p in d.iterdir()) == ["blobs", "model.json", "weights.safetensors"]
    exts = {p.suffix for p in (d / "blobs").iterdir()}
    assert ".onnx" in exts, exts
    import hashlib

    for p in (d / "blobs").iterdir():
        assert p.stem == hashlib.sha256(p.read_bytes()).hexdigest()


LOAD_ONE = """
import sys, numpy as np, kernorch
np.save(sys.argv[2], kernorch.load(sys.argv[1])(np.load(sys.argv[3])))
"""


def test_cuda_model_round_trips_in_a_new_process(tmp_path):
    """Target "cuda" (Triton's interpreter without a GPU): Triton kernels are lowered again from
    their prims with their tile size; torch linear and reference kernels rebuilt."""
    pytest.importorskip("triton")
    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and TRITON_INTERPRET is not set")
    net, x = net_and_input()
    model = kernorch.compile(net, x, target="cuda", cost="model", progress=False)
    got = model(x.numpy())
    assert np.abs(got - net(x).detach().numpy()).max() <= 1e-4
    d = model.save(tmp_path / "saved")
    kinds = {k["kind"] for k in json.loads((d / "model.json").read_text())["kernels"]}
    assert {"triton", "linear", "reference"} <= kinds, kinds
    np.save(tmp_path / "x.npy", x.numpy())
    proc = subprocess.run([sys.executable, "-c", LOAD_ONE, str(d), str(tmp_path / "again.npy"),
                           str(tmp_path / "x.npy")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = np.load(tmp_path / "again.npy")
    if torch.cuda.is_available():  # same kernels; cuDNN may pick another algorithm
        assert np.abs(again - got).max() <= 1e-6
    else:
        assert np.array_equal(again, got)


@pytest.mark.slow
def test_candy_round_trips_in_a_new_process(tmp_path):
    """A real model (fast-neural-style candy, 64x64): dozens of kernels, weights of megabytes."""
    import onnxruntime as ort

    from bench.export import export_onnx

    path = export_onnx("candy", "torchscript", size=64, cache_dir=tmp_path / "onnx", verbose=False)
    model = kernorch.compile(path, cost="model", threads=2, progress=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    got = model(x)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert np.abs(got - want).max() <= 1e-3 * max(1.0, float(np.abs(want).max()))
    d = model.save(tmp_path / "saved")
    weights = (d / "weights.safetensors").stat().st_size
    blobs = sum(p.stat().st_size for p in (d / "blobs").iterdir() if p.suffix not in (".c", ".so"))  # not generated code
    sources = [p for p in (d / "blobs").iterdir() if p.suffix == ".c"]
    assert sources and max(p.stat().st_size for p in sources) < 0.1 * weights  # kernels read weights, never embed them
    assert blobs < 0.1 * weights, "provider kernels' ONNX models should not hold a second copy of the weights"
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", LOAD_ONE, str(d), str(tmp_path / "again.npy"),
                           str(tmp_path / "x.npy")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "again.npy"), got)


def test_packed_weights_round_trip(tmp_path):
    """Generated kernels that read a constant from a copy packed once (a depthwise weight read
    channels-last) save the packing with the kernel; both loaders rebuild it."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.ReLU()).eval()
    x = torch.randn(1, 16, 9, 9)
    model = kernorch.compile(net, x, cost="model", regions=False, providers=(), threads=2, progress=False,
                             db=tmp_path / "db.sqlite")
    assert any(getattr(k, "spec", None) is not None and k.spec.packs for k in model.executable.kernels)
    got = model(x.numpy())
    assert np.abs(got - net(x).detach().numpy()).max() <= 1e-5
    d = model.save(tmp_path / "packed")
    record = json.loads((d / "model.json").read_text())
    assert any(k.get("packs") for k in record["kernels"])
    assert np.array_equal(kernorch.load(d)(x.numpy()), got)
    assert np.array_equal(kernorch.load(d, trust_libraries=True)(x.numpy()), got)


@pytest.mark.parametrize("winograd", [True, False])
def test_winograd_weights_round_trip(tmp_path, winograd):
    """A Winograd convolution reads its weight transformed once (codegen/winograd.py): the
    transform is saved with the kernel and both loaders rebuild it. Compiled with Winograd off
    (CodegenOptions), the kernels record it and loading generates the direct GEMM again."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)

    class ChannelsLast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(16, 24, 3, padding=1)

        def forward(self, x):  # an NHWC image: the convolution reads its channels in place
            return torch.relu(self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))

    net, x = ChannelsLast().eval(), torch.randn(1, 10, 26, 16)
    model = kernorch.compile(net, x, cost="model", regions=False, providers=(), threads=2, progress=False,
                             db=tmp_path / "db.sqlite", codegen=kernorch.CodegenOptions(winograd=winograd))
    assert any(getattr(k, "source", "").count("kn_wino_tile(") > 1 for k in model.executable.kernels) == winograd
    got = model(x.numpy())
    assert np.abs(got - net(x).detach().numpy()).max() <= 1e-4
    d = model.save(tmp_path / "winograd")
    record = json.loads((d / "model.json").read_text())
    assert any(p[3] == "winograd63" for k in record["kernels"] for p in k.get("packs", [])) == winograd
    assert all(k.get("codegen") == ({} if winograd else {"winograd": False}) for k in record["kernels"]
               if k["kind"] == "c")
    assert np.array_equal(kernorch.load(d)(x.numpy()), got)
    assert np.array_equal(kernorch.load(d, trust_libraries=True)(x.numpy()), got)
