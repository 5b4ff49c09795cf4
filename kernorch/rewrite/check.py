"""Equivalence checking of two graphs with the reference interpreter on random inputs: the
oracle every rewrite answers to (tests, and ``apply_rewrites(check=True)``)."""

from __future__ import annotations

import numpy as np

from kernorch.ir.graph import Graph, index_limits
from kernorch.ir.interp import run


def random_feeds(g: Graph, seed: int = 0) -> dict[int, np.ndarray]:
    """One array per graph input: normal floats, small integers, random booleans."""
    rng = np.random.default_rng(seed)
    limits = index_limits(g)  # gather indices stay in range
    feeds = {}
    for v in g.inputs:
        t = g.types[v]
        kind = np.dtype(t.dtype).kind
        if kind == "f":
            arr = rng.standard_normal(t.shape)
        elif kind == "b":
            arr = rng.random(t.shape) < 0.5
        else:
            n = limits.get(v, 5)
            arr = rng.integers(-min(n, 4), min(n, 5), size=t.shape)
        feeds[v] = np.asarray(arr).astype(t.dtype)
    return feeds


def mismatches(before: Graph, after: Graph, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    """Outputs (by position) on which the two graphs disagree; empty when they agree. Both graphs
    must have the same inputs; NaNs agree with NaNs."""
    feeds = random_feeds(before, seed)
    want = run(before, feeds)
    got = run(after, [feeds[v] for v in before.inputs])
    bad = []
    for k, (a, b) in enumerate(zip(before.outputs, after.outputs)):
        x, y = want[a], got[b]
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"output {k} ({before.name(a)}): {y.dtype}{list(y.shape)}, expected {x.dtype}{list(x.shape)}")
        elif x.dtype.kind in "fc":
            scale = max(1.0, float(np.nanmax(np.abs(x), initial=0.0, where=np.isfinite(x))))
            if not np.allclose(x, y, rtol=rtol, atol=atol * scale, equal_nan=True):
                bad.append(f"output {k} ({before.name(a)}): max abs diff {np.nanmax(np.abs(x - y))}")
        elif not np.array_equal(x, y):
            bad.append(f"output {k} ({before.name(a)}): values differ")
    if len(before.outputs) != len(after.outputs):
        bad.append(f"{len(after.outputs)} outputs, expected {len(before.outputs)}")
    return bad
