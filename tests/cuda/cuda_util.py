"""Helpers for the target "cuda" tests: run a kernel on the target device, compare with the
reference interpreter."""

from __future__ import annotations

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
