"""Issue 14: a plan holding a kernel of every provider (generated C, PyTorch, its fused oneDNN
variant, onnxruntime, OpenVINO), with and without provider regions, on candy and on a ResNet, saved
here and loaded in a new process, gives bit-identical outputs (and saves the same files again).
The plans are steered by rule, not by timing (steered_plan.py), so every provider is in them on
any machine."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import kernorch
from kernorch.runtime.saved import SavedModelError
from steered_plan import EVERY, prepared_graph, providers_of, steered_model

ROOT = Path(__file__).resolve().parents[2]


class Block(torch.nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions with batch norm, a residual add, relu."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(cout)
        self.c2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(torch.nn.Module):
    """A ResNet-18 in miniature: stem, max pool, two basic blocks (one downsampling), pool, fc."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        self.blocks = torch.nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def resnet() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    net = ResNet()
    for m in net.modules():  # batch norms that are not the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return net.eval(), torch.randn(1, 3, 32, 32)


def candy() -> tuple[torch.nn.Module, torch.Tensor]:
    from bench.models import build_model

    net, (x,) = build_model("candy", size="small", depth=1)
    return net.eval(), x


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (directory, input, in-process output, in-process model, its region kernels)."""
    root = tmp_path_factory.mktemp("every")
    out = {}
    for name, make in (("candy", candy), ("resnet", resnet)):
        net, x = make()
        with torch.no_grad():
            want = net(x).numpy()
        g = prepared_graph(net, (x,))
        for regions in (False, True):
            case = f"{name}-{'regions' if regions else 'kernels'}"
            model, region_kernels = steered_model(g, regions=regions)
            got = model(x.numpy())
            assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), case
            np.save(root / f"{case}.x.npy", x.numpy())
            out[case] = (model.save(root / case), x.numpy(), got, model, region_kernels)
    return out


def test_every_plan_holds_a_kernel_of_every_provider(saved):
    for case, (d, _, _, model, region_kernels) in saved.items():
        assert set(EVERY) <= providers_of(model), (case, model.summary())
        kinds = {(k["kind"], k.get("provider")) for k in json.loads((d / "model.json").read_text())["kernels"]}
        assert {("c", None)} | {("provider", p) for p in EVERY if p != "c"} <= kinds, (case, kinds)
        infos = model.executable.infos
        if case.endswith("-regions"):  # onnxruntime and OpenVINO serve whole segments, and only those
            assert {infos[k].provider for k in region_kernels} == {"ort", "openvino"}, case
            assert {i.provider for k, i in enumerate(infos) if k not in region_kernels}.isdisjoint({"ort", "openvino"})
        else:
            assert not region_kernels


LOADER = """
import json, sys, numpy as np, kernorch
root = sys.argv[1]
for case in sys.argv[2:]:
    x = np.load(f"{root}/{case}.x.npy")
    for trusted in (True, False):
        model = kernorch.load(f"{root}/{case}", trust_libraries=trusted)
        np.save(f"{root}/{case}.{trusted}.npy", model(x))
    model.save(f"{root}/{case}.again")
    with open(f"{root}/{case}.providers.json", "w") as f:
        json.dump([i.provider for i in model.executable.infos], f)
"""


def test_round_trip_in_a_new_process_is_bit_identical(saved):
    root = next(iter(saved.values()))[0].parent
    proc = subprocess.run([sys.executable, "-c", LOADER, str(root), *saved], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for case, (_, _, got, model, _) in saved.items():
        assert json.loads((root / f"{case}.providers.json").read_text()) == [i.provider for i in model.executable.infos]
        for trusted in (False, True):
            again = np.load(root / f"{case}.{trusted}.npy")
            assert again.dtype == got.dtype and np.array_equal(again, got), (case, trusted)
        first, second = root / case, root / f"{case}.again"  # a loaded model saves the same files
        assert (first / "model.json").read_bytes() == (second / "model.json").read_bytes(), case
        blobs = [sorted(p.name for p in (d / "blobs").iterdir()) for d in (first, second)]
        assert blobs[0] == blobs[1], case


@pytest.mark.parametrize("provider", ["ort", "openvino"])
def test_a_tampered_onnx_model_of_either_runtime_is_one_line(saved, provider, tmp_path):
    """A region's ONNX model replaced by one that reads an external file (its hash made to match):
    refused by each runtime's loader, in one line naming the directory."""
    import hashlib
    import shutil

    import onnx
    from onnx import TensorProto, helper

    d = Path(shutil.copytree(saved["resnet-regions"][0], tmp_path / "model"))
    t = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("float_data")
    t.external_data.add(key="location", value="/etc/passwd")
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [t]))
    data = model.SerializeToString()
    name = f"{hashlib.sha256(data).hexdigest()}.onnx"
    (d / "blobs" / name).write_bytes(data)
    m = json.loads((d / "model.json").read_text())
    rec = next(k for k in m["kernels"] if k.get("provider") == provider)
    rec["state"]["onnx"] = {"@blob": name}
    (d / "model.json").write_text(json.dumps(m))
    assert onnx.load_model_from_string(data).graph.initializer[0].data_location == TensorProto.EXTERNAL
    with pytest.raises(SavedModelError) as e:
        kernorch.load(d)
    assert "\n" not in str(e.value) and str(d) in str(e.value) and "external data" in str(e.value), str(e.value)
