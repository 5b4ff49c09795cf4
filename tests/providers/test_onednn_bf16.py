"""bfloat16 linear kernels: the torch provider's oneDNN steps on a ``precision="bf16"`` graph
(rewrite/precision.py: bf16 operands, float32 accumulation, a rounded result widened by a cast)
against the float32-arithmetic reference interpreter, with the bf16 tolerance: every convolution
and matmul class and epilogue of the f32 variant's tests, in both layouts. The steps really
compute in bf16 (they fail the float32 tolerance), store bf16 where the graph rounds, and a compile
reports its accuracy, matches onnxruntime within bf16 rounding and saves and loads."""

import numpy as np
import pytest
import torch

import kernorch
from kernorch.codegen import amx, isa
from kernorch.errors import KernorchError
from kernorch.ir import oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.providers import TorchProvider, verify
from kernorch.rewrite.layouts import channels_last_pairs
from kernorch.rewrite.precision import bf16_storage
from kernorch.ir.tensors import to_torch
from tests.runtime.saved_net import favour
from tests.providers.test_onednn import CONVS, EPILOGUES, _conv_graph, _matmul_graph, _sides

needs_bf16 = pytest.mark.skipif(not isa.host().bf16, reason="this CPU has no bf16 arithmetic (AMX, AVX512-BF16)")


def _verify(g, members, outputs, weight="bf16"):
    prov = TorchProvider("onednn", threads=2)
    assert prov.can_run(g, members, outputs) is True
    kern = prov.build(g, members, outputs)
    assert f"prepacked {weight} weight" in kern.detail, kern.detail
    return kern, verify(kern, g, members, outputs)


@needs_bf16
@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_conv_epilogues_in_both_layouts(name, epilogue):
    """Dense convolutions compute in bf16; grouped ones stay float32 (precision.py), in one step."""
    g, _ = channels_last_pairs(bf16_storage(_conv_graph(name, epilogue, conv_bias=name != "1x1_odd"))[0])
    for side, (members, outputs) in _sides(g).items():
        _, (ok, err, detail) = _verify(g, members, outputs, "bf16" if CONVS[name][5] == 1 else "f32")
        assert ok, f"{side}: {detail}"


@needs_bf16
@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "sigmoid", "residual", "sub", "affine"])
@pytest.mark.parametrize("batched", [False, True])
def test_matmul_epilogues(epilogue, batched):
    g, _ = bf16_storage(_matmul_graph(epilogue, batched))
    _, (ok, _, detail) = _verify(g, [p.output for p in g.prims], list(g.outputs))
    assert ok, detail


@needs_bf16
def test_bf16_steps_store_bf16_and_fail_the_f32_tolerance():
    """A kernel ending at the graph's rounding cast hands oneDNN's bf16 result on as it is (no
    widening and rounding passes); its arithmetic is bf16: the error is above float32's tolerance."""
    g, _ = bf16_storage(_conv_graph("3x3", "relu", conv_bias=True))
    relu = next(p for p in g.prims if p.op is Op.RELU)
    b = Builder(g)
    g.outputs = [b.cast(relu.output, "bfloat16")]
    members = [p.output for p in g.prims]
    kern, (ok, err, detail) = _verify(g, members, list(g.outputs))
    assert ok, detail
    assert "relu fused" in kern.detail
    feeds = oracle.random_feeds(g, kern.inputs)
    [out] = kern.run([to_torch(feeds[v]) for v in kern.inputs])
    assert out.dtype == torch.bfloat16
    assert err > oracle.rel_tolerance("float32")


def test_precision_errors_are_one_line(monkeypatch):
    with pytest.raises(KernorchError, match=r"^unknown precision 'fp8'; choose one of f32, bf16, int8$"):
        kernorch.compile(_Net(), (torch.randn(1, 8, 8, 8),), precision="fp8", progress=False)
    with pytest.raises(KernorchError, match="^accuracy_budget=2.0: expected a relative error between 0 and 1$"):
        kernorch.compile(_Net(), (torch.randn(1, 8, 8, 8),), precision="bf16", accuracy_budget=2.0, progress=False)
    monkeypatch.setattr(isa, "host", lambda: isa.from_flags({"avx2", "fma", "sse4_2"}))
    with pytest.raises(KernorchError, match=r"^precision='bf16' needs a CPU with bf16 arithmetic .* has avx2$"):
        kernorch.compile(_Net(), (torch.randn(1, 8, 8, 8),), precision="bf16", progress=False)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 32, 3, padding=1)
        self.c2 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y) + y)
        return self.fc(y.mean(dim=(2, 3)))


@needs_bf16
def test_bf16_compile_reports_accuracy_matches_onnxruntime_and_saves(tmp_path, monkeypatch):
    """Every linear prim of the plan computes in bf16 (the oneDNN steps favoured: on this small
    net other kernels may time faster, which would leave the steps unchecked)."""
    import onnxruntime as ort

    favour(monkeypatch, "torch_onednn")
    # every dense linear prim in bf16: which ones bf16_choice measures faster on a net this small
    # depends on the machine's timing, and the count below must not
    monkeypatch.setattr("kernorch.runtime.compile.bf16_faster", lambda g, threads: None)
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(2, 8, 24, 24)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"], output_names=["logits"])
    m = kernorch.compile(str(path), threads=2, regions=False, progress=False, db=tmp_path / "db.sqlite",
                         precision="bf16", providers=("torch_onednn",))
    assert any(i.provider == "torch_onednn" for i in m.executable.infos)
    assert m.report.rewrites["bf16_storage"] >= 3  # two convolutions and the classifier's matmul
    [acc] = m.report.accuracy
    assert acc["output"] == "logits" and 0 < acc["max_rel_err"] < 1e-2 and acc["cosine"] > 0.999
    assert acc["top1"] is not None and "accuracy  bf16 vs float32 reference, logits: max rel err" in m.summary()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    got = m(x.numpy())
    assert oracle.compare(got, want, rel=oracle.rel_tolerance("bfloat16"))[0]
    assert not oracle.compare(got, want)[0]  # not float32-exact: the bf16 kernels ran
    loaded = kernorch.load(m.save(tmp_path / "saved"))
    assert [i.provider for i in loaded.executable.infos] == [i.provider for i in m.executable.infos]
    np.testing.assert_array_equal(loaded(x.numpy()), got)
    assert loaded.report.accuracy == m.report.accuracy


@needs_bf16
def test_openvino_bf16_regions_join_a_bf16_compile(tmp_path, monkeypatch):
    """With regions on, precision="bf16" also lets OpenVINO compute its regions in bf16 (its default
    on such CPUs), judged by the same budget, saved and loaded like the float32 ones."""
    pytest.importorskip("openvino")
    import onnxruntime as ort

    favour(monkeypatch, "openvino_bf16")
    # as on a CPU without AMX: with generated AMX tiles every product is bf16 in the graph, and a region
    # holding bf16 prims is not exported to OpenVINO (only the whole original model would run there)
    monkeypatch.setattr(amx, "available", lambda: False)
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(2, 8, 24, 24)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"], output_names=["logits"])
    m = kernorch.compile(str(path), threads=2, progress=False, db=tmp_path / "db.sqlite", precision="bf16",
                         providers=("openvino",))
    assert {i.provider for i in m.executable.infos} & {"openvino_bf16"}, [i.provider for i in m.executable.infos]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    got = m(x.numpy())
    assert oracle.compare(got, want, rel=oracle.rel_tolerance("bfloat16"))[0]
    assert m.report.accuracy and m.report.accuracy[0]["cosine"] > 0.999
    loaded = kernorch.load(m.save(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded(x.numpy()), got)
