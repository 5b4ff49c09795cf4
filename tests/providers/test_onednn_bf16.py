"""bfloat16 linear kernels (the torch provider's ``onednn_bf16`` and ``onednn_bf16_math`` variants,
``precision="bf16"``) against the float32 reference interpreter, with the bf16 tolerance: every convolution and matmul
class and epilogue of the f32 variant's tests, in both layouts. The same kernels fail the float32
tolerance (they really compute in bf16), an accuracy budget tighter than bf16 rejects them, and a
compile reports its accuracy, matches onnxruntime within bf16 rounding and saves and loads."""

import numpy as np
import pytest
import torch

import kernorch
from kernorch.codegen import isa
from kernorch.errors import KernorchError
from kernorch.ir import oracle
from kernorch.providers import TorchProvider, verify
from kernorch.rewrite.layouts import channels_last_pairs
from tests.runtime.saved_net import favour
from tests.providers.test_onednn import CONVS, EPILOGUES, _conv_graph, _matmul_graph, _sides

# The f32 tests' weights are standard normal, not a trained network's (~N(0, 2/K)): a 3x3 convolution's
# outputs are ~sqrt(72) = 8.5 wide, so bf16's rounding of them (~4e-3 relative) moves a sigmoid after it by
# ~1e-2 of its [0, 1] scale. These class tests judge with a budget of 3e-2; the default (1e-2) is exercised
# by the compile below, on PyTorch-initialized weights.
CLASS_BUDGET = 3e-2
needs_bf16 = pytest.mark.skipif(not isa.host().bf16, reason="this CPU has no bf16 arithmetic (AMX, AVX512-BF16)")


VARIANTS = ["onednn_bf16", "onednn_bf16_math"]


def _verify(g, members, outputs, tolerance=CLASS_BUDGET, variant="onednn_bf16"):
    prov = TorchProvider(variant, threads=2, tolerance=tolerance)
    assert prov.can_run(g, members, outputs) is True
    kern = prov.build(g, members, outputs)  # raises where no step would compute in bf16
    assert ("bf16 weight" if variant == "onednn_bf16" else "f32 (bf16 math) weight") in kern.detail, kern.detail
    return kern, verify(kern, g, members, outputs)


@needs_bf16
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_conv_epilogues_in_both_layouts(name, epilogue, variant):
    g, _ = channels_last_pairs(_conv_graph(name, epilogue, conv_bias=name != "1x1_odd"))
    for side, (members, outputs) in _sides(g).items():
        try:
            kern, (ok, err, detail) = _verify(g, members, outputs, variant=variant)
        except ValueError as e:  # casts: a binary post-op after a grouped convolution has no bf16 step
            assert variant == "onednn_bf16" and CONVS[name][5] > 1
            assert str(e).startswith("no linear step of this kernel computes in bf16")
            assert epilogue not in ("none", "sigmoid")
            continue
        assert ok, f"{side}: {detail}"
        assert kern.rel_tolerance == CLASS_BUDGET


@needs_bf16
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "sigmoid", "residual", "sub", "affine"])
@pytest.mark.parametrize("batched", [False, True])
def test_matmul_epilogues(epilogue, batched, variant):
    g = _matmul_graph(epilogue, batched)
    _, (ok, _, detail) = _verify(g, [p.output for p in g.prims], list(g.outputs), variant=variant)
    assert ok, detail


@needs_bf16
@pytest.mark.parametrize("variant", VARIANTS)
def test_bf16_kernels_fail_the_f32_tolerance_and_a_tight_budget(variant):
    """The arithmetic is bf16 (its error is above float32's tolerance), and ``accuracy_budget`` is
    the tolerance the kernel is judged by: a budget below bf16's rounding rejects it."""
    g = _conv_graph("3x3", "relu", conv_bias=True)
    members, outputs = [p.output for p in g.prims], list(g.outputs)
    _, (ok, err, _) = _verify(g, members, outputs, variant=variant)
    ref_scale = 1.0  # the oracle's tolerance is relative to max(1, max |ref|); bf16 rounding is ~4e-3 of it
    assert ok and err > oracle.rel_tolerance("float32") * ref_scale
    _, (ok, _, detail) = _verify(g, members, outputs, tolerance=1e-6, variant=variant)
    assert not ok and "tolerance" in detail


@needs_bf16
def test_bf16_math_leaves_the_process_in_float32():
    """The implicit variant sets oneDNN's bf16 math around its own calls only: float32 ops after it
    (the other providers', the user's) stay float32-exact."""
    g = _matmul_graph("bias", False)
    kern, (ok, _, _) = _verify(g, [p.output for p in g.prims], list(g.outputs), variant="onednn_bf16_math")
    assert ok
    mk = torch.backends.mkldnn
    assert (mk.conv.fp32_precision, mk.matmul.fp32_precision) != ("bf16", "bf16")
    a, b = torch.randn(64, 256), torch.randn(256, 64)
    np.testing.assert_allclose((a @ b).numpy(), (a.double() @ b.double()).numpy(), rtol=1e-4, atol=1e-4)


def test_bf16_provider_is_only_added_by_precision():
    from kernorch.orchestrate.measure import external_providers

    assert "torch_onednn_bf16" not in {p.name for p in external_providers(2, None)}
    named = {p.name for p in external_providers(2, ("torch_onednn_bf16", "torch_onednn_bf16_math"))}
    assert named == ({"torch_onednn_bf16", "torch_onednn_bf16_math"} if isa.host().bf16 else set())


def test_precision_errors_are_one_line(monkeypatch):
    with pytest.raises(KernorchError, match=r"^unknown precision 'int8' \(int8 is not built yet\); choose one of"):
        kernorch.compile(_Net(), (torch.randn(1, 8, 8, 8),), precision="int8", progress=False)
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
    """The plan takes the bf16 kernels wherever they verify (favoured: on this small net the
    generated float32 GEMMs may time faster, which would leave nothing to check)."""
    import onnxruntime as ort

    favour(monkeypatch, "torch_onednn_bf16")
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(2, 8, 24, 24)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"], output_names=["logits"])
    m = kernorch.compile(str(path), threads=2, regions=False, progress=False, db=tmp_path / "db.sqlite",
                         precision="bf16", providers=())
    assert any(i.provider == "torch_onednn_bf16" for i in m.executable.infos)  # (favoured over the _math one)
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
