"""A generated kernel that fails verification is never a silent fallback: the compile names it
(``report.fallbacks``, the summary's ``fallback`` line) and ``strict=True`` raises."""

import numpy as np
import onnxruntime as ort
import pytest

import kernorch
from kernorch.errors import KernorchError
from kernorch.orchestrate import measure

EXAMPLE = "examples/tiny_cnn.onnx"


@pytest.fixture
def wrong_generated_conv(monkeypatch):
    """Generated kernels with a convolution are judged wrong (as a broken code generator's would be); the
    library kernels stand in."""
    real = measure.verify

    def verify(g, kernel, members, reference=None):
        ops = {p.op.value for p in g.prims if p.output in members}
        if getattr(kernel, "provider", "") == "c" and "conv" in ops:
            return False, "output %0: max abs error 1 > tolerance 1e-4 (planted)"
        return real(g, kernel, members, reference)

    monkeypatch.setattr(measure, "verify", verify)


def _feeds():
    return np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)


def test_a_clean_compile_has_no_fallbacks(tmp_path):
    m = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=1, progress=False, regions=False, strict=True)
    assert m.report.fallbacks == [] and "fallback" not in m.summary()


def test_fallbacks_are_named_and_strict_raises(tmp_path, wrong_generated_conv):
    m = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=1, progress=False, regions=False)
    assert m.report.fallbacks and all("verify_failed" in f and "planted" in f for f in m.report.fallbacks)
    assert "fallback  " in m.summary()
    want = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"]).run(None, {"input": _feeds()})[0]
    np.testing.assert_allclose(m(_feeds()), want, rtol=1e-4, atol=1e-5)  # something correct stood in
    with pytest.raises(KernorchError, match=r"^strict: [1-9]\d* generated kernel\(s\) failed .* first: .*planted"):
        kernorch.compile(EXAMPLE, db=tmp_path / "db2.sqlite", threads=1, progress=False, regions=False, strict=True)
