"""precision="bf16" with kernorch's own kernels only: the products run on generated AMX tiles
(codegen/amx.py), checked against onnxruntime in float32 at bf16's tolerance, with the accuracy
report, strict (no kernel fell back), saved and loaded. Where the CPU has bf16 but no AMX (AVX512-BF16)
the same plan is built with every product offered to bf16 anyway (as on AMX): the tiles run on
VDPBF16PS. A CPU without bf16 arithmetic refuses precision="bf16", so the test is skipped there."""

import numpy as np
import pytest
import torch

import kernorch
from kernorch.codegen import amx, isa
from kernorch.ir import oracle


class _Net(torch.nn.Module):
    """A 3x3 convolution (windows), a 1x1 (pixel rows) with a residual, and a classifier matmul."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 48, 3, padding=1)
        self.c2 = torch.nn.Conv2d(48, 48, 1)
        self.fc = torch.nn.Linear(48, 40)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y) + y)
        return self.fc(y.mean(dim=(2, 3)))


@pytest.mark.skipif(not isa.host().bf16, reason="precision='bf16' is refused on a CPU without bf16 arithmetic; "
                                             "the tiles' float fallback is tested in test_amx_kernels.py")
def test_bf16_plan_of_own_kernels_runs_products_on_tiles(tmp_path, monkeypatch):
    import onnxruntime as ort

    from bench.fuzz import kernels_reached

    monkeypatch.setattr(amx, "available", lambda: True)
    monkeypatch.setattr(amx, "matrix_units", lambda: True)  # every product in bf16, none timed out of it
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(2, 8, 12, 12)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"], output_names=["logits"])
    m = kernorch.compile(str(path), threads=2, regions=False, providers=(), strict=True, progress=False,
                         db=tmp_path / "db.sqlite", precision="bf16")
    reached = kernels_reached(m)
    assert reached["gemm: amx tiles"] == 3, reached  # every product, none left in float32
    assert reached["gemm: windows copied"] >= 1
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    got = m(x.numpy())
    assert oracle.compare(got, want, rel=oracle.rel_tolerance("bfloat16"))[0]
    assert not oracle.compare(got, want)[0]  # not float32-exact: the bf16 products ran
    [acc] = m.report.accuracy
    assert acc["cosine"] > 0.999 and acc["max_rel_err"] < 1e-2
    loaded = kernorch.load(m.save(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded(x.numpy()), got)

