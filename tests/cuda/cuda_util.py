"""Helpers for the target "cuda" tests: run a kernel on the target device, compare with the
reference interpreter."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from kernorch.ir import interp


def compare(kernel, g, outputs, fed, rtol=2e-5, atol=2e-5) -> None:
    """Run ``kernel`` on the graph inputs ``fed`` (constants added) and check every output."""
    g.outputs = list(outputs)
    ref = interp.run(g, fed)
    env = dict(zip(g.inputs, fed))
    env.update(g.constants)
    got = kernel.run([env[v] for v in kernel.inputs])
    assert list(kernel.outputs) == list(outputs)
    for v, t in zip(outputs, got):
        r, a = ref[v], t.cpu().numpy()
        assert a.shape == r.shape, (a.shape, r.shape)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(a, r, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, r)


CODEGEN_TESTS = Path(__file__).resolve().parents[1] / "codegen"


def load_codegen_cases(name: str):
    """A tests/codegen module, imported under its own name (its cases are the CUDA tests' cases)."""
    key = f"cuda_cases_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, CODEGEN_TESTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]
