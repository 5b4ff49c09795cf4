"""import_torch against PyTorch itself: the exported-then-imported graph, run by the reference
interpreter, reproduces the module's outputs, with both exporters."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from kernorch.errors import ExportError, KernorchError  # noqa: E402
from kernorch.frontend.reference import run_interpreter  # noqa: E402
from kernorch.frontend.torch_import import export_torch, import_torch  # noqa: E402


class SmallNet(nn.Module):
    """conv + batch norm + relu + max pool + avg pool + linear + softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(8 * 2 * 2, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, image):
        x = self.pool(torch.relu(self.bn(self.conv(image))))
        x = self.drop(torch.flatten(self.avg(x), 1))
        return torch.softmax(self.fc(x), dim=-1)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, a, b):
        return self.lin(a) * b, a - b


def _small_net():
    torch.manual_seed(0)
    m = SmallNet()
    with torch.no_grad():  # non-trivial running stats so batch norm matters
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.2, 0.2)
    return m


def _exporters():
    out = [False]
    try:
        import onnxscript  # noqa: F401
        out.append(True)
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("dynamo", _exporters(), ids=lambda d: "dynamo" if d else "torchscript")
def test_small_cnn_matches_torch(dynamo):
    m = _small_net()
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    g, report = import_torch(m, (x,), dynamo=dynamo)
    assert [g.name(v) for v in g.inputs] == ["image"]   # forward's parameter name
    assert m.training                                   # the user's mode is restored after export
    assert sum(report.op_histogram.values()) > 0
    got = run_interpreter(g, {"image": x.numpy()})
    (out,) = got.values()
    m.eval()
    with torch.no_grad():
        ref = m(x).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dynamo", _exporters(), ids=lambda d: "dynamo" if d else "torchscript")
def test_two_inputs_two_outputs_with_names(dynamo):
    torch.manual_seed(0)
    m = TwoInputs()
    a, b = torch.randn(3, 6), torch.randn(3, 6)
    g, _ = import_torch(m, (a, b), dynamo=dynamo, input_names=["left", "right"], output_names=["prod", "diff"])
    assert [g.name(v) for v in g.inputs] == ["left", "right"]
    got = run_interpreter(g, [a, b])  # torch tensors are accepted as feeds
    with torch.no_grad():
        ref = m(a, b)
    assert list(got) == ["prod", "diff"]
    np.testing.assert_allclose(got["prod"], ref[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["diff"], ref[1].numpy(), rtol=1e-6, atol=1e-7)


def test_single_tensor_example_and_static_shapes():
    proto = export_torch(nn.ReLU(), torch.randn(2, 5))
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 5]
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 17


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom\nsecond line")


def test_a_module_failing_on_its_inputs_is_one_line():
    with pytest.raises(ExportError) as info:
        import_torch(Boom(), torch.randn(2))
    assert str(info.value) == "running Boom on the example inputs failed: RuntimeError: boom"
    assert isinstance(info.value, KernorchError)


class Diff(nn.Module):
    """torch.diff: the TorchScript exporter has no symbolic for aten::diff (recent transformers'
    language models use it in their attention masks); the dynamo exporter decomposes it."""

    def forward(self, x):
        return torch.diff(x, dim=-1) * 2.0


class NoSymbolic(nn.Module):
    """An operator neither exporter can translate (a sparse tensor)."""

    def forward(self, x):
        return (x.to_sparse() * 2.0).to_dense()


@pytest.mark.skipif(True not in _exporters(), reason="onnxscript (the dynamo exporter) is not installed")
def test_torchscript_failure_falls_back_to_the_dynamo_exporter(capfd):
    x = torch.randn(2, 7)
    with pytest.raises(ExportError, match=r"^exporting Diff to ONNX failed: torchscript exporter: .*aten::diff"):
        import_torch(Diff(), x, dynamo=False)
    out, err = capfd.readouterr()
    assert "aten::" not in out + err  # the exporter's graph dump (native code, file descriptor 1) is dropped
    g, report = import_torch(Diff(), x)  # default: TorchScript, then dynamo
    assert report.exporter == "dynamo"
    (y,) = run_interpreter(g, {"x": x.numpy()}).values()
    assert np.abs(y - Diff()(x).numpy()).max() < 1e-6
    assert import_torch(SmallNet(), torch.randn(1, 3, 8, 8))[1].exporter == "torchscript"  # no fallback needed


@pytest.mark.skipif(True not in _exporters(), reason="onnxscript (the dynamo exporter) is not installed")
def test_both_exporters_failing_give_both_reasons_on_one_line():
    with pytest.raises(ExportError) as info:
        import_torch(NoSymbolic(), torch.randn(3, 4))
    msg = str(info.value)
    assert msg.startswith("exporting NoSymbolic to ONNX failed: torchscript exporter: ")
    assert "\n" not in msg and "\x1b" not in msg, msg  # one line, no terminal colours
    assert "; dynamo exporter: " in msg


@pytest.mark.parametrize("module,inputs,msg", [
    (lambda x: x, (torch.zeros(1),), "expected a torch.nn.Module, got function"),
    (nn.ReLU(), (), "example_inputs must be a tensor or a non-empty tuple of tensors"),
    (nn.ReLU(), (np.zeros(2),), "example input 0 is a ndarray, expected a torch.Tensor"),
])
def test_bad_arguments(module, inputs, msg):
    with pytest.raises(ExportError) as info:
        import_torch(module, inputs)
    assert str(info.value) == msg


def test_input_name_count_must_match():
    with pytest.raises(ExportError, match=r"^2 input names given for 1 example inputs$"):
        import_torch(nn.ReLU(), torch.zeros(2), input_names=["a", "b"])
