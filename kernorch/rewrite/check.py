"""Equivalence checking of two graphs with the reference interpreter on random inputs: the
oracle every rewrite answers to (tests, and ``apply_rewrites(check=True)``). Feeds and the
equality rule are the oracle's (``ir.oracle``)."""

from __future__ import annotations

import numpy as np

from kernorch.ir import oracle
from kernorch.ir.graph import Graph
from kernorch.ir.interp import run


def random_feeds(g: Graph, seed: int = 0) -> dict[int, np.ndarray]:
    """One array per graph input, by the oracle's policy."""
    return oracle.random_feeds(g, seed=seed)


def mismatches(before: Graph, after: Graph, seed: int = 0) -> list[str]:
    """Outputs (by position) on which the two graphs disagree; empty when they agree. Both graphs
    must have the same inputs."""
    feeds = random_feeds(before, seed)
    want = run(before, feeds)
    got = run(after, [feeds[v] for v in before.inputs])
    bad = []
    for k, (a, b) in enumerate(zip(before.outputs, after.outputs)):
        ok, _, detail = oracle.check([a], [got[b]], want)
        if not ok:
            bad.append(f"output {k} ({before.name(a)}): {detail.partition(': ')[2]}")
    if len(before.outputs) != len(after.outputs):
        bad.append(f"{len(after.outputs)} outputs, expected {len(before.outputs)}")
    return bad
