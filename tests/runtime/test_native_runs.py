"""Runs of generated C kernels execute in one native call, bit-identical to the Python loop."""

from pathlib import Path

import numpy as np
import pytest
import torch

import kernorch
from kernorch.runtime.native import NativeRun

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


class Chain(torch.nn.Module):
    """Small elementwise and reduction steps whose intermediate (``h``) is also a graph output
    read by later kernels: the native run must allocate it before any kernel reads it."""

    def forward(self, x, y):
        h = torch.tanh(x) * 2.0 + y
        s = torch.softmax(h, dim=-1)
        return h, torch.relu(s - h.mean(dim=-1, keepdim=True)), (s * y).sum(dim=0)


def _both(model, *args):
    ex = model.executable
    ex.native = False
    loop = model(*args)
    ex.native = True
    native = model(*args)
    return loop, native


@pytest.mark.parametrize("strategy", ["unfused", "greedy", "optimal"])
def test_native_runs_match_the_python_loop_bit_for_bit(strategy, tmp_path):
    x = torch.randn(8, 33)
    y = torch.randn(8, 33)
    model = kernorch.compile(Chain(), (x, y), strategy=strategy, cost="model", providers=(), regions=False,
                             progress=False, db=tmp_path / "db.sqlite")
    runs = [s for s in model.executable._native_program() if isinstance(s, NativeRun)]
    assert runs and sum(r.n for r in runs) == sum(k.provider == "c" for k in model.kernels)
    loop, native = _both(model, x.numpy(), y.numpy())
    for a, b in zip(loop, native):
        assert np.array_equal(a, b)
    want = Chain()(x, y)
    for a, b in zip(native, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_native_runs_between_linear_kernels(tmp_path):
    model = kernorch.compile(EXAMPLE, cost="model", providers=(), regions=False, progress=False,
                             db=tmp_path / "db.sqlite")
    steps = model.executable._native_program()
    assert any(isinstance(s, NativeRun) for s in steps) and any(not isinstance(s, NativeRun) for s in steps)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    loop, native = _both(model, x)
    assert np.array_equal(loop, native)
    again = model(x)  # a second call reuses the argument arrays with fresh output tensors
    assert np.array_equal(again, native) and again is not native


def test_saved_and_loaded_model_runs_natively(tmp_path):
    model = kernorch.compile(EXAMPLE, cost="model", providers=(), regions=False, progress=False,
                             db=tmp_path / "db.sqlite")
    model.save(tmp_path / "m")
    again = kernorch.load(tmp_path / "m")
    assert any(isinstance(s, NativeRun) for s in again.executable._native_program())
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert np.array_equal(again(x), model(x))
